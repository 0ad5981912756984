"""One turn: what the model reads (system prompt, custom instructions, the branch's history,
the question's passages), the turn checked and planned before admission, and stored after it."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from lingua import Language

from chat.models import ChatSession, Message
from chat.reply_language import NONE, ReplyLanguage, instructed, reply_language, with_directive
from chat.services.branches import branch_messages, chain_straight, versions_of
from chat.services.cached_lookup import cached_reply_would_answer
from chat.services.checks import ChatError, check_message_content
from chat.services.instructions import custom_instructions_get, instructions_message
from chat.services.replies import no_reply_in_progress
from chat.services.sessions import session_create, session_get
from chat.services.titles import default_title
from inference.types import ChatMessage
from knowledge import citations
from knowledge import turns as knowledge
from knowledge.access import PUBLIC, Reader, reader_for_session, reader_for_user
from tenants.models import Tenant
from tenants.services import tenant_models


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
    instructions: str = ""  # the owner's custom instructions
    # The language they name: said after every question the model reads (chat.reply_language).
    named: Language | None = None

    def reply_language(self, question: str, passages: Any = None) -> ReplyLanguage:
        """The language a reply to `question` (given `passages`, knowledge.TurnPassages) must
        be in, and whether it is at risk."""
        texts = [p.chunk.text for p in passages.passages] if passages is not None else []
        return reply_language(question=question, instructions=self.instructions, passages=texts)


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
    instructions = custom_instructions_get(user_id=session.user_id)
    conversation = system_messages(
        tenant=session.tenant, knowledge_on=knowledge_on, instructions=instructions
    )
    # Every question ends with the language directive, as it did when it was asked: the
    # prompt's beginning stays the tokens the conversation's KV cache holds.
    named = instructed(instructions)
    for message in kept:
        content = rendered.get(message.id, message.content)
        if message.role == Message.Role.USER:
            content = with_directive(content, named)
        conversation.append(ChatMessage(message.role, content))
    return History(
        conversation,
        knowledge_on,
        [m.content for m in questions],
        [p for m in questions for p in passages.get(m.id, [])],
        instructions,
        named,
    )


def conversation_for(
    *, session: ChatSession, before: Message | None = None, through: Message | None = None
) -> list[ChatMessage]:
    return history_for(session=session, before=before, through=through).conversation


def knowledge_searchable(*, tenant: Tenant, session_id: object, reader: Reader = PUBLIC) -> bool:
    from knowledge.services import searchable

    return searchable(tenant=tenant, session_id=session_id, reader=reader)


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
    language: ReplyLanguage = NONE  # what the reply must be written in (chat.reply_language)


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
    language: ReplyLanguage = NONE  # what the reply must be written in (chat.reply_language)

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


def passage_room(plain: list[ChatMessage]) -> int | None:
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
    directed = [*history.conversation, ChatMessage("user", with_directive(content, history.named))]
    if not history.knowledge_on or cached_reply_would_answer(
        tenant=tenant, conversation=plain, reader=reader
    ):
        return directed, None, plain
    room = passage_room(directed)
    if room is None:
        return directed, None, plain
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
        return directed, None, plain
    rendered = with_directive(knowledge.user_content(content, passages), history.named)
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
            system_messages(tenant=tenant, knowledge_on=on, instructions=instructions),
            on,
            instructions=instructions,
            named=instructed(instructions),
        )
    else:
        session = session_get(user=user, session_id=session_id, tenant=tenant)
        no_reply_in_progress(session)
        history = history_for(session=session)
    conversation, passages, plain = _with_passages(
        tenant=tenant, session_id=session_id, history=history, content=content, reader=reader
    )
    return TurnPlan(
        TurnKind.SEND,
        user,
        tenant,
        session,
        conversation,
        content,
        passages=passages,
        plain=plain,
        language=history.reply_language(content, passages),
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
    history = history_for(session=session, through=last_user)
    conversation = history.conversation
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
        language=history.reply_language(last_user.content),
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
        language=history.reply_language(content, passages),
    )


def _branch_question(
    *, user: User, tenant: Tenant, session_id: uuid.UUID, message_id: Any
) -> tuple[ChatSession, Message]:
    """The session (idle) and one of the user's questions on the branch it shows."""
    if not isinstance(message_id, int) or isinstance(message_id, bool):
        raise ChatError("not_found", "No such message in this conversation.")
    session = session_get(user=user, session_id=session_id, tenant=tenant)
    no_reply_in_progress(session)
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
    no_reply_in_progress(session)
    last_user = next(
        (m for m in reversed(branch_messages(session=session)) if m.role == Message.Role.USER),
        None,
    )
    if last_user is None:
        raise missing
    return session, last_user


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


@transaction.atomic
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
        no_reply_in_progress(session)
        chain_straight(session)
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
    return Turn(
        session, user_message, reply, plan.conversation, created, versions, sources, plan.language
    )


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
