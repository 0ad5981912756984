"""Passage KV computed once (inference.passages), driven by the strict fake runner: each
passage's KV computed after its anchor, kept, placed at its own position in later prompts (the
fake checks every placement lands where its sequence ends, and every sample that the sequence
holds exactly the prompt), tiers, eviction, deletion, tenants, failures."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest

from inference.engine import Engine
from inference.prompt_passages import WARM_PREFIX, PassageSet
from inference.scheduler import PlaceSpan, SchedulerOutput
from inference.types import ChatMessage, Delta, Done, Event, SamplingParams
from tests.fakes import FakeRunner, encode, make_engine

SYSTEM = ChatMessage("system", "You are Northwind's assistant. Answer from the passages.")
HOTEL = "Travel policy: the hotel limit in London is GBP 240 a night."
VPN = "IT: the VPN server is vpn.northwind.example, port 443, FortiClient."
LEAVE = "HR: after one year an employee gets 27 days of annual leave."
PASSAGE = re.compile(r"«(.+?)»", re.S)


def find(text: str) -> list[tuple[int, int]]:
    """The knowledge app's finder, for a format of the tests' own: «passage»."""
    return [m.span(1) for m in PASSAGE.finditer(text)]


def question(*passages: str, ask: str = "What is it?", lead: str = "") -> str:
    return lead + "".join(f"[{i}] «{p}»\n" for i, p in enumerate(passages, start=1)) + ask


def engine_for(runner: FakeRunner | None = None, **kwargs: Any) -> Engine:
    kwargs.setdefault("passage_cache_bytes", 1_000_000)
    return make_engine(
        runner or FakeRunner(n_seq_max=4),
        max_batch_tokens=64,
        passage_kv=True,
        find_passages=find,
        **kwargs,
    )


def run(engine: Engine, max_steps: int = 10_000) -> list[Event]:
    events: list[Event] = []
    for _ in range(max_steps):
        if not engine.has_work:
            engine.idle()
            if not engine.has_work:
                return events
        events.extend(engine.step())
    raise AssertionError("engine did not finish")


def ask(engine: Engine, rid: str, content: str, tenant: str = "acme") -> None:
    messages = [SYSTEM, ChatMessage("user", content)]
    assert engine.add_request(rid, messages, SamplingParams(temperature=0), tenant=tenant) == []


def text_of(events: Sequence[Event], rid: str) -> str:
    return "".join(e.text for e in events if isinstance(e, Delta) and e.request_id == rid)


def warm(engine: Engine, *texts: str, tenant: str = "acme", live: Sequence[str] = ()) -> None:
    engine.sync_passages([PassageSet(tenant, 1, (SYSTEM,), texts, tuple(live) or texts)])
    run(engine)


def anchor() -> list[int]:
    # The fake's template: "<system>" + content + "\n" + "<user>" before the user's content.
    return (
        encode("<system>", trusted=True)
        + encode(SYSTEM.content)
        + encode("\n", trusted=True)
        + encode("<user>", trusted=True)
    )


def position_of(engine: Engine, rid: str, text: str) -> int:
    request = engine.scheduler.get(rid)
    assert request is not None
    spans = {request.prompt_tokens[s.start : s.end] == encode(text): s for s in request.spans}
    return spans[True].start


def test_a_passage_is_computed_once_after_the_anchor_and_kept() -> None:
    runner = FakeRunner(n_seq_max=4)
    engine = engine_for(runner)
    warm(engine, HOTEL)
    assert len(runner.span_saves) == 1
    [kept] = runner.spans.values()
    assert kept.tokens == encode(HOTEL)
    assert kept.anchor == anchor()  # after the system prompt and the user's header, nothing else
    assert kept.start == len(anchor())
    assert engine.stats.passages_computed == 1
    # The anchor was computed with it (nothing held it yet); none of it is a reply's prompt.
    assert engine.stats.warm_tokens == len(anchor()) + len(encode(HOTEL))
    assert engine.stats.prefill_tokens == 0
    # The sequence keeps the anchor (the next passage shares it), not the passage.
    assert [s.tokens for s in engine.scheduler.slots if s.tokens] == [anchor()]


def test_a_question_places_a_kept_passage_at_its_own_position_instead_of_computing_it() -> None:
    runner = FakeRunner(n_seq_max=4)
    engine = engine_for(runner)
    warm(engine, HOTEL)
    computed_before = engine.stats.prefill_tokens
    ask(engine, "q", question(HOTEL))
    at = position_of(engine, "q", HOTEL)
    events = run(engine)
    assert text_of(events, "q") == "echo: " + question(HOTEL)  # the fake checked every token
    [placement] = runner.placements
    assert placement.at == at
    assert placement.n_tokens == len(encode(HOTEL))
    # Computed after the anchor, placed after the anchor and "[1] «": moved by that much.
    assert placement.shift == at - len(anchor()) == len(encode("[1] «"))
    assert engine.stats.placed_tokens == len(encode(HOTEL))
    assert engine.stats.passage_tokens_computed == 0
    prompt = len(encode(question(HOTEL))) + len(anchor()) + len(encode("\n<assistant>"))
    computed = engine.stats.prefill_tokens - computed_before
    assert computed <= prompt - len(encode(HOTEL))
    done = next(e for e in events if isinstance(e, Done))
    assert done.cached_tokens >= len(encode(HOTEL))


def test_three_passages_are_placed_in_order_and_nothing_between_them_is_skipped() -> None:
    runner = FakeRunner(n_seq_max=4)
    engine = engine_for(runner)
    warm(engine, HOTEL, VPN, LEAVE)
    ask(engine, "q", question(VPN, HOTEL, LEAVE))
    starts = [position_of(engine, "q", p) for p in (VPN, HOTEL, LEAVE)]
    events = run(engine)
    assert text_of(events, "q") == "echo: " + question(VPN, HOTEL, LEAVE)
    assert [p.at for p in runner.placements] == starts
    # The glue between passages ("»\n[2] «") is computed: each placement goes in a step after
    # the chunk that ends right before it, so no prompt chunk ever covers a placed passage.
    request_chunks = [
        (batch_index, length)
        for batch_index, batch in enumerate(runner.batches)
        for rid, length in batch.prefills
        if rid == "q"
    ]
    assert len(request_chunks) >= 4  # before passage 1, between them (2), after the last
    assert engine.stats.placed_tokens == sum(len(encode(p)) for p in (HOTEL, VPN, LEAVE))


def test_a_passage_nobody_computed_is_computed_in_place_then_kept_for_the_next_question() -> None:
    runner = FakeRunner(n_seq_max=4)
    engine = engine_for(runner)
    ask(engine, "first", question(VPN, ask="Which server?"))
    events = run(engine)
    assert text_of(events, "first").endswith("Which server?")
    assert runner.placements == []
    assert engine.stats.passage_tokens_computed == len(encode(VPN))
    # The miss was queued and computed once the reply was done: no client heard of it.
    assert engine.stats.passages_computed == 1
    assert not any(e.request_id.startswith(WARM_PREFIX) for e in events)
    # Another conversation: its prompt shares no prefix with the first one's beyond the anchor.
    ask(engine, "second", question(VPN, ask="Which port?", lead="Passages: "))
    events = run(engine)
    assert text_of(events, "second").endswith("Which port?")
    assert [p.n_tokens for p in runner.placements] == [len(encode(VPN))]


def test_the_first_tokens_of_each_passage_are_computed_again_when_asked() -> None:
    runner = FakeRunner(n_seq_max=4)
    engine = engine_for(runner, passage_recompute=5)
    warm(engine, HOTEL, VPN)
    ask(engine, "q", question(HOTEL, VPN))
    starts = [position_of(engine, "q", p) for p in (HOTEL, VPN)]
    events = run(engine)
    assert text_of(events, "q") == "echo: " + question(HOTEL, VPN)
    assert [(p.at, p.n_tokens) for p in runner.placements] == [
        (starts[0] + 5, len(encode(HOTEL)) - 5),
        (starts[1] + 5, len(encode(VPN)) - 5),
    ]
    # Each placed part moved as far as its passage did: the cells skipped are recomputed.
    assert [p.shift for p in runner.placements] == [s - len(anchor()) for s in starts]
    assert engine.stats.passage_tokens_computed == 10


@pytest.mark.parametrize("recompute", [0, 2])
def test_a_prefix_shared_into_a_passage_stops_where_the_passage_is_placed(recompute: int) -> None:
    # Two passages of one document begin alike. The second question's prompt shares the first
    # one's conversation up to a few tokens into its passage: it reuses them up to where the
    # passage's kept KV goes, and places the rest, instead of computing it in place.
    paris = "Travel policy: the hotel limit in Paris is EUR 220 a night."
    runner = FakeRunner(n_seq_max=4)
    engine = engine_for(runner, passage_recompute=recompute)
    warm(engine, HOTEL, paris)
    ask(engine, "london", question(HOTEL, ask="And London?"))
    run(engine)
    assert len(runner.placements) == 1
    ask(engine, "paris", question(paris, ask="And Paris?"))
    start = position_of(engine, "paris", paris)
    held = max(len(s.tokens) for s in engine.scheduler.slots)
    assert held > start + recompute  # the first conversation is kept, sharing "Travel policy: …"
    events = run(engine)
    assert text_of(events, "paris") == "echo: " + question(paris, ask="And Paris?")
    second = runner.placements[1]
    assert (second.at, second.n_tokens) == (start + recompute, len(encode(paris)) - recompute)
    # The first question computed its passage's first tokens; the second reused those it
    # shares (the same tokens after the same prefix: the same KV) and computed none.
    assert engine.stats.passage_tokens_computed == recompute


def test_a_passage_placed_at_the_wrong_position_fails_in_the_fake() -> None:
    # The fake is strict about positions: a scheduler that placed a passage anywhere but at the
    # end of its sequence would fail every test above.
    runner = FakeRunner(n_seq_max=4)
    engine = engine_for(runner)
    warm(engine, HOTEL)
    [entry] = runner.spans
    runner.kv[2] = encode("<system>abc", trusted=True)
    wrong = PlaceSpan(seq_id=2, entry=entry, offset=0, at=3, n_tokens=len(encode(HOTEL)))
    with pytest.raises(AssertionError, match="placed at 3 after 11 tokens"):
        runner.execute(SchedulerOutput(kv_ops=[wrong]))


def test_a_placement_that_fails_leaves_the_question_to_compute_its_prompt() -> None:
    runner = FakeRunner(n_seq_max=4)
    engine = engine_for(runner)
    warm(engine, HOTEL)
    runner.fail_placements = True
    ask(engine, "q", question(HOTEL))
    events = run(engine)
    assert text_of(events, "q") == "echo: " + question(HOTEL)
    assert engine.stats.restore_failures == 1
    assert runner.placements == []
    # The entry is forgotten (and its KV freed); computing the question queued it again.
    assert engine.stats.passages_computed == 2
    runner.fail_placements = False
    ask(engine, "again", question(HOTEL, ask="And?", lead="Again: "))
    run(engine)
    assert len(runner.placements) == 1


def test_passage_kv_is_kept_within_its_tenant() -> None:
    runner = FakeRunner(n_seq_max=4)
    engine = engine_for(runner)
    warm(engine, HOTEL, tenant="acme")
    ask(engine, "other", question(HOTEL), tenant="globex")
    events = run(engine)
    assert text_of(events, "other") == "echo: " + question(HOTEL)
    assert runner.placements == []  # another tenant's KV would show in its time to first token
    assert engine.stats.passage_tokens_computed == len(encode(HOTEL))
    assert engine.scheduler.spans is not None
    assert {e.tenant for e in engine.scheduler.spans.entries.values()} == {"acme", "globex"}


def test_another_system_prompt_is_another_anchor() -> None:
    runner = FakeRunner(n_seq_max=4)
    engine = engine_for(runner)
    warm(engine, HOTEL)
    messages = [ChatMessage("system", "Be brief."), ChatMessage("user", question(HOTEL))]
    engine.add_request("q", messages, SamplingParams(temperature=0), tenant="acme")
    run(engine)
    assert runner.placements == []  # its KV was computed after other text


def test_passages_beyond_memory_go_to_disk_and_are_placed_from_there() -> None:
    runner = FakeRunner(n_seq_max=4, kv_bytes_per_token=100)
    per_passage = 100 * max(len(encode(p)) for p in (HOTEL, VPN, LEAVE))
    runner.span_budget_bytes = per_passage
    runner.span_disk_budget_bytes = 2 * per_passage
    engine = engine_for(runner, passage_cache_bytes=per_passage, passage_disk_bytes=2 * per_passage)
    warm(engine, HOTEL, VPN, LEAVE)
    assert len(runner.spans) == 1
    assert len(runner.span_disk) == 2
    ask(engine, "q", question(HOTEL))  # the least recently computed: on disk
    events = run(engine)
    assert text_of(events, "q") == "echo: " + question(HOTEL)
    assert len(runner.placements) == 1
    assert runner.placements[0].entry in runner.span_disk


def test_the_least_recently_used_passage_goes_when_disk_is_full() -> None:
    runner = FakeRunner(n_seq_max=4)
    size = 100 * max(len(encode(p)) for p in (HOTEL, VPN, LEAVE))
    engine = engine_for(runner, passage_cache_bytes=size, passage_disk_bytes=size)
    warm(engine, HOTEL, VPN)
    ask(engine, "q", question(HOTEL))  # HOTEL (on disk) used again: VPN is the older one now
    run(engine)
    warm(engine, LEAVE, live=(HOTEL, VPN, LEAVE))
    spans = engine.scheduler.spans
    assert spans is not None
    kept = sorted(runner.spans.values(), key=lambda s: s.tokens) + [
        s for _, _, s in runner.span_disk.values()
    ]
    assert {bytes(t - 10 for t in s.tokens).decode() for s in kept} == {HOTEL, LEAVE}
    assert len(spans) == 2


def test_a_deleted_documents_passages_are_dropped() -> None:
    runner = FakeRunner(n_seq_max=4)
    engine = engine_for(runner)
    warm(engine, HOTEL, VPN)
    assert len(runner.spans) == 2
    engine.sync_passages([PassageSet("acme", 2, (SYSTEM,), (VPN,), (VPN,))])
    engine.idle()
    assert [bytes(t - 10 for t in s.tokens).decode() for s in runner.spans.values()] == [VPN]
    ask(engine, "q", question(HOTEL))
    run(engine)
    assert runner.placements == []


def test_passages_are_computed_from_the_index_only_when_the_engine_is_idle() -> None:
    runner = FakeRunner(n_seq_max=4)
    listed: list[dict[str, int]] = []

    def source(known: dict[str, int]) -> list[PassageSet]:
        listed.append(dict(known))
        if known.get("acme") == 7:
            return []  # nothing changed since
        return [PassageSet("acme", 7, (SYSTEM,), (HOTEL, VPN), (HOTEL, VPN))]

    engine = engine_for(runner, passage_source=source)
    ask(engine, "q", "hello")
    engine.step()  # a reply runs: the index is not read
    assert listed == []
    events = run(engine)
    assert text_of(events, "q") == "echo: hello"
    assert listed == [{}]
    assert engine.stats.passages_computed == 2
    engine.passages.last_sync = float("-inf")
    engine.idle()
    assert listed == [{}, {"acme": 7}]  # asked again with the version it has; nothing to do
    assert not engine.has_work


def test_replies_go_before_passages_being_computed() -> None:
    runner = FakeRunner(n_seq_max=2)
    engine = engine_for(runner)
    engine.sync_passages([PassageSet("acme", 1, (SYSTEM,), (HOTEL, VPN, LEAVE), ())])
    ask(engine, "q", "hello")
    events = run(engine)
    first = next(i for i, b in enumerate(runner.batches) if any(r == "q" for r, _ in b.prefills))
    assert all(
        not any(r.startswith(WARM_PREFIX) for r, _ in b.prefills) for b in runner.batches[:first]
    )
    assert text_of(events, "q") == "echo: hello"
    assert not any(e.request_id.startswith(WARM_PREFIX) for e in events)
    assert engine.stats.passages_computed == 3


def test_kept_passages_survive_a_restart() -> None:
    runner = FakeRunner(n_seq_max=4)
    engine = engine_for(runner, passage_disk_bytes=1_000_000)
    warm(engine, HOTEL)
    engine.persist()
    assert len(runner.span_disk) == 1
    assert not runner.spans
    # The next run finds the file (`inference.kvdisk` checks it holds what its header says).
    tenant, key, span = next(iter(runner.span_disk.values()))
    again = FakeRunner(n_seq_max=4)
    again.left_span_files = {"f.kv": (tenant, key, span.tokens, span.start)}
    engine = engine_for(again, passage_disk_bytes=1_000_000)
    ask(engine, "q", question(HOTEL))
    events = run(engine)
    assert text_of(events, "q") == "echo: " + question(HOTEL)
    assert len(again.placements) == 1


def test_a_question_whose_passages_are_kept_is_short_for_the_prefill_gate() -> None:
    runner = FakeRunner(n_seq_max=4)
    engine = engine_for(runner)
    warm(engine, HOTEL, VPN, LEAVE)
    ask(engine, "q", question(HOTEL, VPN, LEAVE))
    request = engine.scheduler.waiting.ordered()[0]
    full = len(request.prompt_tokens)
    estimate = engine.scheduler.uncached_estimate(request)
    assert estimate <= full - sum(len(encode(p)) for p in (HOTEL, VPN, LEAVE))
    run(engine)


def test_without_a_model_that_can_move_keys_passages_are_computed() -> None:
    runner = FakeRunner(n_seq_max=4, passage_kv=False)
    engine = engine_for(runner)
    assert engine.scheduler.spans is None
    ask(engine, "q", question(HOTEL))
    events = run(engine)
    assert text_of(events, "q") == "echo: " + question(HOTEL)
    assert runner.placements == []
    assert runner.span_saves == []


def test_a_tool_computes_every_listed_passage_before_it_asks() -> None:
    runner = FakeRunner(n_seq_max=4)
    engine = engine_for(runner)
    kept = engine.compute_passages([PassageSet("eval", 1, (SYSTEM,), (HOTEL, VPN), (HOTEL, VPN))])
    assert kept == 2
    assert engine.stats.passages_computed == 2
    assert not engine.has_work
    ask(engine, "q", question(HOTEL, VPN), tenant="eval")
    run(engine)
    assert len(runner.placements) == 2
