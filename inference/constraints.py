"""Which JSON Schemas a reply can be held to, and the schema of a tool call. Pure Python.

A schema is turned into a llama.cpp grammar by the converter llama-cpp-python ships
(`llama_cpp.llama_grammar`, a port of llama.cpp's json-schema-to-grammar; `inference.runner`
calls it). What that converter cannot enforce is refused here by name, before anything runs:
a schema keyword silently ignored would let a reply through that does not validate.
"""

from __future__ import annotations

import re
import re._parser as sre  # type: ignore[import-not-found]  # re's own parser; no stubs
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Keywords that say nothing about what is valid: accepted anywhere, ignored.
ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "$schema",
        "$id",
        "deprecated",
        "readOnly",
        "writeOnly",
        "strict",  # a flag some clients put inside the schema (OpenAI's own SDK does not)
    }
)
# What the grammar enforces. `oneOf` is enforced as `anyOf` (one alternative is produced).
ENFORCED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "$defs",
        "definitions",
        "minLength",
        "maxLength",
        "pattern",
        "format",
    }
)
TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
FORMATS = frozenset(
    {"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"}
)
# A repetition unrolls into the grammar once per allowed item or character. In a pattern, the
# bounds of repetitions nested in one another multiply (the converter unrolls each into nested
# optional rules, and llama.cpp's grammar keeps a parse stack for every way of splitting the
# text among them): their product is bounded by the same number.
MAX_REPEAT = 256
MAX_SCHEMA_NODES = 2_000
ANY_VALUE = {"type": ["object", "array", "string", "number", "boolean", "null"]}
NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class SchemaNotSupported(ValueError):
    """A schema this server cannot enforce: `keyword` names what, `where` is its JSON pointer."""

    def __init__(self, keyword: str, where: str, why: str = "") -> None:
        self.keyword = keyword
        self.where = where or "/"
        detail = f"'{keyword}': {why}" if why else f"'{keyword}' is not supported"
        super().__init__(f"{detail} (at {self.where})")


@dataclass
class _Walk:
    root: dict[str, Any]
    nodes: int = 0


def check_schema(schema: Any) -> dict[str, Any]:
    """The schema ready for the converter, or SchemaNotSupported naming the first keyword (or
    value) it cannot enforce. Subschemas that constrain nothing ({} or annotations only) become
    "any JSON value"; an `allOf` of one schema is merged into its parent (pydantic writes those)."""
    if not isinstance(schema, dict):
        raise SchemaNotSupported("schema", "", "a JSON Schema must be an object")
    walk = _Walk(schema)
    checked = _check(schema, "", walk)
    for key in ("$defs", "definitions"):
        if key in schema:
            checked[key] = {
                name: _check(sub, f"/{key}/{_escape(name)}", walk)
                for name, sub in _mapping(schema[key], f"/{key}", key).items()
            }
    # Definitions become grammar rules named after them: "def-" keeps a definition called
    # "string" or "root" from being taken for the converter's rules of those names.
    defs: dict[str, Any] = {}
    renamed = _prefixed_defs(checked, "def-", defs)
    renamed = _inline_root_ref(renamed, defs)
    if defs:
        renamed["$defs"] = defs
    return renamed


