"""The chat websocket (docs/websocket.md) end to end through the ASGI application, with the fake
runner behind an in-process engine client: no model, no Redis."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from chat.models import CachedReply, ChatSession, Message
from chat.services.branches import branch_switch
from inference.local import LocalEngineClient
from inference.service import set_engine_client
from inference.speed import MIN_STEPS
from qassist.asgi import application
from tenants.models import Membership, Tenant
from tests.chat.conftest import FakeEngine
from tests.fakes import FakeRunner

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://localhost")


def _session_cookie(user: User) -> str:
    client = Client()
    client.force_login(user)
    return str(client.cookies[settings.SESSION_COOKIE_NAME].value)


async def open_socket(
    user: User | None, origin: tuple[bytes, bytes] = ORIGIN
) -> tuple[WebsocketCommunicator, bool, Any]:
    headers = [(b"host", b"localhost"), origin]
    if user is not None:
        cookie = await database_sync_to_async(_session_cookie)(user)
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    socket = WebsocketCommunicator(application, "/ws/chat/", headers=headers)
    connected, detail = await socket.connect(timeout=5)
    return socket, connected, detail


async def connected_as(user: User) -> WebsocketCommunicator:
    socket, connected, detail = await open_socket(user)
    assert connected, f"refused with {detail}"
    return socket


async def until_done(socket: WebsocketCommunicator, wait: float = 30) -> list[dict[str, Any]]:
    """Frames up to and including the next reply.done. `wait` bounds the gap between two frames:
    long enough for the first turn of a test run, which loads the embedder and the word lists,
    on a machine that is busy with something else; short enough to call a hang a failure."""
    frames = []
    while True:
        frame = await socket.receive_json_from(timeout=wait)
        frames.append(frame)
        if frame["type"] == "reply.done":
            return frames


def of(frames: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] == kind]


def joined(frames: list[dict[str, Any]]) -> str:
    return "".join(f["text"] for f in of(frames, "delta"))


@database_sync_to_async
def stored(message_id: int) -> Message:
    return Message.objects.get(id=message_id)


@database_sync_to_async
def messages_of(session_id: str) -> list[tuple[str, str, str]]:
    return [
        (m.role, m.content, m.status)
        for m in Message.objects.filter(session_id=uuid.UUID(session_id)).order_by(
            "created_at", "id"
        )
    ]


async def ask(
    socket: WebsocketCommunicator, content: str, session: str | None = None
) -> list[dict[str, Any]]:
    await socket.send_json_to({"type": "chat.send", "session": session, "content": content})
    return await until_done(socket)


# --- connecting ------------------------------------------------------------------------------


async def test_it_refuses_an_anonymous_connection() -> None:
    _socket, connected, code = await open_socket(None)
    assert not connected
    assert code == 4401


async def test_it_refuses_a_user_without_a_tenant() -> None:
    loner = await database_sync_to_async(User.objects.create_user)("loner", password="x" * 12)
    _socket, connected, code = await open_socket(loner)
    assert not connected
    assert code == 4403


async def test_it_refuses_a_foreign_origin(member: User) -> None:
    _socket, connected, _ = await open_socket(member, origin=(b"origin", b"https://evil.example"))
    assert not connected


# --- a reply ---------------------------------------------------------------------------------


async def test_a_message_streams_back_and_is_stored_as_streamed(
    engine: FakeEngine, member: User, tenant: Tenant
) -> None:
    socket = await connected_as(member)

    frames = await ask(socket, "hello there")

    start, done = frames[0], frames[-1]
    assert start["type"] == "reply.start"
    assert start["session_created"] is True
    assert start["session"]["title"] == "hello there"
    assert start["user_message"]["content"] == "hello there"
    assert start["reply"]["status"] == "streaming"
    assert len(of(frames, "delta")) >= 2
    assert joined(frames) == "echo: hello there"
    assert done["reply"]["status"] == "complete"
    assert done["reply"]["finish_reason"] == "stop"
    reply = await stored(done["reply"]["id"])
    assert reply.content == joined(frames)
    assert await messages_of(start["session"]["id"]) == [
        ("user", "hello there", "complete"),
        ("assistant", "echo: hello there", "complete"),
    ]
    await socket.disconnect()


async def test_a_follow_up_continues_the_same_session(
    engine: FakeEngine, member: User, tenant: Tenant
) -> None:
    socket = await connected_as(member)
    first: list[Any] = await ask(socket, "one")
    session_id = first[0]["session"]["id"]

    second = await ask(socket, "two", session_id)

    assert second[0]["session_created"] is False
    assert second[0]["session"]["id"] == session_id
    assert joined(second) == "echo: two"
    assert len(await messages_of(session_id)) == 4
    await socket.disconnect()


async def test_stop_ends_the_reply_keeping_the_partial_text_marked_interrupted(
    use_engine: Callable[..., FakeEngine], member: User, tenant: Tenant
) -> None:
    fake = use_engine(FakeRunner(step_delay=0.01, reply_for=lambda _: "y" * 300))
    socket = await connected_as(member)
    await socket.send_json_to({"type": "chat.send", "session": None, "content": "go on"})
    start = await socket.receive_json_from(timeout=5)
    first_delta = await socket.receive_json_from(timeout=5)
    assert first_delta["type"] == "delta"

    await socket.send_json_to({"type": "chat.stop"})
    frames = [start, first_delta, *await until_done(socket)]

    reply = frames[-1]["reply"]
    assert reply["status"] == "interrupted"
    assert reply["finish_reason"] == "cancelled"
    text = joined(frames)
    assert 0 < len(text) < 300
    assert (await stored(reply["id"])).content == text
    assert len(fake.runner.released) == 1  # the engine freed the sequence
    await socket.disconnect()


async def eventually_stored(reply_id: int, within: float = 10) -> Message:
    """The reply once it is no longer streaming."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        reply: Message = await stored(reply_id)
        if reply.status != Message.Status.STREAMING:
            return reply
        assert asyncio.get_running_loop().time() < deadline, "the reply never ended"
        await asyncio.sleep(0.02)


