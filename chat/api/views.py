"""The REST API's views: thin and async. Authenticate the key, validate the body against the
schema types, hand the request to the one admission path, and translate engine events into
OpenAI's responses and server-sent events. No thread is held per stream.

Every error is OpenAI's error object with the status its client maps to an exception class:
400 BadRequestError, 401 AuthenticationError, 404 NotFoundError, 429 RateLimitError,
5xx InternalServerError.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from channels.db import database_sync_to_async
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from pydantic import ValidationError

from chat import admission
from chat.admission import Refused, Ticket
from chat.api import schemas, structured, tools
from chat.api.endpoint import (
    FINGERPRINT,
    ApiError,
    _failed,
    _json,
    _principal,
    _refused,
    _session_id,
    _sse,
    _validation_error,
    api_endpoint,
    api_json,
    served_model,
)
from chat.api.structured import CompletionPlan
from chat.citing import Checked, with_citations
from chat.keepalive import keep_reply_alive
from chat.reply_language import NONE, ReplyLanguage, asked_again, first_asked, kept_in_language
from chat.services.api import api_completion_for
from chat.services.checks import ChatError
from chat.services.replies import message_data, reply_finish, reply_outcome
from chat.services.sampling import default_sampling
from chat.services.turns import Turn
from inference.service import get_engine_client
from inference.types import Delta, Done, Event, Failed, Queued, SamplingParams
from knowledge.turns import mark_cited
from qassist.after_response import after_response
from tenants.services import (
    ModelNotAllowed,
    ModelNotServed,
    Principal,
    check_tenant_model,
    tenant_served_models,
)

logger = logging.getLogger(__name__)

# --- endpoints ------------------------------------------------------------------------------


@api_endpoint(methods=("GET",))
async def models(request: HttpRequest) -> HttpResponseBase:
    from chat.api.embeddings import served_embedding_model

    # The chat models the key's tenant may use that are being served, its default first (the
    # deployment's default even while no engine serves it: a request for it then answers
    # worker_down), then the embedding model. Models other tenants have are never listed.
    chat_models = await tenant_models_served(_principal(request))
    served = [*chat_models, served_embedding_model()]
    return _json(
        schemas.ModelList(
            object="list",
            data=[
                schemas.Model(id=m, object="model", created=0, owned_by="qassist") for m in served
            ],
        )
    )


async def _served_models() -> list[str]:
    """The chat models being served now, the default first; the default is listed even while
    no engine serves it, so that a request for it is answered worker_down, as before #36."""
    served = await get_engine_client().served_models()
    default = served_model()
    return [default, *(m for m in served if m != default)]


async def tenant_models_served(principal: Principal) -> list[str]:
    """The models `principal`'s tenant may ask for now, its default first."""
    return tenant_served_models(tenant=principal.tenant, served=await _served_models())


async def check_model(principal: Principal, model: str) -> None:
    """The model a request names, checked against the tenant's rule and what is served."""
    check_served_model(principal, model, await _served_models())


def check_served_model(
    principal: Principal, model: str, served: list[str], *, param: str = "model", where: str = ""
) -> None:
    """A 400 model_not_allowed (a model the tenant may not use) or a 404 model_not_found (one
    nobody serves now), each naming only the models the tenant may use. `where`: the line of a
    batch, put before the message."""
    try:
        check_tenant_model(tenant=principal.tenant, requested=model, served=served)
    except ModelNotAllowed as exc:
        raise ApiError(400, f"{where}{exc}", code="model_not_allowed", param=param) from None
    except ModelNotServed as exc:
        raise ApiError(404, f"{where}{exc}", code="model_not_found", param=param) from None


