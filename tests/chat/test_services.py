from datetime import timedelta

import pytest
from django.http import Http404
from django.utils import timezone

from chat.models import CachedReply, Message
from chat.services.branches import branch_data, branch_messages, branch_switch
from chat.services.cached_lookup import cached_reply_lookup
from chat.services.checks import ChatError
from chat.services.replies import STALE_STREAM_SECONDS, reply_finish, reply_save_progress
from chat.services.sessions import archived_session_get, session_archive, session_delete
from chat.services.titles import TITLE_CHARS, clean_title, session_set_generated_title
from chat.services.turns import (
    conversation_for,
    message_edit_last,
    message_regenerate,
    message_send,
)
from inference.types import ChatMessage
from tenants.models import UsageRecord

pytestmark = pytest.mark.django_db


def send(user, tenant, content="Hello there", session_id=None):
    return message_send(user=user, tenant=tenant, session_id=session_id, content=content)


def test_a_first_message_creates_a_titled_session_and_a_streaming_reply(member, tenant):
    turn = send(member, tenant, "How do I reset my VPN password?")
    assert turn.session_created
    assert turn.session.title == "How do I reset my VPN password?"
    assert turn.reply.status == Message.Status.STREAMING
    assert turn.conversation == [ChatMessage("user", "How do I reset my VPN password?")]


def test_a_long_first_message_gets_a_short_title(member, tenant):
    turn = send(member, tenant, "word " * 50)
    assert len(turn.session.title) <= TITLE_CHARS + 1
    assert turn.session.title.endswith("…")


@pytest.mark.parametrize("content", ["", "   \n", None, 42, "x" * 32_001])
def test_empty_or_oversized_messages_are_refused_and_nothing_is_stored(member, tenant, content):
    with pytest.raises(ChatError) as err:
        send(member, tenant, content)
    assert err.value.code == "invalid_message"
    assert not Message.objects.exists()


def test_the_conversation_starts_with_the_tenants_system_prompt(member, tenant):
    tenant.system_prompt = "You answer for Acme's IT desk."
    tenant.save()
    turn = send(member, tenant)
    assert turn.conversation[0] == ChatMessage("system", "You answer for Acme's IT desk.")


def test_a_follow_up_carries_the_history_but_not_failed_replies(member, tenant):
    first = send(member, tenant, "one")
    reply_finish(reply_id=first.reply.id, content="", finish_reason="error", error="boom")
    second = send(member, tenant, "two", session_id=first.session.id)
    assert [m.content for m in second.conversation] == ["one", "two"]


def test_someone_elses_session_is_not_found(member, outsider, tenant, other_tenant):
    turn = send(member, tenant)
    reply_finish(reply_id=turn.reply.id, content="hi", finish_reason="stop")
    with pytest.raises(Http404):
        send(outsider, other_tenant, "let me in", session_id=turn.session.id)


def test_a_second_message_while_a_reply_streams_is_refused(member, tenant):
    turn = send(member, tenant)
    with pytest.raises(ChatError) as err:
        send(member, tenant, "again", session_id=turn.session.id)
    assert err.value.code == "busy_session"


def test_a_reply_orphaned_by_a_dead_process_does_not_block_the_session(member, tenant):
    turn = send(member, tenant)
    reply_save_progress(reply_id=turn.reply.id, content="partial")
    Message.objects.filter(id=turn.reply.id).update(
        updated_at=timezone.now() - timedelta(seconds=STALE_STREAM_SECONDS + 1)
    )
    send(member, tenant, "still there?", session_id=turn.session.id)
    orphan = Message.objects.get(id=turn.reply.id)
    assert orphan.status == Message.Status.INTERRUPTED
    assert orphan.content == "partial"


def test_finishing_a_reply_stores_it_and_records_usage(member, tenant):
    turn = send(member, tenant)
    reply_finish(
        reply_id=turn.reply.id,
        content="Hi!",
        finish_reason="stop",
        prompt_tokens=12,
        completion_tokens=3,
        ttft_ms=80,
        latency_ms=200,
    )
    reply = Message.objects.get(id=turn.reply.id)
    assert (reply.status, reply.content, reply.completion_tokens) == ("complete", "Hi!", 3)
    usage = UsageRecord.objects.get()
    assert (usage.tenant, usage.user, usage.total_tokens, usage.status) == (
        tenant,
        member,
        15,
        "ok",
    )


