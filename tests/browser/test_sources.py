"""A synced source end to end, in headless Chromium: a tenant admin adds a folder source in the
admin and watches it sync until its document is ready; an employee asks about it in the chat,
gets an answer with it as a source, and opens the passage, which names the file's path in the
share. The source is deleted at the end (its document with it), so the other tests' tenant is
as it was.

Screenshots: test-artifacts/browser/sources-added.png, sources-synced.png,
sources-chat-passage.png.
"""

from __future__ import annotations

import shutil

import pytest

from tests.browser.conftest import ARTIFACTS, SHARES, Browsing
from tests.browser.test_admin_pages import admin_login
from tests.browser.test_chat_ui import send

pytestmark = pytest.mark.browser

PARKING = (
    "# Parking\n\n## Opening hours\n\nThe parking garage under building C opens at 06:30 and "
    "closes at 22:00. Visitors ask the front desk for a day pass.\n"
)


def test_a_tenant_admin_adds_a_folder_source_and_an_employee_gets_an_answer_from_it(
    browsing: Browsing,
) -> None:
    b, page = browsing, browsing.page
    share = SHARES / "facilities"
    shutil.rmtree(share, ignore_errors=True)
    share.mkdir(parents=True)
    (share / "parking.md").write_text(PARKING)

    admin_login(b, "carol")
    page.goto(f"{b.live.url}/admin/sources/source/add/")
    assert page.locator("select[name=tenant] option:checked").inner_text() in ("Acme", "---------")
    page.select_option("select[name=tenant]", label="Acme")
    page.fill("input[name=name]", "Facilities share")
    page.select_option("select[name=kind]", value="folder")
    page.fill("input[name=location]", str(share))
    page.screenshot(path=str(ARTIFACTS / "sources-added.png"), full_page=True)
    page.get_by_role("button", name="Save and continue editing").click()
    status = page.locator(".field-status_panel")
    status.wait_for()
    # The page reloads itself until the sync and the indexing are done.
    page.wait_for_function(
        "() => document.querySelector('.field-status_panel')"
        ".innerText.includes('1 document(s): 1 ready')",
        timeout=120_000,
    )
    assert "1 added" in status.inner_text()
    assert "parking.md" in page.locator(".field-synced_documents").inner_text()
    page.screenshot(path=str(ARTIFACTS / "sources-synced.png"), full_page=True)

    b.login("bob")
    send(b, "When does the parking garage open?")
    start = b.wait_for_frame("reply.start")
    assert start["user_message"]["grounding"] == "documents"
    assert "Parking" in {s["title"] for s in start["reply"]["sources"]}
    done = b.wait_for_frame("reply.done")["reply"]
    reply = page.locator(f'#messages .msg-assistant[data-id="{done["id"]}"]:not(.streaming)')
    reply.locator(".sources").wait_for()
    # By its number: another source's passage may mention parking too.
    number = next(s["number"] for s in done["sources"] if s["title"] == "Parking")
    source = reply.locator(f'.source[data-number="{number}"]')
    if source.is_hidden():
        reply.locator(".sources-more").click()
    source.locator("summary").click()
    source.get_by_role("button", name="Open the passage").click()
    dialog = page.locator("#passage-dialog")
    dialog.locator("#passage-text", has_text="opens at 06:30").wait_for()
    assert page.locator("#passage-origin-path").inner_text() == str(share / "parking.md")
    page.screenshot(path=str(ARTIFACTS / "sources-chat-passage.png"))
    page.keyboard.press("Escape")

    # Leave Acme as the other tests know it: the source goes, with its document.
    admin_login(b, "carol")
    page.goto(f"{b.live.url}/admin/sources/source/")
    page.get_by_role("link", name="Facilities share").click()
    page.get_by_role("link", name="Delete").click()
    page.get_by_role("button", name="Yes, I’m sure").click()
    page.goto(f"{b.live.url}/admin/knowledge/document/")
    assert "Parking" not in page.locator("#content").inner_text()
