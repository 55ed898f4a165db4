"""A small JSON Schema validator, sans-IO: generate's ``output_schema`` check.

The common core of JSON Schema (draft 7 / 2020-12) that answers are checked against,
with messages that name the member (``$.items[1]: expected string, got number``). It is
not a full implementation: agentproto must stay standard-library only, and an answer's
schema is small. ``tests/core/test_jsonschema_lite.py`` compares it with the jsonschema package.

Rules of this file (the check runs inside the loop, so it must neither raise nor stall):
- ``schema_problems`` checks the schema itself, once, when generate starts: every keyword
  it supports has the right type, every ``pattern`` compiles (regex_lite.py: no
  backreferences or lookaround), every ``$ref`` is local and resolves, and no ``$ref``
  loops back without descending into the value (which would recurse forever).
- Each distinct pattern is compiled once per schema, into the table (``patterns``: source
  -> compiled) that ``schema_problems`` fills and the answer's check reads; compiling
  them all may cost ``MAX_COMPILE_STEPS`` (regex_lite's steps, about a microsecond each),
  past which the schema is refused saying so. A pattern the check meets that is not in
  the table (a trusted or unchecked schema) is compiled then, charged to the check's
  ``MAX_STEPS``, and kept in the table. No cache outlives a table: one schema's patterns
  cost another nothing, and are not evicted by another's.
- ``validate_json`` never raises: a schema with problems yields them as its problems, and
  its work is bounded by ``MAX_STEPS`` (one step per schema applied to a value, per item
  or enum entry compared, per character a pattern reads; patterns run in linear time).
  An answer that would take more is refused with a problem saying so, as is one nested
  too deeply to check.
"""

from __future__ import annotations

import json
import operator
from typing import Any, Callable

from agentproto.core.regex_lite import Budget, Pattern, PatternError, TooCostly
from agentproto.core.wire import json_type_name

#: Steps one ``validate_json`` may take (a fraction of a second of work, at most).
MAX_STEPS = 200_000
#: Steps compiling one schema's patterns may take (as validation's: a fraction of a second
#: of work): hundreds of ordinary patterns, a few of the longest kind.
MAX_COMPILE_STEPS = 200_000

#: A schema's compiled patterns, by source (``schema_problems`` fills it).
Patterns = dict[str, Pattern]


def _not_json(constant: str) -> Any:
    # Python's json reads NaN and Infinity; JSON has neither, and the app's parser may not.
    raise ValueError(f"not JSON: {constant} is not a JSON number")


