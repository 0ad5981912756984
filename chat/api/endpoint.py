"""What every endpoint of the REST API shares: the decorator each wears (method, body bound,
bearer key, every failure as OpenAI's error object), the errors, and the JSON and SSE
encodings. The views of chat, embeddings, documents, feedback and batches build on it; it
imports none of them.

Every error is OpenAI's error object with the status its client maps to an exception class:
400 BadRequestError, 401 AuthenticationError, 404 NotFoundError, 429 RateLimitError,
5xx InternalServerError.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Callable, Coroutine
from functools import wraps
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.http import Http404, HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel, ValidationError

from chat.admission import Refused
from chat.api import schemas
from inference.types import Failed
from qassist.json_input import JsonInputError, parse_json
from tenants.services import Principal, api_key_authenticate

logger = logging.getLogger("chat.api.views")

AsyncView = Callable[..., Coroutine[Any, Any, HttpResponseBase]]
# Each endpoint's own bound on the request body, checked before anything else (a 413 in
# OpenAI's shape); Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB, for forms) does not apply here.
MAX_BODY_BYTES = 4 * 1024 * 1024
FINGERPRINT = "qassist"

# Engine failures: HTTP status, OpenAI error type.
_FAILURE_STATUS = {
    "busy": (503, "server_error"),
    "worker_down": (503, "server_error"),
    "shutting_down": (503, "server_error"),
    "prompt_too_long": (400, "invalid_request_error"),
    "invalid_request": (400, "invalid_request_error"),
    "grammar_too_slow": (400, "invalid_request_error"),
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
    if exc.code == "model_not_allowed":
        return ApiError(400, exc.message, code="model_not_allowed", param="model")
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
    if isinstance(cause, schemas.ParameterError):
        # Raised by a model's own check: its `param` is relative to where that model sits.
        where = f"{param}.{cause.param}" if param else cause.param
        return ApiError(400, str(cause), code="invalid_value", param=where)
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
    *, methods: tuple[str, ...], auth: bool = True, max_body: int | None = MAX_BODY_BYTES
) -> Callable[[AsyncView], AsyncView]:
    """Method check, the body read within the endpoint's own `max_body` (`api_body(request)`;
    larger is a 413), bearer-key authentication (`request.principal`), and every failure as
    OpenAI's error object — a traceback never reaches the client.

    `max_body=None`: the endpoint bounds and reads its own body — a multipart upload
    (knowledge/api.py) checks the file's size against its own setting and lets Django's parser
    stream the file to disk, neither held to the JSON endpoints' 4 MiB nor to Django's 2.5 MB
    for forms (DATA_UPLOAD_MAX_MEMORY_SIZE counts only a form's non-file fields)."""

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
                request.api_body = _read_body(request, max_body)  # type: ignore[attr-defined]
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


def _read_body(request: HttpRequest, limit: int | None) -> bytes:
    """The body, at most `limit` bytes: refused from its declared length before it is read,
    and from what arrives for a body without one (chunked). None: left for the view."""
    if limit is None:
        return b""
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        raise _too_large(limit)
    body = request.read(limit + 1)
    if len(body) > limit:
        raise _too_large(limit)
    return body


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        f"The request body is too large: at most {limit // 2**20} MB here.",
        code="request_too_large",
    )


def api_body(request: HttpRequest) -> bytes:
    """The request's body as `api_endpoint` read it (request.body is not readable after)."""
    body: bytes = request.api_body  # type: ignore[attr-defined]
    return body


def api_json(request: HttpRequest) -> Any:
    """The body parsed as JSON that the rest of the server can store and tokenize: invalid
    JSON, nesting deeper than qassist.json_input.MAX_DEPTH and lone surrogates are a 400."""
    try:
        return parse_json(api_body(request) or b"")
    except JsonInputError as exc:
        raise _json_refused(exc) from None


def _json_refused(exc: JsonInputError) -> ApiError:
    if exc.kind == "surrogate":
        return ApiError(400, exc.message, code="invalid_value", param=exc.where)
    message = "The request body is not valid JSON." if exc.kind == "invalid" else exc.message
    return ApiError(400, message, code="invalid_json")


def _principal(request: HttpRequest) -> Principal:
    principal: Principal = request.principal  # type: ignore[attr-defined]
    return principal


def served_model() -> str:
    return str(settings.QASSIST_MODEL)


def _session_id(completion_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(completion_id.removeprefix("chatcmpl-"))
    except ValueError:
        raise Http404("No such completion.") from None


def _json(
    model: BaseModel, status: int = 200, *, exclude_none_fields: set[str] | None = None
) -> JsonResponse:
    data = model.model_dump(mode="json")
    for name in exclude_none_fields or ():
        if data.get(name) is None:
            data.pop(name, None)
    return JsonResponse(data, status=status)


def _sse(model: BaseModel, *, exclude_none_fields: set[str] | None = None) -> bytes:
    if not exclude_none_fields:
        return f"data: {model.model_dump_json(exclude_none=False)}\n\n".encode()
    data = model.model_dump(mode="json")
    for name in exclude_none_fields:
        if data.get(name) is None:
            data.pop(name, None)
    return f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()
