"""REST feedback for a completion, with any API key of its tenant (docs/api.md):

    POST /v1/chat/completions/{id}/feedback   {"rating": "up" | "down", "reason", "comment"}

One rating per completion: posting again replaces it. Another tenant's completion, or one of
the browser chat, is a 404 like one that does not exist.
"""

from __future__ import annotations

from typing import Literal

from channels.db import database_sync_to_async
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from chat.api.endpoint import (
    ApiError,
    _json,
    _principal,
    _session_id,
    _validation_error,
    api_endpoint,
    api_json,
)
from chat.services.checks import ChatError
from feedback import services
from feedback.models import Feedback


class FeedbackCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rating: Literal["up", "down"]
    reason: Literal["", "wrong", "outdated", "not_helpful", "other"] | None = Field(
        default=None, description="What was wrong (with `down` only)."
    )
    comment: str | None = Field(
        default=None, max_length=services.MAX_COMMENT_CHARS, description="Free text."
    )


class FeedbackObject(BaseModel):
    object: Literal["chat.completion.feedback"]
    completion_id: str
    rating: Literal["up", "down"]
    reason: Literal["", "wrong", "outdated", "not_helpful", "other"]
    comment: str
    created_at: int
    updated_at: int


def feedback_object(completion_id: str, feedback: Feedback) -> FeedbackObject:
    return FeedbackObject(
        object="chat.completion.feedback",
        completion_id=completion_id,
        rating=feedback.rating,  # type: ignore[arg-type]
        reason=feedback.reason,  # type: ignore[arg-type]
        comment=feedback.comment,
        created_at=int(feedback.created_at.timestamp()),
        updated_at=int(feedback.updated_at.timestamp()),
    )


@api_endpoint(methods=("POST",))
async def completion_feedback(request: HttpRequest, completion_id: str) -> HttpResponseBase:
    data = api_json(request)
    if not isinstance(data, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_json")
    try:
        body = FeedbackCreate.model_validate(data)
        rating = services.check_rating(
            rating=body.rating, reason=body.reason or "", comment=body.comment or ""
        )
    except ValidationError as exc:
        raise _validation_error(exc) from None
    except ChatError as exc:
        raise ApiError(400, exc.message, code=exc.code, param=exc.param) from None
    principal = _principal(request)
    session_id = _session_id(completion_id)
    try:
        _session, feedback = await database_sync_to_async(services.feedback_completion_set)(
            tenant=principal.tenant,
            api_key_id=principal.api_key.pk if principal.api_key is not None else None,
            session_id=session_id,
            rating=rating,
        )
    except ChatError as exc:
        raise ApiError(400, exc.message, code=exc.code, param=exc.param) from None
    return _json(feedback_object(completion_id, feedback))
