"""A WebDAV folder (SharePoint, Nextcloud, ownCloud, Apache mod_dav, many document servers).

Listed with webdav4 (PROPFIND with Depth 1, folder by folder: a Depth: infinity listing is
refused by most servers), whose parsed properties give each file's size, ETag and
Last-Modified without reading it; chosen over webdavclient3 for its httpx client (qassist's
own), its typed API and its maintenance. Files are downloaded with the same httpx client,
streamed and cut at the size limit; a file whose listed size is above it is never requested.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
from webdav4.client import Client, ClientError, HTTPError, ResourceNotFound

from sources.connectors import Connector, Found, ItemError, Lookup, SourceError, readable_name
from sources.connectors import too_large as _too_large
from sources.connectors.http import TIMEOUT, USER_AGENT, Pace, check_url, read_body, unreachable


class WebdavConnector(Connector):
    def __init__(
        self,
        *,
        location: str,
        known: Lookup,
        file_limit: int,
        auth: tuple[str, str] | None,
        delay: float = 0.0,
    ) -> None:
        super().__init__(known=known, file_limit=file_limit)
        check_url(location)
        self.location = location.rstrip("/") + "/"
        self.client = Client(
            self.location,
            auth=auth,
            timeout=TIMEOUT,
            headers={"User-Agent": USER_AGENT},
            retry=False,
            max_redirects=10,
        )
        self.pace = Pace(delay)

    def close(self) -> None:
        self.client.http.close()

    def _list(self, path: str) -> list[dict[str, Any]]:
        self.pace.wait()
        entries = self.client.ls(path, detail=True)
        return sorted((e for e in entries if isinstance(e, dict)), key=lambda e: str(e["name"]))

    def walk(self) -> Iterator[Found]:
        try:
            top = self._list("")
        except (httpx.HTTPError, ClientError, HTTPError) as exc:
            raise self._source_error(exc) from None
        yield from self._entries(top)

    def _entries(self, entries: list[dict[str, Any]]) -> Iterator[Found]:
        for entry in entries:
            name = str(entry["name"]).strip("/")
            if entry.get("type") == "directory":
                try:
                    inner = self._list(name)
                except (httpx.HTTPError, ClientError, HTTPError) as exc:
                    self.complete = False
                    yield Found(
                        key=name, name="", origin=self._url(name), error=f"Not listed: {exc}"
                    )
                    continue
                yield from self._entries(inner)
                continue
            if not readable_name(name.rsplit("/", 1)[-1]):
                continue
            modified = entry.get("modified")
            yield Found(
                key=name,
                name=name.rsplit("/", 1)[-1],
                origin=self._url(name),
                size=entry.get("content_length"),
                etag=str(entry.get("etag") or ""),
                last_modified=modified.isoformat() if modified is not None else "",
            )

    def _url(self, name: str) -> str:
        return self.location + quote(name)

    def _source_error(self, exc: Exception) -> SourceError:
        if isinstance(exc, httpx.HTTPError):
            return unreachable(self.location, exc)
        if isinstance(exc, ResourceNotFound):
            return SourceError(f"{self.location} does not exist on the server (404).")
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status == 401:
            return SourceError(
                f"{urlsplit(self.location).netloc} refused the user name and password (401)."
            )
        if status == 403:
            return SourceError(f"{self.location}: access is forbidden to this account (403).")
        return SourceError(f"{self.location} cannot be listed: {exc}")

    def read(self, found: Found) -> bytes:
        if found.size is not None and found.size > self.file_limit:
            raise ItemError(_too_large(found.size, self.file_limit))
        self.pace.wait()
        url = self.client.join_url(found.key)
        try:
            with self.client.http.stream("GET", url, follow_redirects=True) as response:
                if response.status_code != 200:
                    raise ItemError(f"The server answered {response.status_code}.")
                return read_body(response, self.file_limit)
        except httpx.HTTPError as exc:
            raise ItemError(str(unreachable(str(url), exc))) from None
