"""The browser chat with several models (issue #36): a tenant set to the large model gets its
replies from the large model's engine, and each reply says which model wrote it; another
tenant on the default is unaffected."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User

from tenants.models import Membership, Tenant
from tests.chat.conftest import LARGE, SMALL
from tests.chat.test_consumer import ask, connected_as, joined, of, stored
from tests.fakes import FakeRunner

pytestmark = pytest.mark.django_db(transaction=True)


def make_member(tenant: Tenant, name: str) -> User:
    user = User.objects.create_user(name, password="x")
    Membership.objects.create(user=user, tenant=tenant)
    return user


async def test_a_tenant_on_the_large_model_is_answered_by_it_and_another_is_not(
    runners: dict[str, FakeRunner], tenant: Tenant, other_tenant: Tenant
) -> None:
    tenant.default_model = LARGE
    await sync_to_async(tenant.save)()
    on_large = await sync_to_async(make_member)(tenant, "alice")
    on_small = await sync_to_async(make_member)(other_tenant, "bob")

    large_socket = await connected_as(on_large)
    small_socket = await connected_as(on_small)
    large_frames = await ask(large_socket, "hello from acme")
    small_frames = await ask(small_socket, "hello from globex")
    await large_socket.disconnect()
    await small_socket.disconnect()

    assert joined(large_frames) == f"{LARGE}: hello from acme"
    assert joined(small_frames) == f"{SMALL}: hello from globex"
    assert list(runners[LARGE].prompts.values()) == ["hello from acme"]
    assert list(runners[SMALL].prompts.values()) == ["hello from globex"]
    large_done = of(large_frames, "reply.done")[-1]["reply"]
    small_done = of(small_frames, "reply.done")[-1]["reply"]
    assert (large_done["model"], small_done["model"]) == (LARGE, SMALL)  # what the page shows
    assert (await stored(large_done["id"])).model == LARGE


async def send(
    socket: WebsocketCommunicator, content: str, session: str | None = None, **extra: object
) -> list[dict[str, Any]]:
    await socket.send_json_to(
        {"type": "chat.send", "session": session, "content": content, **extra}
    )
    frames = []
    while True:
        frame = await socket.receive_json_from(timeout=5)
        frames.append(frame)
        if frame["type"] in ("reply.done", "error"):
            return frames


async def test_a_picked_model_answers_and_the_conversation_remembers_it(
    runners: dict[str, FakeRunner], tenant: Tenant
) -> None:
    tenant.allowed_models = [LARGE]
    await sync_to_async(tenant.save)()
    user = await sync_to_async(make_member)(tenant, "carol")
    socket = await connected_as(user)

    picked = await send(socket, "first", model=LARGE)
    reply = of(picked, "reply.done")[-1]["reply"]
    session_id = next(f["session"]["id"] for f in picked if f.get("session"))
    follow_up = await send(socket, "second", session=session_id)  # no pick: remembered
    fresh = await send(socket, "elsewhere")  # a new conversation: the tenant's default
    await socket.disconnect()

    assert joined(picked) == f"{LARGE}: first"
    assert reply["model"] == LARGE
    assert joined(follow_up) == f"{LARGE}: second"
    assert joined(fresh) == f"{SMALL}: elsewhere"


async def test_a_model_the_tenant_does_not_allow_is_an_error_event_and_runs_nothing(
    runners: dict[str, FakeRunner], tenant: Tenant
) -> None:
    user = await sync_to_async(make_member)(tenant, "dave")
    socket = await connected_as(user)

    frames = await send(socket, "hi", model=LARGE)
    await socket.disconnect()

    error = of(frames, "error")[-1]
    assert error["code"] == "model_not_allowed"
    assert f"'{LARGE}' is not available" in error["message"]
    assert runners[LARGE].prompts == {}
    assert runners[SMALL].prompts == {}


@pytest.mark.parametrize(("allowed", "shown"), [([], False), ([LARGE], True)])
async def test_the_page_offers_a_picker_only_when_the_tenant_allows_several_models(
    runners: dict[str, FakeRunner], tenant: Tenant, allowed: list[str], shown: bool
) -> None:
    from django.test import Client

    tenant.allowed_models = allowed
    await sync_to_async(tenant.save)()
    user = await sync_to_async(make_member)(tenant, "erin")

    def page() -> str:
        client = Client()
        client.force_login(user)
        return client.get("/").content.decode()

    html = await sync_to_async(page)()

    assert ('id="model-select"' in html) is shown
    if shown:
        assert f'<option value="{SMALL}" selected>{SMALL} (default)</option>' in html
        assert f'<option value="{LARGE}">{LARGE}</option>' in html