async def test_a_reply_goes_on_when_its_socket_closes(
    use_engine: Callable[..., FakeEngine], member: User, tenant: Tenant
) -> None:
    use_engine(FakeRunner(step_delay=0.005, reply_for=lambda _: "z" * 300))
    socket = await connected_as(member)
    await socket.send_json_to({"type": "chat.send", "session": None, "content": "go on"})
    start = await socket.receive_json_from(timeout=5)
    await socket.receive_json_from(timeout=5)  # a first delta

    await socket.disconnect()  # a reload, a closed laptop lid, a network blip

    reply = await eventually_stored(start["reply"]["id"])
    assert (reply.status, reply.finish_reason) == (Message.Status.COMPLETE, "stop")
    assert reply.content == "z" * 300


async def test_a_reply_nobody_watches_for_the_grace_period_stops(
    use_engine: Callable[..., FakeEngine], member: User, tenant: Tenant, settings: Any
) -> None:
    settings.QASSIST_REPLY_GRACE_SECONDS = 0.3
    fake = use_engine(FakeRunner(step_delay=0.01, reply_for=lambda _: "z" * 3000))
    socket = await connected_as(member)
    await socket.send_json_to({"type": "chat.send", "session": None, "content": "go on"})
    start = await socket.receive_json_from(timeout=5)
    await socket.receive_json_from(timeout=5)  # a first delta

    await socket.disconnect()

    reply = await eventually_stored(start["reply"]["id"])
    assert reply.status == Message.Status.INTERRUPTED
    assert reply.finish_reason == "disconnected"  # told apart from the user's own Stop
    assert 0 < len(reply.content) < 3000
    for _ in range(100):
        if fake.runner.released:
            break
        await asyncio.sleep(0.02)
    assert len(fake.runner.released) == 1  # the engine freed the sequence


async def test_any_open_socket_of_the_user_keeps_the_reply_going(
    use_engine: Callable[..., FakeEngine], member: User, tenant: Tenant, settings: Any
) -> None:
    # Switching to another conversation in the same tab: the user is still there.
    settings.QASSIST_REPLY_GRACE_SECONDS = 0.3
    use_engine(FakeRunner(step_delay=0.003, reply_for=lambda _: "k" * 400))
    other = await connected_as(member)
    socket = await connected_as(member)
    await socket.send_json_to({"type": "chat.send", "session": None, "content": "go on"})
    start = await socket.receive_json_from(timeout=5)
    await socket.disconnect()

    reply = await eventually_stored(start["reply"]["id"])
    assert (reply.status, reply.content) == (Message.Status.COMPLETE, "k" * 400)
    await other.disconnect()


def resume_text(frames: list[dict[str, Any]], reply_id: int) -> tuple[str, list[int]]:
    """The reply as a late subscriber assembles it: the snapshot, then each later delta at
    exactly the offset where the text so far ends. Returns the text and the offsets used."""
    text: str | None = None
    offsets = []
    for frame in frames:
        if frame["type"] == "reply.resume" and frame["reply"]["id"] == reply_id:
            assert frame["offset"] == len(frame["reply"]["content"])
            text = frame["reply"]["content"]
        elif frame["type"] == "delta" and text is not None:
            if frame["offset"] + len(frame["text"]) <= len(text):
                continue  # sent before the snapshot was taken: it is in the snapshot
            assert frame["offset"] == len(text), "a gap or an overlap after the snapshot"
            offsets.append(frame["offset"])
            text += frame["text"]
    assert text is not None, "no snapshot"
    return text, offsets


