"""A large cached-reply import does not stop the service: logging in and a REST completion are
answered while it runs. With SQLite (the embedded default) one writer at a time holds the whole
database, so an import that kept one transaction open made logins wait out the 20 s busy
timeout and answer 503, and completions 500."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.db import close_old_connections
from django.test import Client

from chat import cached_reply_csv
from chat.models import CachedReply
from chat.question_keys import normalize_question
from tenants.models import ApiKey, Tenant
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = 1_200
# The import stops at its N-th question normalisation: the 1,000th comes while rows are being
# checked (each row's question, and each reply indexed), the 3,000th while they are written
# (each written reply's key, computed between two write transactions).
PAUSES = {"while_checking": 1_000, "while_writing": 3_000}


def big_file() -> str:
    lines = ["tenant,question,alternatives,answer"]
    lines += [f'acme,Question {i}?,"q {i}\n问题 {i}",Answer {i}.' for i in range(ROWS)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("when", PAUSES)
def test_logins_and_a_completion_are_answered_while_a_large_import_runs(
    when: str,
    tenant: Tenant,
    member: Any,
    api_key: tuple[ApiKey, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    CachedReply.objects.create(tenant=tenant, question="ping?", answer="pong")
    paused, resume = threading.Event(), threading.Event()
    calls = [0]

    def normalize_and_pause(text: str) -> str:
        # Every version of the import normalises each row's question while it works through
        # the file: here it stops halfway, for as long as the test probes the site.
        if threading.current_thread().name == "import":
            calls[0] += 1
            if calls[0] == PAUSES[when]:
                paused.set()
                resume.wait(60)
        return normalize_question(text)

    monkeypatch.setattr(cached_reply_csv, "normalize_question", normalize_and_pause)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = cached_reply_csv.cached_replies_import(
                text=big_file(), tenants=None, user=None
            )
        except Exception as exc:  # reported by the assertion below
            outcome["error"] = exc
        finally:
            close_old_connections()

    importer = threading.Thread(target=run, name="import")
    importer.start()
    try:
        assert paused.wait(60), f"the import never got halfway: {outcome}"

        login = Client().post("/accounts/login/", {"username": "member", "password": PASSWORD})
        completion = Client().post(
            "/v1/chat/completions",
            json.dumps(
                {"model": "smollm2-135m", "messages": [{"role": "user", "content": "ping?"}]}
            ),
            content_type="application/json",
            headers={"Authorization": f"Bearer {api_key[1]}"},
        )
    finally:
        resume.set()
        importer.join(120)

    assert login.status_code == 302  # was 503 "database is locked" after 20 s
    assert completion.status_code == 200, completion.content[:300]  # was 500
    assert completion.json()["choices"][0]["message"]["content"] == "pong"
    assert "error" not in outcome, outcome
    assert outcome["result"].created == ROWS
    assert CachedReply.objects.count() == ROWS + 1
