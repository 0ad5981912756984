"""The test identity provider: panva's oidc-provider (tests/idp/provider.mjs) run by Node on
127.0.0.1, and a small user agent that signs in through its own login and consent pages.

Nothing here imitates the provider: the tests talk OpenID Connect to the real thing. What a
test changes (an account's groups, a disabled account, a tampered ID token) goes through the
provider's /_test/ endpoints, as an IT department would change the directory.
"""

from __future__ import annotations

import html
import json
import os
import queue
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urljoin

import httpx

from tests.needs import missing

REPO = Path(__file__).resolve().parents[2]
IDP_DIR = REPO / "tests" / "idp"
CLIENT_ID = "qassist"
CLIENT_SECRET = "qassist-test-client-secret"
# Node.js 20.19 or later with npm; Debian 12's own (18) is too old, Debian 13's will do.
INSTALL_NODE = "sudo apt-get install nodejs npm (Node.js 20.19 or later)"
START_SECONDS = 120  # a loaded 2-core machine (or a niced run) starts Node slowly

ACCOUNTS: dict[str, dict[str, Any]] = {
    "alice": {"email": "alice@northwind.example", "name": "Alice Archer", "groups": ["sales"]},
    "bob": {"email": "bob@northwind.example", "name": "Bob Baker", "groups": ["it-admins"]},
}


@dataclass
class LiveProvider:
    issuer: str
    process: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)

    def _send(self, method: str, path: str, body: Any) -> None:
        request = urllib.request.Request(  # noqa: S310  (our own provider on 127.0.0.1)
            self.issuer + path,
            data=json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310
            pass

    def put_account(self, account_id: str, **fields: Any) -> None:
        """Create or change an account in the provider's directory (groups, disabled...)."""
        self._send("PUT", f"/_test/accounts/{account_id}", fields)

    def reset_accounts(self) -> None:
        for account_id, fields in ACCOUNTS.items():
            self.put_account(account_id, **fields)
        self._send("POST", "/_test/tamper", None)

    def tamper_next_id_token(self, *, forge: bool = False, **claims: Any) -> None:
        """The next ID token from the token endpoint gets `claims` (re-signed with the
        provider's own key), or, with `forge`, a signature from a key nobody published."""
        self._send("POST", "/_test/tamper", {"forge": True} if forge else {"claims": claims})

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log(self) -> str:
        return "".join(self.output[-40:])


def start_provider(redirect_uris: list[str]) -> LiveProvider:
    node = shutil.which("node")
    if node is None:
        missing(f"Node.js is not installed (the test identity provider runs on it): {INSTALL_NODE}")
    if not (IDP_DIR / "node_modules" / "oidc-provider").is_dir():
        missing("the test identity provider is not installed: make test-idp (npm ci)")
    config = {
        "clients": [
            {
                "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET,
                "redirect_uris": redirect_uris,
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
            }
        ],
        "accounts": ACCOUNTS,
    }
    env = {**os.environ, "IDP_CONFIG": json.dumps(config), "PORT": "0"}
    # Fixed arguments: Node running the provider script of this repository.
    process = subprocess.Popen(  # noqa: S603
        [str(node), str(IDP_DIR / "provider.mjs")],
        cwd=IDP_DIR,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    # One reader for its whole life (a full pipe would block it); lines kept for failures.
    threading.Thread(target=_read, args=(process.stdout, lines), daemon=True).start()
    seen: list[str] = []  # its warnings (a development adapter, Node 20...) come first
    deadline = time.monotonic() + START_SECONDS
    while not (seen and seen[-1].startswith("listening ")):
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            line = ""
        if not line:
            process.kill()
            raise RuntimeError(f"the test identity provider did not start:\n{''.join(seen)}")
        seen.append(line)
    provider = LiveProvider(issuer=seen[-1].split()[1], process=process, output=seen)
    threading.Thread(target=_keep, args=(lines, seen), daemon=True).start()
    return provider


def _read(stdout: IO[str], lines: queue.Queue[str]) -> None:
    for line in iter(stdout.readline, ""):
        lines.put(line)
    lines.put("")  # it exited


def _keep(lines: queue.Queue[str], seen: list[str]) -> None:
    while line := lines.get():
        seen.append(line)


_FORM = re.compile(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.S)
_PROMPT = re.compile(r'name="prompt" value="(\w+)"')
_CANCEL = re.compile(r'<a href="([^"]+)">\[ Cancel \]</a>')


def authorize(
    authorize_url: str, *, login: str, back_to: str, consent: bool = True, max_steps: int = 12
) -> str:
    """Follow the provider's pages as a person would: sign in as `login` (its development
    login page takes any password), then allow (or decline) on its consent page. Returns the
    URL it sends the browser back to (starting with `back_to`)."""
    with httpx.Client(timeout=10, follow_redirects=False) as agent:
        response = agent.get(authorize_url)
        url = authorize_url
        for _ in range(max_steps):
            if response.is_redirect:
                url = urljoin(url, response.headers["location"])
                if url.startswith(back_to):
                    return url
                response = agent.get(url)
                continue
            page = response.text
            form = _FORM.search(page)
            prompt = _PROMPT.search(page)
            if response.status_code != 200 or form is None or prompt is None:
                raise AssertionError(f"unexpected provider page ({response.status_code}):\n{page}")
            action = urljoin(url, html.unescape(form.group(1)))
            if prompt.group(1) == "login":
                data = {"prompt": "login", "login": login, "password": "any password"}
                response = agent.post(action, data=data)
            elif consent:
                response = agent.post(action, data={"prompt": "consent"})
            else:
                cancel = _CANCEL.search(page)
                assert cancel is not None, page
                url = urljoin(url, html.unescape(cancel.group(1)))
                response = agent.get(url)
        raise AssertionError(f"no way back to {back_to} after {max_steps} steps")
