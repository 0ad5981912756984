"""The chat page's script is native ES modules (static/chat/app.js and static/chat/modules/):
every import resolves to a file, WhiteNoise serves them with a JavaScript MIME type (a browser
refuses a module served as anything else), and collectstatic keeps the tree they import from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from pytest_django import Settings

STATIC = Path(__file__).resolve().parents[2] / "static"
ENTRY = "chat/app.js"
SHARED_ENTRY = "chat/shared.js"  # a shared snapshot's page
IMPORT = re.compile(r'^import\s*\{[^}]*\}\s*from\s*"([^"]+)";', re.M)
JAVASCRIPT = ("text/javascript", "application/javascript")


def module_graph(root: Path, entry: str) -> set[str]:
    """The entry and every module it imports, transitively, as paths under `root`."""
    seen: set[str] = set()
    todo = [entry]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        source = (root / name).read_text(encoding="utf-8")
        for spec in IMPORT.findall(source):
            assert spec.startswith("./"), f"{name}: import {spec!r} is not relative"
            target = (root / name).parent / spec
            assert target.is_file(), f"{name} imports {spec}, which does not exist"
            todo.append(target.resolve().relative_to(root.resolve()).as_posix())
    return seen


def test_every_module_is_reachable_from_the_entry_and_every_import_resolves() -> None:
    graph = module_graph(STATIC, ENTRY) | module_graph(STATIC, SHARED_ENTRY)
    on_disk = {p.relative_to(STATIC).as_posix() for p in (STATIC / "chat" / "modules").glob("*.js")}
    assert on_disk <= graph, f"modules nothing imports: {sorted(on_disk - graph)}"


def test_no_module_is_too_long_to_read() -> None:
    for name in module_graph(STATIC, ENTRY):
        lines = (STATIC / name).read_text(encoding="utf-8").count("\n")
        assert lines <= 400, f"{name} has {lines} lines"


@pytest.mark.django_db
def test_whitenoise_serves_the_modules_as_javascript() -> None:
    client = Client()
    for name in sorted(module_graph(STATIC, ENTRY)):
        response = client.get(f"/static/{name}")
        assert response.status_code == 200, name
        assert response["Content-Type"].split(";")[0] in JAVASCRIPT, (
            name,
            response["Content-Type"],
        )
        body = b"".join(response.streaming_content)  # type: ignore[attr-defined]
        assert body == (STATIC / name).read_bytes()


def test_the_page_loads_the_entry_as_a_module(client: Client, member: User) -> None:
    client.force_login(member)
    page = client.get("/").content.decode()
    assert '<script type="module" src="/static/chat/app.js"></script>' in page
    assert "<script>" not in page  # no inline script: the CSP allows none


def test_collectstatic_keeps_the_module_tree(settings: Settings, tmp_path: Path) -> None:
    settings.STATIC_ROOT = tmp_path / "collected"
    call_command("collectstatic", interactive=False, verbosity=0)
    collected = module_graph(settings.STATIC_ROOT, ENTRY)
    assert collected == module_graph(STATIC, ENTRY)