def answer_problems(text: str, schema: Any, patterns: Patterns | None = None) -> list[str]:
    """Why generate's answer ``text`` does not match ``schema`` (empty when it does). An
    answer fenced as a Markdown code block is read inside the fence, as models write one.
    ``patterns``: the table ``schema_problems`` filled for this schema, which then counts
    as checked (it is not checked, nor its patterns compiled, again)."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    try:
        value = json.loads(body, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        return [f"not JSON: {exc.msg}"]
    except RecursionError:
        return ["not JSON: nested too deeply"]
    except ValueError as exc:
        return [str(exc)]
    return validate_json(value, schema, trusted=patterns is not None, patterns=patterns)


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool)
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def validate_json(
    instance: Any,
    schema: Any,
    path: str = "$",
    max_steps: int = MAX_STEPS,
    trusted: bool = False,
    patterns: Patterns | None = None,
) -> list[str]:
    """Validate against the common core of JSON Schema (draft 7 / 2020-12).

    Supports type, enum, const, properties, required, additionalProperties, items
    (a schema, or draft 7's array of schemas), prefixItems, minItems/maxItems,
    minLength/maxLength, pattern, minimum/maximum, exclusiveMinimum/exclusiveMaximum,
    anyOf/oneOf/allOf/not and local ``$ref``s (JSON pointers into the schema). Returns
    the problems found (empty when valid); never raises. ``trusted``: the schema is one of
    agentproto's own (its wire schema) or was checked already, not checked again.
    ``patterns``: the schema's compiled patterns (filled as they are compiled).
    """
    if patterns is None:
        patterns = {}
    problems = [] if trusted else schema_problems(schema, patterns=patterns)
    if problems:
        return [f"{path}: output_schema is not usable: {problem}" for problem in problems]
    try:
        return _validate(instance, schema, path, schema, _Check(max_steps, patterns))
    except TooCostly:
        return [f"{path}: too costly to check against output_schema (more than {max_steps} steps)"]
    except RecursionError:
        return [f"{path}: nested too deeply to check against output_schema"]


def _resolve(ref: str, root: Any) -> Any:
    """The node a local ``$ref`` (a JSON pointer after ``#``) names; LookupError if none."""
    node = root
    for part in ref[1:].split("/")[1:] if ref != "#" else ():
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and key.isascii() and int(key) < len(node):
            node = node[int(key)]
        else:
            raise LookupError(ref)
    return node


class _Check(Budget):
    """One check's steps, and the schema's compiled patterns."""

    __slots__ = ("patterns",)

    def __init__(self, steps: int, patterns: Patterns) -> None:
        super().__init__(steps)
        self.patterns = patterns


def _pattern(source: str, patterns: Patterns, budget: Budget) -> Pattern:
    """The compiled ``source`` from ``patterns``, compiled into it (charged to ``budget``) if
    it is not there yet. PatternError, TooCostly."""
    found = patterns.get(source)
    if found is None:
        found = patterns[source] = Pattern(source, budget)
    return found


# -- the schema itself ---------------------------------------------------------------------

#: What each keyword this validator applies must be, checked before it is applied.
_SUBSCHEMA_MAPS = ("properties", "definitions", "$defs")
_SUBSCHEMA_ONE = ("additionalProperties", "not")
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_COUNTS = ("minItems", "maxItems", "minLength", "maxLength")
_NUMBERS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _is_schema(value: Any) -> bool:
    return isinstance(value, (dict, bool))


def _keyword_problem(schema: dict[str, Any], key: str, patterns: Patterns, budget: Budget) -> str | None:
    value = schema[key]
    if key in _SUBSCHEMA_MAPS:
        ok = isinstance(value, dict) and all(_is_schema(v) for v in value.values())
        return None if ok else "an object of schemas"
    if key in _SUBSCHEMA_ONE:
        return None if _is_schema(value) else "a schema (an object or a boolean)"
    if key == "items":
        ok = _is_schema(value) or (isinstance(value, list) and all(_is_schema(v) for v in value))
        return None if ok else "a schema or an array of schemas"
    if key in _SUBSCHEMA_LISTS:
        ok = isinstance(value, list) and (bool(value) or key == "prefixItems") and all(_is_schema(v) for v in value)
        return None if ok else "a non-empty array of schemas"
    if key in _COUNTS:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if ok else "a non-negative integer"
    if key in _NUMBERS:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # NaN is not
        return None if ok else "a number"
    if key == "type":
        names = value if isinstance(value, list) else [value]
        ok = bool(names) and all(isinstance(n, str) and n in _TYPES for n in names)
        return None if ok else "a type name or an array of them (" + ", ".join(_TYPES) + ")"
    if key == "enum":
        return None if isinstance(value, list) else "an array"
    if key == "required":
        return None if isinstance(value, list) and all(isinstance(v, str) for v in value) else "an array of strings"
    if key == "pattern":
        if not isinstance(value, str):
            return "a string"
        try:
            _pattern(value, patterns, budget)  # TooCostly: the whole schema is refused
        except PatternError as error:
            return f"a usable regular expression: {error}"
        return None
    if key == "$ref":
        if not isinstance(value, str) or not (value == "#" or value.startswith("#/")):
            return "a local reference (#/...): remote references and anchors are not supported"
        return None
    return None  # a keyword this validator does not apply


def _children(schema: dict[str, Any]) -> list[tuple[str, Any]]:
    """Every subschema, with the pointer step that reaches it."""
    out: list[tuple[str, Any]] = []
    for key in _SUBSCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            out += [(f"{key}/{name}", sub) for name, sub in schema[key].items()]
    for key in (*_SUBSCHEMA_ONE, "items"):
        if _is_schema(schema.get(key)):
            out.append((key, schema[key]))
    for key in (*_SUBSCHEMA_LISTS, "items"):
        if isinstance(schema.get(key), list):
            out += [(f"{key}/{i}", sub) for i, sub in enumerate(schema[key])]
    return out


def schema_problems(
    schema: Any, limit: int = 3, patterns: Patterns | None = None, max_compile: int = MAX_COMPILE_STEPS
) -> list[str]:
    """Why ``schema`` cannot be used as an output_schema (empty when it can). Its patterns
    are compiled into ``patterns`` (for the answer's check), within ``max_compile`` steps."""
    if not _is_schema(schema):
        return ["a schema is an object or a boolean"]
    try:
        return _schema_problems(schema, limit, {} if patterns is None else patterns, Budget(max_compile))
    except TooCostly:
        return [
            f"its patterns take more than {max_compile:,} steps to compile (about as many microseconds): "
            "use fewer or shorter patterns"
        ]


def _schema_problems(schema: Any, limit: int, patterns: Patterns, budget: Budget) -> list[str]:
    problems: list[str] = []
    # Edges between schemas applied to the same value ($ref, allOf, anyOf, oneOf, not): a
    # cycle among them is a recursion that never reaches the end of the value.
    same_value: dict[int, list[tuple[str, Any]]] = {}
    stack: list[tuple[str, Any]] = [("#", schema)]
    while stack and len(problems) < limit:
        where, node = stack.pop()
        if not isinstance(node, dict):
            continue
        edges = same_value[id(node)] = []
        for key in node:
            problem = _keyword_problem(node, key, patterns, budget)
            if problem is not None:
                problems.append(f"at {where}: `{key}` must be {problem}")
        ref = node.get("$ref")
        if isinstance(ref, str) and _keyword_problem(node, "$ref", patterns, budget) is None:
            try:
                target = _resolve(ref, schema)
            except LookupError:
                problems.append(f"at {where}: `$ref` {ref[:200]} does not resolve")
            else:
                if _is_schema(target):
                    edges.append((ref, target))
                else:
                    problems.append(f"at {where}: `$ref` {ref[:200]} is not a schema")
        for key in ("allOf", "anyOf", "oneOf"):
            if isinstance(node.get(key), list):
                edges += [(f"{where}/{key}/{i}", sub) for i, sub in enumerate(node[key])]
        if _is_schema(node.get("not")):
            edges.append((f"{where}/not", node["not"]))
        stack += [(f"{where}/{step}", sub) for step, sub in reversed(_children(node))]
    if not problems:
        loop = _loop(schema, same_value)
        if loop is not None:
            problems.append(f"`$ref` loops back to {loop} without descending into the value")
    return problems[:limit]


def _loop(root: Any, edges: dict[int, list[tuple[str, Any]]]) -> str | None:
    """A schema reachable from itself through same-value edges, by its pointer."""
    state: dict[int, int] = {}  # 1 on the path, 2 done
    for start in list(edges):
        if start in state:
            continue
        path = [(start, iter(edges[start]))]
        state[start] = 1
        while path:
            node, todo = path[-1]
            step = next(todo, None)
            if step is None:
                state[node] = 2
                path.pop()
                continue
            where, target = step
            key = id(target)
            if not isinstance(target, dict):
                continue
            if state.get(key) == 1:
                return where
            if key not in state:
                state[key] = 1
                path.append((key, iter(edges.get(key, []))))
    return None


def _json_equal(a: Any, b: Any, budget: Budget) -> bool:
    """JSON equality: unlike Python's, ``true`` is not ``1`` (and 1 is 1.0)."""
    budget.spend(1)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y, budget) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k], budget) for k in a)
    if isinstance(a, (list, dict)) or isinstance(b, (list, dict)):
        return False
    return bool(a == b)


