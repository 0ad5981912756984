"""Passage KV computed once: which passages' KV is kept, in host memory or on disk. Pure logic.

A question about company documents carries up to 900 tokens of passages (docs/knowledge.md),
and with hundreds of documents most of them were read by nobody this hour: computing them is
the wall on 2 cores (docs/BENCHMARKS.md, "How many employees one machine serves"). So each
passage's KV is computed once, at a fixed place: right after the conversation's opening (the
tenant's system prompt and the template up to the first user message, the *anchor*), and kept.
A question that carries the passage gets those cells placed at the passage's own position
(`PlaceSpan`: the runner rotates the keys by the distance, `inference.kvblob`); only the tokens
between and after the passages are computed. TurboRAG (EMNLP 2025) does the same with chunks;
what a placed passage misses is attention to the passages before it in this prompt. The first
`recompute` tokens of each placed passage are computed again in place, where that matters
(CacheBlend, FusionRAG: a few tokens suffice).

- Keys: `span_key(anchor, tokens)`, a digest of the anchor's and the passage's tokens, so a
  passage is placed only where its exact tokens follow the same opening, and kept per tenant
  (a hit shows in the time to first token: no tenant may learn what another's documents say).
- Tiers: like the conversations' host cache (`inference.hostcache`), memory first, the least
  recently used moving to disk beyond its budget, the disk dropping its own least recently
  used; budgets in tokens. Entry ids are apart from the host cache's (`FIRST_ID`), so a failed
  restore names one or the other.
- Who computes them: `WarmQueue` holds the passages to compute, those of questions that missed
  first (they are being asked), then what the documents' index lists (`inference.engine`).
"""

from __future__ import annotations

import hashlib
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field

FIRST_ID = 1 << 40  # span entry ids start here: apart from host-cache entries
MIN_SPAN_TOKENS = 16  # shorter passages are computed in place: a step, not worth a file


def digest(tokens: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, tokens)).encode()).hexdigest()


def span_key(anchor: list[int], tokens: list[int]) -> str:
    """The key of a passage's KV: its tokens, computed after exactly `anchor`."""
    return f"{digest(anchor)[:16]}:{digest(tokens)[:32]}"


@dataclass
class SpanEntry:
    entry_id: int
    tenant: str
    key: str
    tokens: list[int]  # the passage's tokens
    start: int  # the position they were computed at (the anchor's length)
    last_used: int
    on_disk: bool = False


@dataclass
class SpanSave:
    """What saving a passage changed: its entry (None: it does not fit), the entries dropped and
    those moved to disk to make room."""

    entry_id: int | None
    dropped: list[int] = field(default_factory=list)
    spilled: list[SpanEntry] = field(default_factory=list)


