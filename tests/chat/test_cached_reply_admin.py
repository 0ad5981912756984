"""Cached replies and candidates in the admin, as a superuser and as a tenant admin."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from chat import cached_replies, cached_reply_csv
from chat.models import CachedReply, CachedReplyCandidate, CachedReplyImport
from chat.tasks import import_cached_replies

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:chat_cachedreply_changelist"


def client_for(user):
    client = Client()
    client.force_login(user)
    return client


def test_the_question_field_says_how_matching_works(admin_client):
    page = admin_client.get(reverse("admin:chat_cachedreply_add")).content.decode()
    assert "Nothing fuzzy" in page
    assert "never answered from the cache" in page
    assert "alternative phrasings" in page.lower()


def test_a_tenant_admin_tests_a_phrase_as_one_of_their_tenants(tenant_admin, tenant, other_tenant):
    reply = CachedReply.objects.create(tenant=tenant, question="Wifi?", answer="guest")
    client = client_for(tenant_admin)
    url = reverse("admin:chat_cachedreply_test_phrase")
    form = client.get(url).context["form"]
    assert list(form.fields["tenant"].queryset) == [tenant]

    hit = client.get(url, {"tenant": tenant.pk, "phrase": "ＷＩＦＩ？"})
    assert hit.context["result"].reply == reply
    assert "Answered from the cache" in hit.content.decode()

    follow_up = client.get(url, {"tenant": tenant.pk, "phrase": "wifi", "follow_up": "on"})
    assert follow_up.context["result"].reply is None
    assert "first message" in follow_up.content.decode()

    other = client.get(url, {"tenant": other_tenant.pk, "phrase": "wifi"})
    assert other.context["result"] is None  # not one of their tenants: the form refuses it


def test_the_changelist_offers_test_a_phrase_and_import(admin_client):
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert reverse("admin:chat_cachedreply_test_phrase") in page
    assert reverse("admin:chat_cachedreply_import") in page


def test_export_action_downloads_the_selected_replies_as_csv(admin_client, tenant):
    wifi = CachedReply.objects.create(tenant=tenant, question="Wifi?", answer="guest")
    CachedReply.objects.create(tenant=tenant, question="Lunch?", answer="noon")
    response = admin_client.post(
        reverse(CHANGELIST), {"action": "export_csv", "_selected_action": [wifi.pk]}
    )
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    body = response.content.decode()
    assert body.splitlines()[0] == ",".join(cached_reply_csv.CSV_COLUMNS)
    assert "Wifi?" in body
    assert "Lunch?" not in body


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def test_the_export_writes_formulas_as_text(admin_client, tenant, tenant_admin):
    """A tenant admin's formulas reach the superuser's spreadsheet as words."""
    reply = CachedReply.objects.create(
        tenant=tenant,
        question='=HYPERLINK("http://evil.example","Open")',
        alternatives="+cmd\n-x",
        answer="@SUM(1+1)*cmd|' /C calc'!A0",
    )
    response = admin_client.post(
        reverse(CHANGELIST), {"action": "export_csv", "_selected_action": [reply.pk]}
    )
    [row] = list(csv.DictReader(io.StringIO(response.content.decode())))
    for cell in row.values():
        assert not cell.startswith(FORMULA_STARTS), cell
    assert row["question"] == '\'=HYPERLINK("http://evil.example","Open")'
    assert row["answer"] == "'@SUM(1+1)*cmd|' /C calc'!A0"


def test_an_import_with_a_bad_row_lists_it_and_imports_nothing(admin_client, tenant):
    upload = SimpleUploadedFile(
        "replies.csv", b"tenant,question,answer\nacme,Wifi?,guest\nacme,Lunch?,\n", "text/csv"
    )
    response = admin_client.post(reverse("admin:chat_cachedreply_import"), {"file": upload})
    assert response.status_code == 200
    assert "line 3: answer" in response.content.decode()
    assert not CachedReply.objects.exists()


def test_a_good_import_says_what_it_did(admin_client, tenant):
    upload = SimpleUploadedFile(
        "replies.csv", "tenant,question,answer\nacme,Wifi?,访客网络\n".encode(), "text/csv"
    )
    response = admin_client.post(
        reverse("admin:chat_cachedreply_import"), {"file": upload}, follow=True
    )
    assert "Imported 1 cached reply(ies): 1 new, 0 updated." in response.content.decode()
    assert CachedReply.objects.get().answer == "访客网络"


def test_a_tenant_admin_cannot_import_into_another_tenant(tenant_admin, other_tenant):
    upload = SimpleUploadedFile("r.csv", b"tenant,question,answer\nglobex,Wifi?,guest\n")
    response = client_for(tenant_admin).post(
        reverse("admin:chat_cachedreply_import"), {"file": upload}
    )
    assert "line 2" in response.content.decode()
    assert not CachedReply.objects.exists()


# --- large imports in the background ---------------------------------------------------------


def csv_upload(rows, tenant="acme", extra=""):
    lines = ["tenant,question,answer" + extra]
    lines += [f"{tenant},Question {i}?,Answer {i}." + ("," * extra.count(",")) for i in range(rows)]
    return SimpleUploadedFile("big.csv", ("\n".join(lines) + "\n").encode(), "text/csv")


@pytest.fixture
def small_inline(monkeypatch):
    monkeypatch.setattr(cached_reply_csv, "IMPORT_INLINE_MAX_ROWS", 5)


def test_a_large_file_is_imported_in_the_background_with_its_progress_shown(
    tenant_admin, tenant, small_inline, import_dispatches, django_capture_on_commit_callbacks
):
    client = client_for(tenant_admin)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("admin:chat_cachedreply_import"), {"file": csv_upload(12)})
    job = CachedReplyImport.objects.get()
    status_url = reverse("admin:chat_cachedreply_import_status", args=[job.pk])
    assert response.status_code == 302
    assert response["Location"] == status_url
    assert import_dispatches == [job.pk]  # sent to Celery once committed
    assert not CachedReply.objects.exists()
    queued = client.get(status_url).content.decode()
    assert 'data-status="queued"' in queued
    assert 'http-equiv="refresh"' in queued  # the page follows it by itself

    assert import_cached_replies(str(job.pk)) == "done"  # what the Celery worker runs

    done = client.get(status_url).content.decode()
    assert "Imported 12 cached reply(ies):" in done
    assert 'http-equiv="refresh"' not in done
    assert CachedReply.objects.filter(tenant=tenant, created_by=tenant_admin).count() == 12
    job.refresh_from_db()
    assert job.text == ""  # the file is not kept
    assert job.rows_done == job.rows_total == 12
    # Listed on the import page, for the one who started it.
    assert status_url in client.get(reverse("admin:chat_cachedreply_import")).content.decode()


def test_a_refused_background_import_lists_every_bad_row_and_imports_nothing(
    admin_client, tenant, small_inline
):
    text = "tenant,question,answer\n" + "".join(
        f"acme,Q{i}?,{'' if i in (3, 7) else 'A'}\n" for i in range(10)
    )
    admin_client.post(
        reverse("admin:chat_cachedreply_import"),
        {"file": SimpleUploadedFile("bad.csv", text.encode())},
    )
    job = CachedReplyImport.objects.get()
    cached_reply_csv.cached_reply_import_run(import_id=job.pk)
    page = admin_client.get(reverse("admin:chat_cachedreply_import_status", args=[job.pk]))
    body = page.content.decode()
    assert "Nothing was imported." in body
    assert "line 5: answer" in body
    assert "line 9: answer" in body
    assert not CachedReply.objects.exists()


def test_a_run_happens_once_however_often_its_message_arrives(admin_client, tenant, small_inline):
    admin_client.post(reverse("admin:chat_cachedreply_import"), {"file": csv_upload(6)})
    job = CachedReplyImport.objects.get()
    assert cached_reply_csv.cached_reply_import_run(import_id=job.pk).status == "done"
    assert cached_reply_csv.cached_reply_import_run(import_id=job.pk).status == "done"
    assert CachedReply.objects.count() == 6


def test_an_import_whose_message_was_lost_is_sent_again_by_beat(
    admin_client, tenant, small_inline, import_dispatches
):
    admin_client.post(reverse("admin:chat_cachedreply_import"), {"file": csv_upload(6)})
    job = CachedReplyImport.objects.get()
    import_dispatches.clear()
    assert cached_reply_csv.cached_reply_imports_resume() == 0  # too soon to call it lost
    later = timezone.now() + timedelta(minutes=2)
    assert cached_reply_csv.cached_reply_imports_resume(now=later) == 1
    assert import_dispatches == [job.pk]


def test_someone_elses_import_is_not_found(
    tenant_admin, other_admin, admin_client, tenant, small_inline
):
    client_for(tenant_admin).post(reverse("admin:chat_cachedreply_import"), {"file": csv_upload(6)})
    url = reverse("admin:chat_cachedreply_import_status", args=[CachedReplyImport.objects.get().pk])
    assert client_for(other_admin).get(url).status_code == 404
    assert admin_client.get(url).status_code == 200  # superusers follow every import


@pytest.mark.parametrize(
    ("setting", "value", "upload", "says"),
    [
        ("QASSIST_CACHED_REPLY_IMPORT_MAX_ROWS", 10, lambda: csv_upload(11), "more than 10 rows"),
        (
            "QASSIST_CACHED_REPLY_IMPORT_MAX_MB",
            1,
            lambda: SimpleUploadedFile("big.csv", b"question,answer\n" + b"x" * 2**20),
            "at most 1 MB",
        ),
    ],
)
def test_a_file_over_a_limit_is_refused_with_a_reason(
    admin_client, tenant, settings, setting, value, upload, says
):
    setattr(settings, setting, value)
    response = admin_client.post(reverse("admin:chat_cachedreply_import"), {"file": upload()})
    assert response.status_code == 200
    assert says in response.content.decode()
    assert not CachedReply.objects.exists()
    assert not CachedReplyImport.objects.exists()


def test_a_tenant_admin_is_told_the_record_columns_were_not_applied(tenant_admin, tenant):
    upload = SimpleUploadedFile(
        "r.csv", b"tenant,question,answer,hits,created_by\nacme,Wifi?,guest,500,admin\n"
    )
    response = client_for(tenant_admin).post(
        reverse("admin:chat_cachedreply_import"), {"file": upload}, follow=True
    )
    assert "hits, created_by were not applied" in response.content.decode()
    assert CachedReply.objects.get().hits == 0


@pytest.fixture
def candidate(tenant):
    for _ in range(3):
        found = cached_replies.candidate_record(
            tenant=tenant, question="Where is the canteen?", answer="Ground floor."
        )
    return found


def test_candidates_are_listed_with_their_count_and_latest_answer(admin_client, candidate, tenant):
    cached_replies.candidate_record(tenant=tenant, question="Asked once", answer="…")
    response = admin_client.get(reverse("admin:chat_cachedreplycandidate_changelist"))
    rows = list(response.context["cl"].result_list)
    assert rows == [candidate]  # asked once is not recurring
    page = response.content.decode()
    assert "Ground floor." in page
    assert '<td class="field-count">3</td>' in page
    # A question asked once could be one person's words: listed only under the tenant's
    # content audit (docs/privacy.md).
    everything = admin_client.get(
        reverse("admin:chat_cachedreplycandidate_changelist"), {"recurring": "all"}
    )
    assert len(everything.context["cl"].result_list) == 1
    tenant.content_audit = True
    tenant.save()
    everything = admin_client.get(
        reverse("admin:chat_cachedreplycandidate_changelist"), {"recurring": "all"}
    )
    assert len(everything.context["cl"].result_list) == 2


def test_one_click_promotes_a_candidate_to_a_disabled_reply_to_review(tenant_admin, candidate):
    client = client_for(tenant_admin)
    listing = client.get(reverse("admin:chat_cachedreplycandidate_changelist")).content.decode()
    promote = reverse("admin:chat_cachedreplycandidate_promote", args=[candidate.pk])
    assert f'formaction="{promote}"' in listing

    response = client.post(promote)

    reply = CachedReply.objects.get()
    assert response["Location"] == reverse("admin:chat_cachedreply_change", args=[reply.pk])
    assert (reply.question, reply.answer, reply.enabled) == (
        "Where is the canteen?",
        "Ground floor.",
        False,
    )
    candidate.refresh_from_db()
    assert candidate.promoted_to == reply


def test_another_tenants_candidate_cannot_be_promoted(other_admin, candidate):
    response = client_for(other_admin).post(
        reverse("admin:chat_cachedreplycandidate_promote", args=[candidate.pk])
    )
    assert response.status_code == 404
    assert not CachedReply.objects.exists()


def test_the_draft_action_starts_a_background_draft_after_commit(
    admin_client, candidate, monkeypatch, django_capture_on_commit_callbacks
):
    started = []
    monkeypatch.setattr(
        "chat.cached_replies.candidate_draft_answer",
        lambda *, candidate_id: started.append(candidate_id),
    )
    monkeypatch.setattr("chat.tasks.engine_mode", lambda: "embedded")
    monkeypatch.setattr("chat.tasks.threading.Thread", _InlineThread)
    # Run inline here, the thread's own clean-up would close the test's connection.
    monkeypatch.setattr("chat.tasks.close_old_connections", lambda: None)
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            reverse("admin:chat_cachedreplycandidate_changelist"),
            {"action": "draft_answers", "_selected_action": [candidate.pk]},
            follow=True,
        )
    assert "Queued 1 draft(s), ahead of any batch" in response.content.decode()
    assert started == [candidate.pk]
    candidate.refresh_from_db()
    assert candidate.draft_status == CachedReplyCandidate.DraftStatus.PENDING


def test_with_redis_the_draft_goes_to_celery(
    candidate, monkeypatch, django_capture_on_commit_callbacks
):
    queued: list[int] = []
    monkeypatch.setattr("chat.tasks.engine_mode", lambda: "redis")
    monkeypatch.setattr("chat.tasks.draft_cached_reply_answer.delay", queued.append)
    from chat.tasks import draft_dispatch

    with django_capture_on_commit_callbacks(execute=True):
        draft_dispatch(candidate_id=candidate.pk)
    assert queued == [candidate.pk]


class _InlineThread:
    def __init__(self, target, daemon):
        self.target = target

    def start(self):
        self.target()
