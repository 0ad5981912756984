"""Requests, their lifecycle and the events the engine emits. Pure Python: no Django, no llama.cpp.

Events cross process boundaries as JSON (see `inference.transport`), so each has `to_dict` and
`event_from_dict` rebuilds it.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED_STOPPED = "finished_stopped"
    FINISHED_LENGTH = "finished_length"
    FINISHED_CANCELLED = "finished_cancelled"
    FINISHED_ERROR = "finished_error"

    @property
    def is_finished(self) -> bool:
        return self.value.startswith("finished")


class FinishReason(enum.StrEnum):
    STOP = "stop"  # end-of-generation token or a stop string
    LENGTH = "length"  # max_tokens or the sequence's context limit
    CANCELLED = "cancelled"  # the client stopped or went away
    ERROR = "error"


_STATUS_FOR_REASON = {
    FinishReason.STOP: RequestStatus.FINISHED_STOPPED,
    FinishReason.LENGTH: RequestStatus.FINISHED_LENGTH,
    FinishReason.CANCELLED: RequestStatus.FINISHED_CANCELLED,
    FinishReason.ERROR: RequestStatus.FINISHED_ERROR,
}


class ErrorCode(enum.StrEnum):
    BUSY = "busy"  # the queue is full: retry later
    PROMPT_TOO_LONG = "prompt_too_long"
    INVALID_REQUEST = "invalid_request"
    WORKER_DOWN = "worker_down"
    SHUTTING_DOWN = "shutting_down"
    GRAMMAR_TOO_SLOW = "grammar_too_slow"  # the reply's grammar overran its time in a step
    INTERNAL = "internal"


NO_ENTRY = -1  # a RestoreFailed sequence whose KV was to be copied from another sequence


class RestoreFailed(Exception):
    """Raised by a runner before it decodes, when saved KV could not be restored (the file went
    missing, did not check out, or llama.cpp refused the state) or copied from another
    sequence (`NO_ENTRY`). The batch did not run; the engine has those requests compute their
    prompt instead (`Scheduler.restore_failed`), or ends a running one."""

    def __init__(self, failures: list[tuple[int, int]]) -> None:
        super().__init__(f"could not restore saved KV (sequence, entry): {failures}")
        self.failures = failures  # (sequence id, host entry id or NO_ENTRY)


class KvPoolLost(Exception):
    """Raised by a runner when the whole KV pool was lost (packing it failed after it was
    cleared): every sequence, running or kept, holds nothing any more."""


class EngineError(Exception):
    """A request the engine refuses or cannot finish, with a code clients can act on."""

    def __init__(self, code: ErrorCode, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after = retry_after


MAX_GRAMMAR_CHARS = 200_000  # a constraint's GBNF; a schema whose grammar is longer is refused
MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True)
class Constraint:
    """What a reply's text must be, enforced token by token: `grammar` (llama.cpp's GBNF) is what
    the runner compiles into the sequence's grammar sampler. The rest says the same in terms a
    fake runner (and a reader) can act on: the text is `prefix` + a JSON value following
    `schema` (JSON text; "" for any JSON object) + `suffix`, and with `repeat` one or more such
    blocks joined by newlines (parallel tool calls)."""

    grammar: str
    schema: str = ""
    prefix: str = ""
    suffix: str = ""
    repeat: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Constraint:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass(frozen=True)
class TokenLogprobs:
    """A sampled token's log-probability under the model, and the most likely tokens there."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 512
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    constraint: Constraint | None = None  # the reply must follow it (structured output, tools)
    logprobs: int | None = None  # report each token's logprob and this many alternatives
    # Text the reply is taken to begin with, unseen: the prompt ends with it, right after the
    # assistant's turn opens, and the model continues it ("Voici la réponse en français :"
    # keeps a small model in French, chat.reply_language). It is not part of the reply's text.
    reply_start: str = ""

    @property
    def greedy(self) -> bool:
        return (
            self.temperature <= 0.0
            and self.repeat_penalty == 1.0
            and self.frequency_penalty == 0.0
            and self.presence_penalty == 0.0
        )

    def check(self) -> None:
        """Raise EngineError(INVALID_REQUEST) for values no sampler can honour."""
        problems = []
        if self.max_tokens < 1:
            problems.append("max_tokens must be at least 1")
        if not 0.0 <= self.temperature <= 5.0:
            problems.append("temperature must be between 0 and 5")
        if not 0.0 < self.top_p <= 1.0:
            problems.append("top_p must be in (0, 1]")
        if self.top_k < 0:
            problems.append("top_k must be 0 (off) or more")
        if not 0.0 < self.repeat_penalty <= 5.0:
            problems.append("repeat_penalty must be in (0, 5]")
        if not (-2.0 <= self.frequency_penalty <= 2.0 and -2.0 <= self.presence_penalty <= 2.0):
            problems.append("frequency_penalty and presence_penalty must be between -2 and 2")
        if len(self.stop) > 8 or any(not s or len(s) > 200 for s in self.stop):
            problems.append("stop takes at most 8 non-empty strings of up to 200 characters")
        if len(self.reply_start) > 200:
            problems.append("reply_start takes at most 200 characters")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            problems.append(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}")
        if self.constraint is not None and not 0 < len(self.constraint.grammar) <= (
            MAX_GRAMMAR_CHARS
        ):
            problems.append(f"a grammar takes 1 to {MAX_GRAMMAR_CHARS} characters")
        if problems:
            raise EngineError(ErrorCode.INVALID_REQUEST, "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stop"] = list(self.stop)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingParams:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if "stop" in known:
            stop = known["stop"]
            known["stop"] = (stop,) if isinstance(stop, str) else tuple(stop or ())
        if isinstance(known.get("constraint"), dict):
            known["constraint"] = Constraint.from_dict(known["constraint"])
        return cls(**known)


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str


