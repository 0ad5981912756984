"""A website source against a real HTTP server on 127.0.0.1 (http.server): the crawl within the
site, robots.txt, canonical links, politeness, conditional re-syncs, deletions, bad sites."""

from __future__ import annotations

import itertools
import os
import time

import pytest

from knowledge.models import Chunk, Document
from sources.models import Source, SourceItem, SourceRun
from tests.sources.conftest import make_source, titles

pytestmark = pytest.mark.django_db


@pytest.fixture
def intranet(site):
    site.page("intranet/index.html", '<h1>Intranet</h1><p>Start here.</p>'
              '<a href="travel.html">Travel</a> <a href="hr/leave.html">Leave</a> '
              '<a href="/elsewhere/secret.html">Elsewhere</a> '
              '<a href="http://example.invalid/x.html">Outside</a> '
              '<a href="logo.png">Logo</a> <a href="private/pay.html">Pay</a> '
              '<a href="travel.html?print=1">Print</a>', title="Intranet")  # fmt: skip
    site.page("intranet/travel.html", "<h1>Travel</h1><p>A hotel night costs at most EUR 180."
              '</p><a href="index.html">Home</a>', title="Travel policy")  # fmt: skip
    site.page("intranet/hr/leave.html", "<p>Everyone has 28 days of leave a year.</p>",
              title="Leave")  # fmt: skip
    site.page("intranet/private/pay.html", "<p>Salary bands: secret.</p>", title="Pay")
    site.page("elsewhere/secret.html", "<p>Outside the start folder.</p>", title="Secret")
    # The print view names the page it copies as canonical: indexed once, under that page.
    (site.root / "robots.txt").write_text("User-agent: *\nDisallow: /intranet/private/\n")
    return site


def start(site) -> str:
    return f"{site.url}/intranet/index.html"


def test_the_crawl_stays_in_the_site_and_honours_robots_txt(tenant, intranet, syncer):
    source = make_source(tenant, Source.Kind.WEBSITE, start(intranet), delay_seconds=0)
    run = syncer(source)
    assert run.status == SourceRun.Status.DONE, run.error
    assert titles(tenant) == ["Intranet", "Leave", "Travel policy"]
    fetched = intranet.paths()
    assert "/intranet/private/pay.html" not in fetched  # robots.txt
    assert "/elsewhere/secret.html" not in fetched  # outside the start folder
    assert "/intranet/logo.png" not in fetched  # not a document format
    assert (
        Document.objects.get(title="Travel policy").origin == f"{intranet.url}/intranet/travel.html"
    )


def test_a_page_naming_another_as_canonical_is_indexed_once(tenant, intranet, syncer):
    intranet.page("intranet/travel-print.html",
                  '<link rel="canonical" href="travel.html"><p>A hotel night costs at most '
                  "EUR 180.</p>", title="Travel (print)")  # fmt: skip
    intranet.page("intranet/index.html", '<a href="travel-print.html">Print</a>', title="Home")
    source = make_source(tenant, Source.Kind.WEBSITE, start(intranet), delay_seconds=0)
    syncer(source)
    assert titles(tenant) == ["Home", "Travel policy"]


def test_a_resync_asks_conditionally_and_reads_no_content(tenant, intranet, syncer):
    source = make_source(tenant, Source.Kind.WEBSITE, start(intranet), delay_seconds=0)
    syncer(source)
    run = syncer(source)
    # Three pages, and the print view (?print=1) whose bytes are the travel page's: kept
    # without a document of its own.
    assert (run.unchanged, run.added, run.changed, run.removed, run.failed) == (4, 0, 0, 0, 0)
    assert run.bytes_read == 0  # every page answered 304 Not Modified


def test_a_changed_page_is_replaced_and_a_removed_one_leaves(tenant, intranet, syncer):
    source = make_source(tenant, Source.Kind.WEBSITE, start(intranet), delay_seconds=0)
    syncer(source)
    later = time.time() + 5
    travel = intranet.page("intranet/travel.html", "<p>A hotel night costs at most EUR 210.</p>"
                           '<a href="index.html">Home</a>', title="Travel policy")  # fmt: skip
    os.utime(travel, (later, later))
    (intranet.root / "intranet" / "hr" / "leave.html").unlink()
    run = syncer(source)
    assert (run.changed, run.removed) == (1, 1)
    assert "EUR 210" in Chunk.objects.get(document__title="Travel policy").text
    assert titles(tenant) == ["Intranet", "Travel policy"]


def test_a_sitemap_gives_the_pages(tenant, site, syncer):
    for n in range(3):
        site.page(f"docs/p{n}.html", f"<p>Policy number {n}.</p>", title=f"Policy {n}")
    (site.root / "docs" / "sitemap.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        + "".join(f"<url><loc>{site.url}/docs/p{n}.html</loc></url>" for n in range(3))
        + "</urlset>"
    )
    source = make_source(tenant, Source.Kind.WEBSITE, f"{site.url}/docs/sitemap.xml",
                         delay_seconds=0)  # fmt: skip
    run = syncer(source)
    assert run.status == SourceRun.Status.DONE, run.error
    assert titles(tenant) == ["Policy 0", "Policy 1", "Policy 2"]