@api_endpoint(methods=("POST",))
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    body = _parse(request)
    principal = _principal(request)
    await check_model(principal, body.model)
    try:
        plan = structured.completion_plan(body)
    except ChatError as exc:
        raise ApiError(400, exc.message, code=exc.code, param=exc.param) from None
    params = dataclasses.replace(
        _sampling(body), constraint=plan.constraint, logprobs=plan.logprobs
    )
    try:
        turn, ticket = await database_sync_to_async(admission.api_begin)(
            principal=principal,
            messages=plan.messages,
            params=params,
            model=body.model,
            external_user=body.user or "",
            # A conversation with the integration's own instructions is another context than
            # the question alone: a curated answer is not replayed into it; nor into a reply
            # that must be JSON, may call tools or reports logprobs.
            cacheable=plan.plain
            and not any(m.role in ("system", "developer") for m in body.messages),
        )
    except Refused as exc:
        raise _refused(exc) from None
    except ChatError as exc:
        raise ApiError(400, exc.message, code=exc.code, param=exc.param) from None
    # Prose from passages is cited after it; JSON and tool calls are left as the model wrote.
    prose = plan.constraint is None and not plan.tool_names
    cite = bool(turn.sources) and prose
    run = _run(turn, ticket, cite=cite, language=turn.language if prose else NONE)
    # A stream opens while its request waits in line, to tell its place (SSE comments); a
    # whole reply's status is decided by the first event that is not a place in line.
    first = await _first_event(run, queued=bool(body.stream))
    if isinstance(first, Failed):
        await run.aclose()
        raise _failed(first)
    completion_id = f"chatcmpl-{turn.session.id.hex}"
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        answered_by = ticket.submission.model or served_model()
        stream = _sse_stream(
            completion_id, first, run, include_usage, turn.sources, plan, answered_by
        )
        response = EventStreamResponse(stream)
        # A client gone before the server reads the response: the generation is closed all
        # the same (the stream's own `finally` only runs once it is read).
        after_response(request, run.aclose)
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # proxies must not hold the stream back
        return response
    return await _whole(
        completion_id, first, run, turn.sources, plan, ticket.submission.model or served_model()
    )


@api_endpoint(methods=("GET",))
async def completion_detail(request: HttpRequest, completion_id: str) -> HttpResponseBase:
    _session, reply = await database_sync_to_async(api_completion_for)(
        principal=_principal(request), session_id=_session_id(completion_id)
    )
    usage = _usage(reply.prompt_tokens, reply.completion_tokens, 0)
    sources = await database_sync_to_async(message_data)(reply)
    return _json(
        schemas.ChatCompletion(
            id=completion_id,
            object="chat.completion",
            created=int(reply.created_at.timestamp()),
            model=reply.model or served_model(),
            choices=[
                schemas.Choice(
                    index=0,
                    message=schemas.ChatMessageOut(role="assistant", content=reply.content),
                    finish_reason="length" if reply.finish_reason == "length" else "stop",
                )
            ],
            usage=usage,
            system_fingerprint=FINGERPRINT,
            sources=_sources(sources.get("sources") or [], reply.content),
        ),
        exclude_none_fields={"sources"},
    )


@api_endpoint(methods=("GET",))
async def completion_messages(request: HttpRequest, completion_id: str) -> HttpResponseBase:
    session, reply = await database_sync_to_async(api_completion_for)(
        principal=_principal(request), session_id=_session_id(completion_id)
    )
    stored = await database_sync_to_async(
        lambda: list(session.messages.exclude(id=reply.id).order_by("created_at", "id"))
    )()
    data = [
        schemas.StoredMessage(id=f"{completion_id}-{i}", role=m.role, content=m.content)
        for i, m in enumerate(stored)
    ]
    return _json(
        schemas.StoredMessageList(
            object="list",
            data=data,
            first_id=data[0].id if data else None,
            last_id=data[-1].id if data else None,
            has_more=False,
        )
    )


@api_endpoint(methods=("GET",), auth=False)
async def openapi(request: HttpRequest) -> HttpResponseBase:
    from chat.api.openapi import openapi_document

    return JsonResponse(openapi_document())


@api_endpoint(methods=("GET", "POST", "PUT", "PATCH", "DELETE"), auth=False)
async def not_found(request: HttpRequest, rest: str = "") -> HttpResponseBase:
    raise ApiError(404, f"Unknown endpoint: {request.method} {request.path}.", code="not_found")


# --- helpers -------------------------------------------------------------------------------


class EventStreamResponse(StreamingHttpResponse):
    """Server-sent events whose generator is closed as soon as the server stops reading.

    Django's handler closes the iterator it reads (`aclosing(aiter(response))`), but the
    stock response reads ours through a wrapper that does not close it in turn: a client gone
    while the stream waited at a `yield` would leave the generation running until garbage
    collection. Here closing the response's iterator closes ours, which cancels the generation
    and settles the request at once."""

    def __init__(self, events: AsyncGenerator[bytes, None]) -> None:
        super().__init__(events, content_type="text/event-stream")
        self._events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async with contextlib.aclosing(self._events):
            async for part in self._events:
                yield part


