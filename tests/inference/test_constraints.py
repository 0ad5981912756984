"""Which JSON Schemas the grammar can hold a reply to: what is accepted is rewritten for the
converter, what is not is refused naming the keyword and where it is. Pure Python; the grammar
the converter makes from them is checked by llama.cpp in tests/inference/test_real_structured.py."""

import pytest

from inference.constraints import (
    ANY_VALUE,
    SchemaNotSupported,
    Tool,
    check_schema,
    tool_call_schema,
)


def refusal(schema):
    with pytest.raises(SchemaNotSupported) as caught:
        check_schema(schema)
    return caught.value


@pytest.mark.parametrize(
    ("schema", "keyword", "where"),
    [
        ({"type": "integer", "minimum": 1}, "minimum", "/"),
        ({"type": "number", "multipleOf": 2}, "multipleOf", "/"),
        ({"type": "object", "properties": {"a": {"not": {}}}}, "not", "/properties/a"),
        ({"type": "array", "items": {"uniqueItems": True}}, "uniqueItems", "/items"),
        ({"type": "object", "patternProperties": {"^x": {}}}, "patternProperties", "/"),
        ({"type": "string", "format": "email"}, "format", "/"),
        ({"type": "string", "pattern": "abc"}, "pattern", "/"),
        ({"type": "string", "pattern": "^(?=a)b$"}, "pattern", "/"),
        ({"type": "string", "pattern": "^a\\bc$"}, "pattern", "/"),
        ({"type": "string", "maxLength": 257}, "maxLength", "/"),
        ({"type": "array", "minItems": 3, "maxItems": 2}, "minItems", "/"),
        ({"$ref": "other.json#/x"}, "$ref", "/"),
        ({"$ref": "#/$defs/missing"}, "$ref", "/"),
        ({"type": "uuid"}, "type", "/"),
        ({"enum": []}, "enum", "/"),
        ({"anyOf": [{"type": "string"}], "enum": ["a"]}, "anyOf", "/"),
        ({"properties": {"a/b": {"if": {}}}}, "if", "/properties/a~1b"),
        ({"type": "object", "properties": {"a": {"$defs": {}}}}, "$defs", "/properties/a"),
        ({"allOf": [{"type": "string"}, {"type": "object"}]}, "allOf", "/allOf/0"),
        ("not a schema", "schema", "/"),
        ({"type": "object", "properties": {"a": 7}}, "schema", "/properties/a"),
    ],
)
def test_what_the_grammar_cannot_enforce_is_refused_by_name_and_place(schema, keyword, where):
    error = refusal(schema)
    assert error.keyword == keyword
    assert error.where == where
    assert f"(at {where})" in str(error)


def test_annotations_are_dropped_and_enforced_keywords_kept():
    checked = check_schema(
        {
            "title": "T",
            "description": "d",
            "type": "object",
            "properties": {"n": {"type": "integer", "default": 3, "examples": [1]}},
            "required": ["n"],
            "additionalProperties": False,
        }
    )
    assert checked == {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }


def test_a_list_of_types_beside_other_keywords_becomes_an_any_of():
    checked = check_schema({"type": ["string", "null"], "maxLength": 3})
    assert checked == {
        "anyOf": [{"maxLength": 3, "type": "string"}, {"maxLength": 3, "type": "null"}]
    }
    assert check_schema({"type": ["string", "null"], "enum": ["a", None]}) == {"enum": ["a", None]}


def test_a_schema_that_constrains_nothing_is_any_json_value():
    assert check_schema({}) == ANY_VALUE
    assert check_schema({"type": "object", "properties": {"x": {"description": "anything"}}})[
        "properties"
    ] == {"x": ANY_VALUE}


def test_definitions_are_renamed_so_they_cannot_clash_with_the_converters_rules():
    checked = check_schema(
        {
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/string"}, "b": {"$ref": "#/definitions/root"}},
            "$defs": {"string": {"enum": ["x"]}},
            "definitions": {"root": {"type": "integer"}},
        }
    )
    assert checked["properties"] == {
        "a": {"$ref": "#/$defs/def-string"},
        "b": {"$ref": "#/$defs/def-root"},
    }
    assert checked["$defs"] == {"def-string": {"enum": ["x"]}, "def-root": {"type": "integer"}}


