"""The reply's language (issue #31, point 3): named by custom instructions or the question's,
said after each question, and a reply that starts in another language asked once more."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from lingua import Language

from chat.language import in_language, named_language, question_language
from chat.reply_language import (
    ASKED_AGAIN,
    NONE,
    ReplyLanguage,
    asked_again,
    first_asked,
    insisted,
    kept_in_language,
    reply_language,
    with_directive,
)
from chat.services.instructions import custom_instructions_set
from chat.services.replies import reply_finish
from chat.services.turns import message_send
from inference.types import ChatMessage, Delta, Done, Event, Queued
from inference.worker import Submission
from tenants.models import Tenant
from tests.chat.conftest import FakeEngine
from tests.chat.test_consumer import ask, connected_as, joined, of, stored
from tests.fakes import FakeRunner

ENGLISH = "You get twenty-eight days of annual leave each calendar year, as the handbook says."
FRENCH = "Vous avez droit à vingt-huit jours de congés payés par année civile, selon le manuel."
CHINESE = "根据员工手册，每个日历年您可以享受二十八天的带薪年假。"


# --- which language ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instructions", "language"),
    [
        ("Always answer in French.", Language.FRENCH),
        ("Be brief. Reply in German, please.", Language.GERMAN),
        ("Réponds toujours en français.", Language.FRENCH),
        ("Antworte bitte immer auf Deutsch.", Language.GERMAN),
        ("请用中文回答。", Language.CHINESE),
        ("Spanish only, and short answers.", Language.SPANISH),
        ("Answer in English, never in French.", Language.ENGLISH),
        ("I work with German clients in our Lyon office.", None),
        ("Be brief and friendly.", None),
        ("", None),
    ],
)
def test_a_language_is_taken_from_instructions_only_when_they_ask_for_it(instructions, language):
    assert named_language(instructions) == language


@pytest.mark.parametrize(
    ("text", "expected", "verdict"),
    [
        (ENGLISH, Language.ENGLISH, True),
        (ENGLISH, Language.FRENCH, False),
        (FRENCH, Language.FRENCH, True),
        (CHINESE, Language.ENGLISH, False),
        (ENGLISH, Language.CHINESE, False),
        (CHINESE, Language.CHINESE, True),
        ("Yes.", Language.FRENCH, None),  # too short to tell
        ("`BlueFalcon42` 28", Language.FRENCH, None),  # code and figures are no language
    ],
)
def test_a_replys_language_is_judged_and_only_a_clear_no_counts(text, expected, verdict):
    assert in_language(text, expected) is verdict


def test_a_questions_language_is_told_by_script_or_by_lingua():
    assert question_language("How many days of annual leave do I get?") == Language.ENGLISH
    assert question_language("年假有多少天？") == Language.CHINESE
    assert question_language("我的 VPN 密码多久换一次？") == Language.CHINESE
    assert question_language("Q3?") is None


def test_the_language_is_at_risk_only_where_it_differs_from_question_or_passages():
    french = reply_language(question="How many days of leave?", instructions="Answer in French.")
    assert (french.expected, french.named, french.hold) == (Language.FRENCH, True, True)
    same = reply_language(question="How many days of leave?", instructions="Answer in English.")
    assert (same.expected, same.hold) == (Language.ENGLISH, False)
    plain = reply_language(question="How many days of annual leave do I get?", passages=[ENGLISH])
    assert (plain.expected, plain.named, plain.hold) == (Language.ENGLISH, False, False)
    crossed = reply_language(question="How many days of annual leave do I get?", passages=[CHINESE])
    assert (crossed.expected, crossed.hold) == (Language.ENGLISH, True)


def test_a_plain_chat_question_is_not_judged_at_all(monkeypatch):
    told: list[str] = []

    def question_language(text):
        told.append(text)

    monkeypatch.setattr("chat.reply_language.question_language", question_language)
    assert reply_language(question="How many days of annual leave do I get?") == NONE
    assert told == []  # no instructions, no passages: Lingua is not asked
    reply_language(question="How many days of annual leave do I get?", passages=[ENGLISH])
    assert told == ["How many days of annual leave do I get?"]


def test_it_is_all_off_with_the_setting(settings):
    settings.QASSIST_REPLY_LANGUAGE = False
    assert reply_language(question="How many days?", instructions="Answer in French.") == NONE


def test_asked_again_the_question_insists_in_place_of_the_plain_directive():
    asked = with_directive("How many days of leave?", Language.FRENCH)
    assert asked == "How many days of leave?\n\n(Réponds en français.)"
    again = insisted(
        [ChatMessage("system", "s"), ChatMessage("user", asked)], ReplyLanguage(Language.FRENCH)
    )
    assert again[0] == ChatMessage("system", "s")
    assert again[1].content.startswith("How many days of leave?\n\n(Réponds uniquement en français")
    assert "(Réponds en français.)" not in again[1].content


@pytest.mark.parametrize(
    ("question", "asked_for"),
    [
        ("Translate 'good morning' into German.", Language.GERMAN),
        ("请把这句话翻译成英文：请在周五前提交报销单。", Language.ENGLISH),
        ("Traduis ce texte en anglais : bonjour à tous", Language.ENGLISH),
    ],
)
def test_a_question_asking_for_a_language_wins_over_the_instructions(question, asked_for):
    language = reply_language(question=question, instructions="Always answer in French.")
    assert language == ReplyLanguage(asked_for, named=True, hold=False)
    assert with_directive(question, Language.FRENCH) == question  # no "(Réponds en français.)"


def test_a_language_without_words_of_its_own_is_asked_for_in_english():
    language = ReplyLanguage(Language.POLISH)
    assert language.directive() == "(Answer in Polish.)"
    assert language.directive(insist=True).startswith("(Answer only in Polish,")
    again = insisted([ChatMessage("user", with_directive("Ile dni?", Language.POLISH))], language)
    assert again[0].content.count("Polish") == 1


def test_a_reply_at_risk_begins_unseen_in_its_language_when_instructed_or_asked_again():
    submission = Submission("r1", (ChatMessage("user", with_directive("Leave?", Language.FRENCH)),))
    safe = ReplyLanguage(Language.FRENCH, named=True, hold=False)
    assert first_asked(submission, safe) is submission  # not at risk: asked as it is
    risky = ReplyLanguage(Language.FRENCH, named=True, hold=True)
    first = first_asked(submission, risky)
    assert first.params.reply_start == "Voici la réponse en français :\n\n"
    assert first.messages == submission.messages
    assert first.request_id == "r1"
    # At risk from passages alone (no instructions): judged, started only when asked again.
    passages_only = ReplyLanguage(Language.FRENCH, named=False, hold=True)
    assert first_asked(submission, passages_only) is submission
    assert asked_again(submission, passages_only).params.reply_start == first.params.reply_start
    again = asked_again(submission, risky)
    assert again.request_id == "r1" + ASKED_AGAIN
    assert again.params.reply_start == first.params.reply_start
    assert again.messages[-1].content.endswith("des messages précédents.)")


# --- held, judged, asked again ----------------------------------------------------------------


class Stream:
    """A scripted engine stream that records how far it was read and whether it was closed
    before its end (which is what cancels a generation)."""

    def __init__(self, text: str, request_id: str = "r", pieces: int = 8) -> None:
        size = max(1, len(text) // pieces)
        self.events: list[Event] = [Queued(request_id, 0, 1.0)]
        self.events += [Delta(request_id, text[i : i + size]) for i in range(0, len(text), size)]
        self.events.append(Done(request_id, "stop", 10, 20))
        self.read = 0
        self.cancelled = False

    async def __call__(self) -> AsyncIterator[Event]:
        finished = False
        try:
            for event in self.events:
                self.read += 1
                yield event
            finished = True
        finally:
            self.cancelled = not finished


async def collect(events: AsyncIterator[Any]) -> list[Any]:
    return [event async for event in events]


FRENCH_RISK = ReplyLanguage(Language.FRENCH, named=True, hold=True)


async def test_a_reply_started_in_another_language_is_cancelled_unseen_and_asked_again():
    first, second = Stream(ENGLISH, "r"), Stream(FRENCH, "r-again")
    out = await collect(kept_in_language(first(), language=FRENCH_RISK, again=second))
    assert first.cancelled
    assert first.read < len(first.events)  # cut as soon as judged
    assert not second.cancelled
    shown = "".join(e.text for e in out if isinstance(e, Delta))
    assert shown == FRENCH  # nothing of the English start
    assert isinstance(out[0], Queued)
    assert out[0].request_id == "r"  # the wait was told
    assert isinstance(out[-1], Done)
    assert out[-1].request_id == "r-again"


async def test_a_reply_in_its_language_is_released_whole_and_in_order():
    first = Stream(FRENCH)
    again = Stream(FRENCH, "never")
    out = await collect(kept_in_language(first(), language=FRENCH_RISK, again=again))
    assert out == first.events
    assert again.read == 0


async def test_held_text_is_released_at_once_once_it_can_be_judged():
    """Not the whole reply: the first sentence or so, then every piece as it comes."""
    first = Stream(FRENCH * 3, pieces=30)
    stream = kept_in_language(first(), language=FRENCH_RISK, again=Stream(ENGLISH))
    seen = 0
    async for event in stream:
        if isinstance(event, Delta):
            seen += 1
            if seen == 1:
                read_at_release = first.read
    assert read_at_release < len(first.events) // 2


async def test_a_short_reply_that_ends_while_held_is_judged_whole():
    wrong = Stream("Twenty-eight days a year.", "r", pieces=3)
    right = Stream("Vingt-huit jours par an.", "r-again", pieces=3)
    out = await collect(kept_in_language(wrong(), language=FRENCH_RISK, again=right))
    assert "".join(e.text for e in out if isinstance(e, Delta)) == "Vingt-huit jours par an."


async def test_nothing_is_held_where_the_language_is_not_at_risk():
    quiet = ReplyLanguage(Language.ENGLISH, hold=False)
    first = Stream(FRENCH, pieces=10)
    stream = kept_in_language(first(), language=quiet, again=Stream(ENGLISH))
    assert isinstance(await anext(stream), Queued)
    assert isinstance(await anext(stream), Delta)
    assert first.read == 2  # passed on as it came, nothing read ahead
    await stream.aclose()  # type: ignore[attr-defined]
    assert first.cancelled  # closing the guard cancels the generation


async def test_a_stop_while_held_cancels_the_running_generation():
    first = Stream(ENGLISH * 4, pieces=40)
    stream = kept_in_language(first(), language=FRENCH_RISK, again=Stream(FRENCH))
    assert isinstance(await anext(stream), Queued)
    await stream.aclose()  # type: ignore[attr-defined]
    assert first.cancelled


# --- the chat ---------------------------------------------------------------------------------


def french_when_insisted(last_message: str) -> str:
    """A small model that ignores the plain directive and heeds the insisting one."""
    return FRENCH if "Réponds uniquement en français" in last_message else ENGLISH


@pytest.mark.django_db
def test_the_directive_ends_every_question_the_model_reads_and_history_keeps_it(member, tenant):
    custom_instructions_set(user=member, text="Always answer in French.")
    first = message_send(user=member, tenant=tenant, session_id=None, content="Leave days?")
    assert first.conversation[-1] == ChatMessage("user", "Leave days?\n\n(Réponds en français.)")
    assert first.user_message.content == "Leave days?"  # stored as typed
    reply_finish(reply_id=first.reply.id, content=FRENCH, finish_reason="stop")
    follow = message_send(
        user=member, tenant=tenant, session_id=first.session.id, content="And sick days?"
    )
    # The follow-up's prompt begins with exactly what the first turn's did (its KV reused).
    assert follow.conversation[: len(first.conversation)] == first.conversation
    assert follow.conversation[-1].content == "And sick days?\n\n(Réponds en français.)"


@pytest.mark.django_db(transaction=True)
async def test_a_chat_reply_in_the_wrong_language_is_replaced_before_it_shows(
    use_engine: Callable[..., FakeEngine], member: User, tenant: Tenant
) -> None:
    fake = use_engine(FakeRunner(reply_for=french_when_insisted))
    await database_sync_to_async(custom_instructions_set)(
        user=member, text="Always answer in French."
    )
    socket = await connected_as(member)

    frames = await ask(socket, "How many days of annual leave do I get each year?")

    assert joined(frames) == FRENCH  # the English start never reached the socket
    assert all(f["offset"] < len(FRENCH) for f in of(frames, "delta"))
    reply = await stored(frames[-1]["reply"]["id"])
    assert (reply.content, reply.status) == (FRENCH, "complete")
    # Two generations: the first cancelled once judged, the second asked insisting.
    assert len(fake.runner.released) == 2
    assert fake.runner.released[1].endswith("-again")
    # Both began, unseen, with a sentence in French (the question was English: at risk).
    starts = [parts[-1] for parts in fake.runner.tokenized_parts[-2:]]
    assert [p.text for p in starts] == ["Voici la réponse en français :\n\n"] * 2
    assert not any(p.trusted for p in starts)
    await socket.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_without_instructions_an_english_chat_reply_is_not_held(
    use_engine: Callable[..., FakeEngine], member: User, tenant: Tenant
) -> None:
    fake = use_engine(FakeRunner(reply_for=lambda _: ENGLISH))
    socket = await connected_as(member)
    frames = await ask(socket, "How many days of annual leave do I get each year?")
    assert joined(frames) == ENGLISH
    assert len(fake.runner.released) == 1
    await socket.disconnect()


# --- REST ---------------------------------------------------------------------------------------


def french_integration(content: str, stream: bool = False) -> dict[str, Any]:
    return {
        "model": "smollm2-135m",
        "stream": stream,
        "messages": [
            {"role": "system", "content": "Always answer in French."},
            {"role": "user", "content": content},
        ],
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_rest_reply_keeps_the_language_the_integrations_instructions_name(
    use_engine: Callable[..., FakeEngine], api_key: Any, stream: bool
) -> None:
    from tests.chat.test_api import post, sse_events

    fake = use_engine(FakeRunner(reply_for=french_when_insisted))
    response = await post(api_key[1], french_integration("How many leave days?", stream))
    assert response.status_code == 200
    if stream:
        events = await sse_events(response)
        content = "".join(
            e["choices"][0]["delta"].get("content") or ""
            for e in events
            if isinstance(e, dict) and e.get("choices")
        )
    else:
        content = response.json()["choices"][0]["message"]["content"]
    assert content == FRENCH
    assert len(fake.runner.released) == 2


@pytest.mark.django_db(transaction=True)
async def test_structured_output_is_never_judged_for_its_language(
    use_engine: Callable[..., FakeEngine], api_key: Any
) -> None:
    from tests.chat.test_api import post

    fake = use_engine(FakeRunner(reply_for=french_when_insisted))
    body = french_integration("List the leave types.")
    body["response_format"] = {"type": "json_object"}
    response = await post(api_key[1], body)
    assert response.status_code == 200
    assert len(fake.runner.released) == 1
