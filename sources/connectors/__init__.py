"""What a source is made of, whatever its kind: a connector walks it and reads its files.

Each kind is a module of its own (folder, website, webdav). A connector's `walk` yields what it
finds, in an order that is the same from one run to the next (so that a resumed run walks the
same way), with what the source says of each file without reading it (size, mtime, ETag,
Last-Modified); `read` reads one, never more than a limit. Two kinds of failure:

- `SourceError`: the source as a whole cannot be synced (unreachable, credentials refused, a
  redirect loop, a folder outside what may be synced). The run fails with this reason, nothing
  is removed, and its documents keep answering.
- `ItemError`: one file or page cannot be read (too large, a symbolic link loop, a server
  error); the run goes on, the item keeps its last good document, and the reason is shown.

A walk that could not see everything (a folder it could not list) says so (`complete` False):
then nothing is removed at the end of the run, since a missing file may only be unseen.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from knowledge.parsers.detect import EXTENSIONS


class SourceError(Exception):
    """The source as a whole cannot be synced; the message is for people."""


class ItemError(Exception):
    """One file or page cannot be read; the message is for people."""


@dataclass
class Found:
    """A file or page found by a walk."""

    key: str  # stable within the source: a relative path, or a URL
    name: str  # a file name with the extension its format is read by
    origin: str  # where people find it: the file's path in the share, the page's URL
    size: int | None = None
    mtime: float | None = None
    etag: str = ""
    last_modified: str = ""
    content: bytes | None = None  # read already (a page: its links were needed)
    unchanged: bool = False  # the server said so (304 Not Modified)
    links: list[str] = field(default_factory=list)
    error: str = ""  # found but not readable (a symbolic link loop, a path outside the root)


@dataclass(frozen=True)
class Known:
    """What the last sync kept of an item, for the connector's own decisions."""

    etag: str
    last_modified: str
    links: list[str]
    done: bool  # already synced by the run going on (it is being resumed)


Lookup = Callable[[str], "Known | None"]


class Connector(abc.ABC):
    """One source's files. `known(key)` says what the last sync kept of one."""

    def __init__(self, *, known: Lookup, file_limit: int) -> None:
        self.known = known
        self.file_limit = file_limit
        self.complete = True  # set False when part of the source could not be listed

    @abc.abstractmethod
    def walk(self) -> Iterator[Found]: ...

    @abc.abstractmethod
    def read(self, found: Found) -> bytes: ...

    def close(self) -> None:  # noqa: B027 - most connectors hold nothing
        pass

    def __enter__(self) -> Connector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def readable_name(name: str) -> bool:
    """A file whose extension the knowledge parsers read, and not an editor's lock or a
    hidden file (`~$budget.docx`, `.~lock.report.docx#`, `.DS_Store`)."""
    base = PurePosixPath(name).name
    if not base or base.startswith((".", "~$", "~")):
        return False
    return PurePosixPath(base).suffix.lower() in EXTENSIONS


def too_large(size: int, limit: int) -> str:
    return (
        f"The file is {human(size)}; a document may be at most {human(limit)} "
        "(QASSIST_KNOWLEDGE_MAX_FILE_MB). It was not read."
    )


def human(size: int) -> str:
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if size >= scale:
            return f"{size / scale:,.1f} {unit}"
    return f"{size} bytes"