def test_requests_keep_the_delay_and_the_concurrency(tenant, site, syncer):
    links = "".join(f'<a href="p{n}.html">{n}</a>' for n in range(8))
    site.page("w/index.html", links, title="Index")
    for n in range(8):
        site.page(f"w/p{n}.html", f"<p>Page {n}.</p>", title=f"P{n}")
    site.slow = 0.05
    source = make_source(tenant, Source.Kind.WEBSITE, f"{site.url}/w/index.html",
                         delay_seconds=0.2, concurrency=2)  # fmt: skip
    run = syncer(source)
    assert run.added == 9
    starts = [t for t, _, path in site.requests]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # The crawler spaces its requests' starts 0.2 s apart; the server sees them with the
    # machine's scheduling jitter on top, so each gap (and the whole) gets 0.1 s of slack.
    assert starts[-1] - starts[0] >= 0.2 * (len(starts) - 1) - 0.1
    assert min(gaps) >= 0.1
    assert site.most_in_flight <= 2


def test_robots_crawl_delay_slows_the_crawl_further(tenant, site, syncer):
    site.page("w/index.html", '<a href="a.html">a</a>', title="Index")
    site.page("w/a.html", "<p>A.</p>", title="A")
    (site.root / "robots.txt").write_text("User-agent: *\nCrawl-delay: 0.5\n")
    source = make_source(tenant, Source.Kind.WEBSITE, f"{site.url}/w/index.html",
                         delay_seconds=0)  # fmt: skip
    syncer(source)
    starts = [t for t, _, _ in site.requests]
    assert min(b - a for a, b in itertools.pairwise(starts)) >= 0.4


def test_an_unreachable_site_fails_with_its_reason(tenant, syncer):
    source = make_source(tenant, Source.Kind.WEBSITE, "http://127.0.0.1:9/intranet/",
                         delay_seconds=0)  # fmt: skip
    run = syncer(source)
    assert run.status == SourceRun.Status.FAILED
    assert "cannot be reached" in run.error


def test_a_site_asking_for_credentials_fails_with_its_reason(tenant, site, syncer):
    def refuse(handler):
        handler.send_response(401)
        handler.send_header("WWW-Authenticate", 'Basic realm="intranet"')
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    site.routes["/robots.txt"] = refuse
    site.routes["/intranet/"] = refuse
    source = make_source(tenant, Source.Kind.WEBSITE, f"{site.url}/intranet/", delay_seconds=0)
    run = syncer(source)
    assert run.status == SourceRun.Status.FAILED
    assert "401" in run.error


def test_a_redirect_loop_fails_the_source_with_its_reason(tenant, site, syncer):
    def to(target):
        def answer(handler):
            handler.send_response(302)
            handler.send_header("Location", target)
            handler.send_header("Content-Length", "0")
            handler.end_headers()

        return answer

    site.routes["/loop/a.html"] = to("/loop/b.html")
    site.routes["/loop/b.html"] = to("/loop/a.html")
    source = make_source(tenant, Source.Kind.WEBSITE, f"{site.url}/loop/a.html", delay_seconds=0)
    run = syncer(source)
    assert run.status == SourceRun.Status.FAILED
    assert "loop" in run.error


def test_an_endless_download_is_cut_at_the_limit(tenant, site, syncer, settings):
    settings.QASSIST_KNOWLEDGE_MAX_FILE_MB = 1
    site.page("big/index.html", '<a href="dump.txt">dump</a>', title="Index")

    def endless(handler):  # no Content-Length: the size shows only as it comes
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.end_headers()
        try:
            for _ in range(10_000):  # 640 MB if nobody stopped reading
                handler.wfile.write(b"x" * 65536)
        except (BrokenPipeError, ConnectionResetError):
            pass

    site.routes["/big/dump.txt"] = endless
    source = make_source(tenant, Source.Kind.WEBSITE, f"{site.url}/big/index.html",
                         delay_seconds=0)  # fmt: skip
    run = syncer(source)
    assert run.status == SourceRun.Status.DONE
    assert run.failed == 1
    assert run.added == 1
    assert "download was stopped" in SourceItem.objects.get(status="failed").error
    assert run.bytes_read < 2 * 1024 * 1024


def test_a_page_failing_keeps_its_document_and_the_crawl_goes_on(tenant, intranet, syncer):
    source = make_source(tenant, Source.Kind.WEBSITE, start(intranet), delay_seconds=0)
    syncer(source)

    def broken(handler):
        handler.send_error(500)

    intranet.routes["/intranet/travel.html"] = broken
    run = syncer(source)
    assert run.status == SourceRun.Status.DONE
    assert run.failed == 1
    assert run.removed == 0
    assert titles(tenant) == ["Intranet", "Leave", "Travel policy"]
    assert "500" in SourceItem.objects.get(status="failed").error
