"""Tiny typed readers for settings that come from the environment."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    """An integer setting; a malformed value is kept as -1 so a system check can name it."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        return -1


def env_float(name: str, default: float) -> float:
    """A float setting; a malformed value is kept as -1.0 so a system check can name it."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        return -1.0


def env_list(name: str, default: str = "") -> list[str]:
    return [part.strip() for part in env_str(name, default).split(",") if part.strip()]


def load_or_create_secret_key(path: Path) -> str:
    """Read the key kept at `path`, making it (readable by the owner only) on first use."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        return path.read_text().strip()
    with os.fdopen(fd, "w") as f:
        f.write(key)
    return key
