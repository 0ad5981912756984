"""Checks on what a person types: a message, a conversation's id. `ChatError` is what every
service raises for input the chat cannot act on."""

from __future__ import annotations

import uuid
from typing import Any

MAX_MESSAGE_CHARS = 32_000


class ChatError(Exception):
    """Input the chat cannot act on; `code` and the message go back to the client as is."""

    def __init__(self, code: str, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param  # the REST parameter at fault, when there is one


def check_message_content(content: Any) -> str:
    if not isinstance(content, str) or not content.strip():
        raise ChatError("invalid_message", "Type a message first.")
    if "\x00" in content:
        raise ChatError("invalid_message", "The message contains a NUL character; remove it.")
    if not is_unicode(content):
        raise ChatError("invalid_message", "The message is not valid text (a lone surrogate).")
    if len(content) > MAX_MESSAGE_CHARS:
        raise ChatError(
            "invalid_message",
            f"The message is {len(content)} characters long; the limit is {MAX_MESSAGE_CHARS}.",
        )
    return content


def is_unicode(text: str) -> bool:
    """False for a string holding a lone surrogate, which nothing can store or tokenize."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_session_id(raw: Any) -> uuid.UUID | None:
    if raw in (None, ""):
        return None
    try:
        return uuid.UUID(str(raw))
    except ValueError:
        raise ChatError("not_found", "No such conversation.") from None
