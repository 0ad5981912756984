"""Cells a spreadsheet would run are written as text, and read back as they were."""

from __future__ import annotations

import csv
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qassist.csv_cells import csv_writer, neutralise_cell, restore_cell

FORMULAS = [
    '=HYPERLINK("http://evil.example","click")',
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "+cmd",
    "-2+3",
    "=cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
    "'=1+1",  # a text that really begins with a quote and then a formula
    "''@x",
]


@pytest.mark.parametrize("text", FORMULAS)
def test_a_formula_is_written_as_text_and_read_back_as_it_was(text: str) -> None:
    written = neutralise_cell(text)
    assert isinstance(written, str)
    assert written.startswith("'")
    assert restore_cell(written) == text


@pytest.mark.parametrize("text", ["", "hello", "'tis", "a=b", "5", "C#", " =1", "你好"])
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert neutralise_cell(text) == text
    assert restore_cell(text) == text


def test_numbers_are_left_alone() -> None:
    assert neutralise_cell(-3) == -3
    assert neutralise_cell(2.5) == 2.5


@given(st.text())
def test_any_text_survives_the_round_trip_and_never_starts_a_formula(text: str) -> None:
    written = neutralise_cell(text)
    assert isinstance(written, str)
    assert restore_cell(written) == text
    assert not written.startswith(("=", "+", "-", "@", "\t", "\r"))


def test_the_writer_neutralises_every_cell_of_a_row() -> None:
    out = io.StringIO()
    csv_writer(out).writerow(["=1", "ok", 7, "@x"])
    assert next(csv.reader(io.StringIO(out.getvalue()))) == ["'=1", "ok", "7", "'@x"]
