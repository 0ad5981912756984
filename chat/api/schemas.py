"""The REST API's request and response types, in OpenAI's shapes.

Validation and the OpenAPI description (`/v1/openapi.json`) both come from these pydantic
models, so what is documented is what is accepted and returned. Parameters of OpenAI's API
that qassist cannot honour (tools, logprobs, n > 1, ...) are refused by name rather than
silently ignored; unknown parameters are refused too, as OpenAI does.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

MAX_STOP = 4
MAX_MESSAGES = 1_000
MAX_TOOLS = 64
MAX_EMBEDDING_INPUTS = 2_048
NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class FunctionCallIn(_Strict):
    name: str = Field(max_length=64)
    arguments: str = Field(description="The arguments as JSON text (an object).")


class ToolCallIn(_Strict):
    """A call the assistant made earlier in the conversation, as the API returned it."""

    id: str = Field(max_length=256)
    type: Literal["function"]
    function: FunctionCallIn


class ChatMessageIn(_Strict):
    """One message of the conversation. `developer` is OpenAI's newer name for `system`; a
    `tool` message is a function's result, answering the assistant's call `tool_call_id`."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = Field(
        default=None,
        description="Text, or a list of text parts (joined). Images and audio are not "
        "supported. Required, except on an assistant message that has tool_calls.",
    )
    name: str | None = Field(default=None, max_length=256, description="Accepted, not used.")
    tool_calls: list[ToolCallIn] | None = Field(
        default=None, description="assistant messages: the calls it made."
    )
    tool_call_id: str | None = Field(
        default=None, max_length=256, description="tool messages: the call this answers."
    )

    @model_validator(mode="after")
    def _content_where_needed(self) -> ChatMessageIn:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ParameterError("content", "content is required here")
        if self.tool_calls and self.role != "assistant":
            raise ParameterError("tool_calls", "only assistant messages have tool_calls")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("tool messages, and only they, have a tool_call_id")
        return self

    @property
    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)

    @property
    def engine_role(self) -> str:
        return "system" if self.role == "developer" else self.role


class StreamOptions(_Strict):
    include_usage: bool = False


_UNSUPPORTED = (
    "functions",
    "function_call",
    "logit_bias",
    "audio",
    "modalities",
    "prediction",
    "web_search_options",
)


class ResponseFormatText(_Strict):
    type: Literal["text"]


class ResponseFormatJsonObject(_Strict):
    """Any JSON object (say in the messages what it should hold, as OpenAI asks)."""

    type: Literal["json_object"]


