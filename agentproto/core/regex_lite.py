"""Regular expressions in linear time, sans-IO: output_schema's ``pattern`` keyword.

Python's ``re`` backtracks: ``^(a+)+$`` against ``"a" * 30 + "!"`` takes minutes inside one
C call that nothing can interrupt, and the loop (every session) waits. Here a pattern is
parsed by the standard library's own parser (so the syntax, and what every character class
and anchor means, are Python's), compiled to a Thompson NFA, and run over the string once,
building the DFA states it needs as it goes: the work is at most proportional to
len(pattern) x len(string), and every step is counted against a ``Budget``.

Rules of this file:
- ``Pattern(source)`` raises ``PatternError`` for a pattern that does not parse, that uses
  what a finite automaton cannot do (backreferences, lookaround, conditionals, atomic
  groups, possessive repeats), or whose counted repeats unroll past ``MAX_STATES``.
- Compiling is work too (the parser is Python, and each character test is an ``re``
  compile): ``Pattern(source, budget)`` charges it to ``budget``, in the same steps as a
  search (about a microsecond each): a step per character of the source, per instruction
  and per item compiled, and ``COMPILE_COST`` plus its length per ``re`` it compiles; past
  the budget it raises ``TooCostly``. Its caller owns the budget: a schema's, or a check's.
- ``Pattern.search(text, budget)`` is ``re.search(source, text) is not None``, or raises
  ``TooCostly`` once the budget is spent. It never backtracks.
- Each character test and each anchor is asked of ``re`` itself, compiled for that one
  character or position, so case folding, Unicode classes and ``$`` before a final
  newline behave exactly as ``re``'s do.
"""

from __future__ import annotations

import re
import sys
import warnings
from typing import Any

# The standard library's own regular expression parser (re._parser since 3.11).
if sys.version_info >= (3, 11):
    from re import _constants as sre
    from re import _parser as sre_parse
else:  # pragma: no cover - Python 3.10
    import sre_constants as sre
    import sre_parse

#: The longest pattern taken (the standard parser is Python: parsing costs time too).
MAX_SOURCE = 10_000
#: Instructions a compiled pattern may have (a counted repeat is unrolled).
MAX_STATES = 10_000
#: DFA transitions kept; past this the cache starts again (memory stays bounded).
MAX_CACHE = 20_000
#: Steps charged for each ``re`` a pattern compiles (a character test or an anchor), beyond
#: its source's length: one such compile costs about 10 to 40 microseconds.
COMPILE_COST = 20
#: The budget of a ``Pattern`` built without one: its own limits above bound it.
_UNBOUNDED = 1 << 62

_CHAR, _ASSERT, _SPLIT, _JMP, _MATCH = range(5)
_FLAGS = re.IGNORECASE | re.DOTALL | re.ASCII | re.UNICODE | re.MULTILINE
_CATEGORIES = {
    sre.CATEGORY_DIGIT: r"\d",
    sre.CATEGORY_NOT_DIGIT: r"\D",
    sre.CATEGORY_SPACE: r"\s",
    sre.CATEGORY_NOT_SPACE: r"\S",
    sre.CATEGORY_WORD: r"\w",
    sre.CATEGORY_NOT_WORD: r"\W",
}
_ANCHORS = {
    sre.AT_BEGINNING: "^",
    sre.AT_END: "$",
    sre.AT_BEGINNING_STRING: r"\A",
    sre.AT_END_STRING: r"\Z",
    sre.AT_BOUNDARY: r"\b",
    sre.AT_NON_BOUNDARY: r"\B",
}
_UNSUPPORTED = {
    "GROUPREF": "a backreference",
    "GROUPREF_EXISTS": "a conditional group",
    "ASSERT": "a lookahead or lookbehind",
    "ASSERT_NOT": "a negative lookahead or lookbehind",
    "ATOMIC_GROUP": "an atomic group",
    "POSSESSIVE_REPEAT": "a possessive repeat",
}


class PatternError(ValueError):
    """A pattern that cannot be used: the message says why."""


class TooCostly(Exception):
    """The work allowed for a check ran out."""


