"""Business rules for chat sessions, messages and cached replies.

The websocket consumer, the views and the REST API call these (sync) functions; the consumer
through `database_sync_to_async`.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from chat.cache import normalize_question
from chat.models import CachedReply, ChatSession, Message
from inference.types import ChatMessage, SamplingParams
from tenants.models import Tenant, UsageRecord

MAX_MESSAGE_CHARS = 32_000
TITLE_CHARS = 60


class ChatError(Exception):
    """Input the chat cannot act on; `code` and the message go back to the client as is."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# --- checks on user input ------------------------------------------------------------------


def check_message_content(content: Any) -> str:
    if not isinstance(content, str) or not content.strip():
        raise ChatError("invalid_message", "Type a message first.")
    if len(content) > MAX_MESSAGE_CHARS:
        raise ChatError(
            "invalid_message",
            f"The message is {len(content)} characters long; the limit is {MAX_MESSAGE_CHARS}.",
        )
    return content


def check_session_id(raw: Any) -> uuid.UUID | None:
    if raw in (None, ""):
        return None
    try:
        return uuid.UUID(str(raw))
    except ValueError:
        raise ChatError("not_found", "No such conversation.") from None


# --- sessions ------------------------------------------------------------------------------


def sessions_for_user(*, user: User, tenant: Tenant, query: str = "") -> Any:
    sessions = ChatSession.objects.filter(user=user, tenant=tenant, archived=False)
    if query:
        sessions = sessions.filter(
            Q(title__icontains=query) | Q(messages__content__icontains=query)
        ).distinct()
    return sessions.order_by("-updated_at")


def session_get(*, user: User, session_id: uuid.UUID | str) -> ChatSession:
    """The user's own live session; anyone else's, or an archived one, is a 404, never a 403
    (no existence leak)."""
    try:
        return ChatSession.objects.select_related("tenant").get(
            id=session_id, user=user, archived=False
        )
    except (ChatSession.DoesNotExist, ValueError):
        raise Http404("No such conversation.") from None


def session_create(*, user: User, tenant: Tenant, title: str = "") -> ChatSession:
    return ChatSession.objects.create(user=user, tenant=tenant, title=title[:200])


def session_rename(*, session: ChatSession, title: str) -> ChatSession:
    title = title.strip()
    if not title:
        raise ChatError("invalid_title", "A title cannot be empty.")
    session.title = title[:200]
    session.save(update_fields=["title"])
    return session


def session_archive(*, session: ChatSession) -> None:
    session.archived = True
    session.save(update_fields=["archived"])


def default_title(text: str) -> str:
    line = " ".join(text.split())
    if len(line) <= TITLE_CHARS:
        return line
    cut = line[:TITLE_CHARS].rsplit(" ", 1)[0] if " " in line[:TITLE_CHARS] else line[:TITLE_CHARS]
    return cut + "…"


def title_request(*, first_message: str) -> list[ChatMessage]:
    """What the model is asked for a conversation's title."""
    return [
        ChatMessage("system", "You name conversations. Answer with a short title only."),
        ChatMessage(
            "user",
            "Give a title of at most six words for a conversation that starts with this "
            f"message, in the message's language:\n\n{first_message[:500]}",
        ),
    ]


GENERATED_TITLE_MAX_CHARS = 48


def clean_title(raw: str) -> str:
    """The model's answer made into a title: its first line, no quotes or 'Title:' label.
    An answer that is no title (code, a whole sentence) gives "": the first-message title stays.
    """
    line = next((part.strip() for part in raw.splitlines() if part.strip()), "")
    if line.startswith("```"):
        return ""
    line = re.sub(r"^(title|标题)\s*[:：]\s*", "", line, flags=re.IGNORECASE)
    line = line.strip(" \"'“”‘’「」《》*#`.。")
    if len(line) > GENERATED_TITLE_MAX_CHARS or len(line.split()) > 8:
        return ""
    return line


def session_set_generated_title(*, session_id: uuid.UUID, title: str, replaces: str) -> bool:
    """Set a generated title unless the user renamed the session meanwhile."""
    if not title:
        return False
    return bool(ChatSession.objects.filter(id=session_id, title=replaces).update(title=title))


def conversation_for(*, session: ChatSession) -> list[ChatMessage]:
    """What the model sees: the tenant's system prompt, then every kept turn in order."""
    history: list[ChatMessage] = []
    if session.tenant.system_prompt.strip():
        history.append(ChatMessage("system", session.tenant.system_prompt))
    for message in session.messages.order_by("created_at", "id"):
        if message.status == Message.Status.ERROR or message.status == Message.Status.STREAMING:
            continue
        if message.role == Message.Role.ASSISTANT and not message.content:
            continue
        history.append(ChatMessage(message.role, message.content))
    return history


# --- one turn ------------------------------------------------------------------------------


@dataclass
class Turn:
    session: ChatSession
    user_message: Message
    reply: Message
    conversation: list[ChatMessage]
    session_created: bool = False


def _touch(session: ChatSession) -> None:
    session.updated_at = timezone.now()
    session.save(update_fields=["updated_at"])


STALE_STREAM_SECONDS = 120  # a "streaming" reply not written to for this long was orphaned


def _no_reply_in_progress(session: ChatSession) -> None:
    replies_interrupt_stale(messages=session.messages.all())
    if session.messages.filter(status=Message.Status.STREAMING).exists():
        raise ChatError("busy_session", "A reply is still being written in this conversation.")


