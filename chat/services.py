"""Business rules for chat sessions, messages and cached replies.

The websocket consumer, the views and the REST API call these (sync) functions; the consumer
through `database_sync_to_async`.
"""

from __future__ import annotations

import enum
import re
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from chat.cache import get_index
from chat.cached_replies import cached_reply_readable, candidate_record
from chat.language import same_language
from chat.models import CachedReply, ChatSession, CustomInstructions, Message
from chat.question_keys import normalize_question
from inference.types import ChatMessage, Done, Failed, SamplingParams
from knowledge import citations
from knowledge import turns as knowledge
from knowledge.access import PUBLIC, Reader, reader_for_session, reader_for_user
from tenants.models import Tenant, UsageRecord
from tenants.services import tenant_models

MAX_MESSAGE_CHARS = 32_000
TITLE_CHARS = 60
MAX_INSTRUCTIONS_CHARS = 1_500  # custom instructions: a paragraph or two, as ChatGPT allows


class ChatError(Exception):
    """Input the chat cannot act on; `code` and the message go back to the client as is."""

    def __init__(self, code: str, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param  # the REST parameter at fault, when there is one


# --- checks on user input ------------------------------------------------------------------


def check_message_content(content: Any) -> str:
    if not isinstance(content, str) or not content.strip():
        raise ChatError("invalid_message", "Type a message first.")
    if "\x00" in content:
        raise ChatError("invalid_message", "The message contains a NUL character; remove it.")
    if not _is_unicode(content):
        raise ChatError("invalid_message", "The message is not valid text (a lone surrogate).")
    if len(content) > MAX_MESSAGE_CHARS:
        raise ChatError(
            "invalid_message",
            f"The message is {len(content)} characters long; the limit is {MAX_MESSAGE_CHARS}.",
        )
    return content


def _is_unicode(text: str) -> bool:
    """False for a string holding a lone surrogate, which nothing can store or tokenize."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_session_id(raw: Any) -> uuid.UUID | None:
    if raw in (None, ""):
        return None
    try:
        return uuid.UUID(str(raw))
    except ValueError:
        raise ChatError("not_found", "No such conversation.") from None


# --- sessions ------------------------------------------------------------------------------


def sessions_for_user(
    *, user: User, tenant: Tenant, query: str = "", archived: bool = False
) -> Any:
    """The sidebar's list: the user's live sessions in `tenant`, pinned ones first (the latest
    pin first), then newest first; or their archived ones, newest first."""
    sessions = ChatSession.objects.filter(user=user, tenant=tenant, archived=archived)
    if query:
        sessions = sessions.filter(
            Q(title__icontains=query) | Q(messages__content__icontains=query)
        ).distinct()
    if archived:
        return sessions.order_by("-updated_at")
    return sessions.order_by(F("pinned_at").desc(nulls_last=True), "-updated_at")


def _own_session(
    *, user: User, session_id: uuid.UUID | str, archived: bool, tenant: Tenant | None = None
) -> ChatSession:
    """The user's own session, in a tenant they still belong to that is active (and in
    `tenant`, when given); else a 404, never a 403 (no existence leak)."""
    try:
        sessions = ChatSession.objects.select_related("tenant").filter(
            id=session_id,
            user=user,
            archived=archived,
            tenant__active=True,
            tenant__memberships__user=user,
        )
        if tenant is not None:
            sessions = sessions.filter(tenant=tenant)
        return sessions.get()
    except (ChatSession.DoesNotExist, ValueError, ValidationError):
        raise Http404("No such conversation.") from None


def session_get(
    *, user: User, session_id: uuid.UUID | str, tenant: Tenant | None = None
) -> ChatSession:
    """The user's own live session, in a tenant they still belong to (and in `tenant`, when
    given). Anyone else's, an archived one, or one of a tenant the user left or that was
    deactivated is a 404, never a 403 (no existence leak)."""
    return _own_session(user=user, session_id=session_id, archived=False, tenant=tenant)


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


def session_pin(*, session: ChatSession, pinned: bool) -> ChatSession:
    """Pin a live conversation to the top of its owner's list, or unpin it."""
    if pinned and session.pinned_at is None:
        session.pinned_at = timezone.now()
    elif not pinned:
        session.pinned_at = None
    session.save(update_fields=["pinned_at"])
    return session


