"""The admin's home as a dashboard (issue #31 point 9), in headless Chromium: a superuser sees
every tenant with its numbers and, for a tenant not set up yet, its first steps, follows one to
where it is done and finds it checked off; a tenant admin sees their tenant only; a staff account
without a tenant is told what to do. axe-core in both colour schemes on each.

Screenshots (full page) land in test-artifacts/browser/: admin-home-superuser.png,
admin-home-tenant-admin.png, admin-home-no-workspace.png.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import Browsing
from tests.browser.test_admin_knowledge import check_accessible
from tests.browser.test_admin_pages import admin_login, shot, watch_console

pytestmark = pytest.mark.browser


def accessible_in_both_schemes(b: Browsing, problems: list[str]) -> None:
    """axe-core on the page in each scheme, loaded afresh in it (the admin's links fade from
    one scheme's colour to the other's: a check mid-fade measures neither)."""
    for scheme in ("dark", "light"):
        b.page.emulate_media(color_scheme=scheme)
        b.page.reload()
        b.page.wait_for_selector("#content-main")
        check_accessible(b, problems)


def test_a_superuser_follows_a_first_step_and_sees_it_checked_off(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    problems = watch_console(page)
    admin_login(b, "root")
    cards = page.locator("#dashboard article.qa-tenant h3").all_inner_texts()
    assert [c.strip() for c in cards[:2]] == ["Acme", "Beta Labs"]
    assert page.locator("#engine-health").inner_text().startswith("Engine:")
    # The sections are still there, below the dashboard.
    assert (page.locator("#content-main .module caption").first.text_content() or "").strip() == (
        "Tenants and people"
    )
    beta = page.locator("#tenant-beta")
    assert "requests" in beta.locator(".qa-usage").inner_text()
    limits = beta.locator(".qa-step-limits")
    assert "to do" in limits.inner_text()
    accessible_in_both_schemes(b, problems)
    shot(page, "admin-home-superuser")

    limits.get_by_role("link", name="Set limits").click()
    page.fill("input[name=daily_token_quota]", "5000000")
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist")
    page.goto(f"{b.live.url}/admin/")
    assert "done" in page.locator("#tenant-beta .qa-step-limits").inner_text()
    assert problems == []


def test_a_tenant_admin_sees_their_own_tenant_only(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    problems = watch_console(page)
    admin_login(b, "carol")
    cards = page.locator("#dashboard article.qa-tenant h3").all_inner_texts()
    assert [c.strip() for c in cards] == ["Acme"]
    acme = page.locator("#tenant-acme")
    assert "Members" in acme.inner_text()
    assert "Open feedback" in acme.inner_text()
    assert "Beta" not in page.locator("#content-main").inner_text()
    acme.get_by_role("link", name="requests").first.click()
    page.wait_for_selector("body[data-charts-ready='1']", state="attached")
    page.go_back()
    page.wait_for_selector("#dashboard")
    accessible_in_both_schemes(b, problems)
    shot(page, "admin-home-tenant-admin")
    assert problems == []


def test_staff_without_a_tenant_are_told_what_to_do(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    problems = watch_console(page)
    admin_login(b, "sam")
    box = page.locator("#no-workspace")
    assert box.get_by_role("heading").inner_text() == "Your staff account runs no workspace yet"
    assert "root@example.com" in box.inner_text()
    assert "Tenant admin" in box.inner_text()
    assert page.locator("#dashboard").count() == 0
    accessible_in_both_schemes(b, problems)
    shot(page, "admin-home-no-workspace")
    assert problems == []
    # The chat's own page (a 403: no workspace) sends them here.
    page.goto(f"{b.live.url}/")
    page.locator("#no-tenant-staff").get_by_role("link", name="the admin").click()
    page.wait_for_selector("#no-workspace")