@transaction.atomic
def message_send(
    *,
    user: User,
    tenant: Tenant,
    session_id: uuid.UUID | None,
    content: str,
) -> Turn:
    """Store the user's message and an empty streaming reply; return what to send the engine."""
    content = check_message_content(content)
    created = session_id is None
    if session_id is None:
        session = session_create(user=user, tenant=tenant, title=default_title(content))
    else:
        session = session_get(user=user, session_id=session_id)
        _no_reply_in_progress(session)
    user_message = Message.objects.create(session=session, role=Message.Role.USER, content=content)
    return _start_reply(session, user_message, created)


def _last_user_message(
    *, user: User, session_id: uuid.UUID, missing: ChatError
) -> tuple[ChatSession, Message]:
    """The session (idle) and its last user message, the one regenerate and edit act on."""
    session = session_get(user=user, session_id=session_id)
    _no_reply_in_progress(session)
    last_user = (
        session.messages.filter(role=Message.Role.USER).order_by("-created_at", "-id").first()
    )
    if last_user is None:
        raise missing
    return session, last_user


@transaction.atomic
def message_regenerate(*, user: User, session_id: uuid.UUID) -> Turn:
    """Drop the last reply and ask again for the last user message."""
    session, last_user = _last_user_message(
        user=user,
        session_id=session_id,
        missing=ChatError("nothing_to_regenerate", "There is no message to answer again."),
    )
    session.messages.filter(role=Message.Role.ASSISTANT, id__gt=last_user.id).delete()
    return _start_reply(session, last_user, False)


@transaction.atomic
def message_edit_last(*, user: User, session_id: uuid.UUID, content: str) -> Turn:
    """Replace the last user message's text and answer it afresh."""
    content = check_message_content(content)
    session, last_user = _last_user_message(
        user=user,
        session_id=session_id,
        missing=ChatError("nothing_to_edit", "There is no message to edit."),
    )
    session.messages.filter(id__gt=last_user.id).delete()
    last_user.content = content
    last_user.save(update_fields=["content", "updated_at"])
    return _start_reply(session, last_user, False)


def _start_reply(session: ChatSession, user_message: Message, created: bool) -> Turn:
    conversation = conversation_for(session=session)
    reply = Message.objects.create(
        session=session, role=Message.Role.ASSISTANT, status=Message.Status.STREAMING
    )
    _touch(session)
    return Turn(session, user_message, reply, conversation, created)


def reply_save_progress(*, reply_id: int, content: str) -> None:
    Message.objects.filter(id=reply_id, status=Message.Status.STREAMING).update(
        content=content, updated_at=timezone.now()
    )


_STATUS_FOR_FINISH = {
    "stop": Message.Status.COMPLETE,
    "length": Message.Status.COMPLETE,
    "cancelled": Message.Status.INTERRUPTED,
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
    served_from_cache: bool = False,
    api_key_id: int | None = None,
) -> Message:
    """Store how a reply ended, and what it cost, in one transaction."""
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
        reply.save()
        session = reply.session
        UsageRecord.objects.create(
            tenant=session.tenant,
            user_id=session.user_id,
            api_key_id=api_key_id,
            session=session,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cached=served_from_cache,
            latency_ms=latency_ms,
            status=_usage_status(finish_reason, error),
        )
    return reply


def _usage_status(finish_reason: str, error: str) -> str:
    if error:
        return UsageRecord.Status.ERROR
    if finish_reason == "cancelled":
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


def message_data(message: Message) -> dict[str, Any]:
    """The message object of docs/websocket.md, so stored and streamed messages render alike."""
    return {
        "id": message.id,
        "role": message.role,
        "content": message.content,
        "status": message.status,
        "finish_reason": message.finish_reason,
        "served_from_cache": message.served_from_cache,
        "error": message.error,
        "prompt_tokens": message.prompt_tokens,
        "completion_tokens": message.completion_tokens,
        "ttft_ms": message.ttft_ms,
        "created_at": message.created_at.isoformat(),
    }


# --- cached replies ------------------------------------------------------------------------


def cached_reply_lookup(*, tenant: Tenant, conversation: list[ChatMessage]) -> CachedReply | None:
    """A curated answer for a single-turn question; never for a multi-turn context, whose
    meaning depends on what came before (GPTCache's wrong-answer trap)."""
    turns = [m for m in conversation if m.role != "system"]
    if len(turns) != 1 or turns[0].role != "user":
        return None
    key = normalize_question(turns[0].content)
    if not key:
        return None
    now = timezone.now()
    candidates = CachedReply.objects.filter(
        Q(tenant=tenant) | Q(tenant__isnull=True), normalized_key=key, enabled=True
    ).filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
    # A tenant's own answer wins over the global one.
    reply = candidates.order_by(F("tenant_id").asc(nulls_last=True)).first()
    if reply is not None:
        CachedReply.objects.filter(id=reply.id).update(hits=F("hits") + 1, last_hit_at=now)
    return reply


def title_sampling() -> SamplingParams:
    return SamplingParams(max_tokens=20, temperature=0, stop=("\n",))


def default_sampling() -> SamplingParams:
    """What a chat reply is generated with: the deployment's defaults."""
    return SamplingParams(
        max_tokens=int(settings.QASSIST_DEFAULT_MAX_TOKENS),
        temperature=float(settings.QASSIST_DEFAULT_TEMPERATURE),
    )