def check_pinned(raw: Any) -> bool:
    if not isinstance(raw, bool):
        raise ChatError("invalid_pinned", "Say `pinned` as true or false.")
    return raw


# --- custom instructions -------------------------------------------------------------------


def check_custom_instructions(raw: Any) -> str:
    if not isinstance(raw, str):
        raise ChatError("invalid_instructions", "Give the instructions as text.")
    text = raw.strip()
    if "\x00" in text:
        raise ChatError("invalid_instructions", "The instructions contain a NUL character.")
    if not _is_unicode(text):
        raise ChatError("invalid_instructions", "The instructions are not valid text.")
    if len(text) > MAX_INSTRUCTIONS_CHARS:
        raise ChatError(
            "invalid_instructions",
            f"The instructions are {len(text)} characters long; the limit is "
            f"{MAX_INSTRUCTIONS_CHARS}.",
        )
    return text


def custom_instructions_get(*, user_id: int | None) -> str:
    """The person's custom instructions ("" for none, and for an integration's conversation)."""
    if user_id is None:
        return ""
    return (
        CustomInstructions.objects.filter(user_id=user_id).values_list("text", flat=True).first()
        or ""
    )


def custom_instructions_set(*, user: User, text: Any) -> str:
    """Save the person's custom instructions (empty: none). They apply from the next message
    on, in every conversation of theirs; nothing already answered changes."""
    checked = check_custom_instructions(text)
    CustomInstructions.objects.update_or_create(user=user, defaults={"text": checked})
    return checked


# How custom instructions reach the model: a system message of their own, right after the
# tenant's. Its text is message content like any other (inference/runner.py renders every
# content as untrusted text), so typing "<|im_start|>" there gives characters, never a control
# token — the same boundary as the tenant's own system prompt.
INSTRUCTIONS_PREFIX = (
    "The person you are talking to gave these instructions for all your replies:\n\n"
)


def instructions_message(text: str) -> ChatMessage | None:
    return ChatMessage("system", INSTRUCTIONS_PREFIX + text) if text.strip() else None


def instructions_tokens(*, user: User) -> int:
    """How many tokens of the model's window the person's custom instructions take in each
    prompt (the token counter under the composer says so)."""
    message = instructions_message(custom_instructions_get(user_id=user.pk))
    if message is None:
        return 0
    from inference.service import get_prompt_counter

    return get_prompt_counter().count([message])


def archived_session_get(*, user: User, session_id: uuid.UUID | str) -> ChatSession:
    """The user's own archived session, in a tenant they are still an active member of: the one
    lookup behind reading, restoring and deleting archived conversations. Anything else is a
    404 (no existence leak)."""
    return _own_session(user=user, session_id=session_id, archived=True)


def session_restore(*, session: ChatSession) -> ChatSession:
    """Back among the live sessions, where it was in the order of last use."""
    session.archived = False
    session.save(update_fields=["archived"])
    return session


@transaction.atomic
def session_delete(*, session: ChatSession) -> int:
    """Delete an archived session for good, its messages with it (usage records stay, without
    the link, for the tenant's accounting). Returns how many messages went."""
    if not session.archived:
        raise ChatError("not_archived", "Archive a conversation before deleting it.")
    _no_reply_in_progress(session)
    _, by_model = session.delete()
    return by_model.get("chat.Message", 0)


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


def clean_title(raw: str, *, question: str) -> str:
    """The model's answer made into a title: its first line, no quotes or 'Title:' label.

    An answer that is no title gives "" and the first-message title stays: code, a whole
    sentence, a title longer than the question it names, or one in another language than the
    question (a small model asked about German in English may answer in German).
    """
    line = next((part.strip() for part in raw.splitlines() if part.strip()), "")
    if line.startswith("```"):
        return ""
    line = re.sub(r"^(title|标题)\s*[:：]\s*", "", line, flags=re.IGNORECASE)
    line = line.strip(" \"'“”‘’「」《》*#`.。")
    if len(line) > GENERATED_TITLE_MAX_CHARS or len(line.split()) > 8:
        return ""
    if len(line) > len(" ".join(question.split())):
        return ""
    if not same_language(line, question):
        return ""
    return line