def _inline_root_ref(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A schema that is a reference at its root (`{"$ref": "#/$defs/Node", "$defs": …}`, what
    pydantic writes for a model that refers to itself) as the definition it names: the
    converter follows references only below the root, so a recursive one there was always
    refused. A chain of references that never reaches a schema is refused."""
    seen: set[str] = set()
    while "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        if name in seen or name not in defs:
            raise SchemaNotSupported("$ref", "", "the references only refer to one another")
        seen.add(name)
        schema = dict(defs[name])
    return schema


def _check(node: Any, where: str, walk: _Walk) -> dict[str, Any]:
    if node is True:
        return dict(ANY_VALUE)
    if not isinstance(node, dict):
        raise SchemaNotSupported("schema", where, "each subschema must be an object or true")
    walk.nodes += 1
    if walk.nodes > MAX_SCHEMA_NODES:
        raise SchemaNotSupported("schema", where, f"more than {MAX_SCHEMA_NODES} subschemas")
    node = _merge_single_all_of(node, where)
    for keyword in node:
        if keyword not in ENFORCED and keyword not in ANNOTATIONS:
            raise SchemaNotSupported(keyword, where)
        if keyword in ("$defs", "definitions") and where:
            raise SchemaNotSupported(keyword, where, f"'{keyword}' only at the schema's root")
    split = _split_type_list(node)
    if split is not None:
        return _check(split, where, walk)
    out: dict[str, Any] = {k: v for k, v in node.items() if k in ENFORCED}
    if "$ref" in out:
        _check_ref(out["$ref"], where, walk)
        return {"$ref": out["$ref"]}  # what the converter follows; siblings are annotations
    _check_type(out, where)
    _check_bounds(out, where)
    if "format" in out and (not isinstance(out["format"], str) or out["format"] not in FORMATS):
        raise SchemaNotSupported("format", where, f"format '{out['format']}' is not supported")
    if "pattern" in out:
        out["pattern"] = _grammar_pattern(out["pattern"], where)
    if "enum" in out and (not isinstance(out["enum"], list) or not out["enum"]):
        raise SchemaNotSupported("enum", where, "enum must be a non-empty list")
    if "required" in out and (
        not isinstance(out["required"], list)
        or not all(isinstance(r, str) for r in out["required"])
    ):
        raise SchemaNotSupported("required", where, "required must be a list of names")
    if "properties" in out:
        props = _mapping(out["properties"], f"{where}/properties", "properties")
        out["properties"] = {
            name: _check(sub, f"{where}/properties/{_escape(name)}", walk)
            for name, sub in props.items()
        }
    if "additionalProperties" in out:
        extra = out["additionalProperties"]
        if not isinstance(extra, bool):
            out["additionalProperties"] = _check(extra, f"{where}/additionalProperties", walk)
    if "items" in out:
        items = out["items"]
        if isinstance(items, list):
            raise SchemaNotSupported("items", where, "items as a list: use prefixItems")
        if items is False:
            out["maxItems"] = 0
            out["items"] = dict(ANY_VALUE)
        else:
            out["items"] = _check(items, f"{where}/items", walk)
    if "prefixItems" in out:
        if "items" in out:
            raise SchemaNotSupported("items", where, "prefixItems with items is not supported")
        prefix = out["prefixItems"]
        if not isinstance(prefix, list) or not prefix:
            raise SchemaNotSupported("prefixItems", where, "prefixItems must be a non-empty list")
        out["prefixItems"] = [
            _check(sub, f"{where}/prefixItems/{i}", walk) for i, sub in enumerate(prefix)
        ]
    for keyword in ("anyOf", "oneOf", "allOf"):
        if keyword in out:
            alternatives = out[keyword]
            if not isinstance(alternatives, list) or not alternatives:
                raise SchemaNotSupported(keyword, where, f"{keyword} must be a non-empty list")
            out[keyword] = [
                _check(sub, f"{where}/{keyword}/{i}", walk) for i, sub in enumerate(alternatives)
            ]
    if "allOf" in out:
        _check_all_of(out, where, walk)
    if sum(k in out for k in ("anyOf", "oneOf", "allOf", "enum", "const")) > 1:
        raise SchemaNotSupported(
            "anyOf", where, "combine at most one of anyOf, oneOf, allOf, enum and const"
        )
    if not any(k in out for k in ("type", "enum", "const", "anyOf", "oneOf", "allOf")):
        if "properties" in out or "additionalProperties" in out:
            out["type"] = "object"
        elif "items" in out or "prefixItems" in out:
            out["type"] = "array"
        elif any(k in out for k in ("minLength", "maxLength", "pattern", "format")):
            out["type"] = "string"
        else:
            return {**out, **ANY_VALUE}
    return out


def _merge_single_all_of(node: dict[str, Any], where: str) -> dict[str, Any]:
    all_of = node.get("allOf")
    if not isinstance(all_of, list) or len(all_of) != 1 or not isinstance(all_of[0], dict):
        return node
    merged = {k: v for k, v in node.items() if k != "allOf"}
    for key, value in all_of[0].items():
        if key in merged and key not in ANNOTATIONS and merged[key] != value:
            raise SchemaNotSupported("allOf", where, f"allOf and its parent both set '{key}'")
        merged.setdefault(key, value)
    return merged


def _check_all_of(out: dict[str, Any], where: str, walk: _Walk) -> None:
    """The converter merges the properties of an allOf's objects; anything else it drops."""
    for i, sub in enumerate(out["allOf"]):
        target = _deref(sub, walk) if "$ref" in sub else sub
        if set(target) - ANNOTATIONS - {"type", "properties", "required"} or (
            target.get("type", "object") != "object"
        ):
            raise SchemaNotSupported(
                "allOf", f"{where}/allOf/{i}", "allOf takes only objects with properties"
            )
    if out.get("type", "object") != "object" or set(out) - {"allOf", "type"}:
        raise SchemaNotSupported("allOf", where, "allOf with other keywords is not supported")


def _split_type_list(node: dict[str, Any]) -> dict[str, Any] | None:
    """`{"type": ["string", "null"], "maxLength": 5}` as the converter can take it: an anyOf of
    one schema per type (a list of types alone it unions itself; with enum or const those
    already say which values are valid)."""
    kinds = node.get("type")
    if not isinstance(kinds, list) or len(kinds) < 2:
        return None
    rest = {k: v for k, v in node.items() if k != "type" and k not in ANNOTATIONS}
    if not rest:
        return None
    if "enum" in rest or "const" in rest:
        return {k: v for k, v in node.items() if k != "type"}
    if any(k in rest for k in ("anyOf", "oneOf", "allOf", "$ref")):
        return None  # refused by the checks that follow
    return {"anyOf": [{**rest, "type": kind} for kind in kinds]}


def _check_type(out: dict[str, Any], where: str) -> None:
    kind = out.get("type")
    if kind is None:
        return
    kinds = kind if isinstance(kind, list) else [kind]
    if not kinds or not all(isinstance(k, str) and k in TYPES for k in kinds):
        raise SchemaNotSupported("type", where, f"type {kind!r} is not a JSON Schema type")
    if isinstance(kind, list) and len(kinds) > 1 and set(out) - {"type"}:
        keyword = sorted(set(out) - {"type"})[0]
        raise SchemaNotSupported(keyword, where, f"'{keyword}' beside a list of types")
    if isinstance(kind, list) and len(kinds) == 1:
        out["type"] = kinds[0]


def _check_bounds(out: dict[str, Any], where: str) -> None:
    for keyword in ("minItems", "maxItems", "minLength", "maxLength"):
        if keyword in out:
            value = out[keyword]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SchemaNotSupported(keyword, where, f"{keyword} must be a whole number")
            if value > MAX_REPEAT:
                raise SchemaNotSupported(keyword, where, f"{keyword} above {MAX_REPEAT}")
    for low, high in (("minItems", "maxItems"), ("minLength", "maxLength")):
        if low in out and high in out and out[low] > out[high]:
            raise SchemaNotSupported(low, where, f"{low} is more than {high}")


_CLASS_ESCAPES = {"d": "0-9", "w": "a-zA-Z0-9_", "s": " \\t\\n\\r"}


def _grammar_pattern(pattern: Any, where: str) -> str:
    """The pattern as the converter takes it: anchored (the converter knows no search), with
    \\d \\w \\s (and their negations outside brackets) spelt as character classes, which
    llama.cpp's grammars have and their literals do not; constructs it cannot translate are
    refused."""
    if not isinstance(pattern, str) or not pattern.startswith("^") or not pattern.endswith("$"):
        raise SchemaNotSupported(
            "pattern", where, "a pattern must be a string anchored with ^ and $"
        )
    try:
        parsed = sre.parse(pattern)
    except re.error as exc:
        raise SchemaNotSupported(
            "pattern", where, f"pattern is not a regular expression: {exc}"
        ) from None
    except RecursionError:
        raise SchemaNotSupported("pattern", where, "the pattern nests too deeply") from None
    if "(?" in pattern:
        raise SchemaNotSupported("pattern", where, "(?…) groups in a pattern are not supported")
    _check_repetitions(parsed, where)
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt.lower() in _CLASS_ESCAPES:
                chars = _CLASS_ESCAPES[nxt.lower()]
                if nxt.isupper() and in_class:
                    raise SchemaNotSupported("pattern", where, f"\\{nxt} inside [...]")
                if in_class:
                    out.append(chars)
                else:
                    out.append(f"[^{chars}]" if nxt.isupper() else f"[{chars}]")
            elif nxt.isalnum() and nxt not in "nrt":
                raise SchemaNotSupported("pattern", where, f"\\{nxt} in a pattern")
            elif nxt.isalnum():
                out.append(pattern[i : i + 2])
            else:
                # An escaped character, as a hex escape (grammars know no "\\."), alone in a
                # class outside brackets so that a quantifier after it applies to all of it.
                code = f"\\x{ord(nxt):02X}" if ord(nxt) < 256 else f"\\u{ord(nxt):04X}"
                out.append(code if in_class else f"[{code}]")
            i += 2
            continue
        if (c == "^" and i > 0 and not (in_class and pattern[i - 1] == "[")) or (
            c == "$" and i < len(pattern) - 1 and not in_class
        ):
            raise SchemaNotSupported("pattern", where, "^ and $ only at the pattern's ends")
        if c == "[":
            in_class = True
        elif c == "]":
            in_class = False
        out.append(c)
        i += 1
    return "".join(out)


_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)


