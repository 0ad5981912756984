"""`manage.py fetch_model [NAME]`: put a model from the registry into QASSIST_MODELS_DIR."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from inference import modelstore


class Command(BaseCommand):
    help = (
        "Download a model into QASSIST_MODELS_DIR and verify its size and sha256; "
        "does nothing when it is already there."
    )
    # It is what fixes the checks' "model not on disk yet" (qassist.W001): not warned about
    # by itself before it fetches.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "name",
            nargs="?",
            help=f"one of {', '.join(modelstore.REGISTRY)} (default: settings.QASSIST_MODEL)",
        )
        parser.add_argument(
            "--list", action="store_true", dest="list_models", help="list the known models"
        )
        parser.add_argument(
            "--dir", type=Path, dest="models_dir", help="folder to use instead of the setting"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        models_dir: Path = options["models_dir"] or settings.QASSIST_MODELS_DIR
        if options["list_models"]:
            self._list(models_dir)
            return
        name: str = options["name"] or settings.QASSIST_MODEL
        if options["name"] is None and name not in modelstore.REGISTRY:
            self._check_local_file(name, models_dir)
            return
        try:
            spec = modelstore.get_spec(name)
            started = time.monotonic()
            with _terminate_as_interrupt():
                result = modelstore.fetch(
                    spec, models_dir, progress=options["verbosity"] > 0, log=self.stdout.write
                )
        except modelstore.ModelStoreError as exc:
            raise CommandError(str(exc)) from None
        except KeyboardInterrupt:
            raise CommandError(
                "interrupted; no partial file was left (the parts of a model in parts that "
                "were fetched whole are kept: run it again to resume)",
                returncode=130,
            ) from None
        self._report(spec, result, time.monotonic() - started)

    def _report(
        self, spec: modelstore.ModelSpec, result: modelstore.FetchResult, seconds: float
    ) -> None:
        if result.verified:
            checked = f"sha256 {result.sha256} verified"
        else:
            checked = f"sha256 {result.sha256} (no published checksum to compare with)"
        if result.already_present:
            self.stdout.write(f"{spec.name}: already present at {result.path} ({checked})")
        else:
            self.stdout.write(
                self.style.SUCCESS(
                    f"{spec.name}: fetched {result.path} ({result.size:,} bytes, {checked}) "
                    f"in {seconds:.1f}s"
                )
            )

    def _list(self, models_dir: Path) -> None:
        self.stdout.write(f"models in {models_dir}:")
        for name, spec in modelstore.REGISTRY.items():
            state = "present" if modelstore.is_present(name, models_dir) else "missing"
            default = "  (default)" if name == settings.QASSIST_MODEL else ""
            size = f"{spec.size / 2**20:.0f} MiB" if spec.size is not None else "? MiB"
            self.stdout.write(
                f"  {name:<24} {state:<8} {size:>8}  {spec.filename}{default}\n"
                f"  {'':<24} {spec.description}; from {modelstore.describe_source(spec)}"
            )

    def _check_local_file(self, name: str, models_dir: Path) -> None:
        """QASSIST_MODEL may name a .gguf file instead of a registry entry: nothing to fetch."""
        try:
            path = modelstore.resolve_model_path(name, models_dir)
        except modelstore.UnknownModelError as exc:
            raise CommandError(f"QASSIST_MODEL: {exc}") from None
        self.stdout.write(f"QASSIST_MODEL is the local file {path}: nothing to fetch")


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """Make SIGTERM (kill, a container stop) clean up the partial file the way Ctrl-C does."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread, where only the main thread may set handlers
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
