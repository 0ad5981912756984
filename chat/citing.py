"""The support check of replies from company knowledge, on every surface (the chat, REST).

The model is asked to answer from its passages, not to cite them: a 0.5B model asked for [2]
answers "[2]" (knowledge.citations). So when a reply ends, qassist checks what it states
against the passages of its conversation (knowledge.support): the passages that hold its
figures and names are cited after it, as one more piece of text before the end (streamed like
the rest, stored with it); a claim that no sentence about the question holds gets the warning
instead; the sentences quoted, and the verdict, are stored with the reply (`Checked`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from channels.db import database_sync_to_async

from inference.types import Delta, Done, Event
from knowledge import support

CITED_ENDINGS = ("stop", "length")  # a reply cut by Stop or an error is left as it is


@dataclass(frozen=True)
class Checked:
    """The support check's outcome, passed on just before the reply's `Done` (not an engine
    event: it never crosses the transport)."""

    request_id: str
    record: dict[str, Any] = field(default_factory=dict)  # stored as Message.evidence
    # Documents only, and the reply states what the documents do not: the reply's whole text
    # is replaced by this (what the documents come closest to saying).
    replacement: str | None = None


async def with_citations(
    events: AsyncIterator[Event],
    *,
    question_message_id: int,
    cite: bool,
    chinese_notes: bool | None = None,
) -> AsyncIterator[Event | Checked]:
    """`events`, with the support check's citation or warning as a last `Delta` and its
    `Checked` outcome before the reply's `Done` (`cite`: the question was given passages, and
    the reply is prose, not JSON or a tool call; `chinese_notes`: the reply's language decides
    the notes', chat.reply_language). Closing this closes `events`, which cancels the
    generation."""
    parts: list[str] = []
    async with contextlib.aclosing(events):  # type: ignore[type-var]
        async for event in events:
            if cite and isinstance(event, Delta):
                parts.append(event.text)
            elif cite and isinstance(event, Done) and event.finish_reason in CITED_ENDINGS:
                checked = await database_sync_to_async(support.reply_evidence)(
                    question_message_id=question_message_id,
                    reply_text="".join(parts),
                    chinese_notes=chinese_notes,
                )
                if checked.suffix and checked.replacement is None:
                    yield Delta(event.request_id, checked.suffix)
                if checked.record:
                    yield Checked(event.request_id, checked.record, checked.replacement)
            yield event
