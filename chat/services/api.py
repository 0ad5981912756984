"""Conversations over the REST API: what the model sees for a request, its passages, the request
checked and stored, and a completion read back by the key that made it."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.http import Http404

from chat.models import ChatSession, Message
from chat.reply_language import NONE, ReplyLanguage, instructed, reply_language, with_directive
from chat.services.cached_lookup import cached_reply_would_answer
from chat.services.checks import ChatError, is_unicode
from chat.services.titles import default_title
from chat.services.turns import Turn, knowledge_searchable, passage_room, system_messages
from inference.types import ChatMessage
from knowledge import turns as knowledge
from knowledge.access import PUBLIC, Reader
from tenants.models import Tenant


def api_conversation(*, tenant: Tenant, messages: list[ChatMessage]) -> list[ChatMessage]:
    """What the model sees for a REST request: the tenant's system prompt first (an
    integration adds its own instructions after it, it does not replace the tenant's)."""
    history: list[ChatMessage] = []
    if tenant.system_prompt.strip():
        history.append(ChatMessage("system", tenant.system_prompt))
    return [*history, *messages]


def _integration_instructions(messages: list[ChatMessage]) -> str:
    return "\n".join(m.content for m in messages if m.role in ("system", "developer"))


def api_reply_language(
    *, messages: list[ChatMessage], passages: knowledge.TurnPassages | None
) -> ReplyLanguage:
    """The language a REST reply must be in: the one the integration's own instructions name,
    else its last question's (chat.reply_language)."""
    question = next((m.content for m in reversed(messages) if m.role == "user"), "")
    return reply_language(
        question=question,
        instructions=_integration_instructions(messages),
        passages=[p.chunk.text for p in passages.passages] if passages is not None else [],
    )


def _directed(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The request's questions as the model reads them: each ending with the language its
    instructions name, if they name one (every question, as on the chat: a conversation sent
    again with one more turn still begins with the tokens computed for it before)."""
    named = instructed(_integration_instructions(messages))
    if named is None:
        return messages
    return [
        ChatMessage(m.role, with_directive(m.content, named)) if m.role == "user" else m
        for m in messages
    ]


def api_prepare(
    *, tenant: Tenant, messages: list[ChatMessage], reader: Reader = PUBLIC
) -> tuple[list[ChatMessage], knowledge.TurnPassages | None, list[ChatMessage]]:
    """The model's conversation for a REST request, its last question given passages (of the
    documents `reader`, its key, may read) when the tenant has company knowledge; and the
    conversation without them (for cached replies). A REST request carries its own history:
    earlier questions are read as they were sent (with the language directive, when the
    integration's instructions name a language)."""
    plain = api_conversation(tenant=tenant, messages=messages)
    directed = api_conversation(tenant=tenant, messages=_directed(messages))
    if not knowledge_searchable(
        tenant=tenant, session_id=None, reader=reader
    ) or cached_reply_would_answer(tenant=tenant, conversation=plain, reader=reader):
        return directed, None, plain
    room = passage_room(directed)
    if room is None:
        return directed, None, plain
    last = max(i for i, m in enumerate(messages) if m.role == "user")
    passages = knowledge.turn_passages(
        tenant=tenant,
        session_id=None,
        question=messages[last].content,
        earlier_questions=[m.content for m in messages[:last] if m.role == "user"],
        token_budget=room,
        reader=reader,
    )
    if passages is None:
        return directed, None, plain
    asked = [
        ChatMessage(m.role, knowledge.user_content(m.content, passages) if i == last else m.content)
        for i, m in enumerate(messages)
    ]
    return [*system_messages(tenant=tenant, knowledge_on=True), *_directed(asked)], passages, plain


def check_api_messages(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The conversation's messages are storable and end with something to answer."""
    for i, message in enumerate(messages):
        if "\x00" in message.content:
            raise ChatError(
                "invalid_message",
                "A message contains a NUL character.",
                param=f"messages[{i}].content",
            )
        if not is_unicode(message.content):
            raise ChatError(
                "invalid_message",
                "A message is not valid text (a lone surrogate).",
                param=f"messages[{i}].content",
            )
    if not any(m.role == "user" for m in messages):
        raise ChatError(
            "invalid_message", "The conversation needs a user message.", param="messages"
        )
    return messages


@transaction.atomic
def api_turn_start(
    *,
    tenant: Tenant,
    api_key_id: int,
    messages: list[ChatMessage],
    external_user: str = "",
    passages: knowledge.TurnPassages | None = None,
    conversation: list[ChatMessage] | None = None,
    model: str = "",
    language: ReplyLanguage = NONE,
) -> Turn:
    """Store an admitted REST request as a conversation of its API key: the request's
    messages, then an empty streaming reply (`model`: the one that is to write it)."""
    last_user = next(m for m in reversed(messages) if m.role == "user")
    session = ChatSession.objects.create(
        tenant=tenant,
        api_key_id=api_key_id,
        external_user=external_user[:256],
        title=default_title(last_user.content),
    )
    stored = Message.objects.bulk_create(
        Message(session=session, role=m.role, content=m.content) for m in messages
    )
    user_message = next(m for m in reversed(stored) if m.role == Message.Role.USER)
    sources: list[dict[str, Any]] = []
    if passages is not None:
        Message.objects.filter(id=user_message.id).update(grounding=passages.grounding)
        knowledge.passages_save(message_id=user_message.id, turn=passages)
        sources = knowledge.sources_of(list(user_message.passages.all()))
    reply = Message.objects.create(
        session=session,
        parent=user_message,
        role=Message.Role.ASSISTANT,
        status=Message.Status.STREAMING,
        model=model,
    )
    if conversation is None:
        conversation = api_conversation(tenant=tenant, messages=messages)
    return Turn(session, user_message, reply, conversation, sources=sources, language=language)


def api_completion_get(
    *, tenant: Tenant, session_id: uuid.UUID, reader: Reader | None = None
) -> tuple[ChatSession, Message]:
    """A completion made with any of the tenant's API keys, and its reply; anything else
    (another tenant's, a browser conversation, one whose answer rests on documents `reader`,
    the asking key, may not read) is a 404."""
    session = ChatSession.objects.filter(
        id=session_id, tenant=tenant, api_key__isnull=False
    ).first()
    if session is not None and reader is not None and not _readable_by(session, reader):
        session = None
    reply = (
        session.messages.filter(role=Message.Role.ASSISTANT).order_by("-id").first()
        if session is not None
        else None
    )
    if session is None or reply is None:
        raise Http404("No such completion.")
    return session, reply


def api_completion_for(*, principal: Any, session_id: uuid.UUID) -> tuple[ChatSession, Message]:
    """`api_completion_get` for the key asking (tenants.services.Principal): a completion
    resting on documents its scope does not cover is a 404 to it."""
    from knowledge.access import reader_for_principal

    return api_completion_get(
        tenant=principal.tenant, session_id=session_id, reader=reader_for_principal(principal)
    )


def _readable_by(session: ChatSession, reader: Reader) -> bool:
    """Whether every passage the conversation's questions were given is one `reader` may
    read (its replies may rest on any of them)."""
    from knowledge.models import Passage
    from knowledge.services import passages_of

    questions = list(session.messages.filter(role=Message.Role.USER).values_list("id", flat=True))
    given = Passage.objects.filter(message_id__in=questions).count()
    readable = sum(len(p) for p in passages_of(message_ids=questions, reader=reader).values())
    return given == readable