async def test_a_second_socket_joins_mid_reply_and_sees_it_whole_once(
    use_engine: Callable[..., FakeEngine], member: User, tenant: Tenant
) -> None:
    use_engine(FakeRunner(step_delay=0.005, reply_for=lambda _: "0123456789" * 40))
    first = await connected_as(member)
    await first.send_json_to({"type": "chat.send", "session": None, "content": "count"})
    start = await first.receive_json_from(timeout=5)
    session_id, reply_id = start["session"]["id"], start["reply"]["id"]
    for _ in range(5):
        assert (await first.receive_json_from(timeout=5))["type"] == "delta"

    second = await connected_as(member)  # another tab, or the same one after a reload
    await second.send_json_to({"type": "chat.subscribe", "session": session_id})
    subscribed = await second.receive_json_from(timeout=5)
    assert subscribed == {"type": "subscribed", "session": session_id, "streaming": reply_id}
    frames = await until_done(second)

    text, offsets = resume_text(frames, reply_id)
    assert text == "0123456789" * 40 == frames[-1]["reply"]["content"]
    assert offsets, "the live deltas came after the snapshot"
    first_frames = await until_done(first)  # the first socket saw it all too
    assert joined([start, *first_frames]).endswith(text[-10:])
    await first.disconnect()
    await second.disconnect()


async def test_subscribing_to_a_quiet_conversation_says_nothing_is_streaming(
    engine: FakeEngine, member: User, owner: User, tenant: Tenant
) -> None:
    socket = await connected_as(member)
    frames = await ask(socket, "hi")
    session_id = frames[0]["session"]["id"]
    await socket.send_json_to({"type": "chat.subscribe", "session": session_id})
    assert await socket.receive_json_from(timeout=5) == {
        "type": "subscribed",
        "session": session_id,
        "streaming": None,
    }
    assert await socket.receive_nothing(timeout=0.2)
    intruder = await connected_as(owner)
    await intruder.send_json_to({"type": "chat.subscribe", "session": session_id})
    assert (await intruder.receive_json_from(timeout=5))["code"] == "not_found"
    await socket.disconnect()
    await intruder.disconnect()


async def test_stop_from_another_socket_stops_the_reply(
    use_engine: Callable[..., FakeEngine], member: User, tenant: Tenant
) -> None:
    use_engine(FakeRunner(step_delay=0.01, reply_for=lambda _: "s" * 3000))
    first = await connected_as(member)
    await first.send_json_to({"type": "chat.send", "session": None, "content": "go"})
    start = await first.receive_json_from(timeout=5)
    session_id = start["session"]["id"]
    second = await connected_as(member)
    await second.send_json_to({"type": "chat.stop", "session": session_id})

    frames = await until_done(first)
    assert frames[-1]["reply"]["finish_reason"] == "cancelled"
    assert frames[-1]["reply"]["status"] == "interrupted"
    assert len(frames[-1]["reply"]["content"]) < 3000
    await first.disconnect()
    await second.disconnect()


async def test_regenerate_keeps_the_earlier_reply_as_a_version(
    engine: FakeEngine, member: User, tenant: Tenant
) -> None:
    socket = await connected_as(member)
    first = await ask(socket, "question")
    session_id = first[0]["session"]["id"]
    old_reply_id = first[-1]["reply"]["id"]
    assert first[0]["reply"]["versions"] == [old_reply_id]

    await socket.send_json_to({"type": "chat.regenerate", "session": session_id})
    frames = await until_done(socket)

    assert frames[0]["type"] == "reply.start"
    assert frames[0]["user_message"]["id"] == first[0]["user_message"]["id"]
    new_reply_id = frames[-1]["reply"]["id"]
    assert new_reply_id != old_reply_id
    assert frames[0]["reply"]["versions"] == [old_reply_id, new_reply_id]
    assert joined(frames) == "echo: question"
    assert await messages_of(session_id) == [
        ("user", "question", "complete"),
        ("assistant", "echo: question", "complete"),
        ("assistant", "echo: question", "complete"),
    ]
    await socket.disconnect()


async def test_edit_answers_a_new_version_of_the_last_user_message(
    engine: FakeEngine, member: User, tenant: Tenant
) -> None:
    socket = await connected_as(member)
    first = await ask(socket, "frist question")
    session_id = first[0]["session"]["id"]
    original_id = first[0]["user_message"]["id"]

    await socket.send_json_to(
        {"type": "chat.edit", "session": session_id, "content": "first question"}
    )
    frames = await until_done(socket)

    edited = frames[0]["user_message"]
    assert edited["id"] != original_id
    assert edited["content"] == "first question"
    assert edited["versions"] == [original_id, edited["id"]]
    assert joined(frames) == "echo: first question"
    assert await messages_of(session_id) == [
        ("user", "frist question", "complete"),
        ("assistant", "echo: frist question", "complete"),
        ("user", "first question", "complete"),
        ("assistant", "echo: first question", "complete"),
    ]
    await socket.disconnect()


