"""What admission costs a request: authenticate the API key, admit (the tenant read fresh,
the prompt counted with the model's tokenizer, limits and quotas reserved, the cached replies
looked up), then settle. Everything a request pays before and after the engine, nothing else.

    python -m bench.admission [--requests 2000] [--redis redis://127.0.0.1:6379/14]
                              [--database postgres://postgres@127.0.0.1:5432/bench]

Runs on a scratch database (a temporary SQLite file unless --database is given), with the
embedded model's tokenizer, against the in-process limiter and, with --redis, a real Redis.
Prints p50 / p95 / p99 per stage in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return pick(0.5), pick(0.95), pick(0.99)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--redis", default="", help="also measure against this Redis")
    parser.add_argument("--database", default="", help="DATABASE_URL (default: scratch SQLite)")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="qassist-bench-admission-"))
    os.environ["QASSIST_VAR_DIR"] = str(scratch)
    os.environ["DATABASE_URL"] = args.database or f"sqlite:///{scratch / 'bench.sqlite3'}"
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qassist.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)

    import fakeredis
    import redis

    from chat import admission
    from chat.models import CachedReply
    from chat.services.sampling import default_sampling
    from inference.service import get_prompt_counter
    from inference.types import ChatMessage
    from tenants.limits import Limiter, set_limiter
    from tenants.services import Principal, api_key_authenticate, api_key_create, tenant_create

    slug = f"bench-{uuid.uuid4().hex[:6]}"
    tenant = tenant_create(
        slug=slug,
        system_prompt="You are the assistant of the Acme company. " * 12,
        requests_per_minute=10**9,
        tokens_per_minute=10**12,
        max_concurrent_streams=10**6,
        daily_token_quota=10**15,
        monthly_token_quota=10**15,
    )
    for i in range(200):
        CachedReply.objects.create(tenant=tenant, question=f"question number {i}?", answer="a")
    _, raw_key = api_key_create(tenant=tenant, name="bench")
    counter = get_prompt_counter()
    conversation = [
        ChatMessage("system", tenant.system_prompt),
        ChatMessage("user", "How do I connect to the VPN from home, and who do I ask for access?"),
    ]
    print(
        f"prompt: {counter.count(conversation)} tokens; database: "
        f"{django.db.connection.vendor}; {args.requests} requests per backend"
    )

    backends: list[tuple[str, Callable[[], object]]] = [("in-process", fakeredis.FakeRedis)]
    if args.redis:
        backends.append(("redis", lambda: redis.Redis.from_url(args.redis)))
    for name, make in backends:
        set_limiter(Limiter(make(), prefix=f"bench-{uuid.uuid4().hex[:6]}"))
        stages: dict[str, list[float]] = {"authenticate": [], "admit": [], "settle": [], "all": []}
        for i in range(args.requests + 50):
            t0 = time.perf_counter()
            api_key = api_key_authenticate(raw_key=raw_key)
            assert api_key is not None
            t1 = time.perf_counter()
            ticket = admission.admit(
                principal=Principal(tenant=api_key.tenant, api_key=api_key),
                conversation=conversation,
                params=default_sampling(),
            )
            t2 = time.perf_counter()
            admission.settle(ticket=ticket, usage=admission.Usage(100, 50))
            t3 = time.perf_counter()
            if i >= 50:  # warm-up: connections, the tokenizer's first calls
                stages["authenticate"].append((t1 - t0) * 1000)
                stages["admit"].append((t2 - t1) * 1000)
                stages["settle"].append((t3 - t2) * 1000)
                stages["all"].append((t3 - t0) * 1000)
        print(f"\nlimiter: {name}")
        print(f"{'stage':<14}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'mean ms':>9}")
        for stage, samples in stages.items():
            p50, p95, p99 = percentiles(samples)
            print(f"{stage:<14}{p50:>9.2f}{p95:>9.2f}{p99:>9.2f}{statistics.mean(samples):>9.2f}")
    print(f"\n{sys.platform}, Python {sys.version.split()[0]}, scratch data in {scratch}")


if __name__ == "__main__":
    main()
