"""An intranet site: crawled from a start page (or a sitemap) within its host and path.

- robots.txt is honoured with Protego (Scrapy's parser: wildcards, Allow/Disallow precedence,
  Crawl-delay and Sitemap lines, which the stdlib's urllib.robotparser gets wrong or lacks).
- Sitemaps (XML, sitemap indexes, gzipped, RSS/Atom, plain text) are read with
  ultimate-sitemap-parser, through this module's own client so that its requests follow the
  same rules (robots.txt, the pace, the host, the size limit).
- Politeness: at most `concurrency` requests at once (1 to 4), their starts at least `delay`
  seconds apart (more when robots.txt's Crawl-delay asks for more).
- Pages stay within the start page's scheme, host and folder; a page whose canonical link names
  another page of the site is not indexed under its own address (the canonical one is, once);
  `<meta name="robots" content="noindex">` pages are not indexed, their links are followed
  (unless `nofollow`). Their HTML is made text by the knowledge parsers, like an upload.
- Incremental: each page is asked for with If-None-Match / If-Modified-Since; a 304 costs no
  body, and the links it held last time carry the crawl on.
"""

from __future__ import annotations

import gzip
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

import httpx
from lxml import html as lxml_html
from protego import Protego
from usp.fetch_parse import SitemapFetcher
from usp.objects.sitemap import InvalidSitemap
from usp.web_client.abstract_client import (
    AbstractWebClient,
    AbstractWebClientResponse,
    AbstractWebClientSuccessResponse,
    WebClientErrorResponse,
)

from sources.connectors import Connector, Found, ItemError, Lookup, SourceError, readable_name
from sources.connectors.http import (
    TIMEOUT,
    USER_AGENT,
    Pace,
    check_url,
    read_body,
    unreachable,
)

MAX_REDIRECTS = 10
ROBOTS_LIMIT = 512 * 1024
SITEMAP_LIMIT = 50 * 1024 * 1024  # the sitemaps protocol's own limit
HTML_TYPES = ("text/html", "application/xhtml+xml")
TYPE_EXTENSIONS = {
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "text/markdown": ".md",
    "text/plain": ".txt",
}
# Links never worth a request: what the knowledge parsers do not read.
SKIPPED_SUFFIXES = {
    ".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".ico", ".css", ".js", ".zip", ".gz",
    ".tar", ".7z", ".mp3", ".mp4", ".avi", ".mov", ".xlsx", ".xls", ".pptx", ".ppt", ".doc",
    ".exe", ".iso", ".woff", ".woff2", ".ttf", ".json", ".xml",
}  # fmt: skip


def normalize(url: str) -> str:
    """One address per page: no fragment, lower-case scheme and host, no default port."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    if port and not ((scheme == "http" and port == 80) or (scheme == "https" and port == 443)):
        host = f"{host}:{port}"
    return urlunsplit((scheme, host, parts.path or "/", parts.query, ""))


@dataclass(frozen=True)
class Scope:
    """What belongs to the site: the start page's scheme, host and folder."""

    origin: str  # scheme://host[:port]
    prefix: str  # a path ending with "/"

    @classmethod
    def of(cls, url: str) -> Scope:
        parts = urlsplit(normalize(url))
        path = parts.path
        prefix = path if path.endswith("/") else path.rsplit("/", 1)[0] + "/"
        return cls(f"{parts.scheme}://{parts.netloc}", prefix)

    def holds(self, url: str) -> bool:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc}" == self.origin and parts.path.startswith(
            self.prefix
        )


@dataclass
class Page:
    """One request's outcome."""

    url: str  # after redirects
    status: int
    content: bytes = b""
    content_type: str = ""
    etag: str = ""
    last_modified: str = ""
    length: int | None = None