class SpanCache:
    def __init__(self, capacity_tokens: int, *, disk_capacity_tokens: int = 0) -> None:
        self.capacity_tokens = capacity_tokens
        self.disk_capacity_tokens = disk_capacity_tokens
        self.entries: dict[int, SpanEntry] = {}
        self._by_key: dict[tuple[str, str], int] = {}
        self._ids = itertools.count(FIRST_ID)

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self.entries

    @property
    def used_tokens(self) -> int:
        return sum(len(e.tokens) for e in self.entries.values() if not e.on_disk)

    @property
    def disk_used_tokens(self) -> int:
        return sum(len(e.tokens) for e in self.entries.values() if e.on_disk)

    def get(self, tenant: str, key: str) -> SpanEntry | None:
        entry_id = self._by_key.get((tenant, key))
        return self.entries[entry_id] if entry_id is not None else None

    def keys_of(self, tenant: str) -> set[str]:
        return {key for (t, key) in self._by_key if t == tenant}

    def save(self, tenant: str, key: str, tokens: list[int], start: int, tick: int) -> SpanSave:
        """A passage's KV kept in memory; room made by moving the least recently used to disk
        (dropped without a disk budget). An older entry for the same key is replaced."""
        result = SpanSave(None)
        if len(tokens) > self.capacity_tokens:
            return result
        old = self._by_key.get((tenant, key))
        if old is not None:
            self._remove(old)
            result.dropped.append(old)
        used = self.used_tokens
        for entry in sorted(self.entries.values(), key=lambda e: e.last_used):
            if used + len(tokens) <= self.capacity_tokens:
                break
            if entry.on_disk:
                continue
            used -= len(entry.tokens)
            self._spill_or_drop(entry, result)
        entry_id = next(self._ids)
        self._add(SpanEntry(entry_id, tenant, key, list(tokens), start, tick))
        result.entry_id = entry_id
        return result

    def adopt(self, tenant: str, key: str, tokens: list[int], start: int) -> int | None:
        """A passage an earlier run left on disk; None when the disk budget is full."""
        if (tenant, key) in self._by_key:
            return None
        if self.disk_used_tokens + len(tokens) > self.disk_capacity_tokens:
            return None
        entry_id = next(self._ids)
        self._add(SpanEntry(entry_id, tenant, key, list(tokens), start, 0, on_disk=True))
        return entry_id

    def spill_all(self) -> SpanSave:
        """Every passage in memory to disk, most recently used first, as far as the disk budget
        goes (before a shutdown: the next run of the same model finds them)."""
        result = SpanSave(None)
        memory = [e for e in self.entries.values() if not e.on_disk]
        for entry in sorted(memory, key=lambda e: -e.last_used):
            self._spill_or_drop(entry, result)
        return result

    def touch(self, entry: SpanEntry, tick: int) -> None:
        entry.last_used = tick

    def discard(self, entry_id: int) -> None:
        """Forget an entry (its restore failed)."""
        if entry_id in self.entries:
            self._remove(entry_id)

    def prune(self, tenant: str, live: set[str]) -> list[int]:
        """Drop the tenant's passages whose keys are not in `live` (their document was deleted
        or changed): what a deleted document said does not stay on disk."""
        gone = [
            e.entry_id for e in self.entries.values() if e.tenant == tenant and e.key not in live
        ]
        for entry_id in gone:
            self._remove(entry_id)
        return gone

    def _add(self, entry: SpanEntry) -> None:
        self.entries[entry.entry_id] = entry
        self._by_key[(entry.tenant, entry.key)] = entry.entry_id

    def _remove(self, entry_id: int) -> None:
        entry = self.entries.pop(entry_id)
        self._by_key.pop((entry.tenant, entry.key), None)

    def _spill_or_drop(self, entry: SpanEntry, result: SpanSave) -> None:
        """Move a memory entry to disk, making room there by dropping entries used less
        recently than it; when that is not enough, it is the one dropped (a passage placed from
        disk a moment ago is worth more than one nobody asked for since it was computed)."""
        n = len(entry.tokens)
        older = sorted(
            (e for e in self.entries.values() if e.on_disk and e.last_used < entry.last_used),
            key=lambda e: e.last_used,
        )
        used = self.disk_used_tokens
        room = self.disk_capacity_tokens - used + sum(len(e.tokens) for e in older)
        if n > room:
            self._remove(entry.entry_id)
            result.dropped.append(entry.entry_id)
            return
        for other in older:
            if used + n <= self.disk_capacity_tokens:
                break
            used -= len(other.tokens)
            self._remove(other.entry_id)
            result.dropped.append(other.entry_id)
        entry.on_disk = True
        result.spilled.append(entry)


@dataclass(frozen=True)
class WarmJob:
    """A passage to compute once: its tenant, the anchor it follows, its tokens."""

    tenant: str
    key: str
    anchor: tuple[int, ...]
    tokens: tuple[int, ...]


class WarmQueue:
    """Passages waiting to be computed: those a question missed go first (people are asking
    about them), then those the documents' index lists, in its order. A key is queued once."""

    def __init__(self, max_size: int = 100_000) -> None:
        self.max_size = max_size
        self._jobs: OrderedDict[tuple[str, str], WarmJob] = OrderedDict()

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, item: tuple[str, str]) -> bool:
        return item in self._jobs

    def push(self, job: WarmJob, *, urgent: bool = False) -> bool:
        ident = (job.tenant, job.key)
        if ident in self._jobs:
            if urgent:
                self._jobs.move_to_end(ident, last=False)
            return False
        if len(self._jobs) >= self.max_size:
            return False
        self._jobs[ident] = job
        if urgent:
            self._jobs.move_to_end(ident, last=False)
        return True

    def pop(self) -> WarmJob | None:
        if not self._jobs:
            return None
        return self._jobs.popitem(last=False)[1]

    def drop_tenant(self, tenant: str, live: set[str]) -> None:
        for ident in [i for i in self._jobs if i[0] == tenant and i[1] not in live]:
            del self._jobs[ident]
