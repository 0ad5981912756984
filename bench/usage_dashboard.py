"""How fast the admin's usage pages render with a million usage records.

    PYTHONPATH=$PWD python bench/usage_dashboard.py --db sqlite
    PYTHONPATH=$PWD python bench/usage_dashboard.py --db postgres [--pg-url postgres://...]

Builds a scratch database (a temporary SQLite file, or a PostgreSQL database created for the run
and dropped after), runs the migrations, bulk-creates --rows UsageRecord rows spread over --days
days up to now (10 tenants, 200 users, 20 API keys; statuses, reasons, cache hits and TTFT drawn
at random), runs the daily roll-up as Celery beat would, then requests each page through the
whole Django stack (middleware, admin, template) as a logged-in superuser and prints the
wall-clock time per page: the deployment page, a tenant's page, a tenant's page narrowed to one
user, and the usage records list. Nothing here touches the project's own database.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

TENANTS = 10
USERS = 200
KEYS = 20
STATUSES = ["ok"] * 90 + ["cancelled"] * 4 + ["error"] * 2 + ["rejected"] * 4
REASONS = {
    "rejected": ["requests_per_minute", "tokens_per_minute", "daily_quota", "concurrent_streams"],
    "error": ["prompt_too_long", "worker_down", "internal"],
}


def setup_django(database_url: str, var_dir: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ["QASSIST_VAR_DIR"] = var_dir
    os.environ["DJANGO_SETTINGS_MODULE"] = "qassist.settings"
    os.environ["QASSIST_PRELOAD_ENGINE"] = "0"
    os.environ.pop("REDIS_URL", None)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def populate(rows: int, days: int, seed: int = 7) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.utils import timezone

    from tenants.models import Membership, UsageRecord
    from tenants.services import api_key_create, tenant_create

    rng = random.Random(seed)
    tenants = [
        tenant_create(slug=f"t{i}", name=f"Tenant {i}", daily_token_quota=5_000_000)
        for i in range(TENANTS)
    ]
    users = []
    for i in range(USERS):
        user = User.objects.create_user(f"user{i}", password=None)
        Membership.objects.create(user=user, tenant=tenants[i % TENANTS])
        users.append(user)
    keys = [api_key_create(tenant=tenants[i % TENANTS], name=f"k{i}")[0] for i in range(KEYS)]
    users_of = {
        t.id: [u for j, u in enumerate(users) if j % TENANTS == i] for i, t in enumerate(tenants)
    }
    keys_of = {
        t.id: [k for j, k in enumerate(keys) if j % TENANTS == i] for i, t in enumerate(tenants)
    }

    now = timezone.now()
    span = days * 86400
    batch: list[UsageRecord] = []
    started = time.perf_counter()
    for n in range(rows):
        tenant = tenants[rng.randrange(TENANTS)]
        status = rng.choice(STATUSES)
        ok = status != "rejected"
        by_key = rng.random() < 0.3
        batch.append(
            UsageRecord(
                tenant=tenant,
                user=None if by_key else rng.choice(users_of[tenant.id]),
                api_key=rng.choice(keys_of[tenant.id]) if by_key else None,
                prompt_tokens=rng.randint(20, 800) if ok else 0,
                completion_tokens=rng.randint(1, 400) if ok else 0,
                cached=ok and rng.random() < 0.1,
                ttft_ms=int(rng.lognormvariate(6.2, 0.8)) if ok else None,
                latency_ms=rng.randint(200, 20000) if ok else None,
                status=status,
                reason=rng.choice(REASONS.get(status, [""])),
                created_at=now - timedelta(seconds=rng.random() * span),
            )
        )
        if len(batch) == 20_000 or n == rows - 1:
            UsageRecord.objects.bulk_create(batch, batch_size=5000)
            batch = []
            print(f"\r  {n + 1:,} rows", end="", flush=True)
    print(f" in {time.perf_counter() - started:.0f} s")
    return {"tenant": tenants[0], "user": users_of[tenants[0].id][0]}


def time_pages(fixtures: dict[str, Any], repeats: int) -> dict[str, list[float]]:
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    admin = User.objects.create_superuser("bench-admin", "b@example.com", "x")
    client = Client(HTTP_HOST="localhost")
    client.force_login(admin)
    tenant = fixtures["tenant"]
    pages = {
        "deployment page, 30 days": (reverse("admin:tenants_usagerecord_dashboard"), {}),
        "deployment page, 90 days": (reverse("admin:tenants_usagerecord_dashboard"), {"days": 90}),
        "tenant page, 30 days": (reverse("admin:tenants_tenant_usage", args=[tenant.pk]), {}),
        "tenant page, one user, 90 days": (
            reverse("admin:tenants_tenant_usage", args=[tenant.pk]),
            {"days": 90, "user": fixtures["user"].pk},
        ),
        "usage records list": (reverse("admin:tenants_usagerecord_changelist"), {}),
    }
    timings: dict[str, list[float]] = {}
    for name, (url, params) in pages.items():
        for _ in range(2):  # warm: template loading, connection, caches
            assert client.get(url, params).status_code == 200
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            response = client.get(url, params)
            samples.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200
        timings[name] = samples
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="qassist-bench-dashboard-")
    pg_name = f"qassist_bench_dashboard_{os.getpid()}"
    if args.db == "sqlite":
        database_url = f"sqlite:///{scratch}/bench.sqlite3"
    else:
        import psycopg

        with psycopg.connect(args.pg_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{pg_name}"')
        database_url = args.pg_url.rsplit("/", 1)[0] + f"/{pg_name}"
    try:
        setup_django(database_url, scratch)
        from django.core.management import call_command
        from django.db import connection

        call_command("migrate", verbosity=0)
        print(f"{args.db}: {args.rows:,} usage records over {args.days} days")
        fixtures = populate(args.rows, args.days)
        from tenants.usage import usage_rollup

        started = time.perf_counter()
        rolled = usage_rollup()
        print(f"  roll-up of {len(rolled)} days: {time.perf_counter() - started:.1f} s")
        if args.db == "postgres":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
        timings = time_pages(fixtures, args.repeats)
        print(f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores")
        print(f"| page ({args.db}, {args.rows:,} rows) | p50 ms | max ms |")
        print("|---|---|---|")
        for name, samples in timings.items():
            print(f"| {name} | {statistics.median(samples):.0f} | {max(samples):.0f} |")
        connection.close()
    finally:
        if args.db == "postgres":
            import psycopg

            with psycopg.connect(args.pg_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
