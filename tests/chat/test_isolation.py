"""Isolation on every surface: a member, an ex-member, a member of another tenant and an
anonymous caller, against pages, JSON endpoints, the websocket and the REST API."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.test import AsyncClient, Client

from chat.models import ChatSession, Message
from tenants.models import ApiKey, Membership, Tenant
from tenants.services import api_key_create
from tests.chat.conftest import FakeEngine
from tests.chat.test_api import ask, headers, post
from tests.chat.test_consumer import connected_as, open_socket
from tests.conftest import PASSWORD
from tests.fakes import FakeRunner

pytestmark = pytest.mark.django_db(transaction=True)


async def eventually(condition: Any, within: float = 5.0) -> None:
    """Wait for something another thread does (the engine's loop), failing after `within`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        assert loop.time() < deadline, "it did not happen"
        await asyncio.sleep(0.02)


@pytest.fixture
def conversation(tenant: Tenant, member: User) -> ChatSession:
    session = ChatSession.objects.create(tenant=tenant, user=member, title="Plans")
    Message.objects.create(session=session, role="user", content="our secret plan")
    Message.objects.create(session=session, role="assistant", content="noted")
    return session


@pytest.fixture
def ex_member(tenant: Tenant, other_tenant: Tenant) -> tuple[User, ChatSession]:
    """Wrote in acme, then was moved to globex: acme's conversation is not theirs to read."""
    user = User.objects.create_user("leaver", password=PASSWORD)
    Membership.objects.create(user=user, tenant=tenant)
    session = ChatSession.objects.create(tenant=tenant, user=user, title="Before I left")
    Message.objects.create(session=session, role="user", content="acme internals")
    Membership.objects.filter(user=user, tenant=tenant).delete()
    Membership.objects.create(user=user, tenant=other_tenant)
    return user, session


def logged_in(user: User | None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


PAGE_AND_JSON = [
    ("get", "/c/{id}/"),
    ("get", "/c/{id}/messages"),
    ("post", "/sessions/{id}/rename"),
    ("post", "/sessions/{id}/archive"),
]


@pytest.mark.parametrize(("method", "path"), PAGE_AND_JSON)
def test_pages_and_json_endpoints_answer_only_the_member(
    method: str,
    path: str,
    conversation: ChatSession,
    member: User,
    outsider: User,
) -> None:
    url = path.format(id=conversation.id)
    data = {"title": "mine now"} if "rename" in path else {}
    outsider_response = getattr(logged_in(outsider), method)(url, data)
    assert outsider_response.status_code == 404
    anonymous = getattr(logged_in(None), method)(url, data)
    assert anonymous.status_code in (302, 401)  # the login page, or 401 for JSON endpoints
    assert getattr(logged_in(member), method)(url, data).status_code == 200


@pytest.mark.parametrize(("method", "path"), PAGE_AND_JSON)
def test_an_ex_member_can_no_longer_reach_the_old_tenants_conversation(
    method: str, path: str, ex_member: tuple[User, ChatSession]
) -> None:
    user, session = ex_member
    url = path.format(id=session.id)
    data = {"title": "x"} if "rename" in path else {}
    response = getattr(logged_in(user), method)(url, data)
    assert response.status_code == 404
    assert b"acme internals" not in response.content
    session.refresh_from_db()
    assert (session.title, session.archived) == ("Before I left", False)


def test_a_deactivated_tenants_conversations_are_gone_for_its_members(
    conversation: ChatSession, member: User, tenant: Tenant
) -> None:
    tenant.active = False
    tenant.save()
    assert logged_in(member).get(f"/c/{conversation.id}/messages").status_code in (403, 404)


async def test_an_ex_member_cannot_continue_the_old_conversation_over_the_websocket(
    engine: FakeEngine, ex_member: tuple[User, ChatSession]
) -> None:
    user, session = ex_member
    socket = await connected_as(user)  # connects in globex, the tenant they are in now
    for frame in (
        {"type": "chat.send", "session": str(session.id), "content": "still here"},
        {"type": "chat.regenerate", "session": str(session.id)},
        {"type": "chat.edit", "session": str(session.id), "content": "x"},
    ):
        await socket.send_json_to(frame)
        assert (await socket.receive_json_from(timeout=5))["code"] == "not_found"
    count = await database_sync_to_async(session.messages.count)()
    assert count == 1
    assert engine.runner.batches == []
    await socket.disconnect()


async def test_a_member_of_another_tenant_cannot_use_the_session_id_over_the_websocket(
    engine: FakeEngine, conversation: ChatSession, outsider: User
) -> None:
    socket = await connected_as(outsider)
    await socket.send_json_to(
        {"type": "chat.send", "session": str(conversation.id), "content": "hi"}
    )
    assert (await socket.receive_json_from(timeout=5))["code"] == "not_found"
    await socket.disconnect()


async def test_an_anonymous_websocket_is_refused() -> None:
    _socket, connected, code = await open_socket(None)
    assert (connected, code) == (False, 4401)


# --- an open socket is re-checked ---------------------------------------------------------------


async def _removed_mid_reply(
    use_engine: Any, member: User, tenant: Tenant, settings: Any, revoke: Any
) -> None:
    settings.QASSIST_WS_RECHECK_SECONDS = 1
    fake = use_engine(FakeRunner(step_delay=0.02, reply_for=lambda _: "w" * 2000))
    socket = await connected_as(member)
    await socket.send_json_to({"type": "chat.send", "session": None, "content": "go"})
    start = await socket.receive_json_from(timeout=5)
    await database_sync_to_async(revoke)()
    frames = []
    while True:
        output = await socket.receive_output(timeout=10)
        if output["type"] == "websocket.close":
            break
        frames.append(output)
    assert output["code"] == 4403
    reply = await database_sync_to_async(Message.objects.get)(id=start["reply"]["id"])
    assert reply.status == "interrupted"  # its text kept, its generation stopped
    assert len(reply.content) < 2000
    await eventually(lambda: bool(fake.runner.released))  # the engine freed its sequence


async def test_removing_a_membership_closes_an_open_socket_and_stops_its_reply(
    use_engine: Any, member: User, tenant: Tenant, settings: Any
) -> None:
    await _removed_mid_reply(
        use_engine,
        member,
        tenant,
        settings,
        lambda: Membership.objects.filter(user=member, tenant=tenant).delete(),
    )


async def test_deactivating_the_tenant_closes_an_open_socket(
    use_engine: Any, member: User, tenant: Tenant, settings: Any
) -> None:
    await _removed_mid_reply(
        use_engine, member, tenant, settings, lambda: Tenant.objects.update(active=False)
    )


async def test_deactivating_the_user_closes_an_open_socket(
    use_engine: Any, member: User, tenant: Tenant, settings: Any
) -> None:
    await _removed_mid_reply(
        use_engine, member, tenant, settings, lambda: User.objects.update(is_active=False)
    )


async def test_logging_out_closes_an_open_socket(
    use_engine: Any, member: User, tenant: Tenant, settings: Any
) -> None:
    from django.contrib.sessions.models import Session

    await _removed_mid_reply(use_engine, member, tenant, settings, Session.objects.all().delete)


# --- REST -------------------------------------------------------------------------------------


async def test_rest_answers_a_key_only_with_its_own_tenant(
    engine: FakeEngine, api_key: tuple[ApiKey, str], other_tenant: Tenant
) -> None:
    made = (await post(api_key[1], ask("acme only"))).json()
    _, globex_key = await sync_to_async(api_key_create)(tenant=other_tenant, name="globex")
    client = AsyncClient()
    assert (
        await client.get(f"/v1/chat/completions/{made['id']}", headers=headers(globex_key))
    ).status_code == 404
    assert (await client.get(f"/v1/chat/completions/{made['id']}")).status_code == 401
    assert (
        await client.get(f"/v1/chat/completions/{made['id']}", headers=headers(api_key[1]))
    ).status_code == 200


async def test_a_browser_conversation_is_not_reachable_over_rest(
    engine: FakeEngine, api_key: tuple[ApiKey, str], conversation: ChatSession
) -> None:
    response = await AsyncClient().get(
        f"/v1/chat/completions/chatcmpl-{conversation.id.hex}", headers=headers(api_key[1])
    )
    assert response.status_code == 404


# --- documents limited to a group (docs/knowledge.md, "Who may read what") ---------------------


@pytest.fixture
def salary_bands(tenant: Tenant, member: User) -> Any:
    """An indexed passage of a document limited to acme's group HR; `member` is not in it."""
    from knowledge.models import Chunk, Document
    from tenants.services import tenant_group_create

    group = tenant_group_create(tenant=tenant, name="HR")
    document = Document.objects.create(tenant=tenant, title="Salary bands", filename="s.md",
                                       kind="markdown", size=10, sha256="0" * 64,
                                       status="ready", audience=f"g:{group.pk}")  # fmt: skip
    document.groups.set([group])
    chunk = Chunk.objects.create(
        document=document,
        tenant=tenant,
        version=1,
        ordinal=0,
        text="L3 earns EUR 70,000.",
        tokens=5,
        search_text="l3",
        embedding=b"",
        embedder="x",
        audience=document.audience,
    )
    return group, document, chunk


async def test_a_passage_and_file_of_a_group_are_404_to_members_outside_it_and_keys_without_it(
    salary_bands: Any, member: User, outsider: User, tenant: Tenant
) -> None:
    group, document, chunk = salary_bands
    for user in (member, outsider):
        client = await sync_to_async(logged_in)(user)
        assert (await sync_to_async(client.get)(f"/passages/{chunk.pk}")).status_code == 404
        file_url = f"/documents/{document.pk}/file"
        assert (await sync_to_async(client.get)(file_url)).status_code == 404
    _, narrow = await sync_to_async(api_key_create)(tenant=tenant, name="no groups",
                                                    document_scope="groups")  # fmt: skip
    rest = AsyncClient()
    url = f"/v1/knowledge/documents/{document.public_id}"
    assert (await rest.get(url, headers=headers(narrow))).status_code == 404
    assert (await rest.get(f"{url}/content", headers=headers(narrow))).status_code == 404
    await sync_to_async(group.group.user_set.add)(member)
    client = await sync_to_async(logged_in)(member)
    assert (await sync_to_async(client.get)(f"/passages/{chunk.pk}")).status_code == 200
