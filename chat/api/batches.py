"""REST for batch jobs: submit many chat completions at once, follow progress, fetch results,
cancel. Same key authentication and error objects as the chat completions endpoint.

    POST /v1/batches               {"requests": [<chat completion request>, ...], "name": "..."}
                                   or a JSONL body (Content-Type: application/jsonl), one request
                                   per line; either form may wrap a request as
                                   {"custom_id": "...", "body": {...}} (OpenAI's batch lines)
    GET  /v1/batches               the tenant's latest batches
    GET  /v1/batches/{id}          status and progress
    GET  /v1/batches/{id}/results  JSONL: one line per finished item, in order
    POST /v1/batches/{id}/cancel
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from channels.db import database_sync_to_async
from django.http import Http404, HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from pydantic import ValidationError

from chat import batches
from chat.api import schemas, structured
from chat.api.endpoint import (
    MAX_BODY_BYTES,
    ApiError,
    _json_refused,
    _principal,
    _validation_error,
    api_body,
    api_endpoint,
    served_model,
)
from chat.api.views import _sampling, _served_models, check_served_model
from chat.batches import BatchError, BatchRequest
from chat.models import Batch, BatchItem
from chat.services.checks import ChatError
from inference.service import engine_mode
from qassist.json_input import JsonInputError, parse_json
from tenants.services import Principal

LIST_LIMIT = 100


BATCH_MAX_BODY_BYTES = 4 * MAX_BODY_BYTES  # up to QASSIST_BATCH_MAX_ITEMS requests at once


@api_endpoint(methods=("GET", "POST"), max_body=BATCH_MAX_BODY_BYTES)
async def batch_collection(request: HttpRequest) -> HttpResponseBase:
    principal = _principal(request)
    if request.method == "GET":
        rows = await database_sync_to_async(_list)(principal)
        return JsonResponse({"object": "list", "data": rows})
    name, lines = _parse_batch(request)
    served = await _served_models()
    for where, line in lines:  # each line's model as chat completions checks it
        check_served_model(
            principal, line.model, served, param=f"{where}.model", where=f"{where}: "
        )
    requests = [line for _where, line in lines]
    try:
        batch = await database_sync_to_async(batches.batch_create)(
            tenant=principal.tenant, requests=requests, api_key=principal.api_key, name=name
        )
    except BatchError as error:
        raise ApiError(400, error.message, code=error.code, param=error.param) from None
    return JsonResponse(await database_sync_to_async(batch_data)(batch), status=201)


@api_endpoint(methods=("GET",))
async def batch_detail(request: HttpRequest, batch_id: str) -> HttpResponseBase:
    batch = await database_sync_to_async(_get)(_principal(request), batch_id)
    return JsonResponse(await database_sync_to_async(batch_data)(batch))


@api_endpoint(methods=("POST",))
async def batch_cancel(request: HttpRequest, batch_id: str) -> HttpResponseBase:
    batch = await database_sync_to_async(_get)(_principal(request), batch_id)
    await database_sync_to_async(batches.batch_cancel)(batch=batch)
    return JsonResponse(await database_sync_to_async(batch_data)(batch))


@api_endpoint(methods=("GET",))
async def batch_results(request: HttpRequest, batch_id: str) -> HttpResponseBase:
    batch = await database_sync_to_async(_get)(_principal(request), batch_id)
    lines = await database_sync_to_async(lambda: list(results_jsonl(batch)))()
    response = StreamingHttpResponse(iter(lines), content_type="application/jsonl")
    response["Content-Disposition"] = f'attachment; filename="{batch_ref(batch)}.jsonl"'
    return response


# --- shapes ----------------------------------------------------------------------------------


def batch_ref(batch: Batch) -> str:
    return f"batch_{batch.id.hex}"


def _stamp(value: Any) -> int | None:
    return int(value.timestamp()) if value is not None else None


def batch_data(batch: Batch) -> dict[str, Any]:
    counts = batches.batch_counts(batch=batch)
    return schemas.BatchObject(
        id=batch_ref(batch),
        object="batch",
        name=batch.name,
        status=batch.status,
        created_at=_stamp(batch.created_at),
        started_at=_stamp(batch.started_at),
        finished_at=_stamp(batch.finished_at),
        request_counts=schemas.BatchRequestCounts(
            total=batch.total,
            completed=counts[BatchItem.Status.DONE],
            failed=counts[BatchItem.Status.FAILED],
            cancelled=counts[BatchItem.Status.CANCELLED],
            pending=counts[BatchItem.Status.PENDING],
            running=counts[BatchItem.Status.RUNNING],
        ),
    ).model_dump(mode="json")


def result_line(batch: Batch, item: BatchItem) -> dict[str, Any]:
    line = schemas.BatchResultLine(
        custom_id=item.custom_id or None, index=item.index, status=item.status
    )
    if item.status == BatchItem.Status.DONE:
        line.response = schemas.BatchResponse(
            id=f"{batch_ref(batch)}-{item.index}",
            object="chat.completion",
            created=_stamp(item.finished_at),
            model=item.model or served_model(),
            choices=[
                schemas.BatchChoice(
                    index=0,
                    message=schemas.ChatMessageOut(role="assistant", content=item.content),
                    finish_reason=item.finish_reason,
                )
            ],
            usage=schemas.BatchUsage(
                prompt_tokens=item.prompt_tokens,
                completion_tokens=item.completion_tokens,
                total_tokens=item.prompt_tokens + item.completion_tokens,
            ),
        )
    else:
        line.error = schemas.BatchItemError(code=item.error_code or item.status, message=item.error)
    # A line has a response or an error, not both as null.
    return line.model_dump(mode="json", exclude={"error" if line.response else "response"})


def results_jsonl(batch: Batch) -> Iterator[str]:
    for item in batches.batch_results(batch=batch):
        yield json.dumps(result_line(batch, item), ensure_ascii=False) + "\n"


# --- helpers ---------------------------------------------------------------------------------


def _list(principal: Principal) -> list[dict[str, Any]]:
    _resume_here()
    rows = Batch.objects.filter(tenant=principal.tenant).order_by("-created_at")[:LIST_LIMIT]
    return [batch_data(batch) for batch in rows]


def _get(principal: Principal, ref: str) -> Batch:
    """The tenant's batch; anyone else's is not found, like one that does not exist."""
    _resume_here()
    try:
        batch_id = uuid.UUID(ref.removeprefix("batch_"))
    except ValueError:
        raise Http404("No such batch.") from None
    batch = Batch.objects.filter(id=batch_id, tenant=principal.tenant).first()
    if batch is None:
        raise Http404("No such batch.")
    return batch


def _resume_here() -> None:
    """Embedded, batches run in this process (no Celery beat reaches it): someone looking at
    batches is the moment to restart any whose runner died with an earlier process."""
    if engine_mode() != "redis":
        batches.batches_resume()


def _parse_batch(request: HttpRequest) -> tuple[str, list[tuple[str, BatchRequest]]]:
    """The batch's name and its requests, each with where it was in the body (`line 4`,
    `requests[3]`) for the errors that name it."""
    content_type = request.content_type or ""
    try:
        text = api_body(request).decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "The request body is not UTF-8.", code="invalid_json") from None
    name = ""
    if content_type in ("application/jsonl", "application/x-ndjson", "application/json-lines"):
        raw: list[tuple[str, Any]] = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                raw.append((f"line {number}", parse_json(line)))
            except JsonInputError as exc:
                error = _json_refused(exc)
                error.message = (
                    f"Line {number} is not valid JSON."
                    if exc.kind == "invalid"
                    else f"Line {number}: {error.message}"
                )
                raise error from None
    else:
        try:
            data = parse_json(text or "null")
        except JsonInputError as exc:
            raise _json_refused(exc) from None
        if not isinstance(data, dict) or not isinstance(data.get("requests"), list):
            raise ApiError(
                400,
                'The body must be {"requests": [...]} or JSONL (Content-Type: application/jsonl).',
                code="invalid_json",
                param="requests",
            )
        unknown = sorted(set(data) - {"requests", "name"})
        if unknown:
            raise ApiError(
                400,
                f"Unrecognized request argument supplied: {unknown[0]}",
                code="unknown_parameter",
                param=unknown[0],
            )
        name = str(data.get("name") or "")[:200]
        raw = [(f"requests[{i}]", entry) for i, entry in enumerate(data["requests"])]
    return name, [(where, _batch_request(where, entry)) for where, entry in raw]


# A batch item's reply is stored as text: nothing reads it back into tool calls or logprobs.
_NOT_IN_BATCHES = ("tools", "tool_choice", "response_format", "logprobs", "top_logprobs")


def _batch_request(where: str, entry: Any) -> BatchRequest:
    if not isinstance(entry, dict):
        raise ApiError(400, f"{where} must be a JSON object.", code="invalid_value", param=where)
    custom_id = ""
    if "body" in entry:
        custom_id = str(entry.get("custom_id") or "")[:256]
        entry = entry["body"]
        if not isinstance(entry, dict):
            raise ApiError(400, f"{where}.body must be an object.", param=f"{where}.body")
    try:
        body = schemas.ChatCompletionRequest.model_validate(entry)
    except ValidationError as exc:
        error = _validation_error(exc)
        error.message = f"{where}: {error.message}"
        error.param = f"{where}.{error.param}" if error.param else where
        raise error from None
    if body.stream:
        raise ApiError(
            400,
            f"{where}: stream is not available in a batch; fetch the results instead.",
            code="invalid_value",
            param=f"{where}.stream",
        )
    for name in _NOT_IN_BATCHES:
        value = getattr(body, name)
        if value not in (None, False) and not (name == "response_format" and value.type == "text"):
            raise ApiError(
                400,
                f"{where}: {name} is not available in a batch; send such requests to "
                "/v1/chat/completions.",
                code="unsupported_parameter",
                param=f"{where}.{name}",
            )
    try:
        messages = structured.engine_messages(body.messages)
    except ChatError as exc:
        raise ApiError(
            400, f"{where}: {exc.message}", code=exc.code, param=f"{where}.{exc.param}"
        ) from None
    return BatchRequest(
        messages=messages, params=_sampling(body), custom_id=custom_id, model=body.model
    )