def _check_repetitions(parsed: Any, where: str) -> None:
    """Refuse the repetitions that make llama.cpp's grammar explode (issue #32: a 248-byte
    request with `^(a{0,256}){0,256}$` held every reply of every tenant for 24 minutes, each
    character it checked costing more than the one before):

    - a bounded repetition of something that may be empty (`(a{0,9}){0,9}`, `(a?){0,9}`): the
      text splits among its copies in ever more ways;
    - bounded repetitions nested in one another whose bounds multiply past MAX_REPEAT
      (`(a{1,256}){1,256}`), for the same reason. Unbounded ones (`*`, `+`) become a recursive
      rule and cost nothing of the kind."""
    stack: list[tuple[Any, int]] = [(parsed, 1)]
    while stack:
        items, factor = stack.pop()
        for op, av in items:
            if op in _REPEATS:
                _, high, sub = av
                if high == sre.MAXREPEAT:
                    stack.append((sub, factor))
                    continue
                if high > 1 and sub.getwidth()[0] == 0:
                    raise SchemaNotSupported(
                        "pattern",
                        where,
                        "a bounded repetition of something that may be empty (like "
                        "(a?){0,9}) makes the grammar explode: write it without the empty case",
                    )
                if factor * high > MAX_REPEAT:
                    why = (
                        f"a repetition above {MAX_REPEAT}"
                        if factor == 1
                        else f"repetitions nested in one another may repeat {factor * high:,} "
                        f"times in all, more than {MAX_REPEAT}"
                    )
                    raise SchemaNotSupported("pattern", where, why)
                stack.append((sub, factor * high))
            elif op is sre.SUBPATTERN:
                stack.append((av[3], factor))
            elif op is sre.BRANCH:
                stack.extend((branch, factor) for branch in av[1])
            elif op is sre.ATOMIC_GROUP:
                stack.append((av, factor))


