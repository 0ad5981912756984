"""Parsing a document in a child process under a hard memory and time limit.

A parser is a C library reading a stranger's file (PDFium, libxml2, zlib): however carefully
the file is checked first (knowledge/parsers/limits.py), what the library does with it is
bounded only from outside. So the indexing pipeline parses each document in a child process
forked for it, whose address space may grow by at most QASSIST_KNOWLEDGE_PARSE_MEMORY_MB beyond
what it inherited (`RLIMIT_AS`) and whose processor time is capped (`RLIMIT_CPU`); the parent
waits at most QASSIST_KNOWLEDGE_PARSE_SECONDS and kills it after that. Whatever the file does,
the Celery worker itself only waits: a 4 MB PDF that once took it to 5.5 GB now ends its child
at the limit, and the document fails with a reason a person can act on.

Forked, not started afresh: a new interpreter importing the parsers' libraries took 0.5-1 s per
document on two busy cores, a fork takes milliseconds and shares the parent's memory until
either writes to it. The parsers' libraries are imported before the fork, so the child never
imports (another thread may hold the import lock at the fork). The child writes the parse as
JSON to a pipe (blocks, title, pages) or the ParseError's message, and leaves with `os._exit`:
nothing of the parent (Django, Celery, open connections) runs in it.
"""

from __future__ import annotations

import faulthandler
import json
import os
import resource
import select
import signal
import time
import traceback
from dataclasses import asdict
from typing import Any

from knowledge import parsers
from knowledge.parsers.base import Block, Parsed, ParseError

PARSED, REFUSED, OUT_OF_MEMORY, FAILED = 0, 2, 3, 4  # the child's exit codes


def parse_isolated(
    data: bytes, kind: str, *, max_pages: int, memory_mb: int, seconds: float
) -> Parsed:
    """Parse `data` as `kind` in a child process that may allocate `memory_mb` and take
    `seconds`; ParseError for the file's own problems and for either limit."""
    _preload(kind)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        code = FAILED
        try:
            code = _child(data, kind, max_pages, memory_mb, seconds, write_end)
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        output, status = _collect(pid, read_end, seconds)
    except BaseException:  # Celery's soft time limit, a shutdown: the child goes too
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(read_end)
    return _outcome(output, status, kind, memory_mb, seconds)


def _preload(kind: str) -> None:
    """The format's library, imported here rather than in the child (see above)."""
    if kind == parsers.PDF:
        import pypdfium2
        import pypdfium2.raw  # noqa: F401
    elif kind == parsers.DOCX:
        import docx
        import docx.opc.exceptions  # noqa: F401
    elif kind == parsers.HTML:
        import lxml.html  # noqa: F401
    elif kind == parsers.MARKDOWN:
        import markdown_it  # noqa: F401
    for module in ("pdf", "docx", "html", "markdown", "text"):
        __import__(f"knowledge.parsers.{module}")


def _collect(pid: int, fd: int, seconds: float) -> tuple[bytes, int | None]:
    """What the child wrote and its wait status; None when it ran out of time (killed)."""
    deadline = time.monotonic() + seconds
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return b"", None
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:  # the child closed its end: it has finished
            break
        chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    return b"".join(chunks), status


def _outcome(
    output: bytes, status: int | None, kind: str, memory_mb: int, seconds: float
) -> Parsed:
    if status is None or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU):
        raise ParseError(
            f"Reading the file took longer than {seconds:g} s; it was stopped. Split the "
            "document, or save it again from its application."
        )
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    if code == PARSED:
        return _parsed(json.loads(output))
    if code == REFUSED:
        raise ParseError(json.loads(output)["error"])
    if code == FAILED:  # a parser's bug: the pipeline logs it as unexpected
        raise RuntimeError(f"the {kind} parser failed: {output.decode('utf-8', 'replace')}")
    # Out of memory: Python's MemoryError, or a C library's abort or crash at the limit.
    raise ParseError(
        f"Reading the file needs more than {memory_mb:,} MB of memory (a decompression bomb, "
        "or a file far larger inside than on disk); it was stopped."
    )


def _parsed(data: dict[str, Any]) -> Parsed:
    blocks = [
        Block(b["text"], tuple(b["headings"]), b["page"], b["heading"]) for b in data["blocks"]
    ]
    return Parsed(blocks=blocks, title=data["title"], pages=data["pages"])


def _child(data: bytes, kind: str, max_pages: int, memory_mb: int, seconds: float, fd: int) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handlers (Celery's)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    faulthandler.disable()  # a C library aborting at the memory limit is the expected end
    held = _address_space()
    if held is not None:
        limit = held + memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    cpu = max(1, int(seconds))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))  # SIGXCPU, then SIGKILL
    try:
        if kind == parsers.PDF:
            from knowledge.parsers.pdf import parse_pdf

            parsed = parse_pdf(data, max_pages=max_pages)
        else:
            parsed = parsers.PARSERS[kind](data)
        reply = json.dumps(
            {"blocks": [asdict(b) for b in parsed.blocks], "title": parsed.title}
            | {"pages": parsed.pages}
        ).encode()
        code = PARSED
    except RecursionError:
        error = {"error": "The file is nested too deeply to read."}
        reply, code = json.dumps(error).encode(), REFUSED
    except ParseError as exc:
        reply, code = json.dumps({"error": str(exc)}).encode(), REFUSED
    except MemoryError:
        return OUT_OF_MEMORY
    except Exception:
        reply, code = traceback.format_exc(limit=-3).encode(), FAILED
    _write_all(fd, reply)
    return code


def _address_space() -> int | None:
    """The bytes of address space this process holds now (inherited from the parent); None
    where /proc does not say (not Linux: then only the time limits hold)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * resource.getpagesize()
    except OSError:
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.close(fd)
