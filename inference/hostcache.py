"""Which idle conversations' KV is kept off the sequences once their sequence is taken: in host
memory, and beyond that on disk. Pure logic.

The scheduler decides; the runner holds the bytes (`llama_state_seq_get_data` /
`llama_state_seq_set_data`, and `inference.kvdisk` for files). An entry is a tenant's exact token
list: a returning prompt restores the entry sharing its longest prefix within the same tenant,
then prefills the rest. Budgets are in tokens (the engine converts the byte budgets with the
model's KV bytes per token).

A new entry goes to memory. When memory is over its budget, the least recently used entries
move to disk (a spill) if a disk budget is set, else they are dropped; the disk drops its own
least recently used entries the same way. A restore reads from either tier. Entries found on
disk when the worker starts (written by an earlier run of the same model file, see
`inference.kvdisk`) are adopted as disk entries.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

MIN_SAVE_TOKENS = 32  # shorter histories are recomputed in a step or two: not worth the bytes


def common_prefix_len(a: list[int], b: list[int]) -> int:
    """How many leading tokens `a` and `b` share. Slices are compared in C, halving the range
    that holds the first difference: a few compares of a few thousand tokens each, where a
    loop in Python takes a millisecond per thousand (the scheduler asks for every sequence)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo]; a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass
class HostEntry:
    entry_id: int
    tenant: str
    tokens: list[int]
    last_used: int
    on_disk: bool = False


@dataclass
class SaveResult:
    """What a save changed: the new entry (None when it does not fit), the entries dropped to
    make room, and the entries moved from memory to disk."""

    entry_id: int | None
    dropped: list[int] = field(default_factory=list)
    spilled: list[HostEntry] = field(default_factory=list)


class HostCache:
    def __init__(
        self,
        capacity_tokens: int,
        *,
        disk_capacity_tokens: int = 0,
        min_tokens: int = MIN_SAVE_TOKENS,
    ) -> None:
        self.capacity_tokens = capacity_tokens
        self.disk_capacity_tokens = disk_capacity_tokens
        self.min_tokens = min_tokens
        self.entries: dict[int, HostEntry] = {}
        self._ids = itertools.count(1)

    @property
    def used_tokens(self) -> int:
        """Tokens held in host memory."""
        return sum(len(e.tokens) for e in self.entries.values() if not e.on_disk)

    @property
    def disk_used_tokens(self) -> int:
        return sum(len(e.tokens) for e in self.entries.values() if e.on_disk)

    def __len__(self) -> int:
        return len(self.entries)

    def match(self, tenant: str, prompt: list[int], usable: int) -> tuple[HostEntry | None, int]:
        """The tenant's entry sharing the longest prefix with `prompt` (at most `usable`); of
        equal ones, one in memory (a restore from memory costs no read)."""
        best: HostEntry | None = None
        best_key = (0, False)
        for entry in self.entries.values():
            if entry.tenant != tenant:
                continue  # never across tenants: a prefix hit would show in time to first token
            n = min(common_prefix_len(entry.tokens, prompt), usable)
            key = (n, not entry.on_disk)
            if n > 0 and key > best_key:
                best, best_key = entry, key
        return best, best_key[0]

    def worth_saving(self, tenant: str, tokens: list[int]) -> bool:
        if len(tokens) < self.min_tokens or len(tokens) > self.capacity_tokens:
            return False
        n = len(tokens)
        return not any(e.tenant == tenant and e.tokens[:n] == tokens for e in self.entries.values())

    def save(
        self, tenant: str, tokens: list[int], tick: int, *, pinned: int | None = None
    ) -> SaveResult:
        """Add an entry in memory. Room is made first by dropping the same tenant's entries that
        are prefixes of it, then by moving the least recently used memory entries to disk (or
        dropping them without a disk budget). The pinned entry (about to be restored) stays."""
        kept = self.entries.get(pinned) if pinned is not None else None
        kept_in_memory = len(kept.tokens) if kept is not None and not kept.on_disk else 0
        if len(tokens) + kept_in_memory > self.capacity_tokens:
            return SaveResult(None)
        result = SaveResult(None)
        for entry in list(self.entries.values()):
            if (
                entry.tenant == tenant
                and tokens[: len(entry.tokens)] == entry.tokens
                and entry.entry_id != pinned
            ):
                del self.entries[entry.entry_id]
                result.dropped.append(entry.entry_id)
        used = self.used_tokens
        for entry in sorted(self.entries.values(), key=lambda e: e.last_used):
            if used + len(tokens) <= self.capacity_tokens:
                break
            if entry.on_disk or entry.entry_id == pinned:
                continue
            used -= len(entry.tokens)
            self._spill_or_drop(entry, pinned, result)
        result.entry_id = next(self._ids)
        self.entries[result.entry_id] = HostEntry(result.entry_id, tenant, list(tokens), tick)
        return result

    def adopt(self, tenant: str, tokens: list[int], tick: int = 0) -> int | None:
        """Add an entry already on disk (from an earlier run); None when the disk budget is full
        or it is too short to be worth a read."""
        n = len(tokens)
        if n < self.min_tokens or self.disk_used_tokens + n > self.disk_capacity_tokens:
            return None
        entry_id = next(self._ids)
        self.entries[entry_id] = HostEntry(entry_id, tenant, list(tokens), tick, on_disk=True)
        return entry_id

    def spill_all(self) -> SaveResult:
        """Move every memory entry to disk, most recently used first, as far as the disk
        budget goes (before a shutdown); the rest are dropped."""
        result = SaveResult(None)
        memory = [e for e in self.entries.values() if not e.on_disk]
        for entry in sorted(memory, key=lambda e: -e.last_used):
            self._spill_or_drop(entry, None, result)
        return result

    def discard(self, entry_id: int) -> None:
        """Forget an entry (its restore failed: the file went missing or did not check out)."""
        self.entries.pop(entry_id, None)

    def _spill_or_drop(self, entry: HostEntry, pinned: int | None, result: SaveResult) -> None:
        """Move a memory entry to disk when the disk budget can make room for it, else drop it."""
        if self._make_disk_room(len(entry.tokens), pinned, result.dropped):
            entry.on_disk = True
            result.spilled.append(entry)
        else:
            del self.entries[entry.entry_id]
            result.dropped.append(entry.entry_id)

    def _make_disk_room(self, n: int, pinned: int | None, dropped: list[int]) -> bool:
        """Drop disk entries, least recently used first, until `n` more tokens fit."""
        if n > self.disk_capacity_tokens:
            return False
        used = self.disk_used_tokens
        for entry in sorted(self.entries.values(), key=lambda e: e.last_used):
            if used + n <= self.disk_capacity_tokens:
                break
            if not entry.on_disk or entry.entry_id == pinned:
                continue
            del self.entries[entry.entry_id]
            dropped.append(entry.entry_id)
            used -= len(entry.tokens)
        return used + n <= self.disk_capacity_tokens