class WebsiteConnector(Connector):
    def __init__(
        self,
        *,
        location: str,
        known: Lookup,
        file_limit: int,
        delay: float,
        concurrency: int,
        auth: tuple[str, str] | None = None,
        max_pages: int = 100_000,
    ) -> None:
        super().__init__(known=known, file_limit=file_limit)
        check_url(location)
        self.start = normalize(location)
        self.scope = Scope.of(self.start)
        self.concurrency = max(1, min(4, concurrency))
        self.max_pages = max_pages
        self.client = httpx.Client(
            timeout=TIMEOUT,
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT},
            auth=auth,
            limits=httpx.Limits(max_connections=self.concurrency),
        )
        self.robots = Protego.parse("")
        self.pace = Pace(delay)
        self.requests = 0  # made by this connector (the bench and tests read it)

    def close(self) -> None:
        self.client.close()

    # --- requests ---------------------------------------------------------------------------

    def _get(self, url: str, *, limit: int, headers: dict[str, str] | None = None) -> Page:
        """One GET, redirects followed by hand (each target checked and kept in the site)."""
        chain = [url]
        for _ in range(MAX_REDIRECTS + 1):
            self.pace.wait()
            self.requests += 1
            with self.client.stream("GET", chain[-1], headers=headers or {}) as response:
                if response.has_redirect_location:
                    target = normalize(urljoin(chain[-1], response.headers.get("Location", "")))
                    if target in chain:
                        raise ItemError(f"{url} redirects in a loop ({len(chain)} steps).")
                    check_url(target)
                    chain.append(target)
                    continue
                page = Page(
                    url=chain[-1],
                    status=response.status_code,
                    content_type=response.headers.get("Content-Type", "").split(";")[0].strip(),
                    etag=response.headers.get("ETag", ""),
                    last_modified=response.headers.get("Last-Modified", ""),
                )
                if response.status_code == 200:
                    page.content = read_body(response, limit)
                return page
        raise ItemError(f"{url} redirects more than {MAX_REDIRECTS} times.")

    def _allowed(self, url: str) -> bool:
        return bool(self.robots.can_fetch(url, USER_AGENT))

    # --- the crawl --------------------------------------------------------------------------

    def _begin(self) -> list[str]:
        """robots.txt and the sitemaps: the crawl's first addresses. The start page failing is
        the source failing."""
        try:
            robots = self._get(f"{self.scope.origin}/robots.txt", limit=ROBOTS_LIMIT)
        except httpx.HTTPError as exc:
            raise unreachable(self.start, exc) from None
        except ItemError:
            robots = Page(url="", status=404)
        if robots.status == 200:
            self.robots = Protego.parse(robots.content.decode("utf-8", "replace"))
            delay = self.robots.crawl_delay(USER_AGENT)
            if delay:
                self.pace.slow_to(float(delay))
        elif robots.status in (401, 403):
            raise SourceError(
                f"{self.scope.origin} refused access ({robots.status}): check the user name "
                "and password."
            )
        seeds: list[str] = []
        sitemaps = [normalize(s) for s in self.robots.sitemaps]
        if self._is_sitemap(self.start):
            sitemaps.insert(0, self.start)
        else:
            seeds.append(self.start)
        for sitemap in dict.fromkeys(sitemaps):
            if self.scope.holds(sitemap) or sitemap == self.start:
                seeds += self._sitemap_pages(sitemap)
        if not seeds:
            raise SourceError(f"The sitemap {self.start} lists no page of the site.")
        return seeds

    @staticmethod
    def _is_sitemap(url: str) -> bool:
        path = urlsplit(url).path.lower()
        return path.endswith((".xml", ".xml.gz")) or "sitemap" in PurePosixPath(path).name

    def _sitemap_pages(self, url: str) -> list[str]:
        tree = SitemapFetcher(url, recursion_level=0, web_client=_SitemapClient(self)).sitemap()
        if isinstance(tree, InvalidSitemap):
            if url == self.start:
                raise SourceError(f"The sitemap {url} cannot be read: {tree.reason}")
            return []
        pages = []
        for page in tree.all_pages():
            address = normalize(page.url)
            if self.scope.holds(address):
                pages.append(address)
        return pages

    def walk(self) -> Iterator[Found]:
        seeds = self._begin()
        queue: deque[str] = deque(dict.fromkeys(seeds))
        queued = set(queue)
        yielded = 0
        while queue and yielded < self.max_pages:
            batch: list[str] = []
            while queue and len(batch) < self.concurrency:
                url = queue.popleft()
                known = self.known(url)
                if known is not None and known.done:  # a resumed run: synced already
                    self._enqueue(known.links, queue, queued)
                elif self._allowed(url):
                    batch.append(url)
            if not batch:
                continue
            with ThreadPoolExecutor(max_workers=len(batch)) as pool:
                outcomes = list(pool.map(self._visit, batch))
            for url, outcome in zip(batch, outcomes, strict=True):
                if url == self.start and (outcome is None or isinstance(outcome, Exception)):
                    why = (
                        str(outcome) if outcome is not None else "not found, or it leaves the site"
                    )
                    raise SourceError(f"The start page {url}: {why}")
                if isinstance(outcome, Exception):
                    known = self.known(url)  # its links as they were: the crawl goes on
                    self._enqueue(known.links if known else [], queue, queued)
                    yield Found(key=url, name="", origin=url, error=str(outcome))
                    yielded += 1
                elif outcome is not None:
                    self._enqueue(outcome.links, queue, queued)
                    if outcome.name:
                        yield outcome
                        yielded += 1

    def _enqueue(self, links: list[str], queue: deque[str], queued: set[str]) -> None:
        for link in links:
            if link not in queued and self.scope.holds(link):
                queued.add(link)
                queue.append(link)

    def _visit(self, url: str) -> Found | Exception | None:
        """The page at `url` as Found (`name` empty: follow its links, index nothing), None
        when it is not part of the site's documents, or the failure."""
        known = self.known(url)
        headers = {}
        if known is not None and known.etag:
            headers["If-None-Match"] = known.etag
        if known is not None and known.last_modified:
            headers["If-Modified-Since"] = known.last_modified
        try:
            page = self._get(url, limit=self.file_limit, headers=headers)
        except httpx.HTTPError as exc:
            return ItemError(str(unreachable(url, exc)))
        except (ItemError, SourceError) as exc:
            return exc
        if page.status == 304 and known is not None:
            return Found(
                key=url,
                name="(not modified)",  # not read: the engine keeps its document as it is
                origin=url,
                etag=known.etag,
                last_modified=known.last_modified,
                unchanged=True,
                links=known.links,
            )
        if page.status in (404, 410):
            return None  # gone: its document leaves at the end of the run
        if page.status in (401, 403):
            return ItemError(f"The server refused access to it ({page.status}).")
        if page.status != 200:
            return ItemError(f"The server answered {page.status}.")
        if not self.scope.holds(page.url):
            return None  # redirected out of the site
        return self._found(url, page)

    def _found(self, url: str, page: Page) -> Found | None:
        is_html = page.content_type in HTML_TYPES or (
            not page.content_type
            and page.content.lstrip()[:15].lower().startswith(b"<!doctype html")
        )
        links: list[str] = []
        index = True
        if is_html:
            links, canonical, index, follow = self._links(page)
            if not follow:
                links = []
            if canonical and canonical != normalize(url) and self.scope.holds(canonical):
                # Another address of a page of the site: indexed once, under its own.
                return Found(key=url, name="", origin=url, links=[canonical, *links])
        name = self._name(page.url, page.content_type if not is_html else "text/html")
        if not index or not name:
            return Found(key=url, name="", origin=url, links=links)
        return Found(
            key=url,
            name=name,
            origin=page.url,
            size=len(page.content),
            etag=page.etag,
            last_modified=page.last_modified,
            content=page.content,
            links=links,
        )

    def _links(self, page: Page) -> tuple[list[str], str, bool, bool]:
        """The page's links within the site (in order, once each), its canonical address,
        and whether robots meta tags let it be indexed and its links followed."""
        try:
            tree = lxml_html.fromstring(page.content)
        except (ValueError, lxml_html.etree.ParserError):
            return [], "", True, True
        base = page.url
        for href in tree.xpath("//base/@href")[:1]:
            base = urljoin(page.url, str(href))
        robots = " ".join(str(c).lower() for c in tree.xpath("//meta[@name='robots']/@content"))
        canonical = ""
        for href in tree.xpath("//link[@rel='canonical']/@href")[:1]:
            canonical = normalize(urljoin(base, str(href)))
        links: dict[str, None] = {}
        for href in tree.xpath("//a[not(contains(@rel, 'nofollow'))]/@href"):
            raw = str(href).strip()
            if not raw or raw.startswith(("mailto:", "javascript:", "tel:", "#")):
                continue
            link = normalize(urljoin(base, raw))
            suffix = PurePosixPath(unquote(urlsplit(link).path)).suffix.lower()
            if suffix in SKIPPED_SUFFIXES or not self.scope.holds(link):
                continue
            links[link] = None
        return list(links), canonical, "noindex" not in robots, "nofollow" not in robots

    @staticmethod
    def _name(url: str, content_type: str) -> str:
        """A file name the knowledge parsers read the page by ("" when they read none)."""
        path = PurePosixPath(unquote(urlsplit(url).path))
        stem = path.name or "index"
        if content_type in HTML_TYPES or content_type == "text/html":
            return stem if stem.lower().endswith((".html", ".htm")) else f"{stem}.html"
        if readable_name(stem):
            return stem
        extension = TYPE_EXTENSIONS.get(content_type)
        return f"{stem}{extension}" if extension else ""

    def read(self, found: Found) -> bytes:
        if found.content is not None:
            return found.content
        try:
            page = self._get(found.key, limit=self.file_limit)
        except httpx.HTTPError as exc:
            raise ItemError(str(unreachable(found.key, exc))) from None
        if page.status != 200:
            raise ItemError(f"The server answered {page.status}.")
        return page.content


