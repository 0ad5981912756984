"""The chat websocket: `/ws/chat/`. Protocol in docs/websocket.md.

Thin: authorise from the scope, call chat.services and chat.admission through
database_sync_to_async, and translate engine events into frames. One reply streams at a time
per connection; it runs as a task so a `chat.stop` can arrive while it streams.

Whatever a client sends — binary, empty, huge or malformed frames, floods — gets an error frame,
never a crash: a consumer that died would orphan its reply, generating for nobody. While open,
the connection re-checks its login and membership; losing either closes it (4403) and stops its
reply.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth.models import User
from django.http import Http404

from chat import admission, services
from chat.admission import Refused, Ticket
from chat.keepalive import keep_reply_alive
from chat.models import Message
from chat.services import ChatError, Turn, TurnPlan
from inference.service import get_engine_client
from inference.types import Delta, Done, Failed, Queued
from tenants.models import Tenant
from tenants.services import Principal, connection_allowed, membership_for

logger = logging.getLogger(__name__)

SAVE_EVERY_SECONDS = 0.5  # how often a streaming reply's text is written to the database
CACHED_CHUNK_CHARS = 24  # a cached answer is streamed in chunks like a generated one
MAX_FRAME_CHARS = 256_000  # a message of MAX_MESSAGE_CHARS, JSON-escaped, fits well within
FRAMES_PER_SECOND = 10  # sustained rate a client may send frames at ...
FRAME_BURST = 30  # ... after a burst of this many
CLOSE_FORBIDDEN = 4403
CLOSE_TOO_MANY = 4429

# Open sockets per user in this process: a script opening hundreds cannot exhaust it.
_sockets_per_user: collections.Counter[int] = collections.Counter()


class ChatConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    # Nothing reaches a chat socket through the channel layer (replies come from the engine
    # client), so it joins none: an alias that names no layer. Otherwise every open socket
    # would sit in the layer's Redis receive loop, and a Redis restart would crash them all.
    channel_layer_alias = "none"

    tenant: Tenant
    user: User
    _task: asyncio.Task[None] | None = None
    _title_task: asyncio.Task[None] | None = None
    _recheck_task: asyncio.Task[None] | None = None
    _request_id: str | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        session = self.scope.get("session")
        slug = session.get("tenant") if session is not None else None
        membership = await database_sync_to_async(membership_for)(user=user, tenant_slug=slug)
        if membership is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        if _sockets_per_user[user.pk] >= settings.QASSIST_WS_MAX_PER_USER:
            await self.close(code=CLOSE_TOO_MANY)
            return
        _sockets_per_user[user.pk] += 1
        self._counted = True
        self.user = user
        self.tenant = membership.tenant
        self._allowance = float(FRAME_BURST)
        self._allowance_at = time.monotonic()
        self._flood_told_at = 0.0
        await self.accept()
        self._recheck_task = asyncio.create_task(self._recheck_forever())

    async def disconnect(self, code: int) -> None:
        if getattr(self, "_counted", False):
            self._counted = False
            _sockets_per_user[self.user.pk] -= 1
            if _sockets_per_user[self.user.pk] <= 0:
                del _sockets_per_user[self.user.pk]
        await self._stop_tasks()

    async def _stop_tasks(self) -> None:
        # Leaving mid-reply cancels it: the engine frees the sequence within one step, and the
        # text so far is kept, marked interrupted.
        current = asyncio.current_task()
        for task in (self._task, self._title_task, self._recheck_task):
            if task is not None and task is not current and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    # --- access, re-checked while the socket is open ------------------------------------------

    async def _recheck_forever(self) -> None:
        interval = max(1, int(settings.QASSIST_WS_RECHECK_SECONDS))
        while True:
            await asyncio.sleep(interval)
            if not await self._still_allowed():
                await self._forbid()
                return

    async def _still_allowed(self) -> bool:
        session = self.scope.get("session")
        try:
            return bool(
                await database_sync_to_async(connection_allowed)(
                    session_key=session.session_key if session is not None else None,
                    user_id=self.user.pk,
                    tenant_id=self.tenant.pk,
                )
            )
        except Exception:  # the database away for a moment: keep the socket, check again
            logger.warning("could not re-check the access of websocket user %s", self.user.pk)
            return True

    async def _forbid(self) -> None:
        """Logged out, removed from the tenant, or deactivated: stop the reply, close."""
        await self._stop_tasks()
        with contextlib.suppress(Exception):
            await self._error("forbidden", "You no longer have access to this conversation.")
        await self.close(code=CLOSE_FORBIDDEN)

    # --- frames from the browser -------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        allowed, notify = self._take_allowance()
        if not allowed:
            if notify:
                await self._error("too_many_frames", "Slow down: frames are being dropped.")
            return
        if text_data is None:
            await self._error("bad_frame", "Frames must be text: JSON objects with a type.")
            return
        if len(text_data) > MAX_FRAME_CHARS:
            await self._error("frame_too_large", "That frame is too large.")
            return
        if not text_data.strip():
            await self._error("bad_frame", "Each frame must be a JSON object with a type.")
            return
        await self.receive_json(await self.decode_json(text_data))

    def _take_allowance(self) -> tuple[bool, bool]:
        """A token bucket per connection: a flood is dropped, with one notice a second.
        Returns (allowed, tell the client)."""
        now = time.monotonic()
        self._allowance = min(
            float(FRAME_BURST), self._allowance + (now - self._allowance_at) * FRAMES_PER_SECOND
        )
        self._allowance_at = now
        if self._allowance >= 1:
            self._allowance -= 1
            return True, False
        if now - self._flood_told_at >= 1:
            self._flood_told_at = now
            return False, True
        return False, False

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if not isinstance(kind, str):
            await self._error("bad_frame", "Each frame must be a JSON object with a type.")
            return
        handlers = {
            "chat.send": self._on_send,
            "chat.regenerate": self._on_regenerate,
            "chat.edit": self._on_edit,
            "chat.stop": self._on_stop,
        }
        handler = handlers.get(kind)
        if handler is None:
            await self._error("unknown_type", f"Unknown frame type {kind[:40]!r}.")
            return
        try:
            await handler(content)
        except ChatError as exc:
            await self._error(exc.code, exc.message)
        except Http404:
            await self._error("not_found", "No such conversation.")
        except Refused as exc:
            if exc.code in ("tenant_inactive", "forbidden"):
                await self._forbid()
                return
            await self._error(exc.code, exc.message, retry_after=exc.retry_after)
        except Exception:
            logger.exception("websocket frame %r failed", kind)
            await self._error("internal", "Something went wrong; try again.")

    async def decode_json(self, text_data: str) -> Any:
        try:
            return await super().decode_json(text_data)
        except ValueError:
            return None

    async def _on_send(self, content: dict[str, Any]) -> None:
        self._check_idle()
        session_id = services.check_session_id(content.get("session"))
        plan = await database_sync_to_async(services.turn_prepare_send)(
            user=self.user,
            tenant=self.tenant,
            session_id=session_id,
            content=content.get("content"),
        )
        await self._begin(plan)

    async def _on_regenerate(self, content: dict[str, Any]) -> None:
        self._check_idle()
        session_id = self._required_session(content)
        plan = await database_sync_to_async(services.turn_prepare_regenerate)(
            user=self.user, tenant=self.tenant, session_id=session_id
        )
        await self._begin(plan)

    async def _on_edit(self, content: dict[str, Any]) -> None:
        self._check_idle()
        session_id = self._required_session(content)
        plan = await database_sync_to_async(services.turn_prepare_edit)(
            user=self.user,
            tenant=self.tenant,
            session_id=session_id,
            content=content.get("content"),
        )
        await self._begin(plan)

    async def _on_stop(self, content: dict[str, Any]) -> None:
        if self._request_id is not None:
            await get_engine_client().cancel(self._request_id)

    def _check_idle(self) -> None:
        if self._task is not None and not self._task.done():
            raise ChatError("busy_connection", "Wait for the reply, or stop it, before sending.")

    @staticmethod
    def _required_session(content: dict[str, Any]) -> Any:
        session_id = services.check_session_id(content.get("session"))
        if session_id is None:
            raise ChatError("not_found", "No such conversation.")
        return session_id

    # --- one reply -------------------------------------------------------------------------------

    async def _begin(self, plan: TurnPlan) -> None:
        turn, ticket = await database_sync_to_async(admission.turn_begin)(
            plan=plan,
            principal=Principal(tenant=self.tenant, user=self.user),
            params=services.default_sampling(),
        )
        await self.send_json(
            {
                "type": "reply.start",
                "session": {"id": str(turn.session.id), "title": turn.session.title},
                "session_created": turn.session_created,
                "user_message": services.message_data(
                    turn.user_message, turn.versions.get(turn.user_message.id)
                ),
                "reply": services.message_data(turn.reply, turn.versions.get(turn.reply.id)),
            }
        )
        self._task = asyncio.create_task(self._stream(turn, ticket))

    async def _stream(self, turn: Turn, ticket: Ticket) -> None:
        reply_id = turn.reply.id
        started = time.monotonic()
        if ticket.cached is not None:
            async with admission.held(ticket):
                message = await self._stream_cached(reply_id, ticket.cached.answer, started)
            await self._send_done(message)
            return
        async with admission.held(ticket) as usage:
            self._request_id = ticket.submission.request_id
            parts: list[str] = []
            deltas = 0
            last_save = time.monotonic()
            outcome: dict[str, Any] = {"finish_reason": "error", "error": ""}
            keep_alive = keep_reply_alive(reply_id)
            try:
                async for event in get_engine_client().generate(ticket.submission):
                    if isinstance(event, Queued):
                        await self._send("queued", reply_id, position=event.position)
                    elif isinstance(event, Delta):
                        parts.append(event.text)
                        deltas += 1
                        await self._send("delta", reply_id, text=event.text)
                        if time.monotonic() - last_save >= SAVE_EVERY_SECONDS:
                            last_save = time.monotonic()
                            await database_sync_to_async(services.reply_save_progress)(
                                reply_id=reply_id, content="".join(parts)
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
                        await self._error(event.code, event.message, reply_id, event.retry_after)
            except asyncio.CancelledError:
                # The socket closed mid-reply; a Stop ends through the engine's Done("cancelled").
                outcome = {"finish_reason": "disconnected", "error": ""}
                raise
            except Exception:
                logger.exception("streaming reply %s failed", reply_id)
                outcome = {
                    "finish_reason": "error",
                    "error": "The reply failed unexpectedly.",
                    "error_code": "internal",
                }
                await self._error("internal", outcome["error"], reply_id)
            finally:
                keep_alive.cancel()
                self._request_id = None
                if usage.completion_tokens is None:
                    # No end report from the engine (a failure, or a worker that died): charge
                    # what reached the user, not the worst case.
                    usage.prompt_tokens = ticket.prompt_tokens if deltas else 0
                    usage.completion_tokens = deltas
                    outcome.setdefault("prompt_tokens", usage.prompt_tokens)
                    outcome.setdefault("completion_tokens", usage.completion_tokens)
                message = await asyncio.shield(
                    database_sync_to_async(services.reply_finish)(
                        reply_id=reply_id,
                        content="".join(parts),
                        latency_ms=round((time.monotonic() - started) * 1000),
                        **outcome,
                    )
                )
        # Told only once the limits are settled: the client may send its next turn at once.
        await self._send_done(message)
        if (
            turn.session_created
            and message.status == Message.Status.COMPLETE
            and settings.QASSIST_GENERATE_TITLES
        ):
            self._title_task = asyncio.create_task(self._generate_title(turn))

    async def _generate_title(self, turn: Turn) -> None:
        """Ask the model for a short title, after the reply and as background work, so it never
        delays a reply. It counts against the tenant's quotas like any generated token. The
        first-message title stays if this fails or is refused."""
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
        title = services.clean_title("".join(parts), question=turn.user_message.content)
        changed = await database_sync_to_async(services.session_set_generated_title)(
            session_id=turn.session.id, title=title, replaces=turn.session.title
        )
        if changed:
            await self.send_json(
                {"type": "session.title", "session": {"id": str(turn.session.id), "title": title}}
            )

    async def _stream_cached(self, reply_id: int, answer: str, started: float) -> Message:
        for i in range(0, len(answer), CACHED_CHUNK_CHARS):
            await self._send("delta", reply_id, text=answer[i : i + CACHED_CHUNK_CHARS])
        message: Message = await database_sync_to_async(services.reply_finish)(
            reply_id=reply_id,
            content=answer,
            finish_reason="stop",
            served_from_cache=True,
            latency_ms=round((time.monotonic() - started) * 1000),
        )
        return message

    async def _send_done(self, message: Message) -> None:
        await self.send_json({"type": "reply.done", "reply": services.message_data(message)})

    async def _send(self, kind: str, reply_id: int, **fields: Any) -> None:
        await self.send_json({"type": kind, "reply_id": reply_id, **fields})

    async def _error(
        self,
        code: str,
        message: str,
        reply_id: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        frame: dict[str, Any] = {"type": "error", "code": code, "message": message}
        if reply_id is not None:
            frame["reply_id"] = reply_id
        if retry_after is not None:
            frame["retry_after"] = retry_after
        await self.send_json(frame)