class Budget:
    """Steps left for one check (shared by everything the check does)."""

    __slots__ = ("left",)

    def __init__(self, steps: int) -> None:
        self.left = steps

    def spend(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise TooCostly


def _char(code: int) -> str:
    return re.escape(chr(code))


def _flags(flags: int) -> int:
    flags &= _FLAGS
    return flags & ~re.UNICODE if flags & re.ASCII else flags


class Pattern:
    """One compiled pattern: ``search`` says whether it matches anywhere in a string."""

    def __init__(self, source: str, budget: Budget | None = None) -> None:
        if len(source) > MAX_SOURCE:
            raise PatternError(f"the pattern is too long to check (over {MAX_SOURCE} characters)")
        self._budget = budget if budget is not None else Budget(_UNBOUNDED)
        self._budget.spend(len(source))  # what the parser reads
        try:
            with warnings.catch_warnings():  # "possible nested set" and the like: not the app's log
                warnings.simplefilter("ignore")
                parsed = sre_parse.parse(source, 0)
        except (re.error, RecursionError, OverflowError, ValueError) as exc:
            raise PatternError(f"not a regular expression: {exc}") from None
        self.source = source
        self.kind: list[int] = []
        self.arg: list[int] = []  # _CHAR: test index, _ASSERT: anchor index, _SPLIT/_JMP: target
        self.alt: list[int] = []  # _SPLIT: the second target
        self.tests: list[re.Pattern[str]] = []
        self.anchors: list[re.Pattern[str]] = []
        self._ids: dict[tuple[bool, str, int], int] = {}
        self._work = 0  # items compiled, repeats included: an empty group repeated 10**9 times is work too
        try:
            self._emit(parsed, parsed.state.flags)
        except RecursionError:
            raise PatternError("the pattern is nested too deeply") from None
        self._add(_MATCH)
        del self._budget  # compiled: nothing more is charged to it
        self._cache: dict[tuple[frozenset[int], str, tuple[bool, ...]], tuple[frozenset[int], bool]] = {}
        self._test_cache: list[dict[str, bool]] = [{} for _ in self.tests]

    # -- compiling ------------------------------------------------------------------------

    def _add(self, kind: int, arg: int = 0, alt: int = 0) -> int:
        if len(self.kind) >= MAX_STATES:
            raise PatternError(
                f"the pattern is too large to check (over {MAX_STATES} states once its repeats are unrolled)"
            )
        self._budget.spend(1)
        self.kind.append(kind)
        self.arg.append(arg)
        self.alt.append(alt)
        return len(self.kind) - 1

    def _intern(self, table: list[re.Pattern[str]], source: str, flags: int) -> int:
        """One compiled ``re`` per distinct character test (or anchor) and flags."""
        key = (table is self.anchors, source, flags)
        index = self._ids.get(key)
        if index is None:
            self._budget.spend(COMPILE_COST + len(source))
            table.append(re.compile(source, flags))
            index = self._ids[key] = len(table) - 1
        return index

    def _test(self, source: str, flags: int) -> None:
        self._add(_CHAR, self._intern(self.tests, source, _flags(flags)))

    def _emit(self, items: Any, flags: int) -> None:
        self._work += 1 + len(items)
        self._budget.spend(1 + len(items))
        if self._work > 10 * MAX_STATES:
            raise PatternError("the pattern is too large to check (its repeats unroll too far)")
        for op, av in items:
            name = str(op)
            if op is sre.LITERAL:
                self._test(_char(av), flags)
            elif op is sre.NOT_LITERAL:
                self._test(f"[^{_char(av)}]", flags)
            elif op is sre.ANY:
                self._test(".", flags)
            elif op is sre.IN:
                self._test(self._charset(av), flags)
            elif op is sre.AT:
                self._add(_ASSERT, self._intern(self.anchors, _ANCHORS[av], _flags(flags)))
            elif op is sre.SUBPATTERN:
                _group, add, remove, sub = av
                self._emit(sub, (flags | add) & ~remove)
            elif op is sre.BRANCH:
                self._branch(av[1], flags)
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
                low, high, sub = av
                self._repeat(low, high, sub, flags)
            elif name in _UNSUPPORTED:
                raise PatternError(
                    f"{_UNSUPPORTED[name]} cannot be checked in linear time: not supported in output_schema patterns"
                )
            else:
                raise PatternError(f"{name} is not supported in output_schema patterns")

    def _charset(self, items: Any) -> str:
        parts: list[str] = []
        for op, av in items:
            if op is sre.NEGATE:
                parts.insert(0, "^")
            elif op is sre.LITERAL:
                parts.append(_char(av))
            elif op is sre.RANGE:
                parts.append(f"{_char(av[0])}-{_char(av[1])}")
            elif op is sre.CATEGORY and av in _CATEGORIES:
                parts.append(_CATEGORIES[av])
            else:
                raise PatternError(f"{op} in a character class is not supported in output_schema patterns")
        return "[" + "".join(parts) + "]"

    def _branch(self, alternatives: Any, flags: int) -> None:
        jumps = []
        for i, alternative in enumerate(alternatives):
            if i < len(alternatives) - 1:
                split = self._add(_SPLIT)
                self.arg[split] = split + 1
                self._emit(alternative, flags)
                jumps.append(self._add(_JMP))
                self.alt[split] = len(self.kind)
            else:
                self._emit(alternative, flags)
        for jump in jumps:
            self.arg[jump] = len(self.kind)

    def _repeat(self, low: int, high: int, sub: Any, flags: int) -> None:
        # Greedy or lazy is the same question for "does it match anywhere".
        for _ in range(low):
            self._emit(sub, flags)
        if high is sre.MAXREPEAT or high == sre.MAXREPEAT:
            loop = self._add(_SPLIT)
            self.arg[loop] = loop + 1
            self._emit(sub, flags)
            self._add(_JMP, loop)
            self.alt[loop] = len(self.kind)
            return
        splits = []
        for _ in range(high - low):
            split = self._add(_SPLIT)
            self.arg[split] = split + 1
            splits.append(split)
            self._emit(sub, flags)
        for split in splits:
            self.alt[split] = len(self.kind)

    # -- running --------------------------------------------------------------------------

    def _context(self, text: str, pos: int) -> tuple[bool, ...]:
        return tuple(anchor.match(text, pos) is not None for anchor in self.anchors)

    def _closure(self, starts: list[int], context: tuple[bool, ...], budget: Budget) -> tuple[frozenset[int], bool]:
        """The character tests reachable from ``starts`` without consuming a character."""
        kind, arg, alt = self.kind, self.arg, self.alt
        seen: set[int] = set()
        chars: list[int] = []
        matched = False
        stack = list(reversed(starts))
        while stack:
            pc = stack.pop()
            if pc in seen:
                continue
            seen.add(pc)
            k = kind[pc]
            if k == _CHAR:
                chars.append(pc)
            elif k == _SPLIT:
                stack.append(alt[pc])
                stack.append(arg[pc])
            elif k == _JMP:
                stack.append(arg[pc])
            elif k == _ASSERT:
                if context[arg[pc]]:
                    stack.append(pc + 1)
            else:
                matched = True
        budget.spend(len(seen) + 1)
        return frozenset(chars), matched

    def _accepts(self, pc: int, ch: str) -> bool:
        cache = self._test_cache[self.arg[pc]]
        result = cache.get(ch)
        if result is None:
            result = cache[ch] = self.tests[self.arg[pc]].fullmatch(ch) is not None
        return result

    def search(self, text: str, budget: Budget) -> bool:
        """Whether the pattern matches somewhere in ``text`` (as ``re.search``)."""
        cache = self._cache
        anchored = bool(self.anchors)
        context = self._context(text, 0) if anchored else ()
        state, matched = self._closure([0], context, budget)
        for pos, ch in enumerate(text):
            if matched:
                return True
            budget.spend(1)
            if anchored:
                context = self._context(text, pos + 1)
                budget.spend(len(self.anchors))
            key = (state, ch, context)
            hit = cache.get(key)
            if hit is None:
                budget.spend(len(state))
                nexts = [pc + 1 for pc in state if self._accepts(pc, ch)]
                nexts.append(0)  # a match may also start at the next position
                hit = self._closure(nexts, context, budget)
                if len(cache) >= MAX_CACHE:
                    cache.clear()
                cache[key] = hit
            state, matched = hit
        return matched
