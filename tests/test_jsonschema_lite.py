"""generate's output_schema check (agentproto/jsonschema_lite.py), without I/O: a table of
cases, a comparison with the jsonschema package on generated values, and the reading of
an answer (fenced or not) before it is checked."""

from __future__ import annotations

import math
from typing import Any

import jsonschema
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agentproto.jsonschema_lite import answer_problems, json_type_name, validate_json

json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


# -- validate_json (generate's output_schema) ---------------------------------------------

SCHEMA_CASES: list[tuple[Any, Any, bool]] = [
    ({"type": "object"}, {}, True),
    ({"minimum": 0}, float("-inf"), False),
    ({"maximum": 0}, float("inf"), False),
    ({"oneOf": [{"type": "integer"}, {"minimum": 0}]}, float("-inf"), False),
    ({"type": "object"}, [], False),
    ({"type": "integer"}, 3, True),
    ({"type": "integer"}, 3.0, True),
    ({"type": "integer"}, 3.5, False),
    ({"type": "integer"}, True, False),
    ({"type": "number"}, False, False),
    ({"type": ["string", "null"]}, None, True),
    ({"type": ["string", "null"]}, 1, False),
    ({"enum": ["a", 1]}, 1, True),
    ({"enum": ["a", 1]}, "b", False),
    ({"const": {"a": 1}}, {"a": 1}, True),
    ({"const": {"a": 1}}, {"a": 2}, False),
    ({"type": "object", "required": ["title"], "properties": {"title": {"type": "string", "maxLength": 5}}},
     {"title": "short"}, True),
    ({"type": "object", "required": ["title"], "properties": {"title": {"type": "string", "maxLength": 5}}},
     {"title": "too long"}, False),
    ({"type": "object", "required": ["title"]}, {}, False),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}, {"a": "x"}, True),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}, {"a": "x", "b": 1}, False),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, {"a": 1, "b": 2}, True),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, {"a": 1, "b": "2"}, False),
    ({"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2}, ["a"], True),
    ({"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2}, [], False),
    ({"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2}, ["a", "b", "c"], False),
    ({"type": "array", "items": {"type": "string"}}, ["a", 1], False),
    ({"prefixItems": [{"type": "integer"}, {"type": "string"}], "items": {"type": "boolean"}}, [1, "a", True], True),
    ({"prefixItems": [{"type": "integer"}, {"type": "string"}], "items": {"type": "boolean"}}, [1, "a", 2], False),
    ({"type": "string", "minLength": 2, "pattern": "^[a-z]+$"}, "ab", True),
    ({"type": "string", "minLength": 2, "pattern": "^[a-z]+$"}, "a", False),
    ({"type": "string", "minLength": 2, "pattern": "^[a-z]+$"}, "aB", False),
    ({"minimum": 1, "maximum": 3}, 3, True),
    ({"minimum": 1, "maximum": 3}, 0, False),
    ({"exclusiveMinimum": 1, "exclusiveMaximum": 3}, 2, True),
    ({"exclusiveMinimum": 1, "exclusiveMaximum": 3}, 3, False),
    ({"exclusiveMinimum": 1, "exclusiveMaximum": 3}, 1, False),
    ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, 1, True),
    ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, [], False),
    ({"oneOf": [{"type": "integer"}, {"minimum": 0}]}, -1, True),
    ({"oneOf": [{"type": "integer"}, {"minimum": 0}]}, 1, False),
    ({"allOf": [{"type": "integer"}, {"minimum": 0}]}, -1, False),
    ({"not": {"type": "string"}}, 1, True),
    ({"not": {"type": "string"}}, "x", False),
    ({"$ref": "#/definitions/T", "definitions": {"T": {"type": "string"}}}, "x", True),
    ({"$ref": "#/definitions/T", "definitions": {"T": {"type": "string"}}}, 1, False),
    ({"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}, "$defs": {"N": {"type": "integer"}}}, {"n": 1}, True),
    ({"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}, "$defs": {"N": {"type": "integer"}}}, {"n": "1"}, False),
    (True, {"anything": 1}, True),
    (False, 1, False),
    ({}, None, True),
    ({"type": "object", "properties": {"a": False}}, {"a": 1}, False),
]


@pytest.mark.parametrize("schema,instance,valid", SCHEMA_CASES)
def test_validate_json_cases(schema: Any, instance: Any, valid: bool) -> None:
    problems = validate_json(instance, schema)
    assert (problems == []) is valid, problems
    assert all(isinstance(p, str) and p.startswith("$") for p in problems)
    # agrees with jsonschema (draft 2020-12 knows prefixItems and $defs)
    assert jsonschema.Draft202012Validator(schema).is_valid(instance) is valid


def test_validate_json_paths_name_the_member() -> None:
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer"}}}}
    (problem,) = validate_json({"items": [1, "two"]}, schema)
    assert problem.startswith("$.items[1]") and "integer" in problem


DIFF_SCHEMAS = [schema for schema, _, _ in SCHEMA_CASES]


@settings(max_examples=400, deadline=None)
@given(schema=st.sampled_from(DIFF_SCHEMAS), instance=json_values)
def test_validate_json_agrees_with_jsonschema(schema: Any, instance: Any) -> None:
    assume(not (isinstance(instance, float) and math.isnan(instance)))
    want = jsonschema.Draft202012Validator(schema).is_valid(instance)
    assert (validate_json(instance, schema) == []) is want




def test_validate_json_booleans_are_not_numbers() -> None:
    assert validate_json(True, {"enum": ["a", 1]}) != []
    assert validate_json(1, {"enum": ["a", True]}) != []
    assert validate_json(False, {"const": 0}) != []
    assert validate_json([True], {"const": [1]}) != []
    assert validate_json(1.0, {"const": 1}) == []
    assert validate_json({"a": [1, True]}, {"const": {"a": [1.0, True]}}) == []


@pytest.mark.parametrize(
    ("text", "problems"),
    [
        ('{"title": "ok"}', []),
        ('```json\n{"title": "ok"}\n```', []),
        ('  ```\n{"title": "ok"}```  ', []),
        ('{"title": 5}', ["$.title: expected string, got number"]),
        ("Here is the answer: {}", ["not JSON: Expecting value"]),
        ("```", ["not JSON: Expecting value"]),
        ('{"title": NaN}', ["not JSON: NaN is not a JSON number"]),
        ("-Infinity", ["not JSON: -Infinity is not a JSON number"]),
    ],
)
def test_answer_problems_reads_a_fenced_or_bare_answer(text: str, problems: list[str]) -> None:
    schema = {"type": "object", "properties": {"title": {"type": "string"}}}
    assert answer_problems(text, schema) == problems


def test_json_type_names() -> None:
    assert [json_type_name(v) for v in (None, True, 1, 1.5, "s", [], {})] == [
        "null", "boolean", "number", "number", "string", "array", "object",
    ]
