"""Cached replies that learn: matching, the in-process index, candidates, drafts, CSV."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import redis
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chat import cached_replies, cached_reply_csv
from chat.cache import CachedReplyIndex, LocalVersion, RedisVersion
from chat.models import CachedReply, CachedReplyCandidate, Message
from chat.question_keys import normalize_question
from chat.services.cached_lookup import cached_reply_lookup
from chat.services.replies import reply_finish
from chat.services.turns import message_send
from inference.service import set_engine_client
from inference.types import ChatMessage, Delta, Done, Event, Failed
from inference.worker import Submission
from tests import needs

pytestmark = pytest.mark.django_db


def ask(tenant, *questions):
    """The lookup for a conversation of `questions` (user turns, with answers between)."""
    conversation: list[ChatMessage] = []
    for question in questions:
        if conversation:
            conversation.append(ChatMessage("assistant", "…"))
        conversation.append(ChatMessage("user", question))
    return cached_reply_lookup(tenant=tenant, conversation=conversation)


def cached(tenant=None, question="What is the VPN address?", answer="vpn.acme.example", **kw):
    return CachedReply.objects.create(tenant=tenant, question=question, answer=answer, **kw)


# --- normalisation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("what is the vpn address", "What is the VPN address?"),
        ("What is the VPN address, please?", "What is the VPN address please"),
        ("ＷＨＡＴ　ＩＳ　ＴＨＥ　ＶＰＮ　ＡＤＤＲＥＳＳ？", "What is the VPN address?"),
        ("  what   is the\tVPN address!! ", "What is the VPN address?"),
        ("VPN地址是什么？", "VPN 地址是什么"),
        ("请问，VPN 地址是什么？！", "请问VPN地址是什么"),
        ("「VPN」地址是什么。", "VPN地址是什么"),
        ("What's the VPN address?", "whats the vpn address"),
        ("Is version 1.5 supported?", "is version 1.5 supported"),
    ],
)
def test_questions_typed_either_way_share_one_key(typed, stored):
    assert normalize_question(typed) == normalize_question(stored)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("How do I learn C#?", "How do I learn C?"),
        ("Is version 1.5 supported?", "Is version 15 supported?"),
        ("What is 50% of the budget?", "What is 50 of the budget?"),
        ("What is the VPN address?", "What is the VPN adress?"),  # never fuzzy
        ("How do I reach the VPN?", "How do I reach the VPN, please?"),
    ],
)
def test_questions_that_differ_in_meaning_keep_different_keys(one, other):
    assert normalize_question(one) != normalize_question(other)


# --- lookup ----------------------------------------------------------------------------------


def test_an_alternative_phrasing_is_answered_by_its_reply(tenant):
    reply = cached(alternatives="How do I reach the VPN?\n\nVPN 地址？\n")
    assert ask(tenant, "how do i reach the vpn") == reply
    assert ask(tenant, "VPN地址") == reply
    assert ask(tenant, "How do I reach the VPN, please?") is None


@pytest.mark.parametrize("own_first", [True, False], ids=["own-made-first", "own-made-last"])
def test_a_tenants_own_reply_wins_over_the_global_one_whichever_was_made_first(tenant, own_first):
    if own_first:
        own = cached(tenant=tenant, answer="acme's own")
        cached(answer="global")
    else:
        cached(answer="global")
        own = cached(tenant=tenant, answer="acme's own")
    assert ask(tenant, "What is the VPN address?") == own


def test_the_global_reply_answers_when_the_tenants_own_has_expired(tenant, other_tenant):
    shared = cached(answer="global")
    cached(tenant=tenant, answer="old", expires_at=timezone.now() - timedelta(seconds=1))
    assert ask(tenant, "What is the VPN address?") == shared
    assert ask(other_tenant, "What is the VPN address?") == shared


def test_a_follow_up_question_is_never_answered_from_the_cache(tenant):
    cached()
    assert ask(tenant, "We moved offices.", "What is the VPN address?") is None


def test_a_lookup_does_not_query_the_database_while_the_table_is_unchanged(
    tenant, django_assert_num_queries
):
    reply = cached()
    ask(tenant, "warm the index")
    with django_assert_num_queries(0):
        assert ask(tenant, "Where is the canteen?") is None
        assert ask(tenant, "Where is the canteen?", "What is the VPN address?") is None
    with django_assert_num_queries(1):  # the hit counter, nothing read
        assert ask(tenant, "What is the VPN address?") == reply
    reply.refresh_from_db()
    assert reply.hits == 1
    assert reply.last_hit_at is not None


def test_saving_or_deleting_a_reply_reaches_the_next_lookup(tenant):
    reply = cached()
    assert ask(tenant, "What is the VPN address?").answer == "vpn.acme.example"
    reply.answer = "vpn2.acme.example"
    reply.save()
    assert ask(tenant, "What is the VPN address?").answer == "vpn2.acme.example"
    cached_replies.cached_replies_set_enabled(
        replies=CachedReply.objects.filter(pk=reply.pk), enabled=False
    )
    assert ask(tenant, "What is the VPN address?") is None
    reply.enabled = True
    reply.save()
    assert ask(tenant, "What is the VPN address?") is not None
    reply.delete()
    assert ask(tenant, "What is the VPN address?") is None


def test_another_process_sees_a_change_through_the_table_signature_when_embedded(
    tenant, django_assert_num_queries
):
    reply = cached()
    other = CachedReplyIndex(LocalVersion(check_seconds=0))
    key = normalize_question("What is the VPN address?")
    assert other.lookup(tenant_id=tenant.id, key=key, now=timezone.now()) == reply
    # A change made elsewhere, without the signals this process would hear:
    CachedReply.objects.filter(pk=reply.pk).update(
        answer="changed elsewhere", updated_at=timezone.now() + timedelta(seconds=1)
    )
    changed = other.lookup(tenant_id=tenant.id, key=key, now=timezone.now())
    assert changed is not None
    assert changed.answer == "changed elsewhere"
    assert other.loads == 2

    patient = CachedReplyIndex(LocalVersion(check_seconds=3600))
    patient.lookup(tenant_id=tenant.id, key=key, now=timezone.now())
    with django_assert_num_queries(0):
        patient.lookup(tenant_id=tenant.id, key=key, now=timezone.now())


REDIS_URL = needs.TEST_REDIS_URL


@pytest.fixture
def redis_prefix():
    needs.redis_url()  # skips (fails in CI) when no Redis answers there
    prefix = f"qtest-{uuid.uuid4().hex[:8]}"
    yield prefix
    redis.Redis.from_url(REDIS_URL).delete(f"{prefix}:cached_replies:version")


@pytest.mark.redis
def test_processes_share_a_version_in_redis(tenant, redis_prefix, django_assert_num_queries):
    reply = cached()
    web, celery = (
        CachedReplyIndex(RedisVersion(REDIS_URL, redis_prefix)),
        CachedReplyIndex(RedisVersion(REDIS_URL, redis_prefix)),
    )
    key = normalize_question("What is the VPN address?")
    for index in (web, celery):
        assert index.lookup(tenant_id=tenant.id, key=key, now=timezone.now()) == reply
    with django_assert_num_queries(0):
        celery.lookup(tenant_id=tenant.id, key=key, now=timezone.now())

    CachedReply.objects.filter(pk=reply.pk).update(enabled=False)
    web.version.bump()  # what a committed save in the web process does
    assert celery.lookup(tenant_id=tenant.id, key=key, now=timezone.now()) is None


def test_a_committed_change_bumps_the_shared_version(tenant, django_capture_on_commit_callbacks):
    from chat.cache import get_index

    index = get_index()
    bumps = []
    index.version.bump = lambda: bumps.append(1)  # type: ignore[method-assign]
    with django_capture_on_commit_callbacks(execute=True):
        cached()
    assert bumps == [1]


def test_a_phrasing_can_answer_only_one_reply_per_tenant(tenant):
    cached(tenant=tenant)
    clash = CachedReply(
        tenant=tenant, question="VPN?", alternatives="what is the vpn address", answer="x"
    )
    with pytest.raises(ValidationError, match="already answers"):
        clash.full_clean()
    # The same question for every tenant is not a clash: the tenant's own overrides it.
    CachedReply(question="What is the VPN address?", answer="y").full_clean()


# --- test a phrase ---------------------------------------------------------------------------


def test_testing_a_phrase_names_the_reply_that_would_answer(tenant):
    reply = cached(tenant=tenant)
    result = cached_replies.cached_reply_test_phrase(
        tenant=tenant, phrase="What is the VPN address"
    )
    assert result.reply == reply
    assert "this tenant's own reply" in result.explanation


def test_testing_a_phrase_explains_why_nothing_answers(tenant):
    cached(tenant=tenant, enabled=False)
    disabled = cached_replies.cached_reply_test_phrase(
        tenant=tenant, phrase="what is the vpn address"
    )
    assert disabled.reply is None
    assert "is disabled" in disabled.explanation
    follow_up = cached_replies.cached_reply_test_phrase(
        tenant=tenant, phrase="what is the vpn address", follow_up=True
    )
    assert "first message" in follow_up.explanation
    miss = cached_replies.cached_reply_test_phrase(tenant=tenant, phrase="…VPN, please?")
    assert miss.reply is None
    assert "“vpn please”" in miss.explanation


# --- candidates ------------------------------------------------------------------------------


def answer(user, tenant, question, *, session_id=None, served_from_cache=False, reason="stop"):
    turn = message_send(user=user, tenant=tenant, session_id=session_id, content=question)
    reply_finish(
        reply_id=turn.reply.id,
        content=f"model says: {question}",
        finish_reason=reason,
        served_from_cache=served_from_cache,
    )
    return turn


def test_first_questions_answered_by_the_model_are_counted_per_tenant(
    member, outsider, tenant, other_tenant
):
    answer(member, tenant, "Where is the canteen?")
    answer(member, tenant, "where is the CANTEEN")
    answer(outsider, other_tenant, "Where is the canteen?")
    ours = CachedReplyCandidate.objects.get(tenant=tenant)
    assert ours.count == 2
    assert ours.question == "where is the CANTEEN"
    assert ours.last_answer == "model says: where is the CANTEEN"
    assert CachedReplyCandidate.objects.get(tenant=other_tenant).count == 1


def test_follow_ups_cached_answers_and_unfinished_replies_are_not_counted(member, tenant):
    first = answer(member, tenant, "Hello")
    answer(member, tenant, "Where is the canteen?", session_id=first.session.id)
    answer(member, tenant, "Where is the gym?", served_from_cache=True)
    answer(member, tenant, "Where is the pool?", reason="cancelled")
    answer(member, tenant, "Where is the bar?", reason="length")
    assert list(CachedReplyCandidate.objects.values_list("question", flat=True)) == ["Hello"]


def test_promoting_a_candidate_makes_a_disabled_reply_with_the_models_answer(member, tenant):
    answer(member, tenant, "Where is the canteen?")
    candidate = CachedReplyCandidate.objects.get()
    reply = cached_replies.candidate_promote(candidate=candidate, user=member)
    assert (reply.tenant, reply.question, reply.answer, reply.enabled) == (
        tenant,
        "Where is the canteen?",
        "model says: Where is the canteen?",
        False,
    )
    assert cached_replies.candidate_promote(candidate=candidate, user=member) == reply
    assert CachedReply.objects.count() == 1


def test_a_ready_draft_is_what_gets_promoted(member, tenant):
    answer(member, tenant, "Where is the canteen?")
    candidate = CachedReplyCandidate.objects.get()
    candidate.draft_answer = "Ground floor, east wing."
    candidate.draft_status = CachedReplyCandidate.DraftStatus.READY
    reply = cached_replies.candidate_promote(candidate=candidate, user=None)
    assert reply.answer == "Ground floor, east wing."


def record(tenant, question):
    candidate = cached_replies.candidate_record(tenant=tenant, question=question, answer="dunno")
    assert candidate is not None
    return candidate


class RecordingClient:
    """An engine client that records submissions and plays back given events."""

    def __init__(self, events):
        self.events = events
        self.submissions: list[Submission] = []

    async def generate(self, sub: Submission) -> AsyncIterator[Event]:
        self.submissions.append(sub)
        for event in self.events(sub.request_id):
            yield event

    async def served_models(self) -> list[str]:
        return []

    async def cancel(self, request_id: str) -> None:
        pass

    def at_capacity(self, model: str = "") -> bool:
        return False  # its refusals come from the engine path

    async def health(self):
        return {}


@pytest.fixture
def engine_client():
    def use(events):
        client = RecordingClient(events)
        set_engine_client(client)
        return client

    yield use
    set_engine_client(None)


def test_a_draft_is_asked_at_background_priority_and_stored_for_review(tenant, engine_client):
    tenant.system_prompt = "You work at Acme."
    tenant.priority = 3
    tenant.save()
    candidate = record(tenant, "Wifi?")
    client = engine_client(
        lambda rid: [Delta(rid, "The guest "), Delta(rid, "network."), Done(rid, "stop", 5, 3)]
    )
    assert cached_replies.candidate_draft_start(candidate=candidate)
    assert not cached_replies.candidate_draft_start(candidate=candidate)  # one at a time

    from chat.tasks import draft_cached_reply_answer

    assert draft_cached_reply_answer(candidate.pk) == "ready"

    candidate.refresh_from_db()
    assert candidate.draft_answer == "The guest network."
    (sub,) = client.submissions
    assert sub.background
    assert sub.priority < tenant.priority
    assert [m.content for m in sub.messages] == ["You work at Acme.", "Wifi?"]


def test_a_failed_draft_says_why(tenant, engine_client):
    candidate = record(tenant, "Wifi?")
    engine_client(lambda rid: [Failed(rid, "worker_down", "No inference worker is running.")])
    cached_replies.candidate_draft_answer(candidate_id=candidate.pk)
    candidate.refresh_from_db()
    assert candidate.draft_status == "failed"
    assert candidate.draft_error == "No inference worker is running."
    assert candidate.draft_answer == ""


# --- CSV -------------------------------------------------------------------------------------


def test_export_then_import_into_an_empty_table_restores_every_field(tenant, admin_user):
    now = timezone.now().replace(microsecond=0)
    cached(
        tenant=tenant,
        question="Wifi, “guest”?",
        alternatives="访客 Wi-Fi？\nguest wifi",
        answer='Line one,\n"quoted" line two\n中文',
        enabled=False,
        expires_at=now + timedelta(days=3),
        created_by=admin_user,
    )
    cached(question="Holidays?", answer="See the intranet.")
    CachedReply.objects.filter(tenant=None).update(hits=7, last_hit_at=now)
    fields = [
        "tenant_id",
        "question",
        "normalized_key",
        "alternatives",
        "answer",
        "enabled",
        "expires_at",
        "hits",
        "last_hit_at",
        "created_at",
        "created_by_id",
    ]
    before = list(CachedReply.objects.order_by("question").values(*fields))
    exported = cached_reply_csv.cached_replies_export(
        replies=CachedReply.objects.select_related("tenant", "created_by")
    )
    CachedReply.objects.all().delete()

    result = cached_reply_csv.cached_replies_import(text=exported, tenants=None, user=None)

    assert (result.created, result.updated) == (2, 0)
    assert list(CachedReply.objects.order_by("question").values(*fields)) == before
    again = cached_reply_csv.cached_replies_import(text=exported, tenants=None, user=None)
    assert (again.created, again.updated) == (0, 2)
    assert CachedReply.objects.count() == 2


def test_a_bad_row_is_reported_by_line_and_nothing_is_imported(tenant):
    text = (
        "tenant,question,answer,enabled,expires_at\n"
        'acme,Wifi?,"guest\nnetwork",true,\n'  # lines 2-3
        "acme,Parking?,Level -2,maybe,\n"  # line 4
        "nosuch,Lunch?,At noon,true,\n"  # line 5
        "acme,Hours?,9-5,true,next tuesday\n"  # line 6
        "acme,Printer?,,true,\n"  # line 7
        "acme,Canteen?,Floor 1,true,\n"  # line 8: fine
    )
    with pytest.raises(cached_reply_csv.CachedReplyImportError) as caught:
        cached_reply_csv.cached_replies_import(text=text, tenants=None, user=None)
    errors = caught.value.errors
    assert [e.split(":")[0] for e in errors] == ["line 4", "line 5", "line 6", "line 7"]
    assert "maybe" in errors[0]
    assert "nosuch" in errors[1]
    assert "ISO 8601" in errors[2]
    assert "answer" in errors[3]
    assert not CachedReply.objects.exists()


def test_an_import_refuses_unknown_columns_and_other_tenants(tenant, other_tenant):
    with pytest.raises(cached_reply_csv.CachedReplyImportError, match="line 1: unknown column"):
        cached_reply_csv.cached_replies_import(
            text="question,answer,colour\nA?,B,red\n", tenants=None, user=None
        )
    theirs = "tenant,question,answer\nglobex,A?,B\n,C?,D\n"
    with pytest.raises(cached_reply_csv.CachedReplyImportError) as caught:
        cached_reply_csv.cached_replies_import(
            text=theirs, tenants=type(tenant).objects.filter(pk=tenant.pk), user=None
        )
    assert [e.split(":")[0] for e in caught.value.errors] == ["line 2", "line 3"]
    assert not CachedReply.objects.exists()


def test_the_same_question_twice_in_one_file_is_one_reply_updated(tenant):
    text = "tenant,question,answer\nacme,Wifi?,first\nacme,WIFI,second\n"
    result = cached_reply_csv.cached_replies_import(text=text, tenants=None, user=None)
    assert (result.created, result.updated) == (1, 1)
    assert CachedReply.objects.get().answer == "second"


def rows_csv(n, tenant="acme", start=0):
    lines = ["tenant,question,alternatives,answer"]
    lines += [
        f'{tenant},Question {i}?,"q {i}\n问题 {i}",Answer {i}.' for i in range(start, start + n)
    ]
    return "\n".join(lines) + "\n"


def test_an_import_reads_the_table_once_whatever_its_rows(tenant):
    """Each row once scanned every reply (2,000 rows took 53 s, growing with the square)."""
    cached_reply_csv.cached_replies_import(text=rows_csv(1500), tenants=None, user=None)
    with CaptureQueriesContext(connection) as queries:
        result = cached_reply_csv.cached_replies_import(
            text=rows_csv(1500, start=1000), tenants=None, user=None
        )
    assert (result.created, result.updated) == (1000, 500)
    assert CachedReply.objects.count() == 2500
    reads = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("SELECT")]
    assert len(reads) <= 3  # the tenants, the replies with their authors
    assert len(queries) <= 500 + 50  # an UPDATE per updated reply, INSERTs by the hundred


def test_an_import_refuses_what_the_form_refuses_with_the_same_words(tenant):
    taken = cached(tenant=tenant, question="Where is the canteen?", alternatives="canteen")
    text = (
        "tenant,question,alternatives,answer\n"
        "acme,Lunch?,Where is the CANTEEN,At noon\n"  # line 2: another reply's question
        "acme,Coffee?,,Floor 2\n"  # line 3: fine
        "acme,Tea?,coffee,Floor 3\n"  # line 4: line 3's question, in this very file
        "acme,?!,,Nothing\n"  # line 5: only punctuation
    )
    with pytest.raises(cached_reply_csv.CachedReplyImportError) as caught:
        cached_reply_csv.cached_replies_import(text=text, tenants=None, user=None)
    errors = caught.value.errors
    assert [e.split(":")[0] for e in errors] == ["line 2", "line 4", "line 5"]
    form = CachedReply(
        tenant=tenant, question="Lunch?", alternatives="Where is the CANTEEN", answer="At noon"
    )
    with pytest.raises(ValidationError) as by_form:
        form.full_clean(validate_unique=False)
    assert errors[0] == f"line 2: {' '.join(by_form.value.messages)}"
    assert "“coffee” already answers the cached reply “Coffee?”" in errors[1]
    assert "only punctuation or spaces" in errors[2]
    assert list(CachedReply.objects.all()) == [taken]


def test_an_update_may_free_a_phrasing_that_a_later_row_takes(tenant):
    cached(tenant=tenant, question="Wifi?", alternatives="guest network")
    text = (
        "tenant,question,alternatives,answer\n"
        "acme,Wifi?,,Ask the desk\n"  # drops "guest network" ...
        "acme,Guests?,guest network,Ask reception\n"  # ... which this row takes
    )
    result = cached_reply_csv.cached_replies_import(text=text, tenants=None, user=None)
    assert (result.created, result.updated) == (1, 1)
    assert CachedReply.objects.get(question="Guests?").alternatives == "guest network"


def test_a_file_over_the_row_limit_is_refused_whole(tenant, settings):
    settings.QASSIST_CACHED_REPLY_IMPORT_MAX_ROWS = 10
    with pytest.raises(cached_reply_csv.CachedReplyImportError, match="more than 10 rows"):
        cached_reply_csv.cached_replies_import(text=rows_csv(11), tenants=None, user=None)
    assert cached_reply_csv.cached_replies_import(text=rows_csv(10), tenants=None, user=None)
    assert CachedReply.objects.count() == 10


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(settings):
    settings.QASSIST_CACHED_REPLY_IMPORT_MAX_MB = 1
    with pytest.raises(cached_reply_csv.CachedReplyImportError, match="at most 1 MB"):
        cached_reply_csv.check_import_size(size=2**20 + 1)
    cached_reply_csv.check_import_size(size=2**20)


def test_an_import_writes_in_short_transactions(tenant, monkeypatch):
    monkeypatch.setattr(cached_reply_csv, "IMPORT_CHUNK_ROWS", 100)
    seen = []
    cached_reply_csv.cached_replies_import(
        text=rows_csv(250), tenants=None, user=None, progress=lambda *p: seen.append(p)
    )
    assert [p for p in seen if p[0] == "writing"] == [
        ("writing", 100, 250),
        ("writing", 200, 250),
        ("writing", 250, 250),
    ]
    assert ("checking", 250, 250) in seen
    assert seen.index(("checking", 250, 250)) < seen.index(("writing", 100, 250))


def test_formulas_survive_an_export_and_import(tenant):
    cached(tenant=tenant, question="=1+1?", alternatives="-minus\n'=quoted", answer="@here")
    exported = cached_reply_csv.cached_replies_export(
        replies=CachedReply.objects.select_related("tenant", "created_by")
    )
    assert "'=1+1?" in exported
    CachedReply.objects.all().delete()
    cached_reply_csv.cached_replies_import(text=exported, tenants=None, user=None)
    reply = CachedReply.objects.get()
    assert (reply.question, reply.alternatives, reply.answer) == (
        "=1+1?",
        "-minus\n'=quoted",
        "@here",
    )


def test_a_tenant_admins_import_does_not_set_hits_or_who_made_a_reply(
    tenant, tenant_admin, admin_user
):
    text = (
        "tenant,question,answer,hits,last_hit_at,created_at,created_by\n"
        "acme,Wifi?,guest,9999,2020-01-01T00:00:00+00:00,2001-01-01T00:00:00+00:00,admin\n"
    )
    mine = type(tenant).objects.filter(pk=tenant.pk)
    result = cached_reply_csv.cached_replies_import(text=text, tenants=mine, user=tenant_admin)
    assert result.ignored_columns == ("hits", "last_hit_at", "created_at", "created_by")
    reply = CachedReply.objects.get()
    assert (reply.hits, reply.last_hit_at, reply.created_by) == (0, None, tenant_admin)
    assert reply.created_at.year > 2001
    # A superuser restoring a backup does set them.
    result = cached_reply_csv.cached_replies_import(text=text, tenants=None, user=admin_user)
    assert result.ignored_columns == ()
    reply.refresh_from_db()
    assert (reply.hits, reply.created_by, reply.created_at.year) == (9999, admin_user, 2001)


def test_stored_messages_do_not_change_when_a_reply_is_served(member, tenant):
    # The lookup's result is shared by the process: serving it must not need to change it.
    reply = cached(tenant=tenant)
    turn = message_send(
        user=member, tenant=tenant, session_id=None, content="What is the VPN address?"
    )
    found = cached_reply_lookup(tenant=tenant, conversation=turn.conversation)
    assert found is not None
    assert found == reply
    reply_finish(
        reply_id=turn.reply.id, content=found.answer, finish_reason="stop", served_from_cache=True
    )
    assert Message.objects.get(id=turn.reply.id).served_from_cache
    assert not CachedReplyCandidate.objects.exists()
