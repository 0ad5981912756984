"""Usage at a glance: daily roll-ups of UsageRecord, and the numbers the usage pages show.

Days are local days in settings.TIME_ZONE, like the quota windows. Days up to
`UsageRollupProgress.rolled_through` are read from the roll-up tables (a few rows per tenant,
user and key per day); later records, today's at least, are read live from UsageRecord. Both
sides are summed with the same expressions, so a page shows the same numbers before and after
the roll-up ran.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import CharField, Count, Max, Q, QuerySet, Sum
from django.db.models.functions import Cast, Substr, TruncHour
from django.utils import timezone

from qassist.csv_cells import csv_writer
from tenants.models import (
    TTFT_BUCKETS_MS,
    Tenant,
    UsageDaily,
    UsageDailyReason,
    UsageRecord,
    UsageRollupProgress,
)
from tenants.services import model_token_weight, model_weighted_tokens, weighted_tokens

BUCKET_FIELDS = [f"ttft_b{i:02}" for i in range(len(TTFT_BUCKETS_MS) + 1)]
COUNT_FIELDS = [
    "requests",
    "background",
    "rejected",
    "errors",
    "cancelled",
    "cache_hits",
    "prompt_tokens",
    "completion_tokens",
    "ttft_count",
]
# Summed like the counts, except MAX_FIELDS, which are merged by their maximum.
MAX_FIELDS = ["ttft_max_ms"]
NUMBER_FIELDS = COUNT_FIELDS + BUCKET_FIELDS + MAX_FIELDS
# UsageRecord.reason of work nobody waits on: conversation titles, batch items.
BACKGROUND_REASONS = ("background", "batch")

Numbers = dict[str, int]


def _zero() -> Numbers:
    return dict.fromkeys(NUMBER_FIELDS, 0)


def _record_aggregates() -> dict[str, Any]:
    """What a roll-up row holds, computed from UsageRecord rows."""
    rejected = Q(status=UsageRecord.Status.REJECTED)
    background = Q(reason__in=BACKGROUND_REASONS) & ~rejected
    aggregates: dict[str, Any] = {
        "requests": Count("id", filter=~rejected & ~background),
        "background": Count("id", filter=background),
        "rejected": Count("id", filter=rejected),
        "errors": Count("id", filter=Q(status=UsageRecord.Status.ERROR)),
        "cancelled": Count("id", filter=Q(status=UsageRecord.Status.CANCELLED)),
        "cache_hits": Count("id", filter=Q(cached=True) & ~rejected),
        "prompt_tokens": Sum("prompt_tokens", default=0),
        "completion_tokens": Sum("completion_tokens", default=0),
        "ttft_count": Count("ttft_ms"),
    }
    lower = -1
    for name, upper in zip(BUCKET_FIELDS, TTFT_BUCKETS_MS, strict=False):
        aggregates[name] = Count("id", filter=Q(ttft_ms__gt=lower, ttft_ms__lte=upper))
        lower = upper
    aggregates[BUCKET_FIELDS[-1]] = Count("id", filter=Q(ttft_ms__gt=lower))
    aggregates["ttft_max_ms"] = Max("ttft_ms", default=0)
    return aggregates


def _daily_aggregates() -> dict[str, Any]:
    return {
        name: Max(name, default=0) if name in MAX_FIELDS else Sum(name, default=0)
        for name in NUMBER_FIELDS
    }


def merge_into(target: Numbers, row: dict[str, Any]) -> None:
    """Add one row's numbers to `target`: counts summed, maxima kept."""
    for name in NUMBER_FIELDS:
        value = row[name] or 0
        target[name] = max(target[name], value) if name in MAX_FIELDS else target[name] + value


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """Local midnight starting `day` and the next one (23 or 25 hours apart around DST)."""
    tz = timezone.get_current_timezone()
    start = timezone.make_aware(datetime.combine(day, time.min), tz)
    end = timezone.make_aware(datetime.combine(day + timedelta(days=1), time.min), tz)
    return start, end


