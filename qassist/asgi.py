"""ASGI entry point: HTTP to Django, websockets to the chat consumer (logged in, same origin:
scheme, host and port).

Static files (the chat page's CSS and JS) are served by WhiteNoise's middleware, so a bare
`daphne qassist.asgi:application` is a complete server.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qassist.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from chat.routing import websocket_urlpatterns  # noqa: E402
from qassist.after_response import AfterResponse  # noqa: E402
from qassist.websocket import SameOriginValidator  # noqa: E402

if os.environ.get("QASSIST_PRELOAD_ENGINE", "1") != "0":
    from inference.service import engine_mode, get_engine_client, preload_prompt_counter

    if engine_mode() == "embedded":
        # Load the model on the engine's own thread now, not when the first message arrives.
        get_engine_client()
    # Admission counts every prompt's tokens with the model's vocabulary: load it now (a few
    # hundred ms), not while the first requests after a start wait for it, refusals included.
    preload_prompt_counter()

application = ProtocolTypeRouter(
    {
        # A streaming reply's generation is closed even when its response is never read.
        "http": AfterResponse(django_asgi_app),
        # Same scheme, host and port as the page (qassist/websocket.py).
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
