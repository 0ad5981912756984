"""The admin as a product, in headless Chromium: qassist's name and sections, the way from the
chat, a new API key shown once with a Copy button, conversations private unless audited (and
members told), a batch's results on its page, a draft waiting in its queue.

Screenshots (full page) land in test-artifacts/browser/admin-*.png and chat-content-audit-*.png.
"""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import Browsing
from tests.browser.test_admin_pages import admin_login, shot, watch_console

pytestmark = pytest.mark.browser


def test_the_admin_is_called_qassist_and_grouped_by_what_staff_do(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    problems = watch_console(page)
    admin_login(b, "root")
    assert (
        page.locator("#site-name").text_content() or ""
    ).strip() == "qqassist admin"  # mark, name
    assert "Django" not in page.content()
    captions = [
        c.strip() for c in page.locator("#content-main .module caption").all_text_contents()
    ]
    assert captions == [
        "Tenants and people",
        "Knowledge and cached replies",
        "Feedback",
        "Usage",
        "Conversations and audit",
        "Engine and sign-ins",
    ]
    assert page.locator("#usage-usage-dashboard a").first.inner_text() == "Usage at a glance"
    assert page.locator("#engine-accessattempt a").first.inner_text() == "Login lockouts"
    shot(page, "admin-index-superuser")
    page.locator("#usage-usage-dashboard a").first.click()
    page.wait_for_selector("body[data-charts-ready='1']", state="attached")
    assert problems == []


def test_a_tenant_admin_goes_from_the_chat_to_their_admin(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("carol")
    page.locator("#admin-link").click()
    page.wait_for_selector("#site-name")
    captions = [
        c.strip() for c in page.locator("#content-main .module caption").all_text_contents()
    ]
    assert "Engine and sign-ins" in captions
    assert "Users" not in page.locator("#content-main").inner_text()
    assert "Login lockouts" not in page.locator("#content-main").inner_text()
    shot(page, "admin-index-tenant-admin")
    page.get_by_role("link", name="Open the chat").click()
    page.wait_for_selector("#input")


def test_a_new_api_key_is_shown_once_with_a_copy_button(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    problems = watch_console(page)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=b.live.url)
    admin_login(b, "carol")
    page.goto(f"{b.live.url}/admin/tenants/apikey/add/")
    # The tenant field is an autocomplete (select2): open it, type, pick.
    page.locator("#id_tenant + .select2 .select2-selection").click()
    page.locator(".select2-search__field").fill("Acme")
    page.locator(".select2-results__option", has_text="Acme").first.click()
    page.fill("input[name=name]", "browser test key")
    page.locator("input[name=_save]").click()
    page.wait_for_selector("#new-api-key")
    assert re.search(r"/admin/tenants/apikey/\d+/created/$", page.url)
    raw = page.locator("#new-api-key").inner_text().strip()
    assert raw.startswith("qa_")
    page.locator("#copy-key").click()
    page.locator("#copy-status", has_text="Copied.").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == raw
    shot(page, "admin-api-key-created")

    page.reload()  # a reload makes no key and shows the key no more
    page.wait_for_selector("#key-gone")
    assert page.locator("#new-api-key").count() == 0
    assert raw not in page.content()
    page.goto(f"{b.live.url}/admin/tenants/apikey/?q=browser+test+key")
    assert page.locator("#result_list tbody tr").count() == 1
    assert problems == []


def test_a_conversation_is_private_unless_its_tenant_is_audited(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    admin_login(b, "root")
    page.goto(f"{b.live.url}/admin/chat/chatsession/{b.live.seed['bob_session']}/change/")
    notice = page.locator("#content-notice").inner_text()
    assert "The text is private: Acme has no content audit" in notice
    assert "Only Bob may read this." not in page.content()
    assert "Bob's private notes" not in page.content()
    assert page.locator("input[name=_save]").count() == 0
    shot(page, "admin-conversation-private")

    page.goto(f"{b.live.url}/admin/chat/chatsession/{b.live.seed['audited_session']}/change/")
    assert "under Beta Labs’s content audit" in page.locator("#content-notice").inner_text()
    assert "Summarise the Q3 revenue table for the board." in page.content()
    shot(page, "admin-conversation-audited")

    page.goto(f"{b.live.url}/admin/chat/contentread/")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() >= 1
    assert "root" in rows.first.inner_text()
    assert "Read a conversation" in rows.first.inner_text()
    shot(page, "admin-content-reads")


def test_members_are_told_while_the_content_audit_is_on(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")  # in Acme: private
    assert page.locator("#audit-notice").count() == 0
    assert "not what you write" in page.locator("#privacy-note").inner_text()
    page.select_option("#tenant-select", "beta")  # Beta Labs: audited
    page.wait_for_selector("#audit-notice")
    assert "Content audit is on in Beta Labs" in page.locator("#audit-notice").inner_text()
    assert page.locator("#privacy-note").count() == 0
    shot(page, "chat-content-audit-notice")
    page.select_option("#tenant-select", "acme")  # back, for the tests that follow
    page.wait_for_selector("#privacy-note")


def test_a_batchs_results_are_a_table_on_its_page(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    admin_login(b, "carol")
    page.goto(f"{b.live.url}/admin/chat/batch/")
    page.get_by_role("link", name="Ticket summaries (nightly)").click()
    page.wait_for_selector("#batch-items")
    rows = page.locator("#batch-items tbody tr")
    assert rows.count() == 20
    assert "Item 0" in rows.first.inner_text()
    assert "Summary 0" in rows.first.inner_text()
    assert page.locator("input[name=_save]").count() == 0
    shot(page, "admin-batch-results")


def test_a_waiting_draft_shows_its_place_in_the_queue(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    admin_login(b, "root")
    page.goto(f"{b.live.url}/admin/chat/cachedreplycandidate/")
    waiting = page.locator("#result_list tbody tr", has_text="Where is the Q3 deck?")
    assert "Queued · next in line" in waiting.inner_text()
    shot(page, "admin-candidates-draft-queued")
