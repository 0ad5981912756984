"""Batch jobs: many chat completions submitted at once, run later, collected when done.

A batch is run by one *runner* at a time (a Celery task with Redis; a thread of the web
process in the embedded mode, where the model lives). The runner takes the batch over (only if
nobody else's heartbeat is fresh), then works through its items a few at a time, each through
the one admission path as *background* work: it counts against the tenant's token quotas, never
against the per-minute rates or stream slots, and the engine runs it only on spare sequences,
after every reply a person waits for.

Restarts: a runner beats every HEARTBEAT_SECONDS; one silent for QASSIST_BATCH_STALE_SECONDS is
presumed dead and its batch is taken over (by the beat task `resume_batches`, or when someone
reads the batch), its unfinished items run again. An item's result is written once, guarded by
its attempt number, so a finished item is never run again and a late write from a runner
presumed dead is dropped; a batch is marked completed only when every item has an outcome.
A runner also gives the batch back after QASSIST_BATCH_SLICE_SECONDS and queues itself again,
so a long batch never holds a Celery worker away from the other tasks; with Redis it does so
sooner, between items, when a draft someone asked for waits for the worker (`_gives_way`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth.models import User
from django.db import close_old_connections, transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from chat.cached_replies import drafts_waiting
from chat.models import Batch, BatchItem
from chat.services.api import api_conversation, check_api_messages
from chat.services.checks import ChatError
from inference.types import ChatMessage, Delta, Done, Failed, SamplingParams
from tenants.models import ApiKey, Tenant, UsageRecord
from tenants.services import Principal, api_key_status

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 2.0
RETRY_SECONDS = 5.0  # an item whose worker was down waits this long before it is tried again
MAX_ATTEMPTS = 3  # for unexpected failures; a worker being down does not count as one
TRANSIENT = frozenset({"busy", "worker_down", "shutting_down"})
FINISHED = (BatchItem.Status.DONE, BatchItem.Status.FAILED, BatchItem.Status.CANCELLED)


class BatchError(Exception):
    def __init__(self, code: str, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


@dataclass(frozen=True)
class BatchRequest:
    messages: list[ChatMessage]
    params: SamplingParams
    custom_id: str = ""
    model: str = ""  # "" the tenant's default


# --- creating, reading, cancelling ---------------------------------------------------------


def batch_create(
    *,
    tenant: Tenant,
    requests: list[BatchRequest],
    api_key: ApiKey | None = None,
    created_by: User | None = None,
    name: str = "",
) -> Batch:
    """Store a batch and its items, and start it once stored."""
    limit = int(settings.QASSIST_BATCH_MAX_ITEMS)
    if not requests:
        raise BatchError("invalid_value", "A batch needs at least one request.", param="requests")
    if len(requests) > limit:
        raise BatchError(
            "invalid_value",
            f"A batch holds at most {limit:,} requests; this one has {len(requests):,}.",
            param="requests",
        )
    for i, request in enumerate(requests):
        try:
            check_api_messages(request.messages)
        except ChatError as error:
            raise BatchError(
                error.code, f"Request {i}: {error.message}", param=f"requests[{i}]"
            ) from None
    with transaction.atomic():
        batch = Batch.objects.create(
            tenant=tenant, api_key=api_key, created_by=created_by, name=name, total=len(requests)
        )
        BatchItem.objects.bulk_create(
            [
                BatchItem(
                    batch=batch,
                    index=i,
                    custom_id=request.custom_id,
                    messages=[{"role": m.role, "content": m.content} for m in request.messages],
                    params=request.params.to_dict(),
                    model=request.model,
                )
                for i, request in enumerate(requests)
            ],
            batch_size=500,
        )
        batch_dispatch(batch_id=batch.id)
    return batch


def batch_counts(*, batch: Batch) -> dict[str, int]:
    """Items per status, every status present (one query)."""
    counts = dict.fromkeys(BatchItem.Status.values, 0)
    for row in batch.items.order_by().values("status").annotate(n=Count("id")):
        counts[row["status"]] = row["n"]
    return counts


def batch_cancel(*, batch: Batch) -> bool:
    """Cancel what has not run; a running item stops within a step. False if already over."""
    with transaction.atomic():
        locked = Batch.objects.select_for_update().get(pk=batch.pk)
        if locked.status in (Batch.Status.COMPLETED, Batch.Status.CANCELLED):
            return False
        now = timezone.now()
        locked.items.filter(status=BatchItem.Status.PENDING).update(
            status=BatchItem.Status.CANCELLED, finished_at=now
        )
        if not locked.runner:  # nobody runs it: nothing else will end its running items
            locked.items.filter(status=BatchItem.Status.RUNNING).update(
                status=BatchItem.Status.CANCELLED, finished_at=now
            )
        locked.status = Batch.Status.CANCELLED
        locked.finished_at = now
        locked.save(update_fields=["status", "finished_at"])
    batch.refresh_from_db()
    return True


def batch_results(*, batch: Batch) -> Iterator[BatchItem]:
    """Finished items in order (done, failed or cancelled), streamed from the database."""
    return batch.items.filter(status__in=FINISHED).order_by("index").iterator(chunk_size=500)


# --- starting and resuming -------------------------------------------------------------------


def batch_dispatch(*, batch_id: uuid.UUID) -> None:
    """Start a runner for the batch once the current transaction commits."""
    from inference.service import engine_mode

    if engine_mode() == "redis":
        from chat.tasks import run_batch

        transaction.on_commit(lambda: run_batch.delay(str(batch_id)))
        return

    def run() -> None:
        try:
            batch_run(batch_id=batch_id)
        finally:
            close_old_connections()

    # Embedded: the model lives in this process; a Celery worker would load a second copy.
    transaction.on_commit(lambda: threading.Thread(target=run, daemon=True).start())


def batches_stale(*, now: Any = None) -> list[uuid.UUID]:
    """Unfinished batches nobody is running: never started (a lost message), or whose
    runner's heartbeat stopped."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=float(settings.QASSIST_BATCH_STALE_SECONDS))
    return list(
        Batch.objects.filter(status__in=[Batch.Status.QUEUED, Batch.Status.RUNNING])
        .filter(Q(runner="", created_at__lt=stale) | Q(heartbeat_at__lt=stale))
        .values_list("id", flat=True)
    )


