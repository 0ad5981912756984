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
import json
import logging
import math
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from functools import wraps
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.http import Http404, HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel, ValidationError

from chat import admission, services
from chat.admission import Refused, Ticket
from chat.api import schemas
from chat.keepalive import keep_reply_alive
from chat.services import ChatError, Turn
from inference.service import get_engine_client
from inference.types import ChatMessage, Delta, Done, Event, Failed, SamplingParams
from tenants.services import Principal, api_key_authenticate

logger = logging.getLogger(__name__)

AsyncView = Callable[..., Coroutine[Any, Any, HttpResponseBase]]
MAX_BODY_BYTES = 4 * 1024 * 1024
FINGERPRINT = "qassist"

# Engine failures: HTTP status, OpenAI error type.
_FAILURE_STATUS = {
    "busy": (503, "server_error"),
    "worker_down": (503, "server_error"),
    "shutting_down": (503, "server_error"),
    "prompt_too_long": (400, "invalid_request_error"),
    "invalid_request": (400, "invalid_request_error"),
}


# --- errors --------------------------------------------------------------------------------


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.retry_after = retry_after

    def response(self) -> JsonResponse:
        detail = schemas.ErrorDetail(
            message=self.message, type=self.type, param=self.param, code=self.code
        )
        response = JsonResponse(
            schemas.ErrorResponse(error=detail).model_dump(), status=self.status
        )
        if self.retry_after is not None:
            response["Retry-After"] = str(max(1, math.ceil(self.retry_after)))
        return response

    def event(self) -> bytes:
        detail = schemas.ErrorDetail(
            message=self.message, type=self.type, param=self.param, code=self.code
        )
        return _sse(schemas.ErrorResponse(error=detail))


def _refused(exc: Refused) -> ApiError:
    if exc.code == "prompt_too_long":
        return ApiError(400, exc.message, code="context_length_exceeded", param="messages")
    if exc.code == "quota_exceeded":
        return ApiError(
            429,
            exc.message,
            type="insufficient_quota",
            code="insufficient_quota",
            retry_after=exc.retry_after,
        )
    if exc.code == "rate_limited":
        return ApiError(
            429,
            exc.message,
            type="tokens" if exc.reason == "tokens_per_minute" else "requests",
            code="rate_limit_exceeded",
            retry_after=exc.retry_after,
        )
    if exc.code in ("unavailable", "worker_down", "busy"):
        return ApiError(
            503, exc.message, type="server_error", code=exc.code, retry_after=exc.retry_after
        )
    return ApiError(401, exc.message, code="invalid_api_key")


def _failed(event: Failed) -> ApiError:
    status, kind = _FAILURE_STATUS.get(event.code, (500, "server_error"))
    code = "context_length_exceeded" if event.code == "prompt_too_long" else event.code
    return ApiError(status, event.message, type=kind, code=code, retry_after=event.retry_after)


def _validation_error(exc: ValidationError) -> ApiError:
    error = exc.errors()[0]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, schemas.UnsupportedParameter):
        return ApiError(400, str(cause), code="unsupported_parameter", param=cause.param)
    # Union members and validators appear in `loc` as tags ("str", "list[TextPart]"): the
    # client named fields and indexes, not those.
    loc = [part for part in error["loc"] if isinstance(part, int) or not _is_type_tag(part)]
    param = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or None
    if error["type"] == "extra_forbidden":
        return ApiError(
            400,
            f"Unrecognized request argument supplied: {param}",
            code="unknown_parameter",
            param=param,
        )
    if error["type"] == "missing":
        return ApiError(400, f"Missing required parameter: '{param}'.", param=param)
    message = str(error["msg"]).removeprefix("Value error, ")
    return ApiError(
        400, f"Invalid value for '{param}': {message}", code="invalid_value", param=param
    )


def _is_type_tag(part: str) -> bool:
    return part in {"str", "int", "float", "bool"} or "[" in part or part[:1].isupper()


# --- the decorator every endpoint wears ---------------------------------------------------


def api_endpoint(
    *, methods: tuple[str, ...], auth: bool = True
) -> Callable[[AsyncView], AsyncView]:
    """Method check, bearer-key authentication (`request.principal`), and every failure as
    OpenAI's error object — a traceback never reaches the client."""

    def decorate(view: AsyncView) -> AsyncView:
        @csrf_exempt
        @wraps(view)
        async def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            try:
                if request.method not in methods:
                    raise ApiError(
                        405,
                        f"{request.method} is not allowed here; use {', '.join(methods)}.",
                        code="method_not_allowed",
                    )
                if auth:
                    request.principal = await _authenticate(request)  # type: ignore[attr-defined]
                return await view(request, *args, **kwargs)
            except ApiError as exc:
                return exc.response()
            except Http404 as exc:
                return ApiError(404, str(exc) or "Not found.", code="not_found").response()
            except Exception:
                logger.exception("REST %s %s failed", request.method, request.path)
                return ApiError(
                    500, "The server failed to handle this request.", type="server_error"
                ).response()

        return wrapped

    return decorate