async def test_an_earlier_question_edited_over_the_socket_branches_from_there(
    engine: FakeEngine, member: User, tenant: Tenant
) -> None:
    socket = await connected_as(member)
    first = await ask(socket, "one")
    session_id = first[0]["session"]["id"]
    await ask(socket, "two", session=session_id)
    await socket.send_json_to(
        {
            "type": "chat.edit",
            "session": session_id,
            "content": "uno",
            "message": first[0]["user_message"]["id"],
        }
    )
    frames = await until_done(socket)
    edited = frames[0]["user_message"]
    assert edited["versions"] == [first[0]["user_message"]["id"], edited["id"]]
    assert list(engine.runner.prompts)[-1] == "<user>uno\n<assistant>"
    await socket.send_json_to(
        {"type": "chat.edit", "session": session_id, "content": "x", "message": "one"}
    )
    error = await socket.receive_json_from(timeout=5)
    assert (error["type"], error["code"]) == ("error", "not_found")
    await socket.disconnect()


async def test_the_model_sees_only_the_chosen_branch(
    engine: FakeEngine, member: User, tenant: Tenant
) -> None:
    socket = await connected_as(member)
    first = await ask(socket, "one")
    session_id = first[0]["session"]["id"]
    await socket.send_json_to({"type": "chat.edit", "session": session_id, "content": "uno"})
    await until_done(socket)
    # Back to the first version, then on from there.
    await database_sync_to_async(branch_switch)(
        user=member,
        tenant=tenant,
        session_id=uuid.UUID(session_id),
        message_id=first[0]["user_message"]["id"],
    )
    await ask(socket, "two", session=session_id)
    prompts = list(engine.runner.prompts)
    assert prompts[-1] == "<user>one\n<assistant>echo: one\n<user>two\n<assistant>"
    assert "uno" not in prompts[-1]
    await socket.disconnect()


async def test_a_cached_reply_is_served_without_the_engine(
    engine: FakeEngine, member: User, tenant: Tenant
) -> None:
    await database_sync_to_async(CachedReply.objects.create)(
        tenant=tenant, question="What is qassist?", answer="Our **company assistant**. " * 4
    )
    socket = await connected_as(member)

    frames = await ask(socket, "what is QASSIST")

    reply = frames[-1]["reply"]
    assert reply["served_from_cache"] is True
    assert reply["status"] == "complete"
    assert joined(frames) == "Our **company assistant**. " * 4
    assert (await stored(reply["id"])).served_from_cache
    assert engine.runner.batches == []
    await socket.disconnect()


# --- states the page shows -------------------------------------------------------------------


async def test_a_second_request_waits_in_line_with_its_position(
    use_engine: Callable[..., FakeEngine], member: User, owner: User, tenant: Tenant
) -> None:
    script = {"first": "w" * 300, "second": "then me"}
    use_engine(FakeRunner(n_seq_max=1, step_delay=0.01, reply_for=script.__getitem__))
    first, second = await connected_as(member), await connected_as(owner)
    await first.send_json_to({"type": "chat.send", "session": None, "content": "first"})
    await first.receive_json_from(timeout=5)  # reply.start
    await first.receive_json_from(timeout=5)  # a delta: the only sequence is taken

    await second.send_json_to({"type": "chat.send", "session": None, "content": "second"})
    assert (await second.receive_json_from(timeout=5))["type"] == "reply.start"
    queued = await second.receive_json_from(timeout=5)
    assert queued["type"] == "queued"
    assert queued["position"] == 1

    await first.send_json_to({"type": "chat.stop"})
    await until_done(first)
    frames = await until_done(second)
    assert joined(frames) == "then me"
    assert frames[-1]["reply"]["status"] == "complete"
    await first.disconnect()
    await second.disconnect()


async def test_a_request_waiting_in_line_hears_an_estimated_wait(
    use_engine: Callable[..., FakeEngine], member: User, owner: User, tenant: Tenant
) -> None:
    script = {"first": "w" * 300, "second": "then me"}
    runner = FakeRunner(n_seq_max=1, step_delay=0.005, reply_for=script.__getitem__)
    runner.step_seconds = lambda decode, prefill: 0.05  # what each step "took"
    use_engine(runner)
    first, second = await connected_as(member), await connected_as(owner)
    await first.send_json_to({"type": "chat.send", "session": None, "content": "first"})
    deltas = 0
    while deltas < MIN_STEPS + 5:  # one delta a step: the engine has measured its steps
        deltas += (await first.receive_json_from(timeout=5))["type"] == "delta"

    await second.send_json_to({"type": "chat.send", "session": None, "content": "second"})
    assert (await second.receive_json_from(timeout=5))["type"] == "reply.start"
    queued = await second.receive_json_from(timeout=5)
    assert queued["type"] == "queued"
    assert queued["position"] == 1
    # The running reply's remaining tokens at 0.05 s a step (its max_tokens, before any
    # reply finished to say how long replies are).
    assert isinstance(queued["estimated_wait"], float)
    assert 0 < queued["estimated_wait"] <= 512 * 0.05

    await first.send_json_to({"type": "chat.stop"})
    await until_done(first)
    frames = await until_done(second)
    assert joined(frames) == "then me"
    await first.disconnect()
    await second.disconnect()


