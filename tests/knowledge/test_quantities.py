"""Quantities a question states and the conditions a table row sets on them
(knowledge.quantities), without a database or a model."""

from __future__ import annotations

import math

import pytest

from knowledge.quantities import Bound, bounds, cn_value, outside, quantities


def test_a_question_states_quantities_in_english_and_chinese() -> None:
    assert quantities("工作满七年的员工每年有多少天年假？") == [(7.0, "year")]
    assert quantities("报销单总额 3,000 欧元，要经过谁审批？") == [(3000.0, "eur")]
    assert quantities("How far ahead must I ask for a three-week holiday?") == [(3.0, "week")]
    assert quantities("我家离公司 40 公里，每月有额外的交通补贴吗？") == [(40.0, "km")]
    assert quantities("A trip costing EUR 1,200 in all") == [(1200.0, "eur")]
    # A calendar year is no length, a clock time and a bare number no quantity.
    assert quantities("2025年的年假有几天？") == []
    assert quantities("Is the office open at 9:30 on floor 3?") == []


def test_chinese_numerals_have_their_value() -> None:
    assert cn_value("十四") == 14
    assert cn_value("两千五百") == 2500
    assert cn_value("三万") == 30000
    assert cn_value("一般") is None


@pytest.mark.parametrize(
    ("cell", "header", "expected"),
    [
        ("0 to 2 years", "Completed years of service", Bound(0, 2, False, False, "year")),
        (
            "10 years or more",
            "Completed years of service",
            Bound(10, math.inf, False, False, "year"),
        ),
        ("more than 9 hours", "Scheduled flight time", Bound(9, math.inf, True, False, "hour")),
        ("up to EUR 1,000", "Amount", Bound(-math.inf, 1000, False, False, "eur")),
        ("3年以上", "工龄", Bound(3, math.inf, False, False, "year")),
        ("不满1年", "工龄", Bound(-math.inf, 1, False, True, "year")),
        ("满1年不满3年", "工龄", Bound(1, 3, False, True, "year")),
        ("0-2", "Years of service", Bound(0, 2, False, False, "year")),  # the header's unit
    ],
)
def test_a_condition_cell_bounds_its_quantity(cell: str, header: str, expected: Bound) -> None:
    assert bounds(cell, header) == [expected]


@pytest.mark.parametrize(
    ("cell", "header"),
    [
        ("10:00-15:00", "Core hours"),  # clock times are no range of hours
        ("Monday to Thursday", "Day"),
        ("EUR 220", "Hotel cap"),  # a value, not a bound
        ("London, Paris", "Cities"),
    ],
)
def test_a_cell_that_sets_no_bound_gives_none(cell: str, header: str) -> None:
    assert bounds(cell, header) == []


def test_a_row_leaves_out_a_quantity_its_condition_does_not_admit() -> None:
    service = "Completed years of service"
    assert outside([(7, "year")], [(service, "10 years or more")])
    assert outside([(7, "year")], [(service, "0 to 2 years")])
    assert not outside([(7, "year")], [(service, "6 to 9 years")])
    # The bounds' own ends: "满1年不满3年" admits one year, not three.
    assert not outside([(1, "year")], [("工龄", "满1年不满3年")])
    assert outside([(3, "year")], [("工龄", "满1年不满3年")])
    assert outside([(9, "hour")], [("Flight time", "more than 9 hours")])
    assert not outside([(10, "hour")], [("Flight time", "more than 9 hours")])
    # Another unit, or no quantity asked: nothing is left out.
    assert not outside([(7, "day")], [(service, "10 years or more")])
    assert not outside([], [(service, "10 years or more")])
