"""Replies owned by the web process, not by a socket.

A chat reply runs as a task of the process that admitted it (`start`), and tells everyone
watching its conversation through the channel layer: the group `chat.session.<id>` gets each
frame (`reply.start`, `queued`, `delta` with its character `offset`, `error`, `reply.done`,
`session.title`). Sockets come and go — a reload, another tab, switching conversations, a
network blip — and the reply goes on. A socket that opens the conversation later asks for a
snapshot (`reply.snapshot_request`, to the control group) and gets the whole text so far from
the run itself (`reply.resume`), then the live deltas; offsets make the join exact: nothing
missed, nothing twice.

A run ends by itself (its own limits), by Stop (`reply.stop` to the group
`chat.session.<id>.control`, from any of the user's sockets), when its user has had no socket
open for `QASSIST_REPLY_GRACE_SECONDS` (it pings the group `chat.user.<id>`; each of the user's
sockets answers `reply.here` to the run's own channel), or when the user loses access to the
tenant (`reply.revoke` to `chat.user.<id>.control`, sent by a socket closed with 4403). Runs
listen on the `.control` groups only, sockets on the others only: frames never reach runs,
control messages never reach sockets.

Admission is unchanged: the ticket was admitted before the turn was stored; the run holds its
lease while it streams and settles when it ends (`admission.held`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth.models import User

from chat import admission, services
from chat.admission import Refused, Ticket
from chat.models import Message
from chat.services import Turn
from inference.service import get_engine_client
from inference.types import Delta, Done, Failed, Queued
from tenants.models import Tenant
from tenants.services import Principal

logger = logging.getLogger(__name__)

SAVE_EVERY_SECONDS = 0.5  # how often a streaming reply's text is written to the database
CACHED_CHUNK_CHARS = 24  # a cached answer is streamed in chunks like a generated one

# Why a run was cut short by something else than its user's Stop.
ABSENT = "absent"
FORBIDDEN = "forbidden"


def session_group(session_id: uuid.UUID | str) -> str:
    return f"chat.session.{session_id}"


def user_group(user_id: int) -> str:
    return f"chat.user.{user_id}"


# The runs' own groups: control messages reach runs only, frames reach sockets only.
def session_control_group(session_id: uuid.UUID | str) -> str:
    return f"chat.session.{session_id}.control"


def user_control_group(user_id: int) -> str:
    return f"chat.user.{user_id}.control"


def frame_event(frame: dict[str, Any]) -> dict[str, Any]:
    """A frame for the browser, as a channel-layer message (`ChatConsumer.chat_frame`)."""
    return {"type": "chat.frame", "frame": frame}


@dataclass
class ReplyRun:
    turn: Turn
    ticket: Ticket
    user: User
    tenant: Tenant
    inbox: str = ""
    parts: list[str] = field(default_factory=list)
    chars: int = 0
    task: asyncio.Task[None] | None = None
    cut: str = ""  # ABSENT or FORBIDDEN once the run is being ended for that reason
    streaming: bool = False  # from the engine's first event to the end
    stop_requested: bool = False  # a stop that came before the engine had the request
    cancel_sent: bool = False

    @property
    def reply_id(self) -> int:
        return self.turn.reply.id

    @property
    def group(self) -> str:
        return session_group(self.turn.session.id)

    @property
    def done(self) -> bool:
        return self.task is None or self.task.done()

    async def publish(self, frame: dict[str, Any]) -> None:
        await get_channel_layer().group_send(self.group, frame_event(frame))

    # --- the run ---------------------------------------------------------------------------

    async def main(self) -> None:
        layer = get_channel_layer()
        control = asyncio.create_task(self._control())
        presence = asyncio.create_task(self._watch_presence())
        try:
            await self.publish(
                {
                    "type": "reply.start",
                    "session": {"id": str(self.turn.session.id), "title": self.turn.session.title},
                    "session_created": self.turn.session_created,
                    "user_message": services.message_data(
                        self.turn.user_message, self.turn.versions.get(self.turn.user_message.id)
                    ),
                    "reply": services.message_data(
                        self.turn.reply, self.turn.versions.get(self.reply_id)
                    ),
                }
            )
            message = await self._stream()
            await self.publish({"type": "reply.done", "reply": services.message_data(message)})
            if (
                self.turn.session_created
                and message.status == Message.Status.COMPLETE
                and settings.QASSIST_GENERATE_TITLES
            ):
                presence.cancel()
                await self._generate_title()
        except Exception:
            logger.exception("reply %s failed", self.reply_id)
        finally:
            for task in (control, presence):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            with contextlib.suppress(Exception):
                await layer.group_discard(session_control_group(self.turn.session.id), self.inbox)
                await layer.group_discard(user_control_group(self.user.pk), self.inbox)
            _runs.pop(self.reply_id, None)

    async def _stream(self) -> Message:
        reply_id = self.reply_id
        ticket = self.ticket
        started = time.monotonic()
        if ticket.cached is not None:
            async with admission.held(ticket):
                return await self._stream_cached(ticket.cached.answer, started)
        async with admission.held(ticket) as usage:
            deltas = 0
            last_save = time.monotonic()
            outcome: dict[str, Any] = {"finish_reason": "error", "error": ""}
            try:
                async for event in get_engine_client().generate(ticket.submission):
                    self.streaming = True  # the engine has the request: a cancel reaches it
                    if self.stop_requested and not self.cancel_sent:
                        await self.cancel()
                    if isinstance(event, Queued):
                        await self.publish(
                            {"type": "queued", "reply_id": reply_id, "position": event.position}
                        )
                    elif isinstance(event, Delta):
                        await self._delta(event.text)
                        deltas += 1
                        if time.monotonic() - last_save >= SAVE_EVERY_SECONDS:
                            last_save = time.monotonic()
                            await database_sync_to_async(services.reply_save_progress)(
                                reply_id=reply_id, content="".join(self.parts)
                            )
                    elif isinstance(event, Done):
                        usage.prompt_tokens = event.prompt_tokens
                        usage.completion_tokens = event.completion_tokens
                        outcome = {
                            "finish_reason": event.finish_reason,
                            "error": "",
                            "prompt_tokens": event.prompt_tokens,
                            "completion_tokens": event.completion_tokens,
                            "ttft_ms": event.ttft_ms,
                        }
                    elif isinstance(event, Failed):
                        outcome = {
                            "finish_reason": "error",
                            "error": event.message,
                            "error_code": event.code,
                        }
                        await self.publish(
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
                await self.publish(_error_frame("internal", outcome["error"], reply_id))
            finally:
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
                    database_sync_to_async(services.reply_finish)(
                        reply_id=reply_id,
                        content="".join(self.parts),
                        latency_ms=round((time.monotonic() - started) * 1000),
                        **outcome,
                    )
                )
        return message

    async def _delta(self, text: str) -> None:
        offset = self.chars
        self.parts.append(text)
        self.chars += len(text)
        await self.publish(
            {"type": "delta", "reply_id": self.reply_id, "offset": offset, "text": text}
        )

    async def _stream_cached(self, answer: str, started: float) -> Message:
        for i in range(0, len(answer), CACHED_CHUNK_CHARS):
            await self._delta(answer[i : i + CACHED_CHUNK_CHARS])
        message: Message = await database_sync_to_async(services.reply_finish)(
            reply_id=self.reply_id,
            content=answer,
            finish_reason="stop",
            served_from_cache=True,
            latency_ms=round((time.monotonic() - started) * 1000),
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
                conversation=services.title_request(first_message=turn.user_message.content),
                params=services.title_sampling(),
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
            await database_sync_to_async(services.usage_record_background)(
                session_id=turn.session.id,
                prompt_tokens=usage.prompt_tokens or 0,
                completion_tokens=usage.completion_tokens or 0,
            )
        # Off the event loop: the language models load on first use (about a second).
        title = await sync_to_async(services.clean_title, thread_sensitive=False)(
            "".join(parts), question=turn.user_message.content
        )
        changed = await database_sync_to_async(services.session_set_generated_title)(
            session_id=turn.session.id, title=title, replaces=turn.session.title
        )
        if changed:
            await self.publish(
                {"type": "session.title", "session": {"id": str(turn.session.id), "title": title}}
            )

    # --- control: stop, snapshots, presence, revocation ------------------------------------

    async def _control(self) -> None:
        layer = get_channel_layer()
        while True:
            message = await layer.receive(self.inbox)
            kind = message.get("type")
            if kind == "reply.stop" and message.get("reply_id") in (None, self.reply_id):
                await self.cancel()
            elif kind == "reply.snapshot_request":
                with contextlib.suppress(Exception):  # the asker may be gone already
                    await layer.send(message["reply_to"], frame_event(self.snapshot()))
            elif kind == "reply.here":
                self._last_seen = time.monotonic()
            elif kind == "reply.revoke" and message.get("tenant_id") == self.tenant.pk:
                await self.cancel(FORBIDDEN)

    _last_seen: float = 0.0

    async def _watch_presence(self) -> None:
        """Ask the user's sockets, every few seconds, whether any is still open; none for the
        grace period ends the reply."""
        layer = get_channel_layer()
        grace = float(settings.QASSIST_REPLY_GRACE_SECONDS)
        interval = max(0.05, min(5.0, grace / 3))
        self._last_seen = time.monotonic()
        while True:
            await layer.group_send(
                user_group(self.user.pk), {"type": "reply.ping", "inbox": self.inbox}
            )
            await asyncio.sleep(interval)
            if time.monotonic() - self._last_seen > grace:
                logger.info("reply %s: nobody watching for %.0f s, stopping", self.reply_id, grace)
                await self.cancel(ABSENT)
                return

    def snapshot(self) -> dict[str, Any]:
        """The whole reply so far, for a socket that joins mid-reply; deltas after it carry
        offsets from `offset` on."""
        reply = services.message_data(self.turn.reply, self.turn.versions.get(self.reply_id))
        reply["content"] = "".join(self.parts)
        return {"type": "reply.resume", "reply": reply, "offset": self.chars}

    async def cancel(self, cut: str = "") -> None:
        """End the reply: the engine stops within a step and the text so far is kept."""
        if cut and not self.cut:
            self.cut = cut
        self.stop_requested = True
        if self.streaming and not self.cancel_sent:
            self.cancel_sent = True
            await get_engine_client().cancel(self.ticket.submission.request_id)


_runs: dict[int, ReplyRun] = {}  # this process's running replies, by reply id


async def start(*, turn: Turn, ticket: Ticket, user: User, tenant: Tenant) -> ReplyRun:
    """Run an admitted, stored turn's reply as a task of this process."""
    layer = get_channel_layer()
    run = ReplyRun(turn=turn, ticket=ticket, user=user, tenant=tenant)
    # The default prefix: with channels_redis, every channel of a process with one prefix shares
    # one receive loop; a channel of another prefix would hold the layer's receive lock while
    # waiting on its own list, stalling the sockets' messages for seconds.
    run.inbox = await layer.new_channel()
    await layer.group_add(session_control_group(turn.session.id), run.inbox)
    await layer.group_add(user_control_group(user.pk), run.inbox)
    _runs[run.reply_id] = run
    run.task = asyncio.create_task(run.main())
    return run


def running() -> list[ReplyRun]:
    return list(_runs.values())


def _error_frame(
    code: str, message: str, reply_id: int | None = None, retry_after: float | None = None
) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "error", "code": code, "message": message}
    if reply_id is not None:
        frame["reply_id"] = reply_id
    if retry_after is not None:
        frame["retry_after"] = retry_after
    return frame