def test_a_stopped_reply_keeps_its_text_marked_interrupted(member, tenant):
    turn = send(member, tenant)
    reply_finish(reply_id=turn.reply.id, content="Half an ans", finish_reason="cancelled")
    reply = Message.objects.get(id=turn.reply.id)
    assert reply.status == Message.Status.INTERRUPTED
    assert reply.content == "Half an ans"
    assert UsageRecord.objects.get().status == "cancelled"


def test_a_reply_whose_client_went_away_is_told_apart_from_a_stop(member, tenant):
    turn = send(member, tenant)
    reply_finish(reply_id=turn.reply.id, content="Half", finish_reason="disconnected")
    reply = Message.objects.get(id=turn.reply.id)
    assert (reply.status, reply.finish_reason) == (Message.Status.INTERRUPTED, "disconnected")
    assert reply.error == ""
    assert UsageRecord.objects.get().status == "cancelled"


def test_a_failed_reply_with_text_keeps_the_text(member, tenant):
    turn = send(member, tenant)
    reply_finish(
        reply_id=turn.reply.id, content="Some", finish_reason="error", error="worker stopped"
    )
    reply = Message.objects.get(id=turn.reply.id)
    assert reply.status == Message.Status.INTERRUPTED
    assert reply.error == "worker stopped"


def test_regenerate_keeps_the_earlier_reply_as_a_version(member, tenant):
    turn = send(member, tenant, "question")
    reply_finish(reply_id=turn.reply.id, content="meh", finish_reason="stop")
    again = message_regenerate(user=member, tenant=tenant, session_id=turn.session.id)
    assert Message.objects.get(id=turn.reply.id).content == "meh"
    assert again.user_message.id == turn.user_message.id
    assert again.versions[again.reply.id] == [turn.reply.id, again.reply.id]
    assert [m.content for m in again.conversation] == ["question"]
    again.session.refresh_from_db()
    assert [m.id for m in branch_messages(session=again.session)] == [
        turn.user_message.id,
        again.reply.id,
    ]


def test_a_failed_empty_reply_is_not_kept_as_a_version(member, tenant):
    turn = send(member, tenant, "question")
    reply_finish(reply_id=turn.reply.id, content="", finish_reason="error", error="x")
    again = message_regenerate(user=member, tenant=tenant, session_id=turn.session.id)
    assert not Message.objects.filter(id=turn.reply.id).exists()
    assert again.versions[again.reply.id] == [again.reply.id]


def test_edit_answers_a_new_version_and_keeps_the_original(member, tenant):
    turn = send(member, tenant, "teh question")
    reply_finish(reply_id=turn.reply.id, content="?", finish_reason="stop")
    edited = message_edit_last(
        tenant=tenant, user=member, session_id=turn.session.id, content="the question"
    )
    assert edited.user_message.content == "the question"
    assert edited.user_message.id != turn.user_message.id
    assert edited.versions[edited.user_message.id] == [turn.user_message.id, edited.user_message.id]
    assert [m.content for m in edited.conversation] == ["the question"]
    assert Message.objects.get(id=turn.user_message.id).content == "teh question"
    assert Message.objects.filter(session=turn.session).count() == 4


def finished(turn, content):
    reply_finish(reply_id=turn.reply.id, content=content, finish_reason="stop")
    return turn


def test_switching_versions_follows_the_conversation_after_each(member, tenant):
    # one → A1, two → B1; then "one" edited to "uno" → A2; versions of the first message.
    first = finished(send(member, tenant, "one"), "A1")
    sid = first.session.id
    finished(send(member, tenant, "two", session_id=sid), "B1")
    edited = finished(
        message_edit_last(tenant=tenant, user=member, session_id=sid, content="deux"),
        "B2",
    )
    session = branch_switch(
        user=member, tenant=tenant, session_id=sid, message_id=first.user_message.id
    )
    assert [m.content for m in branch_messages(session=session)] == [
        "one",
        "A1",
        "deux",
        "B2",
    ]
    # The second turn's first version, and the conversation after it.
    session = branch_switch(
        user=member,
        tenant=tenant,
        session_id=sid,
        message_id=edited.versions[edited.user_message.id][0],
    )
    data = branch_data(session=session)
    assert [m["content"] for m in data] == ["one", "A1", "two", "B1"]
    assert data[2]["versions"] == edited.versions[edited.user_message.id]
    assert [c.content for c in conversation_for(session=session)] == [
        "one",
        "A1",
        "two",
        "B1",
    ]
    # A new message continues the branch shown.
    third = send(member, tenant, "three", session_id=sid)
    assert [c.content for c in third.conversation] == ["one", "A1", "two", "B1", "three"]
    assert third.user_message.parent_id == data[-1]["id"]


