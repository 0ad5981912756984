"""CSV files that are safe to open in a spreadsheet, and read back as they were written.

Every CSV qassist writes (cached replies, usage) goes through `csv_writer`. A text cell that a
spreadsheet would run as a formula — one beginning with `=`, `+`, `-`, `@`, a tab or a carriage
return (OWASP's list) — is written with a single quote in front, which spreadsheets show as text:
a tenant admin's `=HYPERLINK(...)` question reaches a superuser's spreadsheet as words, not as a
link or a command. Numbers are left alone (a negative number is not a formula).

The quote must not change the data on a round trip (export, edit, import), so the rule is
reversible: a cell is quoted when it begins with any number of quotes followed by one of those
characters, and `restore_cell` removes one quote from exactly those cells. So `=1+1` is written
`'=1+1` and read back as `=1+1`; a text that really began with `'=` is written `''=` and read
back as `'=`; a quote before anything else (`'tis`) is never touched.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from typing import Any, Protocol

_FORMULA = re.compile(r"'*[=+\-@\t\r]")


class _Writable(Protocol):
    def write(self, text: str, /) -> Any: ...


def neutralise_cell(cell: object) -> object:
    """The cell as it is written: text a spreadsheet would run gets a quote in front."""
    if isinstance(cell, str) and _FORMULA.match(cell):
        return "'" + cell
    return cell


def restore_cell(cell: str) -> str:
    """A cell as read from a file qassist wrote: the quote `neutralise_cell` added, removed."""
    if cell.startswith("'") and _FORMULA.match(cell, 1):
        return cell[1:]
    return cell


class CsvWriter:
    """csv.writer whose every row is neutralised; `writerow` returns what `out.write` did."""

    def __init__(self, out: _Writable) -> None:
        self._writer = csv.writer(out)

    def writerow(self, row: Iterable[object]) -> Any:
        return self._writer.writerow([neutralise_cell(cell) for cell in row])


def csv_writer(out: _Writable) -> CsvWriter:
    return CsvWriter(out)
