"""Number formats of the usage pages."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def thousands(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


@register.filter
def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


@register.filter
def ms(value: int | None) -> str:
    if value is None:
        return "—"
    return f"{value:,} ms" if value < 10_000 else f"{value / 1000:.1f} s"


@register.filter
def mul(value: int | float, factor: float) -> float:
    return value * factor