def session_set_generated_title(*, session_id: uuid.UUID, title: str, replaces: str) -> bool:
    """Set a generated title unless the user renamed the session meanwhile."""
    if not title:
        return False
    return bool(ChatSession.objects.filter(id=session_id, title=replaces).update(title=title))


# --- branches: versions of regenerated replies and edited messages -------------------------


def branch_messages(*, session: ChatSession) -> list[Message]:
    """The messages of the branch the session shows, first to last: from its tip up through
    each message's parent. Earlier versions (siblings off this path) are not in it."""
    if session.branch_tip_id is None:
        # Messages stored without versions (fixtures, imports): one straight line.
        return list(session.messages.order_by("created_at", "id"))
    by_id = {m.id: m for m in session.messages.all()}
    tip = by_id.get(session.branch_tip_id)
    path: list[Message] = []
    node: Message | None = tip
    while node is not None and len(path) <= len(by_id):
        path.append(node)
        node = by_id.get(node.parent_id) if node.parent_id is not None else None
    path.reverse()
    return path


def _chain_straight(session: ChatSession) -> None:
    """Give a session stored without versions its parent links and tip, oldest to newest, so
    versions can grow from it."""
    if session.branch_tip_id is not None:
        return
    previous: int | None = None
    for message in session.messages.order_by("created_at", "id"):
        if message.parent_id != previous:
            Message.objects.filter(id=message.id).update(parent_id=previous)
        previous = message.id
    if previous is not None:
        session.branch_tip_id = previous
        session.save(update_fields=["branch_tip"])


def versions_of(*, session: ChatSession) -> dict[int | None, list[int]]:
    """Each parent's children, oldest first: the versions of the turn that follows it."""
    children: dict[int | None, list[int]] = {}
    for message_id, parent_id in session.messages.order_by("id").values_list("id", "parent_id"):
        children.setdefault(parent_id, []).append(message_id)
    return children


def branch_data(*, session: ChatSession) -> list[dict[str, Any]]:
    """The shown branch as message objects, each with the ids of its versions."""
    if session.branch_tip_id is None:
        return [
            message_data(m, versions=[m.id])
            for m in branch_messages(session=session)
            if m.role != Message.Role.SYSTEM
        ]
    children = versions_of(session=session)
    messages = branch_messages(session=session)
    passages = knowledge.branch_passages(
        [m.parent_id for m in messages if m.role == Message.Role.ASSISTANT and m.parent_id],
        reader=reader_for_session(session),
    )
    return [
        message_data(
            m,
            versions=children.get(m.parent_id, [m.id]),
            sources=knowledge.sources_of(
                passages.get(m.parent_id or 0, []), reply_text=m.content, evidence=m.evidence
            ),
        )
        for m in messages
        if m.role != Message.Role.SYSTEM
    ]


@transaction.atomic
def branch_switch(
    *, user: User, tenant: Tenant, session_id: uuid.UUID, message_id: Any
) -> ChatSession:
    """Show another version of a message: the branch then runs through it and on down the
    newest conversation that followed it. Nothing is deleted."""
    session = session_get(user=user, session_id=session_id, tenant=tenant)
    session = ChatSession.objects.select_for_update().select_related("tenant").get(id=session.id)
    _no_reply_in_progress(session)
    _chain_straight(session)
    if not isinstance(message_id, int) or isinstance(message_id, bool):
        raise ChatError("not_found", "No such message in this conversation.")
    if not session.messages.filter(id=message_id).exists():
        raise ChatError("not_found", "No such message in this conversation.")
    children = versions_of(session=session)
    node = message_id
    while children.get(node):
        node = children[node][-1]
    session.branch_tip_id = node
    session.save(update_fields=["branch_tip"])
    return session


def system_messages(
    *, tenant: Tenant, knowledge_on: bool, instructions: str = ""
) -> list[ChatMessage]:
    """The conversation's opening: the tenant's system prompt, with the instructions for
    answering from documents when company knowledge applies; then the person's own custom
    instructions, when they have any."""
    opening: list[ChatMessage] = []
    if knowledge_on:
        opening.append(ChatMessage("system", knowledge.system_prompt(tenant=tenant)))
    elif tenant.system_prompt.strip():
        opening.append(ChatMessage("system", tenant.system_prompt))
    personal = instructions_message(instructions)
    if personal is not None:
        opening.append(personal)
    return opening


