"""WCAG 2.2 AA on the login and chat pages, checked by axe-core (vendored under vendor/), plus
what axe cannot see: speakers labelled, new replies announced, a skip link to the composer.

Any serious or critical axe violation fails the test, with the rule, the offending elements and
axe's explanation in the message.
"""

from __future__ import annotations

import pytest

from tests.browser.axe import assert_accessible
from tests.browser.conftest import Browsing
from tests.browser.test_chat_ui import WATCH_STREAM, send

pytestmark = pytest.mark.browser


def test_the_login_page_meets_wcag_aa(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    page.goto(f"{b.live.url}/accounts/login/")
    assert_accessible(b)
    # With a failed login's error shown, too.
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "wrong")
    page.click("button[type=submit]")
    page.wait_for_selector(".form-error")
    assert_accessible(b)


def test_an_empty_chat_meets_wcag_aa(browsing: Browsing) -> None:
    b = browsing
    b.login("alice")
    b.page.wait_for_selector("#empty-state:not([hidden])")
    assert_accessible(b)


def test_a_conversation_with_code_meets_wcag_aa(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    page.goto(f"{b.live.url}/c/{b.live.seed['chinese_session']}/")
    page.wait_for_selector("#messages .msg-assistant .code-block .hljs-keyword")
    assert_accessible(b)
    # The sidebar's item actions and the search field, shown on focus, too.
    page.focus(".session-item.active .session-link")
    assert_accessible(b)


def test_the_phone_layout_meets_wcag_aa(phone: Browsing) -> None:
    b, page = phone, phone.page
    b.login("alice")
    page.goto(f"{b.live.url}/c/{b.live.seed['chinese_session']}/")
    page.wait_for_selector("#messages .msg-assistant .code-block")
    assert_accessible(b)
    page.click("#menu-btn")
    page.wait_for_timeout(350)
    assert_accessible(b)


def test_messages_are_labelled_by_speaker(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    page.goto(f"{b.live.url}/c/{b.live.seed['chinese_session']}/")
    page.wait_for_selector("#messages .msg-assistant .md p")
    headings = page.get_by_role("heading", level=2)
    assert headings.all_inner_texts()[-2:] == ["You said:", "qassist said:"]
    user = page.locator("#messages .msg-user")
    assert user.get_attribute("aria-labelledby")
    assert page.locator(f"#{user.get_attribute('aria-labelledby')}").inner_text() == "You said:"


def test_a_new_reply_is_announced_once_when_it_ends(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    live = page.locator("#announcer")
    assert live.get_attribute("aria-live") == "polite"
    page.evaluate(
        """() => {
          window.__announced = [];
          new MutationObserver(() => {
            const text = document.getElementById('announcer').textContent;
            if (text) window.__announced.push(text);
          }).observe(document.getElementById('announcer'),
                     {childList: true, subtree: true, characterData: true});
        }"""
    )
    page.evaluate(WATCH_STREAM, False)
    send(b, "Say hello.")
    done = b.wait_for_frame("reply.done")["reply"]
    page.wait_for_function("() => window.__announced.length >= 2")
    announced = page.evaluate("window.__announced")
    # "Replying…" when it starts, then the reply as text: not every token as it streams.
    assert announced[0] == "qassist is replying…"
    words = done["content"].split()
    assert announced[-1].startswith("qassist said: ")
    assert all(w.strip("*`#_") in announced[-1] for w in words[:3])
    assert len(announced) == 2


def test_a_skip_link_jumps_from_the_top_to_the_message_box(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    page.goto(f"{b.live.url}/c/{b.live.seed['chinese_session']}/")
    b.wait_connected()
    first_focusable = page.evaluate(
        """() => [...document.querySelectorAll('a[href], button, input, textarea, select')]
                   .find(el => !el.disabled && el.tabIndex >= 0).id"""
    )
    assert first_focusable == "skip-link"
    skip = page.locator("#skip-link")
    assert not skip.is_visible() or skip.bounding_box()["y"] < 0  # off-screen until focused
    skip.focus()
    assert skip.inner_text() == "Skip to the message box"
    box = skip.bounding_box()
    assert box is not None
    assert box["y"] >= 0  # shown while focused, for sighted keyboard users
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "input"