@pytest.mark.parametrize("message_id", [None, "1", True, 10_000])
def test_switching_to_a_message_not_in_the_session_is_refused(member, tenant, message_id):
    turn = finished(send(member, tenant, "one"), "A1")
    with pytest.raises(ChatError) as err:
        branch_switch(user=member, tenant=tenant, session_id=turn.session.id, message_id=message_id)
    assert err.value.code == "not_found"


def test_another_users_message_cannot_be_switched_to(member, owner, tenant):
    mine = finished(send(member, tenant, "one"), "A1")
    theirs = finished(send(owner, tenant, "secret"), "S")
    with pytest.raises(ChatError):
        branch_switch(
            user=member, tenant=tenant, session_id=mine.session.id, message_id=theirs.reply.id
        )
    with pytest.raises(Http404):
        branch_switch(
            user=member, tenant=tenant, session_id=theirs.session.id, message_id=theirs.reply.id
        )


def cached(tenant=None, question="What is the VPN address?", answer="vpn.acme.example", **kw):
    return CachedReply.objects.create(tenant=tenant, question=question, answer=answer, **kw)


def test_a_cached_reply_matches_regardless_of_case_width_and_punctuation(tenant):
    reply = cached()
    match = cached_reply_lookup(
        tenant=tenant, conversation=[ChatMessage("user", "  what is the ＶＰＮ address？ ")]
    )
    assert match == reply
    reply.refresh_from_db()
    assert reply.hits == 1
    assert reply.last_hit_at is not None


def test_a_tenants_own_cached_reply_wins_over_the_global_one(tenant):
    cached(answer="global")
    own = cached(tenant=tenant, answer="acme's own")
    match = cached_reply_lookup(
        tenant=tenant, conversation=[ChatMessage("user", "What is the VPN address?")]
    )
    assert match == own


def test_another_tenants_cached_reply_is_never_served(tenant, other_tenant):
    cached(tenant=other_tenant)
    assert (
        cached_reply_lookup(
            tenant=tenant, conversation=[ChatMessage("user", "What is the VPN address?")]
        )
        is None
    )


def test_cached_replies_are_not_replayed_into_a_multi_turn_conversation(tenant):
    cached()
    conversation = [
        ChatMessage("user", "We moved offices."),
        ChatMessage("assistant", "Noted."),
        ChatMessage("user", "What is the VPN address?"),
    ]
    assert cached_reply_lookup(tenant=tenant, conversation=conversation) is None


def test_disabled_and_expired_cached_replies_are_ignored(tenant):
    cached(enabled=False)
    cached(tenant=tenant, expires_at=timezone.now() - timedelta(minutes=1))
    assert (
        cached_reply_lookup(
            tenant=tenant, conversation=[ChatMessage("user", "What is the VPN address?")]
        )
        is None
    )


def test_a_system_prompt_does_not_stop_a_single_question_from_matching(tenant):
    reply = cached()
    conversation = [
        ChatMessage("system", "Be brief."),
        ChatMessage("user", "What is the VPN address"),
    ]
    assert cached_reply_lookup(tenant=tenant, conversation=conversation) == reply


ENGLISH_QUESTION = "Can you help me with planning the team offsite and setting up the VPN?"
CHINESE_QUESTION = "请给我介绍一下北京的历史，从元朝到现在的主要变化有哪些？"


@pytest.mark.parametrize(
    ("raw", "question", "title"),
    [
        ('"Planning the offsite"', ENGLISH_QUESTION, "Planning the offsite"),
        ("Title: VPN setup help.", ENGLISH_QUESTION, "VPN setup help"),
        ("标题：北京历史简介。", CHINESE_QUESTION, "北京历史简介"),
        ("\n\n  Git undo tips\nsecond line", ENGLISH_QUESTION, "Git undo tips"),
        ("   ", ENGLISH_QUESTION, ""),
        ("```python\ndef f(): pass", ENGLISH_QUESTION, ""),
        (
            "The story of a city's history is a tale of resilience and the power of change.",
            ENGLISH_QUESTION,
            "",
        ),
    ],
)
def test_a_model_answer_is_cleaned_into_a_title(raw, question, title):
    assert clean_title(raw, question=question) == title


