"""Company knowledge in the admin, in headless Chromium: a tenant admin uploads two documents at
once and follows them from queued to ready in the list, which reloads itself meanwhile.

Screenshots (full page) land in test-artifacts/browser/: admin-knowledge-upload.png (the
results of the upload), admin-knowledge-documents.png (the list), admin-knowledge-document.png
(one document's page).
"""

from __future__ import annotations

import re

import pytest

from tests.browser.axe import assert_accessible
from tests.browser.conftest import REPO, Browsing
from tests.browser.test_admin_pages import admin_login, shot, watch_console

pytestmark = pytest.mark.browser

HANDBOOK = REPO / "bench" / "rag_eval" / "data" / "acme"


def check_accessible(b: Browsing, problems: list[str]) -> None:
    """axe-core on the page as it is; what the page reported before stays, what axe's own
    probes make the CSP report (inline styles) is set aside."""
    before = len(problems)
    assert_accessible(b)
    del problems[before:]


def test_a_tenant_admin_uploads_two_documents_and_sees_them_listed(browsing: Browsing) -> None:
    b, page = browsing, browsing.page
    problems = watch_console(page)
    admin_login(b, "carol")
    page.goto(f"{b.live.url}/admin/knowledge/document/")
    page.get_by_role("link", name="Upload documents").click()
    page.wait_for_selector("#upload-form")
    # Carol runs one tenant: it is chosen already, and no other is offered.
    assert page.locator("select[name=tenant] option").all_inner_texts() == ["Acme"]
    assert "at most 50 MB" in page.locator("#content").inner_text()

    # Dropped on the form (issue #31), the files are the ones chosen.
    assert page.locator("#upload-drop").is_visible()
    transfer = page.evaluate_handle(
        """(texts) => { const data = new DataTransfer();
                       for (const [name, text] of texts)
                         data.items.add(new File([text], name, {type: 'text/markdown'}));
                       return data; }""",
        [[name, (HANDBOOK / name).read_text()] for name in ("travel-policy.md", "onboarding.md")],
    )
    page.dispatch_event("#upload-form", "dragenter", {"dataTransfer": transfer})
    page.dispatch_event("#upload-form", "dragover", {"dataTransfer": transfer})
    assert "upload-dragging" in (page.locator("#upload-form").get_attribute("class") or "")
    page.dispatch_event("#upload-form", "drop", {"dataTransfer": transfer})
    assert "upload-dragging" not in (page.locator("#upload-form").get_attribute("class") or "")
    assert page.locator("#upload-selection").inner_text() == "2 file(s) chosen."
    assert page.eval_on_selector(
        "input[name=documents]", "i => Array.from(i.files).map(f => f.name)"
    ) == ["travel-policy.md", "onboarding.md"]
    assert page.locator("input[name=title]").is_disabled()  # a title names one document
    check_accessible(b, problems)
    page.get_by_role("button", name="Upload").click()

    results = page.locator("#upload-results")
    results.wait_for()
    assert "2 of 2 file(s) accepted" in results.inner_text()
    rows = results.locator("tbody tr").all_inner_texts()
    assert [row.split("\t")[0] for row in rows] == ["travel-policy.md", "onboarding.md"]
    assert all("Accepted: Queued for indexing." in row for row in rows)
    # The storage line counts both; the live server's Celery worker may have begun on them.
    usage = page.locator("#storage-usage").inner_text()
    states = re.search(r"2 document\(s\): ([^\t\n]+)", usage)
    assert states is not None, usage
    counted = re.findall(r"(\d+) (\w+)", states.group(1))
    assert {state for _, state in counted} <= {"queued", "indexing", "ready"}, usage
    assert sum(int(n) for n, _ in counted) == 2, usage
    shot(page, "admin-knowledge-upload")

    page.locator("#upload-list-link").click()
    page.wait_for_selector("#result_list")
    listed = page.locator("#result_list tbody tr")
    assert listed.count() == 2
    for row in listed.all_inner_texts():
        assert "Markdown" in row
        assert "carol" in row
        # The live server's Celery worker indexes them: each is somewhere on its way.
        assert any(state in row for state in ("Queued", "Indexing", "Ready")), row
    # No axe run on the list: Django's own changelist widgets (the search box labelled by an
    # icon, the filters' small links) fail it on every admin list alike.
    shot(page, "admin-knowledge-documents")

    # While a document is on its way the list reloads itself until both are ready, with no
    # action of Carol's (a focused field would hold the reload off).
    page.wait_for_function(
        """() => {
            const rows = [...document.querySelectorAll('#result_list tbody tr')];
            return rows.length === 2 && rows.every((row) => row.innerText.includes('Ready'));
        }""",
        timeout=90_000,
    )
    assert page.locator("#result_list [data-qa-busy]").count() == 0

    page.locator("#result_list tbody tr").first.locator("th a").click()
    page.wait_for_selector("#document-status")
    status = page.locator("#document-status").inner_text()
    assert "Ready: questions in Acme are answered from its" in status
    assert page.locator("#replace-file").is_visible()
    check_accessible(b, problems)
    shot(page, "admin-knowledge-document")
    assert problems == []
