"""A live reply says so: its web process touches it while it waits and streams.

The stale-reply sweep (chat.tasks.interrupt_stale_replies) takes a reply left `streaming` and
untouched for chat.services.replies.STALE_STREAM_SECONDS for one whose web process died. A
reply waiting in the engine's queue writes no text, and the REST API writes none until the end,
so whoever streams a reply starts this beside it (every replies.REPLY_KEEPALIVE_SECONDS) and
cancels it when the reply ends.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging

from channels.db import database_sync_to_async

from chat.services import replies

logger = logging.getLogger(__name__)


def keep_reply_alive(reply_id: int) -> asyncio.Task[None]:
    """Start touching the reply; cancel the task it returns when the reply has ended.

    The task runs in a context of its own: it may outlive the request's thread-sensitive
    context (a REST stream is read after the view returned), and must still reach the database.
    """
    return asyncio.create_task(_touch_forever(reply_id), context=contextvars.Context())


async def _touch_forever(reply_id: int) -> None:
    while True:
        await asyncio.sleep(replies.REPLY_KEEPALIVE_SECONDS)
        try:
            await database_sync_to_async(replies.reply_keep_alive)(reply_id=reply_id)
        except Exception as exc:  # the database may be down for a moment: try again later
            logger.warning("could not keep reply %s alive: %s", reply_id, exc)
