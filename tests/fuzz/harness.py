"""The fuzz harness: every parser's contract is a target, run two ways.

A target is a function taking one generated input and asserting the parser's contract (not
just "no crash": what it may raise, what it must return, what must agree). ``@target``
registers it with the hypothesis strategy that makes its inputs.

- In the suite (tests/fuzz/test_fuzz.py) each target is one hypothesis test with a small,
  fixed budget, derandomized and with no example database, so a run is deterministic.
- Long (scripts/fuzz.py --minutes N): each target runs in rounds of random examples until
  its share of the time is spent. A crash found is shrunk to its minimal input, recorded
  by its signature (exception type and the package line it came from), and from then on
  treated as known, so the rest of the run looks for other crashes instead of refinding it.

Every input runs under a watchdog: one that takes longer than the target's ``timeout``
raises ``Hang`` inside it (a Python-level spin; a C call that never returns, such as a
catastrophic ``re`` match, cannot be interrupted and stalls the run instead, which the
operator sees).
"""

from __future__ import annotations

import random
import re
import signal
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from fuzz.mutate import shrink
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]


class Hang(Exception):
    """One input ran past its target's timeout."""


@dataclass
class Target:
    name: str
    strategy: st.SearchStrategy[Any]
    check: Callable[[Any], None]
    #: Examples in the suite's run (the whole fuzz suite stays well under a minute).
    examples: int
    #: Seconds one input may run before it is a hang (generous: the machine is shared).
    timeout: float
    #: Its share of a long run, against the other targets'.
    weight: float
    #: Inputs that once broke it: run first, in the suite and in every long round.
    regressions: list[Any] = field(default_factory=list)
    doc: str = ""
    #: Long runs: a cheap mutant of an input (mutate.py), tried after it.
    mutate: Callable[[Any, random.Random], Any] | None = None


TARGETS: dict[str, Target] = {}


def target(
    name: str,
    strategy: st.SearchStrategy[Any],
    *,
    examples: int = 150,
    timeout: float = 20.0,
    weight: float = 1.0,
    mutate: Callable[[Any, random.Random], Any] | None = None,
) -> Callable[[Callable[[Any], None]], Callable[[Any], None]]:
    def register(check: Callable[[Any], None]) -> Callable[[Any], None]:
        assert name not in TARGETS, f"two fuzz targets named {name}"
        doc = (check.__doc__ or "").strip()
        TARGETS[name] = Target(name, strategy, check, examples, timeout, weight, doc=doc, mutate=mutate)
        return check

    return register


def regression(name: str, *inputs: Any) -> None:
    """Inputs that once broke ``name`` (small, committed): always tried first."""
    TARGETS[name].regressions.extend(inputs)


def load() -> dict[str, Target]:
    """Every target (importing the modules registers them)."""
    from fuzz import (  # noqa: F401
        targets_agy,
        targets_drivers,
        targets_http,
        targets_mock,
        targets_ops,
        targets_rpc,
        targets_schema,
        targets_wire,
    )

    return TARGETS


# -- running one input ------------------------------------------------------------------


class _Watchdog:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __enter__(self) -> None:
        def expired(signum: int, frame: Any) -> None:
            raise Hang(f"no answer after {self.seconds:g} s")

        self.previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc: Any) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)


def signature(exc: BaseException) -> str:
    """What makes two crashes the same: the exception type and where in the package it was
    raised (the target's own line for a broken contract). A hang or a recursion is named
    by its function only: the line it happened to be on varies."""
    if isinstance(getattr(exc, "signature", None), str):
        return str(exc.signature)  # type: ignore[attr-defined]
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if "/agentproto/" in f.filename]
    where = inside[-1] if inside else (frames[-1] if frames else None)
    if where is None:
        return type(exc).__name__
    path = Path(where.filename)
    shown = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    if isinstance(exc, (Hang, RecursionError)):
        return f"{type(exc).__name__} in {shown} {where.name}()"
    return f"{type(exc).__name__} at {shown}:{where.lineno} {where.name}()"


_RUN = re.compile(r"(.)\1{31,}", re.S)


def shown(value: Any, limit: int = 4000) -> str:
    """repr(value), long runs of one character written as a count (b'[' * 3000 reads
    ``[<x3000>``), cut at ``limit``."""
    text = _RUN.sub(lambda m: f"{m.group(1)}<x{len(m.group(0))}>", repr(value))
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


# -- the suite --------------------------------------------------------------------------


