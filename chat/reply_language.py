"""The language a reply is written in (issue #31, point 3): the one the person's instructions
name, else the question's; said where the model heeds it, checked, and asked once more when
the reply starts in another.

A 0.5B model reads its last message most closely: "Always answer in French" in a system
message at the top of the conversation gave English replies to English questions, and
English passages pulled Chinese questions' replies into English. So:

- **Said where it is heeded.** When the instructions name a language, every question the
  model reads ends with "(Réponds en français.)" (in the language asked for, or "(Answer in
  Polish.)" for one not listed) — in the history too, so that a follow-up's prompt still
  begins with the tokens the conversation's KV cache holds.
- **Begun in it where instructions ask for it against the odds.** When the instructions
  name the language and the question or a passage is in another, the reply begins, unseen,
  with a sentence in that language ("Voici la réponse en français :", SamplingParams.
  reply_start) which the model continues: what a 0.5B model heeds most.
- **Checked where it is at risk**: there, and where passages are in another language than the
  question's (no instructions). The reply's first words are held back until its language can
  be told (`chat.language.judgeable`: about 40 letters, or 8 CJK characters: one short
  sentence). A reply clearly in another language (`in_language` is False) is cancelled unseen
  and asked once more, insisting on the language and begun in it; the second reply streams
  as it comes. Anywhere else nothing is held: the first word is not delayed where the
  language is not at risk (the question's language, passages in it or none).
- A reply that starts in the right language and drifts is not caught: the check reads the
  start only (the bench measures the whole reply, bench/language.py).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace

from django.conf import settings
from lingua import Language

from chat.language import (
    in_language,
    judgeable,
    language_name,
    named_language,
    question_language,
)
from inference.types import ChatMessage, Delta, Done, Event, Failed
from inference.worker import Submission

ASKED_AGAIN = "-again"  # the request id of a reply asked once more: the first one's + this


@dataclass(frozen=True)
class ReplyLanguage:
    """What a turn's reply must be written in, and whether its start is held back to check."""

    expected: Language | None = None
    # The person named it: in their instructions, or in the question itself ("translate this
    # into English", which wins over the instructions); else it is the question's language.
    named: bool = False
    hold: bool = False  # the language is at risk: the reply's start is checked before it shows

    @property
    def name(self) -> str:
        return language_name(self.expected) if self.expected is not None else ""

    def directive(self, *, insist: bool = False) -> str:
        if self.expected is None:
            return ""
        plain, insisting = _SAID.get(self.expected, (None, None))
        if insist:
            return insisting or (
                f"(Answer only in {self.name}, whatever the language of the passages and of "
                "earlier messages.)"
            )
        return plain or f"(Answer in {self.name}.)"

    @property
    def chinese_notes(self) -> bool | None:
        """Whether the support check's notes under the reply are in Chinese, when the language
        was named (instructions, or the question asking for one); None: the question's."""
        return self.expected == Language.CHINESE if self.named else None

    @property
    def start(self) -> str:
        """The reply's unseen start where its language is at risk (SamplingParams.reply_start):
        a sentence in the language that the model then continues."""
        if not self.hold or self.expected is None:
            return ""
        return _STARTS.get(self.expected, "")


# The directive in the language it asks for: a small model follows "(Réponds en français.)"
# after an English question more often than "(Answer in French.)" (bench/language.py). Plain,
# then insisting (a question asked once more). A language not listed is asked for in English.
_SAID: dict[Language, tuple[str, str]] = {
    Language.ENGLISH: (
        "(Answer in English.)",
        "(Answer only in English, whatever the language of the passages and of earlier messages.)",
    ),
    Language.FRENCH: (
        "(Réponds en français.)",
        "(Réponds uniquement en français, quelle que soit la langue des passages et des "
        "messages précédents.)",
    ),
    Language.GERMAN: (
        "(Antworte auf Deutsch.)",
        "(Antworte nur auf Deutsch, egal in welcher Sprache die Passagen und früheren "
        "Nachrichten sind.)",
    ),
    Language.SPANISH: (
        "(Responde en español.)",
        "(Responde solo en español, sea cual sea el idioma de los pasajes y de los mensajes "
        "anteriores.)",
    ),
    Language.ITALIAN: (
        "(Rispondi in italiano.)",
        "(Rispondi solo in italiano, qualunque sia la lingua dei passaggi e dei messaggi "
        "precedenti.)",
    ),
    Language.PORTUGUESE: (
        "(Responda em português.)",
        "(Responda apenas em português, seja qual for a língua dos trechos e das mensagens "
        "anteriores.)",
    ),
    Language.DUTCH: (
        "(Antwoord in het Nederlands.)",
        "(Antwoord alleen in het Nederlands, in welke taal de passages en eerdere berichten "
        "ook zijn.)",
    ),
    Language.CHINESE: ("（请用中文回答。）", "（只用中文回答，无论段落和之前的消息是什么语言。）"),
    Language.JAPANESE: (
        "（日本語で答えてください。）",
        "（文書や前のメッセージの言語に関係なく、日本語だけで答えてください。）",
    ),
}

