"""Synced sources (issue #30): how fast a folder reaches "ready", what re-syncs cost, a crawl
within its politeness settings, and a chat turn's first token while a sync runs.

    python -m bench.sources                                 # small: 100 files, 5 MB, 50 pages
    python -m bench.sources --docs 2000 --mb 100 --pages 500   # the issue's targets
    python -m bench.sources --ttft-url http://127.0.0.1:8000 --ttft-key KEY   # + TTFT

A fresh SQLite database and folder in a temporary directory; the product's own pipeline
(sources.sync slices, knowledge.ingest with the default embedder, USE multilingual v3),
run in this process one task after the other as the Celery worker (`--pool solo`) runs them.

1. A folder of `--docs` files, mixed formats (Markdown, text, HTML, Word, PDF), `--mb` MB in
   all: each file holds about `--text-kb` KB of text (a policy handbook's sentences, shuffled,
   so parsing, chunking and embedding see real prose), and the Word and PDF files carry the
   rest of the bytes as embedded binary parts, as office files' images and fonts do: the
   first sync, to every document ready.
2. A re-sync with nothing changed: its time, and the bytes it read (the target: none).
3. A re-sync with 10 files changed: to those documents ready again.
4. A local intranet of `--pages` pages served by http.server on 127.0.0.1, crawled with the
   source's delay and concurrency; the server's log checks the gaps between requests and the
   requests in flight.
5. With --ttft-url and --ttft-key (a running qassist whose tenant has documents): the time to
   first token of `--ttft-turns` chat completions, idle and then while this process syncs (the
   sync competes for the same two cores the worker uses); the target is within 1.3x idle.

Timings on a shared machine are noisy: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import http.server
import io
import itertools
import json
import os
import random
import statistics
import tempfile
import threading
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

from bench.rag_eval.__main__ import DATA

FORMATS = ("md", "txt", "html", "docx", "pdf")


def setup(database_url: str, var: Path, folder_root: Path) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "qassist.settings"
    os.environ["QASSIST_VAR_DIR"] = str(var)
    os.environ["DATABASE_URL"] = database_url
    os.environ["REDIS_URL"] = ""
    os.environ["QASSIST_SOURCE_FOLDERS"] = str(folder_root)
    os.environ["QASSIST_KNOWLEDGE_STORAGE_MB"] = "100000"
    os.environ.setdefault("QASSIST_PRELOAD_ENGINE", "0")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import knowledge.tasks
    import sources.tasks

    # Tasks run here, in order, as the solo Celery worker takes them: recorded, then run.
    knowledge.tasks.index_dispatch = lambda *, document_id, version: QUEUE.append(
        ("index", (document_id, version))
    )
    sources.tasks.sync_dispatch = lambda *, run_id: QUEUE.append(("sync", run_id))


QUEUE: list[tuple[str, Any]] = []


def drain() -> dict[str, float]:
    """Run what was queued, in order, until nothing is: sync slices and indexing."""
    from knowledge import ingest
    from sources import sync

    spent = {"sync": 0.0, "index": 0.0}
    while QUEUE:
        kind, args = QUEUE.pop(0)
        started = time.monotonic()
        if kind == "sync":
            sync.run_slice(run_id=args)
        else:
            ingest.document_index(document_id=args[0], version=args[1])
        spent[kind] += time.monotonic() - started
    return spent


def sentences() -> list[str]:
    out = []
    for path in sorted((DATA / "acme").glob("*.md")):
        for line in path.read_text().splitlines():
            line = line.strip(" #*-")
            if len(line) > 40:
                out.append(line)
    return out


def prose(rng: random.Random, pool: list[str], size: int, n: int) -> tuple[str, str]:
    title = f"Policy {n}: " + " ".join(rng.choice(pool).split()[:5])
    parts: list[tuple[str, str]] = []
    length = 0
    while length < size:
        section = [rng.choice(pool) for _ in range(6)]
        parts.append((f"Section {len(parts) + 1}", " ".join(section)))
        length += sum(len(s) for s in section)
    return title, json.dumps(parts)


def render(kind: str, title: str, sections_json: str, padding: int = 0) -> bytes:
    sections = json.loads(sections_json)
    if kind == "md":
        return (f"# {title}\n\n" + "".join(f"## {h}\n\n{t}\n\n" for h, t in sections)).encode()
    if kind == "txt":
        return (f"{title}\n\n" + "".join(f"{h}\n\n{t}\n\n" for h, t in sections)).encode()
    if kind == "html":
        body = "".join(f"<h2>{h}</h2><p>{t}</p>" for h, t in sections)
        return f"<!doctype html><html><head><title>{title}</title></head><body><h1>{title}</h1>{body}</body></html>".encode()  # noqa: E501
    if kind == "docx":
        import docx

        document = docx.Document()
        document.add_heading(title, 1)
        for heading, text in sections:
            document.add_heading(heading, 2)
            document.add_paragraph(text)
        out = io.BytesIO()
        document.save(out)
        if padding:
            with zipfile.ZipFile(out, "a") as archive:  # a picture's worth of bytes
                archive.writestr("word/media/image1.bin", os.urandom(padding))
        return out.getvalue()
    return pdf(title, [f"{h}. {t}" for h, t in sections], padding)


def pdf(title: str, paragraphs: list[str], padding: int = 0) -> bytes:
    """A small valid PDF (one page per paragraph group), Helvetica text, written by hand."""

    def escape(text: str) -> str:
        return (
            text.encode("latin-1", "replace")
            .decode("latin-1")
            .replace("\\", "\\\\")
            .replace("(", "\\(")
            .replace(")", "\\)")
        )

    lines: list[str] = [title]
    for paragraph in paragraphs:
        words, line = paragraph.split(), ""
        for word in words:
            if len(line) + len(word) > 90:
                lines.append(line)
                line = ""
            line += word + " "
        lines.append(line)
    pages = [lines[i : i + 50] for i in range(0, len(lines), 50)]
    objects: list[bytes] = []
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font = 3 + 2 * len(pages)
    for i, page in enumerate(pages):
        stream = (
            "BT /F1 10 Tf 50 780 Td 12 TL " + " ".join(f"({escape(t)}) '" for t in page) + " ET"
        )
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        data = stream.encode("latin-1")
        objects.append(b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    if padding:  # an image's worth of bytes, in a stream of its own
        blob = os.urandom(padding)
        objects.append(b"<< /Length %d >>\nstream\n" % len(blob) + blob + b"\nendstream")
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    )
    return out.getvalue()


def make_folder(folder: Path, docs: int, mb: float, rng: random.Random, text_kb: float) -> int:
    pool = sentences()
    text = int(text_kb * 1024)
    binary = [n for n in range(docs) if FORMATS[n % len(FORMATS)] in ("docx", "pdf")]
    padding = max(0, int(mb * 1024 * 1024) - docs * text) // max(1, len(binary))
    total = 0
    for n in range(docs):
        kind = FORMATS[n % len(FORMATS)]
        title, body = prose(rng, pool, text, n)
        path = folder / f"team-{n % 20:02d}" / f"policy-{n:05d}.{kind}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(render(kind, title, body, padding if n in binary else 0))
        total += path.stat().st_size
    return total


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def folder_bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from django.db.models import Count

    from knowledge.models import Document
    from sources import services
    from sources.models import Source, SourceRun
    from tenants.services import tenant_create

    rng = random.Random(30)
    folder = root / "share"
    total = make_folder(folder, args.docs, args.mb, rng, args.text_kb)
    tenant = tenant_create(slug="bench", name="Bench")
    source = services.source_save(
        source=Source(
            tenant=tenant,
            name="share",
            kind=Source.Kind.FOLDER,
            location=str(folder),
            max_documents=args.docs + 10,
            max_total_mb=int(args.mb * 3) + 10,
        )
    )
    started = time.monotonic()
    spent = drain()
    first = time.monotonic() - started
    run = SourceRun.objects.filter(source=source).latest("started_at")
    by_status = dict(Document.objects.values_list("status").annotate(n=Count("id")).order_by())
    out: dict[str, Any] = {
        "files": args.docs,
        "bytes": total,
        "first_sync_to_ready_s": round(first, 1),
        "first_sync_walk_and_store_s": round(spent["sync"], 1),
        "first_sync_indexing_s": round(spent["index"], 1),
        "first_run": {k: getattr(run, k) for k in ("added", "failed", "seen")},
        "documents": by_status,
    }
    started = time.monotonic()
    services.source_sync_now(source=source)
    drain()
    run = SourceRun.objects.filter(source=source).latest("started_at")
    out["resync_unchanged_s"] = round(time.monotonic() - started, 2)
    out["resync_unchanged_bytes_read"] = run.bytes_read
    out["resync_unchanged_run"] = {k: getattr(run, k) for k in ("seen", "unchanged", "changed")}
    later = time.time() + 10
    changed = sorted(folder.rglob("*.md"))[:10]
    for path in changed:
        path.write_text(path.read_text() + "\n\nAmended: the cap is now EUR 195.\n")
        os.utime(path, (later, later))
    started = time.monotonic()
    services.source_sync_now(source=source)
    drain()
    run = SourceRun.objects.filter(source=source).latest("started_at")
    out["resync_10_changed_to_ready_s"] = round(time.monotonic() - started, 2)
    out["resync_10_changed_run"] = {
        k: getattr(run, k) for k in ("changed", "unchanged", "bytes_read")
    }
    return out


class Log:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts: list[float] = []
        self.in_flight = 0
        self.most = 0


def site_bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from sources import services
    from sources.models import Source, SourceRun
    from tenants.models import Tenant

    site = root / "site" / "intranet"
    site.mkdir(parents=True)
    pool = sentences()
    rng = random.Random(500)
    per_index = 25
    for n in range(args.pages):
        links = "".join(
            f'<a href="p{(n * 7 + k) % args.pages}.html">related</a> ' for k in range(1, 4)
        )
        body = " ".join(rng.choice(pool) for _ in range(8))
        (site / f"p{n}.html").write_text(
            f"<!doctype html><html><head><title>Page {n}</title></head>"
            f"<body><h1>Page {n}</h1><p>{body}</p>{links}</body></html>"
        )
    index = "".join(f'<a href="p{n}.html">{n}</a> ' for n in range(0, args.pages, per_index))
    (site / "index.html").write_text(
        f"<!doctype html><html><head><title>Intranet</title></head><body>{index}</body></html>"
    )
    log = Log()
    directory = str(root / "site")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, directory=directory, **k)

        def log_message(self, *a: Any) -> None:
            pass

        def do_GET(self) -> None:
            with log.lock:
                log.starts.append(time.monotonic())
                log.in_flight += 1
                log.most = max(log.most, log.in_flight)
            try:
                super().do_GET()
            finally:
                with log.lock:
                    log.in_flight -= 1

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/intranet/index.html"
    tenant = Tenant.objects.get(slug="bench")
    source = services.source_save(
        source=Source(
            tenant=tenant,
            name="intranet",
            kind=Source.Kind.WEBSITE,
            location=url,
            delay_seconds=args.delay,
            concurrency=args.concurrency,
            max_documents=args.pages + 10,
        )
    )
    started = time.monotonic()
    spent = drain()
    run = SourceRun.objects.filter(source=source).latest("started_at")
    gaps = [b - a for a, b in itertools.pairwise(log.starts)]
    out = {
        "pages": args.pages,
        "delay_s": args.delay,
        "concurrency": args.concurrency,
        "crawl_and_index_s": round(time.monotonic() - started, 1),
        "crawl_s": round(spent["sync"], 1),
        "requests": len(log.starts),
        "min_gap_s": round(min(gaps), 3) if gaps else None,
        "mean_gap_s": round(statistics.mean(gaps), 3) if gaps else None,
        "most_in_flight": log.most,
        "run": {k: getattr(run, k) for k in ("added", "failed", "seen")},
    }
    log.starts.clear()
    started = time.monotonic()
    services.source_sync_now(source=source)
    drain()
    run = SourceRun.objects.filter(source=source).latest("started_at")
    out["recrawl_unchanged_s"] = round(time.monotonic() - started, 1)
    out["recrawl_unchanged_bytes_read"] = run.bytes_read
    server.shutdown()
    return out


def served_model(url: str, key: str) -> str:
    """The chat model the server serves (the first of /v1/models)."""
    request = urllib.request.Request(  # noqa: S310 - the bench's own server, http
        f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        return str(json.load(response)["data"][0]["id"])


def ttft(url: str, key: str, question: str, model: str) -> float:
    body = json.dumps(
        {
            "model": model,
            "stream": True,
            "max_tokens": 16,
            "messages": [{"role": "user", "content": question}],
        }
    ).encode()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    request = urllib.request.Request(  # noqa: S310 - the bench's own server, http
        f"{url}/v1/chat/completions", data=body, headers=headers
    )
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=300) as response:  # noqa: S310 - the bench's own server
        for raw in response:
            line = raw.decode().strip()
            if line.startswith("data:") and '"content"' in line:
                return time.monotonic() - started
    return time.monotonic() - started


def ttft_bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    questions = [f"What is the hotel cap per night? ({n})" for n in range(args.ttft_turns)]
    model = served_model(args.ttft_url, args.ttft_key)
    idle = [ttft(args.ttft_url, args.ttft_key, q, model) for q in questions]
    from sources import services
    from sources.models import Source
    from tenants.models import Tenant

    folder = root / "share2"
    make_folder(folder, args.ttft_docs, args.ttft_docs * 0.05, random.Random(7), args.text_kb)
    tenant = Tenant.objects.get(slug="bench")
    services.source_save(source=Source(tenant=tenant, name="during", kind=Source.Kind.FOLDER,
                                       location=str(folder), max_documents=10_000))  # fmt: skip
    worker = threading.Thread(target=drain)
    worker.start()
    during = [ttft(args.ttft_url, args.ttft_key, q + " again", model) for q in questions]
    syncing = worker.is_alive()
    worker.join()
    return {
        "model": model,
        "idle_s": [round(x, 2) for x in idle],
        "during_sync_s": [round(x, 2) for x in during],
        "turns": args.ttft_turns,
        "idle_p50_s": round(statistics.median(idle), 2),
        "during_sync_p50_s": round(statistics.median(during), 2),
        "ratio": round(statistics.median(during) / statistics.median(idle), 2),
        "sync_still_running_at_the_end": syncing,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--mb", type=float, default=5.0)
    parser.add_argument("--text-kb", type=float, default=6.0)
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--ttft-url", default="")
    parser.add_argument("--ttft-key", default="")
    parser.add_argument("--ttft-turns", type=int, default=8)
    parser.add_argument("--ttft-docs", type=int, default=200)
    parser.add_argument("--skip", default="", help="comma-separated: folder, site")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    with tempfile.TemporaryDirectory(prefix="qassist-bench-sources-") as tmp:
        root = Path(tmp)
        setup(f"sqlite:///{root / 'db.sqlite3'}", root / "var", root)
        print(load(), flush=True)
        results: dict[str, Any] = {"load_before": os.getloadavg()}
        if "folder" not in skip:
            results["folder"] = folder_bench(args, root)
            print(json.dumps(results["folder"], indent=2), flush=True)
        else:
            from tenants.services import tenant_create

            tenant_create(slug="bench", name="Bench")
        if "site" not in skip:
            results["site"] = site_bench(args, root)
            print(json.dumps(results["site"], indent=2), flush=True)
        if args.ttft_url and args.ttft_key:
            results["ttft"] = ttft_bench(args, root)
            print(json.dumps(results["ttft"], indent=2), flush=True)
        results["load_after"] = os.getloadavg()
        print(load(), flush=True)
        print(json.dumps(results))


if __name__ == "__main__":
    main()
