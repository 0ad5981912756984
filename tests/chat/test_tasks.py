from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone

from chat.models import ChatSession, Message
from chat.services.replies import REPLY_KEEPALIVE_SECONDS, STALE_STREAM_SECONDS, reply_keep_alive
from chat.tasks import interrupt_stale_replies
from tenants.models import Tenant

pytestmark = pytest.mark.django_db


def reply(session: ChatSession, *, content: str, age_seconds: int) -> Message:
    message = Message.objects.create(
        session=session,
        role=Message.Role.ASSISTANT,
        content=content,
        status=Message.Status.STREAMING,
    )
    # updated_at is auto_now: age it with an update, which skips save().
    Message.objects.filter(id=message.id).update(
        updated_at=timezone.now() - timedelta(seconds=age_seconds)
    )
    return message


@pytest.fixture
def session(tenant: Tenant, member: User) -> ChatSession:
    return ChatSession.objects.create(tenant=tenant, user=member, title="t")


def test_it_interrupts_replies_a_dead_process_left_streaming(session: ChatSession) -> None:
    stale = reply(session, content="half an ans", age_seconds=600)

    result = interrupt_stale_replies.apply()

    assert result.get() == 1
    stale.refresh_from_db()
    assert stale.status == Message.Status.INTERRUPTED
    assert stale.content == "half an ans"


def test_it_leaves_replies_still_streaming_alone(session: ChatSession) -> None:
    live = reply(session, content="still going", age_seconds=5)

    assert interrupt_stale_replies() == 0

    live.refresh_from_db()
    assert live.status == Message.Status.STREAMING


def test_beat_runs_it_every_half_minute() -> None:
    entries = [
        entry
        for entry in settings.CELERY_BEAT_SCHEDULE.values()
        if entry["task"] == interrupt_stale_replies.name
    ]
    assert len(entries) == 1
    assert entries[0]["schedule"] == 30.0


def test_a_reply_waiting_in_the_queue_is_kept_alive_by_its_web_process(
    session: ChatSession,
) -> None:
    waiting = reply(session, content="", age_seconds=STALE_STREAM_SECONDS + 5)
    reply_keep_alive(reply_id=waiting.id)

    assert interrupt_stale_replies() == 0
    waiting.refresh_from_db()
    assert waiting.status == Message.Status.STREAMING


def test_the_keepalive_comes_well_within_the_stale_threshold() -> None:
    # Several keepalives can be missed (a busy event loop) before a live reply looks orphaned.
    assert REPLY_KEEPALIVE_SECONDS * 3 <= STALE_STREAM_SECONDS