async def _authenticate(request: HttpRequest) -> Principal:
    header = request.headers.get("Authorization", "")
    scheme, _, raw_key = header.partition(" ")
    if scheme.lower() != "bearer" or not raw_key.strip():
        raise ApiError(
            401,
            "You didn't provide an API key: send `Authorization: Bearer <key>`.",
            code="invalid_api_key",
        )
    api_key = await database_sync_to_async(api_key_authenticate)(raw_key=raw_key)
    if api_key is None:
        raise ApiError(
            401, "Incorrect, revoked or expired API key provided.", code="invalid_api_key"
        )
    return Principal(tenant=api_key.tenant, api_key=api_key)


def _principal(request: HttpRequest) -> Principal:
    principal: Principal = request.principal  # type: ignore[attr-defined]
    return principal


# --- endpoints ------------------------------------------------------------------------------


def served_model() -> str:
    return str(settings.QASSIST_MODEL)


@api_endpoint(methods=("GET",))
async def models(request: HttpRequest) -> HttpResponseBase:
    return _json(
        schemas.ModelList(
            object="list",
            data=[schemas.Model(id=served_model(), object="model", created=0, owned_by="qassist")],
        )
    )


@api_endpoint(methods=("POST",))
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    body = _parse(request)
    if body.model != served_model():
        raise ApiError(
            404,
            f"The model '{body.model}' does not exist; this server serves '{served_model()}'.",
            code="model_not_found",
            param="model",
        )
    principal = _principal(request)
    messages = [ChatMessage(m.engine_role, m.text) for m in body.messages]
    try:
        turn, ticket = await database_sync_to_async(admission.api_begin)(
            principal=principal,
            messages=messages,
            params=_sampling(body),
            external_user=body.user or "",
            # A conversation with the integration's own instructions is another context than
            # the question alone: a curated answer is not replayed into it.
            cacheable=not any(m.role in ("system", "developer") for m in body.messages),
        )
    except Refused as exc:
        raise _refused(exc) from None
    except ChatError as exc:
        raise ApiError(400, exc.message, code=exc.code, param=exc.param) from None
    run = _run(turn, ticket)
    first = await _first_event(run)
    if isinstance(first, Failed):
        await run.aclose()
        raise _failed(first)
    completion_id = f"chatcmpl-{turn.session.id.hex}"
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        stream = _sse_stream(completion_id, first, run, include_usage)
        response = EventStreamResponse(stream)
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # proxies must not hold the stream back
        return response
    return await _whole(completion_id, first, run)


@api_endpoint(methods=("GET",))
async def completion_detail(request: HttpRequest, completion_id: str) -> HttpResponseBase:
    _session, reply = await database_sync_to_async(services.api_completion_get)(
        tenant=_principal(request).tenant, session_id=_session_id(completion_id)
    )
    usage = _usage(reply.prompt_tokens, reply.completion_tokens, 0)
    return _json(
        schemas.ChatCompletion(
            id=completion_id,
            object="chat.completion",
            created=int(reply.created_at.timestamp()),
            model=served_model(),
            choices=[
                schemas.Choice(
                    index=0,
                    message=schemas.ChatMessageOut(role="assistant", content=reply.content),
                    finish_reason="length" if reply.finish_reason == "length" else "stop",
                )
            ],
            usage=usage,
            system_fingerprint=FINGERPRINT,
        )
    )


@api_endpoint(methods=("GET",))
async def completion_messages(request: HttpRequest, completion_id: str) -> HttpResponseBase:
    session, reply = await database_sync_to_async(services.api_completion_get)(
        tenant=_principal(request).tenant, session_id=_session_id(completion_id)
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
    if len(request.body) > MAX_BODY_BYTES:
        raise ApiError(413, "The request body is too large.", code="request_too_large")
    try:
        data = json.loads(request.body or b"")
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "The request body is not valid JSON.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_json")
    try:
        return schemas.ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc) from None


def _sampling(body: schemas.ChatCompletionRequest) -> SamplingParams:
    default = services.default_sampling()
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


def _session_id(completion_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(completion_id.removeprefix("chatcmpl-"))
    except ValueError:
        raise Http404("No such completion.") from None


def _json(model: BaseModel, status: int = 200) -> JsonResponse:
    return JsonResponse(model.model_dump(mode="json"), status=status)


def _sse(model: BaseModel) -> bytes:
    return f"data: {model.model_dump_json(exclude_none=False)}\n\n".encode()


def _usage(prompt: int, completion: int, cached: int) -> schemas.Usage:
    return schemas.Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        prompt_tokens_details=schemas.PromptTokensDetails(cached_tokens=cached),
    )