@dataclass(frozen=True)
class PromptPart:
    """A piece of a rendered prompt. Only the chat template's own text is `trusted`: its special
    tokens (<|im_start|>) are parsed as such. Message contents, whoever wrote them, are plain
    text: typing `<|im_end|><|im_start|>system` gives the characters, never the control tokens."""

    text: str
    trusted: bool
    # A passage of company knowledge (`inference.passages`): tokenised on its own, so that its
    # tokens, and the KV computed for them once, are the same wherever it appears.
    passage: bool = False


def prompt_text(parts: Sequence[PromptPart]) -> str:
    return "".join(part.text for part in parts)


TrustMap = tuple[tuple[int, bool], ...]


def trust_map(parts: Sequence[PromptPart], limit: int) -> TrustMap:
    """Where trusted and untrusted text end, up to character `limit`: two prompts whose first
    `limit` characters are equal share tokens only if these are equal too. Otherwise a message
    typed to look like another conversation's rendered text could borrow its control tokens."""
    ends: list[tuple[int, bool]] = []
    start = 0
    for part in parts:
        if start >= limit:
            break
        end = min(start + len(part.text), limit)
        if end > start:
            if ends and ends[-1][1] == part.trusted:
                ends[-1] = (end, part.trusted)
            else:
                ends.append((end, part.trusted))
        start += len(part.text)
    return tuple(ends)


def parts_from(parts: Sequence[PromptPart], offset: int) -> list[PromptPart]:
    """The parts of a prompt from character `offset` on (a part straddling it is cut)."""
    out: list[PromptPart] = []
    start = 0
    for part in parts:
        end = start + len(part.text)
        if end > offset:
            cut = max(0, offset - start)
            # A passage cut in two is no longer the passage whose KV is kept.
            out.append(PromptPart(part.text[cut:], part.trusted, part.passage and not cut))
        start = end
    return out


