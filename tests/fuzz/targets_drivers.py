"""Fuzz target: each driver's agent-line mapping, fed mutations of the captured-wire
corpus (fixtures/wire/<agent>/<case>.jsonl) through the real driver, runtime and engine
over the scripted transport (tests/fakes/scripted.py).

A case's conversation is replayed as captured, except that some of the agent's lines are
changed: a member replaced by another JSON value (a wrong type, null, a deep or huge
value, a lone surrogate) or dropped, the line's bytes damaged, a line of another case of
the same agent put in, or the agent exiting early. The contract: no exception escapes the
line guard into the loop (an exception the guard catches is a Diagnostic, which is its
promise); every command gets exactly one reply; what the app sees is valid protocol 1
and keeps the engine's promises (sequences from 1, every turn TurnStarted ... TurnEnded,
closed exactly once, nothing after it), and nothing of the session is left once it is closed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tempfile
from functools import lru_cache
from typing import Any

from fuzz.gen import Deep, expand, json_values
from fuzz.harness import target
from fuzz.targets_mock import check_invariants
from hypothesis import strategies as st

from sidecar import check_line
from tests.commands.test_wire_corpus import as_line
from wire_corpus import CORPUS, Case, Names, cases, load, seen
from scripted import NEVER_RUN, Conversation

LOOP_GUARD = "internal error in an event-loop callback"
LINE_GUARD = "a line raised in the driver"
#: AGENTPROTO_FUZZ_STRICT=1: a line the guard had to catch is a finding too (a mapping
#: that did not type-check what it read), for a long run to list them.
STRICT = bool(os.environ.get("AGENTPROTO_FUZZ_STRICT"))
PATHS = [str(path.relative_to(CORPUS)) for path in cases()]


class GuardedLine(AssertionError):
    """(strict) the line guard caught an exception: its traceback names the mapping."""

    def __init__(self, log: str) -> None:
        super().__init__(log)
        frames = re.findall(r'File "[^"]*/(agentproto/[^"]+)", line (\d+), in (\w+)', log)
        error = next((line for line in log.splitlines() if re.match(r"\w+(Error|Exception)\b", line)), "?")
        file, line, function = frames[-1] if frames else ("?", "?", "?")
        #: The harness's crash signature: where the mapping raised, not where this was.
        self.signature = f"guarded {error.split(':')[0]} at {file}:{line} {function}()"


@lru_cache(maxsize=None)
def _case(name: str) -> Case:
    return load(CORPUS / name)


@lru_cache(maxsize=None)
def _pool(agent: str) -> tuple[str, ...]:
    """Every line the agent ever wrote in the corpus (lines to put in elsewhere)."""
    lines: list[str] = []
    for name in PATHS:
        if name.startswith(agent + "/"):
            for entry in _case(name).conversation:
                body = entry.get("from_agent")
                if body is not None:
                    lines += body if isinstance(body, list) else [body]
    return tuple(lines)


REPLACEMENTS = (
    json_values
    | st.sampled_from([None, 0, -1, 5, 2**64, 1.5, "", "\ud800", "x" * 70_000, [], {}, [1], {"a": 1}, True])
    | st.sampled_from([400, 990]).map(Deep)
)
mutation = st.one_of(
    st.tuples(st.just("replace"), st.integers(0, 99), st.integers(0, 9), st.lists(st.integers(0, 20), min_size=1, max_size=5), REPLACEMENTS),
    st.tuples(st.just("drop"), st.integers(0, 99), st.integers(0, 9), st.lists(st.integers(0, 20), min_size=1, max_size=5), st.none()),
    st.tuples(st.just("damage"), st.integers(0, 99), st.integers(0, 9), st.lists(st.integers(0, 10_000), min_size=1, max_size=3), st.binary(max_size=3)),
    st.tuples(st.just("insert"), st.integers(0, 99), st.integers(0, 9), st.lists(st.integers(0, 999), min_size=1, max_size=1), st.none()),
    st.tuples(st.just("exit"), st.integers(0, 99), st.just(0), st.just([]), st.sampled_from(["0", "1", "SIGKILL", None])),
)
corpus_mutations = st.tuples(st.sampled_from(PATHS), st.lists(mutation, min_size=1, max_size=4))


def _walk(value: Any, path: list[int]) -> tuple[Any, Any] | None:
    """The container and key the path leads to (each step picks a member by index)."""
    parent, key = None, None
    node = value
    for step in path:
        if isinstance(node, dict) and node:
            keys = list(node)
            parent, key = node, keys[step % len(keys)]
        elif isinstance(node, list) and node:
            parent, key = node, step % len(node)
        else:
            break
        node = parent[key]
    return None if parent is None else (parent, key)


def _mutate_line(line: str, kind: str, path: list[int], value: Any, agent: str) -> list[str]:
    if kind == "insert":
        pool = _pool(agent)
        return [line, pool[path[0] % len(pool)]]
    if kind == "damage":
        data = bytearray(line.encode("utf-8", "surrogatepass"))
        for at in path:
            if data:
                data[at % len(data) : at % len(data) + 1] = value
        return [data.decode("utf-8", "surrogateescape")]
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # the corpus's malformed lines include a deeply nested one
        return [line]
    found = _walk(obj, path)
    if found is None:
        return [line]
    parent, key = found
    if kind == "drop":
        del parent[key]
    else:
        parent[key] = expand(value)
    try:
        return [json.dumps(obj, ensure_ascii=False)]
    except (RecursionError, ValueError):
        return [line]


def _conversation(name: str, mutations: list[tuple[Any, ...]]) -> list[tuple[str, Any]]:
    """The case's app commands and agent reads, mutated; ("exit", status) where the agent dies."""
    agent = name.split("/", 1)[0]
    steps: list[tuple[str, Any]] = []
    for entry in _case(name).conversation:
        (kind, body), = entry.items()
        if kind == "from_agent":
            steps.append(("read", list(body) if isinstance(body, list) else [body]))
        elif kind in ("app", "exit"):
            steps.append((kind, body))
    reads = [i for i, (kind, _) in enumerate(steps) if kind == "read"]
    for kind, at, line_at, path, value in mutations:
        if not reads:
            break
        index = reads[at % len(reads)]
        if kind == "exit":
            steps.insert(index + 1, ("exit", {"status": value, "stderr": "fuzz: gone"}))
            reads = [i if i <= index else i + 1 for i in reads]
            continue
        lines = steps[index][1]
        pos = line_at % len(lines)
        lines[pos : pos + 1] = _mutate_line(lines[pos], kind, path, value, agent)
    return steps


