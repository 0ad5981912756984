"""Model output rendered in the real page cannot dress up as the UI: no class or data-*
attribute from the model survives, except a code block's language (and highlight.js's own)."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Browsing

pytestmark = pytest.mark.browser

IMITATION = (
    '<div class="msg assistant error-banner" data-reply-id="1" data-role="system" id="input">'
    '<button class="btn btn-primary" data-action="stop">Log in again</button>'
    '<p class="conn-state online" aria-label="x">Connection lost</p></div>'
    '<pre><code class="language-python msg">print(1)</code></pre>'
)


def test_the_sanitiser_strips_every_class_and_data_attribute_but_the_code_language(
    browsing: Browsing,
) -> None:
    browsing.login("alice")
    html = browsing.page.evaluate("(h) => window.QassistMarkdown.sanitize(h)", IMITATION)
    assert "data-" not in html
    assert "msg" not in html
    assert "btn" not in html
    assert "error-banner" not in html
    assert "conn-state" not in html
    assert 'id="input"' not in html  # named properties are prefixed, so no clobbering
    assert '<code class="language-python">print(1)</code>' in html


def test_rendered_markdown_keeps_the_highlighting_classes(browsing: Browsing) -> None:
    browsing.login("alice")
    classes = browsing.page.evaluate(
        """(text) => {
            const el = document.createElement("div");
            window.QassistMarkdown.render(el, text, true);
            return [...el.querySelectorAll("[class]")].map((n) => n.className);
        }""",
        "Here:\n\n```python\ndef f():\n    return 1\n```\n\n<b class='msg'>hi</b>",
    )
    assert any("hljs" in c for c in classes)
    assert any(c.startswith("hljs-") for c in classes)  # highlight.js's own token classes
    assert not any("msg" in c for c in classes)
