"""Replies owned by the web process, not by a socket.

A chat reply runs as a task of the process that admitted it (`start`) and tells every socket of
this process watching its conversation (`watch`): `reply.start`, `queued`, `delta` with its
character `offset`, `error`, `reply.done`, `session.title`. Sockets come and go — a reload,
another tab, switching conversations, a network blip — and the reply goes on. A socket that
starts watching mid-reply is given, in the same step, the whole text so far (`snapshot`,
sent as `reply.resume`) and from then on every delta: nothing missed, nothing twice.

Delivery is in-process and synchronous (each socket has an ordered outbox), not through the
channel layer: chat sockets stay off Redis, so a Redis restart cannot take them down
(docs/RELIABILITY.md). With several web processes, a socket on another process than the run's
sees the reply through the stored text (saved every half second) instead of live.

A run ends by itself (its own limits), by Stop (`stop_session`, from any socket of this
process), when its user has had no socket open in this process for
`QASSIST_REPLY_GRACE_SECONDS`, or when the user loses access to the tenant (`revoke`, from a
socket closed with 4403, and the run's own re-check every `QASSIST_WS_RECHECK_SECONDS`, which
also covers a user whose sockets are elsewhere).

Admission is unchanged: the ticket was admitted before the turn was stored; the run holds its
lease while it streams and settles when it ends (`admission.held`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth.models import User

from chat import admission
from chat.admission import Refused, Ticket
from chat.citing import Checked, with_citations
from chat.keepalive import keep_reply_alive
from chat.models import Message
from chat.reply_language import asked_again, first_asked, kept_in_language
from chat.services.replies import (
    message_data,
    reply_finish,
    reply_outcome,
    reply_save_progress,
    usage_record_background,
)
from chat.services.sampling import title_sampling
from chat.services.titles import clean_title, session_set_generated_title, title_request
from chat.services.turns import Turn
from inference.service import get_engine_client
from inference.types import Delta, Done, Event, Failed, FinishReason, Queued
from inference.worker import Submission
from knowledge.turns import mark_cited
from tenants.models import Tenant
from tenants.services import Principal, principal_is_member

logger = logging.getLogger(__name__)

SAVE_EVERY_SECONDS = 0.5  # how often a streaming reply's text is written to the database
CACHED_CHUNK_CHARS = 24  # a cached answer is streamed in chunks like a generated one

# Why a run was cut short by something else than its user's Stop.
ABSENT = "absent"
FORBIDDEN = "forbidden"


class Watcher(Protocol):
    """A socket watching a conversation: `deliver` queues a frame for it, in order, at once."""

    def deliver(self, frame: dict[str, Any]) -> None: ...


# This process's sockets by the conversation they watch, its open sockets by user, its runs.
_watchers: dict[str, set[Watcher]] = collections.defaultdict(set)
_online: collections.Counter[int] = collections.Counter()
_runs: dict[int, ReplyRun] = {}


def socket_opened(*, user_id: int) -> None:
    _online[user_id] += 1


def socket_closed(*, user_id: int, watcher: Watcher) -> None:
    _online[user_id] -= 1
    if _online[user_id] <= 0:
        del _online[user_id]
    watch(watcher=watcher, session_id=None)


def watch(*, watcher: Watcher, session_id: str | None) -> dict[str, Any] | None:
    """Watch one conversation (None: none). Returns the `reply.resume` frame of the reply being
    written in it by this process, if any, taken in the same step as the watching begins: the
    deltas the socket gets next continue exactly where it ends."""
    for key in [k for k, sockets in _watchers.items() if watcher in sockets]:
        _watchers[key].discard(watcher)
        if not _watchers[key]:
            del _watchers[key]
    if session_id is None:
        return None
    _watchers[session_id].add(watcher)
    run = running_in(session_id)
    return run.snapshot() if run is not None else None


def running_in(session_id: str) -> ReplyRun | None:
    return next(
        (r for r in _runs.values() if str(r.turn.session.id) == session_id and not r.done), None
    )


def stop_session(*, session_id: str) -> bool:
    """Stop the reply being written in the conversation, if this process runs it."""
    run = running_in(session_id)
    if run is None:
        return False
    run.request_stop()
    return True


def revoke(*, user_id: int, tenant_id: int) -> list[ReplyRun]:
    """The user lost access to the tenant: their replies there end now. Returns them."""
    runs = [
        r
        for r in _runs.values()
        if r.user.pk == user_id and r.tenant.pk == tenant_id and not r.done
    ]
    for run in runs:
        run.request_stop(FORBIDDEN)
    return runs


@dataclass
class ReplyRun:
    turn: Turn
    ticket: Ticket
    user: User
    tenant: Tenant
    parts: list[str] = field(default_factory=list)
    chars: int = 0
    task: asyncio.Task[None] | None = None
    cut: str = ""  # ABSENT or FORBIDDEN once the run is being ended for that reason
    streaming: bool = False  # from the engine's first event to the end
    stop_requested: bool = False  # a stop that came before the engine had the request
    cancel_sent: bool = False
    # Set by Stop: a reply without a word yet is cut at once (`_until_stopped`).
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    # reply.done was published: the reply is over for its sockets, whatever after-work (the
    # conversation's title) the task still does. A follow-up may be sent from then on.
    finished: bool = False
    # The support check's outcome (knowledge.support), stored with the reply.
    evidence: dict[str, Any] | None = None
    # The reply asked once more in its language (chat.reply_language): the request running.
    again: Submission | None = None

    @property
    def first(self) -> Submission:
        """The request as first asked (its reply's unseen start in its language, if at risk)."""
        return first_asked(self.ticket.submission, self.turn.language)

    @property
    def request_id(self) -> str:
        """The engine's request for this reply now (a Stop cancels it)."""
        return (self.again or self.ticket.submission).request_id

    @property
    def reply_id(self) -> int:
        return self.turn.reply.id

    @property
    def done(self) -> bool:
        """The reply is over: its socket may send again, Stop and watching no longer reach
        it. True from reply.done on, even while the title is being generated."""
        return self.finished or self.task is None or self.task.done()

    def publish(self, frame: dict[str, Any]) -> None:
        for watcher in list(_watchers.get(str(self.turn.session.id), ())):
            watcher.deliver(frame)

    # --- the run ---------------------------------------------------------------------------

    async def main(self) -> None:
        guard = asyncio.create_task(self._guard())
        try:
            self.publish(
                {
                    "type": "reply.start",
                    "session": {"id": str(self.turn.session.id), "title": self.turn.session.title},
                    "session_created": self.turn.session_created,
                    "user_message": message_data(
                        self.turn.user_message, self.turn.versions.get(self.turn.user_message.id)
                    ),
                    "reply": message_data(
                        self.turn.reply,
                        self.turn.versions.get(self.reply_id),
                        sources=self.turn.sources,
                    ),
                }
            )
            message = await self._stream()
            sources = mark_cited(self.turn.sources, message.content, message.evidence)
            # In the same step as reply.done: a follow-up sent the instant it arrives is free
            # to start (the title below is background work that never holds the connection).
            self.finished = True
            self.publish({"type": "reply.done", "reply": message_data(message, sources=sources)})
            guard.cancel()
            if (
                self.turn.session_created
                and message.status == Message.Status.COMPLETE
                and settings.QASSIST_GENERATE_TITLES
            ):
                await self._generate_title()
        except Exception:
            logger.exception("reply %s failed", self.reply_id)
        finally:
            guard.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await guard
            _runs.pop(self.reply_id, None)

    async def _stream(self) -> Message:
        reply_id = self.reply_id
        ticket = self.ticket
        started = time.monotonic()
        answer = ticket.answer_without_model
        if answer is not None:
            async with admission.held(ticket):
                return await self._stream_cached(
                    answer, started, from_cache=ticket.cached is not None
                )
        async with admission.held(ticket) as usage:
            deltas = 0
            last_save = time.monotonic()
            outcome: dict[str, Any] = {"finish_reason": "error", "error": ""}
            keep_alive = keep_reply_alive(reply_id)
            try:
                events = with_citations(
                    kept_in_language(
                        get_engine_client().generate(self.first),
                        language=self.turn.language,
                        again=self._ask_again,
                    ),
                    question_message_id=self.turn.user_message.id,
                    cite=bool(self.turn.sources),
                    chinese_notes=self.turn.language.chinese_notes,
                )
                async for event in self._until_stopped(events, ticket.submission.request_id):
                    self.streaming = True  # the engine has the request: a cancel reaches it
                    if self.stop_requested and not self.cancel_sent:
                        self.cancel_sent = True
                        await get_engine_client().cancel(self.request_id)
                    if isinstance(event, Queued):
                        self.publish(
                            {
                                "type": "queued",
                                "reply_id": reply_id,
                                "position": event.position,
                                "estimated_wait": event.estimated_wait,
                            }
                        )
                    elif isinstance(event, Delta):
                        self._delta(event.text)
                        deltas += 1
                        if time.monotonic() - last_save >= SAVE_EVERY_SECONDS:
                            last_save = time.monotonic()
                            await database_sync_to_async(reply_save_progress)(
                                reply_id=reply_id, content="".join(self.parts)
                            )
                    elif isinstance(event, Checked):
                        self.evidence = event.record
                        if event.replacement is not None:
                            # Documents only: what was streamed is replaced by what the
                            # documents say (reply.done carries the new text).
                            self.parts = [event.replacement]
                            self.chars = len(event.replacement)
                    elif isinstance(event, Done):
                        usage.prompt_tokens = event.prompt_tokens
                        usage.completion_tokens = event.completion_tokens
                        outcome = reply_outcome(event)
                    elif isinstance(event, Failed):
                        outcome = reply_outcome(event)
                        self.publish(
                            _error_frame(event.code, event.message, reply_id, event.retry_after)
                        )
            except asyncio.CancelledError:
                outcome = {"finish_reason": "disconnected", "error": ""}
                raise
            except Exception:
                logger.exception("streaming reply %s failed", reply_id)
                outcome = {
                    "finish_reason": "error",
                    "error": "The reply failed unexpectedly.",
                    "error_code": "internal",
                }
                self.publish(_error_frame("internal", outcome["error"], reply_id))
            finally:
                keep_alive.cancel()
                self.streaming = False
                if outcome["finish_reason"] == "cancelled" and self.cut == ABSENT:
                    outcome["finish_reason"] = "disconnected"
                elif self.cut == FORBIDDEN:
                    outcome.update(
                        finish_reason="error",
                        error="Access to this workspace was removed during the reply.",
                        error_code="forbidden",
                    )
                if usage.completion_tokens is None:
                    # No end report from the engine (a failure, or a worker that died): charge
                    # what reached the user, not the worst case.
                    usage.prompt_tokens = ticket.prompt_tokens if deltas else 0
                    usage.completion_tokens = deltas
                    outcome.setdefault("prompt_tokens", usage.prompt_tokens)
                    outcome.setdefault("completion_tokens", usage.completion_tokens)
                message: Message = await asyncio.shield(
                    database_sync_to_async(reply_finish)(
                        reply_id=reply_id,
                        content="".join(self.parts),
                        latency_ms=round((time.monotonic() - started) * 1000),
                        evidence=self.evidence,
                        **outcome,
                    )
                )
        return message

    def _ask_again(self) -> AsyncIterator[Event]:
        """The question asked once more, insisting on the reply's language: its first reply
        began in another and was cancelled before any of it was shown."""
        self.again = asked_again(self.ticket.submission, self.turn.language)
        logger.info("reply %s: not in %s, asked again", self.reply_id, self.turn.language.name)
        return get_engine_client().generate(self.again)

    async def _until_stopped(
        self, events: AsyncIterator[Event | Checked], request_id: str
    ) -> AsyncIterator[Event | Checked]:
        """`events`, cut at once by a Stop that comes before the reply's first word (issue
        #31: Esc while "Waiting in line" took effect only when the reply began, or not at
        all). Waiting for the engine to answer the cancel is waiting for its next step, or
        for its first event about a request it has not even fetched; instead the wait for the
        next event is cancelled, which closes the engine's stream: that takes the request out
        of the queue wherever it is (not yet submitted, the shared Redis queue, the engine's
        own, where the worker drops it before its next step), and the run ends now as the
        user's Stop, with nothing generated. Once words flow, Stop goes through the engine as
        before (it ends within a step, reporting the tokens used)."""
        iterator = aiter(events)
        stop = asyncio.ensure_future(self.stopped.wait())
        following: asyncio.Future[Event | Checked | None] | None = None
        try:
            while True:
                if self.chars:
                    event = await anext(iterator, None)
                else:
                    following = asyncio.ensure_future(anext(iterator, None))
                    await asyncio.wait({following, stop}, return_when=asyncio.FIRST_COMPLETED)
                    if not following.done():
                        following.cancel()
                        await asyncio.wait({following})  # its clean-up cancels the request
                        yield Done(request_id, FinishReason.CANCELLED.value, 0, 0)
                        return
                    event = following.result()
                if event is None:
                    return
                yield event
        finally:
            stop.cancel()
            if following is not None and not following.done():
                # This task was cancelled while it waited: so is the wait for the engine.
                following.cancel()
                await asyncio.wait({following})

    def _delta(self, text: str) -> None:
        offset = self.chars
        self.parts.append(text)
        self.chars += len(text)
        self.publish({"type": "delta", "reply_id": self.reply_id, "offset": offset, "text": text})

    async def _stream_cached(self, answer: str, started: float, *, from_cache: bool) -> Message:
        for i in range(0, len(answer), CACHED_CHUNK_CHARS):
            self._delta(answer[i : i + CACHED_CHUNK_CHARS])
        message: Message = await database_sync_to_async(reply_finish)(
            reply_id=self.reply_id,
            content=answer,
            finish_reason="stop",
            served_from_cache=from_cache,
            latency_ms=round((time.monotonic() - started) * 1000),
            evidence=self.ticket.cached_evidence,
        )
        return message

    async def _generate_title(self) -> None:
        """Ask the model for a short title, after the reply and as background work, so it never
        delays a reply. It counts against the tenant's quotas like any generated token. The
        first-message title stays if this fails or is refused."""
        turn = self.turn
        try:
            ticket = await database_sync_to_async(admission.admit)(
                principal=Principal(tenant=self.tenant, user=self.user),
                conversation=title_request(first_message=turn.user_message.content),
                params=title_sampling(),
                background=True,
                cacheable=False,
            )
        except Refused:
            return
        parts = []
        async with admission.held(ticket) as usage:
            async for event in get_engine_client().generate(ticket.submission):
                if isinstance(event, Delta):
                    parts.append(event.text)
                elif isinstance(event, Done):
                    usage.prompt_tokens = event.prompt_tokens
                    usage.completion_tokens = event.completion_tokens
                elif isinstance(event, Failed):
                    usage.prompt_tokens = usage.completion_tokens = 0
                    return
            await database_sync_to_async(usage_record_background)(
                session_id=turn.session.id,
                prompt_tokens=usage.prompt_tokens or 0,
                completion_tokens=usage.completion_tokens or 0,
                model=ticket.submission.model,
            )
        # Off the event loop: the language models load on first use (about a second).
        title = await sync_to_async(clean_title, thread_sensitive=False)(
            "".join(parts), question=turn.user_message.content
        )
        changed = await database_sync_to_async(session_set_generated_title)(
            session_id=turn.session.id, title=title, replaces=turn.session.title
        )
        if changed:
            self.publish(
                {"type": "session.title", "session": {"id": str(turn.session.id), "title": title}}
            )

    # --- stop, presence, access -------------------------------------------------------------

    async def _guard(self) -> None:
        """End the reply when its user has had no socket open here for the grace period, or
        lost access to the tenant (re-checked like an open socket is)."""
        grace = float(settings.QASSIST_REPLY_GRACE_SECONDS)
        recheck = max(1.0, float(settings.QASSIST_WS_RECHECK_SECONDS))
        interval = max(0.05, min(1.0, grace / 3))
        last_seen = last_check = time.monotonic()
        principal = Principal(tenant=self.tenant, user=self.user)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            if _online.get(self.user.pk, 0) > 0:
                last_seen = now
            elif now - last_seen > grace:
                logger.info("reply %s: nobody watching for %.0f s, stopping", self.reply_id, grace)
                self.request_stop(ABSENT)
                return
            if now - last_check >= recheck:
                last_check = now
                try:
                    member = await database_sync_to_async(principal_is_member)(principal=principal)
                except Exception:  # the database away for a moment: check again later
                    member = True
                if not member:
                    self.request_stop(FORBIDDEN)
                    return

    def snapshot(self) -> dict[str, Any]:
        """The whole reply so far, for a socket that joins mid-reply; deltas after it carry
        offsets from `offset` on."""
        reply = message_data(
            self.turn.reply, self.turn.versions.get(self.reply_id), sources=self.turn.sources
        )
        reply["content"] = "".join(self.parts)
        return {"type": "reply.resume", "reply": reply, "offset": self.chars}

    def request_stop(self, cut: str = "") -> None:
        """End the reply: the engine stops within a step and the text so far is kept."""
        if cut and not self.cut:
            self.cut = cut
        self.stop_requested = True
        self.stopped.set()
        if self.streaming and not self.cancel_sent:
            self.cancel_sent = True
            task = asyncio.create_task(get_engine_client().cancel(self.request_id))
            _background.add(task)
            task.add_done_callback(_background.discard)


_background: set[asyncio.Task[None]] = set()  # cancels on their way to the engine


async def start(*, turn: Turn, ticket: Ticket, user: User, tenant: Tenant) -> ReplyRun:
    """Run an admitted, stored turn's reply as a task of this process."""
    run = ReplyRun(turn=turn, ticket=ticket, user=user, tenant=tenant)
    _runs[run.reply_id] = run
    run.task = asyncio.create_task(run.main())
    return run


def _error_frame(
    code: str, message: str, reply_id: int | None = None, retry_after: float | None = None
) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "error", "code": code, "message": message}
    if reply_id is not None:
        frame["reply_id"] = reply_id
    if retry_after is not None:
        frame["retry_after"] = retry_after
    return frame
