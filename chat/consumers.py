"""The chat websocket: `/ws/chat/`. Protocol in docs/websocket.md.

Thin: authorise from the scope, call chat.services and chat.admission through
database_sync_to_async, and hand an admitted turn's reply to the process (chat/replies.py): the
reply does not belong to the socket, which only watches its conversation (a channel-layer group)
and forwards the frames. Closing the socket does not stop the reply; Stop, the user's absence
for the grace period, or losing access does.

Whatever a client sends — binary, empty, huge, malformed or too deeply nested frames, text that
is not Unicode (a lone surrogate), floods — gets an error frame,
never a crash: a consumer that died would orphan its reply, generating for nobody. While open,
the connection re-checks its login and membership; losing either closes it (4403) and stops its
reply. A login from the identity provider is renewed with it there once due (signin.services).
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

from chat import admission, replies
from chat.admission import Refused
from chat.replies import ReplyRun
from chat.services.checks import ChatError, check_session_id
from chat.services.replies import reply_streaming_id
from chat.services.sampling import default_sampling
from chat.services.sessions import session_get
from chat.services.turns import (
    TurnPlan,
    turn_prepare_edit,
    turn_prepare_regenerate,
    turn_prepare_send,
)
from qassist.json_input import JsonInputError, parse_json
from signin import services as signin_services
from tenants.models import Tenant
from tenants.services import Principal, connection_allowed, membership_for

logger = logging.getLogger(__name__)

MAX_FRAME_CHARS = 256_000  # a message of MAX_MESSAGE_CHARS, JSON-escaped, fits well within
FRAMES_PER_SECOND = 10  # sustained rate a client may send frames at ...
FRAME_BURST = 30  # ... after a burst of this many
CLOSE_FORBIDDEN = 4403
CLOSE_TOO_MANY = 4429

# Open sockets per user in this process: a script opening hundreds cannot exhaust it.
_sockets_per_user: collections.Counter[int] = collections.Counter()


class ChatConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    # Nothing reaches a chat socket through the channel layer (replies reach the sockets of
    # their process directly: chat/replies.py), so it joins none: an alias that names no layer.
    # Otherwise every open socket would sit in the layer's Redis receive loop, and a Redis
    # restart would crash them all.
    channel_layer_alias = "none"

    tenant: Tenant
    user: User
    _run: ReplyRun | None = None  # the reply this socket started last
    _recheck_task: asyncio.Task[None] | None = None
    _writer: asyncio.Task[None] | None = None
    _opened = False

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
        # Frames of the watched conversation's replies, in order, written by one task.
        self._outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._writer = asyncio.create_task(self._write_forever())
        replies.socket_opened(user_id=user.pk)
        self._opened = True
        self._recheck_task = asyncio.create_task(self._recheck_forever())

    async def disconnect(self, code: int) -> None:
        if getattr(self, "_counted", False):
            self._counted = False
            _sockets_per_user[self.user.pk] -= 1
            if _sockets_per_user[self.user.pk] <= 0:
                del _sockets_per_user[self.user.pk]
        # The reply goes on without this socket (chat/replies.py); only the watching stops.
        if self._opened:
            self._opened = False
            replies.socket_closed(user_id=self.user.pk, watcher=self)
        await self._stop_tasks()
        if self._writer is not None:
            self._writer.cancel()

    async def _stop_tasks(self) -> None:
        current = asyncio.current_task()
        task = self._recheck_task
        if task is not None and task is not current and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def deliver(self, frame: dict[str, Any]) -> None:
        """A frame of a reply in the watched conversation (chat.replies.Watcher)."""
        self._outbox.put_nowait(frame)

    async def _write_forever(self) -> None:
        while True:
            frame = await self._outbox.get()
            with contextlib.suppress(Exception):  # the socket may be closing
                await self.send_json(frame)

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
            if session is not None and session.get(signin_services.SESSION_FLAG):
                # A session from the identity provider, due: renewed (memberships following
                # the groups it sends now) or ended, which the check below then sees.
                await database_sync_to_async(signin_services.provider_session_recheck)(
                    session_key=session.session_key
                )
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
        """Logged out, removed from the tenant, or deactivated: stop the user's replies in
        this tenant, close. (A reply in another process stops by its own re-check.)"""
        await self._stop_tasks()
        with contextlib.suppress(Exception):
            tasks = [
                r.task
                for r in replies.revoke(user_id=self.user.pk, tenant_id=self.tenant.pk)
                if r.task is not None
            ]
            if tasks:
                # Their text is stored before the socket closes (the engine stops within a step).
                await asyncio.wait_for(asyncio.shield(asyncio.gather(*tasks)), timeout=10)
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
        try:
            content = parse_json(text_data)
        except JsonInputError as exc:
            if exc.kind == "surrogate":
                await self._error("invalid_message", exc.message)
            elif exc.kind == "depth":
                await self._error("bad_frame", exc.message)
            else:
                await self._error("bad_frame", "Each frame must be a JSON object with a type.")
            return
        await self.receive_json(content)

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
            "chat.subscribe": self._on_subscribe,
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

    async def _on_send(self, content: dict[str, Any]) -> None:
        self._check_idle()
        session_id = check_session_id(content.get("session"))
        plan = await database_sync_to_async(turn_prepare_send)(
            user=self.user,
            tenant=self.tenant,
            session_id=session_id,
            content=content.get("content"),
        )
        await self._begin(plan, content.get("model"))

    async def _on_regenerate(self, content: dict[str, Any]) -> None:
        self._check_idle()
        session_id = self._required_session(content)
        plan = await database_sync_to_async(turn_prepare_regenerate)(
            user=self.user, tenant=self.tenant, session_id=session_id
        )
        await self._begin(plan, content.get("model"))

    async def _on_edit(self, content: dict[str, Any]) -> None:
        self._check_idle()
        session_id = self._required_session(content)
        plan = await database_sync_to_async(turn_prepare_edit)(
            user=self.user,
            tenant=self.tenant,
            session_id=session_id,
            content=content.get("content"),
            message_id=content.get("message"),  # absent: the last question of the branch
        )
        await self._begin(plan, content.get("model"))

    async def _on_stop(self, content: dict[str, Any]) -> None:
        """Stop the reply being written in `session` (default: the one this socket started),
        whichever socket started it."""
        run = self._run
        raw = content.get("session")
        if raw in (None, "") and run is not None:
            run.request_stop()
            return
        session_id = check_session_id(raw)
        if session_id is None:
            return
        session = await database_sync_to_async(session_get)(
            user=self.user, session_id=session_id, tenant=self.tenant
        )
        replies.stop_session(session_id=str(session.id))

    async def _on_subscribe(self, content: dict[str, Any]) -> None:
        """Watch a conversation: its replies' frames from now on, and, if one is being
        written, the whole of it so far first (`reply.resume`)."""
        session_id = self._required_session(content)
        session = await database_sync_to_async(session_get)(
            user=self.user, session_id=session_id, tenant=self.tenant
        )
        streaming = await database_sync_to_async(reply_streaming_id)(session=session)
        # One step, no await: the snapshot and the deltas after it join exactly.
        resume = replies.watch(watcher=self, session_id=str(session.id))
        if resume is not None:
            streaming = resume["reply"]["id"]
        self.deliver({"type": "subscribed", "session": str(session.id), "streaming": streaming})
        if resume is not None:
            self.deliver(resume)

    def _check_idle(self) -> None:
        if self._run is not None and not self._run.done:
            raise ChatError("busy_connection", "Wait for the reply, or stop it, before sending.")

    @staticmethod
    def _required_session(content: dict[str, Any]) -> Any:
        session_id = check_session_id(content.get("session"))
        if session_id is None:
            raise ChatError("not_found", "No such conversation.")
        return session_id

    # --- one reply -------------------------------------------------------------------------------

    async def _begin(self, plan: TurnPlan, model: object = None) -> None:
        """`model`: the frame's pick (issue #36), None when it names none."""
        turn, ticket = await database_sync_to_async(admission.turn_begin)(
            plan=plan,
            principal=Principal(tenant=self.tenant, user=self.user),
            params=default_sampling(),
            model=model,
        )
        # Watch the conversation before its reply starts: reply.start is its first frame.
        replies.watch(watcher=self, session_id=str(turn.session.id))
        self._run = await replies.start(
            turn=turn, ticket=ticket, user=self.user, tenant=self.tenant
        )

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
