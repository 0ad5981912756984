"""What replies and titles are generated with. Its own module, importing nothing of the chat:
chat.cached_replies drafts answers with `default_sampling`."""

from __future__ import annotations

from django.conf import settings

from inference.types import SamplingParams


def title_sampling() -> SamplingParams:
    return SamplingParams(max_tokens=20, temperature=0, stop=("\n",))


def default_sampling() -> SamplingParams:
    """What a chat reply is generated with: the deployment's defaults."""
    return SamplingParams(
        max_tokens=int(settings.QASSIST_DEFAULT_MAX_TOKENS),
        temperature=float(settings.QASSIST_DEFAULT_TEMPERATURE),
    )