# --- the roll-up -----------------------------------------------------------------------------


def usage_rollup_day(*, day: date) -> int:
    """(Re)compute the roll-up rows of one local day; returns how many rows it wrote."""
    start, end = day_bounds(day)
    records = UsageRecord.objects.filter(created_at__gte=start, created_at__lt=end).order_by()
    dims = ("tenant_id", "user_id", "api_key_id", "model")
    rows = [
        UsageDaily(day=day, **{k: row[k] for k in (*dims, *NUMBER_FIELDS)})
        for row in records.values(*dims).annotate(**_record_aggregates())
    ]
    reasons = [
        UsageDailyReason(day=day, **row)
        for row in records.filter(
            status__in=[UsageRecord.Status.REJECTED, UsageRecord.Status.ERROR]
        )
        .values(*dims[:3], "status", "reason")
        .annotate(count=Count("id"))
    ]
    with transaction.atomic():
        UsageDaily.objects.filter(day=day).delete()
        UsageDailyReason.objects.filter(day=day).delete()
        UsageDaily.objects.bulk_create(rows, batch_size=1000)
        UsageDailyReason.objects.bulk_create(reasons, batch_size=1000)
    return len(rows)


def rolled_through() -> date | None:
    return UsageRollupProgress.objects.values_list("rolled_through", flat=True).first()


def usage_rollup(*, today: date | None = None) -> list[date]:
    """Roll up every local day before `today` not rolled up yet, plus the last one rolled up
    again (a record written late, by a process whose clock lags, is not lost). Idempotent;
    run by Celery beat. Returns the days it rolled up."""
    today = today or timezone.localdate()
    yesterday = today - timedelta(days=1)
    done = rolled_through()
    if done is None:
        first = UsageRecord.objects.order_by("created_at").values_list("created_at", flat=True)
        oldest = first.first()
        start = timezone.localdate(oldest) if oldest is not None else yesterday
    else:
        start = min(done, yesterday)
    days = []
    day = start
    while day <= yesterday:
        usage_rollup_day(day=day)
        days.append(day)
        day += timedelta(days=1)
    UsageRollupProgress.objects.update_or_create(pk=1, defaults={"rolled_through": yesterday})
    return days


# --- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class UsageScope:
    """Which usage a page shows. `tenants` None: every tenant (superusers)."""

    tenants: QuerySet[Tenant] | None
    start: date
    end: date  # inclusive
    user_id: int | None = None
    api_key_id: int | None = None

    def filter(self, rows: QuerySet[Any]) -> QuerySet[Any]:
        if self.tenants is not None:
            rows = rows.filter(tenant__in=self.tenants)
        if self.user_id is not None:
            rows = rows.filter(user_id=self.user_id)
        if self.api_key_id is not None:
            rows = rows.filter(api_key_id=self.api_key_id)
        return rows


def _live_from(scope: UsageScope) -> date:
    """The first day of the scope read live: the day after the last one rolled up."""
    done = rolled_through()
    return scope.start if done is None else max(scope.start, done + timedelta(days=1))