# What a reply at risk is taken to begin with, unseen (bench/language.py: with the insisting
# directive, 14 of 16 replies of the tune half held their language with it, 6 of 14 without).
_STARTS: dict[Language, str] = {
    Language.ENGLISH: "Here is the answer in English:\n\n",
    Language.FRENCH: "Voici la réponse en français :\n\n",
    Language.GERMAN: "Hier ist die Antwort auf Deutsch:\n\n",
    Language.SPANISH: "Esta es la respuesta en español:\n\n",
    Language.ITALIAN: "Ecco la risposta in italiano:\n\n",
    Language.PORTUGUESE: "Aqui está a resposta em português:\n\n",
    Language.DUTCH: "Hier is het antwoord in het Nederlands:\n\n",
    Language.CHINESE: "以下是中文回答：\n\n",
    Language.JAPANESE: "以下は日本語での回答です：\n\n",
}

NONE = ReplyLanguage()


def enabled() -> bool:
    return bool(settings.QASSIST_REPLY_LANGUAGE)


def instructed(instructions: str) -> Language | None:
    """The language a person's (or an integration's) instructions ask for, when the check is
    on."""
    return named_language(instructions) if enabled() and instructions.strip() else None


def reply_language(
    *, question: str, instructions: str = "", passages: Sequence[str] = ()
) -> ReplyLanguage:
    """The turn's reply language: named by the question itself ("translate this into
    English"), else by `instructions`, else the question's; held back to check when the
    question or `passages` (their texts) are in another than the instructions'."""
    if not enabled():
        return NONE
    requested = named_language(question)
    if requested is not None:  # "Translate this into English": the question's own ask wins
        return ReplyLanguage(requested, named=True, hold=False)
    named = instructed(instructions)
    if named is None and not passages:
        # Nothing to hold, nor to direct: the question's own language is then used by nobody,
        # and telling it costs Lingua ~30 ms on every plain chat turn.
        return NONE
    asked = question_language(question)
    expected = named or asked
    if expected is None:
        return NONE
    at_risk = named is not None and asked is not None and asked != named
    if not at_risk:
        at_risk = any(in_language(text[:400], expected) is False for text in passages)
    return ReplyLanguage(expected, named is not None, at_risk)


def with_directive(content: str, language: Language | None) -> str:
    """A question as the model reads it when instructions name `language`: the directive after
    it, where a small model heeds it; unless the question names a language itself."""
    if language is None or named_language(content) is not None:
        return content  # a question that names a language itself is read as it is
    return f"{content}\n\n{ReplyLanguage(language).directive()}"


_DIRECTIVE = re.compile(
    r"\n\n(?:\(Answer in [A-Z][a-z]+\.\)|"
    + "|".join(re.escape(plain) for plain, _ in _SAID.values())
    + ")$"
)


def insisted(messages: Sequence[ChatMessage], language: ReplyLanguage) -> list[ChatMessage]:
    """The conversation asked once more: its last question ending with the insisting
    directive (in place of the plain one, when it has it)."""
    out = list(messages)
    last = max((i for i, m in enumerate(out) if m.role == "user"), default=None)
    if last is None or language.expected is None:
        return out
    content = _DIRECTIVE.sub("", out[last].content)
    out[last] = replace(out[last], content=f"{content}\n\n{language.directive(insist=True)}")
    return out


def first_asked(submission: Submission, language: ReplyLanguage) -> Submission:
    """A turn's request as first asked: where instructions name the language and it is at
    risk, the reply begins, unseen, with a sentence in it. Passages in another language
    alone do not start it (the 1.5B then answered twice, in both languages): that reply is
    only judged, and started when asked again."""
    if not language.start or not language.named:
        return submission
    params = replace(submission.params, reply_start=language.start)
    return replace(submission, params=params)


def asked_again(submission: Submission, language: ReplyLanguage) -> Submission:
    """The request asked once more: its own id, the question insisting on the language, and
    the reply's unseen start in it."""
    return replace(
        submission,
        request_id=submission.request_id + ASKED_AGAIN,
        messages=tuple(insisted(submission.messages, language)),
        params=replace(submission.params, reply_start=language.start),
    )


async def kept_in_language(
    events: AsyncIterator[Event],
    *,
    language: ReplyLanguage,
    again: Callable[[], AsyncIterator[Event]] | None,
) -> AsyncIterator[Event]:
    """`events`, with the reply's start held back when its language is at risk: judged as soon
    as there is enough of it, and when it is clearly in another language than `language`, that
    generation is cancelled (nothing of it shown or charged) and `again()` — the question asked
    once more, insisting — streams instead. Closing this closes whichever stream is running,
    which cancels its generation."""
    if not language.hold or language.expected is None or again is None:
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for event in events:
                yield event
        return
    held: list[Delta] = []
    text = ""
    decided = wrong = False
    async with contextlib.aclosing(events):  # type: ignore[type-var]
        async for event in events:
            if decided or not isinstance(event, Delta | Done | Failed):
                yield event  # decided already, or a place in line
                continue
            if isinstance(event, Delta):
                held.append(event)
                text += event.text
                if not judgeable(text):
                    continue
                verdict = in_language(text, language.expected)
            elif isinstance(event, Done) and event.finish_reason in ("stop", "length"):
                verdict = in_language(text, language.expected)  # it ended while held
            else:
                verdict = None  # cancelled or failed: passed on as it is
            if verdict is False:
                wrong = True
                break  # leaving the block closes the stream: the generation is cancelled
            decided = True
            for delta in held:
                yield delta
            if not isinstance(event, Delta):
                yield event
    if not wrong:
        return
    retried = again()
    async with contextlib.aclosing(retried):  # type: ignore[type-var]
        async for event in retried:
            yield event