async def _first_event(run: AsyncIterator[Event]) -> Event:
    """The first event that decides the response's status (a queue position does not)."""
    async for event in run:
        return event
    raise RuntimeError("the engine ended a request without a word")  # pragma: no cover


async def _run(turn: Turn, ticket: Ticket) -> AsyncGenerator[Event, None]:
    """The engine's events for an admitted request (or the cached answer as if generated),
    with the reply stored and the limits settled however it ends — a client that goes away
    included: closing this generator cancels the generation within a step."""
    reply_id = turn.reply.id
    started = time.monotonic()
    parts: list[str] = []
    outcome: dict[str, Any] = {"finish_reason": "cancelled", "error": ""}
    async with admission.held(ticket) as usage:
        # The reply's text is written only at the end: say meanwhile that it is alive.
        keep_alive = keep_reply_alive(reply_id)
        try:
            if ticket.cached is not None:
                answer = ticket.cached.answer
                parts.append(answer)
                usage.prompt_tokens = usage.completion_tokens = 0
                outcome = {"finish_reason": "stop", "error": "", "served_from_cache": True}
                yield Delta(ticket.submission.request_id, answer)
                yield Done(ticket.submission.request_id, "stop", 0, 0)
                return
            events = get_engine_client().generate(ticket.submission)
            # aclosing: a client gone while this generator waits at `yield` closes it from
            # there; the engine's stream must be closed too, which cancels the generation.
            async with contextlib.aclosing(events):  # type: ignore[type-var]
                async for event in events:
                    if isinstance(event, Delta):
                        parts.append(event.text)
                    elif isinstance(event, Done):
                        usage.prompt_tokens = event.prompt_tokens
                        usage.completion_tokens = event.completion_tokens
                        outcome = services.reply_outcome(event)
                    elif isinstance(event, Failed):
                        outcome = services.reply_outcome(event)
                    else:
                        continue  # a queue position: REST has nothing to say about it
                    yield event
        finally:
            keep_alive.cancel()
            if usage.completion_tokens is None:
                usage.prompt_tokens = ticket.prompt_tokens if parts else 0
                usage.completion_tokens = len(parts)
            outcome.setdefault("prompt_tokens", usage.prompt_tokens)
            outcome.setdefault("completion_tokens", usage.completion_tokens)
            await asyncio.shield(
                database_sync_to_async(services.reply_finish)(
                    reply_id=reply_id,
                    content="".join(parts),
                    latency_ms=round((time.monotonic() - started) * 1000),
                    **outcome,
                )
            )


async def _whole(
    completion_id: str, first: Event, run: AsyncGenerator[Event, None]
) -> HttpResponseBase:
    parts: list[str] = []
    done: Done | None = None
    event: Event | None = first
    try:
        while event is not None:
            if isinstance(event, Delta):
                parts.append(event.text)
            elif isinstance(event, Done):
                done = event
            elif isinstance(event, Failed):
                raise _failed(event)
            event = await anext(run, None)
    finally:
        await run.aclose()
    assert done is not None
    return _json(
        schemas.ChatCompletion(
            id=completion_id,
            object="chat.completion",
            created=int(time.time()),
            model=served_model(),
            choices=[
                schemas.Choice(
                    index=0,
                    message=schemas.ChatMessageOut(role="assistant", content="".join(parts)),
                    finish_reason="length" if done.finish_reason == "length" else "stop",
                )
            ],
            usage=_usage(done.prompt_tokens, done.completion_tokens, done.cached_tokens),
            system_fingerprint=FINGERPRINT,
        )
    )


async def _sse_stream(
    completion_id: str, first: Event, run: AsyncGenerator[Event, None], include_usage: bool
) -> AsyncGenerator[bytes, None]:
    created = int(time.time())

    def chunk(delta: schemas.ChunkDelta, finish: schemas.FinishReason | None = None) -> bytes:
        return _sse(
            schemas.ChatCompletionChunk(
                id=completion_id,
                object="chat.completion.chunk",
                created=created,
                model=served_model(),
                choices=[schemas.ChunkChoice(index=0, delta=delta, finish_reason=finish)],
                system_fingerprint=FINGERPRINT,
            )
        )

    try:
        yield chunk(schemas.ChunkDelta(role="assistant", content=""))
        event: Event | None = first
        while event is not None:
            if isinstance(event, Delta):
                yield chunk(schemas.ChunkDelta(content=event.text))
            elif isinstance(event, Done):
                finish: schemas.FinishReason = (
                    "length" if event.finish_reason == "length" else "stop"
                )
                yield chunk(schemas.ChunkDelta(), finish)
                if include_usage:
                    yield _sse(
                        schemas.ChatCompletionChunk(
                            id=completion_id,
                            object="chat.completion.chunk",
                            created=created,
                            model=served_model(),
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