class _Reader:
    """One report's reads. Rolled-up days are summed in SQL per breakdown (a few thousand rows
    at most); the live days are read once, grouped by day, tenant, user and key (a few hundred
    groups), and every breakdown of them is summed here."""

    DIMS = ("tenant_id", "user_id", "api_key_id", "model")

    def __init__(self, scope: UsageScope) -> None:
        self.scope = scope
        self.live_from = _live_from(scope)
        self.rolled = scope.filter(
            UsageDaily.objects.filter(
                day__gte=scope.start, day__lt=self.live_from, day__lte=scope.end
            )
        ).order_by()
        self._live: list[dict[str, Any]] | None = None

    def live_days(self) -> list[date]:
        days = []
        day = self.live_from
        while day <= self.scope.end:
            days.append(day)
            day += timedelta(days=1)
        return days

    def live_records(self, day: date) -> QuerySet[UsageRecord]:
        start, end = day_bounds(day)
        records = UsageRecord.objects.filter(created_at__gte=start, created_at__lt=end)
        return self.scope.filter(records).order_by()

    def live(self) -> list[dict[str, Any]]:
        if self._live is None:
            self._live = [
                {**row, "day": day}
                for day in self.live_days()
                for row in self.live_records(day)
                .values(*self.DIMS)
                .annotate(**_record_aggregates())
            ]
        return self._live

    def grouped(self, dims: tuple[str, ...]) -> dict[tuple[Any, ...], Numbers]:
        merged: dict[tuple[Any, ...], Numbers] = defaultdict(_zero)
        rolled = (
            [self.rolled.aggregate(**_daily_aggregates())]
            if not dims
            else self.rolled.values(*dims).annotate(**_daily_aggregates())
        )
        for row in [*rolled, *self.live()]:
            merge_into(merged[tuple(row[d] for d in dims)], row)
        return merged


def ttft_percentile(numbers: Numbers, q: float) -> int | None:
    """The q-quantile of TTFT (ms), interpolated within its histogram bucket, up to the longest
    wait seen: the open last bucket (above 20 s) is read up to it rather than stopping at its
    lower bound, which showed a p95 of 20.0 s to a tenant whose member waited 34.2 s (issue
    #31). None without any TTFT."""
    total = numbers["ttft_count"]
    if not total:
        return None
    longest = numbers.get("ttft_max_ms", 0)
    rank = q * total
    seen = 0
    lower = 0
    for name, bound in zip(BUCKET_FIELDS, (*TTFT_BUCKETS_MS, None), strict=True):
        count = numbers[name]
        # A bucket ends at its bound, or (known) at the longest wait when that is below it.
        upper = bound if not longest else min(longest, bound) if bound else longest
        if count and seen + count >= rank:
            if upper is None or upper <= lower:
                return lower
            return round(lower + (upper - lower) * (rank - seen) / count)
        seen += count
        lower = bound if bound is not None else lower
    return lower


def summary(numbers: Numbers) -> dict[str, Any]:
    """The numbers of one row of a usage table, with what is derived from them."""
    requests = numbers["requests"]
    return {
        **{name: numbers[name] for name in COUNT_FIELDS},
        "total_tokens": numbers["prompt_tokens"] + numbers["completion_tokens"],
        "hit_rate": numbers["cache_hits"] / requests if requests else None,
        "ttft_p50": ttft_percentile(numbers, 0.50),
        "ttft_p95": ttft_percentile(numbers, 0.95),
        "ttft_p99": ttft_percentile(numbers, 0.99),
        "ttft_max": numbers["ttft_max_ms"] or None,
    }