#: A bound keyword: when the measured value (an array's or a string's length, a number)
#: breaks it, and how the problem reads.
_BOUNDS: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    "minItems": (operator.lt, "fewer than {} items"),
    "maxItems": (operator.gt, "more than {} items"),
    "minLength": (operator.lt, "shorter than {}"),
    "maxLength": (operator.gt, "longer than {}"),
    "minimum": (operator.lt, "less than {}"),
    "maximum": (operator.gt, "greater than {}"),
    "exclusiveMinimum": (operator.le, "not greater than {}"),
    "exclusiveMaximum": (operator.ge, "not less than {}"),
}


def _check_bounds(
    measure: Any, keywords: tuple[str, ...], schema: dict[str, Any], path: str, errors: list[str]
) -> None:
    for keyword in keywords:
        if keyword in schema:
            breaks, words = _BOUNDS[keyword]
            if breaks(measure, schema[keyword]):
                errors.append(f"{path}: " + words.format(schema[keyword]))


def _dumps(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 200 else text[:200] + "..."


def _validate(inst: Any, schema: Any, path: str, root: Any, budget: _Check) -> list[str]:
    budget.spend(1)
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [f"{path}: no value is allowed here"]
    if not isinstance(schema, dict):
        return []
    errors: list[str] = []
    if "$ref" in schema:
        errors += _validate(inst, _resolve(schema["$ref"], root), path, root, budget)
    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        if not any(_TYPES.get(n, lambda v: True)(inst) for n in names):
            return errors + [f"{path}: expected {' or '.join(names)}, got {json_type_name(inst)}"]
    if "enum" in schema and not any(_json_equal(inst, option, budget) for option in schema["enum"]):
        errors.append(f"{path}: {_dumps(inst)} is not one of {_dumps(schema['enum'])}")
    if "const" in schema and not _json_equal(inst, schema["const"], budget):
        errors.append(f"{path}: expected {_dumps(schema['const'])}")
    if isinstance(inst, dict):
        budget.spend(len(inst) + len(schema.get("required", ())))
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in inst:
                errors.append(f"{path}: missing required property `{key}`")
        for key, value in inst.items():
            if key in props:
                errors += _validate(value, props[key], f"{path}.{key}", root, budget)
            elif "additionalProperties" in schema:
                errors += _validate(value, schema["additionalProperties"], f"{path}.{key}", root, budget)
    if isinstance(inst, list):
        budget.spend(len(inst))
        items = schema.get("items")
        # Draft 7's array form of items is 2020-12's prefixItems.
        prefix = items if isinstance(items, list) and "prefixItems" not in schema else schema.get("prefixItems", [])
        for i, item in enumerate(inst):
            if i < len(prefix):
                errors += _validate(item, prefix[i], f"{path}[{i}]", root, budget)
            elif _is_schema(items):
                errors += _validate(item, items, f"{path}[{i}]", root, budget)
        _check_bounds(len(inst), ("minItems", "maxItems"), schema, path, errors)
    if isinstance(inst, str):
        _check_bounds(len(inst), ("minLength", "maxLength"), schema, path, errors)
        if "pattern" in schema:
            try:
                pattern = _pattern(schema["pattern"], budget.patterns, budget)  # compiled on the steps
            except PatternError as error:  # a trusted schema's, never checked
                errors.append(f"{path}: output_schema's pattern is not usable: {error}")
            else:
                if not pattern.search(inst, budget):
                    errors.append(f"{path}: does not match {schema['pattern']}")
    # An infinity is compared like any number (-inf is below every minimum), as jsonschema does.
    if isinstance(inst, (int, float)) and not isinstance(inst, bool):
        _check_bounds(inst, ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"), schema, path, errors)
    for sub in schema.get("allOf", []):
        errors += _validate(inst, sub, path, root, budget)
    if "anyOf" in schema and not any(not _validate(inst, s, path, root, budget) for s in schema["anyOf"]):
        errors.append(f"{path}: matches none of anyOf")
    if "oneOf" in schema:
        matches = sum(1 for s in schema["oneOf"] if not _validate(inst, s, path, root, budget))
        if matches != 1:
            errors.append(f"{path}: matches {matches} of oneOf, expected exactly 1")
    if "not" in schema and not _validate(inst, schema["not"], path, root, budget):
        errors.append(f"{path}: must not match `not`")
    return errors