class JsonSchemaFormat(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = Field(default=None, max_length=10_000)
    schema_: dict[str, Any] = Field(
        default_factory=dict,
        alias="schema",
        description="The JSON Schema the reply follows. What the grammar cannot enforce is "
        "refused by name (docs/api.md, Structured output).",
    )
    strict: bool | None = Field(
        default=None, description="Accepted: the schema is always enforced."
    )

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ResponseFormatJsonSchema(_Strict):
    type: Literal["json_schema"]
    json_schema: JsonSchemaFormat


ResponseFormat = Annotated[
    ResponseFormatText | ResponseFormatJsonObject | ResponseFormatJsonSchema,
    Field(discriminator="type"),
]


class FunctionDefinition(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = Field(default=None, max_length=10_000)
    parameters: dict[str, Any] | None = Field(
        default=None, description="The arguments' JSON Schema (none: no arguments)."
    )
    strict: bool | None = Field(default=None, description="Accepted.")


class ToolIn(_Strict):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(_Strict):
    name: str = Field(pattern=NAME_PATTERN)


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


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
    logprobs: bool | None = Field(
        default=None, description="Each generated token's log-probability in choices[].logprobs."
    )
    top_logprobs: int | None = Field(
        default=None, ge=0, le=20, description="With logprobs: this many likeliest alternatives."
    )
    response_format: ResponseFormat | None = Field(
        default=None,
        description="json_object or json_schema: the reply is constrained by a grammar to "
        "parse (and to validate against the schema).",
    )
    tools: Annotated[list[ToolIn], Field(max_length=MAX_TOOLS)] | None = Field(
        default=None, description="Functions the model may call (only type function)."
    )
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        default=None,
        description="auto (the default with tools), none, required or a named function; "
        "required and a named function are enforced by a grammar.",
    )
    parallel_tool_calls: bool | None = Field(
        default=None, description="Whether one reply may make several calls (default true)."
    )
    metadata: dict[str, str] | None = Field(default=None, description="Accepted, not used.")
    store: bool | None = Field(
        default=None, description="Accepted: every completion is stored for the tenant."
    )
    service_tier: str | None = Field(default=None, description="Accepted, not used.")
    # Refused by name (see _UNSUPPORTED): typed loosely so the refusal can say which.
    functions: Any = Field(default=None, description="Not supported: use tools.")
    function_call: Any = Field(default=None, description="Not supported: use tool_choice.")
    logit_bias: Any = Field(default=None, description="Not supported.")
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

    @model_validator(mode="after")
    def _unsupported_are_unset(self) -> ChatCompletionRequest:
        for name in _UNSUPPORTED:
            value = getattr(self, name)
            if value is not None and value != []:
                raise UnsupportedParameter(name)
        return self

    @model_validator(mode="after")
    def _tool_results_answer_calls(self) -> ChatCompletionRequest:
        # As OpenAI's API: a tool result answers a call an earlier assistant message made, or
        # the model would read a result nobody asked for as if it were the user's words.
        made: set[str] = set()
        for i, message in enumerate(self.messages):
            made.update(call.id for call in message.tool_calls or [])
            if message.role == "tool" and message.tool_call_id not in made:
                raise ParameterError(
                    "messages",
                    f"messages[{i}] answers tool call '{message.tool_call_id}', which no "
                    "earlier assistant message made",
                )
        return self

    @model_validator(mode="after")
    def _choices_are_consistent(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise ParameterError("top_logprobs", "top_logprobs needs logprobs: true")
        names = [tool.function.name for tool in self.tools or []]
        if len(set(names)) != len(names):
            raise ParameterError("tools", "each tool needs a name of its own")
        choice = self.tool_choice
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise ParameterError(
                "tool_choice", f"tool_choice names '{choice.function.name}', not one of the tools"
            )
        if choice == "required" and not names:
            raise ParameterError("tool_choice", "tool_choice 'required' needs tools")
        if names and self.response_format is not None and self.response_format.type != "text":
            raise ParameterError(
                "response_format", "tools and a JSON response_format cannot be combined"
            )
        return self

    @property
    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class UnsupportedParameter(ValueError):
    def __init__(self, name: str, message: str = "") -> None:
        super().__init__(message or f"{name} is not supported by this server")
        self.param = name


class ParameterError(ValueError):
    """An invalid value found by a check across parameters: `param` names the one at fault."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


# --- responses ----------------------------------------------------------------------------


class PromptTokensDetails(BaseModel):
    cached_tokens: int


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


FinishReason = Literal["stop", "length", "tool_calls"]


class FunctionCall(BaseModel):
    name: str
    arguments: str = Field(description="The arguments as JSON text (an object).")


class ToolCall(BaseModel):
    id: str = Field(description="call_…: a tool message answers it with tool_call_id.")
    type: Literal["function"]
    function: FunctionCall


def _is_none(value: Any) -> bool:
    return value is None


# Fields left out of the JSON when unset (exclude_if), as OpenAI does: a fragment's
# `"type": null` would overwrite the type a client accumulated from the call's first fragment.


class ChatMessageOut(BaseModel):
    role: Literal["assistant"]
    content: str | None = Field(description="null when the reply is only tool calls.")
    refusal: None = None
    tool_calls: list[ToolCall] | None = Field(
        default=None,
        exclude_if=_is_none,
        description="The functions the model called (absent when none).",
    )


class TopLogprob(BaseModel):
    token: str
    bytes: list[int] | None
    logprob: float


class TokenLogprob(BaseModel):
    token: str
    bytes: list[int] | None
    logprob: float = Field(description="Under the model's own distribution (natural log).")
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob] | None
    refusal: None = None


class Choice(BaseModel):
    index: int
    message: ChatMessageOut
    finish_reason: FinishReason
    logprobs: ChoiceLogprobs | None = None


class Quote(BaseModel):
    """A sentence of a passage that holds what the answer states."""

    text: str = Field(description="The sentence (a table row with its column names).")
    start: int = Field(description="Its first character's offset in the passage's text.")
    end: int = Field(description="The offset just after its last character.")


class Source(BaseModel):
    """A passage of the tenant's documents the answer was given (qassist's extension)."""

    number: int = Field(description="The answer cites it as [number].")
    title: str = Field(description="The document's title.")
    where: str = Field(description="Its section and page, e.g. 'Hotels, page 2'.")
    document_id: str | None = Field(description="doc-…; null once the document was deleted.")
    passage_id: int | None = Field(description="null once the document was deleted or replaced.")
    snippet: str | None = Field(description="The passage's beginning; null once removed.")
    cited: bool = Field(description="The answer's text cites it.")
    quotes: list[Quote] = Field(
        default_factory=list,
        description="The passage's sentences that hold the answer's figures, names and terms, "
        "as qassist's support check found them (empty when the answer does not rest on it).",
    )


_SOURCES = (
    "qassist extension: the passages of the tenant's documents this answer was given, when "
    "the tenant has company knowledge (absent otherwise). OpenAI clients ignore it."
)


class ChatCompletion(BaseModel):
    id: str = Field(description="chatcmpl-…: `GET /v1/chat/completions/{id}` retrieves it.")
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None
    sources: list[Source] | None = Field(default=None, description=_SOURCES)


class ChunkFunction(BaseModel):
    name: str | None = Field(default=None, exclude_if=_is_none)
    arguments: str | None = Field(default=None, exclude_if=_is_none)


class ChunkToolCall(BaseModel):
    """A fragment of a call: the first of each carries its id, type and name; the arguments
    follow. Fragments of one call share its index; concatenated, the arguments are its JSON."""

    index: int
    id: str | None = Field(default=None, exclude_if=_is_none)
    type: Literal["function"] | None = Field(default=None, exclude_if=_is_none)
    function: ChunkFunction


class ChunkDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ChunkToolCall] | None = Field(default=None, exclude_if=_is_none)


class ChunkChoice(BaseModel):
    index: int
    delta: ChunkDelta
    finish_reason: FinishReason | None
    logprobs: ChoiceLogprobs | None = None


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
    sources: list[Source] | None = Field(
        default=None, description=_SOURCES + " Sent on the chunk that carries finish_reason."
    )


class Model(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[Model]


# --- embeddings -----------------------------------------------------------------------------


class EmbeddingRequest(_Strict):
    model: str = Field(description="The embedding model's id, as `GET /v1/models` lists it.")
    input: str | Annotated[list[str], Field(min_length=1, max_length=MAX_EMBEDDING_INPUTS)] = Field(
        description="A text or a list of texts (not token arrays)."
    )
    encoding_format: Literal["float", "base64"] = Field(
        default="float", description="base64: each vector's float32 values, little-endian."
    )
    dimensions: int | None = Field(
        default=None, description="Only the model's own (512); another is refused by name."
    )
    user: str | None = Field(default=None, max_length=256, description="Accepted, not used.")

    @field_validator("input", mode="before")
    @classmethod
    def _texts_not_tokens(cls, value: Any) -> Any:
        if isinstance(value, list) and value and not all(isinstance(v, str) for v in value):
            raise UnsupportedParameter(
                "input",
                "input as token arrays is not supported: send text (LangChain's "
                "OpenAIEmbeddings: check_embedding_ctx_length=False)",
            )
        return value

    @property
    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


class Embedding(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str = Field(description="Floats, or base64 (encoding_format).")


class EmbeddingUsage(BaseModel):
    prompt_tokens: int = Field(description="Counted with the chat model's tokenizer (limits).")
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


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
