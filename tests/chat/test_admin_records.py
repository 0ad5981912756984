"""A record of what was said is read-only in the admin, for everyone: no message or
conversation is added or edited there, and a conversation is deleted only as the chat itself
allows (chat.services.sessions.session_delete: archived, no reply being written); a message only
with its conversation."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from chat.models import ChatSession, Message
from tenants.models import Tenant

pytestmark = pytest.mark.django_db


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def conversation(tenant: Tenant, member: User) -> ChatSession:
    session = ChatSession.objects.create(tenant=tenant, user=member, title="Hello")
    question = Message.objects.create(session=session, role="user", content="Hi")
    Message.objects.create(
        session=session,
        parent=question,
        role="assistant",
        content="Hello!",
        prompt_tokens=5,
        completion_tokens=2,
    )
    return session


@pytest.fixture(params=["superuser", "tenant admin"])
def staff(request, admin_user, tenant_admin) -> Client:
    return client_for(admin_user if request.param == "superuser" else tenant_admin)


def test_a_message_page_has_nothing_to_edit_or_save(staff, conversation):
    message = conversation.messages.get(role="assistant")
    url = reverse("admin:chat_message_change", args=[message.pk])
    page = staff.get(url)
    assert page.status_code == 200
    assert page.context["adminform"].form.fields == {}
    html = page.content.decode()
    for button in ('name="_save"', 'name="_continue"', 'name="_addanother"', "deletelink"):
        assert button not in html


def test_a_forged_edit_of_a_message_is_refused(staff, conversation):
    message = conversation.messages.get(role="assistant")
    response = staff.post(
        reverse("admin:chat_message_change", args=[message.pk]),
        {
            "content": "I never said that",
            "status": "complete",
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "parent": "",
            "role": "assistant",
        },
    )
    assert response.status_code == 403
    message.refresh_from_db()
    assert (message.content, message.prompt_tokens, message.completion_tokens) == ("Hello!", 5, 2)
    assert message.parent is not None


def test_nobody_adds_or_deletes_a_single_message(staff, conversation):
    message = conversation.messages.get(role="user")
    assert staff.get(reverse("admin:chat_message_add")).status_code == 403
    assert staff.get(reverse("admin:chat_chatsession_add")).status_code == 403
    response = staff.post(reverse("admin:chat_message_delete", args=[message.pk]), {"post": "yes"})
    assert response.status_code == 403
    listing = staff.get(reverse("admin:chat_message_changelist")).content.decode()
    assert "delete_selected" not in listing
    assert Message.objects.count() == 2


def test_a_conversation_page_has_nothing_to_edit_or_save(staff, conversation):
    url = reverse("admin:chat_chatsession_change", args=[conversation.pk])
    page = staff.get(url)
    assert page.context["adminform"].form.fields == {}
    assert 'name="_save"' not in page.content.decode()
    response = staff.post(url, {"archived": "on", "title": "renamed", "user": ""})
    assert response.status_code == 403
    conversation.refresh_from_db()
    assert (conversation.title, conversation.archived) == ("Hello", False)


def test_a_live_conversation_is_not_deleted_but_told_why(staff, conversation):
    response = staff.post(
        reverse("admin:chat_chatsession_delete", args=[conversation.pk]),
        {"post": "yes"},
        follow=True,
    )
    assert "Only an archived conversation can be deleted" in response.content.decode()
    assert ChatSession.objects.filter(pk=conversation.pk).exists()


def test_an_archived_conversation_is_deleted_with_its_messages(staff, conversation):
    conversation.archived = True
    conversation.save()
    url = reverse("admin:chat_chatsession_delete", args=[conversation.pk])
    confirm = staff.get(url)
    assert confirm.status_code == 200
    assert "Are you sure" in confirm.content.decode()
    staff.post(url, {"post": "yes"})
    assert not ChatSession.objects.exists()
    assert not Message.objects.exists()


def test_after_deleting_a_conversation_staff_land_on_the_conversations_list(staff, conversation):
    conversation.archived = True
    conversation.save()
    url = reverse("admin:chat_chatsession_delete", args=[conversation.pk])
    response = staff.post(url, {"post": "yes"})
    assert response["Location"] == reverse("admin:chat_chatsession_changelist")


def test_a_conversation_page_says_in_words_whether_it_is_archived(staff, conversation):
    # Issue #31: a red ✖ beside "Archived by its owner…" on one that is not archived.
    url = reverse("admin:chat_chatsession_change", args=[conversation.pk])
    page = staff.get(url).content.decode()
    assert "Archived by its owner" not in page
    shown = re.search(r'field-archived_state.*?<div class="readonly">(.*?)</div>', page, re.S)
    assert shown is not None
    assert shown.group(1) == "No"  # not the stock ✖ icon
    conversation.archived = True
    conversation.save()
    page = staff.get(url).content.decode()
    assert "Yes: archived by its owner, read-only until restored or deleted" in page


def test_the_admin_writes_dates_in_iso_8601(staff, conversation):
    ChatSession.objects.filter(pk=conversation.pk).update(
        updated_at=timezone.make_aware(datetime(2026, 11, 5, 14, 7))
    )
    page = staff.get(reverse("admin:chat_chatsession_changelist")).content.decode()
    assert "2026-11-05 14:07" in page
    assert "Nov. 5, 2026" not in page


def test_a_conversation_whose_reply_is_being_written_is_not_deleted(staff, conversation):
    conversation.archived = True
    conversation.save()
    Message.objects.filter(session=conversation, role="assistant").update(
        status=Message.Status.STREAMING, updated_at=timezone.now()
    )
    response = staff.post(
        reverse("admin:chat_chatsession_delete", args=[conversation.pk]),
        {"post": "yes"},
        follow=True,
    )
    assert "A reply is still being written" in response.content.decode()
    assert ChatSession.objects.filter(pk=conversation.pk).exists()


def test_the_bulk_action_deletes_only_archived_conversations(
    admin_client, conversation, tenant, member
):
    archived = ChatSession.objects.create(tenant=tenant, user=member, archived=True)
    Message.objects.create(session=archived, role="user", content="old")
    url = reverse("admin:chat_chatsession_changelist")
    listing = admin_client.get(url).content.decode()
    assert "delete_archived" in listing
    assert "delete_selected" not in listing
    selected = {"action": "delete_archived", "_selected_action": [conversation.pk, archived.pk]}
    confirm = admin_client.post(url, selected)
    page = confirm.content.decode()
    assert "Are you sure" in page
    assert str(archived) in page
    assert str(conversation) not in page.split("Summary")[-1]
    done = admin_client.post(url, {**selected, "post": "yes"}, follow=True)
    assert done.status_code == 200
    assert list(ChatSession.objects.all()) == [conversation]
    assert Message.objects.filter(session=conversation).count() == 2


def test_another_tenants_staff_cannot_delete_it(other_admin, conversation):
    conversation.archived = True
    conversation.save()
    client_for(other_admin).post(
        reverse("admin:chat_chatsession_delete", args=[conversation.pk]), {"post": "yes"}
    )
    assert ChatSession.objects.filter(pk=conversation.pk).exists()
