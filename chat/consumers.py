"""The chat websocket: `/ws/chat/`. Protocol in docs/websocket.md.

Thin: authorise from the scope, call chat.services through database_sync_to_async, and translate
engine events into frames. One reply streams at a time per connection; it runs as a task so a
`chat.stop` can arrive while it streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.http import Http404

from chat import services
from chat.models import Message
from chat.services import ChatError, Turn
from inference.service import get_engine_client
from inference.types import Delta, Done, Failed, Queued
from inference.worker import Submission
from tenants.models import Tenant
from tenants.services import membership_for

logger = logging.getLogger(__name__)

SAVE_EVERY_SECONDS = 0.5  # how often a streaming reply's text is written to the database
CACHED_CHUNK_CHARS = 24  # a cached answer is streamed in chunks like a generated one


class ChatConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    tenant: Tenant
    _task: asyncio.Task[None] | None = None
    _title_task: asyncio.Task[None] | None = None
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
            await self.close(code=4403)
            return
        self.tenant = membership.tenant
        await self.accept()

    async def disconnect(self, code: int) -> None:
        # Leaving mid-reply cancels it: the engine frees the sequence within one step, and the
        # text so far is kept, marked interrupted.
        for task in (self._task, self._title_task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict):
            await self._error("bad_frame", "Each frame must be a JSON object with a type.")
            return
        handlers = {
            "chat.send": self._on_send,
            "chat.regenerate": self._on_regenerate,
            "chat.edit": self._on_edit,
            "chat.stop": self._on_stop,
        }
        handler = handlers.get(content.get("type", ""))
        if handler is None:
            await self._error("unknown_type", f"Unknown frame type {content.get('type')!r}.")
            return
        try:
            await handler(content)
        except ChatError as exc:
            await self._error(exc.code, exc.message)
        except Http404:
            await self._error("not_found", "No such conversation.")

    async def decode_json(self, text_data: str) -> Any:
        try:
            return await super().decode_json(text_data)
        except ValueError:
            return None

    # --- frames from the browser -------------------------------------------------------------

    async def _on_send(self, content: dict[str, Any]) -> None:
        self._check_idle()
        session_id = services.check_session_id(content.get("session"))
        turn = await database_sync_to_async(services.message_send)(
            user=self.scope["user"],
            tenant=self.tenant,
            session_id=session_id,
            content=content.get("content"),
        )
        await self._start(turn)

    async def _on_regenerate(self, content: dict[str, Any]) -> None:
        self._check_idle()
        session_id = services.check_session_id(content.get("session"))
        if session_id is None:
            raise ChatError("not_found", "No such conversation.")
        turn = await database_sync_to_async(services.message_regenerate)(
            user=self.scope["user"], session_id=session_id
        )
        await self._start(turn)

    async def _on_edit(self, content: dict[str, Any]) -> None:
        self._check_idle()
        session_id = services.check_session_id(content.get("session"))
        if session_id is None:
            raise ChatError("not_found", "No such conversation.")
        turn = await database_sync_to_async(services.message_edit_last)(
            user=self.scope["user"], session_id=session_id, content=content.get("content")
        )
        await self._start(turn)

    async def _on_stop(self, content: dict[str, Any]) -> None:
        if self._request_id is not None:
            await get_engine_client().cancel(self._request_id)

    def _check_idle(self) -> None:
        if self._task is not None and not self._task.done():
            raise ChatError("busy_connection", "Wait for the reply, or stop it, before sending.")

    # --- one reply -------------------------------------------------------------------------------

    async def _start(self, turn: Turn) -> None:
        await self.send_json(
            {
                "type": "reply.start",
                "session": {"id": str(turn.session.id), "title": turn.session.title},
                "session_created": turn.session_created,
                "user_message": services.message_data(turn.user_message),
                "reply": services.message_data(turn.reply),
            }
        )
        self._task = asyncio.create_task(self._stream(turn))

    async def _stream(self, turn: Turn) -> None:
        reply_id = turn.reply.id
        started = time.monotonic()
        cached = await database_sync_to_async(services.cached_reply_lookup)(
            tenant=self.tenant, conversation=turn.conversation
        )
        if cached is not None:
            await self._stream_cached(reply_id, cached.answer, started)
            return

        request_id = uuid.uuid4().hex
        self._request_id = request_id
        sub = Submission(
            request_id=request_id,
            messages=tuple(turn.conversation),
            params=services.default_sampling(),
            priority=self.tenant.priority,
        )
        parts: list[str] = []
        last_save = time.monotonic()
        outcome: dict[str, Any] = {"finish_reason": "error", "error": ""}
        try:
            async for event in get_engine_client().generate(sub):
                if isinstance(event, Queued):
                    await self._send("queued", reply_id, position=event.position)
                elif isinstance(event, Delta):
                    parts.append(event.text)
                    await self._send("delta", reply_id, text=event.text)
                    if time.monotonic() - last_save >= SAVE_EVERY_SECONDS:
                        last_save = time.monotonic()
                        await database_sync_to_async(services.reply_save_progress)(
                            reply_id=reply_id, content="".join(parts)
                        )
                elif isinstance(event, Done):
                    outcome = {
                        "finish_reason": event.finish_reason,
                        "error": "",
                        "prompt_tokens": event.prompt_tokens,
                        "completion_tokens": event.completion_tokens,
                        "ttft_ms": event.ttft_ms,
                    }
                elif isinstance(event, Failed):
                    outcome = {"finish_reason": "error", "error": event.message}
                    await self._error(event.code, event.message, reply_id, event.retry_after)
        except asyncio.CancelledError:
            outcome = {"finish_reason": "cancelled", "error": ""}
            raise
        except Exception:
            logger.exception("streaming reply %s failed", reply_id)
            outcome = {"finish_reason": "error", "error": "The reply failed unexpectedly."}
            await self._error("internal", outcome["error"], reply_id)
        finally:
            self._request_id = None
            message = await database_sync_to_async(services.reply_finish)(
                reply_id=reply_id,
                content="".join(parts),
                latency_ms=round((time.monotonic() - started) * 1000),
                **outcome,
            )
            with contextlib.suppress(Exception):  # the socket may be gone already
                await self._send_done(message)
            if (
                turn.session_created
                and message.status == Message.Status.COMPLETE
                and settings.QASSIST_GENERATE_TITLES
            ):
                self._title_task = asyncio.create_task(self._generate_title(turn))

    async def _generate_title(self, turn: Turn) -> None:
        """Ask the model for a short title, after the reply and at a lower priority than any
        reply, so it never delays one. The first-message title stays if this fails."""
        sub = Submission(
            request_id=uuid.uuid4().hex,
            messages=tuple(services.title_request(first_message=turn.user_message.content)),
            params=services.title_sampling(),
            priority=self.tenant.priority - 1,
            background=True,
        )
        parts = []
        async for event in get_engine_client().generate(sub):
            if isinstance(event, Delta):
                parts.append(event.text)
            elif isinstance(event, Failed):
                return
        title = services.clean_title("".join(parts))
        changed = await database_sync_to_async(services.session_set_generated_title)(
            session_id=turn.session.id, title=title, replaces=turn.session.title
        )
        if changed:
            await self.send_json(
                {"type": "session.title", "session": {"id": str(turn.session.id), "title": title}}
            )

    async def _stream_cached(self, reply_id: int, answer: str, started: float) -> None:
        for i in range(0, len(answer), CACHED_CHUNK_CHARS):
            await self._send("delta", reply_id, text=answer[i : i + CACHED_CHUNK_CHARS])
        message = await database_sync_to_async(services.reply_finish)(
            reply_id=reply_id,
            content=answer,
            finish_reason="stop",
            served_from_cache=True,
            latency_ms=round((time.monotonic() - started) * 1000),
        )
        await self._send_done(message)

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
