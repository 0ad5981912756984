"""The text a sequence's kept KV stands for, so that a follow-up is tokenised as it was computed.

A follow-up turn's prompt holds the previous reply as text; tokenising that text afresh can give
other tokens than the ones generated (" Cor" "io" "b" against " Cor" "i" "ob"), which would stop
KV reuse at the reply's first token. So the engine remembers, for each sequence and each host
entry saved from one, the exact text and tokens its KV holds, and a prompt that starts with that
text (with the same trust) starts with those tokens. Pure logic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inference.scheduler import DropSaved, SaveKv, Scheduler, SchedulerOutput
from inference.types import PromptPart, Request, TrustMap, parts_from, trust_map

if TYPE_CHECKING:
    from inference.engine import Runner

# Tokens of prompt parts and where their passages are (`PromptPassages.tokenize`).
Tokenizer = Callable[..., tuple[list[int], list[tuple[int, int]]]]


@dataclass(frozen=True)
class KeptText:
    """The text a sequence's kept KV stands for, its exact tokens, and where trust changes."""

    text: str
    tokens: list[int]
    trust: TrustMap
    tenant: str = ""  # tokens are handed on within a tenant only, like the KV itself


class KeptTexts:
    def __init__(self, runner: Runner, scheduler: Scheduler, tokenize: Tokenizer) -> None:
        self.runner = runner
        self.scheduler = scheduler
        self._tokenize = tokenize
        self.in_seq: dict[int, KeptText] = {}  # seq id -> what its KV holds, as text
        self.in_host: dict[int, KeptText] = {}  # host entry -> what it holds, as text

    def tokenize(
        self, parts: Sequence[PromptPart], text: str, tenant: str = ""
    ) -> tuple[list[int], list[tuple[int, int]]]:
        """Tokens for a rendered prompt (and where its passages are), reusing a kept
        sequence's exact tokens when its text is a prefix."""
        best: KeptText | None = None
        for kept in self._live():
            if (
                (best is None or len(kept.text) > len(best.text))
                and kept.tenant == tenant
                and text.startswith(kept.text)
                and trust_map(parts, len(kept.text)) == kept.trust
            ):
                best = kept
        if best is None:
            return self._tokenize(parts, continuation=False, offset=0)
        rest = parts_from(parts, len(best.text))
        more, spans = self._tokenize(rest, continuation=True, offset=len(best.tokens))
        return best.tokens + more, spans

    def _live(self) -> Iterator[KeptText]:
        """What sequences and host-memory entries still hold, as text."""
        for seq_id, kept in self.in_seq.items():
            if self.scheduler.slots[seq_id].tokens[: len(kept.tokens)] == kept.tokens:
                yield kept
        host = self.scheduler.host
        for entry_id, kept in self.in_host.items():
            if host is not None and entry_id in host.entries:
                yield kept

    def track_saved(self, out: SchedulerOutput) -> None:
        """Host entries keep the text of the sequence they were saved from."""
        for op in out.kv_ops:
            if isinstance(op, SaveKv):
                kept = self.in_seq.get(op.seq_id)
                if kept is not None and len(kept.tokens) <= op.n_tokens:
                    self.in_host[op.entry] = kept
            elif isinstance(op, DropSaved):
                self.in_host.pop(op.entry, None)

    def keep(self, request: Request) -> None:
        """Remember the text of what a finished request leaves in its sequence."""
        if request.seq_id is None:
            return
        self.in_seq.pop(request.seq_id, None)
        if not request.prefill_done or not request.prompt_text:
            return
        generated = request.output_tokens[:-1]
        pieces = [self.runner.token_bytes(t) for t in generated]
        if not all(pieces):  # a special token has no text: the text would not match the KV
            return
        try:
            reply = b"".join(pieces).decode("utf-8")
        except UnicodeDecodeError:
            return
        text = request.prompt_text + reply
        # The reply is a message content: it is never trusted either.
        trust = trust_map([*request.prompt_parts, PromptPart(reply, trusted=False)], len(text))
        self.in_seq[request.seq_id] = KeptText(text, request.kv_tokens(), trust, request.tenant)

    def forget(self, seq_id: int, entry: int | None = None) -> None:
        """A sequence's KV (and a host entry's) is no longer what was kept."""
        self.in_seq.pop(seq_id, None)
        if entry is not None:
            self.in_host.pop(entry, None)

    def forget_sequences(self) -> None:
        """Every sequence lost its KV (host memory still holds its entries)."""
        self.in_seq.clear()