def _check_ref(ref: Any, where: str, walk: _Walk) -> None:
    if not isinstance(ref, str) or not ref.startswith(("#/$defs/", "#/definitions/")):
        raise SchemaNotSupported(
            "$ref", where, "only local references (#/$defs/… or #/definitions/…) are supported"
        )
    _deref({"$ref": ref}, walk, where)


def _deref(node: dict[str, Any], walk: _Walk, where: str = "") -> dict[str, Any]:
    target: Any = walk.root
    ref = node["$ref"]
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            raise SchemaNotSupported("$ref", where, f"{ref} does not name a definition")
        target = target[part]
    if not isinstance(target, dict):
        raise SchemaNotSupported("$ref", where, f"{ref} is not a schema")
    if "/" in ref[2:].split("/", 1)[1]:
        raise SchemaNotSupported("$ref", where, "a reference must name a definition directly")
    return target


def _mapping(value: Any, where: str, keyword: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SchemaNotSupported(keyword, where, f"{keyword} must be an object")
    return value


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


# --- tool calls --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tool:
    """A function the model may call: its name and the JSON Schema of its arguments."""

    name: str
    parameters: dict[str, Any]


TOOL_CALL_OPEN = "<tool_call>\n"
TOOL_CALL_CLOSE = "\n</tool_call>"


def tool_call_schema(tools: Sequence[Tool]) -> dict[str, Any]:
    """The JSON of one call (Qwen2.5's format: `{"name": …, "arguments": {…}}`) to any of
    `tools`, each with its own arguments' schema. The tools' schemas must have been checked
    (`check_schema`); their definitions are moved under names of their own."""
    alternatives = []
    defs: dict[str, Any] = {}
    for i, tool in enumerate(tools):
        parameters = _prefixed_defs(tool.parameters, f"tool{i}-", defs)
        alternatives.append(
            {
                "type": "object",
                "properties": {"name": {"const": tool.name}, "arguments": parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    schema: dict[str, Any] = alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}
    if defs:
        schema = {**schema, "$defs": defs}
    return schema


def _prefixed_defs(schema: dict[str, Any], prefix: str, defs: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its own $defs renamed `prefix…` into `defs` (and its $refs to match)."""
    local = {**schema.get("$defs", {}), **schema.get("definitions", {})}

    def rename(node: Any) -> Any:
        if isinstance(node, list):
            return [rename(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for key, value in node.items():
            if key in ("$defs", "definitions"):
                continue
            if key == "$ref" and isinstance(value, str):
                value = "#/$defs/" + prefix + value.rsplit("/", 1)[-1]
            out[key] = rename(value) if key not in ("enum", "const") else value
        return out

    for name, sub in local.items():
        defs[prefix + name] = rename(sub)
    renamed: dict[str, Any] = rename(schema)
    return renamed
