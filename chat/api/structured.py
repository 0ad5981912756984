"""What an integration's request asks of the model beyond text: a reply held to JSON (or to a
JSON Schema), tools it may call, logprobs. `completion_plan` turns a validated request into the
messages the engine reads and the constraint its grammar enforces; the views call it, then the
one admission path as for any completion.

The constraint travels with the request (`SamplingParams.constraint`) to the runner, which holds
each constrained sequence to its own grammar inside the shared batch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chat.api import schemas, tools
from chat.services.checks import ChatError
from inference.constraints import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    SchemaNotSupported,
    Tool,
    check_schema,
    tool_call_schema,
)
from inference.types import MAX_GRAMMAR_CHARS, ChatMessage, Constraint

SCHEMA_INSTRUCTION = "Reply with JSON only, following this JSON Schema:\n"


@dataclass(frozen=True)
class CompletionPlan:
    messages: list[ChatMessage]  # the integration's conversation as the model reads it
    constraint: Constraint | None = None
    tool_names: frozenset[str] = frozenset()  # non-empty: the reply is read for tool calls
    parallel_tool_calls: bool = True
    logprobs: int | None = None  # alternatives per token, when logprobs were asked for

    @property
    def plain(self) -> bool:
        """A reply of free text with nothing to report but text: a cached reply may serve it."""
        return self.constraint is None and not self.tool_names and self.logprobs is None


def completion_plan(body: schemas.ChatCompletionRequest) -> CompletionPlan:
    """The engine's view of a request; ChatError (400, naming the parameter) for a schema the
    grammar cannot enforce."""
    given = body.tools or []
    choice = body.tool_choice or ("auto" if given else "none")
    parallel = body.parallel_tool_calls is not False
    added: list[ChatMessage] = []
    constraint = None
    names: frozenset[str] = frozenset()
    if given and choice != "none":
        names = frozenset(t.function.name for t in given)
        added.append(ChatMessage("system", tools.tools_text([_tool_json(t) for t in given])))
        if choice == "required" or isinstance(choice, schemas.NamedToolChoice):
            chosen = [
                (i, t)
                for i, t in enumerate(given)
                if not isinstance(choice, schemas.NamedToolChoice)
                or t.function.name == choice.function.name
            ]
            constraint = _tool_constraint(chosen, repeat=parallel and choice == "required")
    fmt = body.response_format
    if isinstance(fmt, schemas.ResponseFormatJsonObject):
        constraint = _constraint(None, "response_format")
    elif isinstance(fmt, schemas.ResponseFormatJsonSchema):
        schema = _checked(fmt.json_schema.schema_, "response_format.json_schema.schema")
        text = json.dumps(fmt.json_schema.schema_, ensure_ascii=False, separators=(",", ":"))
        added.append(ChatMessage("system", SCHEMA_INSTRUCTION + text))
        constraint = _constraint(schema, "response_format.json_schema.schema")
    return CompletionPlan(
        messages=_after_instructions(engine_messages(body.messages), added),
        constraint=constraint,
        tool_names=names,
        parallel_tool_calls=parallel,
        logprobs=(body.top_logprobs or 0) if body.logprobs else None,
    )


def engine_messages(messages: Sequence[schemas.ChatMessageIn]) -> list[ChatMessage]:
    """The request's messages as the model reads them: an assistant's calls written after its
    text, consecutive tool results gathered into one user message (Qwen2.5's template).
    ChatError (400, naming the call) for arguments nested too deep to read."""
    out: list[ChatMessage] = []
    results: list[str] = []
    for i, message in enumerate(messages):
        if message.role == "tool":
            results.append(message.text)
            continue
        if results:
            out.append(ChatMessage("user", tools.results_text(results)))
            results = []
        text = message.text
        if message.tool_calls:
            calls = [(c.function.name, c.function.arguments) for c in message.tool_calls]
            try:
                text = tools.assistant_text(text, calls)
            except tools.ArgumentsError as exc:
                raise ChatError(
                    "invalid_value",
                    f"The call's arguments cannot be read: {exc.message}",
                    param=f"messages[{i}].tool_calls[{exc.index}].function.arguments",
                ) from None
        out.append(ChatMessage(message.engine_role, text))
    if results:
        out.append(ChatMessage("user", tools.results_text(results)))
    return out


def _after_instructions(messages: list[ChatMessage], added: list[ChatMessage]) -> list[ChatMessage]:
    """`added` after the integration's own opening instructions, before the conversation."""
    first = next((i for i, m in enumerate(messages) if m.role != "system"), len(messages))
    return [*messages[:first], *added, *messages[first:]]


def _tool_json(tool: schemas.ToolIn) -> dict[str, Any]:
    data: dict[str, Any] = tool.model_dump(exclude_none=True)
    return data


def _tool_constraint(chosen: list[tuple[int, schemas.ToolIn]], *, repeat: bool) -> Constraint:
    calls = []
    for i, tool in chosen:
        where = f"tools[{i}].function.parameters"
        parameters = _checked(tool.function.parameters or {"type": "object"}, where)
        if parameters.get("type") != "object":
            raise ChatError(
                "unsupported_schema", "A tool's parameters must be an object schema.", param=where
            )
        calls.append(Tool(tool.function.name, parameters))
    where = f"tools[{chosen[0][0]}].function.parameters" if len(chosen) == 1 else "tools"
    return _constraint(
        tool_call_schema(calls),
        where,
        prefix=TOOL_CALL_OPEN,
        suffix=TOOL_CALL_CLOSE,
        repeat=repeat,
    )


def _checked(schema: dict[str, Any], param: str) -> dict[str, Any]:
    try:
        return check_schema(schema)
    except SchemaNotSupported as exc:
        raise ChatError(
            "unsupported_schema", f"The JSON Schema cannot be enforced: {exc}.", param=param
        ) from None


def _constraint(
    schema: dict[str, Any] | None,
    param: str,
    *,
    prefix: str = "",
    suffix: str = "",
    repeat: bool = False,
) -> Constraint:
    from inference.runner import constraint_grammar  # llama-cpp-python's converter

    try:
        grammar = constraint_grammar(schema, prefix=prefix, suffix=suffix, repeat=repeat)
    except Exception as exc:  # the converter's own refusals are assertions and KeyErrors
        raise ChatError(
            "unsupported_schema",
            f"The JSON Schema cannot be turned into a grammar: {exc or type(exc).__name__}.",
            param=param,
        ) from None
    if len(grammar) > MAX_GRAMMAR_CHARS:
        raise ChatError(
            "unsupported_schema",
            f"The JSON Schema makes a grammar of {len(grammar):,} characters, more than "
            f"{MAX_GRAMMAR_CHARS:,}: simplify it (fewer alternatives, smaller bounds).",
            param=param,
        )
    text = json.dumps(schema, ensure_ascii=False) if schema is not None else ""
    return Constraint(grammar, schema=text, prefix=prefix, suffix=suffix, repeat=repeat)
