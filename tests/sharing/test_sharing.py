"""Export a conversation as Markdown; share a read-only snapshot with colleagues of the same
tenant: frozen at share time, revocable, a 404 for anyone else."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from chat.models import ChatSession
from chat.services.branches import branch_messages
from chat.services.replies import reply_finish
from chat.services.sessions import session_archive, session_create, session_delete
from chat.services.turns import message_send
from sharing.models import SharedConversation
from tenants.models import Membership
from tests.chat.test_views import logged_in

pytestmark = pytest.mark.django_db


def conversation(user, tenant, *turns):
    session_id = None
    turn = None
    for question, answer in turns:
        turn = message_send(user=user, tenant=tenant, session_id=session_id, content=question)
        reply_finish(reply_id=turn.reply.id, content=answer, finish_reason="stop")
        session_id = turn.session.id
    assert turn is not None
    return turn.session


def share(client, session):
    return client.post(reverse("sharing:share_create", args=[session.id]))


def test_the_export_is_the_branch_shown_as_markdown(member, tenant):
    session = conversation(
        member,
        tenant,
        ("How do I print?", "Use **Print** in the menu."),
        ("And in colour?", "Tick colour."),
    )
    response = logged_in(member).get(reverse("sharing:export", args=[session.id]))
    assert response.status_code == 200
    assert response["Content-Type"] == "text/markdown; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="How do I print_.md"')
    text = response.content.decode()
    assert text.startswith("# How do I print?\n")
    assert "Exported from qassist (Acme)" in text
    assert text.index("## You\n\nHow do I print?") < text.index(
        "## qassist\n\nUse **Print** in the menu."
    )
    assert text.rstrip().endswith("Tick colour.")


def test_someone_elses_conversation_does_not_export(member, owner, tenant):
    session = conversation(member, tenant, ("Private?", "Yes."))
    assert logged_in(owner).get(reverse("sharing:export", args=[session.id])).status_code == 404
    assert Client().get(reverse("sharing:export", args=[session.id])).status_code == 302


def test_a_colleague_opens_the_snapshot_and_it_does_not_change_afterwards(member, owner, tenant):
    session = conversation(member, tenant, ("Where is the VPN guide?", "On the intranet."))
    created = share(logged_in(member), session)
    assert created.status_code == 201
    data = created.json()["share"]
    assert data["shared_by"] == "member"
    url = data["url"]
    # The conversation goes on after sharing.
    message_send(user=member, tenant=tenant, session_id=session.id, content="Thanks, and Wi-Fi?")

    page = logged_in(owner).get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Where is the VPN guide?" in html
    assert "On the intranet." in html
    assert "Wi-Fi" not in html
    assert "Shared by <strong>member</strong>" in html
    assert "read-only snapshot" in html
    assert 'id="composer"' not in html


def test_another_tenants_member_an_ex_member_and_a_stranger_get_a_404(
    member, tenant, outsider, owner
):
    session = conversation(member, tenant, ("Secret?", "Yes."))
    url = share(logged_in(member), session).json()["share"]["url"]
    assert logged_in(outsider).get(url).status_code == 404
    assert Client().get(url).status_code == 302  # to the login page, learning nothing
    Membership.objects.filter(user=owner).delete()
    assert logged_in(owner).get(url).status_code == 404
    tenant.active = False
    tenant.save()
    assert logged_in(member).get(url).status_code == 404


@pytest.mark.parametrize("how", ["membership removed", "account switched off"])
def test_a_departed_members_links_close_and_open_again_if_they_return(member, owner, tenant, how):
    """Issue #32: a departed member's link still opened for their colleagues, and nobody could
    close it any more (its owner cannot sign in; the admin never shows snapshots)."""
    session = conversation(member, tenant, ("Where is the VPN guide?", "On the intranet."))
    url = share(logged_in(member), session).json()["share"]["url"]
    colleague = logged_in(owner)
    assert colleague.get(url).status_code == 200
    if how == "membership removed":
        membership = Membership.objects.get(user=member, tenant=tenant)
        role = membership.role
        membership.delete()
    else:
        member.is_active = False
        member.save()
    assert colleague.get(url).status_code == 404
    if how == "membership removed":
        Membership.objects.create(user=member, tenant=tenant, role=role)
    else:
        member.is_active = True
        member.save()
    assert colleague.get(url).status_code == 200


def test_a_revoked_link_is_a_404_and_only_its_owner_revokes_it(member, owner, tenant):
    session = conversation(member, tenant, ("Q", "A"))
    data = share(logged_in(member), session).json()["share"]
    revoke = reverse("sharing:share_revoke", args=[data["id"]])
    assert logged_in(owner).post(revoke).status_code == 404
    assert logged_in(owner).get(data["url"]).status_code == 200
    response = logged_in(member).post(revoke)
    assert response.json()["share"]["revoked"] is True
    assert logged_in(owner).get(data["url"]).status_code == 404
    listed = logged_in(member).get(reverse("sharing:share_list", args=[session.id])).json()
    assert listed == {"shares": []}


def test_links_are_listed_to_their_owner_and_go_with_the_conversation(member, owner, tenant):
    session = conversation(member, tenant, ("Q", "A"))
    client = logged_in(member)
    share(client, session)
    share(client, session)
    listed = client.get(reverse("sharing:share_list", args=[session.id])).json()["shares"]
    assert len(listed) == 2
    assert logged_in(owner).get(reverse("sharing:share_list", args=[session.id])).status_code == 404
    assert share(logged_in(owner), session).status_code == 404
    session_archive(session=session)
    session_delete(session=session)
    assert not SharedConversation.objects.exists()


def test_an_empty_conversation_has_nothing_to_share(member, tenant):
    session = session_create(user=member, tenant=tenant, title="Empty")
    response = share(logged_in(member), session)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "nothing_to_share"


def test_the_snapshot_page_renders_the_reply_as_text_for_the_sanitiser(member, owner, tenant):
    session = conversation(member, tenant, ("Show me", "<script>alert(1)</script> **bold**"))
    url = share(logged_in(member), session).json()["share"]["url"]
    html = logged_in(owner).get(url).content.decode()
    assert "<script>alert(1)</script>" not in html  # escaped by the template
    assert "&lt;script&gt;alert(1)&lt;/script&gt; **bold**" in html
    assert '<script type="module" src="/static/chat/shared.js"></script>' in html


def test_a_member_of_two_tenants_reads_a_snapshot_whichever_they_work_in(
    member, owner, tenant, other_tenant
):
    Membership.objects.create(user=owner, tenant=other_tenant)
    session = conversation(member, tenant, ("Q", "A"))
    url = share(logged_in(member), session).json()["share"]["url"]
    client = logged_in(owner)
    client.post(reverse("chat:tenant_switch"), {"tenant": other_tenant.slug})
    assert client.get(url).status_code == 200


def test_the_snapshot_and_the_export_keep_the_note_of_a_question_the_documents_missed(
    member, owner, tenant
):
    # Issue #31: the chat says "Not from the company's documents" under such a reply; the
    # snapshot and the Markdown export dropped it.
    session = conversation(member, tenant, ("Name a colour.", "Blue."), ("And another?", "Red."))
    first_question = session.messages.filter(role="user").order_by("created_at", "id").first()
    first_question.grounding = "none_found"
    first_question.save(update_fields=["grounding"])

    text = logged_in(member).get(reverse("sharing:export", args=[session.id])).content.decode()
    note = "*Not from the company’s documents: they had nothing on this question.*"
    assert text.count(note) == 1
    assert text.index("Blue.") < text.index(note) < text.index("And another?")

    url = share(logged_in(member), session).json()["share"]["url"]
    page = logged_in(owner).get(url).content.decode()
    assert page.count('<p class="msg-note" role="note">Not from the company’s documents') == 1
    assert page.index("Blue.") < page.index('class="msg-note"') < page.index("Red.")


def test_a_colleague_continues_a_snapshot_in_their_own_chats(member, owner, outsider, tenant):
    # Issue #31: a shared snapshot was a dead end.
    session = conversation(
        member, tenant, ("Where is the VPN guide?", "On the intranet."), ("And Wi-Fi?", "Ask IT.")
    )
    url = share(logged_in(member), session).json()["share"]["url"]
    share_id = url.rstrip("/").rsplit("/", 1)[-1]
    continue_url = reverse("sharing:share_continue", args=[share_id])
    colleague = logged_in(owner)
    assert 'id="continue-btn"' in colleague.get(url).content.decode()

    response = colleague.post(continue_url)
    copy = ChatSession.objects.exclude(pk=session.pk).get()
    assert response.status_code == 302
    assert response["Location"] == reverse("chat:conversation", args=[copy.id])
    assert (copy.user, copy.tenant, copy.title) == (owner, tenant, session.title)
    branch = branch_messages(session=copy)
    assert [(m.role, m.content) for m in branch] == [
        ("user", "Where is the VPN guide?"),
        ("assistant", "On the intranet."),
        ("user", "And Wi-Fi?"),
        ("assistant", "Ask IT."),
    ]
    assert copy.branch_tip == branch[-1]
    # It is theirs: it opens for them, and the next question follows on from it.
    assert colleague.get(response["Location"]).status_code == 200
    turn = message_send(user=owner, tenant=tenant, session_id=copy.id, content="Thanks")
    assert turn.user_message.parent == branch[-1]
    # The original is untouched; nobody outside the tenant continues it.
    assert session.messages.count() == 4
    assert logged_in(outsider).post(continue_url).status_code == 404
    assert colleague.get(continue_url).status_code == 405
