"""Citations for replies from company knowledge, on every surface (the chat, REST).

The model is asked to answer from its passages, not to cite them: a 0.5B model asked for [2]
answers "[2]" (knowledge.citations). So when a reply ends, the passages its words come from are
cited after it, as one more piece of text before the end: streamed like the rest, stored with
it, and marked as cited under it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from channels.db import database_sync_to_async

from inference.types import Delta, Done, Event
from knowledge import turns as knowledge

CITED_ENDINGS = ("stop", "length")  # a reply cut by Stop or an error is left as it is


async def with_citations(
    events: AsyncIterator[Event], *, question_message_id: int, cite: bool
) -> AsyncIterator[Event]:
    """`events`, with the citation of the passages the reply rests on as a last `Delta` before
    its `Done` (`cite`: the question was given passages, and the reply is prose, not JSON or a
    tool call). Closing this closes `events`, which cancels the generation."""
    parts: list[str] = []
    async with contextlib.aclosing(events):  # type: ignore[type-var]
        async for event in events:
            if cite and isinstance(event, Delta):
                parts.append(event.text)
            elif cite and isinstance(event, Done) and event.finish_reason in CITED_ENDINGS:
                suffix = await database_sync_to_async(knowledge.reply_citation)(
                    question_message_id=question_message_id, reply_text="".join(parts)
                )
                if suffix:
                    yield Delta(event.request_id, suffix)
            yield event