async def test_a_full_queue_answers_busy_with_a_retry_hint(
    use_engine: Callable[..., FakeEngine], member: User, owner: User, tenant: Tenant
) -> None:
    use_engine(FakeRunner(n_seq_max=1, step_delay=0.01, reply_for=lambda _: "w" * 200), max_queue=0)
    first, second = await connected_as(member), await connected_as(owner)
    await first.send_json_to({"type": "chat.send", "session": None, "content": "first"})
    await first.receive_json_from(timeout=5)
    await first.receive_json_from(timeout=5)

    await second.send_json_to({"type": "chat.send", "session": None, "content": "second"})
    frames = await until_done(second)

    error = of(frames, "error")[0]
    assert error["code"] == "busy"
    assert error["retry_after"] > 0
    assert error["reply_id"] == frames[-1]["reply"]["id"]
    assert frames[-1]["reply"]["status"] == "error"
    await first.send_json_to({"type": "chat.stop"})
    await until_done(first)
    await first.disconnect()
    await second.disconnect()


async def test_a_prompt_longer_than_the_context_is_an_error_event(
    use_engine: Callable[..., FakeEngine], member: User, tenant: Tenant
) -> None:
    use_engine(FakeRunner(max_seq_tokens=64))
    socket = await connected_as(member)

    await socket.send_json_to(
        {"type": "chat.send", "session": None, "content": "a long message " * 10}
    )
    error = await socket.receive_json_from(timeout=5)

    # Refused before anything is stored: no session, no message, no failed reply.
    assert error["code"] == "prompt_too_long"
    assert "64" in error["message"]
    assert await database_sync_to_async(ChatSession.objects.count)() == 0
    # The connection is still usable.
    await socket.send_json_to({"type": "chat.stop"})
    await socket.send_json_to({"type": "nope"})
    assert (await socket.receive_json_from(timeout=5))["code"] == "unknown_type"
    await socket.disconnect()


async def test_a_model_that_cannot_load_is_reported_as_worker_down(
    member: User, tenant: Tenant
) -> None:
    def broken() -> Any:
        raise FileNotFoundError("model file missing")

    client = LocalEngineClient(broken)
    set_engine_client(client)
    try:
        socket = await connected_as(member)
        frames = await ask(socket, "hello")
        assert of(frames, "error")[0]["code"] == "worker_down"
        assert frames[-1]["reply"]["status"] == "error"
        await socket.disconnect()
    finally:
        set_engine_client(None)
        client.stop()


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("send", "code"),
    [
        ({"text_data": "not json"}, "bad_frame"),
        ({"text_data": "[1, 2]"}, "bad_frame"),
        ({"text_data": '{"type": "chat.fly"}'}, "unknown_type"),
        ({"text_data": '{"no": "type"}'}, "bad_frame"),
        ({"text_data": '{"type": []}'}, "bad_frame"),
        ({"text_data": '{"type": {"a": 1}}'}, "bad_frame"),
        ({"text": ""}, "bad_frame"),
        ({"text_data": "   "}, "bad_frame"),
        ({"bytes": b""}, "bad_frame"),
        ({"bytes_data": b"\x00\x01binary"}, "bad_frame"),
        ({"text_data": "x" * 300_000}, "frame_too_large"),
        ({"text_data": "[" * 100_000 + "]" * 100_000}, "bad_frame"),  # once a crash
        ({"text_data": '{"type": "chat.send", "x": ' + "[" * 70 + "]" * 70 + "}"}, "bad_frame"),
        (
            {"text_data": '{"type": "chat.send", "session": null, "content": "a\\ud800b"}'},
            "invalid_message",  # once `internal`: the database could not store it
        ),
        (
            {"text_data": '{"type": "chat.edit", "session": null, "content": "\\udfff"}'},
            "invalid_message",
        ),
        (
            {"text_data": '{"type": "chat.send", "session": null, "content": "a\\u0000b"}'},
            "invalid_message",
        ),
        (
            {"text_data": '{"type": "chat.send", "session": null, "content": "   "}'},
            "invalid_message",
        ),
        ({"text_data": '{"type": "chat.send", "session": null, "content": 7}'}, "invalid_message"),
        (
            {"text_data": '{"type": "chat.send", "session": "not-a-uuid", "content": "x"}'},
            "not_found",
        ),
        ({"text_data": '{"type": "chat.regenerate", "session": null}'}, "not_found"),
        ({"text_data": '{"type": "chat.edit", "session": null, "content": "x"}'}, "not_found"),
    ],
)
async def test_a_bad_frame_gets_an_error_and_the_connection_stays_usable(
    engine: FakeEngine, member: User, tenant: Tenant, send: dict[str, Any], code: str
) -> None:
    socket = await connected_as(member)

    if "text" in send or "bytes" in send:  # frames WebsocketCommunicator.send_to cannot make
        await socket.send_input({"type": "websocket.receive", **send})
    else:
        await socket.send_to(**send)
    error = await socket.receive_json_from(timeout=5)

    assert error == {"type": "error", "code": code, "message": error["message"]}
    assert error["message"]
    frames = await ask(socket, "still here?")
    assert joined(frames) == "echo: still here?"
    await socket.disconnect()