@dataclass
class History:
    """A conversation's branch as the model reads it, and what a new question needs of it."""

    conversation: list[ChatMessage]
    knowledge_on: bool
    questions: list[str] = field(default_factory=list)  # earlier user messages, oldest first
    passages: list[Any] = field(default_factory=list)  # knowledge.Passage rows of the branch


def history_for(
    *, session: ChatSession, before: Message | None = None, through: Message | None = None
) -> History:
    """What the model sees: the system prompt, then the kept turns of the chosen branch in
    order (those before `before`, or up to and including `through`, when given), each of the
    user's questions with the passages it was given. Other versions never reach the model."""
    messages = branch_messages(session=session)
    ids = [m.id for m in messages]
    if before is not None:
        messages = messages[: ids.index(before.id)] if before.id in ids else messages
    if through is not None:
        messages = messages[: ids.index(through.id) + 1] if through.id in ids else messages
    kept = [
        m
        for m in messages
        if m.status not in (Message.Status.ERROR, Message.Status.STREAMING)
        and not (m.role == Message.Role.ASSISTANT and not m.content)
    ]
    questions = [m for m in kept if m.role == Message.Role.USER]
    # The owner as they are now: passages of documents they may no longer read are left out
    # of what the model reads, the sources shown, and the support of the next reply.
    reader = reader_for_session(session)
    knowledge_on = any(m.grounding for m in questions) or knowledge_searchable(
        tenant=session.tenant, session_id=session.id, reader=reader
    )
    passages = (
        knowledge.branch_passages([m.id for m in questions], reader=reader) if knowledge_on else {}
    )
    rendered = (
        knowledge.render_history([(m.id, m.content, m.grounding) for m in questions], passages)
        if knowledge_on
        else {}
    )
    conversation = system_messages(
        tenant=session.tenant,
        knowledge_on=knowledge_on,
        instructions=custom_instructions_get(user_id=session.user_id),
    )
    for message in kept:
        conversation.append(ChatMessage(message.role, rendered.get(message.id, message.content)))
    return History(
        conversation,
        knowledge_on,
        [m.content for m in questions],
        [p for m in questions for p in passages.get(m.id, [])],
    )


def conversation_for(
    *, session: ChatSession, before: Message | None = None, through: Message | None = None
) -> list[ChatMessage]:
    return history_for(session=session, before=before, through=through).conversation


def knowledge_searchable(*, tenant: Tenant, session_id: object, reader: Reader = PUBLIC) -> bool:
    from knowledge.services import searchable

    return searchable(tenant=tenant, session_id=session_id, reader=reader)


# --- one turn ------------------------------------------------------------------------------


@dataclass
class Turn:
    session: ChatSession
    user_message: Message
    reply: Message
    conversation: list[ChatMessage]
    session_created: bool = False
    # The ids of the versions of user_message and of reply (each including itself).
    versions: dict[int, list[int]] = field(default_factory=dict)
    # The passages the reply is given, as sources shown under it (company knowledge).
    sources: list[dict[str, Any]] = field(default_factory=list)


# A live reply is written to at least every REPLY_KEEPALIVE_SECONDS by the web process that
# streams it (text every 0.5 s while tokens arrive, a touch while it waits in the queue), so one
# not written to for STALE_STREAM_SECONDS was left behind by a web process that died. The beat
# sweep runs every 30 s: such a reply is marked interrupted, its text kept, within 90 s.
REPLY_KEEPALIVE_SECONDS = 15
STALE_STREAM_SECONDS = 60


def _no_reply_in_progress(session: ChatSession) -> None:
    replies_interrupt_stale(messages=session.messages.all())
    if session.messages.filter(status=Message.Status.STREAMING).exists():
        raise ChatError("busy_session", "A reply is still being written in this conversation.")


class TurnKind(enum.StrEnum):
    SEND = "send"
    REGENERATE = "regenerate"
    EDIT = "edit"


