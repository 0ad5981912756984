"""`manage.py run_inference_worker`: the one process per machine that owns the llama.cpp context."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from inference.modelstore import UnknownModelError
from inference.service import build_engine, default_model, engine_turn
from inference.transport import RedisWorkerTransport
from inference.worker import EngineWorker, stop_on_signals

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run the batching inference worker: take requests from Redis, stream tokens back."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--drain-timeout",
            type=float,
            default=30.0,
            help="On SIGTERM, seconds running replies get to finish before they end with an error.",
        )
        parser.add_argument("--worker-id", default=None, help="Name in health reports.")
        parser.add_argument(
            "--model",
            default=None,
            help="The model this worker serves, a registry name or a .gguf path (default: "
            "QASSIST_MODEL). It takes only the requests for that model: run one worker per "
            "model to serve several.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.REDIS_URL:
            raise CommandError(
                "REDIS_URL is not set. Without Redis the engine runs inside the web process "
                "(embedded mode) and no separate worker is needed."
            )
        model: str = options["model"] or default_model()
        try:
            engine = build_engine(model)
        except (FileNotFoundError, UnknownModelError) as exc:
            raise CommandError(str(exc)) from exc
        transport = RedisWorkerTransport(
            settings.REDIS_URL,
            prefix=settings.QASSIST_REDIS_PREFIX,
            worker_id=options["worker_id"],
            aging=settings.QASSIST_QUEUE_AGING_SECONDS,
            affinity=settings.QASSIST_CONVERSATION_AFFINITY_SECONDS,
            heartbeat_timeout=settings.QASSIST_WORKER_HEARTBEAT_SECONDS,
            model=model,
        )
        # With several models on this host, its workers take turns for the cores, a step each.
        turn = engine_turn()
        worker = EngineWorker(
            engine, transport, stall_after=settings.QASSIST_ENGINE_STALL_SECONDS, turn=turn
        )
        # SIGTERM and Ctrl-C stop the worker even while a step is stuck in llama.cpp.
        stop_signals = (signal.SIGTERM, signal.SIGINT)
        stop_on_signals(worker, stop_signals, drain_timeout=options["drain_timeout"])
        floor = f"streams kept at {settings.QASSIST_MIN_STREAM_SPEED:g} tokens/s or more"
        if settings.QASSIST_MIN_STREAM_SPEED > 0 and settings.QASSIST_TTFT_TARGET_SECONDS > 0:
            floor += (
                f" (down to {settings.QASSIST_MIN_STREAM_SPEED_HARD:g} once a request has waited "
                f"{settings.QASSIST_TTFT_TARGET_SECONDS:g} s)"
            )
        self.stdout.write(
            f"inference worker {transport.worker_id} ({model}): "
            f"{engine.runner.n_seq_max} sequences, "
            f"{engine.runner.n_ctx} KV cells, up to {engine.runner.max_seq_tokens} tokens each, "
            + floor
            + (f"; CPU budget shared through {settings.QASSIST_CPU_BUDGET_DIR}" if turn else "")
        )
        worker.maybe_heartbeat(force=True)
        heartbeat = threading.Thread(target=worker.heartbeat_forever, name="heartbeat", daemon=True)
        heartbeat.start()
        on_disk = 0
        try:
            worker.run_forever()
            on_disk = worker.drain(options["drain_timeout"])
        finally:
            transport.retire()
            transport.close()
            engine.runner.close()
            worker.finished.set()
        self.stdout.write(f"inference worker stopped; {on_disk} conversations saved on disk")