def _parse(request: HttpRequest) -> schemas.ChatCompletionRequest:
    data = api_json(request)
    if not isinstance(data, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_json")
    try:
        return schemas.ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc) from None


def _sampling(body: schemas.ChatCompletionRequest) -> SamplingParams:
    default = default_sampling()
    max_tokens = body.max_completion_tokens or body.max_tokens or default.max_tokens
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=default.temperature if body.temperature is None else body.temperature,
        top_p=default.top_p if body.top_p is None else body.top_p,
        frequency_penalty=body.frequency_penalty or 0.0,
        presence_penalty=body.presence_penalty or 0.0,
        seed=body.seed,
        stop=body.stops,
    )


def _queued_comment(event: Queued) -> bytes:
    """A place in line as an SSE comment, which SSE clients (the `openai` client included)
    skip: `: queued {"position": 2, "estimated_wait": 14.5}`."""
    place = {"position": event.position, "estimated_wait": event.estimated_wait}
    return f": queued {json.dumps(place)}\n\n".encode()


def _usage(prompt: int, completion: int, cached: int) -> schemas.Usage:
    return schemas.Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        prompt_tokens_details=schemas.PromptTokensDetails(cached_tokens=cached),
    )


async def _first_event(run: AsyncIterator[Event | Checked], *, queued: bool) -> Event | Checked:
    """The first event that decides the response's status; with `queued`, a place in line
    (which starts a stream) too."""
    async for event in run:
        if queued or not isinstance(event, Queued):
            return event
    raise RuntimeError("the engine ended a request without a word")  # pragma: no cover


async def _run(
    turn: Turn, ticket: Ticket, *, cite: bool = False, language: ReplyLanguage = NONE
) -> AsyncGenerator[Event | Checked, None]:
    """The engine's events for an admitted request (or the cached answer as if generated),
    with the reply stored and the limits settled however it ends — a client that goes away
    included: closing this generator cancels the generation within a step. A prose reply
    whose start is in another language than `language` is asked once more
    (chat.reply_language)."""
    reply_id = turn.reply.id
    started = time.monotonic()
    parts: list[str] = []
    outcome: dict[str, Any] = {"finish_reason": "cancelled", "error": ""}
    evidence: dict[str, Any] | None = None
    async with admission.held(ticket) as usage:
        # The reply's text is written only at the end: say meanwhile that it is alive.
        keep_alive = keep_reply_alive(reply_id)
        try:
            answer = ticket.answer_without_model
            if answer is not None:
                parts.append(answer)
                usage.prompt_tokens = usage.completion_tokens = 0
                outcome = {
                    "finish_reason": "stop",
                    "error": "",
                    "served_from_cache": ticket.cached is not None,
                }
                yield Delta(ticket.submission.request_id, answer)
                # The sources of a cached reply, or what the documents come closest to saying.
                evidence = ticket.cached_evidence
                shown = evidence or turn.reply.evidence
                if shown:
                    yield Checked(ticket.submission.request_id, shown)
                yield Done(ticket.submission.request_id, "stop", 0, 0)
                return
            first = first_asked(ticket.submission, language)
            again = asked_again(ticket.submission, language)
            events = with_citations(
                kept_in_language(
                    get_engine_client().generate(first),
                    language=language,
                    again=lambda: get_engine_client().generate(again),
                ),
                question_message_id=turn.user_message.id,
                cite=cite,
                chinese_notes=language.chinese_notes,
            )
            # aclosing: a client gone while this generator waits at `yield` closes it from
            # there; the engine's stream must be closed too, which cancels the generation.
            async with contextlib.aclosing(events):  # type: ignore[type-var]
                async for event in events:
                    if isinstance(event, Delta):
                        parts.append(event.text)
                    elif isinstance(event, Checked):
                        evidence = event.record
                        if event.replacement is not None:
                            parts[:] = [event.replacement]
                    elif isinstance(event, Done):
                        usage.prompt_tokens = event.prompt_tokens
                        usage.completion_tokens = event.completion_tokens
                        outcome = reply_outcome(event)
                    elif isinstance(event, Failed):
                        outcome = reply_outcome(event)
                    yield event  # a place in line too: a stream tells it as a comment
        finally:
            keep_alive.cancel()
            if usage.completion_tokens is None:
                usage.prompt_tokens = ticket.prompt_tokens if parts else 0
                usage.completion_tokens = len(parts)
            outcome.setdefault("prompt_tokens", usage.prompt_tokens)
            outcome.setdefault("completion_tokens", usage.completion_tokens)
            await asyncio.shield(
                database_sync_to_async(reply_finish)(
                    reply_id=reply_id,
                    content="".join(parts),
                    latency_ms=round((time.monotonic() - started) * 1000),
                    evidence=evidence,
                    **outcome,
                )
            )