@pytest.mark.parametrize(
    ("raw", "question"),
    [
        # An English request about German answered with a German non-sentence (issue #11).
        (
            "Die deutsche Grammatik und ihre Fälle",
            "How do the four grammatical cases in German work?",
        ),
        ("Reading a file line by line in Python", "怎么用 Python 逐行读取一个文件？"),
        ("Histoire de Pékin", CHINESE_QUESTION),
    ],
)
def test_a_title_in_another_language_than_the_question_is_rejected(raw, question):
    assert clean_title(raw, question=question) == ""


def test_a_title_longer_than_the_question_is_rejected():
    assert clean_title("Greetings and small talk", question="hello there") == ""
    assert clean_title("Greeting", question="hello there") == "Greeting"


def test_a_short_ambiguous_title_is_kept():
    # Names and abbreviations are in no language in particular: keep them.
    question = "help me plan the Q3 offsite for our team"
    assert clean_title("Q3 offsite", question=question) == "Q3 offsite"


def test_a_generated_title_replaces_only_the_title_it_was_made_for(member, tenant):
    turn = send(member, tenant, "first")
    assert session_set_generated_title(session_id=turn.session.id, title="Better", replaces="first")
    assert not session_set_generated_title(
        session_id=turn.session.id, title="Other", replaces="first"
    )
    turn.session.refresh_from_db()
    assert turn.session.title == "Better"


def test_an_archived_session_takes_no_more_messages(member, tenant):
    turn = send(member, tenant)
    reply_finish(reply_id=turn.reply.id, content="hi", finish_reason="stop")
    session_archive(session=turn.session)
    with pytest.raises(Http404):
        send(member, tenant, "again", session_id=turn.session.id)
    with pytest.raises(Http404):
        message_regenerate(user=member, tenant=tenant, session_id=turn.session.id)


def test_a_session_with_a_reply_being_written_is_not_deleted(member, tenant):
    turn = send(member, tenant)
    session_archive(session=turn.session)
    with pytest.raises(ChatError) as err:
        session_delete(session=turn.session)
    assert err.value.code == "busy_session"
    assert Message.objects.filter(session=turn.session).count() == 2


def test_archived_sessions_are_found_only_for_their_owner_in_a_tenant_they_are_in(
    member, owner, tenant, other_tenant
):
    turn = send(member, tenant)
    reply_finish(reply_id=turn.reply.id, content="hi", finish_reason="stop")
    with pytest.raises(Http404):  # not archived: not an archived session
        archived_session_get(user=member, session_id=turn.session.id)
    session_archive(session=turn.session)
    assert archived_session_get(user=member, session_id=turn.session.id) == turn.session
    with pytest.raises(Http404):
        archived_session_get(user=owner, session_id=turn.session.id)
    with pytest.raises(Http404):
        archived_session_get(user=member, session_id="not-a-uuid")
    member.memberships.all().delete()
    with pytest.raises(Http404):
        archived_session_get(user=member, session_id=turn.session.id)


def test_the_migration_turns_existing_conversations_into_one_straight_branch(member, tenant):
    import importlib

    from django.apps import apps

    from chat.models import ChatSession

    migration = importlib.import_module("chat.migrations.0004_message_versions")
    session = ChatSession.objects.create(user=member, tenant=tenant, title="old")
    old = [
        Message.objects.create(session=session, role=role, content=content)
        for role, content in [("user", "q1"), ("assistant", "a1"), ("user", "q2")]
    ]
    migration.chain_existing(apps, None)
    session.refresh_from_db()
    assert session.branch_tip_id == old[-1].id
    assert [m.parent_id for m in Message.objects.order_by("id")] == [None, old[0].id, old[1].id]
    assert [m.content for m in branch_messages(session=session)] == ["q1", "a1", "q2"]


@pytest.mark.django_db(transaction=True)
def test_a_turn_of_an_existing_conversation_locks_it_inside_one_transaction(
    member, tenant, monkeypatch
):
    # SQLite ignores select_for_update; PostgreSQL refuses it outside a transaction, and a
    # misplaced @transaction.atomic once broke every follow-up turn there (only CI saw it).
    from django.db import connection

    from chat.services import replies, turns

    first = send(member, tenant, "one")
    Message.objects.filter(id=first.reply.id).update(status=Message.Status.COMPLETE)
    seen: list[bool] = []
    check = replies.no_reply_in_progress

    def watched(session: object) -> None:
        seen.append(connection.in_atomic_block)
        check(session)  # type: ignore[arg-type]

    monkeypatch.setattr(turns, "no_reply_in_progress", watched)
    message_send(user=member, tenant=tenant, session_id=first.session.id, content="two")
    # Checked when the turn is prepared, then again under the lock when it starts.
    assert seen[-1] is True
