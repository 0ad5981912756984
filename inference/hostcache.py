"""Which idle conversations' KV is kept in host memory once their sequence is taken. Pure logic.

The scheduler decides; the runner holds the bytes (`llama_state_seq_get_data` /
`llama_state_seq_set_data`). An entry is a tenant's exact token list: a returning prompt
restores the entry sharing its longest prefix within the same tenant, then prefills the rest.
The budget is in tokens (the engine converts the byte budget with the model's KV bytes per
token); least recently used entries go first.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

MIN_SAVE_TOKENS = 32  # shorter histories are recomputed in a step or two: not worth the bytes


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class HostEntry:
    entry_id: int
    tenant: str
    tokens: list[int]
    last_used: int


class HostCache:
    def __init__(self, capacity_tokens: int, *, min_tokens: int = MIN_SAVE_TOKENS) -> None:
        self.capacity_tokens = capacity_tokens
        self.min_tokens = min_tokens
        self.entries: dict[int, HostEntry] = {}
        self._ids = itertools.count(1)

    @property
    def used_tokens(self) -> int:
        return sum(len(e.tokens) for e in self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)

    def match(self, tenant: str, prompt: list[int], usable: int) -> tuple[HostEntry | None, int]:
        """The tenant's entry sharing the longest prefix with `prompt` (at most `usable`)."""
        best: HostEntry | None = None
        best_len = 0
        for entry in self.entries.values():
            if entry.tenant != tenant:
                continue  # never across tenants: a prefix hit would show in time to first token
            n = min(common_prefix_len(entry.tokens, prompt), usable)
            if n > best_len:
                best, best_len = entry, n
        return best, best_len

    def worth_saving(self, tenant: str, tokens: list[int]) -> bool:
        if len(tokens) < self.min_tokens or len(tokens) > self.capacity_tokens:
            return False
        n = len(tokens)
        return not any(e.tenant == tenant and e.tokens[:n] == tokens for e in self.entries.values())

    def save(
        self, tenant: str, tokens: list[int], tick: int, *, pinned: int | None = None
    ) -> tuple[int | None, list[int]]:
        """Add an entry; return its id (None when it cannot fit beside the pinned entry) and the
        ids of the entries dropped to make room: first the same tenant's entries that are
        prefixes of it, then the least recently used."""
        kept = self.entries.get(pinned) if pinned is not None else None
        if len(tokens) + (len(kept.tokens) if kept is not None else 0) > self.capacity_tokens:
            return None, []
        dropped = [
            e.entry_id
            for e in self.entries.values()
            if e.tenant == tenant and tokens[: len(e.tokens)] == e.tokens and e.entry_id != pinned
        ]
        for entry_id in dropped:
            del self.entries[entry_id]
        used = self.used_tokens
        for entry in sorted(self.entries.values(), key=lambda e: e.last_used):
            if used + len(tokens) <= self.capacity_tokens:
                break
            if entry.entry_id == pinned:
                continue
            del self.entries[entry.entry_id]
            used -= len(entry.tokens)
            dropped.append(entry.entry_id)
        entry_id = next(self._ids)
        self.entries[entry_id] = HostEntry(entry_id, tenant, list(tokens), tick)
        return entry_id, dropped