def suite_test(t: Target) -> Callable[[], None]:
    """The target as one deterministic hypothesis test."""

    def run(value: Any) -> None:
        with _Watchdog(t.timeout):
            t.check(value)

    test = settings(
        max_examples=t.examples,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
    )(given(t.strategy)(run))
    for value in reversed(t.regressions):
        test = example(value)(test)
    return test


# -- a long run -------------------------------------------------------------------------


@dataclass
class Crash:
    signature: str
    input: Any
    error: str  # the exception and the end of its traceback


@dataclass
class Stats:
    target: str
    tried: int = 0  # every input run, mutants included
    mutants: int = 0
    known_hits: int = 0
    rounds: int = 0
    seconds: float = 0.0
    crashes: dict[str, Crash] = field(default_factory=dict)


def _failure(t: Target, value: Any) -> BaseException | None:
    try:
        with _Watchdog(t.timeout):
            t.check(value)
    except Exception as exc:
        return exc
    return None


def _tail(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)[-6:])


def run_long(
    t: Target,
    seconds: float,
    round_size: int = 2000,
    progress: Callable[[Stats], None] | None = None,
    mutants: int = 20,
) -> Stats:
    """Fuzz ``t`` for ``seconds``: rounds of random examples (each followed by ``mutants``
    cheap mutants of it, when the target has a mutator); each new crash is shrunk (by
    hypothesis, or mutate.shrink for a mutant), kept with its minimal input, and skipped
    (counted) afterwards."""
    stats = Stats(t.name)
    start = time.monotonic()
    deadline = start + seconds
    last: dict[str, Crash] = {}
    rng = random.Random()

    def try_mutants(value: Any) -> None:
        assert t.mutate is not None
        for _ in range(mutants):
            mutant = t.mutate(value, rng)
            stats.tried += 1
            stats.mutants += 1
            exc = _failure(t, mutant)
            if exc is None:
                continue
            sig = signature(exc)
            if sig in stats.crashes or sig in last:
                stats.known_hits += 1
                continue

            def still_fails(candidate: Any, sig: str = sig) -> bool:
                found = _failure(t, candidate)
                return found is not None and signature(found) == sig

            minimal = shrink(mutant, still_fails)
            last[sig] = Crash(sig, minimal, _tail(_failure(t, minimal) or exc))

    def run(value: Any) -> None:
        if time.monotonic() > deadline + 60:  # a shrink that would never end
            return
        stats.tried += 1
        try:
            with _Watchdog(t.timeout):
                t.check(value)
        except Exception as exc:
            sig = signature(exc)
            if sig in stats.crashes:
                stats.known_hits += 1
                return  # known: look for something else
            last[sig] = Crash(sig, value, _tail(exc))  # the last one seen is the shrunk one
            raise
        if t.mutate is not None and time.monotonic() < deadline:
            try_mutants(value)

    for value in t.regressions:
        try:
            run(value)
        except Exception:
            pass
    stats.crashes.update(last)
    rate = 0.0  # inputs per second, from the rounds so far
    while time.monotonic() < deadline:
        left = deadline - time.monotonic()
        size = min(round_size, 50) if not rate else max(10, min(round_size, int(rate * left)))
        before, began = stats.tried - stats.mutants, time.monotonic()
        test = settings(
            max_examples=size,
            derandomize=False,
            database=None,
            deadline=None,
            print_blob=False,
            report_multiple_bugs=True,
            phases=[Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck),
        )(given(t.strategy)(run))
        try:
            test()
        except KeyboardInterrupt:
            raise
        except BaseException:  # one crash, several (an exception group) or a flaky one
            pass  # the crashes are in ``last``
        stats.crashes.update(last)
        stats.rounds += 1
        rate = (stats.tried - stats.mutants - before) / max(time.monotonic() - began, 1e-3)  # hypothesis's inputs
        stats.seconds = time.monotonic() - start
        if progress is not None:
            progress(stats)
    stats.seconds = time.monotonic() - start
    return stats


def iter_report(all_stats: list[Stats]) -> Iterator[str]:
    total = sum(s.tried for s in all_stats)
    yield f"{'target':<22} {'inputs':>10} {'of them mutants':>16} {'seconds':>8} {'crashes':>8}"
    for s in all_stats:
        yield f"{s.target:<22} {s.tried:>10} {s.mutants:>16} {s.seconds:>8.0f} {len(s.crashes):>8}"
    yield f"{'total':<22} {total:>10} {sum(s.mutants for s in all_stats):>16}"
    for s in all_stats:
        for crash in s.crashes.values():
            yield ""
            yield f"[{s.target}] {crash.signature}"
            yield f"  minimal input: {shown(crash.input)}"
            yield "  " + crash.error.rstrip().replace("\n", "\n  ")
