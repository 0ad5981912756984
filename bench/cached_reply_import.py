"""A large cached-reply CSV import, and what logins and a REST completion see meanwhile.

    PYTHONPATH=$PWD .venv/bin/python bench/cached_reply_import.py [--rows 25000]
        [--existing 0] [--update] [--timeout 900]

On a scratch SQLite database (the embedded default, where one writer at a time holds the whole
file): daphne serves the site; the import runs in a process of its own as the Celery worker runs
it (`manage.py shell`), or, on a tree without background imports, as the admin's request ran it;
meanwhile this script logs in through the login form (which writes a session and the last login)
and asks a REST completion (answered from a cached reply: it stores the conversation and the
usage, no model needed) every half second. Prints the import's time and, for each probe, how
many answered with which status and their latency p50 / max, before and during the import.

The rows are a tenant's questions (each with two alternative phrasings, one Chinese) and
answers of about 300 characters; `--existing` replies are in the table before the import (with
`--update`, the file's own questions, so that every row updates one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx

from bench.run import PYTHON, ROOT, free_port, process

PASSWORD = "bench-password-1"  # noqa: S105  # a scratch database's only account
PROBE_EVERY = 0.5

SEED = """
from django.contrib.auth.models import User
from chat.models import CachedReply
from tenants.models import Membership
from tenants.services import api_key_create, tenant_create
t = tenant_create(slug='bench', name='Bench')
User.objects.create_superuser('admin', 'admin@example.com', {password!r})
u = User.objects.create_user('member', 'member@example.com', {password!r})
Membership.objects.create(user=u, tenant=t)
CachedReply.objects.create(tenant=t, question='ping?', answer='pong')
from chat.question_keys import normalize_question
questions = [
    (f'How do I request equipment for project {{i}}?' if {update} else f'Existing question {{i}}?')
    for i in range({existing})
]
CachedReply.objects.bulk_create(
    CachedReply(tenant=t, question=q, normalized_key=normalize_question(q), answer='Old answer.')
    for q in questions
)
_, raw = api_key_create(tenant=t, name='bench')
print(raw)
"""

IMPORT = """
import json, time
from pathlib import Path
from django.contrib.auth.models import User
try:
    from chat import cached_reply_csv as cr
except ImportError:  # a tree from before the CSV code had a module of its own
    from chat import cached_replies as cr
text = Path({path!r}).read_text(encoding='utf-8')
admin = User.objects.get(username='admin')
started = time.perf_counter()
if hasattr(cr, 'cached_reply_import_create'):  # the background import, as its task runs it
    job = cr.cached_reply_import_create(text=text, user=admin, file_name='bench.csv')
    cr.cached_reply_import_run(import_id=job.pk)
    job.refresh_from_db()
    outcome = {{'status': job.status, 'created': job.created, 'updated': job.updated,
               'errors': job.errors[:3]}}
else:  # the admin's request ran this, in one transaction
    result = cr.cached_replies_import(text=text, tenants=None, user=admin)
    outcome = {{'status': 'done', 'created': result.created, 'updated': result.updated}}