def batches_resume() -> int:
    """Dispatch a runner for every stale batch; returns how many."""
    ids = batches_stale()
    for batch_id in ids:
        batch_dispatch(batch_id=batch_id)
    return len(ids)


# --- the runner ------------------------------------------------------------------------------


def batch_run(
    *, batch_id: uuid.UUID | str, slice_seconds: float | None = None, concurrency: int | None = None
) -> str:
    """Run the batch (sync entry point for the Celery task and the embedded thread).
    Returns what happened: completed, cancelled, yielded (given back, queued again), busy
    (someone else runs it) or over (nothing to do)."""
    return async_to_sync(_run)(
        uuid.UUID(str(batch_id)),
        float(settings.QASSIST_BATCH_SLICE_SECONDS if slice_seconds is None else slice_seconds),
        int(settings.QASSIST_BATCH_CONCURRENCY if concurrency is None else concurrency),
    )


async def _run(batch_id: uuid.UUID, slice_seconds: float, concurrency: int) -> str:
    me = uuid.uuid4().hex
    batch = await database_sync_to_async(_take_over)(batch_id, me)
    if batch is None:
        return "busy" if await database_sync_to_async(_unfinished)(batch_id) else "over"
    stop = asyncio.Event()
    deadline = time.monotonic() + slice_seconds
    beating = asyncio.create_task(_heartbeat(batch_id, me, stop))
    try:
        await asyncio.gather(
            *(_worker(batch, me, stop, deadline) for _ in range(max(1, concurrency)))
        )
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating
    outcome: str = await database_sync_to_async(_finish)(batch_id, me)
    if outcome == "yielded":
        await database_sync_to_async(_dispatch_now)(batch_id)
    return outcome


