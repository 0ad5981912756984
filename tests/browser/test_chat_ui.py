"""The chat UI in headless Chromium against a live qassist with the real embedded model.

Replies from the model differ run to run (and llama.cpp is not batch-invariant), so the tests
check how the page behaves, never what the model says; the XSS payloads come from a stored
message and a cached reply, not from the model.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from tests.browser.axe import assert_accessible
from tests.browser.conftest import ARTIFACTS, Browsing
from tests.browser.seed import XSS_QUESTION

pytestmark = pytest.mark.browser

# Records each distinct text a streaming reply shows; with stopEach, clicks Stop as soon as
# each new reply shows its first text (in the page, so no round trip to the test delays it).
# Stopping early keeps the tests quick: a 64-token reply takes seconds on a busy 2-core machine.
WATCH_STREAM = """(stopEach) => {
  window.__shown = [];
  const stopped = new Set();
  const observer = new MutationObserver(() => {
    const reply = document.querySelector('#messages .msg-assistant.streaming');
    if (!reply) return;
    const text = reply.querySelector('.md').textContent;
    if (!text || window.__shown[window.__shown.length - 1] === text) return;
    window.__shown.push(text);
    if (stopEach && !stopped.has(reply.dataset.id)) {
      stopped.add(reply.dataset.id);
      document.getElementById('stop-btn').click();
    }
  });
  observer.observe(document.getElementById('messages'),
                   {childList: true, subtree: true, characterData: true});
}"""


def send(b: Browsing, text: str) -> None:
    b.page.fill("#input", text)
    b.page.keyboard.press("Enter")


def assistant_text(b: Browsing) -> str:
    return str(b.page.locator("#messages .msg-assistant .md").last.inner_text())


def test_a_reply_streams_in_and_survives_a_reload(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    page.evaluate(WATCH_STREAM, False)

    send(b, "Write three sentences about the sea.")
    start = b.wait_for_frame("reply.start")
    done = b.wait_for_frame("reply.done")
    page.wait_for_selector("#messages .msg-assistant:not(.streaming)")

    deltas_before_done = [
        f for f in b.frames.received[: b.frames.received.index(done)] if f["type"] == "delta"
    ]
    assert len(deltas_before_done) >= 2, "the reply arrived in one piece, not streamed"
    shown = page.evaluate("window.__shown")
    assert len(shown) >= 2, f"the page did not render the reply progressively: {shown}"
    reply = done["reply"]
    assert reply["status"] == "complete"
    assert reply["content"] == "".join(f["text"] for f in deltas_before_done)
    session_id = start["session"]["id"]
    assert page.url.endswith(f"/c/{session_id}/")  # the new session got its URL
    assert page.locator(f'.session-item[data-session-id="{session_id}"]').count() == 1
    assert page.locator("#conv-title").inner_text() == "Write three sentences about the sea."
    text_before = assistant_text(b)
    assert text_before.strip()

    page.reload()
    page.wait_for_selector("#messages .msg-assistant")
    assert page.locator("#messages .msg-user .bubble").inner_text() == (
        "Write three sentences about the sea."
    )
    assert assistant_text(b) == text_before
    assert page.locator("#messages .badge-interrupted").count() == 0


def test_stop_keeps_the_partial_reply_marked_interrupted(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    page.evaluate(WATCH_STREAM, True)

    send(b, "Count from 1 to 100, separated by commas.")
    done = b.wait_for_frame("reply.done")

    session_id = b.frames.of("reply.start")[0]["session"]["id"]
    assert {"type": "chat.stop", "session": session_id} in b.frames.sent
    reply = done["reply"]
    assert reply["status"] == "interrupted"
    assert reply["finish_reason"] == "cancelled"
    assert reply["content"]
    page.wait_for_selector("#messages .msg-assistant .badge-interrupted")
    # The user's own Stop says so; it is not labelled like a dropped connection.
    assert page.locator("#messages .msg-assistant .badge-interrupted").inner_text() == "stopped"
    assert page.locator("#messages .msg-assistant .msg-error").count() == 0
    assert page.locator("#stop-btn").is_hidden()
    assert page.locator("#send-btn").is_visible()

    page.reload()
    page.wait_for_selector("#messages .msg-assistant .badge-interrupted >> text=stopped")
    session_id = b.frames.of("reply.start")[0]["session"]["id"]
    stored = page.request.get(f"{b.live.url}/c/{session_id}/messages").json()["messages"]
    assert [(m["role"], m["status"]) for m in stored] == [
        ("user", "complete"),
        ("assistant", "interrupted"),
    ]
    assert stored[-1]["content"] == reply["content"]


def test_a_dropped_connection_mid_reply_resumes_the_reply(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    links: list[tuple[object, object]] = []

    def proxy(ws: Any) -> None:
        # Pass frames through, and cut the line right after the first piece of the first reply.
        server = ws.connect_to_server()
        links.append((ws, server))

        def from_server(message: str | bytes) -> None:
            ws.send(message)
            if len(links) == 1 and '"delta"' in str(message):
                server.close()
                ws.close(code=1011)

        server.on_message(from_server)

    page.route_web_socket(re.compile(r".*/ws/chat/$"), proxy)
    b.login("alice")
    send(b, "Write a short poem about the sea.")
    page.wait_for_selector("#conn-state.offline", state="attached")

    # Back by itself; the reply went on meanwhile and is shown whole, not cut off.
    page.wait_for_selector("#conn-state.online", state="attached", timeout=15_000)
    wait_until_ended(b, b.frames.of("reply.start")[0]["reply"]["id"])
    session_id = page.url.rstrip("/").rsplit("/", 1)[-1]
    stored = page.request.get(f"{b.live.url}/c/{session_id}/messages").json()["messages"]
    assert stored[-1]["status"] == "complete"
    assert page.locator("#messages .badge-interrupted").count() == 0
    shown = assistant_text(b)
    page.reload()
    page.wait_for_selector("#messages .msg-assistant .md")
    assert assistant_text(b) == shown  # what the live page assembled is what was stored
    assert len(links) >= 2


def test_clicking_a_suggestion_sends_it(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    page.evaluate(WATCH_STREAM, True)
    suggestion = page.locator(".suggestion").first
    prompt = suggestion.get_attribute("data-prompt")

    suggestion.click()

    start = b.wait_for_frame("reply.start")
    assert start["user_message"]["content"] == prompt
    assert [f["content"] for f in b.frames.sent if f.get("type") == "chat.send"] == [prompt]
    b.wait_for_frame("reply.done")
    assert page.locator("#messages .msg-user .bubble").inner_text() == prompt
    assert page.input_value("#input") == ""
    assert page.locator("#empty-state").is_hidden()


def test_the_pages_have_a_favicon(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    page.goto(f"{b.live.url}/accounts/login/")
    href = page.locator("link[rel=icon]").get_attribute("href")
    assert href
    icon = page.request.get(f"{b.live.url}{href}")
    assert icon.status == 200
    assert icon.headers["content-type"].startswith("image/svg+xml")
    assert "<svg" in icon.text()
    # Browsers that ask for /favicon.ico by habit get it too, not a 404.
    legacy = page.request.get(f"{b.live.url}/favicon.ico", max_redirects=2)
    assert legacy.status == 200
    assert "<svg" in legacy.text()
    b.login("alice")
    assert page.locator("link[rel=icon]").get_attribute("href") == href


def frames_after_last_subscribe(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    marks = [i for i, f in enumerate(frames) if f.get("type") == "subscribed"]
    return frames[marks[-1] :] if marks else []


def assemble(frames: list[dict[str, Any]], reply_id: int) -> str | None:
    """The reply as the page rebuilt it after (re)subscribing: the run's snapshot, then each
    later piece exactly where the text so far ends. None when there was no snapshot (the reply
    had ended by then)."""
    text: str | None = None
    for frame in frames:
        if frame.get("type") == "reply.resume" and frame["reply"]["id"] == reply_id:
            text = frame["reply"]["content"]
            assert frame["offset"] == len(text)
        elif frame.get("type") == "delta" and text is not None:
            if frame["offset"] + len(frame["text"]) <= len(text):
                continue
            assert frame["offset"] == len(text), "a gap or an overlap in the stream"
            text += frame["text"]
    return text


def wait_until_ended(b: Browsing, reply_id: int) -> None:
    """Until the page shows the reply as ended (not merely drawn from the stored partial)."""
    b.page.wait_for_function(
        """(id) => { const el = document.querySelector(`#messages .msg[data-id="${id}"]`);
                     return el && !el.classList.contains('streaming') && el._message
                            && el._message.status !== 'streaming'; }""",
        arg=reply_id,
        timeout=90_000,
    )


def stored_reply(b: Browsing, session_id: str) -> dict[str, Any]:
    messages = b.page.request.get(f"{b.live.url}/c/{session_id}/messages").json()["messages"]
    return dict(messages[-1])


def test_reloading_during_a_reply_shows_it_whole_once_in_order(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    send(b, "Write a long story about a lighthouse keeper and his cat.")
    start = b.wait_for_frame("reply.start")
    session_id, reply_id = start["session"]["id"], start["reply"]["id"]
    b.wait_for_frame("delta")

    # Reload at several moments: right after the first piece, then as soon as the page shows
    # the reply live again, while it is still being written.
    reloads = 0
    for _ in range(3):
        page.reload()
        reloads += 1
        b.wait_connected()
        page.wait_for_function(
            """() => { const el = document.querySelector('#messages .msg-assistant:last-child');
                       return el && (el.classList.contains('streaming')
                                     || el._message.status !== 'streaming'); }""",
            timeout=30_000,
        )
        if stored_reply(b, session_id)["status"] != "streaming":
            break
    wait_until_ended(b, reply_id)
    final = stored_reply(b, session_id)
    assert final["status"] == "complete"  # reloads did not cut it
    assert final["finish_reason"] in ("stop", "length")
    rebuilt = assemble(frames_after_last_subscribe(b.frames.received), reply_id)
    if rebuilt is not None:  # the last page joined mid-reply: snapshot + pieces = the reply
        assert rebuilt == final["content"]
    resumes = [f for f in b.frames.of("reply.resume") if f["reply"]["id"] == reply_id]
    assert resumes, "no reload landed mid-reply: the test proved nothing"
    # Each reload's snapshot is the reply so far: a prefix of the final text, never less
    # than the one before.
    sizes = [len(f["reply"]["content"]) for f in resumes]
    assert sizes == sorted(sizes)
    assert all(final["content"].startswith(f["reply"]["content"]) for f in resumes)
    shown = assistant_text(b)
    page.screenshot(path=str(ARTIFACTS / "reload-mid-reply-final.png"))
    page.reload()
    page.wait_for_selector(f'#messages .msg-assistant[data-id="{reply_id}"] .md')
    assert assistant_text(b) == shown  # the live page shows exactly what was stored
    assert page.locator("#messages .msg-assistant").count() == 1
    assert reloads >= 1


def test_a_second_tab_sees_the_same_live_stream(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    second = page.context.new_page()
    second_frames: list[dict[str, Any]] = []
    second.on(
        "websocket",
        lambda ws: ws.on("framereceived", lambda p: second_frames.append(json.loads(p))),
    )
    send(b, "Write a long story about a lighthouse keeper and his dog.")
    start = b.wait_for_frame("reply.start")
    session_id, reply_id = start["session"]["id"], start["reply"]["id"]
    b.wait_for_frame("delta")

    second.goto(f"{b.live.url}/c/{session_id}/")
    done = b.wait_for_frame("reply.done")["reply"]
    wait_until_ended(Browsing(second, b.frames, b.dialogs, b.live), reply_id)
    assert {"type": "subscribed", "session": session_id, "streaming": reply_id} in second_frames
    # The second tab joined mid-reply: the text so far, then the same live pieces, to the end.
    assert assemble(frames_after_last_subscribe(second_frames), reply_id) == done["content"]
    later = [f for f in second_frames if f["type"] == "delta"]
    assert later, "the second tab saw no live pieces"
    first_text = assistant_text(b)
    second_text = second.locator("#messages .msg-assistant .md").last.inner_text()
    assert second_text == first_text
    second.screenshot(path=str(ARTIFACTS / "second-tab-live.png"))

    # An edit in the first tab shows in the second in place of the message it revises.
    page.evaluate(WATCH_STREAM, True)
    page.click("#messages .msg-user .msg-actions button[aria-label='Edit and resend']")
    page.fill("#messages .msg-user .editor textarea", "Write one line about a lighthouse.")
    page.click("#messages .msg-user .editor .btn-primary")
    edited = b.wait_for_frame("reply.done", count=2)["reply"]
    wait_until_ended(Browsing(second, b.frames, b.dialogs, b.live), edited["id"])
    assert second.locator("#messages .msg-user").count() == 1
    assert second.locator("#messages .msg-user .bubble").inner_text() == (
        "Write one line about a lighthouse."
    )
    assert second.locator("#messages .msg-user .version-count").inner_text() == "2 / 2"
    second.close()


def test_switching_chats_mid_reply_does_not_stop_it(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    send(b, "Write a long story about a lighthouse keeper and a storm.")
    start = b.wait_for_frame("reply.start")
    session_id, reply_id = start["session"]["id"], start["reply"]["id"]
    b.wait_for_frame("delta")
    page.click(f'.session-item:not([data-session-id="{session_id}"]) .session-link')
    page.wait_for_selector("#messages .msg")
    b.wait_connected()
    page.go_back()
    wait_until_ended(b, reply_id)
    final = stored_reply(b, session_id)
    assert final["status"] == "complete"
    assert page.locator("#messages .badge-interrupted").count() == 0


def test_regenerate_shows_a_new_version_in_place_of_the_last_reply(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    page.evaluate(WATCH_STREAM, True)
    send(b, "Name one colour.")
    first = b.wait_for_frame("reply.done")["reply"]
    page.wait_for_selector("#messages .msg-assistant .regenerate")

    page.click("#messages .msg-assistant .regenerate")
    second = b.wait_for_frame("reply.done", count=2)["reply"]

    assert {
        "type": "chat.regenerate",
        "session": b.frames.of("reply.start")[0]["session"]["id"],
    } in (b.frames.sent)
    assert second["id"] != first["id"]
    page.wait_for_selector(f'#messages .msg-assistant[data-id="{second["id"]}"]:not(.streaming)')
    assert page.locator("#messages .msg-assistant").count() == 1
    assert page.locator("#messages .msg-user").count() == 1

    page.reload()
    page.wait_for_selector("#messages .msg-assistant")
    assert page.locator("#messages .msg-assistant").count() == 1
    assert page.locator(f'#messages .msg-assistant[data-id="{second["id"]}"]').count() == 1


def versions_of(b: Browsing, selector: str) -> str:
    return str(b.page.locator(f"{selector} .version-count").inner_text())


def test_versions_after_regenerate_and_edit_can_be_flipped(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    page.evaluate(WATCH_STREAM, True)
    send(b, "Name one colour.")
    first = b.wait_for_frame("reply.done")["reply"]
    page.wait_for_selector("#messages .msg-assistant .regenerate")
    page.click("#messages .msg-assistant .regenerate")
    second = b.wait_for_frame("reply.done", count=2)["reply"]
    reply = "#messages .msg-assistant"
    page.wait_for_selector(f'{reply}[data-id="{second["id"]}"] .versions')
    assert versions_of(b, reply) == "2 / 2"

    page.click(f"{reply} button[aria-label='Previous version']")
    page.wait_for_selector(f'{reply}[data-id="{first["id"]}"]')
    assert versions_of(b, reply) == "1 / 2"
    assert page.locator(reply).count() == 1
    assert page.evaluate("document.activeElement.getAttribute('aria-label')") == "Next version"
    page.screenshot(path=str(ARTIFACTS / "versions-reply-1-of-2.png"))
    page.click(f"{reply} button[aria-label='Next version']")
    page.wait_for_selector(f'{reply}[data-id="{second["id"]}"]')

    # Edit the question: a second version of it, with its own reply.
    page.click("#messages .msg-user .msg-actions button[aria-label='Edit and resend']")
    page.fill("#messages .msg-user .editor textarea", "Name one fruit.")
    page.click("#messages .msg-user .editor .btn-primary")
    third = b.wait_for_frame("reply.done", count=3)["reply"]
    page.wait_for_selector(f'{reply}[data-id="{third["id"]}"]:not(.streaming)')
    user = "#messages .msg-user"
    assert versions_of(b, user) == "2 / 2"
    assert page.locator(f"{reply} .versions").count() == 0  # the new question has one reply
    assert page.locator(f"{user} .bubble").inner_text() == "Name one fruit."

    # Back to the first question: the conversation that followed it comes back, both replies.
    page.click(f"{user} button[aria-label='Previous version']")
    page.wait_for_selector(f"{user} .bubble >> text=Name one colour.")
    page.wait_for_selector(f'{reply}[data-id="{second["id"]}"]')
    assert versions_of(b, user) == "1 / 2"
    assert versions_of(b, reply) == "2 / 2"
    page.screenshot(path=str(ARTIFACTS / "versions-question-1-of-2.png"))

    # The choice is the server's: a reload shows the same branch.
    page.reload()
    page.wait_for_selector(f'{reply}[data-id="{second["id"]}"]')
    assert page.locator(f"{user} .bubble").inner_text() == "Name one colour."
    session_id = b.frames.of("reply.start")[0]["session"]["id"]
    stored = page.request.get(f"{b.live.url}/c/{session_id}/messages").json()["messages"]
    assert [m["id"] for m in stored] == [
        b.frames.of("reply.start")[0]["user_message"]["id"],
        second["id"],
    ]

    # A new message goes on from the version shown; the model saw that branch only.
    send(b, "And another?")
    start = b.wait_for_frame("reply.start", count=4)
    b.wait_for_frame("reply.done", count=4)
    assert start["user_message"]["content"] == "And another?"
    stored = page.request.get(f"{b.live.url}/c/{session_id}/messages").json()["messages"]
    assert [m["content"] for m in stored][:1] == ["Name one colour."]
    assert "Name one fruit." not in [m["content"] for m in stored]


def test_edit_and_resend_answers_the_new_text(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    page.evaluate(WATCH_STREAM, True)
    send(b, "Name one fruit.")
    b.wait_for_frame("reply.done")
    page.wait_for_selector("#messages .msg-user .msg-actions button[aria-label='Edit and resend']")

    page.click("#messages .msg-user .msg-actions button[aria-label='Edit and resend']")
    page.fill("#messages .msg-user .editor textarea", "Name one vegetable.")
    page.click("#messages .msg-user .editor .btn-primary")
    b.wait_for_frame("reply.done", count=2, timeout=180)

    assert b.frames.of("reply.start")[1]["user_message"]["content"] == "Name one vegetable."
    page.wait_for_selector("#messages .msg-assistant:not(.streaming)")
    assert page.locator("#messages .msg-user .bubble").inner_text() == "Name one vegetable."
    assert page.locator("#messages .msg").count() == 2


def test_enter_while_an_ime_composes_does_not_send(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    page.click("#input")
    page.keyboard.type("ni hao")

    # Shift+Enter is a new line, not a send.
    page.keyboard.press("Shift+Enter")
    assert page.input_value("#input") == "ni hao\n"
    page.fill("#input", "你好")

    # An input method is composing: Enter confirms its candidate, it must not send.
    page.dispatch_event("#input", "compositionstart", {"data": ""})
    page.evaluate(
        """() => {
          const input = document.getElementById('input');
          const enter = {key: 'Enter', code: 'Enter', bubbles: true, cancelable: true};
          input.dispatchEvent(new KeyboardEvent('keydown', {...enter, isComposing: true}));
          input.dispatchEvent(new KeyboardEvent('keydown', {...enter, keyCode: 229}));
        }"""
    )
    page.dispatch_event("#input", "compositionend", {"data": "你好"})
    # Safari's order: compositionend first, then a keydown with keyCode 229.
    page.evaluate(
        """() => document.getElementById('input').dispatchEvent(new KeyboardEvent('keydown',
             {key: 'Enter', code: 'Enter', keyCode: 229, bubbles: true, cancelable: true}))"""
    )
    page.wait_for_timeout(300)
    assert [f for f in b.frames.sent if f.get("type") == "chat.send"] == []
    assert page.locator("#messages .msg").count() == 0
    assert page.input_value("#input") == "你好"

    # Composition over: Enter sends.
    page.evaluate(WATCH_STREAM, True)
    page.keyboard.press("Enter")
    b.wait_for_frame("reply.done")
    assert [f["content"] for f in b.frames.sent if f.get("type") == "chat.send"] == ["你好"]
    assert page.locator("#messages .msg-user .bubble").inner_text() == "你好"


def test_xss_payloads_in_replies_and_messages_stay_inert(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    page.add_init_script(
        """window.__xss = [];
           window.__csp = [];
           document.addEventListener('securitypolicyviolation',
             (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"""
    )
    b.login("alice")

    # A stored reply full of payloads.
    response = page.goto(f"{b.live.url}/c/{b.live.seed['xss_session']}/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.wait_for_selector("#messages .msg-assistant .md a")
    check_inert(b)

    # The same payloads asked as a question (user text) and streamed back as a cached answer.
    page.goto(f"{b.live.url}/")
    b.wait_connected()
    question = XSS_QUESTION
    page.fill("#input", question)
    page.keyboard.press("Enter")
    done = b.wait_for_frame("reply.done")
    assert done["reply"]["served_from_cache"] is True
    page.wait_for_selector("#messages .msg-assistant .badge-cached")
    assert page.locator("#messages .msg-user .bubble").inner_text() == question
    check_inert(b)

    # Clicking the neutered links does nothing either.
    page.locator("#messages").get_by_text("click me").click()
    page.locator("#messages").get_by_text("x", exact=True).click()
    page.wait_for_timeout(200)
    assert b.dialogs == []
    assert page.evaluate("window.__xss") == []


def check_inert(b: Browsing) -> None:
    page = b.page
    page.wait_for_timeout(300)  # give an image error handler the time to fire, if any
    assert b.dialogs == [], f"a payload opened a dialog: {b.dialogs}"
    assert page.evaluate("window.__xss") == [], "a payload ran"
    assert page.evaluate("window.__csp") == [], "the sanitiser let through something CSP stopped"
    messages = page.locator("#messages")
    assert messages.locator("script").count() == 0
    assert messages.locator("img").count() == 0
    assert messages.locator("[onerror], [onclick], [onload]").count() == 0
    hrefs = page.eval_on_selector_all("#messages a[href]", "links => links.map(a => a.href)")
    assert all(re.match(r"https?:", href) for href in hrefs), hrefs
    assert "https://example.com/docs" in hrefs
    rels = page.eval_on_selector_all("#messages a[href]", "links => links.map(a => a.rel)")
    assert all(rel == "noopener noreferrer" for rel in rels), rels
    # Raw HTML is shown as text, not dropped: the reader sees what the model wrote.
    text = page.locator("#messages .msg-assistant .md").last.inner_text()
    assert "<script>window.__xss" in text
    assert "<img src=x onerror=" in text


def test_archive_restore_and_delete_for_good(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    page.evaluate(WATCH_STREAM, True)
    send(b, "Name one planet.")
    session_id = b.wait_for_frame("reply.start")["session"]["id"]
    b.wait_for_frame("reply.done")
    page.goto(f"{b.live.url}/")  # another page: archive it from the sidebar
    b.wait_connected()
    item = page.locator(f'.session-item[data-session-id="{session_id}"]')
    item.hover()
    item.get_by_role("button", name="Archive Name one planet.").click()
    page.wait_for_selector("#notice.info >> text=Archived")
    assert item.count() == 0

    # Undo puts it back at once.
    page.locator("#notice").get_by_role("button", name="Undo").click()
    page.wait_for_selector(f'.session-item[data-session-id="{session_id}"]')
    item.hover()
    item.get_by_role("button", name="Archive Name one planet.").click()
    page.wait_for_selector("#notice.info >> text=Archived")

    # The archive lists it; its address opens it read-only.
    page.click("#archive-toggle")
    page.wait_for_selector("#archive-head:not([hidden])")
    item.locator(".session-link").click()
    page.wait_for_url(f"**/c/{session_id}/")
    page.wait_for_selector("#archived-bar")
    assert page.locator("#messages .msg-user .bubble").inner_text() == "Name one planet."
    assert page.locator("#messages .msg-assistant .md").inner_text().strip()
    assert page.locator("#composer").is_hidden()
    assert page.locator("#messages button[aria-label='Edit and resend']").count() == 0
    assert page.locator("#messages .regenerate").count() == 0
    assert page.locator("#archive-head").is_visible()  # the sidebar shows the archive
    assert item.is_visible()
    page.screenshot(path=str(ARTIFACTS / "archive-read-only.png"))
    assert_accessible(b)

    # Restore from the page: it is live and writable again.
    page.click("#restore-btn")
    page.wait_for_selector("#composer:not([hidden])")
    b.wait_connected()
    assert page.locator("#archived-bar").count() == 0
    assert page.locator(f'.session-item[data-session-id="{session_id}"]').is_visible()

    # Archived while open (issue #31): the page goes to a new chat, the list stays the list,
    # "New chat" stays, and Undo is offered as for any other; it brings the chat back.
    item.hover()
    item.get_by_role("button", name="Archive Name one planet.").click()
    page.wait_for_url(f"{b.live.url}/")
    page.wait_for_selector("#notice.info >> text=Archived “Name one planet.”")
    b.wait_connected()
    assert page.locator("#archive-head").is_hidden()
    assert page.locator("#archive-toggle").is_visible()
    assert page.locator("#new-chat").is_visible()
    assert page.locator("#archived-bar").count() == 0
    assert page.locator("#composer").is_visible()
    assert item.count() == 0
    page.screenshot(path=str(ARTIFACTS / "archive-open-conversation.png"))
    page.locator("#notice").get_by_role("button", name="Undo").click()
    page.wait_for_url(f"**/c/{session_id}/")
    page.wait_for_selector("#composer:not([hidden])")
    assert page.locator("#archived-bar").count() == 0
    assert page.locator(f'.session-item[data-session-id="{session_id}"]').is_visible()

    # Archive again, then delete for good from its read-only page, after a confirmation.
    item.hover()
    item.get_by_role("button", name="Archive Name one planet.").click()
    page.wait_for_url(f"{b.live.url}/")
    page.click("#archive-toggle")
    page.wait_for_selector("#archive-head:not([hidden])")
    item.locator(".session-link").click()
    page.wait_for_selector("#archived-bar")
    page.click("#delete-btn")
    dialog = page.locator("#confirm-delete")
    assert dialog.is_visible()
    assert "Name one planet." in dialog.inner_text()
    page.screenshot(path=str(ARTIFACTS / "archive-delete-confirmation.png"))
    assert_accessible(b)
    page.click("#confirm-cancel")  # changing one's mind keeps it
    assert dialog.is_hidden()
    assert page.request.get(f"{b.live.url}/c/{session_id}/").status == 200

    item.hover()
    item.get_by_role("button", name="Delete Name one planet. for good").click()
    page.click("#confirm-ok")
    page.wait_for_url(f"{b.live.url}/")
    assert page.request.get(f"{b.live.url}/c/{session_id}/").status == 404
    archived = page.request.get(f"{b.live.url}/sessions/?archived=1").json()["sessions"]
    assert session_id not in [s["id"] for s in archived]
    assert page.locator(f'.session-item[data-session-id="{session_id}"]').count() == 0


def test_a_long_paste_shows_the_room_left_and_is_refused_before_sending(
    browsing: Browsing,
) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    page.evaluate(WATCH_STREAM, True)
    # A first turn long enough that the history counts (the live server's window: 1,024 tokens).
    opening = "Summarise these notes in one line. " + "The quarterly report is late. " * 100
    send(b, opening)
    session_id = b.wait_for_frame("reply.start")["session"]["id"]
    b.wait_for_frame("reply.done")
    page.wait_for_selector("#send-btn:not([hidden])")
    stored_before = page.request.get(f"{b.live.url}/c/{session_id}/messages").json()["messages"]
    room = page.locator("#room")

    # A 40,000-character paste is kept whole (no silent cut) and refused with one message.
    page.fill("#input", "x" * 40_000)
    page.wait_for_selector("#room.over")
    assert len(page.input_value("#input")) == 40_000
    assert "40,000 characters" in room.inner_text()
    assert page.locator("#send-btn").is_disabled()
    page.keyboard.press("Enter")
    page.wait_for_timeout(300)
    assert [f for f in b.frames.sent if f.get("type") == "chat.send"][1:] == []
    assert page.locator("#notice").is_hidden()  # said once, under the composer

    # Something that fits on its own but not after this conversation: the way out is offered.
    page.fill("#input", "Now translate this paragraph into French. " + "Sales grew a lot. " * 90)
    page.wait_for_selector("#room.over >> text=start a new conversation with it")
    assert "tokens; the model reads 1,024 at most" in room.inner_text()
    page.screenshot(path=str(ARTIFACTS / "long-paste-refused.png"))
    page.keyboard.press("Enter")
    page.wait_for_timeout(300)
    assert len([f for f in b.frames.sent if f.get("type") == "chat.send"]) == 1
    stored = page.request.get(f"{b.live.url}/c/{session_id}/messages").json()["messages"]
    assert stored == stored_before  # nothing of the refused turn was stored

    # Shorter: the counter shows how much of the window is used, and it can be sent.
    page.fill("#input", "Now in French, please.")
    page.wait_for_function("() => !document.querySelector('#room').classList.contains('over')")
    assert "of 1,024 tokens used" in room.inner_text()
    draft = "Translate into French: " + "Sales grew a lot. " * 90
    page.fill("#input", draft)
    page.wait_for_selector("#room.over >> text=start a new conversation with it")

    page.get_by_role("button", name="Start a new conversation").click()
    page.wait_for_url(f"{b.live.url}/")
    b.wait_connected()
    assert page.input_value("#input") == draft
    page.wait_for_selector("#send-btn:not([disabled])")
    assert not page.locator("#room").evaluate("el => el.classList.contains('over')")


def test_a_too_long_turn_the_counter_missed_is_refused_by_the_server(
    browsing: Browsing,
) -> None:
    b, page = browsing, browsing.page
    page.route("**/sessions/measure", lambda route: route.abort())  # the counter is down
    b.login("alice")
    text = "Please read this. " + "Lorem ipsum dolor sit amet. " * 300
    send(b, text)
    error = b.wait_for_frame("error")
    assert error["code"] == "prompt_too_long"
    assert "reply_id" not in error
    page.wait_for_selector("#room.over")
    assert page.input_value("#input") == text  # given back, not lost
    assert "1,024" in page.locator("#room").inner_text()
    assert page.locator("#notice").is_hidden()
    assert page.locator("#messages .msg").count() == 0  # no failed reply, no question
    assert b.frames.of("reply.start") == []


def test_another_users_session_url_is_404(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    b.login("alice")
    response = page.goto(f"{b.live.url}/c/{b.live.seed['bob_session']}/")
    assert response.status == 404
    assert "Only Bob may read this" not in page.content()


def test_phone_width_collapses_the_sidebar_and_renders_chinese(phone: Browsing) -> None:
    b, page = phone, phone.page
    b.login("alice")
    page.goto(f"{b.live.url}/c/{b.live.seed['chinese_session']}/")
    page.wait_for_selector("#messages .msg-assistant .code-block")

    sidebar = page.locator("#sidebar")
    box = sidebar.bounding_box()
    assert box is not None
    assert box["x"] + box["width"] <= 0, "the sidebar should start hidden"
    assert "中文 and English" in page.locator("#messages .msg-assistant .md").inner_text()
    assert page.locator("#messages .badge-cached").is_visible()
    # Nothing is wider than the phone.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390

    page.click("#menu-btn")
    page.wait_for_timeout(350)
    box = sidebar.bounding_box()
    assert box is not None
    assert box["x"] >= 0
    assert page.locator(".session-item", has_text="用 Python 读取文件").is_visible()


# Every visible control a finger might aim at; each must be a 44×44 px target on a phone.
CONTROLS = (
    "button:visible, .session-link:visible, .new-chat:visible, #session-search:visible, "
    "select:visible"
)


def small_targets(b: Browsing) -> list[str]:
    return list(
        b.page.eval_on_selector_all(
            CONTROLS.replace(":visible", ""),
            """els => els.filter(el => el.offsetParent !== null && el.getClientRects().length)
                 .map(el => [el, el.getBoundingClientRect()])
                 .filter(([el, r]) => r.width > 0 && (r.width < 44 || r.height < 44))
                 .map(([el, r]) => (el.getAttribute('aria-label') || el.textContent.trim()
                   || el.className) + ' ' + Math.round(r.width) + 'x' + Math.round(r.height))""",
        )
    )


def test_on_a_touch_keyboard_enter_is_a_new_line_and_the_button_sends(
    touch_phone: Browsing,
) -> None:
    b, page = touch_phone, touch_phone.page
    b.login("alice")
    assert page.get_attribute("#input", "enterkeyhint") == "enter"
    page.tap("#input")
    page.keyboard.type("Name one colour.")
    page.keyboard.press("Enter")
    page.keyboard.type("Answer in one word.")
    page.wait_for_timeout(200)
    assert page.input_value("#input") == "Name one colour.\nAnswer in one word."
    assert [f for f in b.frames.sent if f.get("type") == "chat.send"] == []

    page.evaluate(WATCH_STREAM, True)
    page.tap("#send-btn")
    start = b.wait_for_frame("reply.start")
    assert start["user_message"]["content"] == "Name one colour.\nAnswer in one word."
    b.wait_for_frame("reply.done")
    page.wait_for_selector("#messages .msg-assistant .msg-actions button")
    assert page.locator("#messages .msg-user .bubble").inner_text() == (
        "Name one colour.\nAnswer in one word."
    )
    assert small_targets(b) == []

    # The edit box too: Enter is a new line there, its Send button sends.
    page.tap("#messages .msg-user .msg-actions button[aria-label='Edit and resend']")
    page.keyboard.press("End")
    page.keyboard.press("Enter")
    page.keyboard.type("Thanks.")
    assert len(b.frames.of("reply.start")) == 1
    assert small_targets(b) == []
    page.tap("#messages .msg-user .editor .btn-primary")
    again = b.wait_for_frame("reply.start", count=2)
    assert again["user_message"]["content"].endswith("\nThanks.")
    b.wait_for_frame("reply.done", count=2, timeout=180)

    # The drawer's controls are fingertip-sized as well.
    page.tap("#menu-btn")
    page.wait_for_timeout(350)
    assert small_targets(b) == []


def test_phone_width_controls_are_44_px_targets(phone: Browsing) -> None:
    b, page = phone, phone.page
    b.login("alice")
    page.goto(f"{b.live.url}/c/{b.live.seed['chinese_session']}/")
    page.wait_for_selector("#messages .msg-assistant .code-block")
    assert small_targets(b) == []


# --- states, against a scripted websocket (no model: the server side is played by the test) --


def _message(id_: int, role: str, content: str = "", **fields: object) -> dict[str, object]:
    return {
        "id": id_,
        "role": role,
        "content": content,
        "status": "streaming" if role == "assistant" else "complete",
        "finish_reason": "",
        "served_from_cache": False,
        "error": "",
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "ttft_ms": None,
        "created_at": "2026-01-01T00:00:00+00:00",
        **fields,
    }


def _script(text: str, turn: int) -> list[dict[str, object]]:
    """What the scripted server answers to a chat.send of `text`."""
    user, reply = 100 + 2 * turn, 101 + 2 * turn
    start = {
        "type": "reply.start",
        "session": {"id": "5a1e5a1e-0000-4000-8000-000000000001", "title": "Scripted"},
        "session_created": turn == 0,
        "user_message": _message(user, "user", text),
        "reply": _message(reply, "assistant"),
    }

    def failed(code: str, message: str, **extra: object) -> list[dict[str, object]]:
        error = {"type": "error", "code": code, "message": message, "reply_id": reply, **extra}
        done = _message(reply, "assistant", status="error", finish_reason="error", error=message)
        return [start, error, {"type": "reply.done", "reply": done}]

    if text == "queue":
        return [start, {"type": "queued", "reply_id": reply, "position": 3, "estimated_wait": 42}]
    if text == "busy":
        return failed("busy", "The assistant is at capacity; try again shortly.", retry_after=2)
    if text == "down":
        return failed("worker_down", "The model is not running")
    if text == "long":
        return failed("prompt_too_long", "The conversation is 5000 tokens long.")
    raise AssertionError(text)


def test_waiting_busy_failure_and_reconnecting_states_are_shown(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    sockets: list[object] = []
    turns: list[str] = []

    def scripted_server(ws: object) -> None:
        sockets.append(ws)

        def on_message(message: str | bytes) -> None:
            frame = json.loads(message)
            if frame["type"] == "chat.send":
                for answer in _script(frame["content"], len(turns)):
                    ws.send(json.dumps(answer))  # type: ignore[attr-defined]
                turns.append(frame["content"])

        ws.on_message(on_message)  # type: ignore[attr-defined]

    page.route_web_socket(re.compile(r".*/ws/chat/$"), scripted_server)
    b.login("alice")
    shots = ARTIFACTS / "states"
    shots.mkdir(parents=True, exist_ok=True)
    notice = page.locator("#notice")

    send(b, "queue")
    page.wait_for_selector("#messages .msg-assistant .waiting")
    assert (
        "number 3 (about 42 s to go)"
        in page.locator("#messages .msg-assistant .waiting").inner_text()
    )
    assert "number 3 in line, about 42 s to go" in notice.inner_text()
    assert page.locator("#stop-btn").is_visible()
    page.screenshot(path=str(shots / "queued.png"))
    # The scripted reply never ends: finish it as the server would after a stop.
    page.click("#stop-btn")
    done = _message(101, "assistant", "", status="interrupted", finish_reason="cancelled")
    sockets[-1].send(json.dumps({"type": "reply.done", "reply": done}))  # type: ignore[attr-defined]
    page.wait_for_selector("#send-btn:not([hidden])")

    send(b, "busy")
    page.wait_for_selector("#notice.warn")
    assert "at capacity" in notice.inner_text()
    assert "retry in" in notice.inner_text()
    retry = notice.get_by_role("button", name="Retry")
    assert retry.is_disabled()
    page.screenshot(path=str(shots / "busy.png"))
    page.wait_for_function("() => !document.querySelector('#notice .btn-primary').disabled")
    assert "retry now" in notice.inner_text()

    send(b, "down")
    page.wait_for_selector("#notice.error")
    assert "model is not answering" in notice.inner_text()
    assert page.locator("#messages .msg-assistant .msg-error").last.inner_text() == (
        "The model is not running"
    )

    send(b, "long")
    page.wait_for_selector("#notice.error >> text=too long")
    assert notice.get_by_role("button", name="Start a new conversation").is_visible()
    page.screenshot(path=str(shots / "prompt_too_long.png"))

    sockets[-1].close(code=1011)  # type: ignore[attr-defined]
    page.wait_for_selector("#conn-state.offline")
    assert "Connection lost" in notice.inner_text()
    page.screenshot(path=str(shots / "reconnecting.png"))
    # It reconnects by itself (the route answers the new socket too), and says so.
    page.wait_for_selector("#conn-state.online", state="attached", timeout=10_000)
    assert len(sockets) == 2
    assert notice.is_hidden()


# Clicks Send the instant the page allows it again (the reply before has ended), in the page
# itself: no round trip to the test between reply.done and the follow-up.
SEND_WHEN_READY = """() => {
  const button = document.getElementById('send-btn');
  const observer = new MutationObserver(() => {
    if (button.disabled || button.hidden) return;
    observer.disconnect();
    window.__followUpAt = performance.now();
    button.click();
  });
  observer.observe(button, {attributes: true, attributeFilter: ['disabled', 'hidden']});
}"""


def test_a_follow_up_sent_the_moment_a_reply_ends_is_answered_while_titling(
    browsing_with_titles: Browsing,
) -> None:
    """With titles on (as `make run` has them), the first reply of a new conversation is
    followed by a title request; a person who answers at once must not be told to wait."""
    b, page = browsing_with_titles, browsing_with_titles.page
    b.login("alice")
    send(b, "Name three colours.")
    b.wait_for_frame("reply.start")
    page.fill("#input", "And three more?")  # typed while the reply streams; Send waits
    page.evaluate(SEND_WHEN_READY)

    deadline = time.monotonic() + 180
    while len(b.frames.of("reply.done")) < 2 and not b.frames.of("error"):
        assert time.monotonic() < deadline, f"no second reply.done: {b.frames.received}"
        page.wait_for_timeout(50)

    sends = [f for f in b.frames.sent if f.get("type") == "chat.send"]
    assert [f["content"] for f in sends] == ["Name three colours.", "And three more?"]
    assert b.frames.of("error") == []
    assert [f["reply"]["status"] for f in b.frames.of("reply.done")] == ["complete", "complete"]
    session_id = b.frames.of("reply.start")[0]["session"]["id"]
    assert b.frames.of("reply.start")[1]["session"]["id"] == session_id
    page.wait_for_selector("#messages .msg-assistant:not(.streaming) >> nth=1")
    assert "Wait for the reply" not in page.locator("body").inner_text()