def day_rows(days: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-day table, newest first, with each run of two or more days without any use
    collapsed into one row (`empty`, `first`, `last`, `count`): 30 days of a new tenant were
    29 rows of zeros around the one that mattered (issue #31)."""
    rows: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []  # quiet days, newest first

    def close_run() -> None:
        if len(run) >= 2:
            first, last = run[-1]["day"], run[0]["day"]
            rows.append({"empty": True, "first": first, "last": last, "count": len(run)})
        else:
            rows.extend(run)
        run.clear()

    for row in reversed(days):
        if any(row[name] for name in COUNT_FIELDS):
            close_run()
            rows.append(row)
        else:
            run.append(row)
    close_run()
    return rows


@dataclass
class UsageReport:
    scope: UsageScope
    days: list[dict[str, Any]]  # one per day of the scope, oldest first, zeros included
    totals: dict[str, Any]
    by_tenant: list[dict[str, Any]]
    by_user: list[dict[str, Any]]
    by_api_key: list[dict[str, Any]]
    reasons: list[dict[str, Any]]  # status, reason, count; most first
    by_model: list[dict[str, Any]] = field(default_factory=list)  # "" : before issue #36
    hourly: list[dict[str, Any]] = field(default_factory=list)  # the last 48 hours


def usage_report(*, scope: UsageScope, now: datetime | None = None) -> UsageReport:
    reader = _Reader(scope)
    by_day = reader.grouped(("day",))
    days = []
    day = scope.start
    while day <= scope.end:
        days.append({"day": day, **summary(by_day.get((day,), _zero()))})
        day += timedelta(days=1)
    totals: Numbers = _zero()
    for numbers in by_day.values():
        merge_into(totals, numbers)
    return UsageReport(
        scope=scope,
        days=days,
        totals=summary(totals),
        by_tenant=_breakdown(reader, "tenant_id"),
        by_user=_breakdown(reader, "user_id"),
        by_api_key=_breakdown(reader, "api_key_id"),
        reasons=_reasons(reader),
        by_model=_model_breakdown(reader),
        hourly=_hourly(scope, now=now),
    )


def usage_by_tenant(*, tenants: QuerySet[Tenant] | None, day: date) -> dict[int, dict[str, Any]]:
    """One local day's numbers per tenant (`summary`), for the admin's home: the same sums as
    the usage pages. Tenants without any use that day are absent."""
    reader = _Reader(UsageScope(tenants=tenants, start=day, end=day))
    return {key[0]: summary(numbers) for key, numbers in reader.grouped(("tenant_id",)).items()}


def no_usage() -> dict[str, Any]:
    """`summary` of a tenant, user or key without any use: zeros, and no TTFT."""
    return summary(_zero())


def _breakdown(reader: _Reader, dim: str) -> list[dict[str, Any]]:
    rows = [{"id": key[0], **summary(numbers)} for key, numbers in reader.grouped((dim,)).items()]
    rows.sort(key=lambda row: (-row["total_tokens"], -row["requests"], str(row["id"])))
    return rows


def _model_breakdown(reader: _Reader) -> list[dict[str, Any]]:
    """Per model, with what its tokens count for in quotas and tokens-per-minute limits: its
    weight and its tokens weighed (`quota_tokens`)."""
    rows = _breakdown(reader, "model")
    for row in rows:
        row["weight"] = model_token_weight(row["id"] or "")
        row["quota_tokens"] = weighted_tokens(row["total_tokens"], row["weight"])
    return rows


def _reasons(reader: _Reader) -> list[dict[str, Any]]:
    scope = reader.scope
    rolled_reasons = scope.filter(
        UsageDailyReason.objects.filter(
            day__gte=scope.start, day__lt=reader.live_from, day__lte=scope.end
        )
    )
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for row in rolled_reasons.order_by().values("status", "reason").annotate(n=Sum("count")):
        counts[(row["status"], row["reason"])] += row["n"]
    for day in reader.live_days():
        failed = reader.live_records(day).filter(
            status__in=[UsageRecord.Status.REJECTED, UsageRecord.Status.ERROR]
        )
        for row in failed.values("status", "reason").annotate(n=Count("id")):
            counts[(row["status"], row["reason"])] += row["n"]
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [
        {"status": status, "reason": reason or "(none given)", "count": n}
        for (status, reason), n in ordered
    ]


HOURLY_HOURS = 48


def _hourly(scope: UsageScope, *, now: datetime | None) -> list[dict[str, Any]]:
    """Requests per local hour over the 48 hours up to `now` (live: these are not rolled up)."""
    tz = timezone.get_current_timezone()
    last = timezone.now() if now is None else now
    last = last.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    starts = [last - timedelta(hours=HOURLY_HOURS - 1 - i) for i in range(HOURLY_HOURS)]
    records = scope.filter(UsageRecord.objects.filter(created_at__gte=starts[0])).order_by()
    rejected = Q(status=UsageRecord.Status.REJECTED)
    counted: dict[datetime, dict[str, int]] = {}
    for row in (
        records.annotate(hour=_utc_hour())
        .values("hour")
        .annotate(requests=Count("id", filter=~rejected), rejected=Count("id", filter=rejected))
    ):
        counted[_as_utc_hour(row["hour"])] = row
    return [
        {
            "hour": timezone.localtime(start, tz),
            "requests": counted.get(start, {}).get("requests", 0),
            "rejected": counted.get(start, {}).get("rejected", 0),
        }
        for start in starts
    ]


def _utc_hour() -> Any:
    """Each record's hour in UTC, in the database's own terms. Hours are UTC hours (labelled in
    local time on the page): the same as local hours except in zones with a half-hour offset.
    On SQLite, Django's TruncHour calls back into Python for every row (5x slower on the 20,000
    rows of two busy days); datetimes are stored there as UTC text, so the first 13 characters
    are the hour."""
    if connection.vendor == "sqlite":
        return Substr(Cast("created_at", output_field=CharField()), 1, 13)
    return TruncHour("created_at", tzinfo=UTC)


def _as_utc_hour(value: datetime | str) -> datetime:
    if isinstance(value, str):
        return datetime.strptime(value, "%Y-%m-%d %H").replace(tzinfo=UTC)
    return value.astimezone(UTC)


def usage_tokens_since(*, tenant: Tenant, since: date) -> int:
    """Tokens `tenant` used from local day `since` up to now, roll-up plus live, each model's
    weighed as its quotas count them (`model_token_weight`)."""
    today = timezone.localdate()
    numbers = _Reader(
        UsageScope(tenants=Tenant.objects.filter(pk=tenant.pk), start=since, end=today)
    ).grouped(("model",))
    return sum(
        model_weighted_tokens(
            model=key[0] or "", tokens=n["prompt_tokens"] + n["completion_tokens"]
        )
        for key, n in numbers.items()
    )


# --- CSV -------------------------------------------------------------------------------------

CSV_DAY_COLUMNS = [
    "day",
    "requests",
    "background",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "cache_hits",
    "hit_rate",
    "rejected",
    "errors",
    "cancelled",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "ttft_p99_ms",
    "ttft_max_ms",
]


def usage_days_csv(*, report: UsageReport) -> str:
    out = io.StringIO()
    writer = csv_writer(out)
    writer.writerow(CSV_DAY_COLUMNS)
    for row in report.days:
        writer.writerow(
            [
                row["day"].isoformat(),
                row["requests"],
                row["background"],
                row["prompt_tokens"],
                row["completion_tokens"],
                row["total_tokens"],
                row["cache_hits"],
                "" if row["hit_rate"] is None else f"{row['hit_rate']:.4f}",
                row["rejected"],
                row["errors"],
                row["cancelled"],
                "" if row["ttft_p50"] is None else row["ttft_p50"],
                "" if row["ttft_p95"] is None else row["ttft_p95"],
                "" if row["ttft_p99"] is None else row["ttft_p99"],
                "" if row["ttft_max"] is None else row["ttft_max"],
            ]
        )
    return out.getvalue()


RECORD_CSV_COLUMNS = [
    "created_at",
    "tenant",
    "user",
    "api_key",
    "session",
    "status",
    "reason",
    "cached",
    "prompt_tokens",
    "completion_tokens",
    "ttft_ms",
    "latency_ms",
]


class _Echo:
    def write(self, value: str) -> str:
        return value


def usage_records_csv(*, records: QuerySet[UsageRecord]) -> Iterator[str]:
    """Records as CSV lines, streamed: a filtered view of millions of rows never sits in memory."""
    writer = csv_writer(_Echo())  # usernames may begin with + - @
    yield writer.writerow(RECORD_CSV_COLUMNS)
    rows: Iterable[tuple[Any, ...]] = records.values_list(
        "created_at",
        "tenant__slug",
        "user__username",
        "api_key__prefix",
        "session_id",
        "status",
        "reason",
        "cached",
        "prompt_tokens",
        "completion_tokens",
        "ttft_ms",
        "latency_ms",
    ).iterator(chunk_size=2000)
    for row in rows:
        cells = ["" if cell is None else cell for cell in row]
        cells[0] = row[0].isoformat()
        yield writer.writerow(cells)
