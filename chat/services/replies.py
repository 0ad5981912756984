"""Replies: kept alive while they are written, their progress saved, how they end (status,
usage, the cached-reply candidates they count towards), orphans closed, and the message object
stored and streamed messages render as."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from chat.cached_replies import candidate_record
from chat.models import ChatSession, Message
from chat.services.checks import ChatError
from inference.types import Done, Failed
from knowledge import turns as knowledge
from knowledge.access import reader_for_session
from tenants.models import UsageRecord

# A live reply is written to at least every REPLY_KEEPALIVE_SECONDS by the web process that
# streams it (text every 0.5 s while tokens arrive, a touch while it waits in the queue), so one
# not written to for STALE_STREAM_SECONDS was left behind by a web process that died. The beat
# sweep runs every 30 s: such a reply is marked interrupted, its text kept, within 90 s.
REPLY_KEEPALIVE_SECONDS = 15
STALE_STREAM_SECONDS = 60


def no_reply_in_progress(session: ChatSession) -> None:
    """Refuse to change a conversation while a reply is written in it (one left behind by a
    dead process is closed first): sessions, branches and turns all check this."""
    replies_interrupt_stale(messages=session.messages.all())
    if session.messages.filter(status=Message.Status.STREAMING).exists():
        raise ChatError("busy_session", "A reply is still being written in this conversation.")


def reply_keep_alive(*, reply_id: int) -> None:
    """Mark a reply still being worked on (waiting in the queue writes no text)."""
    Message.objects.filter(id=reply_id, status=Message.Status.STREAMING).update(
        updated_at=timezone.now()
    )


def reply_streaming_id(*, session: ChatSession) -> int | None:
    """The reply being written in `session` now, if any (an orphan is closed first)."""
    replies_interrupt_stale(messages=session.messages.all())
    return (
        session.messages.filter(status=Message.Status.STREAMING)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )


def reply_outcome(event: Done | Failed) -> dict[str, Any]:
    """How an engine's end event is stored (the keywords of `reply_finish`), on any surface."""
    if isinstance(event, Done):
        return {
            "finish_reason": event.finish_reason,
            "error": "",
            "prompt_tokens": event.prompt_tokens,
            "completion_tokens": event.completion_tokens,
            "ttft_ms": event.ttft_ms,
        }
    return {"finish_reason": "error", "error": event.message, "error_code": event.code}


def reply_save_progress(*, reply_id: int, content: str) -> None:
    Message.objects.filter(id=reply_id, status=Message.Status.STREAMING).update(
        content=content, updated_at=timezone.now()
    )


_STATUS_FOR_FINISH = {
    "stop": Message.Status.COMPLETE,
    "length": Message.Status.COMPLETE,
    "cancelled": Message.Status.INTERRUPTED,  # the user's Stop
    "disconnected": Message.Status.INTERRUPTED,  # the client went away mid-reply
}


def reply_finish(
    *,
    reply_id: int,
    content: str,
    finish_reason: str,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    ttft_ms: int | None = None,
    latency_ms: int | None = None,
    error: str = "",
    error_code: str = "",
    served_from_cache: bool = False,
    evidence: dict[str, Any] | None = None,
) -> Message:
    """Store how a reply ended, what it cost and, from company knowledge, what it rests on
    (`evidence`, knowledge.support), in one transaction."""
    status = _STATUS_FOR_FINISH.get(finish_reason, Message.Status.ERROR)
    if error and status is Message.Status.ERROR and content:
        status = Message.Status.INTERRUPTED  # keep what was generated, marked as cut short
    with transaction.atomic():
        reply = (
            Message.objects.select_related("session__tenant").select_for_update().get(id=reply_id)
        )
        reply.content = content
        reply.status = status
        reply.finish_reason = finish_reason
        reply.error = error
        reply.prompt_tokens = prompt_tokens
        reply.completion_tokens = completion_tokens
        reply.ttft_ms = ttft_ms
        reply.served_from_cache = served_from_cache
        if evidence is not None:
            reply.evidence = evidence
        reply.save()
        session = reply.session
        UsageRecord.objects.create(
            tenant=session.tenant,
            user_id=session.user_id,
            api_key_id=session.api_key_id,
            session=session,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cached=served_from_cache,
            model=reply.model,
            latency_ms=latency_ms,
            ttft_ms=ttft_ms,
            status=_usage_status(finish_reason, error),
            reason=(error_code or "error") if error else "",
        )
        if status is Message.Status.COMPLETE and finish_reason == "stop" and not served_from_cache:
            _count_first_question(reply)
    return reply


