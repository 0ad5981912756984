"""The admin's usage dashboards and cached-reply candidates in headless Chromium.

Screenshots (full page) land in test-artifacts/browser/: the deployment dashboard as a
superuser, acme's dashboard as its tenant admin, the candidates list and a promoted reply.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import ARTIFACTS, PASSWORD, Browsing

pytestmark = pytest.mark.browser


def admin_login(b: Browsing, username: str) -> None:
    page = b.page
    page.goto(f"{b.live.url}/admin/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")


def watch_console(page: Any) -> list[str]:
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on(
        "console",
        lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.on(
        "response",
        lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 400 else None,
    )
    return problems


def charts_drawn(page: Any) -> None:
    page.wait_for_selector("body[data-charts-ready='1']", state="attached")
    for canvas in ("#chart-tokens", "#chart-hourly", "#chart-ttft"):
        box = page.locator(canvas).bounding_box()
        assert box is not None
        assert box["width"] > 200
        assert box["height"] > 100


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_a_superuser_sees_the_deployment_dashboard_with_charts(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    problems = watch_console(page)
    admin_login(b, "root")
    page.goto(f"{b.live.url}/admin/tenants/usagerecord/dashboard/")
    charts_drawn(page)
    tenants = page.locator("table.usage-tenant tbody tr").all_inner_texts()
    assert any("Acme" in row for row in tenants)
    assert any("Beta Labs" in row for row in tenants)
    assert page.locator("#usage-reasons").inner_text().count("requests_per_minute") == 1
    shot(page, "admin-usage-deployment")
    assert problems == []


def test_a_tenant_admin_sees_their_tenants_dashboard_and_quota_bars(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    problems = watch_console(page)
    admin_login(b, "carol")
    page.goto(f"{b.live.url}/admin/tenants/tenant/{b.live.seed['acme_id']}/usage/")
    charts_drawn(page)
    assert page.locator(".usage-quotas meter").count() == 2
    assert "Beta" not in page.content()
    # Drill down to one user from the per-user table.
    page.locator("table.usage-user tbody a").first.click()
    page.wait_for_selector(".usage-drill")
    charts_drawn(page)
    page.go_back()
    charts_drawn(page)
    shot(page, "admin-usage-tenant")
    assert problems == []


def test_candidates_are_promoted_in_one_click_and_reviewed(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    admin_login(b, "carol")
    page.goto(f"{b.live.url}/admin/chat/cachedreplycandidate/")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 4
    assert "How do I connect to the VPN?" in rows.first.inner_text()
    shot(page, "admin-candidates")

    rows.first.get_by_role("button", name="Promote").click()
    page.wait_for_selector("#cachedreply_form")
    assert page.locator("textarea[name=answer]").input_value() == (
        "Open the VPN app and sign in with your badge."
    )
    assert not page.locator("input[name=enabled]").is_checked()
    assert "Nothing fuzzy" in page.locator("#cachedreply_form").inner_text()
    page.locator("textarea[name=alternatives]").fill("VPN?\nHow do I get on the VPN")
    page.locator("input[name=enabled]").check()
    page.locator("input[name=_continue]").click()
    page.wait_for_selector(".messagelist .success")
    shot(page, "admin-promoted-reply")

    acme = b.live.seed["acme_id"]
    page.goto(f"{b.live.url}/admin/chat/cachedreply/test-phrase/?tenant={acme}&phrase=vpn%EF%BC%9F")
    assert "Answered from the cache" in page.locator("#phrase-result").inner_text()


def test_batches_are_listed_with_progress_bars(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    admin_login(b, "carol")
    page.goto(f"{b.live.url}/admin/chat/batch/")
    bars = page.locator("#result_list progress")
    assert bars.count() == 2
    texts = page.locator("#result_list tbody").inner_text()
    assert "20 / 20 done" in texts
    assert "12 / 20 done, 2 failed, 6 cancelled" in texts
    shot(page, "admin-batches")