def _dispatch_now(batch_id: uuid.UUID) -> None:
    with transaction.atomic():
        batch_dispatch(batch_id=batch_id)


def _unfinished(batch_id: uuid.UUID) -> bool:
    return Batch.objects.filter(
        id=batch_id, status__in=[Batch.Status.QUEUED, Batch.Status.RUNNING]
    ).exists()


def _take_over(batch_id: uuid.UUID, me: str) -> Batch | None:
    """Become the batch's runner unless a live one is; a dead one's running items go back to
    pending (they never finished: their results were never written)."""
    now = timezone.now()
    stale = now - timedelta(seconds=float(settings.QASSIST_BATCH_STALE_SECONDS))
    with transaction.atomic():
        taken = (
            Batch.objects.filter(
                id=batch_id, status__in=[Batch.Status.QUEUED, Batch.Status.RUNNING]
            )
            .filter(Q(runner="") | Q(heartbeat_at__lt=stale))
            .update(runner=me, heartbeat_at=now, status=Batch.Status.RUNNING)
        )
        if not taken:
            return None
        Batch.objects.filter(id=batch_id, started_at__isnull=True).update(started_at=now)
        BatchItem.objects.filter(batch_id=batch_id, status=BatchItem.Status.RUNNING).update(
            status=BatchItem.Status.PENDING
        )
    return Batch.objects.select_related("tenant", "api_key", "created_by").get(id=batch_id)


async def _heartbeat(batch_id: uuid.UUID, me: str, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await asyncio.sleep(HEARTBEAT_SECONDS)
        alive = await database_sync_to_async(_beat)(batch_id, me)
        if not alive:  # cancelled, or taken over by someone who thought this one dead
            stop.set()


def _beat(batch_id: uuid.UUID, me: str) -> bool:
    return bool(
        Batch.objects.filter(id=batch_id, runner=me, status=Batch.Status.RUNNING).update(
            heartbeat_at=timezone.now()
        )
    )


async def _worker(batch: Batch, me: str, stop: asyncio.Event, deadline: float) -> None:
    while not stop.is_set() and time.monotonic() < deadline:
        claimed = await database_sync_to_async(_claim)(batch.id, me)
        if claimed is None:
            return
        if isinstance(claimed, float):  # only retries waiting: wait (or stop) a little
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=min(claimed, HEARTBEAT_SECONDS))
            continue
        await _run_item(batch, claimed, stop)


def _claim(batch_id: uuid.UUID, me: str) -> BatchItem | float | None:
    """The next item to run (now marked running), the seconds until a retry is due, or None
    when nothing is left for this runner."""
    if not Batch.objects.filter(id=batch_id, runner=me, status=Batch.Status.RUNNING).exists():
        return None
    if _gives_way():
        return None  # the batch goes back to the queue, as at the end of its slice
    now = timezone.now()
    pending = BatchItem.objects.filter(batch_id=batch_id, status=BatchItem.Status.PENDING)
    for _ in range(5):
        item = (
            pending.filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
            .order_by("index")
            .first()
        )
        if item is None:
            waiting = pending.order_by("not_before").values_list("not_before", flat=True).first()
            if waiting is None:
                return None
            return max(0.05, (waiting - now).total_seconds())
        claimed = BatchItem.objects.filter(pk=item.pk, status=BatchItem.Status.PENDING).update(
            status=BatchItem.Status.RUNNING, attempts=F("attempts") + 1, started_at=now
        )
        if claimed:
            item.refresh_from_db()
            return item
    return None