def usage_record_background(
    *, session_id: uuid.UUID, prompt_tokens: int, completion_tokens: int, model: str = ""
) -> None:
    """Tokens a conversation's background work (its title) used: usage like any other."""
    session = ChatSession.objects.filter(id=session_id).first()
    if session is None:
        return
    UsageRecord.objects.create(
        tenant_id=session.tenant_id,
        user_id=session.user_id,
        api_key_id=session.api_key_id,
        session=session,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        model=model,
        reason="background",
    )


def _count_first_question(reply: Message) -> None:
    """A conversation's first question answered by the model counts towards the cached-reply
    candidates; any later turn does not (its meaning depends on what came before)."""
    earlier = list(
        reply.session.messages.exclude(id=reply.id)
        .exclude(status=Message.Status.ERROR)
        .values_list("role", "content")[:2]
    )
    if len(earlier) == 1 and earlier[0][0] == Message.Role.USER:
        candidate_record(tenant=reply.session.tenant, question=earlier[0][1], answer=reply.content)


def _usage_status(finish_reason: str, error: str) -> str:
    if error:
        return UsageRecord.Status.ERROR
    if finish_reason in ("cancelled", "disconnected"):
        return UsageRecord.Status.CANCELLED
    return UsageRecord.Status.OK


def replies_interrupt_stale(
    *, messages: QuerySet[Message] | None = None, older_than_seconds: int = STALE_STREAM_SECONDS
) -> int:
    """Replies left 'streaming' by a process that died are marked interrupted, text kept."""
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    orphans = (messages if messages is not None else Message.objects.all()).filter(
        status=Message.Status.STREAMING, updated_at__lt=cutoff
    )
    return orphans.update(
        status=Message.Status.INTERRUPTED, finish_reason="error", error="The reply was cut off."
    )


def message_data(
    message: Message,
    versions: list[int] | None = None,
    sources: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The message object of docs/websocket.md, so stored and streamed messages render alike;
    `versions` (the ids of this message's versions, itself included) when known. A reply
    carries the sources its question was given (`sources`, or looked up when not given)."""
    data: dict[str, Any] = {
        "id": message.id,
        "role": message.role,
        "content": message.content,
        "status": message.status,
        "finish_reason": message.finish_reason,
        "served_from_cache": message.served_from_cache,
        "model": message.model,
        "error": message.error,
        "prompt_tokens": message.prompt_tokens,
        "completion_tokens": message.completion_tokens,
        "ttft_ms": message.ttft_ms,
        "created_at": message.created_at.isoformat(),
    }
    if versions is not None:
        data["versions"] = versions
    if message.role == Message.Role.ASSISTANT:
        if sources is None:
            reader = reader_for_session(message.session)
            sources = (
                knowledge.sources_of(
                    list(
                        knowledge.branch_passages([message.parent_id], reader=reader).get(
                            message.parent_id, []
                        )
                    ),
                    reply_text=message.content,
                    evidence=message.evidence,
                )
                if message.parent_id is not None
                else []
            )
        data["sources"] = sources
        data["verdict"] = (message.evidence or {}).get("verdict", "")
        data["unsupported"] = (message.evidence or {}).get("unsupported", [])
    elif message.role == Message.Role.USER:
        data["grounding"] = message.grounding
    return data
