"""The Content-Security-Policy holds on every kind of page without breaking it: Chromium
reports no violation on the login page, an error page, the chat, and the admin's pages."""

from __future__ import annotations

import pytest

from tests.browser.conftest import PASSWORD, Browsing

pytestmark = pytest.mark.browser


def test_no_page_breaks_the_policy(browsing: Browsing) -> None:
    page = browsing.page
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    page.goto(f"{browsing.live.url}/accounts/login/")
    page.goto(f"{browsing.live.url}/no/such/page")
    browsing.login("alice")

    page.goto(f"{browsing.live.url}/admin/login/")
    page.fill("input[name=username]", "root")
    page.fill("input[name=password]", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#content-main")
    for path in (
        "/admin/",
        "/admin/tenants/tenant/",
        "/admin/tenants/tenant/add/",
        "/admin/tenants/apikey/add/",
        "/admin/chat/chatsession/",
        "/admin/auth/user/1/change/",
    ):
        response = page.goto(f"{browsing.live.url}{path}")
        assert response is not None
        assert response.ok, path
        assert "script-src 'self'" in response.headers["content-security-policy"]
        page.wait_for_load_state("load")
    violations = [m for m in console if "Content Security Policy" in m or "Refused to" in m]
    assert violations == []
