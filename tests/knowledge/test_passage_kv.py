"""Company knowledge's side of passage KV computed once: the passages the engine finds in the
chat's prompts are those the index lists, so a question places what was computed when its
document was indexed; a deleted document's passages are dropped."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from chat.services.turns import message_send
from inference.engine import Engine
from inference.types import Delta, SamplingParams
from knowledge import prompt
from knowledge import services as knowledge_services
from knowledge.passage_kv import find_passages, passage_source
from tenants.models import Tenant
from tests.fakes import FakeRunner, make_engine
from tests.knowledge.conftest import Upload
from tests.knowledge.test_turns import POLICY

pytestmark = pytest.mark.django_db


def engine_for(runner: FakeRunner) -> Engine:
    return make_engine(
        runner,
        max_batch_tokens=256,
        max_queue=16,
        passage_kv=True,
        passage_cache_bytes=10_000_000,
        find_passages=find_passages,
        passage_source=passage_source,
    )


def run(engine: Engine) -> list[object]:
    events: list[object] = []
    for _ in range(100_000):
        if not engine.has_work:
            engine.passages.last_sync = float("-inf")  # the tests do not wait for the sync interval
            engine.idle()
            if not engine.has_work:
                return events
        events.extend(engine.step())
    raise AssertionError("engine did not finish")


def test_passage_spans_find_each_passage_body_in_a_user_message() -> None:
    given = [
        prompt.PassageText(4, "Travel", "Hotels, page 2", "London: GBP 240.\n\n[9] not a number"),
        prompt.PassageText(5, "IT", "", "The VPN host is vpn.example."),
    ]
    content = prompt.user_content("What is it?", given)
    spans = prompt.passage_spans(content)
    assert [content[a:b] for a, b in spans] == [
        prompt.passage_body(p.title, p.where, p.text) for p in given
    ]
    assert prompt.passage_spans("What is it?") == []
    assert prompt.passage_spans(prompt.user_content("q", [], none_found=True)) == []


def test_a_question_places_the_passages_computed_when_its_document_was_indexed(
    member: User, tenant: Tenant, upload: Upload
) -> None:
    upload(tenant, "travel-policy.md", POLICY)
    runner = FakeRunner(n_seq_max=4, max_seq_tokens=4096, n_ctx=16384)
    engine = engine_for(runner)
    run(engine)  # idle: the index's passages are computed
    assert engine.stats.passages_computed >= 1
    computed = engine.stats.passages_computed
    turn = message_send(
        user=member, tenant=tenant, session_id=None, content="What is the hotel cap per night?"
    )
    engine.add_request(
        "q", turn.conversation, SamplingParams(temperature=0, max_tokens=8), tenant=tenant.slug
    )
    events = run(engine)
    assert "".join(e.text for e in events if isinstance(e, Delta))  # the fake checked its KV
    assert runner.placements, "the question's passages were placed, not computed"
    assert engine.stats.passage_tokens_computed == 0
    assert engine.stats.passages_computed == computed  # nothing missed


def test_a_deleted_documents_passages_are_dropped_from_the_engine(
    tenant: Tenant, upload: Upload
) -> None:
    document = upload(tenant, "travel-policy.md", POLICY)
    runner = FakeRunner(n_seq_max=4, max_seq_tokens=4096, n_ctx=16384)
    engine = engine_for(runner)
    run(engine)
    assert runner.spans
    knowledge_services.document_delete(document=document)
    run(engine)
    assert not runner.spans
    assert engine.scheduler.spans is not None
    assert len(engine.scheduler.spans) == 0


def test_the_index_is_listed_again_only_when_it_changed(tenant: Tenant, upload: Upload) -> None:
    upload(tenant, "travel-policy.md", POLICY)
    first = passage_source({})
    [listed] = [s for s in first if s.tenant == tenant.slug]
    assert listed.warm
    assert listed.live == listed.warm  # no attachments
    assert passage_source({tenant.slug: listed.version}) == []
