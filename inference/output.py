"""Turning sampled tokens into text deltas: UTF-8 safe, stop strings honoured.

A Chinese character is often split across two or three byte-level tokens; the incremental decoder
holds the partial bytes back until the character is whole, so a delta never carries a broken
sequence. Text that might be the start of a stop string is held back until it is known not to be.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class TextStream:
    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in stop if s]
        self._held = ""
        self.text = ""  # everything emitted so far
        self.stopped = False

    def push(self, piece: bytes) -> str:
        """Add a token's bytes; return the text that is now safe to show."""
        if self.stopped:
            return ""
        self._held += self._decoder.decode(piece)
        return self._release()

    def finish(self) -> str:
        """The generation ended without a stop string: release what was held back."""
        if self.stopped:
            return ""
        # Bytes of a character the model never completed are dropped, not shown as U+FFFD.
        self._decoder.reset()
        out, self._held = self._held, ""
        self.text += out
        return out

    def _release(self) -> str:
        if not self._stop:
            out, self._held = self._held, ""
            self.text += out
            return out
        hits = [i for i in (self._held.find(s) for s in self._stop) if i >= 0]
        if hits:
            out = self._held[: min(hits)]
            self._held = ""
            self.stopped = True
            self.text += out
            return out
        keep = self._longest_stop_prefix_suffix()
        out = self._held[: len(self._held) - keep]
        self._held = self._held[len(self._held) - keep :]
        self.text += out
        return out

    def _longest_stop_prefix_suffix(self) -> int:
        """Length of the longest tail of the held text that begins some stop string."""
        best = 0
        for stop in self._stop:
            for n in range(min(len(stop) - 1, len(self._held)), best, -1):
                if self._held.endswith(stop[:n]):
                    best = n
                    break
        return best
