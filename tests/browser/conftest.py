"""A live qassist and headless Chromium for the end-to-end tests.

One daphne process per test session, on a free port, with a temporary SQLite database and var
folder, no Redis (the embedded engine) and the real embedded model (smollm2-135m), kept small:
4 sequences, a 4096-token context, 64-token replies. Company knowledge embeds with the hashing
embedder (no embedding model file), and a Celery worker on the filesystem broker indexes what
is uploaded, as in `make run`'s embedded mode; it takes the default queue only, so the drafts
and batches the admin tests look at stay waiting in theirs. Every test saves a screenshot under
test-artifacts/browser/.

Without /usr/bin/chromium or the model file the suite skips, saying why; with
QASSIST_REQUIRE_SERVICES=1 it fails instead.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import needs

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
# Debian's Chromium (Playwright downloads no browser here) and the fonts the CJK tests read.
INSTALL_CHROMIUM = "sudo apt-get install chromium fonts-noto-cjk"
MODEL = needs.embedded_model_file()
ARTIFACTS = REPO / "test-artifacts" / "browser"
# The folder folder sources may sync from (tests/browser/test_sources.py puts a share there).
SHARES = REPO / "test-artifacts" / "shares"
PASSWORD = "correct horse battery staple"
# Indexing only (knowledge.tasks.index_document: attachments on the interactive queue, the
# knowledge base's documents on their own), one task at a time.
CELERY_WORKER = [
    "-A",
    "qassist",
    "worker",
    "--loglevel",
    "INFO",
    "--pool",
    "solo",
    "--without-mingle",
    "--without-gossip",
    "-Q",
    "interactive,knowledge",
]
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def requirements() -> None:
    if not CHROMIUM.exists():
        needs.missing(f"{CHROMIUM} is missing: {INSTALL_CHROMIUM}")
    needs.embedded_model()
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        needs.missing("Playwright's Python package is not installed: make install")


@dataclass
class LiveServer:
    url: str
    seed: dict[str, Any]
    log: Path
    worker_log: Path | None = None

    def tail(self, lines: int = 40) -> str:
        text = "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        if self.worker_log is not None and self.worker_log.exists():
            worker = self.worker_log.read_text(errors="replace").splitlines()[-lines:]
            text += "\n--- celery worker ---\n" + "\n".join(worker)
        return text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _server_env(tmp: Path, **overrides: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"REDIS_URL", "DATABASE_URL", "QASSIST_ENGINE", "QASSIST_MODEL", "DEBUG"}
    }
    env.update(
        DJANGO_SETTINGS_MODULE="qassist.settings",
        QASSIST_VAR_DIR=str(tmp / "var"),
        SECRET_KEY=secrets.token_urlsafe(40),
        QASSIST_MODELS_DIR=str(MODEL.parent),
        QASSIST_PARALLEL="4",
        QASSIST_CONTEXT_SIZE="4096",
        QASSIST_MAX_SEQ_TOKENS="1024",
        QASSIST_DEFAULT_MAX_TOKENS="64",
        QASSIST_DEFAULT_TEMPERATURE="0",  # the same reply every run: no surprise short answers
        QASSIST_GENERATE_TITLES="0",  # titles stay the first message: assertions rely on it
        QASSIST_PRELOAD_ENGINE="1",  # the model loads while Chromium starts
        QASSIST_SEED_PASSWORD=PASSWORD,
        # Words hashed into vectors: no embedding model to fetch. Its similarities are word
        # overlaps, lower than a model's: the bar for "the documents answer this" is too.
        QASSIST_EMBEDDING_MODEL="hashing",
        QASSIST_KNOWLEDGE_MIN_SCORE="0.25",
        QASSIST_SOURCE_FOLDERS=str(SHARES),
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


@pytest.fixture(scope="session")
def qassist_server(
    requirements: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    yield from _live_server(tmp_path_factory)


@pytest.fixture(scope="session")
def qassist_server_with_titles(
    requirements: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """A second live server, generating conversation titles as `make run` does (started only
    when a test asks for it)."""
    # Short replies: the tests on it are about what follows a reply, not the reply itself.
    yield from _live_server(
        tmp_path_factory, QASSIST_GENERATE_TITLES="1", QASSIST_DEFAULT_MAX_TOKENS="16"
    )


def _live_server(
    tmp_path_factory: pytest.TempPathFactory,
    *,
    port: int | None = None,
    seed_more: list[str] | None = None,
    **overrides: str,
) -> Iterator[LiveServer]:
    """`port`: one chosen beforehand (the identity provider must know the callback URL);
    `seed_more`: a module run after the seed, e.g. tests.browser.seed_signin."""
    tmp = tmp_path_factory.mktemp("live")
    (tmp / "var").mkdir()
    for folder in ("queue", "processed"):  # Celery's filesystem broker, as `make run` makes it
        (tmp / "var" / "celery" / folder).mkdir(parents=True)
    env = _server_env(tmp, **overrides)
    _python(["manage.py", "migrate", "--noinput", "-v", "0"], env)
    seeded = _python(["-m", "tests.browser.seed"], env)
    seed = json.loads(seeded.stdout.strip().splitlines()[-1])
    if seed_more:
        _python(["-m", *seed_more], env)
    port = port or _free_port()
    log = tmp / "daphne.log"
    worker_log = tmp / "celery.log"
    daphne = ["-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "qassist.asgi:application"]
    for folder in ("queue", "processed", "control"):
        (tmp / "var" / "celery" / folder).mkdir(parents=True, exist_ok=True)
    with log.open("w") as out, worker_log.open("w") as worker_out:
        # Fixed arguments: this interpreter running the repository's own modules.
        server = subprocess.Popen(  # noqa: S603
            [sys.executable, *daphne], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )
        worker = subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "celery", *CELERY_WORKER],
            cwd=REPO,
            env=env,
            stdout=worker_out,
            stderr=subprocess.STDOUT,
        )
    live = LiveServer(f"http://127.0.0.1:{port}", seed, log, worker_log)
    try:
        _wait_until_up(live, server)
        yield live
    finally:
        for process in (server, worker):
            process.terminate()
        for process in (server, worker):
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _python(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # Fixed arguments: this interpreter running the repository's own modules.
    done = subprocess.run(  # noqa: S603
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done


def _wait_until_up(live: LiveServer, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"daphne exited with {server.returncode}:\n{live.tail()}")
        try:
            with urllib.request.urlopen(f"{live.url}/healthz", timeout=2):  # noqa: S310
                return
        except urllib.error.HTTPError:
            return  # it answers (503 until the model is loaded is fine: it loads on first use)
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"daphne did not answer within 30 s:\n{live.tail()}")


@pytest.fixture(scope="package")  # sync Playwright runs a loop: end it before async tests
def browser(requirements: None) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@dataclass
class Frames:
    """The websocket frames of one page, parsed, in order."""

    received: list[dict[str, Any]] = field(default_factory=list)
    sent: list[dict[str, Any]] = field(default_factory=list)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.received if f.get("type") == kind]


@dataclass
class Browsing:
    page: Any
    frames: Frames
    dialogs: list[str]
    live: LiveServer

    def login(self, username: str) -> None:
        page = self.page
        page.goto(f"{self.live.url}/accounts/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_selector("#input")
        self.wait_connected()

    def wait_connected(self) -> None:
        self.page.wait_for_selector("#conn-state.online", state="attached", timeout=10_000)

    def wait_for_frame(self, kind: str, count: int = 1, timeout: float = 90.0) -> dict[str, Any]:
        # Generous: on a loaded 2-core machine one 64-token reply has taken 10 s.
        deadline = time.monotonic() + timeout
        while len(self.frames.of(kind)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no {kind!r} frame #{count} within {timeout} s; got "
                    f"{[f.get('type') for f in self.frames.received]}\n{self.live.tail()}"
                )
            self.page.wait_for_timeout(50)
        return self.frames.of(kind)[count - 1]


def _parse(payload: Any) -> dict[str, Any]:
    try:
        frame = json.loads(payload)
    except (TypeError, ValueError):
        return {"type": "?", "raw": payload}
    return frame if isinstance(frame, dict) else {"type": "?", "raw": frame}


def _open_page(
    browser: Any,
    live: LiveServer,
    request: pytest.FixtureRequest,
    viewport: dict[str, int],
    **context_options: Any,
) -> Iterator[Browsing]:
    context = browser.new_context(viewport=viewport, locale="en-US", **context_options)
    page = context.new_page()
    page.set_default_timeout(15_000)
    frames = Frames()
    dialogs: list[str] = []

    def on_websocket(ws: Any) -> None:
        ws.on("framereceived", lambda payload: frames.received.append(_parse(payload)))
        ws.on("framesent", lambda payload: frames.sent.append(_parse(payload)))

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("websocket", on_websocket)
    page.on("dialog", on_dialog)
    try:
        yield Browsing(page, frames, dialogs, live)
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        try:
            page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=False)
        finally:
            context.close()


@pytest.fixture
def browsing(
    browser: Any, qassist_server: LiveServer, request: pytest.FixtureRequest
) -> Iterator[Browsing]:
    yield from _open_page(browser, qassist_server, request, {"width": 1280, "height": 800})


@pytest.fixture
def browsing_with_titles(
    browser: Any, qassist_server_with_titles: LiveServer, request: pytest.FixtureRequest
) -> Iterator[Browsing]:
    yield from _open_page(
        browser, qassist_server_with_titles, request, {"width": 1280, "height": 800}
    )


@pytest.fixture
def phone(
    browser: Any, qassist_server: LiveServer, request: pytest.FixtureRequest
) -> Iterator[Browsing]:
    yield from _open_page(browser, qassist_server, request, {"width": 390, "height": 844})


@pytest.fixture
def touch_phone(
    browser: Any, qassist_server: LiveServer, request: pytest.FixtureRequest
) -> Iterator[Browsing]:
    """A phone with a touch screen and an on-screen keyboard (pointer: coarse, hover: none)."""
    yield from _open_page(
        browser,
        qassist_server,
        request,
        {"width": 390, "height": 844},
        has_touch=True,
        is_mobile=True,
        device_scale_factor=3,
    )
