"""Input generators shared by the fuzz targets: JSON values, and the byte-level and
JSON-level damage that breaks parsers (truncation, flipped bytes, deep nesting, huge
numbers, lone surrogates, invalid UTF-8, NUL, huge strings)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

# Text that JSON can carry but that is awkward to handle: lone surrogates, NUL, newlines,
# escapes, non-BMP characters.
AWKWARD = ["\ud800", "\udfff", "\x00", "\n", "\r", "\u2028", '"', "\\", "\U0001f600", "\ufeff", "=", "/", "~"]
awkward_text = st.text(max_size=10) | st.sampled_from(AWKWARD) | st.lists(st.sampled_from(AWKWARD), max_size=4).map("".join)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([0, -1, 1, 2**63, 2**64, 2**64 - 1, -(2**63)])
    | st.floats(allow_nan=True, allow_infinity=True)
    | awkward_text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(awkward_text, inner, max_size=4),
    max_leaves=10,
)

# Raw JSON fragments that Python's json reads but a strict reader may not, and the sizes
# and depths that hit the interpreter's limits (4,300 digits, the recursion limit).
NASTY_FRAGMENTS: list[bytes] = [
    b"NaN",
    b"-Infinity",
    b"1e999",
    b"-0",
    b"1" * 5000,
    b"-" + b"9" * 4301,
    b'"\\ud800"',
    b'"\\udc00\\ud800"',
    b'"\\u0000"',
    b'"\xed\xa0\x80"',  # a surrogate encoded as UTF-8: invalid UTF-8
    b'"\xff"',
    b'"\xc3"',
    b"[" * 2000 + b"]" * 2000,
    b'{"a":' * 600 + b"1" + b"}" * 600,
    b"[" * 100000,
    b'"' + b"x" * 70000 + b'"',
    b"true",
    b"null",
    b"{}",
    b"[]",
    b'""',
]


@st.composite
def deep(draw: Any, inner: bytes = b"1") -> bytes:
    """JSON nested to a depth around the interpreter's recursion limit."""
    depth = draw(st.sampled_from([10, 400, 900, 950, 990, 1000, 1100, 3000]))
    opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"k":', b"}")]))
    return opener * depth + inner + closer * depth


nasty_json = st.sampled_from(NASTY_FRAGMENTS) | deep()


class Deep:
    """A value nested ``depth`` deep, built only when the target runs: hypothesis never
    holds (or prints, or shrinks) the deep value itself."""

    __slots__ = ("depth",)

    def __init__(self, depth: int) -> None:
        self.depth = depth

    def __repr__(self) -> str:
        return f"Deep({self.depth})"

    def build(self) -> Any:
        value: Any = 1
        for i in range(self.depth):
            value = [value] if i % 2 else {"k": value}
        return value


def expand(value: Any) -> Any:
    """``value`` with its ``Deep`` markers built."""
    if isinstance(value, Deep):
        return value.build()
    if isinstance(value, list):
        return [expand(v) for v in value]
    if isinstance(value, dict):
        return {k: expand(v) for k, v in value.items()}
    return value


def dumps(value: Any) -> bytes:
    """JSON as a client might send it: not necessarily ASCII, surrogates passed through."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def damaged(draw: Any, raw: bytes) -> bytes:
    """``raw`` with a few byte-level injuries."""
    data = bytearray(raw)
    for _ in range(draw(st.integers(0, 3))):
        how = draw(st.sampled_from(["cut", "flip", "insert", "delete", "splice"]))
        pos = draw(st.integers(0, len(data)))
        if how == "cut":
            del data[pos:]
        elif how == "flip" and pos < len(data):
            data[pos] = draw(st.integers(0, 255))
        elif how == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=4) | st.sampled_from([b"\n", b"\x00", b"\\", b'"', b"\xff"]))
        elif how == "delete":
            del data[pos : pos + draw(st.integers(1, 4))]
        elif how == "splice":
            data[pos:pos] = draw(nasty_json)
    return bytes(data)


@st.composite
def mutated_object(draw: Any, base: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """``base`` with members dropped, retyped, nulled or added (from ``keys``)."""
    obj = dict(base)
    for key in draw(st.lists(st.sampled_from(sorted(obj) or ["x"]), max_size=3, unique=True)):
        how = draw(st.sampled_from(["drop", "null", "retype"]))
        if how == "drop":
            obj.pop(key, None)
        elif how == "null":
            obj[key] = None
        else:
            obj[key] = draw(json_values)
    for key in draw(st.lists(st.sampled_from(keys or ["x"]), max_size=2)):
        obj[key] = draw(json_values)
    return obj


def splice_nasty(obj: dict[str, Any], key: str, fragment: bytes) -> bytes:
    """``obj`` as JSON with ``key``'s value replaced by a raw fragment."""
    body = dumps({k: v for k, v in obj.items() if k != key})
    member = dumps(key) + b":" + fragment
    return body[:-1] + (b"," if len(body) > 2 else b"") + member + b"}"
