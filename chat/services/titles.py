"""A conversation's title: the first message's words at once, then the one the model is asked
for, kept only when it is a title."""

from __future__ import annotations

import re
import uuid

from chat.language import same_language
from chat.models import ChatSession
from inference.types import ChatMessage

TITLE_CHARS = 60


def default_title(text: str) -> str:
    line = " ".join(text.split())
    if len(line) <= TITLE_CHARS:
        return line
    cut = line[:TITLE_CHARS].rsplit(" ", 1)[0] if " " in line[:TITLE_CHARS] else line[:TITLE_CHARS]
    return cut + "…"


def title_request(*, first_message: str) -> list[ChatMessage]:
    """What the model is asked for a conversation's title."""
    return [
        ChatMessage("system", "You name conversations. Answer with a short title only."),
        ChatMessage(
            "user",
            "Give a title of at most six words for a conversation that starts with this "
            f"message, in the message's language:\n\n{first_message[:500]}",
        ),
    ]


GENERATED_TITLE_MAX_CHARS = 48


def clean_title(raw: str, *, question: str) -> str:
    """The model's answer made into a title: its first line, no quotes or 'Title:' label.

    An answer that is no title gives "" and the first-message title stays: code, a whole
    sentence, a title longer than the question it names, or one in another language than the
    question (a small model asked about German in English may answer in German).
    """
    line = next((part.strip() for part in raw.splitlines() if part.strip()), "")
    if line.startswith("```"):
        return ""
    line = re.sub(r"^(title|标题)\s*[:：]\s*", "", line, flags=re.IGNORECASE)
    line = line.strip(" \"'“”‘’「」《》*#`.。")
    if len(line) > GENERATED_TITLE_MAX_CHARS or len(line.split()) > 8:
        return ""
    if len(line) > len(" ".join(question.split())):
        return ""
    if not same_language(line, question):
        return ""
    return line


def session_set_generated_title(*, session_id: uuid.UUID, title: str, replaces: str) -> bool:
    """Set a generated title unless the user renamed the session meanwhile."""
    if not title:
        return False
    return bool(ChatSession.objects.filter(id=session_id, title=replaces).update(title=title))