def test_pydantics_single_all_of_around_a_reference_is_merged():
    checked = check_schema(
        {
            "type": "object",
            "properties": {
                "c": {"allOf": [{"$ref": "#/$defs/Color"}], "description": "the colour"}
            },
            "$defs": {"Color": {"enum": ["red"], "type": "string", "title": "Color"}},
        }
    )
    assert checked["properties"]["c"] == {"$ref": "#/$defs/def-Color"}


def test_pattern_shorthands_become_classes_the_grammar_knows():
    checked = check_schema({"type": "string", "pattern": "^\\d{3}-[\\w.]+\\.x$"})
    assert checked["pattern"] == "^[0-9]{3}-[a-zA-Z0-9_.]+[\\x2E]x$"


def test_a_tool_call_is_an_object_naming_the_tool_with_its_own_arguments():
    weather = check_schema(
        {
            "type": "object",
            "properties": {"unit": {"$ref": "#/$defs/Unit"}},
            "$defs": {"Unit": {"enum": ["c"]}},
        }
    )
    clock = check_schema({"type": "object", "properties": {}})
    schema = tool_call_schema([Tool("get_weather", weather), Tool("get_time", clock)])
    first, second = schema["anyOf"]
    assert first["properties"]["name"] == {"const": "get_weather"}
    assert first["properties"]["arguments"]["properties"]["unit"] == {
        "$ref": "#/$defs/tool0-def-Unit"
    }
    assert schema["$defs"] == {"tool0-def-Unit": {"enum": ["c"]}}
    assert second["required"] == ["name", "arguments"]
    assert tool_call_schema([Tool("get_time", clock)])["properties"]["name"] == {
        "const": "get_time"
    }


# --- patterns that make the grammar explode (issue #32, finding 2) ------------------------


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        # The issue's: 248 bytes that held every tenant's replies for 24 minutes.
        ("^(a{0,256}){0,256}$", "may be empty"),
        ("^(a?){0,256}$", "may be empty"),
        ("^(a|b?){0,3}$", "may be empty"),
        ("^(a*b*){2,5}$", "may be empty"),
        ("^(a{1,256}){1,256}$", "65,536 times in all"),
        ("^((a{1,16}){1,16}){1,16}$", "4,096 times in all"),
        ("^a{300}$", "a repetition above 256"),
        ("^" + "(" * 3_000 + "a" + ")" * 3_000 + "$", "nests too deeply"),
    ],
)
def test_patterns_whose_grammar_explodes_are_refused_up_front(pattern, why):
    error = refusal({"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}})
    assert error.keyword == "pattern"
    assert error.where == "/properties/x"
    assert why in str(error)


@pytest.mark.parametrize(
    "pattern",
    [
        "^(a{1,16}){1,16}$",  # 256 in all: as many as one repetition may have
        "^(\\d{1,3}\\.){3}\\d{1,3}$",
        "^[a-z]{0,256}$",
        "^(a+)+$",  # unbounded repetitions are recursive rules: no unrolling, no explosion
        "^(a*)*$",
        "^(a{0,256})*$",
        "^[A-Z]{3}-\\d{3}$",
    ],
)
def test_patterns_with_bounded_repetitions_are_kept(pattern):
    check_schema({"type": "string", "pattern": pattern})


# --- recursive references (issue #32, info) ------------------------------------------------

NODE = {
    "$defs": {
        "Node": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "next": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/Node"}]},
            },
            "required": ["name", "next"],
        }
    },
    "$ref": "#/$defs/Node",
}


def test_a_schema_that_is_a_recursive_reference_is_its_definition():
    """What pydantic writes for a model that refers to itself: the converter follows
    references below the root only, so this was refused every time."""
    checked = check_schema(NODE)
    assert "$ref" not in checked
    assert checked["type"] == "object"
    assert checked["properties"]["next"]["anyOf"][1] == {"$ref": "#/$defs/def-Node"}
    assert checked["$defs"]["def-Node"]["properties"]["next"]["anyOf"][1] == {
        "$ref": "#/$defs/def-Node"
    }


def test_references_that_only_refer_to_one_another_are_refused():
    error = refusal(
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    )
    assert error.keyword == "$ref"
