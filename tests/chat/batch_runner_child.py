"""A batch runner in a process of its own, for the test that kills it mid-batch.

    python -m tests.chat.batch_runner_child BATCH_ID    (DATABASE_URL: the test database)

Its engine answers "a…" prompts at once and never finishes a "hang…" prompt, so the test can
kill the process while an item is running, as a crashed Celery worker would leave it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import django

if TYPE_CHECKING:
    from inference.types import Event
    from inference.worker import Submission


class HangingEngine:
    async def generate(self, sub: Submission) -> AsyncIterator[Event]:
        from inference.types import Delta, Done

        text = sub.messages[-1].content
        if text.startswith("hang"):
            await asyncio.sleep(3600)
        yield Delta(sub.request_id, f"answer to {text}")
        yield Done(sub.request_id, "stop", 3, 2)

    async def served_models(self) -> list[str]:
        return []

    async def cancel(self, request_id: str) -> None:
        pass

    def at_capacity(self, model: str = "") -> bool:
        return False  # its refusals come from the engine path

    async def health(self) -> dict[str, object]:
        return {}


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qassist.settings")
    django.setup()
    from chat import batches
    from inference.service import set_engine_client, set_prompt_counter
    from tests.fakes import FakeCounter

    set_engine_client(HangingEngine())
    set_prompt_counter(FakeCounter())
    print("started", flush=True)
    batches.batch_run(batch_id=sys.argv[1], concurrency=1)


if __name__ == "__main__":
    main()
