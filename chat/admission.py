"""The one admission path of every surface (websocket, REST, background work):

    authenticate (the surface: session cookie or API key)
      → admit(): the tenant as it is now, the conversation's size and prompt tokens,
        the tenant's limits and quotas reserved atomically, a cached reply looked up
      → the engine (or the cached answer)
      → settle(): the reservation becomes what was really used; stream slots freed.

Surfaces call `admit` and `settle` (sync, through database_sync_to_async) and hold a ticket's
stream lease with `held()` while they stream. They never check a limit themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import redis
from channels.db import database_sync_to_async
from django.conf import settings

from chat.models import CachedReply
from chat.services.api import (
    api_prepare,
    api_reply_language,
    api_turn_start,
    check_api_messages,
)
from chat.services.cached_lookup import cached_reply_lookup
from chat.services.turns import Turn, TurnPlan, turn_model, turn_start
from inference import metrics
from inference.service import PromptCounter, get_engine_client, get_prompt_counter
from inference.types import ChatMessage, SamplingParams
from inference.worker import Submission
from knowledge import turns as knowledge_turns
from knowledge.access import reader_for_principal
from tenants.limits import Plan
from tenants.models import Tenant
from tenants.services import (
    ModelNotAllowed,
    Principal,
    limits_plan,
    limits_renew,
    limits_reserve,
    limits_settle,
    principal_is_member,
    refusal_message,
    tenant_model_choose,
    usage_record_embeddings,
    usage_record_refusal,
)

logger = logging.getLogger(__name__)


class Refused(Exception):
    """A request admission turned away, with what the client needs to act on it.

    `code`: rate_limited, quota_exceeded, prompt_too_long, tenant_inactive, forbidden,
    unavailable (the limit counters are out of reach), worker_down (no model on this server),
    model_not_allowed (the tenant may not use the model asked for).
    `reason`: the limit's name for rate_limited and quota_exceeded."""

    def __init__(
        self, code: str, message: str, *, reason: str = "", retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or code
        self.retry_after = retry_after


@dataclass
class Ticket:
    """An admitted request: what to send the engine (or the cached answer to serve instead),
    and the reservation to settle when it ends."""

    principal: Principal
    tenant: Tenant
    submission: Submission
    prompt_tokens: int
    plan: Plan
    cached: CachedReply | None = None
    canned: str | None = None  # an answer given without the model (a documents-only decline)
    settled: bool = False

    @property
    def answer_without_model(self) -> str | None:
        """The text to serve instead of generating: a cached reply's, or the canned one."""
        if self.cached is not None:
            return self.cached.answer
        return self.canned

    @property
    def cached_evidence(self) -> dict[str, Any] | None:
        """A cached reply's sources and quotes, stored with the reply it answers."""
        if self.cached is None:
            return None
        from chat.cached_replies import cached_reply_evidence

        return cached_reply_evidence(self.cached) or None


@dataclass
class Usage:
    """What a request really used, filled in by the surface as it learns it. A count left
    None is charged as reserved (the worst case): a reply whose end nobody saw is not free."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def check_conversation_size(conversation: Sequence[ChatMessage]) -> None:
    """Refuse a history too big to be worth tokenising (it could not fit the context anyway)."""
    chars = sum(len(m.content) for m in conversation)
    limit = int(settings.QASSIST_MAX_CONVERSATION_CHARS)
    if chars > limit:
        raise Refused(
            "prompt_too_long",
            f"The conversation is {chars:,} characters long, more than this assistant reads "
            f"({limit:,}). Start a new conversation or shorten the message.",
        )


@dataclass(frozen=True)
class Room:
    """How much of the model's window a conversation takes, by admit's own rule: what the
    page's counter shows while the user types (`tokens` is None when the text is too long to
    be worth counting)."""

    chars: int
    char_limit: int
    tokens: int | None
    token_limit: int

    @property
    def fits(self) -> bool:
        return self.chars <= self.char_limit and (
            self.tokens is not None and self.tokens < self.token_limit
        )


def measure(conversation: Sequence[ChatMessage], model: str = "") -> Room:
    """The size `admit` would find for `conversation`; writes nothing, refuses nothing."""
    chars = sum(len(m.content) for m in conversation)
    char_limit = int(settings.QASSIST_MAX_CONVERSATION_CHARS)
    counter = get_prompt_counter(model)
    tokens = counter.count(conversation) if chars <= char_limit else None
    return Room(chars, char_limit, tokens, counter.max_seq_tokens)


def admit(
    *,
    principal: Principal,
    conversation: Sequence[ChatMessage],
    params: SamplingParams,
    background: bool = False,
    conversation_id: str = "",
    cacheable: bool = True,
    cache_conversation: Sequence[ChatMessage] | None = None,
    canned_answer: str | None = None,
    model: str = "",
) -> Ticket:
    """Admit one request or raise Refused (counted in /metrics by reason and tenant). Writes
    nothing but the limit counters (and, for a refusal, a usage record saying why).
    `cache_conversation`: what a cached reply is matched on, when the model's conversation
    carries more (passages); `canned_answer`: served instead of the model; `model`: the model
    asked for ("" the tenant's default), which the tenant must be allowed to use."""
    try:
        return _admit(
            principal=principal,
            conversation=conversation,
            params=params,
            background=background,
            conversation_id=conversation_id,
            cacheable=cacheable,
            cache_conversation=cache_conversation,
            canned_answer=canned_answer,
            model=model,
        )
    except Refused as exc:
        metrics.record_refusal(reason=exc.reason, tenant=principal.tenant.slug)
        raise


def _fresh_principal(principal: Principal) -> Principal:
    """The principal with its tenant as it is now; Refused when it may not ask any more."""
    tenant = Tenant.objects.filter(pk=principal.tenant.pk, active=True).first()
    if tenant is None:
        raise Refused("tenant_inactive", "This tenant is not active.")
    if principal.user is not None and not principal_is_member(principal=principal):
        raise Refused("forbidden", "You are not a member of this tenant any more.")
    return replace(principal, tenant=tenant)


def _counter(model: str = "") -> PromptCounter:
    try:
        return get_prompt_counter(model)
    except FileNotFoundError as exc:
        logger.warning("admission cannot count tokens: %s", exc)
        raise Refused(
            "worker_down", "The model is not installed on this server.", retry_after=60
        ) from None


def _reserve(*, plan: Plan, principal: Principal) -> None:
    """Reserve the plan's worst case, or Refused (recorded in the usage) naming the limit."""
    try:
        refusal = limits_reserve(plan=plan)
    except redis.RedisError as exc:
        # The counters are out of reach (Redis restarting): refuse rather than serve unmetered.
        logger.warning("admission cannot reach the limit counters: %s", exc)
        raise Refused(
            "unavailable", "The service is briefly unavailable; try again.", retry_after=5
        ) from None
    if refusal is not None:
        usage_record_refusal(principal=principal, reason=refusal.reason)
        raise Refused(
            refusal.code,
            refusal_message(refusal=refusal, plan=plan, tenant=principal.tenant),
            reason=refusal.reason,
            retry_after=refusal.retry_after,
        )


def _admit(
    *,
    principal: Principal,
    conversation: Sequence[ChatMessage],
    params: SamplingParams,
    background: bool = False,
    conversation_id: str = "",
    cacheable: bool = True,
    cache_conversation: Sequence[ChatMessage] | None = None,
    canned_answer: str | None = None,
    model: str = "",
) -> Ticket:
    principal = _fresh_principal(principal)
    tenant = principal.tenant
    try:
        model = tenant_model_choose(tenant=tenant, requested=model)
    except ModelNotAllowed as exc:
        raise Refused("model_not_allowed", str(exc)) from None
    check_conversation_size(conversation)
    counter = _counter(model)
    prompt_tokens = counter.count(conversation)
    room = counter.max_seq_tokens - prompt_tokens
    if room <= 0:
        raise Refused(
            "prompt_too_long",
            f"The conversation is {prompt_tokens:,} tokens long; this model's context holds "
            f"{counter.max_seq_tokens:,}. Start a new conversation or shorten the message.",
        )
    params = replace(params, max_tokens=min(params.max_tokens, room))
    request_id = uuid.uuid4().hex
    plan = limits_plan(
        principal=principal,
        tenant=tenant,
        request_id=request_id,
        tokens=prompt_tokens + params.max_tokens,
        # Background work (titles, batch items) runs on spare sequences: it counts against the
        # quotas, never against the per-minute rates or anyone's stream slots.
        streams=not background,
        rate=not background,
        model=model,  # its tokens count as the model's weight says
    )
    _reserve(plan=plan, principal=principal)
    cached = None
    if cacheable and not background:
        matched = cache_conversation if cache_conversation is not None else conversation
        cached = cached_reply_lookup(
            tenant=tenant, conversation=list(matched), reader=reader_for_principal(principal)
        )
    without_model = cached is not None or canned_answer is not None
    if not without_model and not background and get_engine_client().at_capacity(model):
        # The engine's queue is full: refused now, like a limit, before anything is stored
        # (the queue would refuse it anyway, after the turn's writes, on a loaded machine
        # a second or more later). Background work waits its turn instead.
        limits_settle(plan=plan, used_tokens=0)
        usage_record_refusal(principal=principal, reason="busy")
        raise Refused("busy", "The assistant is at capacity; try again shortly.", retry_after=5)
    submission = Submission(
        request_id=request_id,
        messages=tuple(conversation),
        params=params,
        priority=tenant.priority,
        background=background,
        tenant=tenant.slug,
        conversation=conversation_id,
        model=model,
    )
    return Ticket(
        principal,
        tenant,
        submission,
        prompt_tokens,
        plan,
        cached,
        None if cached else canned_answer,
    )


def settle(*, ticket: Ticket, usage: Usage) -> None:
    """End the ticket's reservation with what was really used (once)."""
    if ticket.settled:
        return
    ticket.settled = True
    if ticket.answer_without_model is not None and usage.completion_tokens is None:
        used = 0  # served from the cache (or canned): no model tokens
    else:
        prompt = ticket.prompt_tokens if usage.prompt_tokens is None else usage.prompt_tokens
        completion = (
            ticket.submission.params.max_tokens
            if usage.completion_tokens is None
            else usage.completion_tokens
        )
        used = prompt + completion
    limits_settle(plan=ticket.plan, used_tokens=used)


@contextlib.asynccontextmanager
async def held(ticket: Ticket) -> AsyncIterator[Usage]:
    """Hold the ticket's stream slots while the body streams (the lease is renewed), then
    settle with the usage the body filled in — on success, error or cancellation alike."""
    usage = Usage()
    renewer = asyncio.create_task(_renew(ticket))
    try:
        yield usage
    finally:
        renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewer
        try:
            await asyncio.shield(database_sync_to_async(settle)(ticket=ticket, usage=usage))
        except Exception as exc:
            # Redis away (restarting): the reply must still end for its client. The stream
            # slots lapse with their lease; the reservation stays at its worst case.
            logger.warning("could not settle %s: %s", ticket.plan.request_id, exc)


async def _renew(ticket: Ticket) -> None:
    interval = max(1.0, settings.QASSIST_STREAM_LEASE_SECONDS / 3)
    while True:
        await asyncio.sleep(interval)
        try:
            await database_sync_to_async(limits_renew)(plan=ticket.plan)
        except Exception:  # Redis away for a moment: the next renewal tries again
            logger.warning("could not renew the stream lease of %s", ticket.plan.request_id)


def turn_begin(
    *, plan: TurnPlan, principal: Principal, params: SamplingParams, model: object = None
) -> tuple[Turn, Ticket]:
    """Admit a chat turn, then store it. Refused, nothing is stored; stored, the ticket knows
    its session. `model`: what the user picked (None: what the conversation remembers, else
    the tenant's default); a pick is remembered by the conversation."""
    session_id = str(plan.session.id) if plan.session is not None else ""
    asked, picked = turn_model(plan=plan, picked=model)
    ticket = admit(
        principal=principal,
        conversation=plan.conversation,
        params=params,
        conversation_id=session_id,
        cache_conversation=plan.plain or None,
        canned_answer=plan.canned_answer,
        model=asked,
    )
    try:
        turn = turn_start(plan=plan, model=ticket.submission.model, remember_model=picked)
    except BaseException:
        settle(ticket=ticket, usage=Usage(0, 0))
        raise
    ticket.submission = replace(ticket.submission, conversation=str(turn.session.id))
    return turn, ticket


def api_begin(
    *,
    principal: Principal,
    messages: list[ChatMessage],
    params: SamplingParams,
    external_user: str = "",
    cacheable: bool = True,
    model: str = "",
) -> tuple[Turn, Ticket]:
    """Admit a REST request, then store it as a conversation of its API key."""
    assert principal.api_key is not None
    messages = check_api_messages(messages)
    conversation, passages, plain = api_prepare(
        tenant=principal.tenant, messages=messages, reader=reader_for_principal(principal)
    )
    canned = None
    if passages is not None and passages.decline:
        canned = knowledge_turns.decline_text(tenant=principal.tenant)
    ticket = admit(
        principal=principal,
        conversation=conversation,
        params=params,
        cacheable=cacheable,
        cache_conversation=plain,
        canned_answer=canned,
        model=model,
    )
    try:
        turn = api_turn_start(
            tenant=ticket.tenant,
            api_key_id=principal.api_key.pk,
            messages=messages,
            external_user=external_user,
            passages=passages,
            conversation=conversation,
            model=ticket.submission.model,
            language=api_reply_language(messages=messages, passages=passages),
        )
    except BaseException:
        settle(ticket=ticket, usage=Usage(0, 0))
        raise
    ticket.submission = replace(ticket.submission, conversation=str(turn.session.id))
    return turn, ticket


# --- embeddings -------------------------------------------------------------------------------


@dataclass
class EmbeddingTicket:
    """Admitted texts to embed, and the reservation to settle when they are (or are not)."""

    principal: Principal
    plan: Plan
    tokens: int
    settled: bool = False


def embeddings_admit(*, principal: Principal, texts: Sequence[str]) -> EmbeddingTicket:
    """Admit an embeddings request as a completion is admitted: the tenant read fresh, its
    texts counted with the chat model's tokenizer (the unit of every limit and quota), the
    tokens reserved atomically against the requests and tokens per minute and the quotas.
    Embeddings hold no stream. Refused, it raises Refused (counted in /metrics)."""
    try:
        # The texts are bounded by the endpoint's body (4 MiB), not by a conversation's size:
        # an integration indexing its documents sends many at once.
        principal = _fresh_principal(principal)
        counter = _counter()
        tokens = sum(counter.count_text(t) for t in texts)
        plan = limits_plan(
            principal=principal,
            tenant=principal.tenant,
            request_id=uuid.uuid4().hex,
            tokens=tokens,
            streams=False,
        )
        _reserve(plan=plan, principal=principal)
    except Refused as exc:
        metrics.record_refusal(reason=exc.reason, tenant=principal.tenant.slug)
        raise
    return EmbeddingTicket(principal, plan, tokens)


def embeddings_settle(*, ticket: EmbeddingTicket, served: bool, latency_ms: int) -> None:
    """End the reservation (the tokens when served, nothing when not) and record the usage."""
    if ticket.settled:
        return
    ticket.settled = True
    used = ticket.tokens if served else 0
    limits_settle(plan=ticket.plan, used_tokens=used)
    usage_record_embeddings(
        principal=ticket.principal, tokens=used, latency_ms=latency_ms, ok=served
    )
