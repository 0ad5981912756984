"""The feedback page in the admin: worst-rated questions, best-rated answers and their
promotion to a cached reply, questions the documents did not answer; what a tenant admin sees
of their texts with and without the content audit, and what is logged."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from chat.cached_replies import candidate_record
from chat.models import CachedReply, ContentRead, Message
from chat.services.replies import reply_finish
from chat.services.turns import message_send
from feedback.models import Feedback
from tests.chat.test_views import logged_in

pytestmark = pytest.mark.django_db

REPORT = reverse("admin:feedback_feedback_report")


def answered(user, tenant, question, answer):
    turn = message_send(user=user, tenant=tenant, session_id=None, content=question)
    reply_finish(reply_id=turn.reply.id, content=answer, finish_reason="stop")
    return turn


def rated(user, tenant, question, answer, rating, reason=""):
    turn = answered(user, tenant, question, answer)
    Feedback.objects.create(
        message=turn.reply, tenant=tenant, user=user, rating=rating, reason=reason
    )
    return turn


def people(tenant, n):
    from tenants.models import Membership

    users = []
    for i in range(n):
        user = User.objects.create_user(f"person{i}", password="x")
        Membership.objects.create(user=user, tenant=tenant)
        users.append(user)
    return users


def report_of(client):
    response = client.get(REPORT)
    assert response.status_code == 200
    return response.context["report"], response.content.decode()


def test_a_common_first_question_rated_down_is_shown_and_a_rare_one_is_not(
    tenant_admin, tenant, settings
):
    settings.QASSIST_CANDIDATE_MIN_COUNT = 2
    a, b, c = people(tenant, 3)
    # Asked twice as a first question: a candidate, listed in its wording already.
    rated(a, tenant, "Where is the VPN guide?", "Nowhere.", "down", "wrong")
    rated(b, tenant, "where is the VPN guide", "Ask IT.", "down", "outdated")
    # Asked once: could be one person's words.
    rated(c, tenant, "Is my manager Dave leaving?", "Maybe.", "down", "not_helpful")

    report, html = report_of(logged_in(tenant_admin))
    shown = {row.question: row for row in report.worst}
    common = shown["where is the VPN guide"]  # the candidates' latest wording
    assert (common.down, common.up, common.reasons) == (2, 0, {"wrong": 1, "outdated": 1})
    assert None in shown
    assert "Dave" not in html
    assert "asked fewer than 2 times" in html
    assert not ContentRead.objects.exists()  # nothing read under an audit
    assert 'id="audit-reading"' not in html


def test_under_the_content_audit_every_text_is_shown_and_each_reading_logged(
    tenant_admin, tenant, member
):
    tenant.content_audit = True
    tenant.save()
    turn = rated(member, tenant, "Is my manager Dave leaving?", "Maybe.", "down", "wrong")
    follow = message_send(
        user=member, tenant=tenant, session_id=turn.session.id, content="And Erin?"
    )
    reply_finish(reply_id=follow.reply.id, content="No idea.", finish_reason="stop")
    Feedback.objects.create(message=follow.reply, tenant=tenant, user=member, rating="down")

    report, html = report_of(logged_in(tenant_admin))
    assert {row.question for row in report.worst} == {"Is my manager Dave leaving?", "And Erin?"}
    assert 'id="audit-reading"' in html  # the page says its texts are logged as readings
    reads = ContentRead.objects.filter(reader=tenant_admin, kind=ContentRead.Kind.MESSAGE)
    assert set(reads.values_list("message_id", flat=True)) == {
        turn.user_message.id,
        follow.user_message.id,
    }
    assert set(reads.values_list("owner_name", flat=True)) == {"member"}


def test_a_follow_up_question_is_not_shown_without_the_audit(tenant_admin, tenant, member):
    candidate_record(tenant=tenant, question="And Erin?", answer="x")
    candidate_record(tenant=tenant, question="And Erin?", answer="x")
    first = answered(member, tenant, "Is Dave leaving?", "Maybe.")
    follow = message_send(
        user=member, tenant=tenant, session_id=first.session.id, content="And Erin?"
    )
    reply_finish(reply_id=follow.reply.id, content="No idea.", finish_reason="stop")
    Feedback.objects.create(message=follow.reply, tenant=tenant, user=member, rating="down")

    report, html = report_of(logged_in(tenant_admin))
    assert [row.question for row in report.worst] == [None]
    assert "a follow-up question" in html
    assert "Erin" not in html


def test_a_well_rated_answer_becomes_a_disabled_cached_reply_in_one_click(
    tenant_admin, tenant, settings
):
    settings.QASSIST_CANDIDATE_MIN_COUNT = 2
    a, b = people(tenant, 2)
    good = rated(a, tenant, "How do I book a room?", "Use the Rooms app.", "up")
    rated(b, tenant, "how do I book a room", "Ask reception.", "down", "wrong")
    client = logged_in(tenant_admin)

    report, html = report_of(client)
    (row,) = report.best
    assert (row.question, row.answer, row.reply_id) == (
        "how do I book a room",
        "Use the Rooms app.",
        good.reply.id,
    )
    promote = reverse("admin:feedback_feedback_promote", args=[good.reply.id])
    assert promote in html

    response = client.post(promote)
    reply = CachedReply.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:chat_cachedreply_change", args=[reply.pk])
    assert (reply.tenant, reply.answer, reply.enabled, reply.created_by) == (
        tenant,
        "Use the Rooms app.",
        False,
        tenant_admin,
    )
    assert reply.question == "how do I book a room"
    # Made once: the page now links to it, and a second click makes no other.
    report, html = report_of(client)
    assert report.best[0].cached_reply == reply
    client.post(promote)
    assert CachedReply.objects.count() == 1
    # The candidate knows it was promoted, as when promoted from the candidates list.
    from chat.models import CachedReplyCandidate

    assert CachedReplyCandidate.objects.get(tenant=tenant).promoted_to == reply


def test_an_answer_the_admin_may_not_read_cannot_be_made_a_cached_reply(
    tenant_admin, tenant, member, settings
):
    settings.QASSIST_CANDIDATE_MIN_COUNT = 2
    rare = rated(member, tenant, "Is Dave leaving?", "He is, in May.", "up")
    client = logged_in(tenant_admin)
    report, html = report_of(client)
    assert report.best[0].answer is None
    assert "He is, in May" not in html
    assert (
        client.post(reverse("admin:feedback_feedback_promote", args=[rare.reply.id])).status_code
        == 404
    )
    assert not CachedReply.objects.exists()


def test_an_answer_from_a_conversation_with_attached_files_stays_private(
    tenant_admin, tenant, settings
):
    from knowledge.models import Document

    settings.QASSIST_CANDIDATE_MIN_COUNT = 2
    a, b = people(tenant, 2)
    turn = rated(a, tenant, "Summarise this", "Salary of Bob: 90k.", "up")
    rated(b, tenant, "summarise this", "Sure.", "down")
    Document.objects.create(
        tenant=tenant, session=turn.session, title="payroll", filename="p.txt", kind="text", size=1
    )
    client = logged_in(tenant_admin)
    report, html = report_of(client)
    assert report.best[0].question == "summarise this"
    assert report.best[0].answer is None
    assert "90k" not in html
    assert "files were attached" in html
    promote = reverse("admin:feedback_feedback_promote", args=[turn.reply.id])
    assert client.post(promote).status_code == 404


def test_another_tenants_feedback_is_nowhere_for_a_tenant_admin(
    tenant_admin, other_admin, tenant, other_tenant, settings
):
    settings.QASSIST_CANDIDATE_MIN_COUNT = 1
    turn = rated(other_admin, other_tenant, "Globex secret plan?", "World domination.", "up")
    client = logged_in(tenant_admin)
    report, html = report_of(client)
    assert report.best == []
    assert report.worst == []
    assert "Globex" not in html
    promote = reverse("admin:feedback_feedback_promote", args=[turn.reply.id])
    assert client.post(promote).status_code == 404
    listing = client.get(reverse("admin:feedback_feedback_changelist"))
    assert listing.status_code == 200
    assert list(listing.context["cl"].result_list) == []
    row = Feedback.objects.get()
    assert client.get(reverse("admin:feedback_feedback_change", args=[row.pk])).status_code in (
        302,
        404,
    )


def test_questions_the_documents_did_not_answer_are_counted(tenant_admin, tenant, settings):
    settings.QASSIST_CANDIDATE_MIN_COUNT = 2
    a, b, c = people(tenant, 3)
    for user, text in ((a, "Parking rules?"), (b, "parking rules"), (c, "Dave's salary?")):
        turn = answered(user, tenant, text, "The documents say nothing.")
        Message.objects.filter(id=turn.user_message.id).update(grounding="none_found")
    report, html = report_of(logged_in(tenant_admin))
    assert [(r.question, r.asked) for r in report.unanswered] == [
        ("parking rules", 2),
        (None, 1),
    ]
    assert "Dave" not in html


def test_a_comment_shows_only_under_the_audit_and_its_reading_is_logged(
    tenant_admin, tenant, member
):
    turn = rated(member, tenant, "Q?", "A.", "down", "wrong")
    Feedback.objects.update(comment="My boss Dave wrote this policy.")
    row = Feedback.objects.get()
    client = logged_in(tenant_admin)
    page = client.get(reverse("admin:feedback_feedback_change", args=[row.pk])).content.decode()
    assert "Dave" not in page
    assert not ContentRead.objects.exists()
    tenant.content_audit = True
    tenant.save()
    page = client.get(reverse("admin:feedback_feedback_change", args=[row.pk])).content.decode()
    assert "My boss Dave wrote this policy." in page
    read = ContentRead.objects.get()
    assert (read.message_id, read.session_id) == (turn.reply.id, turn.session.id)


def test_the_index_lists_the_feedback_page_for_a_tenant_admin(tenant_admin):
    page = logged_in(tenant_admin).get(reverse("admin:index")).content.decode()
    assert REPORT in page
    assert "Feedback: what to improve" in page


def test_staff_without_a_tenant_get_no_feedback_page(db):
    staff = User.objects.create_user("staff", password="x", is_staff=True)
    client = Client()
    client.force_login(staff)
    assert client.get(REPORT).status_code == 403


def test_a_down_voted_answer_shows_what_it_cited_and_if_it_was_warned_without_the_audit(
    tenant_admin, tenant, settings
):
    # Issue #31: the report was mostly "Not shown: ..." without a content audit.
    from knowledge.models import Passage

    settings.QASSIST_CANDIDATE_MIN_COUNT = 5
    a, b = people(tenant, 2)
    turn = rated(a, tenant, "Hotel cap in Paris for Dave?", "EUR 200 [1].", "down", "wrong")
    Passage.objects.create(message=turn.user_message, number=1, title="Handbook", where="Travel")
    Passage.objects.create(message=turn.user_message, number=2, title="Old rules", where="p. 3")
    # Warned, yet resting on passage 1 for part of what it says (a quote from it); the model's
    # own "[n]" with no quote is no citation (knowledge.turns.mark_cited).
    quote = {"text": "The hotel cap per night is EUR 160.", "start": 0, "end": 35}
    Message.objects.filter(id=turn.reply.id).update(
        evidence={"verdict": "unsupported", "quotes": {"1": [quote]}}
    )
    other = rated(b, tenant, "Parking for Dave?", "Nothing on it.", "down", "not_helpful")
    Message.objects.filter(id=other.user_message.id).update(grounding="none_found")

    report, html = report_of(logged_in(tenant_admin))
    rows = {r.cited_text: r for r in report.worst}
    cited = rows["Handbook › Travel"]  # the cited passage only, not the one merely given
    assert (cited.question, cited.warned, cited.declined) == (None, 1, 0)
    declined = rows[""]
    assert (declined.warned, declined.declined) == (0, 1)
    assert "Handbook › Travel" in html
    assert "Dave" not in html  # still no text without the audit
    assert not ContentRead.objects.exists()


def test_answers_warned_about_count_among_the_questions_the_documents_did_not_answer(
    tenant_admin, tenant, settings
):
    settings.QASSIST_CANDIDATE_MIN_COUNT = 2
    a, b, c = people(tenant, 3)
    for user in (a, b):
        turn = answered(user, tenant, "Hotel cap in Oslo?", "EUR 300.")
        Message.objects.filter(id=turn.reply.id).update(evidence={"verdict": "not_found"})
    turn = answered(c, tenant, "hotel cap in oslo", "Nothing on it.")
    Message.objects.filter(id=turn.user_message.id).update(grounding="none_found")
    answered(c, tenant, "Hotel cap in Rome?", "EUR 150.")  # supported: not counted

    report, html = report_of(logged_in(tenant_admin))
    assert [(r.question, r.asked, r.warned) for r in report.unanswered] == [
        ("hotel cap in oslo", 1, 2)
    ]
    assert "<th>Answer warned about</th>" in html