@dataclass
class TurnPlan:
    """A turn checked and ready, nothing written yet: admission decides on `conversation`
    (exactly what the model would see) before anything is stored, so a refused turn leaves no
    trace in the conversation."""

    kind: TurnKind
    user: User
    tenant: Tenant
    session: ChatSession | None  # None: the first message makes a new session
    conversation: list[ChatMessage]
    content: str = ""  # the user's text (send, edit)
    last_user: Message | None = None  # the message regenerate and edit act on
    # Company knowledge: the passages the question is given (None: knowledge does not apply
    # here, or the question is regenerated with the passages it had).
    passages: knowledge.TurnPassages | None = None
    # The conversation without passages: a cached reply is matched on the question itself.
    plain: list[ChatMessage] = field(default_factory=list)

    @property
    def canned_answer(self) -> str | None:
        """An answer given without the model: what the documents come closest to saying when
        they do not answer the question, or the documents-only decline."""
        if self.passages is not None and self.passages.decline:
            return self.passages.answer or knowledge.decline_text(tenant=self.tenant)
        return None

    @property
    def canned_evidence(self) -> dict[str, Any]:
        if self.passages is not None and self.passages.decline and self.passages.evidence:
            return self.passages.evidence
        return {}

    @property
    def sources(self) -> list[dict[str, Any]]:
        if self.passages is None:
            return []
        return [
            {
                "number": p.number,
                "title": p.chunk.document.title,
                "where": p.chunk.where,
                "passage_id": p.chunk.pk,
                "document_id": f"doc-{p.chunk.document_id.hex}",
                "snippet": citations.snippet(p.chunk.text),
                "cited": False,
            }
            for p in self.passages.passages
        ]


# Tokens kept free for the reply when passages are fitted into a question's prompt.
REPLY_ROOM = 384


def _passage_room(plain: list[ChatMessage]) -> int | None:
    """Tokens left for passages beside the conversation and its reply; None when the
    conversation alone is already more than admission lets through (characters, then tokens):
    then nothing is retrieved, the question is not embedded, and admission refuses it. The
    cheap checks come before the search, not after it (a 200,000-character question once cost
    1.7 GB to embed before its 400)."""
    if sum(len(m.content) for m in plain) > int(settings.QASSIST_MAX_CONVERSATION_CHARS):
        return None
    from inference.service import get_prompt_counter

    counter = get_prompt_counter()
    room = counter.max_seq_tokens - counter.count(plain)
    return room - REPLY_ROOM if room > 0 else None


def _with_passages(
    *,
    tenant: Tenant,
    session_id: uuid.UUID | None,
    history: History,
    content: str,
    reader: Reader,
) -> tuple[list[ChatMessage], knowledge.TurnPassages | None, list[ChatMessage]]:
    """The conversation for a new question (`content` after `history`): with its passages when
    company knowledge applies (unless a cached reply answers it), and without them (for the
    cached-reply match). Only documents `reader` may read are searched."""
    plain = [*history.conversation, ChatMessage("user", content)]
    if not history.knowledge_on or cached_reply_would_answer(
        tenant=tenant, conversation=plain, reader=reader
    ):
        return plain, None, plain
    room = _passage_room(plain)
    if room is None:
        return plain, None, plain
    passages = knowledge.turn_passages(
        tenant=tenant,
        session_id=session_id,
        question=content,
        earlier_questions=history.questions,
        earlier_passages=history.passages,
        token_budget=room,
        reader=reader,
    )
    if passages is None:
        return plain, None, plain
    rendered = knowledge.user_content(content, passages)
    return [*history.conversation, ChatMessage("user", rendered)], passages, plain


def turn_prepare_send(
    *, user: User, tenant: Tenant, session_id: uuid.UUID | None, content: Any
) -> TurnPlan:
    content = check_message_content(content)
    session = None
    reader = reader_for_user(user=user, tenant=tenant)
    if session_id is None:
        on = knowledge_searchable(tenant=tenant, session_id=None, reader=reader)
        instructions = custom_instructions_get(user_id=user.pk)
        history = History(
            system_messages(tenant=tenant, knowledge_on=on, instructions=instructions), on
        )
    else:
        session = session_get(user=user, session_id=session_id, tenant=tenant)
        _no_reply_in_progress(session)
        history = history_for(session=session)
    conversation, passages, plain = _with_passages(
        tenant=tenant, session_id=session_id, history=history, content=content, reader=reader
    )
    return TurnPlan(
        TurnKind.SEND, user, tenant, session, conversation, content, passages=passages, plain=plain
    )