class _Response(AbstractWebClientSuccessResponse):
    def __init__(self, page: Page) -> None:
        self.page = page

    def status_code(self) -> int:
        return self.page.status

    def status_message(self) -> str:
        return httpx.codes.get_reason_phrase(self.page.status)

    def header(self, case_insensitive_name: str) -> str | None:
        if case_insensitive_name.lower() == "content-type":
            return self.page.content_type or None
        return None

    def raw_data(self) -> bytes:
        data = self.page.content
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)[:SITEMAP_LIMIT]
        return data

    def url(self) -> str:
        return self.page.url


class _SitemapClient(AbstractWebClient):
    """ultimate-sitemap-parser's requests made by the connector: the same pace, robots.txt,
    host checks and size limit as every page."""

    def __init__(self, connector: WebsiteConnector) -> None:
        self.connector = connector

    def set_max_response_data_length(self, max_response_data_length: int | None) -> None:
        pass  # SITEMAP_LIMIT applies

    def get(self, url: str) -> AbstractWebClientResponse:
        if not self.connector._allowed(url):
            return WebClientErrorResponse("robots.txt disallows it", retryable=False)
        try:
            page = self.connector._get(normalize(url), limit=SITEMAP_LIMIT)
        except (httpx.HTTPError, ItemError, SourceError) as exc:
            return WebClientErrorResponse(str(exc), retryable=False)
        if page.status != 200:
            return WebClientErrorResponse(f"HTTP {page.status}", retryable=False)
        return _Response(page)