def _text(line: str) -> bytes:
    return line.encode("utf-8", "surrogateescape" if any("\udc80" <= c <= "\udcff" for c in line) else "surrogatepass")


@target("driver_lines", corpus_mutations, examples=80, weight=2.0)
def driver_lines(case: tuple[str, list[tuple[Any, ...]]]) -> None:
    """Driver line mappings: mutated captured lines never break the guard or the engine."""
    name, mutations = case
    steps = _conversation(name, mutations)
    stderr = io.StringIO()
    with tempfile.TemporaryDirectory() as directory, contextlib.redirect_stderr(stderr):
        names = Names()
        names.set("$DIR", directory)
        names.set("$AGENT", NEVER_RUN)
        conv = Conversation()
        sent = 0
        try:
            for kind, body in steps:
                if kind == "app":
                    args = json.loads(names.fill(json.dumps(body)))
                    conv.command(args.pop("cmd"), **args)
                    sent += 1
                elif not conv.transports or conv.transport.exited:
                    continue
                elif kind == "read":
                    conv.feed(*(_text(names.fill(line)) for line in body))
                else:
                    conv.transport.exit(body.get("status"), body.get("stderr", ""))
                    conv.settle()
            if conv.session_id is not None and not any(o[0] == "closed" for o in conv.out):
                conv.command("close")
                sent += 1
            conv.runtime.close_all()
            timer = conv.loop.call_later(10, conv.loop.stop)
            conv.loop.run(until=lambda: len(conv.replies()) >= sent and (conv.session_id is None or ("closed",) in conv.out))
            timer.cancel()
            conv.settle()
        finally:
            conv.runtime.close_all()
            conv.settle()
            conv.loop.close()
    log = stderr.getvalue()
    assert LOOP_GUARD not in log, "an exception escaped the line guard:\n" + log[-3000:]
    if STRICT and LINE_GUARD in log:
        raise GuardedLine(log[log.index(LINE_GUARD) :][:3000])
    assert len(conv.replies()) == sent, f"{sent} commands, {len(conv.replies())} replies"
    for line in seen(conv.out):
        # agentproto's schema: a session with the app's tools has additive members
        # (SessionInfo.tools_url) that anyagent's reference schema does not know.
        check_line(as_line(names.hide(line)), reference=False)
    if conv.session_id is not None:
        check_invariants(conv.out)
        assert not conv.runtime.sessions, "a session outlived its close"
