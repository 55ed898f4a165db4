"""Fast mutations for long runs, and a generic shrinker for what they break.

Hypothesis spends far more time making an input than the cheap parsers spend on it, so a
long run also tries, for each input hypothesis makes, a number of mutants of it made with
``random``: bytes damaged, JSON members replaced, dropped or added. A mutant that breaks
the contract cannot be shrunk by hypothesis (it did not make it), so ``shrink`` reduces it
by itself: cut bytes and strings, drop list items and object members, zero numbers, as
long as the same crash (by signature) still happens.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any, Callable, Iterator

from fuzz.gen import AWKWARD, NASTY_FRAGMENTS, Deep

TOKENS = [b"\n", b"\r\n", b"\x00", b'"', b"\\", b"\xff", b"\xed\xa0\x80", b"[", b"]", b"{", b"}", b",", b":", b"0",
          b"-1", b"1e999", b"NaN", b"null", b"true", b'\\ud800', b" ", b"\t", b"\r"]
SHORT_NASTY = [f for f in NASTY_FRAGMENTS if len(f) <= 10_000]
INTS = [0, -1, 1, 2, 255, 2**31, 2**53 + 1, 2**63, 2**64 - 1, 2**64, -(2**63), 10**30]
FLOATS = [0.5, -0.0, 1e308, -1e-308, math.nan, math.inf, -math.inf]


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        pos = rng.randint(0, len(out))
        how = rng.randrange(7)
        if how == 0 and out:
            out[min(pos, len(out) - 1)] = rng.randrange(256)
        elif how == 1:
            out[pos:pos] = rng.choice(TOKENS)
        elif how == 2:
            del out[pos : pos + rng.randint(1, 8)]
        elif how == 3:
            end = min(len(out), pos + rng.randint(1, 16))
            out[pos:pos] = out[pos:end]
        elif how == 4:
            out[pos:pos] = rng.choice(SHORT_NASTY)
        elif how == 5:
            del out[pos:]
        else:
            out[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
    return bytes(out)


def mutate_text(text: str, rng: random.Random) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 3)):
        pos = rng.randint(0, len(chars))
        how = rng.randrange(4)
        if how == 0:
            chars[pos:pos] = rng.choice(AWKWARD)
        elif how == 1:
            del chars[pos : pos + rng.randint(1, 4)]
        elif how == 2:
            chars[pos:pos] = chars[pos : pos + rng.randint(1, 8)]
        else:
            chars[pos:pos] = chr(rng.choice([rng.randrange(128), rng.randrange(0x110000)]))
    return "".join(chars)


def random_json(rng: random.Random, deep: bool = False) -> Any:
    how = rng.randrange(10 if deep else 9)
    if how == 0:
        return rng.choice([None, True, False])
    if how == 1:
        return rng.choice(INTS) if rng.random() < 0.6 else rng.randint(-1000, 1000)
    if how == 2:
        return rng.choice(FLOATS)
    if how in (3, 4):
        return rng.choice(AWKWARD) if rng.random() < 0.5 else "".join(rng.choice("ab0 _-/.") for _ in range(rng.randint(0, 6)))
    if how == 5:
        return "x" * rng.choice([100, 5000, 70_000])
    if how == 6:
        return [random_json(rng) for _ in range(rng.randint(0, 3))] if rng.random() < 0.5 else []
    if how == 7:
        return {rng.choice(["a", "id", "type", "", "\ud800"]): random_json(rng)} if rng.random() < 0.5 else {}
    if how == 8:
        return rng.choice([[1], {"a": 1}, [[]], "", 0])
    return Deep(rng.choice([400, 990]))


def mutate_json(value: Any, rng: random.Random, deep: bool = False, depth: int = 0) -> Any:
    """``value`` with one node replaced, dropped or added (copied along the path only)."""
    if isinstance(value, dict) and value and depth < 30 and rng.random() < 0.75:
        key = rng.choice(list(value))
        out = dict(value)
        r = rng.random()
        if r < 0.15:
            del out[key]
        elif r < 0.25:
            out[rng.choice(["id", "type", "x", "method", "params", "", key])] = random_json(rng, deep)
        else:
            out[key] = mutate_json(value[key], rng, deep, depth + 1)
        return out
    if isinstance(value, list) and value and depth < 30 and rng.random() < 0.75:
        index = rng.randrange(len(value))
        items = list(value)
        r = rng.random()
        if r < 0.15:
            del items[index]
        elif r < 0.25:
            items.insert(index, random_json(rng, deep))
        else:
            items[index] = mutate_json(value[index], rng, deep, depth + 1)
        return items
    if isinstance(value, str) and rng.random() < 0.5:
        return mutate_text(value, rng)
    return random_json(rng, deep)


# -- shrinking ------------------------------------------------------------------------------


def _smaller(value: Any) -> Iterator[Any]:
    """Simpler variants of ``value``, the biggest cuts first."""
    if isinstance(value, (bytes, str)):
        n = len(value)
        size = n // 2
        while size >= 1:
            for start in range(0, n, size):
                yield value[:start] + value[start + size :]
            if size == 1 or n > 2000 and size < n // 64:
                break
            size //= 2
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            for smaller in _smaller(item):
                yield (*value[:i], smaller, *value[i + 1 :])
    elif isinstance(value, list):
        for i in range(len(value)):
            yield value[:i] + value[i + 1 :]
        for i, item in enumerate(value):
            for smaller in _smaller(item):
                yield [*value[:i], smaller, *value[i + 1 :]]
    elif isinstance(value, dict):
        for key in value:
            yield {k: v for k, v in value.items() if k != key}
        for key, item in value.items():
            for smaller in _smaller(item):
                yield {**value, key: smaller}
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int) and value not in (0, 1):
        yield 0
        yield value // 2
    elif isinstance(value, float) and value != 0.0:
        yield 0.0


def shrink(value: Any, still_fails: Callable[[Any], bool], attempts: int = 400) -> Any:
    """Greedy reduction: take the first simpler variant that still fails, until none does."""
    best = value
    improved = True
    while improved and attempts > 0:
        improved = False
        for candidate in _smaller(best):
            attempts -= 1
            if still_fails(candidate):
                best, improved = candidate, True
                break
            if attempts <= 0:
                break
    return best


def mutate_encoded(data: bytes, rng: random.Random) -> bytes:
    """Encoded JSON mutated as JSON (a member changed) or as bytes (damage)."""
    if rng.random() < 0.5:
        try:
            value = json.loads(data)
        except (ValueError, RecursionError):
            pass
        else:
            try:
                return json.dumps(mutate_json(value, rng), ensure_ascii=False).encode("utf-8", "surrogatepass")
            except (ValueError, RecursionError):
                pass
    return mutate_bytes(data, rng)