async def test_a_message_over_the_size_limit_is_refused(
    engine: FakeEngine, member: User, tenant: Tenant
) -> None:
    socket = await connected_as(member)
    await socket.send_json_to({"type": "chat.send", "session": None, "content": "x" * 32_001})
    error = await socket.receive_json_from(timeout=5)
    assert error["code"] == "invalid_message"
    assert await database_sync_to_async(ChatSession.objects.count)() == 0
    await socket.disconnect()


async def test_another_users_session_is_not_found(
    engine: FakeEngine, member: User, owner: User, tenant: Tenant
) -> None:
    owners = await database_sync_to_async(ChatSession.objects.create)(
        user=owner, tenant=tenant, title="Owner's"
    )
    socket = await connected_as(member)

    for frame in [
        {"type": "chat.send", "session": str(owners.id), "content": "let me in"},
        {"type": "chat.regenerate", "session": str(owners.id)},
        {"type": "chat.edit", "session": str(owners.id), "content": "let me in"},
    ]:
        await socket.send_json_to(frame)
        assert (await socket.receive_json_from(timeout=5))["code"] == "not_found"

    assert await messages_of(str(owners.id)) == []
    await socket.disconnect()


async def test_sending_while_a_reply_streams_is_refused_and_the_reply_goes_on(
    use_engine: Callable[..., FakeEngine], member: User, tenant: Tenant
) -> None:
    use_engine(FakeRunner(step_delay=0.005, reply_for=lambda _: "v" * 60))
    socket = await connected_as(member)
    await socket.send_json_to({"type": "chat.send", "session": None, "content": "first"})
    start = await socket.receive_json_from(timeout=5)

    await socket.send_json_to({"type": "chat.send", "session": None, "content": "second"})
    frames = [start, *await until_done(socket)]

    assert [f["code"] for f in of(frames, "error")] == ["busy_connection"]
    assert joined(frames) == "v" * 60
    assert frames[-1]["reply"]["status"] == "complete"
    await socket.disconnect()


# --- generated titles ------------------------------------------------------------------------


async def test_a_new_conversation_gets_a_generated_title_after_its_first_reply(
    use_engine: Callable[..., FakeEngine], member: User, settings: Any
) -> None:
    settings.QASSIST_GENERATE_TITLES = True

    def reply_for(prompt: str) -> str:
        return '"Q3 offsite"\nand more' if "title" in prompt else "Sure."

    fake = use_engine(FakeRunner(reply_for=reply_for))
    socket = await connected_as(member)
    frames = await ask(socket, "help me plan the Q3 offsite for our team")
    assert joined(frames) == "Sure."  # the reply is not held up by the title
    title = await socket.receive_json_from(timeout=5)
    session_id = frames[0]["session"]["id"]
    assert title == {
        "type": "session.title",
        "session": {"id": session_id, "title": "Q3 offsite"},
    }
    session = await database_sync_to_async(ChatSession.objects.get)(id=session_id)
    assert session.title == "Q3 offsite"
    requests = {rid for b in fake.runner.batches for rid, _ in b.prefills}
    assert len(requests) == 2  # the reply, then the title
    await socket.disconnect()