outcome['seconds'] = time.perf_counter() - started
print(json.dumps(outcome))
"""


def env_for(workdir: Path) -> dict[str, str]:
    for folder in ("queue", "processed"):  # the filesystem broker's, as `make run` makes them
        (workdir / "celery" / folder).mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QASSIST_")}
    env.pop("REDIS_URL", None)
    env.pop("DATABASE_URL", None)
    env.update(
        {
            "QASSIST_VAR_DIR": str(workdir),
            "QASSIST_PRELOAD_ENGINE": "0",
            "QASSIST_GENERATE_TITLES": "0",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "SECRET_KEY": uuid.uuid4().hex * 2,
            "LOG_LEVEL": "WARNING",
        }
    )
    return env


def manage(env: dict[str, str], *args: str, timeout: float | None = None) -> str:
    done = subprocess.run(
        [PYTHON, "manage.py", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {args[0]} failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def write_csv(path: Path, rows: int) -> None:
    import csv

    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["tenant", "question", "alternatives", "answer", "enabled"])
        for i in range(rows):
            writer.writerow(
                [
                    "bench",
                    f"How do I request equipment for project {i}?",
                    f"equipment for project {i}\n项目 {i} 的设备怎么申请？",
                    f"Open the service desk and choose 'Equipment'; name project {i}. " * 4,
                    "true",
                ]
            )


class Probes:
    """Logins and REST completions every PROBE_EVERY seconds, on a thread, tagged by phase."""

    def __init__(self, base: str, key: str) -> None:
        self.base = base
        self.key = key
        self.phase = "before"
        self.results: list[tuple[str, str, int, float]] = []  # phase, probe, status, seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, probe in (("login", self._login), ("completion", self._completion)):
                phase = self.phase
                started = time.perf_counter()
                try:
                    status = probe()
                except httpx.HTTPError:
                    status = 0  # no answer within the timeout
                self.results.append((phase, name, status, time.perf_counter() - started))
            self._stop.wait(PROBE_EVERY)

    def _login(self) -> int:
        with httpx.Client(base_url=self.base, timeout=60) as client:
            client.get("/accounts/login/")
            response = client.post(
                "/accounts/login/",
                data={
                    "username": "member",
                    "password": PASSWORD,
                    "csrfmiddlewaretoken": client.cookies["csrftoken"],
                },
            )
            return response.status_code

    def _completion(self) -> int:
        response = httpx.post(
            f"{self.base}/v1/chat/completions",
            headers={"Authorization": f"Bearer {self.key}"},
            json={"model": "smollm2-135m", "messages": [{"role": "user", "content": "ping?"}]},
            timeout=60,
        )
        return response.status_code

    def report(self) -> None:
        for phase in ("before", "during"):
            for name in ("login", "completion"):
                rows = [r for r in self.results if r[0] == phase and r[1] == name]
                if not rows:
                    continue
                statuses = Counter(r[2] for r in rows)
                seconds = [r[3] for r in rows]
                print(
                    f"| {phase} | {name} | {len(rows)} | "
                    f"{', '.join(f'{s}: {n}' for s, n in sorted(statuses.items()))} | "
                    f"{statistics.median(seconds) * 1000:.0f} | {max(seconds) * 1000:.0f} |",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=25_000)
    parser.add_argument("--existing", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--update",
        action="store_true",
        help="the existing replies have the file's questions: every row updates one",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qassist-bench-import-") as tmp:
        workdir = Path(tmp)
        env = env_for(workdir)
        manage(env, "migrate", "--noinput", "-v", "0")
        seed = SEED.format(password=PASSWORD, existing=args.existing, update=args.update)
        key = manage(env, "shell", "-c", seed)
        csv_path = workdir / "import.csv"
        write_csv(csv_path, args.rows)
        size_mb = csv_path.stat().st_size / 2**20
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        daphne = [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
        with process([*daphne, "qassist.asgi:application"], env, workdir / "daphne.log"):
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.get(f"{base}/accounts/login/", timeout=2)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.3)
            probes = Probes(base, key)
            probes.start()
            time.sleep(5)  # the site at rest
            probes.phase = "during"
            try:
                line = manage(
                    env, "shell", "-c", IMPORT.format(path=str(csv_path)), timeout=args.timeout
                )
                outcome = json.loads(line)
            except subprocess.TimeoutExpired:
                outcome = {"status": f"not finished within {args.timeout:.0f} s"}
            probes.stop()
        print(
            f"rows: {args.rows} ({size_mb:.1f} MB), existing replies: {args.existing}"
            + (" (the file's questions: every row an update)" if args.update else "")
        )
        print(f"import: {json.dumps(outcome)}")
        print("| phase | probe | answered | statuses | p50 ms | max ms |")
        print("|---|---|---|---|---|---|")
        probes.report()


if __name__ == "__main__":
    main()
