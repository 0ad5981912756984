"""inference.passages: which passages' KV is kept, in memory or on disk, and what to compute."""

from inference.passages import FIRST_ID, SpanCache, WarmJob, WarmQueue, span_key


def tokens(n: int, base: int = 0) -> list[int]:
    return list(range(base, base + n))


def test_a_key_depends_on_the_passage_and_on_what_it_follows() -> None:
    assert span_key([1, 2], [3, 4]) == span_key([1, 2], [3, 4])
    assert span_key([1, 2], [3, 4]) != span_key([1, 2, 0], [3, 4])
    assert span_key([1, 2], [3, 4]) != span_key([1, 2], [3, 5])


def test_entries_are_kept_per_tenant_with_ids_apart_from_the_host_caches() -> None:
    cache = SpanCache(100)
    saved = cache.save("acme", "k", tokens(20), 7, tick=1)
    assert saved.entry_id is not None
    assert saved.entry_id >= FIRST_ID
    assert cache.get("acme", "k") is not None
    assert cache.get("globex", "k") is None


def test_memory_overflows_to_disk_least_recently_used_first_then_drops() -> None:
    cache = SpanCache(40, disk_capacity_tokens=40)
    a = cache.save("t", "a", tokens(20), 0, tick=1).entry_id
    b = cache.save("t", "b", tokens(20), 0, tick=2).entry_id
    c = cache.save("t", "c", tokens(20), 0, tick=3)
    assert [e.entry_id for e in c.spilled] == [a]
    assert cache.used_tokens == 40
    assert cache.disk_used_tokens == 20
    d = cache.save("t", "d", tokens(20), 0, tick=4)
    assert [e.entry_id for e in d.spilled] == [b]
    e = cache.save("t", "e", tokens(20), 0, tick=5)
    # Disk full: the oldest on disk (a) makes room for the next one moving there.
    assert a in e.dropped
    assert cache.get("t", "a") is None
    assert cache.disk_used_tokens == 40


def test_a_passage_used_from_disk_is_not_dropped_for_an_older_one() -> None:
    cache = SpanCache(20, disk_capacity_tokens=20)
    cache.save("t", "a", tokens(20), 0, tick=1)
    cache.save("t", "b", tokens(20), 0, tick=2)  # a to disk
    on_disk = cache.get("t", "a")
    assert on_disk is not None
    assert on_disk.on_disk
    cache.touch(on_disk, 3)  # a question placed it
    result = cache.save("t", "c", tokens(20), 0, tick=4)
    # b (memory, unused since tick 2) would have to push a out of the disk: b goes instead.
    assert cache.get("t", "b") is None
    assert cache.get("t", "a") is not None
    assert result.spilled == []


def test_prune_drops_what_no_document_holds_and_spill_all_moves_memory_to_disk() -> None:
    cache = SpanCache(100, disk_capacity_tokens=100)
    for key in "abc":
        cache.save("t", key, tokens(20), 0, tick=1)
    cache.save("u", "a", tokens(20), 0, tick=1)
    gone = cache.prune("t", {"b"})
    assert len(gone) == 2
    assert cache.keys_of("t") == {"b"}
    assert cache.keys_of("u") == {"a"}
    moved = cache.spill_all()
    assert len(moved.spilled) == 2
    assert cache.used_tokens == 0


def test_adopted_files_count_against_the_disk_budget() -> None:
    cache = SpanCache(10, disk_capacity_tokens=30)
    assert cache.adopt("t", "a", tokens(20), 5) is not None
    assert cache.adopt("t", "a", tokens(20), 5) is None  # already there
    assert cache.adopt("t", "b", tokens(20), 5) is None  # over the budget


def test_the_warm_queue_puts_what_people_ask_for_first_and_queues_a_key_once() -> None:
    queue = WarmQueue()
    listed = [WarmJob("t", k, (1,), (2,)) for k in "abc"]
    for job in listed:
        assert queue.push(job)
    assert not queue.push(listed[0])
    queue.push(WarmJob("t", "asked", (1,), (2,)), urgent=True)
    queue.push(listed[2], urgent=True)
    assert [queue.pop().key for _ in range(4)] == ["c", "asked", "a", "b"]  # type: ignore[union-attr]
    assert queue.pop() is None