async def test_a_follow_up_sent_the_instant_reply_done_arrives_is_answered_while_titling(
    use_engine: Callable[..., FakeEngine], member: User, settings: Any
) -> None:
    """reply.done means the connection is ready: the title asked for afterwards (20 slow
    tokens here, about a second) runs on its own and never makes a follow-up busy."""
    settings.QASSIST_GENERATE_TITLES = True

    def reply_for(prompt: str) -> str:
        return "Planning the offsite in detail" if "title" in prompt else "Sure."

    use_engine(FakeRunner(step_delay=0.05, reply_for=reply_for))
    socket = await connected_as(member)
    first = await ask(socket, "help me plan the Q3 offsite for our team")
    session_id = first[0]["session"]["id"]

    await socket.send_json_to({"type": "chat.send", "session": session_id, "content": "and then?"})
    follow_up = await until_done(socket)

    assert of(follow_up, "error") == []
    assert joined(follow_up) == "Sure."
    assert follow_up[-1]["reply"]["status"] == "complete"
    # The title was still being generated when the follow-up was sent: it arrives afterwards.
    title = await socket.receive_json_from(timeout=5)
    assert title["type"] == "session.title"
    assert title["session"]["id"] == session_id
    await socket.disconnect()


async def test_a_title_the_user_set_meanwhile_is_not_overwritten(
    use_engine: Callable[..., FakeEngine], member: User, settings: Any
) -> None:
    settings.QASSIST_GENERATE_TITLES = True
    use_engine(FakeRunner(reply_for=lambda p: "Generated" if "title" in p else "ok"))
    socket = await connected_as(member)
    frames = await ask(socket, "first message")
    session_id = frames[0]["session"]["id"]
    await database_sync_to_async(ChatSession.objects.filter(id=session_id).update)(title="Mine")
    assert await socket.receive_nothing(timeout=0.5)
    session = await database_sync_to_async(ChatSession.objects.get)(id=session_id)
    assert session.title == "Mine"
    await socket.disconnect()


async def test_one_user_cannot_hold_more_sockets_than_allowed(
    engine: FakeEngine, member: User, outsider: User, settings: Any
) -> None:
    settings.QASSIST_WS_MAX_PER_USER = 3
    sockets = [await connected_as(member) for _ in range(3)]
    _extra, connected, code = await open_socket(member)
    assert (connected, code) == (False, 4429)
    other = await connected_as(outsider)  # someone else is not affected
    await sockets.pop().disconnect()
    again = await connected_as(member)  # a closed socket frees its place
    frames = await ask(again, "still served")
    assert joined(frames) == "echo: still served"
    for socket in [*sockets, other, again]:
        await socket.disconnect()


async def test_a_flood_of_frames_is_dropped_with_a_notice_and_others_are_served(
    engine: FakeEngine, member: User, outsider: User
) -> None:
    flooder = await connected_as(member)
    for _ in range(300):
        await flooder.send_to(text_data='{"type": "chat.nothing"}')
    codes = set()
    while not await flooder.receive_nothing(timeout=0.3):
        codes.add((await flooder.receive_json_from())["code"])
    assert codes == {"unknown_type", "too_many_frames"}
    bystander = await connected_as(outsider)
    assert joined(await ask(bystander, "hello")) == "echo: hello"
    await flooder.disconnect()
    await bystander.disconnect()


async def test_a_follow_up_too_long_for_the_context_stores_nothing(
    use_engine: Callable[..., FakeEngine], member: User, tenant: Tenant
) -> None:
    use_engine(FakeRunner(max_seq_tokens=200))
    socket = await connected_as(member)
    first = await ask(socket, "short")
    session_id = first[0]["session"]["id"]
    before = await messages_of(session_id)

    await socket.send_json_to(
        {"type": "chat.send", "session": session_id, "content": "a long message " * 20}
    )
    error = await socket.receive_json_from(timeout=5)
    assert error["code"] == "prompt_too_long"
    assert "reply_id" not in error  # no reply was made to fail
    await socket.send_json_to(
        {"type": "chat.edit", "session": session_id, "content": "a long message " * 20}
    )
    assert (await socket.receive_json_from(timeout=5))["code"] == "prompt_too_long"
    assert await messages_of(session_id) == before
    await socket.disconnect()


@pytest.fixture
def unreachable_channel_layer(settings: Any) -> None:
    """A channel layer on a Redis that does not answer (a restart, an outage)."""
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]},
        }
    }


async def test_replies_reach_their_sockets_without_the_channel_layer(
    use_engine: Callable[..., FakeEngine],
    member: User,
    tenant: Tenant,
    unreachable_channel_layer: None,
) -> None:
    # Chat sockets stay off the channel layer (a Redis restart must not take them down):
    # a late socket still resumes the reply, and Stop from it still works.
    use_engine(FakeRunner(step_delay=0.01, reply_for=lambda _: "r" * 3000))
    first = await connected_as(member)
    await first.send_json_to({"type": "chat.send", "session": None, "content": "go"})
    start = await first.receive_json_from(timeout=5)
    session_id, reply_id = start["session"]["id"], start["reply"]["id"]
    for _ in range(3):
        assert (await first.receive_json_from(timeout=5))["type"] == "delta"
    await first.disconnect()  # the reply goes on

    second = await connected_as(member)
    await second.send_json_to({"type": "chat.subscribe", "session": session_id})
    assert (await second.receive_json_from(timeout=5))["streaming"] == reply_id
    frames: list[dict[str, Any]] = []
    while not any(f["type"] == "reply.resume" for f in frames):
        frames.append(await second.receive_json_from(timeout=5))
    for _ in range(3):
        frames.append(await second.receive_json_from(timeout=5))
    await second.send_json_to({"type": "chat.stop", "session": session_id})
    frames += await until_done(second)

    done = frames[-1]["reply"]
    assert done["finish_reason"] == "cancelled"
    assert resume_text(frames, reply_id)[0] == done["content"]
    assert len(done["content"]) < 3000
    await second.disconnect()


