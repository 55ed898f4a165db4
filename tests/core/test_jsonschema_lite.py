"""generate's output_schema check (agentproto/core/jsonschema_lite.py), without I/O: a table of
cases, a comparison with the jsonschema package on generated values, and the reading of
an answer (fenced or not) before it is checked."""

from __future__ import annotations

import math
from typing import Any

import jsonschema
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agentproto.core.jsonschema_lite import answer_problems, json_type_name, validate_json

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


# -- what patterns may cost: compiled once per schema, within a budget ----------------------


def _cjk(start: int, count: int) -> str:
    """``count`` distinct characters: each is a character test of its own to compile."""
    return "".join(chr(0x4E00 + start + i) for i in range(count))


class _Parsed:
    """Counts what the standard parser reads for regex_lite (every compile starts there)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from agentproto.core import regex_lite

        self.sources: list[str] = []
        parse = regex_lite.sre_parse.parse

        def counting(source: str, flags: int = 0) -> Any:
            self.sources.append(source)
            return parse(source, flags)

        monkeypatch.setattr(regex_lite.sre_parse, "parse", counting)


def test_a_schema_whose_patterns_cost_too_much_to_compile_is_refused_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """30 patterns of 9,990 distinct characters (each 10,000 character tests to compile:
    seconds of work for all of them, and a 3 MB line of them stalled the loop for minutes):
    the schema is refused, saying why, once the compile budget is spent: the patterns past
    it are never parsed."""
    from agentproto.core.jsonschema_lite import schema_problems

    budget = 200_000  # jsonschema_lite.MAX_COMPILE_STEPS
    parsed = _Parsed(monkeypatch)
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string", "pattern": _cjk(i * 10_000, 9_990)}
                                               for i in range(30)}}
    [problem] = schema_problems(schema)
    assert f"its patterns take more than {budget:,} steps to compile" in problem
    read = sum(len(source) for source in parsed.sources)
    assert read <= budget, f"{len(parsed.sources)} patterns parsed ({read:,} characters)"
    # The same, checking an answer against it: the answer's check says the schema is not usable.
    [problem] = validate_json({"p0": "x"}, schema)
    assert "output_schema is not usable: its patterns take more than" in problem


def test_many_small_patterns_fit_the_compile_budget() -> None:
    from agentproto.core.jsonschema_lite import schema_problems

    schema = {"anyOf": [{"type": "string", "pattern": f"^item-{i}-[a-z]{{2,8}}\\d+$"} for i in range(300)]}
    assert schema_problems(schema) == []
    assert validate_json("item-299-ab12", schema) == []


def test_each_pattern_is_compiled_once_per_check_past_64_patterns(monkeypatch: pytest.MonkeyPatch) -> None:
    """100 distinct patterns, 40 values each checked against them all: each pattern is
    compiled once (a 64-entry cache compiled each again for every value, outside the step
    budget), and reused when the answer is checked against the same table."""
    from agentproto.core import jsonschema_lite
    from agentproto.core.jsonschema_lite import schema_problems

    compiled: dict[str, int] = {}
    real = jsonschema_lite.Pattern

    class Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self, source: str, *args: Any) -> None:
            compiled[source] = compiled.get(source, 0) + 1
            super().__init__(source, *args)

    monkeypatch.setattr(jsonschema_lite, "Pattern", Counted)
    sources = [f"^v{i}$|x" for i in range(100)]
    schema = {"type": "array", "items": {"allOf": [{"pattern": source} for source in sources]}}
    values = [f"x{i}" for i in range(40)]
    assert validate_json(values, schema) == []
    assert compiled == dict.fromkeys(sources, 1)
    # generate's way: the schema's table, filled once when it starts, read by the answer's check.
    compiled.clear()
    patterns: dict[str, Any] = {}
    assert schema_problems(schema, patterns=patterns) == []
    for _ in range(3):
        assert answer_problems(repr(values).replace("'", '"'), schema, patterns) == []
    assert compiled == dict.fromkeys(sources, 1)


def test_a_pattern_compiled_during_the_check_is_charged_to_its_steps() -> None:
    """A trusted schema's patterns are compiled as the check meets them: on the check's
    steps, so an expensive one makes the check too costly instead of stalling it."""
    schema = {"type": "string", "pattern": _cjk(0, 9_990)}
    [problem] = validate_json("x", schema, max_steps=5_000, trusted=True)
    assert problem == "$: too costly to check against output_schema (more than 5000 steps)"
    assert validate_json("x", {"pattern": "x"}, max_steps=5_000, trusted=True) == []
    # A trusted schema's pattern that cannot be used is a problem, never an exception.
    [problem] = validate_json("x", {"pattern": "(a)\\1"}, trusted=True)
    assert "pattern is not usable" in problem
