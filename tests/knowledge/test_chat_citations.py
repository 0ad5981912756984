"""A reply from company knowledge cites the passages its words come from, in the chat: the
citation streams as the reply's last text, is stored with it, and marks the source cited."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from knowledge.citations import NOT_FOUND_NOTE
from tenants.models import Tenant
from tests.chat.test_consumer import ask, connected_as, joined, of, stored
from tests.fakes import FakeRunner
from tests.knowledge.conftest import Upload
from tests.knowledge.test_turns import POLICY

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_chat_reply_resting_on_a_passage_streams_its_citation_last(
    member: User, tenant: Tenant, upload: Upload, use_engine: Any
) -> None:
    use_engine(FakeRunner(max_seq_tokens=4096, reply_for=lambda prompt: "At most EUR 180 a night."))
    await sync(upload)(tenant, "travel-policy.md", POLICY)
    socket = await connected_as(member)
    frames = await ask(socket, "What is the hotel cap in a Class A city?")
    deltas = of(frames, "delta")
    assert deltas[-1]["text"] == " [1]"
    assert joined(frames) == "At most EUR 180 a night. [1]"
    done = of(frames, "reply.done")[0]["reply"]
    assert done["content"] == "At most EUR 180 a night. [1]"
    assert done["sources"][0]["cited"] is True
    assert (await stored(done["id"])).content == "At most EUR 180 a night. [1]"
    await socket.disconnect()


async def test_a_reply_the_passages_do_not_support_is_not_cited_but_noted(
    member: User, tenant: Tenant, upload: Upload, use_engine: Any
) -> None:
    use_engine(FakeRunner(max_seq_tokens=4096, reply_for=lambda prompt: "Ask your manager."))
    await sync(upload)(tenant, "travel-policy.md", POLICY)
    socket = await connected_as(member)
    frames = await ask(socket, "What is the hotel cap in a Class A city?")
    done = of(frames, "reply.done")[0]["reply"]
    # Nothing to cite, and the reply says what no passage says: the note follows it, streamed
    # and stored like the reply.
    assert done["content"] == "Ask your manager." + NOT_FOUND_NOTE
    assert joined(frames) == "Ask your manager." + NOT_FOUND_NOTE
    assert (await stored(done["id"])).content == "Ask your manager." + NOT_FOUND_NOTE
    assert not any(s["cited"] for s in done["sources"])
    await socket.disconnect()


def sync(function: Any) -> Any:
    from channels.db import database_sync_to_async

    return database_sync_to_async(function)


async def test_a_question_too_long_for_the_model_is_refused_before_it_is_embedded(
    member: User, tenant: Tenant, upload: Upload, use_engine: Any, fake_embedder: Any
) -> None:
    """Issue #32: retrieval embedded a question of any length before the context check."""
    use_engine(FakeRunner(max_seq_tokens=4096))
    await sync(upload)(tenant, "travel-policy.md", POLICY)
    fake_embedder.calls.clear()
    socket = await connected_as(member)
    await socket.send_json_to({"type": "chat.send", "session": None, "content": "x" * 5_000})
    frame = await socket.receive_json_from(timeout=5)
    assert (frame["type"], frame["code"]) == ("error", "prompt_too_long")
    assert fake_embedder.calls == []
    await socket.disconnect()


async def test_the_note_follows_the_language_the_persons_instructions_name(
    member: User, tenant: Tenant, upload: Upload, use_engine: Any
) -> None:
    from chat.services.instructions import custom_instructions_set
    from knowledge.citations import NOT_FOUND_NOTE_ZH

    chinese = "请询问你的经理，他会告诉你。"
    use_engine(FakeRunner(max_seq_tokens=4096, reply_for=lambda prompt: chinese))
    await sync(upload)(tenant, "travel-policy.md", POLICY)
    await sync(custom_instructions_set)(user=member, text="请始终用中文回答。")
    socket = await connected_as(member)
    frames = await ask(socket, "What is the hotel cap in a Class A city?")
    done = of(frames, "reply.done")[0]["reply"]
    # An English question, a Chinese reply as asked: its note is Chinese too, not English.
    assert done["content"] == chinese + NOT_FOUND_NOTE_ZH
    assert (await stored(done["id"])).content == chinese + NOT_FOUND_NOTE_ZH
    await socket.disconnect()