async def test_a_stop_sent_right_after_the_message_still_stops_the_reply(
    use_engine: Callable[..., FakeEngine], member: User, tenant: Tenant
) -> None:
    # The stop may reach the reply before the engine has the request: it waits for it.
    use_engine(FakeRunner(step_delay=0.01, reply_for=lambda _: "q" * 3000))
    socket = await connected_as(member)
    await socket.send_json_to({"type": "chat.send", "session": None, "content": "go"})
    await socket.send_json_to({"type": "chat.stop"})
    frames = await until_done(socket)
    done = frames[-1]["reply"]
    assert (done["status"], done["finish_reason"]) == ("interrupted", "cancelled")
    assert len(done["content"]) < 3000
    await socket.disconnect()


async def test_a_reply_whose_user_lost_access_stops_even_with_no_socket_open(
    use_engine: Callable[..., FakeEngine], member: User, tenant: Tenant, settings: Any
) -> None:
    # The run re-checks access itself: the user's sockets may be in another web process.
    settings.QASSIST_WS_RECHECK_SECONDS = 1
    use_engine(FakeRunner(step_delay=0.01, reply_for=lambda _: "m" * 3000))
    socket = await connected_as(member)
    await socket.send_json_to({"type": "chat.send", "session": None, "content": "go"})
    start = await socket.receive_json_from(timeout=5)
    await socket.receive_json_from(timeout=5)  # a first delta
    await socket.disconnect()
    await database_sync_to_async(Membership.objects.filter(user=member).delete)()

    reply = await eventually_stored(start["reply"]["id"])
    assert reply.status == Message.Status.INTERRUPTED
    assert "Access to this workspace was removed" in reply.error
    assert 0 < len(reply.content) < 3000


async def test_stop_takes_a_reply_waiting_in_line_out_of_the_queue_at_once(
    use_engine: Callable[..., FakeEngine], member: User, owner: User, tenant: Tenant
) -> None:
    # Issue #31: Esc while "Waiting in line" took effect only when the reply began. The one
    # sequence is taken, and the engine is held in a long step (a model under load): Stop
    # must answer now, not after the step, and the request must never run.
    gate = threading.Event()
    script = {"first": "w" * 3000, "second": "never"}
    sampled: list[str] = []  # the questions the model was asked to answer

    def reply_for(prompt: str) -> str:
        sampled.append(prompt)
        return script[prompt]

    runner = FakeRunner(n_seq_max=1, step_delay=0.01, reply_for=reply_for)
    fake = use_engine(runner)
    first, second = await connected_as(member), await connected_as(owner)
    await first.send_json_to({"type": "chat.send", "session": None, "content": "first"})
    await first.receive_json_from(timeout=5)  # reply.start
    await first.receive_json_from(timeout=5)  # a delta: the only sequence is taken
    runner.gate = gate  # from the next step on, the engine is held in it

    await second.send_json_to({"type": "chat.send", "session": None, "content": "second"})
    try:
        assert (await second.receive_json_from(timeout=5))["type"] == "reply.start"
        await second.send_json_to({"type": "chat.stop"})
        frames = await until_done(second)
    finally:
        held = not gate.is_set()
        gate.set()  # never leave the engine thread held, whatever happened

    assert held  # answered while the engine was still in its step
    done = frames[-1]["reply"]
    assert (done["status"], done["finish_reason"], done["content"]) == (
        "interrupted",
        "cancelled",
        "",
    )
    reply = await stored(done["id"])
    assert (reply.status, reply.finish_reason) == (Message.Status.INTERRUPTED, "cancelled")
    assert (reply.prompt_tokens, reply.completion_tokens) == (0, 0)  # nothing was generated

    await first.send_json_to({"type": "chat.stop"})
    await until_done(first)
    # The engine dropped it from its queue before it could start: only "first" ever ran.
    worker = fake.client.worker
    assert worker is not None
    assert not worker.engine.scheduler.has_work
    assert set(sampled) == {"first"}
    await first.disconnect()
    await second.disconnect()
