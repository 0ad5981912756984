"""The scale-out scenario of docs/RELIABILITY.md, short form, so that it cannot go stale again:
two web processes and two inference workers (the embedded model) on one private Redis, clients
as distinct people, more of them than one worker's sequences, one worker killed mid-load.
`bench.reliability` starts and checks everything itself; this runs it and reads its verdict."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import needs

pytestmark = [pytest.mark.model, pytest.mark.redis]

REPO = Path(__file__).resolve().parents[2]


def local_postgres_with_pgvector() -> bool:
    """bench.reliability makes its database with `createdb` on 127.0.0.1:5432 as postgres, and
    knowledge's migrations need pgvector there: otherwise the run is on SQLite."""
    if shutil.which("createdb") is None:
        return False
    return needs.postgres_problem(**needs.LOCAL_POSTGRES) is None


def test_two_workers_share_the_load_and_the_survivor_serves_the_rest_when_one_is_killed(
    embedded_model,
):
    if shutil.which("redis-server") is None:
        needs.missing("redis-server is not installed: sudo apt-get install redis-server")
    database = [] if local_postgres_with_pgvector() else ["--sqlite"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("QASSIST_")}
    env.pop("DATABASE_URL", None)
    done = subprocess.run(  # noqa: S603 (this interpreter, fixed arguments)
        [sys.executable, "-m", "bench.reliability", "scale-out", "--clients", "10",
         "--requests", "2", "--max-tokens", "48", *database],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    verdicts = re.findall(r"^\s+(PASS|FAIL)\s+(.+)$", done.stdout, re.M)
    checks = {name: result for result, name in verdicts}
    assert checks, f"no verdict printed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    failed = [name for name, result in checks.items() if result != "PASS"]
    assert failed == [], f"{failed}\n{done.stdout[-4000:]}"
    assert done.returncode == 0
    assert {
        "the load was above one worker's sequences",
        "both workers ran requests at once before the kill",
        "both workers served requests before the kill",
        "after the kill the other worker served the rest",
        "every request ended in exactly one terminal state",
    } <= set(checks)