@dataclass(frozen=True)
class Span:
    """A passage in a prompt: `length` tokens from token `start`, whose KV is kept under `key`
    (`inference.passages.span_key`: the tokens and the prompt before the first user message)."""

    start: int
    length: int
    key: str

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass
class Request:
    """One generation as the engine tracks it, from arrival to finish."""

    request_id: str
    prompt_tokens: list[int]
    params: SamplingParams
    priority: int = 0
    prompt_text: str = ""  # the rendered prompt the tokens came from, when known
    prompt_parts: list[PromptPart] = field(default_factory=list)  # the same, with trust marked
    background: bool = False  # admitted only while half the sequences are free
    tenant: str = ""  # whose request: fair shares, and KV prefixes are reused only within it
    follow_up: bool = False  # a later turn of a conversation: goes before its tenant's new ones
    arrival: float = field(default_factory=time.monotonic)  # when this engine got it
    waited: float = 0.0  # seconds it spent in a queue before (the shared Redis queue)
    status: RequestStatus = RequestStatus.WAITING
    seq_id: int | None = None
    num_computed: int = 0  # prompt tokens whose KV is in the sequence
    num_cached: int = 0  # of those, how many were reused instead of computed
    num_restored: int = 0  # of the reused, how many came back from the host-memory cache
    # Passages in the prompt whose precomputed KV may be placed instead of computed, in order.
    spans: list[Span] = field(default_factory=list)
    anchor: int = 0  # tokens of the prompt the passages' KV was computed after
    num_placed: int = 0  # of the cached, how many were placed from precomputed passage KV
    # Computing a passage's KV once (`inference.passages`): the prompt is the opening of the
    # conversation and the passage, nothing is sampled, and `warm` is saved when it is done.
    warm: Span | None = None
    admitted_at: float | None = None
    output_tokens: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None

    @property
    def since(self) -> float:
        """When the client asked, on the engine's clock: the wait bound and TTFT count from it."""
        return self.arrival - self.waited

    @property
    def prefill_only(self) -> bool:
        return self.warm is not None

    @property
    def prefill_done(self) -> bool:
        return self.num_computed >= len(self.prompt_tokens)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_tokens) + len(self.output_tokens)

    def finish(self, reason: FinishReason) -> None:
        self.status = _STATUS_FOR_REASON[reason]
        self.finish_reason = reason
        self.finished_at = time.monotonic()

    def kv_tokens(self) -> list[int]:
        """The tokens whose KV the sequence holds now (the last sampled token is never decoded)."""
        if not self.prefill_done:
            return self.prompt_tokens[: self.num_computed]
        return self.prompt_tokens + self.output_tokens[:-1]


# --- Events: what the engine tells the client about a request --------------------------------


@dataclass(frozen=True)
class Queued:
    request_id: str
    position: int  # 1 = next to start
    # Seconds until it is predicted to start (None: unknown yet); see `inference.speed.fill`.
    estimated_wait: float | None = None
    type: str = "queued"


@dataclass(frozen=True)
class Delta:
    request_id: str
    text: str
    # With SamplingParams.logprobs: the tokens this text came from, in OpenAI's shape
    # ({"token", "bytes", "logprob", "top_logprobs": [{"token", "bytes", "logprob"}]}).
    logprobs: list[dict[str, Any]] | None = None
    type: str = "delta"


@dataclass(frozen=True)
class Done:
    request_id: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    ttft_ms: int | None = None
    total_ms: int = 0
    type: str = "done"


@dataclass(frozen=True)
class Failed:
    request_id: str
    code: str
    message: str
    retry_after: float | None = None
    type: str = "error"


Event = Queued | Delta | Done | Failed
_EVENT_TYPES: dict[str, type[Event]] = {
    "queued": Queued,
    "delta": Delta,
    "done": Done,
    "error": Failed,
}


def event_to_dict(event: Event) -> dict[str, Any]:
    return asdict(event)


def event_from_dict(data: dict[str, Any]) -> Event:
    cls = _EVENT_TYPES[data["type"]]
    fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
    return cls(**fields)


def failed(request_id: str, error: EngineError) -> Failed:
    return Failed(request_id, error.code.value, error.message, error.retry_after)