def _sources(
    sources: list[dict[str, Any]], text: str, evidence: dict[str, Any] | None = None
) -> list[schemas.Source] | None:
    """The extension field: None (left out) when the tenant has no company knowledge; each
    source with the sentences the reply's support check quoted from it."""
    if not sources and not (evidence or {}).get("earlier"):
        return None
    return [schemas.Source.model_validate(s) for s in mark_cited(sources, text, evidence)]


def _finish_reason(done: Done, calls: bool) -> schemas.FinishReason:
    if done.finish_reason == "length":
        return "length"
    return "tool_calls" if calls else "stop"


def _logprobs(entries: list[dict[str, Any]] | None) -> schemas.ChoiceLogprobs | None:
    if entries is None:
        return None
    return schemas.ChoiceLogprobs(content=[schemas.TokenLogprob.model_validate(e) for e in entries])


def _tool_calls(calls: list[tools.ParsedCall]) -> list[schemas.ToolCall] | None:
    if not calls:
        return None
    return [
        schemas.ToolCall(
            id=c.id,
            type="function",
            function=schemas.FunctionCall(name=c.name, arguments=c.arguments),
        )
        for c in calls
    ]


async def _whole(
    completion_id: str,
    first: Event | Checked,
    run: AsyncGenerator[Event | Checked, None],
    sources: list[dict[str, Any]],
    plan: CompletionPlan,
    model_name: str,
) -> HttpResponseBase:
    parts: list[str] = []
    logprobs: list[dict[str, Any]] | None = [] if plan.logprobs is not None else None
    done: Done | None = None
    evidence: dict[str, Any] | None = None
    event: Event | Checked | None = first
    try:
        while event is not None:
            if isinstance(event, Delta):
                parts.append(event.text)
                if logprobs is not None:
                    logprobs += event.logprobs or []
            elif isinstance(event, Checked):
                evidence = event.record
                if event.replacement is not None:
                    parts = [event.replacement]
            elif isinstance(event, Done):
                done = event
            elif isinstance(event, Failed):
                raise _failed(event)
            event = await anext(run, None)
    finally:
        await run.aclose()
    assert done is not None
    text: str | None = "".join(parts)
    calls: list[tools.ParsedCall] = []
    if plan.tool_names and text is not None:
        text, calls = tools.read_reply(text, plan.tool_names, parallel=plan.parallel_tool_calls)
    return _json(
        schemas.ChatCompletion(
            id=completion_id,
            object="chat.completion",
            created=int(time.time()),
            model=model_name,
            choices=[
                schemas.Choice(
                    index=0,
                    message=schemas.ChatMessageOut(
                        role="assistant", content=text, tool_calls=_tool_calls(calls)
                    ),
                    finish_reason=_finish_reason(done, bool(calls)),
                    logprobs=_logprobs(logprobs),
                )
            ],
            usage=_usage(done.prompt_tokens, done.completion_tokens, done.cached_tokens),
            system_fingerprint=FINGERPRINT,
            sources=_sources(sources, "".join(parts), evidence),
        ),
        exclude_none_fields={"sources"},
    )


