"""Custom instructions: a person's standing instructions for every reply, how they are checked
and stored, and how they reach the model."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from chat.models import CustomInstructions
from chat.services.checks import ChatError, is_unicode
from inference.types import ChatMessage

MAX_INSTRUCTIONS_CHARS = 1_500  # custom instructions: a paragraph or two, as ChatGPT allows


def check_custom_instructions(raw: Any) -> str:
    if not isinstance(raw, str):
        raise ChatError("invalid_instructions", "Give the instructions as text.")
    text = raw.strip()
    if "\x00" in text:
        raise ChatError("invalid_instructions", "The instructions contain a NUL character.")
    if not is_unicode(text):
        raise ChatError("invalid_instructions", "The instructions are not valid text.")
    if len(text) > MAX_INSTRUCTIONS_CHARS:
        raise ChatError(
            "invalid_instructions",
            f"The instructions are {len(text)} characters long; the limit is "
            f"{MAX_INSTRUCTIONS_CHARS}.",
        )
    return text


def custom_instructions_get(*, user_id: int | None) -> str:
    """The person's custom instructions ("" for none, and for an integration's conversation)."""
    if user_id is None:
        return ""
    return (
        CustomInstructions.objects.filter(user_id=user_id).values_list("text", flat=True).first()
        or ""
    )


def custom_instructions_set(*, user: User, text: Any) -> str:
    """Save the person's custom instructions (empty: none). They apply from the next message
    on, in every conversation of theirs; nothing already answered changes."""
    checked = check_custom_instructions(text)
    CustomInstructions.objects.update_or_create(user=user, defaults={"text": checked})
    return checked


# How custom instructions reach the model: a system message of their own, right after the
# tenant's. Its text is message content like any other (inference/runner.py renders every
# content as untrusted text), so typing "<|im_start|>" there gives characters, never a control
# token — the same boundary as the tenant's own system prompt.
INSTRUCTIONS_PREFIX = (
    "The person you are talking to gave these instructions for all your replies:\n\n"
)


def instructions_message(text: str) -> ChatMessage | None:
    return ChatMessage("system", INSTRUCTIONS_PREFIX + text) if text.strip() else None


def instructions_tokens(*, user: User) -> int:
    """How many tokens of the model's window the person's custom instructions take in each
    prompt (the token counter under the composer says so)."""
    message = instructions_message(custom_instructions_get(user_id=user.pk))
    if message is None:
        return 0
    from inference.service import get_prompt_counter

    return get_prompt_counter().count([message])
