"""The chat with two models (issue #36), in Chromium against a live server that serves the
embedded model under two names (by registry name, the default, and by its path), an engine
each: Acme's members pick the model in the composer, the reply says which model wrote it, and
the conversation remembers the pick."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import MODEL, Browsing, LiveServer, _live_server, _open_page
from tests.browser.test_chat_ui import send

DEFAULT = "smollm2-135m"
OTHER = str(MODEL)  # the same file by its path: a second engine, nothing fetched


@pytest.fixture(scope="module")
def two_model_server(
    requirements: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    yield from _live_server(
        tmp_path_factory,
        QASSIST_MODEL=DEFAULT,
        QASSIST_MODELS=f"{DEFAULT},{OTHER}",
        seed_more=["tests.browser.seed_models"],
    )


@pytest.fixture
def browsing_two(
    browser: Any, two_model_server: LiveServer, request: pytest.FixtureRequest
) -> Iterator[Browsing]:
    yield from _open_page(browser, two_model_server, request, {"width": 1280, "height": 800})


def test_a_picked_model_writes_the_reply_and_the_conversation_keeps_it(
    browsing_two: Browsing,
) -> None:
    b, page = browsing_two, browsing_two.page
    b.login("alice")
    picker = page.locator("#model-select")
    assert picker.input_value() == DEFAULT
    assert page.locator("label[for=model-select]").inner_text() == "Model"

    picker.select_option(OTHER)
    send(b, "Say hello.")
    start = b.wait_for_frame("reply.start")
    done = b.wait_for_frame("reply.done")

    assert done["reply"]["model"] == OTHER
    assert [f for f in b.frames.sent if f["type"] == "chat.send"][-1]["model"] == OTHER
    page.wait_for_selector("#messages .msg-assistant:not(.streaming) .badge-model")
    assert page.locator("#messages .msg-assistant .badge-model").last.inner_text() == OTHER
    page.reload()
    page.wait_for_selector("#messages .msg-assistant .badge-model")
    assert page.url.endswith(f"/c/{start['session']['id']}/")
    assert page.locator("#model-select").input_value() == OTHER  # remembered
