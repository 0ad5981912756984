"""The chat page's feedback endpoint: thumbs up or down on one version of a reply.

    POST   /messages/<id>/feedback   {"rating": "up" | "down", "reason", "comment"}: rate it
    DELETE /messages/<id>/feedback   take the rating back

Answers `{"feedback": {rating, reason, comment, updated_at} | null}`; bad input is a 400, a
reply that is not in one of the user's live conversations of the current tenant a 404
(chat.views.json_endpoint).
"""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_http_methods

from chat.views import _current_membership, _payload, _user, json_endpoint
from feedback import services


@json_endpoint
@require_http_methods(["POST", "DELETE"])
def reply_feedback(request: HttpRequest, message_id: int) -> HttpResponse:
    membership = _current_membership(request)
    if membership is None:
        raise Http404("No such reply.")
    user, tenant = _user(request), membership.tenant
    if request.method == "DELETE":
        services.feedback_clear(user=user, tenant=tenant, message_id=message_id)
        return JsonResponse({"feedback": None})
    payload = _payload(request)
    if payload.get("rating") is None:
        services.feedback_clear(user=user, tenant=tenant, message_id=message_id)
        return JsonResponse({"feedback": None})
    rating = services.check_rating(
        rating=payload.get("rating"),
        reason=payload.get("reason", ""),
        comment=payload.get("comment", ""),
    )
    feedback = services.feedback_set(user=user, tenant=tenant, message_id=message_id, rating=rating)
    return JsonResponse({"feedback": services.feedback_data(feedback)})
