"""The incremental decisions of a sync, pure: what to do with a file or page the walk found,
given what the last sync kept of it, and which items leave at the end of a run.

- What the source says without reading the file decides first: a matching ETag (the server's
  own version), else Last-Modified, else mtime and size (a folder) means unchanged, and the file
  is not read. Anything else is read.
- A file read is compared by sha256 with what was indexed: the same bytes (a file touched, or a
  server without validators) change nothing but the metadata kept. A file with the same bytes
  as a document the knowledge base has already (a page under two addresses, a copied file) is
  kept without a document of its own, and checked like the others next time.
- Pruning: an item the whole walk did not see is gone from the source; only a complete walk
  (every folder listed, no limit reached, no failure of the source) removes anything.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from sources.connectors import Found


class Action(enum.Enum):
    DONE = "done"  # synced by this run already (it is being resumed): nothing to do
    UNCHANGED = "unchanged"  # the source says it did not change: not read
    READ = "read"  # read it, then compare its sha256 (`after_read`)
    FAIL = "fail"  # the walk found it unreadable (Found.error)


class Outcome(enum.Enum):
    ADD = "add"  # a new document
    SAME = "same"  # the same bytes as indexed: only the metadata is kept
    REPLACE = "replace"  # a new version of its document


@dataclass(frozen=True)
class Kept:
    """What the last sync kept of an item (sources.models.SourceItem)."""

    has_document: bool
    failed: bool
    seen_run: int | None
    etag: str = ""
    last_modified: str = ""
    mtime: float | None = None
    size: int | None = None
    sha256: str = ""


def decide(kept: Kept | None, found: Found, *, run_id: int) -> Action:
    if kept is not None and kept.seen_run == run_id:
        return Action.DONE
    if found.error:
        return Action.FAIL
    if kept is None or kept.failed or not (kept.has_document or kept.sha256):
        return Action.READ
    if found.unchanged:
        return Action.UNCHANGED
    if found.etag and kept.etag:
        return Action.UNCHANGED if found.etag == kept.etag else Action.READ
    if found.last_modified and kept.last_modified:
        same_size = found.size is None or kept.size is None or found.size == kept.size
        if found.last_modified == kept.last_modified and same_size:
            return Action.UNCHANGED
        return Action.READ
    if (
        found.mtime is not None
        and found.size is not None
        and found.mtime == kept.mtime
        and found.size == kept.size
    ):
        return Action.UNCHANGED
    return Action.READ


def after_read(kept: Kept | None, sha256: str) -> Outcome:
    if kept is not None and kept.sha256 == sha256 and not kept.failed:
        return Outcome.SAME  # (an item without a document: a copy of another one, still)
    if kept is None or not kept.has_document:
        return Outcome.ADD
    return Outcome.REPLACE


def to_prune(items: Iterable[tuple[int, int | None]], *, run_id: int, complete: bool) -> list[int]:
    """The ids of items (id, the run that last saw it) the finished run did not see: gone from
    the source. None when the walk was not complete: an unseen item may only be unlisted."""
    if not complete:
        return []
    return [item_id for item_id, seen in items if seen != run_id]
