"""Synced sources under test: real folders, a real HTTP site (http.server on 127.0.0.1) and a
real WebDAV server (wsgidav on cheroot, 127.0.0.1); documents indexed by the knowledge
pipeline with the fake embedder; runs driven slice by slice without a broker."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pytest_django import Settings

from knowledge import ingest
from knowledge.models import Document
from sources import services, sync
from sources.models import Source, SourceRun
from tenants.models import Tenant
from tests.knowledge.conftest import fake_embedder, roomy_context  # noqa: F401 - fixtures


@pytest.fixture
def share(tmp_path: Path, settings: Settings) -> Path:
    """A folder folder sources may sync (QASSIST_SOURCE_FOLDERS lists its parent)."""
    root = tmp_path / "shares"
    folder = root / "handbook"
    folder.mkdir(parents=True)
    settings.QASSIST_SOURCE_FOLDERS = [str(root)]
    return folder


@pytest.fixture
def sync_dispatches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Runs are not sent to a broker: the ids queued are listed; tests run their slices."""
    sent: list[int] = []
    monkeypatch.setattr("sources.tasks.sync_dispatch", lambda *, run_id: sent.append(run_id))
    return sent


def index_queued(queued: list[tuple[Any, int]]) -> None:
    """Index what uploads queued (the Celery task's pipeline, called directly)."""
    while queued:
        document_id, version = queued.pop(0)
        ingest.document_index(document_id=document_id, version=version)


def run_sync(source: Source, queued: list[tuple[object, int]], *, slices: int = 50) -> SourceRun:
    """A sync now, slice after slice, then the documents it queued indexed."""
    run = services.source_sync_now(source=source)
    for _ in range(slices):
        outcome = sync.run_slice(run_id=run.pk)
        if outcome in ("done", "failed"):
            break
        assert outcome == "continued", outcome
    index_queued(queued)
    run.refresh_from_db()
    return run


@pytest.fixture
def syncer(
    sync_dispatches: list[int], document_dispatches: list[tuple[object, int]]
) -> Callable[[Source], SourceRun]:
    return lambda source: run_sync(source, document_dispatches)


def make_source(tenant: Tenant, kind: str, location: str, **fields: Any) -> Source:
    password = fields.pop("password", None)
    groups = fields.pop("groups", None)
    source = Source(tenant=tenant, name=fields.pop("name", f"{kind} source"), kind=kind,
                    location=location, limited=groups is not None, **fields)  # fmt: skip
    return services.source_save(source=source, password=password, groups=groups)


def titles(tenant: Tenant) -> list[str]:
    return sorted(Document.objects.filter(tenant=tenant).values_list("title", flat=True))


# --- a real HTTP site -------------------------------------------------------------------------


@dataclass
class Site:
    root: Path
    url: str
    requests: list[tuple[float, str, str]] = field(default_factory=list)  # (time, method, path)
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    # path (with its query) -> a handler answering it instead of the files
    routes: dict[str, Callable[[http.server.BaseHTTPRequestHandler], None]] = field(
        default_factory=dict
    )
    slow: float = 0.0  # seconds each answer takes

    def page(self, name: str, body: str, *, title: str = "") -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        head = f"<title>{title}</title>" if title else ""
        path.write_text(f"<!doctype html><html><head>{head}</head><body>{body}</body></html>")
        return path

    def paths(self) -> list[str]:
        return [p for _, _, p in self.requests]


def _handler(site: Site) -> type[http.server.SimpleHTTPRequestHandler]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(site.root), **kwargs)

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            with site.lock:
                site.requests.append((time.monotonic(), "GET", self.path))
                site.in_flight += 1
                site.most_in_flight = max(site.most_in_flight, site.in_flight)
            try:
                if site.slow:
                    time.sleep(site.slow)
                route = site.routes.get(self.path)
                if route is not None:
                    route(self)
                else:
                    super().do_GET()
            finally:
                with site.lock:
                    site.in_flight -= 1

    return Handler


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    root = tmp_path / "site"
    root.mkdir()
    holder = Site(root=root, url="")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(holder))
    holder.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield holder
    server.shutdown()
    server.server_close()


# --- a real WebDAV server ---------------------------------------------------------------------


@dataclass
class Dav:
    root: Path
    url: str
    user: str = "sync"
    password: str = "s3cret-dav"


@pytest.fixture
def dav(tmp_path: Path) -> Iterator[Dav]:
    from cheroot import wsgi
    from wsgidav.wsgidav_app import WsgiDAVApp

    root = tmp_path / "dav"
    root.mkdir()
    holder = Dav(root=root, url="")
    app = WsgiDAVApp(
        {
            "provider_mapping": {"/files": str(root)},
            "simple_dc": {"user_mapping": {"*": {holder.user: {"password": holder.password}}}},
            "http_authenticator": {
                "accept_basic": True,
                "accept_digest": False,
                "default_to_digest": False,
            },
            "verbose": 0,
            "logging": {"enable": False, "enable_loggers": []},
        }
    )
    server = wsgi.Server(("127.0.0.1", 0), app)
    server.prepare()
    holder.url = f"http://127.0.0.1:{server.bind_addr[1]}/files/"
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    yield holder
    server.stop()
