"""A small JSON Schema validator, sans-IO: generate's ``output_schema`` check.

The common core of JSON Schema (draft 7 / 2020-12) that answers are checked against,
with messages that name the member (``$.items[1]: expected string, got number``). It is
not a full implementation: agentproto must stay standard-library only, and an answer's
schema is small. ``tests/test_jsonschema_lite.py`` compares it with the jsonschema package.
"""

from __future__ import annotations

import json
import operator
import re
from typing import Any, Callable

from agentproto.wire import json_type_name


def _not_json(constant: str) -> Any:
    # Python's json reads NaN and Infinity; JSON has neither, and the app's parser may not.
    raise ValueError(f"not JSON: {constant} is not a JSON number")


def answer_problems(text: str, schema: Any) -> list[str]:
    """Why generate's answer ``text`` does not match ``schema`` (empty when it does). An
    answer fenced as a Markdown code block is read inside the fence, as models write one."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    try:
        value = json.loads(body, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        return [f"not JSON: {exc.msg}"]
    except ValueError as exc:
        return [str(exc)]
    return validate_json(value, schema)


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


def validate_json(instance: Any, schema: Any, path: str = "$") -> list[str]:
    """Validate against the common core of JSON Schema (draft 7 / 2020-12).

    Supports type, enum, const, properties, required, additionalProperties, items,
    prefixItems, minItems/maxItems, minLength/maxLength, pattern, minimum/maximum,
    exclusiveMinimum/exclusiveMaximum, anyOf/oneOf/allOf/not and local ``$ref``s into
    ``definitions``/``$defs``. Returns the problems found (empty when valid).
    """
    return _validate(instance, schema, path, schema)


def _resolve(ref: str, root: Any) -> Any:
    if not ref.startswith("#"):
        raise ValueError(f"only local $ref is supported: {ref}")
    node = root
    for part in ref[1:].split("/"):
        if part:
            node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: unlike Python's, ``true`` is not ``1`` (and 1 is 1.0)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
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


def _validate(inst: Any, schema: Any, path: str, root: Any) -> list[str]:
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [f"{path}: no value is allowed here"]
    if not isinstance(schema, dict):
        return []
    errors: list[str] = []
    if "$ref" in schema:
        errors += _validate(inst, _resolve(schema["$ref"], root), path, root)
    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        if not any(_TYPES.get(n, lambda v: True)(inst) for n in names):
            return errors + [f"{path}: expected {' or '.join(names)}, got {json_type_name(inst)}"]
    if "enum" in schema and not any(_json_equal(inst, option) for option in schema["enum"]):
        errors.append(f"{path}: {json.dumps(inst)} is not one of {json.dumps(schema['enum'])}")
    if "const" in schema and not _json_equal(inst, schema["const"]):
        errors.append(f"{path}: expected {json.dumps(schema['const'])}")
    if isinstance(inst, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in inst:
                errors.append(f"{path}: missing required property `{key}`")
        for key, value in inst.items():
            if key in props:
                errors += _validate(value, props[key], f"{path}.{key}", root)
            elif "additionalProperties" in schema:
                errors += _validate(value, schema["additionalProperties"], f"{path}.{key}", root)
    if isinstance(inst, list):
        prefix = schema.get("prefixItems", [])
        for i, item in enumerate(inst):
            if i < len(prefix):
                errors += _validate(item, prefix[i], f"{path}[{i}]", root)
            elif "items" in schema:
                errors += _validate(item, schema["items"], f"{path}[{i}]", root)
        _check_bounds(len(inst), ("minItems", "maxItems"), schema, path, errors)
    if isinstance(inst, str):
        _check_bounds(len(inst), ("minLength", "maxLength"), schema, path, errors)
        if "pattern" in schema and not re.search(schema["pattern"], inst):
            errors.append(f"{path}: does not match {schema['pattern']}")
    # An infinity is compared like any number (-inf is below every minimum), as jsonschema does.
    if isinstance(inst, (int, float)) and not isinstance(inst, bool):
        _check_bounds(inst, ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"), schema, path, errors)
    for sub in schema.get("allOf", []):
        errors += _validate(inst, sub, path, root)
    if "anyOf" in schema and not any(not _validate(inst, s, path, root) for s in schema["anyOf"]):
        errors.append(f"{path}: matches none of anyOf")
    if "oneOf" in schema:
        matches = sum(1 for s in schema["oneOf"] if not _validate(inst, s, path, root))
        if matches != 1:
            errors.append(f"{path}: matches {matches} of oneOf, expected exactly 1")
    if "not" in schema and not _validate(inst, schema["not"], path, root):
        errors.append(f"{path}: must not match `not`")
    return errors