def draft_conversations(
    *, user: User, tenant: Tenant, session_id: uuid.UUID | None, content: str
) -> tuple[list[ChatMessage], list[ChatMessage]]:
    """What the model would read if `content` were sent now (its passages aside, which are
    found when it is sent): in this conversation, and alone in a new one (the way out when
    the history is what makes it too long). Stores nothing."""
    on = knowledge_searchable(
        tenant=tenant, session_id=None, reader=reader_for_user(user=user, tenant=tenant)
    )
    instructions = custom_instructions_get(user_id=user.pk)
    alone = [
        *system_messages(tenant=tenant, knowledge_on=on, instructions=instructions),
        ChatMessage("user", content),
    ]
    if session_id is None:
        return alone, alone
    session = session_get(user=user, session_id=session_id, tenant=tenant)
    return [*conversation_for(session=session), ChatMessage("user", content)], alone


def turn_prepare_regenerate(*, user: User, tenant: Tenant, session_id: uuid.UUID) -> TurnPlan:
    """Ask again for the last user message of the branch: the new reply is another version
    beside the earlier ones, given the same passages."""
    session, last_user = _last_user_message(
        user=user,
        tenant=tenant,
        session_id=session_id,
        missing=ChatError("nothing_to_regenerate", "There is no message to answer again."),
    )
    conversation = conversation_for(session=session, through=last_user)
    if last_user.grounding == knowledge.NONE_FOUND and knowledge.declines(tenant=tenant):
        passages: knowledge.TurnPassages | None = knowledge.TurnPassages(
            none_found=True, decline=True
        )
    else:
        passages = None
    return TurnPlan(
        TurnKind.REGENERATE,
        user,
        tenant,
        session,
        conversation,
        last_user=last_user,
        passages=passages,
        plain=conversation,
    )


def turn_prepare_edit(
    *,
    user: User,
    tenant: Tenant,
    session_id: uuid.UUID,
    content: Any,
    message_id: Any = None,
) -> TurnPlan:
    """Answer an edited copy of a question of the branch shown (`message_id`; by default the
    last one): the copy is another version of that message, and the conversation goes on from
    it (a new branch); the original and everything that followed it are kept."""
    content = check_message_content(content)
    if message_id is None:
        session, last_user = _last_user_message(
            user=user,
            tenant=tenant,
            session_id=session_id,
            missing=ChatError("nothing_to_edit", "There is no message to edit."),
        )
    else:
        session, last_user = _branch_question(
            user=user, tenant=tenant, session_id=session_id, message_id=message_id
        )
    history = history_for(session=session, before=last_user)
    conversation, passages, plain = _with_passages(
        tenant=tenant,
        session_id=session.id,
        history=history,
        content=content,
        reader=reader_for_user(user=user, tenant=tenant),
    )
    return TurnPlan(
        TurnKind.EDIT,
        user,
        tenant,
        session,
        conversation,
        content,
        last_user=last_user,
        passages=passages,
        plain=plain,
    )


def _branch_question(
    *, user: User, tenant: Tenant, session_id: uuid.UUID, message_id: Any
) -> tuple[ChatSession, Message]:
    """The session (idle) and one of the user's questions on the branch it shows."""
    if not isinstance(message_id, int) or isinstance(message_id, bool):
        raise ChatError("not_found", "No such message in this conversation.")
    session = session_get(user=user, session_id=session_id, tenant=tenant)
    _no_reply_in_progress(session)
    question = next(
        (
            m
            for m in branch_messages(session=session)
            if m.id == message_id and m.role == Message.Role.USER
        ),
        None,
    )
    if question is None:
        raise ChatError("not_found", "No such message in this conversation.")
    return session, question


def _last_user_message(
    *, user: User, tenant: Tenant, session_id: uuid.UUID, missing: ChatError
) -> tuple[ChatSession, Message]:
    """The session (idle) and the last user message of its branch, the one regenerate and edit
    act on."""
    session = session_get(user=user, session_id=session_id, tenant=tenant)
    _no_reply_in_progress(session)
    last_user = next(
        (m for m in reversed(branch_messages(session=session)) if m.role == Message.Role.USER),
        None,
    )
    if last_user is None:
        raise missing
    return session, last_user