def _gives_way() -> bool:
    """Whether the runner should give its batch back now, between items. With Redis a batch
    runs on the Celery worker that also writes the drafts staff ask for; that worker takes its
    queues in order (interactive, then batches: docs/batches.md), so a runner that gives way
    lets a waiting draft start within an item's time rather than a slice's. Embedded, drafts run
    on threads of their own: nothing to give way to."""
    from inference.service import engine_mode

    return engine_mode() == "redis" and drafts_waiting()


async def _run_item(batch: Batch, item: BatchItem, stop: asyncio.Event) -> None:
    from chat import admission
    from inference.service import get_engine_client

    if not await database_sync_to_async(_key_usable)(batch):
        await database_sync_to_async(_refused)(
            item, "forbidden", "The API key that submitted this batch was revoked or expired."
        )
        return
    principal = Principal(tenant=batch.tenant, api_key=batch.api_key)
    messages = [ChatMessage(m["role"], m["content"]) for m in item.messages]
    params = SamplingParams.from_dict(item.params)
    conversation = api_conversation(tenant=batch.tenant, messages=messages)
    try:
        ticket = await database_sync_to_async(admission.admit)(
            principal=principal,
            conversation=conversation,
            params=params,
            background=True,
            cacheable=False,
            model=item.model,
        )
    except admission.Refused as refused:
        await database_sync_to_async(_refused)(item, refused.code, refused.message)
        return
    ticket.submission = replace(ticket.submission, priority=batch.tenant.priority - 1)
    parts: list[str] = []
    done: Done | None = None
    failed: Failed | None = None
    stopped = False
    async with admission.held(ticket) as usage:
        events = get_engine_client().generate(ticket.submission)
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for event in events:
                if stop.is_set():
                    stopped = True  # closing the stream cancels the generation
                    break
                if isinstance(event, Delta):
                    parts.append(event.text)
                elif isinstance(event, Done):
                    done = event
                elif isinstance(event, Failed):
                    failed = event
        if done is not None:
            usage.prompt_tokens = done.prompt_tokens
            usage.completion_tokens = done.completion_tokens
        else:
            usage.prompt_tokens = ticket.prompt_tokens if parts else 0
            usage.completion_tokens = len(parts)
    if done is not None and done.finish_reason != "cancelled":
        await database_sync_to_async(_store)(
            batch, item, "".join(parts), done, ticket.submission.model
        )
    elif failed is not None:
        await database_sync_to_async(_failed)(item, failed)
    elif stopped or (done is not None and done.finish_reason == "cancelled"):
        await database_sync_to_async(_stopped)(item)
    else:  # the stream ended with no outcome: try again later
        await database_sync_to_async(_retry)(item, "internal", "The reply ended without a word.")


def _key_usable(batch: Batch) -> bool:
    """A batch stops with its key: revoking a key stops what it submitted."""
    if batch.api_key_id is None:
        return True
    key = ApiKey.objects.filter(pk=batch.api_key_id).first()
    return key is not None and api_key_status(api_key=key) == "active"


def _mine(item: BatchItem) -> Any:
    """The item as this attempt left it: running, same attempt (a newer runner's is not ours)."""
    return BatchItem.objects.filter(
        pk=item.pk, status=BatchItem.Status.RUNNING, attempts=item.attempts
    )


def _store(batch: Batch, item: BatchItem, content: str, done: Done, model: str = "") -> None:
    with transaction.atomic():
        written = _mine(item).update(
            status=BatchItem.Status.DONE,
            content=content,
            finish_reason=done.finish_reason,
            prompt_tokens=done.prompt_tokens,
            completion_tokens=done.completion_tokens,
            finished_at=timezone.now(),
            error="",
            error_code="",
            # The model that answered: the one asked for, or the tenant's default for "".
            **({"model": model} if model else {}),
        )
        if written:
            UsageRecord.objects.create(
                tenant=batch.tenant,
                api_key=batch.api_key,
                user=batch.created_by,
                prompt_tokens=done.prompt_tokens,
                completion_tokens=done.completion_tokens,
                model=model,
                # No TTFT: a batch item waits for spare sequences by design, and the usage
                # pages' TTFT is what people wait for.
                status=UsageRecord.Status.OK,
                reason="batch",
            )


