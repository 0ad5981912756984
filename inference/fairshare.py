"""Who goes next among waiting requests: weighted fair share between tenants. Pure functions.

The same policy orders the engine's own waiting queue and the Redis queue shared by several
workers (`inference.transport`), so both keep one order.

- **Between tenants**: start-time fair queueing by admissions. Each tenant has a virtual time
  that grows by `1 / weight` each time one of its requests is admitted; the waiting tenant with
  the lowest virtual time goes next. A tenant that was idle restarts at the current virtual time
  (`FairClock.now`), so it cannot bank credit while away, and a tenant that sends 40 requests
  at once cannot make another tenant's 4 wait behind them: the second tenant's requests
  interleave with the first's backlog at once.
- **Weight** from the tenant's priority (`Tenant.priority`, a small integer, 0 by default):
  `2 ** priority`, priority clamped to [-4, 4]. Priority 1 gets twice the share of priority 0,
  priority -1 half of it.
- **Within a tenant**: a follow-up turn of a conversation (its history holds an assistant
  message) before a new conversation, then arrival order.
- **Aging**: a request waiting longer than `aging` seconds goes before every fair-share choice,
  oldest first, so nothing starves whatever the weights.
- **Background work** (titles) only when no reply waits; it is not charged to its tenant.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

MIN_PRIORITY = -4
MAX_PRIORITY = 4


def tenant_weight(priority: int) -> float:
    """A tenant's share for its priority: each step of priority doubles it."""
    return float(2.0 ** max(MIN_PRIORITY, min(MAX_PRIORITY, priority)))


@dataclass(frozen=True)
class Entry:
    """What the policy knows of a waiting request."""

    key: str
    tenant: str
    weight: float
    follow_up: bool
    background: bool
    arrival: float  # seconds on the clock `now` is read from


@dataclass
class FairClock:
    """Tenants' virtual times. `now` never goes back; an idle tenant restarts at it."""

    times: dict[str, float] = field(default_factory=dict)
    now: float = 0.0

    def start(self, tenant: str) -> float:
        return max(self.times.get(tenant, 0.0), self.now)

    def charge(self, tenant: str, weight: float) -> None:
        start = self.start(tenant)
        self.now = start
        self.times[tenant] = start + 1.0 / weight

    def copy(self) -> FairClock:
        return FairClock(dict(self.times), self.now)


def choose(entries: Sequence[Entry], clock: FairClock, now: float, aging: float) -> Entry | None:
    """The entry to admit next, or None when there is none."""
    if not entries:
        return None
    replies = [e for e in entries if not e.background]
    pool = replies or list(entries)
    aged = [e for e in pool if now - e.arrival >= aging]
    if aged:
        return min(aged, key=lambda e: e.arrival)
    heads: dict[str, Entry] = {}
    for e in pool:
        head = heads.get(e.tenant)
        if head is None or (not e.follow_up, e.arrival) < (not head.follow_up, head.arrival):
            heads[e.tenant] = e
    return min(heads.values(), key=lambda e: (clock.start(e.tenant), e.arrival))


def admitted(entry: Entry, clock: FairClock) -> None:
    """Charge the entry's tenant for its admission (background work is free)."""
    if not entry.background:
        clock.charge(entry.tenant, entry.weight)


def order(entries: Iterable[Entry], clock: FairClock, now: float, aging: float) -> list[Entry]:
    """Every entry in the order it would be admitted if nothing else arrived."""
    rest = list(entries)
    clock = clock.copy()
    result: list[Entry] = []
    while rest:
        entry = choose(rest, clock, now, aging)
        assert entry is not None
        rest.remove(entry)
        admitted(entry, clock)
        result.append(entry)
    return result