@transaction.atomic
def turn_model(*, plan: TurnPlan, picked: object) -> tuple[str, bool]:
    """The model a chat turn asks for, and whether the user picked it now: the one picked
    (a websocket frame's `model`), else the one the conversation remembers while the tenant
    still allows it, else "" (the tenant's default). Admission checks what is picked."""
    if picked not in (None, ""):
        if not isinstance(picked, str):
            raise ChatError("invalid_model", "model must be a model's name.")
        return picked, True
    remembered = plan.session.model if plan.session is not None else ""
    if remembered and remembered in tenant_models(tenant=plan.tenant):
        return remembered, False
    return "", False


def turn_start(*, plan: TurnPlan, model: str = "", remember_model: bool = False) -> Turn:
    """Store an admitted turn: the user's message (new or edited) and an empty streaming
    reply (`model`: the one that is to write it; `remember_model`: the user picked it, so the
    conversation keeps it for its next turns). The session is checked again: another reply
    may have started meanwhile."""
    created = plan.session is None
    if plan.session is None:
        session = session_create(
            user=plan.user, tenant=plan.tenant, title=default_title(plan.content)
        )
    else:
        session = (
            ChatSession.objects.select_for_update().select_related("tenant").get(id=plan.session.id)
        )
        _no_reply_in_progress(session)
        _chain_straight(session)
        if plan.last_user is not None:
            plan.last_user.refresh_from_db()
    grounding = plan.passages.grounding if plan.passages is not None else ""
    if plan.kind is TurnKind.SEND:
        user_message = Message.objects.create(
            session=session,
            parent_id=session.branch_tip_id,
            role=Message.Role.USER,
            content=plan.content,
            grounding=grounding,
        )
    elif plan.kind is TurnKind.EDIT:
        assert plan.last_user is not None
        user_message = Message.objects.create(
            session=session,
            parent_id=plan.last_user.parent_id,
            role=Message.Role.USER,
            content=plan.content,
            grounding=grounding,
        )
    else:
        assert plan.last_user is not None
        user_message = plan.last_user
        # A failed reply with no text (and nothing after it) is no version worth flipping to.
        user_message.children.filter(
            status=Message.Status.ERROR, content="", children__isnull=True
        ).delete()
    reply = Message.objects.create(
        session=session,
        parent=user_message,
        role=Message.Role.ASSISTANT,
        status=Message.Status.STREAMING,
        evidence=plan.canned_evidence,
        model=model,
    )
    session.branch_tip = reply
    session.updated_at = timezone.now()
    fields = ["branch_tip", "updated_at"]
    if remember_model and session.model != model:
        session.model = model
        fields.append("model")
    session.save(update_fields=fields)
    children = versions_of(session=session)
    versions = {
        user_message.id: children.get(user_message.parent_id, [user_message.id]),
        reply.id: children.get(user_message.id, [reply.id]),
    }
    if plan.passages is not None and plan.kind is not TurnKind.REGENERATE:
        knowledge.passages_save(message_id=user_message.id, turn=plan.passages)
    sources = (
        plan.sources
        if plan.kind is not TurnKind.REGENERATE
        else knowledge.sources_of(
            knowledge.branch_passages(
                [user_message.id], reader=reader_for_user(user=plan.user, tenant=plan.tenant)
            ).get(user_message.id, [])
        )
    )
    return Turn(session, user_message, reply, plan.conversation, created, versions, sources)


def message_send(*, user: User, tenant: Tenant, session_id: uuid.UUID | None, content: Any) -> Turn:
    """Prepare and start a turn in one go (no admission: for callers that need none)."""
    plan = turn_prepare_send(user=user, tenant=tenant, session_id=session_id, content=content)
    return turn_start(plan=plan)


def message_regenerate(*, user: User, tenant: Tenant, session_id: uuid.UUID) -> Turn:
    plan = turn_prepare_regenerate(user=user, tenant=tenant, session_id=session_id)
    return turn_start(plan=plan)


def message_edit_last(*, user: User, tenant: Tenant, session_id: uuid.UUID, content: Any) -> Turn:
    plan = turn_prepare_edit(user=user, tenant=tenant, session_id=session_id, content=content)
    return turn_start(plan=plan)


def message_edit(
    *, user: User, tenant: Tenant, session_id: uuid.UUID, message_id: int, content: Any
) -> Turn:
    plan = turn_prepare_edit(
        user=user, tenant=tenant, session_id=session_id, content=content, message_id=message_id
    )
    return turn_start(plan=plan)


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


# --- cached replies ------------------------------------------------------------------------


