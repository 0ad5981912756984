"""Error answers that suit the caller: JSON for scripts and the page's fetch calls, a page for
people. Used by the error handlers (qassist/urls.py), the middleware and the JSON endpoints.

JSON errors have one shape everywhere: `{"error": {"code": ..., "message": ...}}`; under /v1/
(the OpenAI-compatible API) it is OpenAI's, which adds `type` and `param`.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import loader
from django.utils.cache import add_never_cache_headers

JSON_PATH_PREFIXES = ("/v1/", "/healthz", "/metrics")


def wants_json(request: HttpRequest) -> bool:
    """True for API paths, and for callers that ask for JSON rather than HTML (fetch calls)."""
    if request.path.startswith(JSON_PATH_PREFIXES):
        return True
    accept = request.headers.get("Accept", "")
    if "application/json" not in accept:
        return False
    return request.get_preferred_type(["text/html", "application/json"]) == "application/json"


def json_error(
    code: str, message: str, status: int = 400, *, retry_after: int | None = None
) -> JsonResponse:
    response = JsonResponse({"error": {"code": code, "message": message}}, status=status)
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


def _api_error(code: str, message: str, status: int) -> JsonResponse:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JsonResponse(body, status=status)


def error_response(
    request: HttpRequest,
    *,
    status: int,
    code: str,
    message: str,
    template: str,
    retry_after: int | None = None,
    detail: str = "",
) -> HttpResponse:
    """JSON or a page, by what the caller wants. The page is rendered without the request
    context on purpose: its context processors may need the database, which may be the
    thing that is down. `detail`: a sentence for the page, when there is more to say than
    its heading."""
    if request.path.startswith("/v1/"):
        response: HttpResponse = _api_error(code, message, status)
    elif wants_json(request):
        response = json_error(code, message, status)
    else:
        page = loader.render_to_string(template, {"detail": detail})
        response = HttpResponse(page, status=status)
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    add_never_cache_headers(response)
    return response
