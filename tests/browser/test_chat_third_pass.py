"""The chat's third pass in headless Chromium: feedback given and changed, export and the print
stylesheet, a share link opened by a colleague and refused to another tenant's member, dark mode
(axe-core in both themes), the phone drawer's titles, the token line of an empty chat, custom
instructions with the real model, editing an earlier question, pins. Screenshots under
test-artifacts/browser/ (one per test, and the named ones below)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.browser.axe import assert_accessible
from tests.browser.conftest import ARTIFACTS, Browsing
from tests.browser.test_chat_ui import WATCH_STREAM, send

pytestmark = pytest.mark.browser


def open_conversation(b: Browsing, key: str) -> None:
    b.page.goto(f"{b.live.url}/c/{b.live.seed[key]}/")
    b.page.wait_for_selector("#messages .msg-assistant .md")


def shot(b: Browsing, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    b.page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def stored_messages(b: Browsing, key: str) -> list[dict[str, object]]:
    response = b.page.request.get(f"{b.live.url}/c/{b.live.seed[key]}/messages")
    messages: list[dict[str, object]] = response.json()["messages"]
    return messages


# --- 1. feedback -----------------------------------------------------------------------------


def test_feedback_is_given_changed_and_kept(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    open_conversation(b, "feedback_session")
    reply = page.locator("#messages .msg-assistant").last
    up, down = reply.locator(".feedback-up"), reply.locator(".feedback-down")
    assert up.get_attribute("aria-pressed") == "false"

    up.click()
    page.wait_for_selector("#messages .msg-assistant .feedback-up[aria-pressed=true]")
    assert stored_messages(b, "feedback_session")[-1]["feedback"]["rating"] == "up"  # type: ignore[index]

    # Changed: a thumbs down asks what was wrong.
    reply.locator(".feedback-down").click()
    page.wait_for_selector("#messages .feedback-form")
    assert_accessible(b)
    page.get_by_label("Outdated").check()
    page.fill(".feedback-comment", "The capital moved (not really).")
    shot(b, "feedback_reason_form")
    page.click(".feedback-form button[type=submit]")
    page.wait_for_selector("#messages .feedback-why >> text=Reason: Outdated")
    assert down.get_attribute("aria-pressed") == "true"
    assert up.get_attribute("aria-pressed") == "false"

    page.reload()
    page.wait_for_selector("#messages .msg-assistant .feedback-down[aria-pressed=true]")
    assert page.locator("#messages .feedback-why").inner_text() == "Reason: Outdated"
    feedback = stored_messages(b, "feedback_session")[-1]["feedback"]
    assert feedback["reason"] == "outdated"  # type: ignore[index]
    assert feedback["comment"] == "The capital moved (not really)."  # type: ignore[index]

    # Pressed again: taken back.
    page.locator("#messages .msg-assistant .feedback-down").click()
    page.wait_for_selector("#messages .msg-assistant .feedback-down[aria-pressed=false]")
    assert stored_messages(b, "feedback_session")[-1]["feedback"] is None


def test_a_tenant_admin_makes_a_cached_reply_from_a_well_rated_answer(browsing: Browsing) -> None:
    from tests.browser.test_admin_pages import admin_login

    b, page = browsing, browsing.page
    admin_login(b, "carol")  # acme's tenant admin
    page.goto(f"{b.live.url}/admin/feedback/feedback/report/")
    worst = page.locator("#worst-questions tbody tr").first
    assert "Where is the printer on floor 3?" in worst.inner_text()
    assert "Wrong 1" in worst.inner_text()
    best = page.locator("#best-answers tbody tr", has_text="Next to the kitchen")
    assert best.count() == 1
    assert_accessible(b)
    shot(b, "admin_feedback_report")
    best.get_by_role("button", name="Make a cached reply").click()
    page.wait_for_selector("textarea[name=answer]")
    assert page.locator("textarea[name=answer]").input_value() == "Next to the kitchen, room 3.12."
    assert not page.locator("input[name=enabled]").is_checked()  # until reviewed
    shot(b, "admin_cached_reply_from_feedback")


# --- 2. export, print, share -----------------------------------------------------------------


def test_a_conversation_exports_as_markdown_and_prints_cleanly(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    open_conversation(b, "share_session")
    with page.expect_download() as info:
        page.click("#export-btn")
    download = info.value
    assert download.suggested_filename == "Release checklist.md"
    text = Path(download.path()).read_text(encoding="utf-8")
    assert text.startswith("# Release checklist\n")
    assert "## You\n\nWhat goes in a release checklist?" in text
    assert "```bash\nmake test && git tag v1.2\n```" in text
    assert text.rstrip().endswith("Announce it, and watch the error rates for a day.")

    page.emulate_media(media="print")
    for hidden in ("#sidebar", "#composer", ".topbar-actions", ".msg-actions"):
        assert page.locator(hidden).first.is_hidden(), hidden
    assert page.locator("#messages .msg-assistant .code-block").is_visible()
    # A header: the title, the workspace and the date (issue #31).
    assert page.locator("#conv-title").inner_text() == "Release checklist"
    meta = page.locator("#print-meta")
    assert meta.is_visible()
    assert re.fullmatch(
        r"qassist · Workspace: \S.* · Printed \d{4}-\d\d-\d\d \d\d:\d\d", meta.inner_text()
    ), meta.inner_text()
    shot(b, "export_print")
    page.pdf(path=str(ARTIFACTS / "export_print.pdf"))  # what "Save as PDF" makes of it
    page.emulate_media(media="screen")
    assert page.locator("#print-meta").is_hidden()


def test_a_share_link_opens_for_a_colleague_not_for_another_tenant_and_not_once_revoked(
    browsing: Browsing,
) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    open_conversation(b, "share_session")
    page.click("#share-btn")
    page.wait_for_selector("#share-dialog[open]")
    page.click("#share-create")
    link = page.locator("#share-list .share-url").first
    link.wait_for()
    url = link.inner_text()
    assert re.fullmatch(rf"{re.escape(b.live.url)}/s/[0-9a-f-]{{36}}/", url)
    assert_accessible(b)
    shot(b, "share_dialog")
    page.click("#share-close")

    b.login("bob")  # a colleague in Acme
    page.goto(url)
    assert page.locator("#shared-meta").inner_text().startswith("Shared by alice on ")
    assert page.locator("#shared-messages .msg-user .bubble").first.inner_text() == (
        "What goes in a release checklist?"
    )
    page.wait_for_selector("#shared-messages .code-block")  # the reply rendered as Markdown
    assert page.locator("#composer").count() == 0
    assert_accessible(b)
    shot(b, "share_opened_by_colleague")
    # Continued in bob's own chats (issue #31): a copy he can ask on from.
    page.click("#continue-btn")
    page.wait_for_url(re.compile(r".*/c/[0-9a-f-]{36}/$"))
    assert page.locator("#conv-title").inner_text() == "Release checklist"
    assert page.locator("#messages .msg-user .bubble").first.inner_text() == (
        "What goes in a release checklist?"
    )
    assert page.locator("#composer").is_visible()
    assert page.locator("#archived-bar").count() == 0

    b.login("erin")  # Northwind's: another tenant
    response = page.goto(url)
    assert response is not None
    assert response.status == 404
    assert "Release checklist" not in page.content()
    shot(b, "share_refused_to_another_tenant")

    b.login("alice")
    open_conversation(b, "share_session")
    page.click("#share-btn")
    page.locator("#share-list .share-item").first.get_by_role("button", name="Revoke").click()
    page.wait_for_selector("#share-status >> text=Link revoked")
    page.click("#share-close")
    b.login("bob")
    response = page.goto(url)
    assert response is not None
    assert response.status == 404


# --- 3. dark mode and reading comfort -------------------------------------------------------


def background(b: Browsing) -> str:
    return str(b.page.evaluate("getComputedStyle(document.body).backgroundColor"))


def test_dark_mode_follows_the_system_and_the_toggle_is_remembered(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    page.emulate_media(color_scheme="dark")
    open_conversation(b, "chinese_session")  # code, a cached badge
    page.wait_for_selector("#messages .code-block .hljs-keyword")
    assert background(b) == "rgb(13, 17, 23)"
    assert page.locator("#theme-toggle").get_attribute("aria-pressed") == "true"
    assert_accessible(b)
    page.focus("#messages .msg-assistant .icon-btn")  # a focus ring in the dark
    shot(b, "dark_code_and_badges")

    page.click("#theme-toggle")  # light, although the system is dark
    assert background(b) == "rgb(255, 255, 255)"
    page.reload()
    page.wait_for_selector("#messages .code-block")
    assert background(b) == "rgb(255, 255, 255)"  # remembered
    assert_accessible(b)
    shot(b, "light_chosen_on_a_dark_system")

    page.click("#theme-toggle")
    page.emulate_media(color_scheme="light")
    page.reload()
    page.wait_for_selector("#messages .code-block")
    assert background(b) == "rgb(13, 17, 23)"  # chosen dark, whatever the system says
    page.evaluate("localStorage.removeItem('qassist.theme')")


def test_the_sources_and_the_passage_read_well_in_both_themes(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    if "sourced_session" not in b.live.seed:
        pytest.skip("the seed indexed no handbook (no model)")
    b.login("erin")
    for scheme in ("dark", "light"):
        page.emulate_media(color_scheme=scheme)
        open_conversation(b, "sourced_session")
        page.wait_for_selector("#messages .sources .source.cited")
        assert_accessible(b)
        page.locator("#messages .md .cite").first.click()
        page.wait_for_selector("#passage-dialog[open] #passage-text:not(:empty)")
        assert_accessible(b)
        shot(b, f"{scheme}_sources_and_passage")
        page.keyboard.press("Escape")
    page.emulate_media(color_scheme="light")


def test_an_empty_chat_is_axe_clean_in_both_themes(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    for scheme in ("dark", "light"):
        page.emulate_media(color_scheme=scheme)
        page.goto(f"{b.live.url}/")
        page.wait_for_selector("#empty-state:not([hidden])")
        assert_accessible(b)
        shot(b, f"{scheme}_empty_chat")
    page.emulate_media(color_scheme="light")


def test_phone_drawer_titles_end_with_an_ellipsis(phone: Browsing) -> None:
    b, page = phone, phone.page
    b.login("alice")
    page.emulate_media(color_scheme="dark")
    page.click("#menu-btn")
    page.wait_for_timeout(350)  # the drawer's slide (not an assertion on time)
    title = page.locator(".session-title", has_text="A very long conversation title").first
    clipped = title.evaluate(
        """el => ({
          overflow: getComputedStyle(el).textOverflow,
          cut: el.scrollWidth > el.clientWidth,
          inside: el.getBoundingClientRect().right
                  <= el.closest('.session-item').getBoundingClientRect().right,
        })"""
    )
    assert clipped == {"overflow": "ellipsis", "cut": True, "inside": True}
    assert_accessible(b)
    shot(b, "phone_drawer_dark_ellipsis")
    page.emulate_media(color_scheme="light")


def test_the_token_line_of_an_empty_chat_does_not_mention_a_conversation(
    browsing: Browsing,
) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    page.fill("#input", "word " * 700)  # over half the live server's 1,024-token window
    page.wait_for_selector("#room:not([hidden])")
    text = page.locator("#room-text").inner_text()
    assert re.fullmatch(r"[\d,]+ of 1,024 tokens used", text), text
    open_conversation(b, "share_session")
    page.fill("#input", "word " * 600)
    page.wait_for_selector("#room:not([hidden])")
    assert "the conversation so far included" in page.locator("#room-text").inner_text()


# --- 4. personal settings ---------------------------------------------------------------------

# The embedded smollm2-135m follows an instruction to change language only now and then: tried
# at temperature 0 on five questions and three wordings, "What is the weather like in spring?"
# came back in French for one wording in three, "Say good morning to me." for two. A question
# about Paris, asked in English, is answered in English without the instruction and in French
# with each of the three wordings (1 and 2 threads, a context of 1 and of 4 sequences): the
# effect this test relies on is the instruction tipping a reply that could go either way.
INSTRUCTIONS = "Always answer in French."
QUESTION = "Describe Paris in one sentence."


def test_custom_instructions_change_the_replies_language(browsing: Browsing) -> None:
    from chat.language import language_of

    b, page = browsing, browsing.page
    b.login("iris")
    send(b, QUESTION)
    before = b.wait_for_frame("reply.done")["reply"]["content"]

    page.click("#instructions-btn")
    page.wait_for_selector("#instructions-dialog[open]")
    page.fill("#instructions-input", INSTRUCTIONS)
    assert_accessible(b)
    page.click("#instructions-save")
    page.wait_for_selector("#instructions-dialog", state="hidden")

    page.goto(f"{b.live.url}/")
    b.wait_connected()
    send(b, QUESTION)
    after = b.wait_for_frame("reply.done", count=2)["reply"]["content"]
    shot(b, "custom_instructions_reply")
    assert str(language_of(before)) == "Language.ENGLISH", before
    assert str(language_of(after)) == "Language.FRENCH", after
    # The counter says they take room in the prompt.
    page.fill("#input", "word " * 700)
    page.wait_for_selector("#room:not([hidden])")
    assert "your custom instructions (" in page.locator("#room-text").inner_text()
    page.fill("#input", "")
    page.click("#instructions-btn")  # and off again, through the same dialog
    page.fill("#instructions-input", "")
    page.click("#instructions-save")
    page.wait_for_selector("#instructions-dialog", state="hidden")


def test_editing_an_earlier_question_branches_from_it(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    open_conversation(b, "edit_session")
    page.evaluate(WATCH_STREAM, True)  # stop the reply at its first words: this is about branches
    first = page.locator("#messages .msg-user").first
    first.hover()
    first.get_by_role("button", name="Edit and resend from here").click()
    page.fill("#messages .editor textarea", "Name a vegetable.")
    page.keyboard.press("Enter")
    start = b.wait_for_frame("reply.start")
    b.wait_for_frame("reply.done")
    assert start["user_message"]["content"] == "Name a vegetable."
    assert len(start["user_message"]["versions"]) == 2
    page.wait_for_selector("#messages .msg-assistant:not(.streaming)")
    # The conversation goes on from the edited question: what followed the original is hidden.
    assert page.locator("#messages .msg").count() == 2
    assert page.locator("#messages .msg-user .bubble").inner_text() == "Name a vegetable."
    assert page.locator("#messages .msg-user .version-count").inner_text() == "2 / 2"
    shot(b, "edit_earlier_question")

    page.locator("#messages .msg-user .version-prev").click()
    page.wait_for_function("() => document.querySelectorAll('#messages .msg').length === 4")
    assert page.locator("#messages .msg-user .bubble").all_inner_texts() == [
        "Name a fruit.",
        "Name a colour.",
    ]


def test_a_pinned_conversation_stays_on_top(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    selector = f'.session-item[data-session-id="{b.live.seed["edit_session"]}"]'
    item = page.locator(selector)
    item.hover()
    item.locator(".pin-btn").click()
    page.wait_for_selector(f"{selector} .pin-btn[aria-pressed=true]")
    headings = page.locator(".session-heading").all_inner_texts()
    assert headings[0] == "Pinned"
    page.reload()
    first = page.locator(".session-item").first
    assert first.get_attribute("data-session-id") == b.live.seed["edit_session"]
    first.hover()
    first.locator(".pin-btn").click()  # unpinned again, for the other tests
    page.wait_for_selector(f"{selector} .pin-btn[aria-pressed=false]")
