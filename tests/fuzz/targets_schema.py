"""Fuzz targets: generate's output_schema documents (jsonschema_lite) and the linear-time
regular expressions behind their ``pattern`` (regex_lite).

The contract of the schema check: ``schema_problems`` never raises; a schema it accepts
never makes ``validate_json`` raise, loop or recurse, whatever the value; any schema at
all (checked or not) gives ``validate_json`` problems, never an exception; and where the
check completes on a schema without patterns, its verdict is the jsonschema package's
(draft 2020-12). Of the regular expressions: a pattern compiles or raises PatternError
and nothing else; when it compiles, ``search`` says what ``re.search`` says.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

import jsonschema
from fuzz.gen import json_values
from fuzz.harness import regression, target
from fuzz.mutate import mutate_json, mutate_text
from hypothesis import strategies as st

from agentproto.core.jsonschema_lite import schema_problems, validate_json
from agentproto.core.regex_lite import Budget, Pattern, PatternError, TooCostly

TYPES = ["object", "array", "string", "boolean", "null", "integer", "number"]
REGEX_PIECES = [
    "a", "b", "ab", ".", "\\d", "\\w", "\\s", "[a-c]", "[^a]", "[\\d_]", "^", "$", "\\A", "\\Z", "\\b", "\\B",
    "*", "+", "?", "*?", "{2}", "{1,3}", "{0,}", "|", "(", ")", "(?:", "(?i)", "(?i:", "(?m)", "(?s)", "(?a)",
    "(?=", "(?!", "(?<=", "\\1", "(?P<n>", "(?P=n)", "(?>", "++", "\\", "[", "]", "{", "ä", "\\u00e4", "\n",
]
regexes = st.lists(st.sampled_from(REGEX_PIECES), max_size=8).map("".join) | st.sampled_from(
    ["^(a+)+$", "(a|a)*b", "(a*)*b", "^[a-z0-9-]+$", "\\d{1,19}", "(x{0,99}){0,99}", "(?:){9999999}", "^$"]
)
REFS = [
    "#", "#/definitions/a", "#/definitions/b", "#/$defs/a", "#/properties/x", "#/definitions/missing",
    "https://example.com/s.json", "#anchor", "#/allOf/0", "#/items", "#/definitions/a~1b", "#/definitions",
]
numbers = st.integers(-10, 10) | st.floats(allow_nan=False, allow_infinity=True, width=32)


def keywords(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A schema object: a few keywords, mostly well typed."""
    values: dict[str, st.SearchStrategy[Any]] = {
        "type": st.sampled_from(TYPES) | st.lists(st.sampled_from(TYPES), min_size=1, max_size=2),
        "enum": st.lists(json_values, max_size=3),
        "const": json_values,
        "properties": st.dictionaries(st.sampled_from(["x", "y", "a"]), children, max_size=2),
        "required": st.lists(st.sampled_from(["x", "y"]), max_size=2),
        "additionalProperties": children,
        "items": children | st.lists(children, max_size=2),
        "prefixItems": st.lists(children, max_size=2),
        "pattern": regexes,
        "not": children,
        "$ref": st.sampled_from(REFS),
        **{key: st.integers(0, 3) for key in ("minItems", "maxItems", "minLength", "maxLength")},
        **{key: numbers for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")},
        **{key: st.lists(children, min_size=1, max_size=2) for key in ("allOf", "anyOf", "oneOf")},
    }
    names = sorted(values)

    @st.composite
    def build(draw: Any) -> dict[str, Any]:
        schema: dict[str, Any] = {}
        for key in draw(st.lists(st.sampled_from(names), max_size=4, unique=True)):
            schema[key] = draw(json_values) if draw(st.integers(0, 5)) == 0 else draw(values[key])
        return schema

    return build()


subschemas = st.recursive(st.sampled_from([True, False, {}]), keywords, max_leaves=6)


@st.composite
def schemas(draw: Any) -> Any:
    if draw(st.integers(0, 20)) == 0:
        return draw(json_values)
    root = draw(keywords(subschemas))
    if draw(st.booleans()):
        root["definitions"] = {"a": draw(subschemas), "b": draw(subschemas), "a/b": draw(subschemas)}
    return root


instances = json_values | st.integers(0, 40).map(lambda n: "a" * n + "!") | st.lists(st.sampled_from(["a", 1, None]), max_size=4)


def _has(schema: Any, keys: tuple[str, ...]) -> bool:
    """Whether any (sub)schema uses one of ``keys`` (a walk without recursion)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if any(key in node for key in keys):
                return True
            stack += node.values()
        elif isinstance(node, list):
            stack += node
    return False


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


@target(
    "output_schema",
    st.tuples(schemas(), instances),
    examples=200,
    mutate=lambda v, rng: (mutate_json(v[0], rng), v[1]) if rng.random() < 0.7 else (v[0], mutate_json(v[1], rng)),
)
def output_schema(case: tuple[Any, Any]) -> None:
    """output_schema: checked first, then applied without raising, looping or stalling."""
    schema, instance = case
    problems = schema_problems(schema)
    assert isinstance(problems, list) and all(isinstance(p, str) and p for p in problems)
    found = validate_json(instance, schema, max_steps=20_000)
    assert isinstance(found, list) and all(isinstance(p, str) for p in found)
    unusable = any("output_schema is not usable" in p for p in found)
    assert unusable == bool(problems), (problems, found)
    if problems or any("too costly" in p or "too deeply" in p for p in found):
        return
    # The comparison: only where both sides mean the same (patterns are re's on both
    # sides but may backtrack forever in jsonschema; draft 7's array items differ).
    if _has(schema, ("pattern", "items", "definitions")) or not _finite(schema) or not _finite(instance):
        return
    try:
        want = jsonschema.Draft202012Validator(schema).is_valid(instance)
    except (jsonschema.exceptions.SchemaError, jsonschema.exceptions.RefResolutionError, RecursionError):
        return
    assert (found == []) is want, f"jsonschema says {'valid' if want else 'invalid'}; we found {found}"


regression(
    "output_schema",
    ({"pattern": "^(a+)+$"}, "a" * 40 + "!"),
    ({"$ref": "#"}, 1),
    ({"items": {"$ref": "#"}}, [[[[]]]]),
    ({"required": 5}, {}),
    ({"pattern": "("}, "a"),
)


# -- the regular expressions -----------------------------------------------------------------


@target(
    "regex_lite",
    st.tuples(regexes, st.text(alphabet="abAB1_ \n!ä", max_size=10)),
    examples=400,
    # The text stays short: re, the oracle, backtracks.
    mutate=lambda v, rng: (mutate_text(v[0], rng), mutate_text(v[1], rng)[:12]),
)
def regex_lite(case: tuple[str, str]) -> None:
    """Patterns: PatternError or a matcher that agrees with re.search, in linear time."""
    source, text = case
    try:
        pattern = Pattern(source)
    except PatternError as error:
        message = str(error)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                re.compile(source)
        except (re.error, RecursionError, OverflowError):
            return  # re refuses it too
        assert "not supported" in message or "too large" in message or "too long" in message, message
        return
    try:
        got = pattern.search(text, Budget(200_000))
    except TooCostly:
        raise AssertionError("a 10-character string cost 200,000 steps") from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = re.search(source, text) is not None
    assert got == want, f"re.search says {want}"


regression("regex_lite", ("^(a+)+$", "aaaaaaaaa!"), ("a$", "a\n"), ("\\B", ""), ("(?i)ä", "Ä"))