def first_turn_question(conversation: list[ChatMessage]) -> str | None:
    """The question if `conversation` is a single user message (a system prompt aside);
    None for a multi-turn context, whose meaning depends on what came before (GPTCache's
    wrong-answer trap): never answered from, nor counted towards, the cache."""
    turns = [m for m in conversation if m.role != "system"]
    if len(turns) != 1 or turns[0].role != "user":
        return None
    return turns[0].content


def cached_reply_lookup(
    *, tenant: Tenant, conversation: list[ChatMessage], reader: Reader = PUBLIC
) -> CachedReply | None:
    """A curated answer for a single-turn question: the tenant's own if one is in force, else
    the one for every tenant, unless it rests on documents `reader` may not read. Reads the
    in-process index (chat/cache.py): no database query while the table is unchanged; a hit
    costs one UPDATE of its counter. The returned reply is shared by the process: read it, do
    not change it."""
    question = first_turn_question(conversation)
    if question is None:
        return None
    key = normalize_question(question)
    if not key:
        return None
    now = timezone.now()
    reply = get_index().lookup(tenant_id=tenant.id, key=key, now=now)
    if reply is not None and not cached_reply_readable(reply=reply, reader=reader):
        return None  # the question goes to the model, which reads what this asker may read
    if reply is not None:
        CachedReply.objects.filter(id=reply.id).update(hits=F("hits") + 1, last_hit_at=now)
    return reply


def cached_reply_would_answer(
    *, tenant: Tenant, conversation: list[ChatMessage], reader: Reader = PUBLIC
) -> bool:
    """Whether `cached_reply_lookup` would find a curated answer for `reader` (no hit is
    counted): such a question needs no passages."""
    question = first_turn_question(conversation)
    key = normalize_question(question) if question is not None else ""
    if not key:
        return False
    reply = get_index().lookup(tenant_id=tenant.id, key=key, now=timezone.now())
    return reply is not None and cached_reply_readable(reply=reply, reader=reader)


def title_sampling() -> SamplingParams:
    return SamplingParams(max_tokens=20, temperature=0, stop=("\n",))


def default_sampling() -> SamplingParams:
    """What a chat reply is generated with: the deployment's defaults."""
    return SamplingParams(
        max_tokens=int(settings.QASSIST_DEFAULT_MAX_TOKENS),
        temperature=float(settings.QASSIST_DEFAULT_TEMPERATURE),
    )


# --- conversations over the REST API ---------------------------------------------------------


def api_conversation(*, tenant: Tenant, messages: list[ChatMessage]) -> list[ChatMessage]:
    """What the model sees for a REST request: the tenant's system prompt first (an
    integration adds its own instructions after it, it does not replace the tenant's)."""
    history: list[ChatMessage] = []
    if tenant.system_prompt.strip():
        history.append(ChatMessage("system", tenant.system_prompt))
    return [*history, *messages]


def api_prepare(
    *, tenant: Tenant, messages: list[ChatMessage], reader: Reader = PUBLIC
) -> tuple[list[ChatMessage], knowledge.TurnPassages | None, list[ChatMessage]]:
    """The model's conversation for a REST request, its last question given passages (of the
    documents `reader`, its key, may read) when the tenant has company knowledge; and the
    conversation without them (for cached replies). A REST request carries its own history:
    earlier questions are read as they were sent."""
    plain = api_conversation(tenant=tenant, messages=messages)
    if not knowledge_searchable(
        tenant=tenant, session_id=None, reader=reader
    ) or cached_reply_would_answer(tenant=tenant, conversation=plain, reader=reader):
        return plain, None, plain
    room = _passage_room(plain)
    if room is None:
        return plain, None, plain
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
        return plain, None, plain
    asked = [
        ChatMessage(m.role, knowledge.user_content(m.content, passages) if i == last else m.content)
        for i, m in enumerate(messages)
    ]
    return [*system_messages(tenant=tenant, knowledge_on=True), *asked], passages, plain


def check_api_messages(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The conversation's messages are storable and end with something to answer."""
    for i, message in enumerate(messages):
        if "\x00" in message.content:
            raise ChatError(
                "invalid_message",
                "A message contains a NUL character.",
                param=f"messages[{i}].content",
            )
        if not _is_unicode(message.content):
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
    return Turn(session, user_message, reply, conversation, sources=sources)


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