async def _sse_stream(
    completion_id: str,
    first: Event | Checked,
    run: AsyncGenerator[Event | Checked, None],
    include_usage: bool,
    sources: list[dict[str, Any]],
    plan: CompletionPlan,
    model_name: str,
) -> AsyncGenerator[bytes, None]:
    created = int(time.time())
    text: list[str] = []
    reader = (
        tools.ToolCallReader(plan.tool_names, plan.parallel_tool_calls) if plan.tool_names else None
    )
    calls = 0
    held: list[dict[str, Any]] = []  # logprobs of text the tool-call reader holds back
    evidence: dict[str, Any] | None = None

    def chunk(
        delta: schemas.ChunkDelta,
        finish: schemas.FinishReason | None = None,
        with_sources: bool = False,
        logprobs: list[dict[str, Any]] | None = None,
    ) -> bytes:
        model = schemas.ChatCompletionChunk(
            id=completion_id,
            object="chat.completion.chunk",
            created=created,
            model=model_name,
            choices=[
                schemas.ChunkChoice(
                    index=0, delta=delta, finish_reason=finish, logprobs=_logprobs(logprobs)
                )
            ],
            system_fingerprint=FINGERPRINT,
            sources=_sources(sources, "".join(text), evidence) if with_sources else None,
        )
        return _sse(model, exclude_none_fields={"sources"})

    def content(piece: str, found: list[tools.ParsedCall]) -> list[bytes]:
        """The chunks for content the tool-call reader let through and the calls it completed;
        the logprobs of the text it held go with the first of them."""
        nonlocal calls, held
        out = []
        logprobs = held if plan.logprobs is not None else None
        if piece:
            out.append(chunk(schemas.ChunkDelta(content=piece), logprobs=logprobs))
            logprobs = None
        for call in found:
            for fragment in _call_fragments(calls, call):
                out.append(chunk(schemas.ChunkDelta(tool_calls=[fragment]), logprobs=logprobs))
                logprobs = None
            calls += 1
        if out:
            held = []
        return out

    try:
        opened = False  # the role chunk is sent when the reply starts, after any wait in line
        event: Event | Checked | None = first
        while event is not None:
            if isinstance(event, Queued):
                yield _queued_comment(event)
                event = await anext(run, None)
                continue
            if not opened and not isinstance(event, Failed):
                opened = True
                yield chunk(schemas.ChunkDelta(role="assistant", content=""))
            if isinstance(event, Checked):
                evidence = event.record
                if event.replacement is not None:
                    # Documents only: what was streamed cannot be taken back; it is followed
                    # by what the documents do say, which is also what is stored.
                    withdrawn = f"\n\n---\n{event.replacement}"
                    text[:] = [event.replacement]
                    yield chunk(schemas.ChunkDelta(content=withdrawn))
            elif isinstance(event, Delta):
                text.append(event.text)
                if reader is None:
                    yield chunk(schemas.ChunkDelta(content=event.text), logprobs=event.logprobs)
                else:
                    held += event.logprobs or []
                    for part in content(*reader.push(event.text)):
                        yield part
            elif isinstance(event, Done):
                if reader is not None:
                    for part in content(*reader.finish()):
                        yield part
                finish = _finish_reason(event, calls > 0)
                yield chunk(schemas.ChunkDelta(), finish, with_sources=True)
                if include_usage:
                    yield _sse(
                        schemas.ChatCompletionChunk(
                            id=completion_id,
                            object="chat.completion.chunk",
                            created=created,
                            model=model_name,
                            choices=[],
                            usage=_usage(
                                event.prompt_tokens, event.completion_tokens, event.cached_tokens
                            ),
                            system_fingerprint=FINGERPRINT,
                        )
                    )
                yield b"data: [DONE]\n\n"
                return
            elif isinstance(event, Failed):
                yield _failed(event).event()
                return
            event = await anext(run, None)
    finally:
        # Also when the client went away mid-stream (the server cancels this generator):
        # closing the run cancels the generation and settles the request.
        await asyncio.shield(run.aclose())


def _call_fragments(index: int, call: tools.ParsedCall) -> list[schemas.ChunkToolCall]:
    """A completed call as OpenAI streams one, a chunk each: its id, type and name first, then
    its arguments."""
    return [
        schemas.ChunkToolCall(
            index=index,
            id=call.id,
            type="function",
            function=schemas.ChunkFunction(name=call.name, arguments=""),
        ),
        schemas.ChunkToolCall(
            index=index, function=schemas.ChunkFunction(arguments=call.arguments)
        ),
    ]
