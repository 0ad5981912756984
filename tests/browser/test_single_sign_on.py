"""Signing in with the company's identity provider in Chromium: qassist's login page, the
provider's own sign-in and consent pages (panva's oidc-provider, run by the test), back to the
chat; a group removed at the provider closing the open chat; declining; the provider down.
Screenshots of each step go to test-artifacts/browser/signin-*.png."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import ARTIFACTS, Browsing, LiveServer, _live_server, _open_page
from tests.browser.conftest import _free_port as _port
from tests.signin.idp import CLIENT_ID, CLIENT_SECRET, LiveProvider, start_provider

pytestmark = pytest.mark.browser

PROVIDER_NAME = "Northwind ID"
PRIYA = {"email": "priya@northwind.example", "name": "Priya Patel", "groups": ["sales"]}
# The provider's development pages import a web font: nothing leaves the machine.
OFF_MACHINE = re.compile(r"^https?://(?!127\.0\.0\.1[:/])")


@pytest.fixture(scope="module")
def sso_server(
    requirements: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, LiveProvider]]:
    port = _port()
    provider = start_provider([f"http://127.0.0.1:{port}/accounts/oidc/callback/"])
    try:
        provider.reset_accounts()
        provider.put_account("priya", **PRIYA)
        for live in _live_server(
            tmp_path_factory,
            port=port,
            seed_more=["tests.browser.seed_signin"],
            QASSIST_OIDC_ISSUER=provider.issuer,
            QASSIST_OIDC_CLIENT_ID=CLIENT_ID,
            QASSIST_OIDC_CLIENT_SECRET=CLIENT_SECRET,
            QASSIST_OIDC_SCOPES="openid profile email groups",
            QASSIST_OIDC_NAME=PROVIDER_NAME,
            # Re-checked with the provider every 2 s, the chat socket every second: a group
            # removed there closes the chat within a few seconds.
            QASSIST_OIDC_RECHECK_SECONDS="2",
            QASSIST_WS_RECHECK_SECONDS="1",
        ):
            yield live, provider
    finally:
        provider.stop()


@pytest.fixture
def sso_browsing(
    browser: Any, sso_server: tuple[LiveServer, LiveProvider], request: pytest.FixtureRequest
) -> Iterator[Browsing]:
    for browsing in _open_page(browser, sso_server[0], request, {"width": 1280, "height": 800}):
        browsing.page.context.route(OFF_MACHINE, lambda route: route.abort())
        yield browsing


def shot(browsing: Browsing, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browsing.page.screenshot(path=str(ARTIFACTS / f"signin-{name}.png"))


def sign_in_at_provider(browsing: Browsing, login: str, *, screenshots: bool = False) -> None:
    page = browsing.page
    page.goto(f"{browsing.live.url}/")
    page.wait_for_selector("#sign-in-sso")
    assert page.locator("#sign-in-sso").inner_text() == f"Sign in with {PROVIDER_NAME}"
    assert page.locator("input[name=password]").count() == 1  # local passwords stay
    if screenshots:
        shot(browsing, "1-login-page")
    page.click("#sign-in-sso")
    page.wait_for_selector("input[name=login]")
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "any password")
    if screenshots:
        shot(browsing, "2-provider-sign-in")
    page.click("button[type=submit]")
    page.wait_for_selector("button:has-text('Continue')")
    if screenshots:
        shot(browsing, "3-provider-consent")


def test_an_employee_signs_in_with_the_provider_and_chats(
    sso_browsing: Browsing, sso_server: tuple[LiveServer, LiveProvider]
) -> None:
    page = sso_browsing.page
    sign_in_at_provider(sso_browsing, "priya", screenshots=True)
    page.click("button:has-text('Continue')")
    page.wait_for_selector("#input")
    sso_browsing.wait_connected()
    assert page.url == f"{sso_browsing.live.url}/"
    assert "priya" in page.content()
    shot(sso_browsing, "4-chat")


def test_a_group_removed_at_the_provider_closes_the_open_chat(
    sso_browsing: Browsing, sso_server: tuple[LiveServer, LiveProvider]
) -> None:
    _live, provider = sso_server
    page = sso_browsing.page
    provider.put_account("priya", **PRIYA)
    sign_in_at_provider(sso_browsing, "priya")
    page.click("button:has-text('Continue')")
    page.wait_for_selector("#input")
    sso_browsing.wait_connected()
    provider.put_account("priya", **{**PRIYA, "groups": ["marketing"]})
    # The session's next re-check with the provider removes the membership; the socket's
    # own re-check then closes it (4403) and the page says so. Bounded, not timed.
    page.wait_for_selector("text=no longer in an active workspace", timeout=60_000)
    shot(sso_browsing, "5-group-removed")
    provider.put_account("priya", **PRIYA)


def test_declining_at_the_provider_ends_on_a_page_that_says_so(
    sso_browsing: Browsing,
) -> None:
    page = sso_browsing.page
    sign_in_at_provider(sso_browsing, "bob")
    page.click("text=[ Cancel ]")
    page.wait_for_selector("[data-signin-error=denied]")
    assert "You did not sign in" in page.content()
    assert "Traceback" not in page.content()
    shot(sso_browsing, "6-declined")


def test_the_provider_down_ends_on_a_page_that_says_so(
    sso_browsing: Browsing, sso_server: tuple[LiveServer, LiveProvider]
) -> None:
    # Last in this module: it stops the provider.
    _live, provider = sso_server
    page = sso_browsing.page
    page.goto(f"{sso_browsing.live.url}/accounts/login/")
    provider.stop()
    page.click("#sign-in-sso")
    page.wait_for_selector("[data-signin-error=unreachable]")
    assert "The sign-in service is not answering" in page.content()
    shot(sso_browsing, "7-provider-down")