def _fail(item: BatchItem, code: str, message: str) -> None:
    _mine(item).update(
        status=BatchItem.Status.FAILED, error_code=code, error=message, finished_at=timezone.now()
    )


def _retry(item: BatchItem, code: str, message: str, *, counts: bool = True) -> None:
    if counts and item.attempts >= MAX_ATTEMPTS:
        _fail(item, code, f"{message} (gave up after {item.attempts} attempts)")
        return
    # A transient failure gives its attempt back: waiting for a worker is not the item's fault.
    _mine(item).update(
        status=BatchItem.Status.PENDING,
        not_before=timezone.now() + timedelta(seconds=RETRY_SECONDS),
        attempts=F("attempts") - (0 if counts else 1),
        error_code=code,
        error=message,
    )


def _failed(item: BatchItem, failed: Failed) -> None:
    if failed.code in TRANSIENT:
        _retry(item, failed.code, failed.message, counts=False)
    elif failed.code == "internal":
        _retry(item, failed.code, failed.message)
    else:
        _fail(item, failed.code, failed.message)


def _refused(item: BatchItem, code: str, message: str) -> None:
    """Refused by admission. Quota gone or tenant switched off: the rest would be refused too,
    so they end now with the same reason rather than one refusal each."""
    _fail(item, code, message)
    if code in ("quota_exceeded", "tenant_inactive", "forbidden"):
        BatchItem.objects.filter(batch_id=item.batch_id, status=BatchItem.Status.PENDING).update(
            status=BatchItem.Status.FAILED,
            error_code=code,
            error=message,
            finished_at=timezone.now(),
        )


def _stopped(item: BatchItem) -> None:
    """Stopped mid-generation: the batch was cancelled (the item is cancelled) or another runner
    took over (it already put the item back to pending: `_mine` finds nothing)."""
    cancelled = Batch.objects.filter(id=item.batch_id, status=Batch.Status.CANCELLED).exists()
    if cancelled:
        _mine(item).update(status=BatchItem.Status.CANCELLED, finished_at=timezone.now())
    else:
        _mine(item).update(status=BatchItem.Status.PENDING)


def _finish(batch_id: uuid.UUID, me: str) -> str:
    """Give the batch up: completed if every item has an outcome, else back to the queue."""
    with transaction.atomic():
        batch = Batch.objects.select_for_update().filter(id=batch_id).first()
        if batch is None:
            return "gone"  # deleted while it ran
        if batch.runner != me:
            return "lost"
        now = timezone.now()
        if batch.status == Batch.Status.CANCELLED:
            batch.items.filter(
                status__in=[BatchItem.Status.PENDING, BatchItem.Status.RUNNING]
            ).update(status=BatchItem.Status.CANCELLED, finished_at=now)
            batch.runner = ""
            batch.save(update_fields=["runner"])
            return "cancelled"
        counts = batch_counts(batch=batch)
        finished = sum(counts[status] for status in FINISHED)
        batch.runner = ""
        if finished == batch.total:
            batch.status = Batch.Status.COMPLETED
            batch.finished_at = now
            batch.save(update_fields=["runner", "status", "finished_at"])
            return "completed"
        batch.save(update_fields=["runner"])
        if counts[BatchItem.Status.PENDING] + counts[BatchItem.Status.RUNNING] == 0:
            # Items missing: never call it complete; say so loudly instead of looping.
            logger.error(
                "batch %s: %s of %s items have an outcome", batch_id, finished, batch.total
            )
            return "incomplete"
        batch.items.filter(status=BatchItem.Status.RUNNING).update(status=BatchItem.Status.PENDING)
        return "yielded"
