"""Quantities a question states and the conditions a table row sets on them.

A table's rows are alike but for their condition: "Completed years of service: 6 to 9 years;
Annual leave: 29 days" and, a row below, "10 years or more; … 30 days". Asked "工作满七年的员工
每年有多少天年假？", a small model answered "30天" from the last row; the row is about annual
leave, so the support check found the figure held by a sentence about the question and cited it.
What tells the rows apart is the question's own quantity, seven years, against each row's
condition. `outside` says when a row's condition leaves the question's quantity out, so its
figures are not the answer.

Pure functions over text: a quantity is a number with a unit (years, months, weeks, days, hours,
kilometres, euros, yuan), in English or Chinese, digits or Chinese numerals.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from knowledge.asked import CLOCK_OR_DATE

# Dashes as ASCII hyphens: "6–9 years", "10:00—15:00".
DASHES = str.maketrans({"–": "-", "—": "-", "−": "-", "～": "-", "~": "-"})
_CN_DIGITS = dict(zip("零一二两三四五六七八九", (0, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9), strict=True))
_CN_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10000}


def cn_value(run: str) -> int | None:
    """Chinese numerals as a number (十四 → 14, 两千五百 → 2500), None for anything else."""
    total = section = digit = 0
    seen = False
    for char in run:
        if char in _CN_DIGITS:
            digit = _CN_DIGITS[char]
            seen = True
        elif char in _CN_UNITS:
            unit = _CN_UNITS[char]
            if unit == 10000:
                total = (total + section + digit) * unit
                section = 0
            else:
                section += (digit or 1) * unit
            digit = 0
            seen = True
        else:
            return None
    return total + section + digit if seen else None


# Units, each as the words that write it: the longest first, so "个月" is months, not "月".
_UNITS: dict[str, tuple[str, ...]] = {
    "year": ("years", "year", "yrs", "周年", "年"),
    "month": ("months", "month", "个月"),
    "week": ("weeks", "week", "个星期", "星期", "周"),
    "day": (
        "working days",
        "working day",
        "calendar days",
        "days",
        "day",
        "个工作日",
        "工作日",
        "天",
    ),
    "hour": ("hours", "hour", "个小时", "小时"),
    "km": ("kilometres", "kilometers", "kilometre", "kilometer", "km", "公里", "千米"),
    "eur": ("euros", "euro", "eur", "€", "欧元"),
    "cny": ("yuan", "rmb", "cny", "元"),
}
_UNIT_OF = {word: unit for unit, spelt in _UNITS.items() for word in spelt}
_UNIT = "|".join(sorted((re.escape(w) for w in _UNIT_OF), key=len, reverse=True))
_NUMBER = r"\d+(?:\.\d+)?|[零一二两三四五六七八九十百千万]+"
_WORDS = {
    word: value
    for value, word in enumerate(
        "one two three four five six seven eight nine ten eleven twelve".split(),  # noqa: SIM905
        start=1,
    )
}
_WORD = "|".join(_WORDS)
# "7 years", "七年", "40 公里", "EUR 3,000", "3,000 欧元", "a three-week holiday".
_QUANTITY = re.compile(
    rf"(?P<n>{_NUMBER}|\b(?:{_WORD})\b)\s*-?\s*(?P<unit>{_UNIT})(?![a-z])|"
    rf"(?P<cur>eur|€|rmb|cny)\s*(?P<m>\d+(?:\.\d+)?)",
    re.I,
)


def _value(text: str) -> float | None:
    text = text.lower()
    if text in _WORDS:
        return float(_WORDS[text])
    if text[:1].isdigit():
        return float(text)
    value = cn_value(text)
    return float(value) if value is not None else None


def _normal(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(DASHES)
    return re.sub(r"(?<=\d)[,\s](?=\d{3}(?!\d))", "", text)  # 3,000 and 3 000 are 3000


def quantities(text: str) -> list[tuple[float, str]]:
    """Each number with a unit in `text`, as (value, unit): "工作满七年" → [(7, "year")]."""
    out = []
    for match in _QUANTITY.finditer(_normal(text)):
        if match.group("cur"):
            value, unit = _value(match.group("m")), _UNIT_OF[match.group("cur").lower()]
        else:
            value, unit = _value(match.group("n")), _UNIT_OF[match.group("unit").lower()]
        # "2025年" is a calendar year, not a length of service
        if value is not None and not (unit == "year" and value >= 1000):
            out.append((value, unit))
    return out


# What a condition cell says of its quantity: a range, at least, more than, at most, less than.
_N = rf"(?P<a>{_NUMBER})"
_THEN_N = rf"\s*(?:eur|€)?\s*{_N}"  # "more than EUR 1,000"
_UNIT_THEN = rf"\s*(?:{_UNIT})?\s*"
_BOUNDS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.I), kind)
    for pattern, kind in (
        (rf"{_N}{_UNIT_THEN}(?:-|to|until|至|到)\s*(?P<b>{_NUMBER})", "range"),
        (rf"(?:at least|minimum(?: of)?|from|(?<!不)满|不少于|不低于){_THEN_N}", "min"),
        (rf"{_N}{_UNIT_THEN}(?:or (?:more|longer|over|above)|\+|及以上|或以上|以上)", "min"),
        (rf"(?:more than|over|above|longer than|exceeding|超过|多于|高于){_THEN_N}", "over"),
        (rf"(?:at most|up to|maximum(?: of)?|no more than|最多|不超过){_THEN_N}", "max"),
        (rf"{_N}{_UNIT_THEN}(?:or (?:less|fewer|shorter|under)|及以下|或以下|以内)", "max"),
        (
            rf"(?:less than|fewer than|under|below|shorter than|不满|不足|少于|低于){_THEN_N}",
            "under",
        ),
        (rf"{_N}\s*(?:{_UNIT})?\s*以下", "under"),
    )
)


class Bound(NamedTuple):
    low: float
    high: float
    above: bool  # strictly above low ("more than 9 hours")
    below: bool  # strictly below high ("less than 5 years", "不满3年")
    unit: str

    def admits(self, value: float) -> bool:
        if value < self.low or (self.above and value == self.low):
            return False
        return not (value > self.high or (self.below and value == self.high))


def bounds(cell: str, header: str = "") -> list[Bound]:
    """The quantities a condition cell admits: "0 to 2 years" → 0 to 2 years, "10 years or
    more" → 10 years and up, "more than 9 hours" → above 9 hours, "满1年不满3年" → from 1 year to
    below 3. The unit is the cell's own or, where the cell has none, its
    header's ("Years of service: 0-2"). A cell that sets no bound (a value, a name) gives none."""
    text = CLOCK_OR_DATE.sub(" ", _normal(cell))  # 10:00-15:00 is no range of hours
    units = re.findall(_UNIT, text, re.I) or re.findall(_UNIT, _normal(header), re.I)
    if not units:
        return []
    unit = _UNIT_OF[units[0].lower()]
    low, high, above, below, found = -math.inf, math.inf, False, False, False
    for pattern, kind in _BOUNDS:  # every bound the cell sets: "满1年不满3年" is 1 to 3 years
        for match in pattern.finditer(text):
            a = _value(match.group("a"))
            b = _value(match.group("b")) if kind == "range" else None
            if a is None or (kind == "range" and (b is None or b < a)):
                continue
            found = True
            if kind == "range" and b is not None:
                low, high = max(low, a), min(high, b)
            elif kind in ("min", "over"):
                low, above = max(low, a), above or kind == "over"
            else:
                high, below = min(high, a), below or kind == "under"
    return [Bound(low, high, above, below, unit)] if found else []


def outside(asked: Iterable[tuple[float, str]], conditions: Sequence[tuple[str, str]]) -> bool:
    """Whether a row's condition cells (header, value) leave out a quantity the question states
    in their unit: seven years against "10 years or more", 3,000 EUR against "up to EUR 1,000".
    A cell with no bound, or in a unit the question does not state, leaves nothing out."""
    asked = list(asked)
    for header, value in conditions:
        for bound in bounds(value, header):
            if any(unit == bound.unit and not bound.admits(n) for n, unit in asked):
                return True
    return False
