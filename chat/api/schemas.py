"""The REST API's request and response types, in OpenAI's shapes.

Validation and the OpenAPI description (`/v1/openapi.json`) both come from these pydantic
models, so what is documented is what is accepted and returned. Parameters of OpenAI's API
that qassist cannot honour (tools, logprobs, n > 1, ...) are refused by name rather than
silently ignored; unknown parameters are refused too, as OpenAI does.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_STOP = 4
MAX_MESSAGES = 1_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessageIn(_Strict):
    """One message of the conversation. `developer` is OpenAI's newer name for `system`."""

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] = Field(
        description="Text, or a list of text parts (joined). Images and audio are not supported."
    )
    name: str | None = Field(default=None, max_length=256, description="Accepted, not used.")

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)

    @property
    def engine_role(self) -> str:
        return "system" if self.role == "developer" else self.role


class StreamOptions(_Strict):
    include_usage: bool = False


_UNSUPPORTED = (
    "tools",
    "tool_choice",
    "functions",
    "function_call",
    "logit_bias",
    "top_logprobs",
    "audio",
    "modalities",
    "prediction",
    "web_search_options",
)


class ChatCompletionRequest(_Strict):
    model: str = Field(description="The served model's id, as `GET /v1/models` lists it.")
    messages: Annotated[list[ChatMessageIn], Field(min_length=1, max_length=MAX_MESSAGES)]
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(
        default=None, ge=1, description="Wins over max_tokens when both are given."
    )
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP)] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(default=None, max_length=256)
    n: int = Field(default=1, ge=1, le=1, description="Only 1.")
    logprobs: bool | None = Field(default=None, description="Only false.")
    response_format: dict[str, Any] | None = Field(
        default=None, description='Only {"type": "text"}.'
    )
    metadata: dict[str, str] | None = Field(default=None, description="Accepted, not used.")
    store: bool | None = Field(
        default=None, description="Accepted: every completion is stored for the tenant."
    )
    parallel_tool_calls: bool | None = Field(default=None, description="Accepted, not used.")
    service_tier: str | None = Field(default=None, description="Accepted, not used.")
    # Refused by name (see _UNSUPPORTED): typed loosely so the refusal can say which.
    tools: Any = Field(default=None, description="Not supported.")
    tool_choice: Any = Field(default=None, description="Not supported.")
    functions: Any = Field(default=None, description="Not supported.")
    function_call: Any = Field(default=None, description="Not supported.")
    logit_bias: Any = Field(default=None, description="Not supported.")
    top_logprobs: Any = Field(default=None, description="Not supported.")
    audio: Any = Field(default=None, description="Not supported.")
    modalities: Any = Field(default=None, description="Not supported.")
    prediction: Any = Field(default=None, description="Not supported.")
    web_search_options: Any = Field(default=None, description="Not supported.")

    @field_validator("stop")
    @classmethod
    def _stops_are_not_empty(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if any(not s or len(s) > 200 for s in stops):
            raise ValueError("each stop sequence must be 1 to 200 characters")
        return value

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, value: bool | None) -> bool | None:
        if value:
            raise ValueError("logprobs are not supported")
        return value

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and value != {"type": "text"}:
            raise ValueError('only {"type": "text"} is supported')
        return value

    @model_validator(mode="after")
    def _unsupported_are_unset(self) -> ChatCompletionRequest:
        for name in _UNSUPPORTED:
            value = getattr(self, name)
            if (
                value is not None
                and value != []
                and not (name == "tool_choice" and value == "none")
            ):
                raise UnsupportedParameter(name)
        return self

    @property
    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class UnsupportedParameter(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(f"{name} is not supported by this server")
        self.param = name


# --- responses ----------------------------------------------------------------------------


class PromptTokensDetails(BaseModel):
    cached_tokens: int


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


FinishReason = Literal["stop", "length"]


class ChatMessageOut(BaseModel):
    role: Literal["assistant"]
    content: str
    refusal: None = None


class Choice(BaseModel):
    index: int
    message: ChatMessageOut
    finish_reason: FinishReason
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str = Field(description="chatcmpl-…: `GET /v1/chat/completions/{id}` retrieves it.")
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None


class ChunkDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: ChunkDelta
    finish_reason: FinishReason | None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """One `data:` event of a streamed completion. The stream ends with `data: [DONE]`; with
    stream_options.include_usage, the last chunk before it has no choices and the usage."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class Model(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[Model]


class StoredMessage(BaseModel):
    id: str
    role: Literal["system", "developer", "user", "assistant"]
    content: str


class StoredMessageList(BaseModel):
    object: Literal["list"]
    data: list[StoredMessage]
    first_id: str | None
    last_id: str | None
    has_more: bool


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    error: ErrorDetail


# --- batches ------------------------------------------------------------------------------


class BatchLine(_Strict):
    """OpenAI's batch line: a request with the caller's own id for it."""

    custom_id: str | None = Field(default=None, max_length=256)
    body: ChatCompletionRequest
    method: Literal["POST"] | None = None
    url: Literal["/v1/chat/completions"] | None = None


class BatchCreate(_Strict):
    """`POST /v1/batches` as JSON; the same requests may come as JSONL instead, one per line
    (Content-Type: application/jsonl). `stream` must be false in a batch."""

    requests: list[ChatCompletionRequest | BatchLine] = Field(min_length=1)
    name: str | None = Field(default=None, max_length=200)


class BatchRequestCounts(BaseModel):
    total: int
    completed: int
    failed: int
    cancelled: int
    pending: int
    running: int


class BatchObject(BaseModel):
    id: str = Field(description="batch_…")
    object: Literal["batch"]
    name: str
    status: str
    created_at: int | None
    started_at: int | None
    finished_at: int | None
    request_counts: BatchRequestCounts


class BatchList(BaseModel):
    object: Literal["list"]
    data: list[BatchObject]


class BatchItemError(BaseModel):
    code: str
    message: str


class BatchUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class BatchChoice(BaseModel):
    index: int
    message: ChatMessageOut
    finish_reason: str


class BatchResponse(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int | None
    model: str
    choices: list[BatchChoice]
    usage: BatchUsage


class BatchResultLine(BaseModel):
    """One line of `GET /v1/batches/{id}/results` (JSONL): a finished item's completion, or
    why it did not finish."""

    custom_id: str | None
    index: int
    status: str
    response: BatchResponse | None = None
    error: BatchItemError | None = None
