"""The engine's thread lowers its own CPU priority, and only its own (Linux: per thread)."""

from __future__ import annotations

import os
import threading

import pytest

from inference.service import lower_thread_priority

pytestmark = pytest.mark.skipif(
    not hasattr(os, "setpriority"), reason="Unix thread priorities only"
)


def test_the_calling_thread_is_niced_and_the_others_keep_their_priority() -> None:
    seen: dict[str, int] = {}
    main_before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def engine_thread() -> None:
        tid = threading.get_native_id()
        before = os.getpriority(os.PRIO_PROCESS, tid)
        lower_thread_priority(5)
        seen["before"], seen["after"] = before, os.getpriority(os.PRIO_PROCESS, tid)

        def child() -> None:  # llama.cpp's compute threads start from the engine's thread
            seen["child"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

        worker = threading.Thread(target=child)
        worker.start()
        worker.join()

    thread = threading.Thread(target=engine_thread)
    thread.start()
    thread.join()
    assert seen["after"] == min(19, seen["before"] + 5)
    assert seen["child"] == seen["after"]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main_before


def test_zero_leaves_the_priority_alone() -> None:
    seen: dict[str, int] = {}

    def engine_thread() -> None:
        tid = threading.get_native_id()
        before = os.getpriority(os.PRIO_PROCESS, tid)
        lower_thread_priority(0)
        seen["delta"] = os.getpriority(os.PRIO_PROCESS, tid) - before

    thread = threading.Thread(target=engine_thread)
    thread.start()
    thread.join()
    assert seen["delta"] == 0
