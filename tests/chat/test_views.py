"""The chat pages and the sidebar's JSON endpoints, through Django's test client."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from chat.models import ChatSession, Message
from tenants.models import Membership, Tenant, UsageRecord
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def make_session(user: User, tenant: Tenant, title: str, *messages: tuple[str, str]) -> ChatSession:
    session = ChatSession.objects.create(user=user, tenant=tenant, title=title)
    for role, content in messages:
        Message.objects.create(session=session, role=role, content=content)
    return session


def logged_in(user: User, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def post_json(client: Client, url: str, data: Any) -> Any:
    return client.post(url, json.dumps(data), content_type="application/json")


def page_data(response: Any) -> Any:
    match = re.search(
        r'<script id="chat-data" type="application/json">(.*?)</script>',
        response.content.decode(),
        re.S,
    )
    assert match, "the page carries its data in a json_script block"
    return json.loads(match.group(1))


def rename_url(session: ChatSession) -> str:
    return reverse("chat:session_rename", args=[session.id])


def archive_url(session: ChatSession) -> str:
    return reverse("chat:session_archive", args=[session.id])


def restore_url(session: ChatSession) -> str:
    return reverse("chat:session_restore", args=[session.id])


def delete_url(session: ChatSession) -> str:
    return reverse("chat:session_delete", args=[session.id])


def services_sessions(user: User, tenant: Tenant) -> list[ChatSession]:
    from chat.services.sessions import sessions_for_user

    return list(sessions_for_user(user=user, tenant=tenant))


# --- logging in --------------------------------------------------------------------------------


def test_the_chat_page_requires_login(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"


def test_the_login_page_renders_a_form_with_csrf(client: Client) -> None:
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert b'name="csrfmiddlewaretoken"' in response.content
    assert b'name="username"' in response.content


def test_logging_in_leads_to_the_chat(client: Client, member: User) -> None:
    response = client.post(
        "/accounts/login/", {"username": "member", "password": PASSWORD}, follow=True
    )
    assert response.redirect_chain[-1][0] == "/"
    assert b'id="composer"' in response.content


def test_a_wrong_password_shows_an_error(client: Client, member: User) -> None:
    response = client.post("/accounts/login/", {"username": "member", "password": "nope"})
    assert response.status_code == 200
    assert b"form-error" in response.content


def test_the_json_endpoints_answer_401_when_logged_out(
    client: Client, member: User, tenant: Tenant
) -> None:
    session = make_session(member, tenant, "Mine")
    for response in [
        client.get(reverse("chat:session_list")),
        client.get(reverse("chat:messages", args=[session.id])),
        client.post(rename_url(session), {"title": "x"}),
        client.post(archive_url(session)),
    ]:
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "login_required"
    session.refresh_from_db()
    assert (session.title, session.archived) == ("Mine", False)


def test_a_user_in_no_tenant_sees_why(client: Client) -> None:
    loner = User.objects.create_user("loner", password=PASSWORD)
    response = logged_in(loner).get("/")
    assert response.status_code == 403
    assert b"No workspace yet" in response.content


# --- the sidebar -------------------------------------------------------------------------------


def test_the_sidebar_lists_only_the_users_sessions_newest_first(
    member: User, owner: User, outsider: User, tenant: Tenant, other_tenant: Tenant
) -> None:
    older = make_session(member, tenant, "Older chat")
    newer = make_session(member, tenant, "Newer chat")
    make_session(owner, tenant, "Owner's chat")
    make_session(outsider, other_tenant, "Outsider's chat")
    archived = make_session(member, tenant, "Archived chat")
    archived.archived = True
    archived.save()

    response = logged_in(member).get("/")

    assert response.status_code == 200
    assert list(response.context["sessions"]) == [newer, older]
    html = response.content.decode()
    assert html.index("Newer chat") < html.index("Older chat")
    for hidden in ["Owner's chat", "Outsider's chat", "Archived chat"]:
        assert hidden not in html


def test_the_session_list_endpoint_matches_the_sidebar(
    member: User, owner: User, tenant: Tenant
) -> None:
    older = make_session(member, tenant, "Older chat")
    newer = make_session(member, tenant, "Newer chat")
    make_session(owner, tenant, "Owner's chat")

    response = logged_in(member).get(reverse("chat:session_list"))

    assert response.status_code == 200
    assert [s["id"] for s in response.json()["sessions"]] == [str(newer.id), str(older.id)]


def test_search_finds_titles_and_message_text_of_the_users_sessions_only(
    member: User, owner: User, tenant: Tenant
) -> None:
    by_title = make_session(member, tenant, "Quarterly report")
    by_text = make_session(
        member, tenant, "Misc", ("user", "please summarise the QUARTERLY numbers")
    )
    make_session(member, tenant, "Lunch ideas", ("user", "noodles"))
    make_session(owner, tenant, "Quarterly plans of the owner")

    response = logged_in(member).get(reverse("chat:session_list"), {"q": "quarterly"})

    assert response.status_code == 200
    assert {s["id"] for s in response.json()["sessions"]} == {str(by_title.id), str(by_text.id)}


def test_search_finds_chinese_text(member: User, tenant: Tenant) -> None:
    session = make_session(member, tenant, "Files", ("user", "怎么用 Python 逐行读取文件？"))
    response = logged_in(member).get(reverse("chat:session_list"), {"q": "读取"})
    assert [s["id"] for s in response.json()["sessions"]] == [str(session.id)]


def test_search_refuses_an_overlong_query(member: User, tenant: Tenant) -> None:
    response = logged_in(member).get(reverse("chat:session_list"), {"q": "x" * 201})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_query"


# --- a conversation ----------------------------------------------------------------------------


def test_a_conversation_page_carries_its_stored_messages(member: User, tenant: Tenant) -> None:
    session = make_session(
        member,
        tenant,
        "Greetings",
        ("user", "你好"),
        ("assistant", "你好！有什么可以帮你？"),
    )
    Message.objects.create(session=session, role="system", content="never shown")
    interrupted = Message.objects.create(
        session=session,
        role="assistant",
        content="Partial",
        status=Message.Status.INTERRUPTED,
        finish_reason="cancelled",
    )

    response = logged_in(member).get(reverse("chat:conversation", args=[session.id]))

    assert response.status_code == 200
    data = page_data(response)
    assert data["session"] == {
        "id": str(session.id),
        "title": "Greetings",
        "updated_at": session.updated_at.isoformat(),
        "archived": False,
        "pinned": False,
    }
    assert [(m["role"], m["content"]) for m in data["messages"]] == [
        ("user", "你好"),
        ("assistant", "你好！有什么可以帮你？"),
        ("assistant", "Partial"),
    ]
    assert data["messages"][-1]["id"] == interrupted.id
    assert data["messages"][-1]["status"] == "interrupted"


def test_stored_text_cannot_break_out_of_the_page_data(member: User, tenant: Tenant) -> None:
    payload = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"
    session = make_session(member, tenant, payload, ("user", payload), ("assistant", payload))

    response = logged_in(member).get(reverse("chat:conversation", args=[session.id]))

    html = response.content.decode()
    assert "<script>alert(1)" not in html
    assert "<img src=x" not in html
    assert page_data(response)["messages"][0]["content"] == payload


def test_it_rejects_another_users_session(
    member: User, owner: User, outsider: User, tenant: Tenant
) -> None:
    owners = make_session(owner, tenant, "Owner's secrets", ("user", "secret"))
    for user in [member, outsider]:
        client = logged_in(user)
        assert client.get(reverse("chat:conversation", args=[owners.id])).status_code == 404
        assert client.get(reverse("chat:messages", args=[owners.id])).status_code == 404


def archived_session(user: User, tenant: Tenant, title: str = "Old") -> ChatSession:
    session = make_session(
        user, tenant, title, ("user", "old question"), ("assistant", "old answer")
    )
    session.archived = True
    session.save()
    return session


def test_an_archived_session_opens_read_only(member: User, tenant: Tenant) -> None:
    session = archived_session(member, tenant)
    client = logged_in(member)
    response = client.get(reverse("chat:conversation", args=[session.id]))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="archived-bar"' in html
    assert re.search(r'<form class="composer" id="composer"[^>]* hidden>', html)
    data = page_data(response)
    assert data["session"]["archived"] is True
    assert [m["content"] for m in data["messages"]] == ["old question", "old answer"]
    # Read-only: it cannot be renamed or written to until restored.
    assert post_json(client, rename_url(session), {"title": "New"}).status_code == 404


def test_an_archived_session_stays_private(
    member: User, owner: User, outsider: User, tenant: Tenant
) -> None:
    session = archived_session(owner, tenant)
    for user in [member, outsider]:
        client = logged_in(user)
        assert client.get(reverse("chat:conversation", args=[session.id])).status_code == 404
        assert client.post(restore_url(session)).status_code == 404
        assert client.post(delete_url(session)).status_code == 404
    assert Message.objects.filter(session=session).count() == 2


def test_an_archived_session_of_a_tenant_the_user_left_is_404(
    member: User, tenant: Tenant, other_tenant: Tenant
) -> None:
    Membership.objects.create(user=member, tenant=other_tenant)
    session = archived_session(member, other_tenant)
    client = logged_in(member)
    assert client.get(reverse("chat:conversation", args=[session.id])).status_code == 200
    Membership.objects.filter(user=member, tenant=other_tenant).delete()
    assert client.get(reverse("chat:conversation", args=[session.id])).status_code == 404
    assert client.post(restore_url(session)).status_code == 404
    assert client.post(delete_url(session)).status_code == 404
    other_tenant.active = False
    other_tenant.save()
    Membership.objects.create(user=member, tenant=other_tenant)
    assert client.get(reverse("chat:conversation", args=[session.id])).status_code == 404


def test_the_archived_list_shows_only_the_users_archived_sessions(
    member: User, owner: User, tenant: Tenant
) -> None:
    make_session(member, tenant, "Live one")
    mine = archived_session(member, tenant, "Archived one")
    archived_session(owner, tenant, "Owner's archived")
    client = logged_in(member)
    listed = client.get(reverse("chat:session_list"), {"archived": "1"}).json()["sessions"]
    assert [(s["id"], s["title"], s["archived"]) for s in listed] == [
        (str(mine.id), "Archived one", True)
    ]
    found = client.get(reverse("chat:session_list"), {"archived": "1", "q": "old answer"})
    assert [s["id"] for s in found.json()["sessions"]] == [str(mine.id)]
    live = client.get(reverse("chat:session_list")).json()["sessions"]
    assert [s["title"] for s in live] == ["Live one"]


def test_restore_brings_an_archived_session_back(member: User, tenant: Tenant) -> None:
    session = archived_session(member, tenant)
    client = logged_in(member)
    response = client.post(restore_url(session))
    assert response.status_code == 200
    assert response.json()["session"]["archived"] is False
    session.refresh_from_db()
    assert not session.archived
    assert [s.id for s in services_sessions(member, tenant)] == [session.id]


def test_delete_removes_an_archived_session_and_its_messages_for_good(
    member: User, tenant: Tenant
) -> None:
    session = archived_session(member, tenant)
    usage = UsageRecord.objects.create(tenant=tenant, user=member, session=session)
    client = logged_in(member)
    response = client.post(delete_url(session))
    assert response.status_code == 200
    assert response.json() == {"deleted": True, "id": str(session.id), "messages": 2}
    assert not ChatSession.objects.filter(id=session.id).exists()
    assert not Message.objects.filter(session_id=session.id).exists()
    usage.refresh_from_db()  # the tenant's accounting keeps the record, unlinked
    assert usage.session_id is None
    assert client.get(reverse("chat:conversation", args=[session.id])).status_code == 404


def test_a_live_session_is_not_deleted_without_archiving_first(
    member: User, tenant: Tenant
) -> None:
    session = make_session(member, tenant, "Live", ("user", "hi"))
    assert logged_in(member).post(delete_url(session)).status_code == 404
    assert Message.objects.filter(session=session).count() == 1


def test_restore_and_delete_need_a_csrf_token(member: User, tenant: Tenant) -> None:
    session = archived_session(member, tenant)
    client = logged_in(member, enforce_csrf_checks=True)
    assert client.post(restore_url(session)).status_code == 403
    assert client.post(delete_url(session)).status_code == 403
    session.refresh_from_db()
    assert session.archived


def test_the_messages_endpoint_returns_what_is_stored(member: User, tenant: Tenant) -> None:
    session = make_session(member, tenant, "Hi", ("user", "hello"), ("assistant", "hi there"))
    response = logged_in(member).get(reverse("chat:messages", args=[session.id]))
    assert response.status_code == 200
    body = response.json()
    assert body["session"]["title"] == "Hi"
    assert [m["content"] for m in body["messages"]] == ["hello", "hi there"]
    assert set(body["messages"][0]) == {
        "id",
        "role",
        "content",
        "status",
        "finish_reason",
        "served_from_cache",
        "model",  # the model that wrote a reply (issue #36); "" for a question
        "error",
        "prompt_tokens",
        "completion_tokens",
        "ttft_ms",
        "created_at",
        "versions",
        "grounding",  # the user's question: whether documents answered it (company knowledge)
    }
    # A reply lists the sources its question was given: none without company knowledge.
    assert body["messages"][1]["sources"] == []


def test_chat_pages_forbid_inline_script(member: User, tenant: Tenant) -> None:
    session = make_session(member, tenant, "Hi")
    client = logged_in(member)
    for url in ["/", reverse("chat:conversation", args=[session.id])]:
        response = client.get(url)
        policy = response["Content-Security-Policy"]
        assert "script-src 'self'" in policy
        assert "unsafe-inline" not in policy
        assert "object-src 'none'" in policy
        for tag in re.findall(r"<script[^>]*>", response.content.decode()):
            assert " src=" in tag or 'type="application/json"' in tag, tag


# --- rename ------------------------------------------------------------------------------------


def test_rename_changes_the_title(member: User, tenant: Tenant) -> None:
    session = make_session(member, tenant, "Old title")
    response = post_json(logged_in(member), rename_url(session), {"title": "  季度报告  "})
    assert response.status_code == 200
    assert response.json()["session"]["title"] == "季度报告"
    session.refresh_from_db()
    assert session.title == "季度报告"


def test_rename_accepts_a_form_post(member: User, tenant: Tenant) -> None:
    session = make_session(member, tenant, "Old title")
    response = logged_in(member).post(rename_url(session), {"title": "From a form"})
    assert response.status_code == 200
    session.refresh_from_db()
    assert session.title == "From a form"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"title": ""}, "invalid_title"),
        ({"title": "   "}, "invalid_title"),
        ({"title": "x" * 201}, "invalid_title"),
        ({"title": 42}, "invalid_title"),
        ({}, "invalid_title"),
        (["not", "an", "object"], "bad_json"),
    ],
)
def test_rename_refuses_bad_input_and_keeps_the_title(
    member: User, tenant: Tenant, body: Any, code: str
) -> None:
    session = make_session(member, tenant, "Keep me", ("user", "hello"))
    response = post_json(logged_in(member), rename_url(session), body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["message"]
    session.refresh_from_db()
    assert session.title == "Keep me"
    assert session.messages.count() == 1


def test_rename_refuses_malformed_json(member: User, tenant: Tenant) -> None:
    session = make_session(member, tenant, "Keep me")
    response = logged_in(member).post(
        rename_url(session), "{not json", content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_json"
    session.refresh_from_db()
    assert session.title == "Keep me"


def test_rename_of_another_users_session_is_404(member: User, owner: User, tenant: Tenant) -> None:
    owners = make_session(owner, tenant, "Owner's")
    response = post_json(logged_in(member), rename_url(owners), {"title": "Mine now"})
    assert response.status_code == 404
    owners.refresh_from_db()
    assert owners.title == "Owner's"


def test_rename_needs_a_post(member: User, tenant: Tenant) -> None:
    session = make_session(member, tenant, "Old")
    assert logged_in(member).get(rename_url(session)).status_code == 405


def test_rename_needs_a_csrf_token(member: User, tenant: Tenant) -> None:
    session = make_session(member, tenant, "Old")
    client = logged_in(member, enforce_csrf_checks=True)
    assert post_json(client, rename_url(session), {"title": "New"}).status_code == 403
    session.refresh_from_db()
    assert session.title == "Old"


# --- archive -----------------------------------------------------------------------------------


def test_archive_hides_the_session_and_keeps_its_messages(member: User, tenant: Tenant) -> None:
    session = make_session(member, tenant, "Done with this", ("user", "hi"))
    client = logged_in(member)

    response = client.post(archive_url(session))

    assert response.status_code == 200
    assert response.json() == {"archived": True, "id": str(session.id)}
    session.refresh_from_db()
    assert session.archived
    assert session.messages.count() == 1
    assert client.get(reverse("chat:session_list")).json()["sessions"] == []


def test_archive_of_another_users_session_is_404(member: User, owner: User, tenant: Tenant) -> None:
    owners = make_session(owner, tenant, "Owner's")
    assert logged_in(member).post(archive_url(owners)).status_code == 404
    owners.refresh_from_db()
    assert not owners.archived


def test_archive_needs_a_csrf_token(member: User, tenant: Tenant) -> None:
    session = make_session(member, tenant, "Old")
    client = logged_in(member, enforce_csrf_checks=True)
    assert client.post(archive_url(session)).status_code == 403
    session.refresh_from_db()
    assert not session.archived


# --- tenants -----------------------------------------------------------------------------------


@pytest.fixture
def two_tenant_member(member: User, other_tenant: Tenant) -> User:
    Membership.objects.create(user=member, tenant=other_tenant)
    return member


def test_tenant_switch_changes_the_working_tenant(
    two_tenant_member: User, tenant: Tenant, other_tenant: Tenant
) -> None:
    make_session(two_tenant_member, tenant, "An Acme chat")
    globex = make_session(two_tenant_member, other_tenant, "A Globex chat")
    client = logged_in(two_tenant_member)
    assert client.get("/").context["tenant"] == tenant

    response = client.post(reverse("chat:tenant_switch"), {"tenant": "globex"})

    assert response.status_code == 302
    assert client.session["tenant"] == "globex"
    page = client.get("/")
    assert page.context["tenant"] == other_tenant
    assert list(page.context["sessions"]) == [globex]


def test_tenant_switch_refuses_a_tenant_the_user_is_not_in(
    member: User, tenant: Tenant, other_tenant: Tenant
) -> None:
    client = logged_in(member)
    client.get("/")
    response = client.post(reverse("chat:tenant_switch"), {"tenant": "globex"})
    assert response.status_code == 404
    assert client.session.get("tenant") == "acme"


def test_tenant_switch_refuses_an_inactive_tenant(
    two_tenant_member: User, other_tenant: Tenant
) -> None:
    other_tenant.active = False
    other_tenant.save()
    client = logged_in(two_tenant_member)
    assert client.post(reverse("chat:tenant_switch"), {"tenant": "globex"}).status_code == 404
    assert client.session.get("tenant") != "globex"


def test_tenant_switch_needs_a_tenant_and_a_post(member: User) -> None:
    client = logged_in(member)
    assert client.post(reverse("chat:tenant_switch"), {}).status_code == 400
    assert client.get(reverse("chat:tenant_switch")).status_code == 405


def test_the_switcher_shows_only_for_several_tenants(two_tenant_member: User, owner: User) -> None:
    assert b'id="tenant-select"' in logged_in(two_tenant_member).get("/").content
    assert b'id="tenant-select"' not in logged_in(owner).get("/").content


def test_opening_a_chat_of_the_users_other_tenant_switches_to_it(
    two_tenant_member: User, other_tenant: Tenant
) -> None:
    globex = make_session(two_tenant_member, other_tenant, "A Globex chat")
    client = logged_in(two_tenant_member)
    client.get("/")
    assert client.session["tenant"] == "acme"

    response = client.get(reverse("chat:conversation", args=[globex.id]))

    assert response.status_code == 200
    assert client.session["tenant"] == "globex"


def test_a_chat_of_a_tenant_the_user_has_left_is_404(
    two_tenant_member: User, other_tenant: Tenant
) -> None:
    globex = make_session(two_tenant_member, other_tenant, "A Globex chat")
    Membership.objects.filter(user=two_tenant_member, tenant=other_tenant).delete()
    response = logged_in(two_tenant_member).get(reverse("chat:conversation", args=[globex.id]))
    assert response.status_code == 404


def test_a_stale_tenant_in_the_session_falls_back_to_the_users_first(
    two_tenant_member: User, tenant: Tenant, other_tenant: Tenant
) -> None:
    client = logged_in(two_tenant_member)
    client.post(reverse("chat:tenant_switch"), {"tenant": "globex"})
    Membership.objects.filter(user=two_tenant_member, tenant=other_tenant).delete()

    response = client.get("/")

    assert response.context["tenant"] == tenant
    assert client.session["tenant"] == "acme"


def test_switching_a_version_answers_with_the_branch_now_shown(
    member: User, tenant: Tenant
) -> None:
    from chat.services.replies import reply_finish
    from chat.services.turns import message_regenerate, message_send

    first = message_send(user=member, tenant=tenant, session_id=None, content="one")
    reply_finish(reply_id=first.reply.id, content="A1", finish_reason="stop")
    again = message_regenerate(user=member, tenant=tenant, session_id=first.session.id)
    reply_finish(reply_id=again.reply.id, content="A2", finish_reason="stop")
    client = logged_in(member)
    url = reverse("chat:session_branch", args=[first.session.id])

    response = post_json(client, url, {"message": first.reply.id})

    assert response.status_code == 200
    messages = response.json()["messages"]
    assert [m["content"] for m in messages] == ["one", "A1"]
    assert messages[1]["versions"] == [first.reply.id, again.reply.id]
    page = page_data(client.get(reverse("chat:conversation", args=[first.session.id])))
    assert [m["content"] for m in page["messages"]] == ["one", "A1"]
    assert post_json(client, url, {"message": "x"}).status_code == 400
    assert post_json(logged_in(member), url, {}).json()["error"]["code"] == "not_found"


def test_another_users_session_cannot_be_switched(
    member: User, owner: User, tenant: Tenant
) -> None:
    from chat.services.turns import message_send

    theirs = message_send(user=owner, tenant=tenant, session_id=None, content="s")
    url = reverse("chat:session_branch", args=[theirs.session.id])
    assert post_json(logged_in(member), url, {"message": theirs.reply.id}).status_code == 404


# --- room left while typing ------------------------------------------------------------------


def measure(client: Client, content: Any, session: ChatSession | None = None) -> Any:
    body = {"content": content, "session": str(session.id) if session else None}
    return post_json(client, reverse("chat:draft_measure"), body)


def test_the_counter_knows_the_conversation_so_far(
    member: User, tenant: Tenant, fake_prompt_counter: Any
) -> None:
    from inference.types import ChatMessage

    session = make_session(member, tenant, "Hi", ("user", "hello"), ("assistant", "hi there"))
    client = logged_in(member)

    alone = measure(client, "and now?").json()
    with_history = measure(client, "and now?", session).json()

    assert alone["tokens"] == fake_prompt_counter.count([ChatMessage("user", "and now?")])
    assert with_history["tokens"] == fake_prompt_counter.count(
        [
            ChatMessage("user", "hello"),
            ChatMessage("assistant", "hi there"),
            ChatMessage("user", "and now?"),
        ]
    )
    assert with_history["token_limit"] == fake_prompt_counter.max_seq_tokens
    assert with_history["fits"] is True
    assert with_history["message_chars"] == len("and now?")


def test_a_message_too_long_only_with_the_history_can_go_to_a_new_conversation(
    member: User, tenant: Tenant, fake_prompt_counter: Any
) -> None:
    limit = fake_prompt_counter.max_seq_tokens
    history = ("assistant", "x" * (limit - 100))
    session = make_session(member, tenant, "Long", ("user", "go"), history)
    body = measure(logged_in(member), "y" * 200, session).json()
    assert body["tokens"] > limit
    assert (body["fits"], body["fits_alone"]) == (False, True)


def test_a_message_too_long_on_its_own_fits_nowhere(
    member: User, tenant: Tenant, fake_prompt_counter: Any
) -> None:
    body = measure(logged_in(member), "z" * (fake_prompt_counter.max_seq_tokens + 10)).json()
    assert (body["fits"], body["fits_alone"]) == (False, False)


def test_a_message_over_the_character_limit_is_not_even_counted(
    member: User, tenant: Tenant
) -> None:
    body = measure(logged_in(member), "w" * 40_000).json()
    assert body["message_chars"] == 40_000
    assert body["message_char_limit"] == 32_000
    assert body["fits"] is False


def test_the_counter_refuses_bad_input_and_other_peoples_sessions(
    member: User, owner: User, tenant: Tenant
) -> None:
    client = logged_in(member)
    assert measure(client, 42).status_code == 400
    owners = make_session(owner, tenant, "Owner's", ("user", "secret"))
    assert measure(client, "hi", owners).status_code == 404
    assert post_json(Client(), reverse("chat:draft_measure"), {"content": "x"}).status_code == 401


def test_the_counter_says_so_when_the_model_is_not_installed(
    member: User, tenant: Tenant, monkeypatch: Any
) -> None:
    from chat import admission

    def missing(model: str = "") -> None:
        raise FileNotFoundError("models/x.gguf")

    monkeypatch.setattr(admission, "get_prompt_counter", missing)
    response = measure(logged_in(member), "hello")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "worker_down"
