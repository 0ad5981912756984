"""axe-core in the page under test: WCAG 2.2 AA checks for the browser tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.browser.conftest import Browsing

AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]
FAILING = {"serious", "critical"}


def axe_violations(b: Browsing) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it is now. Evaluated through
    Playwright, which the page's CSP does not govern, so the app never has to allow it."""
    page = b.page
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text(encoding="utf-8") + "\n;undefined")
    results = page.evaluate(
        "(tags) => axe.run(document, {runOnly: {type: 'tag', values: tags}})", TAGS
    )
    return [v for v in results["violations"] if v["impact"] in FAILING]


def describe(violations: list[dict[str, Any]]) -> str:
    lines = []
    for v in violations:
        lines.append(f"{v['impact']} {v['id']}: {v['help']} ({v['helpUrl']})")
        for node in v["nodes"][:5]:
            lines.append(f"    {node['target']}: {node['failureSummary']}")
    return "\n".join(lines)


def assert_accessible(b: Browsing) -> None:
    violations = axe_violations(b)
    assert violations == [], "\n" + describe(violations)
