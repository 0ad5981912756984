"""Feedback on replies: given and changed in the chat, one per person per version, refused
where it does not belong; REST feedback for a completion; the counts on the usage pages."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from chat.models import ChatSession, Message
from chat.services.api import api_turn_start
from chat.services.replies import reply_finish
from chat.services.sessions import session_archive
from chat.services.turns import message_regenerate, message_send
from feedback.models import Feedback
from feedback.services import check_rating, feedback_counts
from tests.chat.test_views import logged_in, page_data

pytestmark = pytest.mark.django_db


def answered(user, tenant, question="How do I reach the VPN?", answer="Use NorthGate."):
    turn = message_send(user=user, tenant=tenant, session_id=None, content=question)
    reply_finish(reply_id=turn.reply.id, content=answer, finish_reason="stop")
    return turn


def url(reply_id):
    return reverse("feedback:reply_feedback", args=[reply_id])


def rate(client, reply_id, **body):
    return client.post(url(reply_id), json.dumps(body), content_type="application/json")


def test_a_member_rates_a_reply_and_changes_their_mind(member, tenant):
    turn = answered(member, tenant)
    client = logged_in(member)

    up = rate(client, turn.reply.id, rating="up")
    assert up.status_code == 200
    assert up.json()["feedback"]["rating"] == "up"

    down = rate(client, turn.reply.id, rating="down", reason="outdated", comment="  Old policy. ")
    assert down.json()["feedback"] == {
        "rating": "down",
        "reason": "outdated",
        "comment": "Old policy.",
        "updated_at": down.json()["feedback"]["updated_at"],
    }
    assert Feedback.objects.count() == 1  # changed, not added
    row = Feedback.objects.get()
    assert (row.rating, row.reason, row.user, row.tenant) == ("down", "outdated", member, tenant)

    cleared = rate(client, turn.reply.id, rating=None)
    assert cleared.json() == {"feedback": None}
    assert not Feedback.objects.exists()


def test_each_version_of_a_reply_has_its_own_rating_and_the_page_shows_them(member, tenant):
    turn = answered(member, tenant)
    again = message_regenerate(user=member, tenant=tenant, session_id=turn.session.id)
    reply_finish(reply_id=again.reply.id, content="Ask the desk.", finish_reason="stop")
    client = logged_in(member)
    rate(client, turn.reply.id, rating="down", reason="wrong")
    rate(client, again.reply.id, rating="up")

    shown = page_data(client.get(reverse("chat:conversation", args=[turn.session.id])))
    reply = shown["messages"][-1]
    assert reply["id"] == again.reply.id
    assert reply["feedback"]["rating"] == "up"
    flipped = client.post(
        reverse("chat:session_branch", args=[turn.session.id]),
        json.dumps({"message": turn.reply.id}),
        content_type="application/json",
    ).json()
    assert flipped["messages"][-1]["feedback"]["reason"] == "wrong"
    assert Feedback.objects.count() == 2


def test_two_colleagues_ratings_do_not_touch_each_other(member, owner, tenant):
    turn = answered(member, tenant)
    rate(logged_in(member), turn.reply.id, rating="up")
    # owner cannot rate a reply in member's conversation: it is not theirs to see.
    response = rate(logged_in(owner), turn.reply.id, rating="down")
    assert response.status_code == 404
    assert list(Feedback.objects.values_list("rating", flat=True)) == ["up"]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"rating": "meh"}, "invalid_rating"),
        ({"rating": "down", "reason": "ugly"}, "invalid_reason"),
        ({"rating": "up", "reason": "wrong"}, "invalid_reason"),
        ({"rating": "down", "comment": "x" * 501}, "invalid_comment"),
        ({"rating": "down", "comment": 7}, "invalid_comment"),
        ({"rating": "down", "comment": "a\x00b"}, "invalid_comment"),
    ],
)
def test_bad_feedback_is_a_clear_400_and_stores_nothing(member, tenant, body, code):
    turn = answered(member, tenant)
    response = rate(logged_in(member), turn.reply.id, **body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert not Feedback.objects.exists()


def test_a_question_a_reply_being_written_or_an_archived_conversation_cannot_be_rated(
    member, tenant
):
    client = logged_in(member)
    turn = message_send(user=member, tenant=tenant, session_id=None, content="Hi")
    streaming = rate(client, turn.reply.id, rating="up")
    assert streaming.status_code == 400
    assert streaming.json()["error"]["code"] == "reply_not_finished"
    assert rate(client, turn.user_message.id, rating="up").status_code == 404
    reply_finish(reply_id=turn.reply.id, content="Hello", finish_reason="stop")
    session_archive(session=turn.session)
    assert rate(client, turn.reply.id, rating="up").status_code == 404
    assert rate(client, 10_000_000, rating="up").status_code == 404
    assert not Feedback.objects.exists()


def test_feedback_needs_a_login_and_the_csrf_token(member, tenant):
    turn = answered(member, tenant)
    assert rate(Client(), turn.reply.id, rating="up").status_code == 401
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(member)
    assert rate(strict, turn.reply.id, rating="up").status_code == 403
    assert not Feedback.objects.exists()


def test_the_usage_counts_are_of_the_range_and_the_tenant(member, tenant, other_tenant, outsider):
    mine = answered(member, tenant)
    theirs = answered(outsider, other_tenant)
    rate(logged_in(member), mine.reply.id, rating="down", reason="wrong")
    rate(logged_in(outsider), theirs.reply.id, rating="up")
    today = timezone.localdate()
    counts = feedback_counts(
        tenants=type(tenant).objects.filter(pk=tenant.pk), start=today, end=today
    )
    assert (counts.up, counts.down, counts.reasons) == (0, 1, {"wrong": 1})
    assert counts.reason_list == [("Wrong", 1)]
    yesterday = today - timedelta(days=1)
    assert feedback_counts(tenants=None, start=yesterday, end=yesterday).total == 0
    assert feedback_counts(tenants=None, start=today, end=today).total == 2
    assert feedback_counts(tenants=None, start=today, end=today, user_id=outsider.pk).up == 1


def test_the_usage_page_shows_the_counts(tenant_admin, member, tenant):
    turn = answered(member, tenant)
    rate(logged_in(member), turn.reply.id, rating="down", reason="not_helpful")
    page = logged_in(tenant_admin).get(reverse("admin:tenants_tenant_usage", args=[tenant.pk]))
    html = page.content.decode()
    assert '<span id="feedback-down">1</span>' in html
    assert '<span id="feedback-up">0</span>' in html
    assert "Not helpful 1" in html


def test_check_rating_keeps_an_empty_reason_for_up():
    assert check_rating(rating="up", reason=None, comment=None).reason == ""


# --- REST ------------------------------------------------------------------------------------


def completion(tenant, api_key):
    from inference.types import ChatMessage

    turn = api_turn_start(
        tenant=tenant, api_key_id=api_key.pk, messages=[ChatMessage("user", "Ping?")]
    )
    reply_finish(reply_id=turn.reply.id, content="Pong.", finish_reason="stop")
    return f"chatcmpl-{turn.session.id}", turn


def api_post(client, path, key, body):
    return client.post(
        path,
        json.dumps(body) if not isinstance(body, bytes) else body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )


@pytest.mark.django_db(transaction=True)
def test_an_integration_rates_a_completion_and_rates_it_again(tenant, api_key):
    key, raw = api_key
    completion_id, turn = completion(tenant, key)
    path = f"/v1/chat/completions/{completion_id}/feedback"
    client = Client()
    first = api_post(client, path, raw, {"rating": "down", "reason": "wrong", "comment": "No."})
    assert first.status_code == 200, first.content
    body = first.json()
    assert body["object"] == "chat.completion.feedback"
    assert (body["completion_id"], body["rating"], body["reason"]) == (
        completion_id,
        "down",
        "wrong",
    )
    second = api_post(client, path, raw, {"rating": "up"})
    assert second.json()["rating"] == "up"
    row = Feedback.objects.get()
    assert (row.message_id, row.user, row.api_key_id) == (turn.reply.id, None, key.pk)


@pytest.mark.django_db(transaction=True)
def test_rest_feedback_refuses_bad_bodies_and_others_completions(
    tenant, api_key, other_tenant, member
):
    from tenants.services import api_key_create

    key, raw = api_key
    completion_id, _ = completion(tenant, key)
    path = f"/v1/chat/completions/{completion_id}/feedback"
    client = Client()
    bad = api_post(client, path, raw, {"rating": "sideways"})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "rating"
    extra = api_post(client, path, raw, {"rating": "up", "stars": 5})
    assert extra.json()["error"]["code"] == "unknown_parameter"
    with_reason = api_post(client, path, raw, {"rating": "up", "reason": "wrong"})
    assert with_reason.json()["error"]["code"] == "invalid_reason"
    assert api_post(client, path, raw, b"[1]").status_code == 400
    _, other_raw = api_key_create(tenant=other_tenant, name="theirs")
    assert api_post(client, path, other_raw, {"rating": "up"}).status_code == 404
    assert api_post(client, path, "nope", {"rating": "up"}).status_code == 401
    # A browser conversation is no completion.
    browser = ChatSession.objects.create(tenant=tenant, user=member)
    Message.objects.create(session=browser, role="assistant", content="x")
    assert (
        api_post(
            client, f"/v1/chat/completions/chatcmpl-{browser.id}/feedback", raw, {"rating": "up"}
        ).status_code
        == 404
    )
    assert not Feedback.objects.exists()


def test_the_openapi_document_describes_the_feedback_endpoint(client):
    document = client.get("/v1/openapi.json").json()
    operation = document["paths"]["/v1/chat/completions/{completion_id}/feedback"]["post"]
    assert operation["operationId"] == "createChatCompletionFeedback"
    assert "FeedbackCreate" in document["components"]["schemas"]
    assert set(operation["responses"]) >= {"200", "400", "401", "404"}
