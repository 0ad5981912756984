"""Documents parsed in a child process under hard limits (knowledge/parsers/sandbox.py): what a
file makes its parser do is bounded there, and the indexing process (the Celery worker) only
waits (issue #32: a 4 MB PDF took the worker to 5.5 GB)."""

from __future__ import annotations

import resource
import time
from typing import Any

import pytest
from pytest_django import Settings

from bench.attacks import flate_bomb_pdf
from knowledge import parsers
from knowledge.models import Document
from knowledge.parsers import ParseError, detect, parse
from knowledge.parsers.base import Parsed
from knowledge.parsers.sandbox import parse_isolated
from tenants.models import Tenant
from tests.knowledge.conftest import Upload, corpus_file

ISOLATED: dict[str, Any] = {"max_pages": 2_000, "memory_mb": 512, "seconds": 60.0}


@pytest.mark.parametrize(
    "name",
    [
        "acme/expenses.pdf",
        "acme/leave-policy.docx",
        "acme/it-security.html",
        "acme/travel-policy.md",
        "acme/office-guide-shanghai.txt",
    ],
)
def test_a_document_parses_in_the_child_as_it_does_in_process(name: str) -> None:
    data = corpus_file(name)
    kind = detect(data, name)
    assert parse_isolated(data, kind, **ISOLATED) == parse(data, kind)


def test_the_files_own_problem_comes_back_as_its_reason() -> None:
    with pytest.raises(ParseError, match="damaged"):
        parse_isolated(b"%PDF-1.4\n%garbage\n", "pdf", **ISOLATED)


def test_a_pdf_bomb_under_the_stream_check_is_stopped_at_the_memory_limit() -> None:
    """100 MB expanded passes the stream check (128 MB): PDFium then needs about twice that,
    more than the child may take. The parent process does not grow."""
    data = flate_bomb_pdf(100 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ParseError, match="needs more than 64 MB of memory"):
        parse_isolated(data, "pdf", max_pages=10, memory_mb=64, seconds=60)
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kb < 16 * 1024
    # The same file within a limit that fits it parses.
    assert parse_isolated(data, "pdf", max_pages=10, memory_mb=768, seconds=60).blocks


def test_a_parser_past_its_time_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    def forever(data: bytes) -> Parsed:
        time.sleep(60)
        raise AssertionError("not stopped")

    monkeypatch.setitem(parsers.PARSERS, parsers.TEXT, forever)
    started = time.monotonic()
    with pytest.raises(ParseError, match="longer than 1 s"):
        parse_isolated(b"notes", parsers.TEXT, max_pages=1, memory_mb=64, seconds=1)
    assert time.monotonic() - started < 10


def test_a_parser_out_of_memory_and_a_parsers_bug_are_told_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def greedy(data: bytes) -> Parsed:
        raise MemoryError

    def buggy(data: bytes) -> Parsed:
        raise IndexError("list index out of range")

    monkeypatch.setitem(parsers.PARSERS, parsers.TEXT, greedy)
    with pytest.raises(ParseError, match="more than 64 MB of memory"):
        parse_isolated(b"notes", parsers.TEXT, max_pages=1, memory_mb=64, seconds=10)
    monkeypatch.setitem(parsers.PARSERS, parsers.TEXT, buggy)
    with pytest.raises(RuntimeError, match="IndexError: list index out of range"):
        parse_isolated(b"notes", parsers.TEXT, max_pages=1, memory_mb=64, seconds=10)


@pytest.mark.django_db
def test_an_uploaded_pdf_bomb_fails_with_its_reason_and_the_others_are_indexed(
    tenant: Tenant, upload: Upload, settings: Settings
) -> None:
    settings.QASSIST_KNOWLEDGE_PARSE_MEMORY_MB = 64
    bomb = upload(tenant, "report.pdf", flate_bomb_pdf(100 << 20))
    good = upload(tenant, "expenses.pdf", corpus_file("acme/expenses.pdf"))
    assert bomb.status == Document.Status.FAILED
    assert "needs more than 64 MB of memory" in bomb.error
    assert good.status == Document.Status.READY
