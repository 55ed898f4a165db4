"""Fuzz targets: mock scripts (drivers/mock.load_script), and loaded scripts played by the
mock through the real runtime and engine.

The contract of the loader: a script text loads to a complete script or raises
``ScriptError`` naming what is wrong, and nothing else. Of the player and the engine: a
script that loads plays without an internal error, and what the app sees keeps the
docs/protocol-guide.md's promises: sequences from 1 without a gap, every turn ``TurnStarted`` ...
``TurnEnded`` with nothing of another turn in between, ``TurnEnded`` followed by
``StatusChanged "Idle"`` or the next ``TurnStarted`` (or the session's end), one reply
per command, and ``closed`` exactly once, with nothing of the session after it.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

from fuzz.gen import damaged, dumps, json_values, nasty_json, splice_nasty
from fuzz.harness import regression, target
from fuzz.mutate import mutate_encoded
from hypothesis import strategies as st

from agentproto.drivers.mock import SCRIPT_FIELDS, ScriptError, load_script
from agentproto.core.errors import AgentError
from agentproto.loopio.loop import Loop
from agentproto.engine.runtime import Engine, Scope
from agentproto.core.wire import event_kind_name

ids = st.sampled_from(["m1", "m2", "t1", "q1"])
#: Event kinds a script may emit, well formed (the engine reads their ids and statuses).
KINDS = st.one_of(
    st.builds(lambda m, t: {"TextDelta": {"message_id": m, "text": t}}, ids, st.text(max_size=4)),
    st.builds(lambda m, t: {"ReasoningDelta": {"message_id": m, "text": t}}, ids, st.text(max_size=4)),
    st.builds(lambda m: {"MessageEnded": {"message_id": m}}, ids),
    st.builds(
        lambda i, s: {"ToolUpdated": {"id": i, "kind": "Execute", "title": "x", "status": s, "input": "None",
                                      "output": None, "diffs": [], "locations": [], "raw": None}},
        ids,
        st.sampled_from(["Pending", "Running", "Completed", "Failed"]),
    ),
    st.builds(
        lambda i: {"RequestOpened": {"Permission": {"id": i, "tool": {"id": "t1", "kind": "Execute", "title": "x"},
                                                     "options": ["AllowOnce", "DenyOnce"]}}},
        ids,
    ),
    st.builds(
        lambda i: {"RequestOpened": {"Question": {"id": i, "questions": [
            {"id": "a", "text": "?", "header": None, "choices": [], "multi_select": False, "allows_free_text": True}]}}},
        ids,
    ),
    st.sampled_from(["ContextCompacted", {"Diagnostic": {"level": "Info", "message": "d"}}]),
    # Engine-owned kinds: a driver that emits one has it dropped.
    st.sampled_from(["TurnStarted", {"TurnEnded": {"stop": "Cancelled", "usage": None}}, {"StatusChanged": "Idle"}]),
)
#: Any kind at all, by a known name or not: what the loader lets through must play.
ANY_KINDS = st.builds(
    lambda name, body: {name: body},
    st.sampled_from(["TextDelta", "ToolUpdated", "RequestOpened", "MessageEnded", "PlanUpdated", "Unknown"]),
    json_values,
)
STOPS = st.sampled_from(["Cancelled", "Refused", {"Completed": {"source": "Protocol"}}, {"Failed": {"message": "f"}}])


def steps(depth: int = 2) -> st.SearchStrategy[list[Any]]:
    step = st.one_of(
        KINDS.map(lambda k: {"Emit": k}),
        ANY_KINDS.map(lambda k: {"Emit": k}),
        st.sampled_from(["AwaitAnswer", "AwaitAnswer", "Die"]),
        STOPS.map(lambda s: {"End": s}),
        st.sampled_from([{"Sleep": 0}, {"Sleep": 1}]),
        st.just({"Usage": {"input_tokens": 1, "cached_input_tokens": 0, "output_tokens": 2}}),
        st.builds(lambda t, k: {"Nested": [t, k]}, ids, KINDS),
    )
    if depth:
        step = step | st.builds(lambda n, s: {"Repeat": {"times": n, "steps": s}}, st.integers(0, 3), steps(depth - 1))
    return st.lists(step, max_size=6)


FLAGS = ["steer", "steer_rejects", "compact", "permissions", "deterministic", "deterministic_agent"]


@st.composite
def scripts(draw: Any) -> dict[str, Any]:
    script: dict[str, Any] = {"turns": draw(st.lists(steps(), max_size=3))}
    for flag in draw(st.lists(st.sampled_from(FLAGS), max_size=3, unique=True)):
        script[flag] = draw(st.booleans())
    if draw(st.integers(0, 5)) == 0:
        script["stale_before_ack"] = draw(KINDS)
    return script


@st.composite
def script_texts(draw: Any) -> bytes:
    how = draw(st.sampled_from(["valid", "damaged", "nasty", "retyped", "json"]))
    if how == "json":
        return dumps(draw(json_values))
    script = draw(scripts())
    if how == "valid":
        return dumps(script)
    if how == "damaged":
        return draw(damaged(dumps(script)))
    if how == "nasty":
        return splice_nasty(script, draw(st.sampled_from([*SCRIPT_FIELDS, "x"])), draw(nasty_json))
    for key in draw(st.lists(st.sampled_from(list(SCRIPT_FIELDS)), min_size=1, max_size=2)):
        script[key] = draw(json_values)  # retyped
    return dumps(script)


@target("mock_scripts", script_texts(), examples=200, mutate=mutate_encoded)
def mock_scripts(raw: bytes) -> None:
    """Mock scripts: a complete script, or ScriptError and nothing else."""
    try:
        text = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return  # the CLI reads scripts as UTF-8 text: not a script's business
    try:
        script = load_script(text)
    except ScriptError as error:
        assert type(error) is ScriptError and str(error)
        return
    assert set(script) == set(SCRIPT_FIELDS), "a loaded script misses a field"
    assert isinstance(script["turns"], list)


regression("mock_scripts", b'{"turns": ' + b"1" * 5000 + b"}", b"[" * 3000)


# -- playing a script ------------------------------------------------------------------------


class App:
    """The app's side of one in-process session: the EventSink, and what it saw in order."""

    def __init__(self) -> None:
        self.out: list[tuple[Any, ...]] = []
        self.requests: list[str] = []

    def event(self, session: Any, event: dict[str, Any]) -> None:
        session.delivered(1)
        self.out.append(("event", event))
        kind = event["kind"]
        if event_kind_name(kind) == "RequestOpened":
            body = kind["RequestOpened"]
            self.requests.append(next(iter(body.values()))["id"])

    def session_error(self, session: Any, error: AgentError) -> None:
        self.out.append(("error", error.kind))

    def session_closed(self, session: Any) -> None:
        self.out.append(("closed",))


def check_invariants(out: list[tuple[Any, ...]]) -> None:
    events = [o[1] for o in out if o[0] == "event"]
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1)), "sequences not 1, 2, 3..."
    kinds = [o[0] for o in out]
    assert kinds.count("closed") == 1, "closed not exactly once"
    assert not {"event", "error"} & set(kinds[kinds.index("closed"):]), "an event or session error after closed"
    running: str | None = None
    ended: set[str] = set()
    after_end = False
    for event in events:
        name = event_kind_name(event["kind"])
        turn = (event.get("turn_info") or {}).get("id")
        if after_end:
            assert name == "TurnStarted" or event["kind"] == {"StatusChanged": "Idle"}, f"{name} right after TurnEnded"
            after_end = False
        if name == "TurnStarted":
            assert running is None, "a turn started inside another"
            assert turn not in ended, "a turn id started twice"
            running = turn
        elif name == "TurnEnded":
            assert running is not None and turn == running, "TurnEnded of a turn not running"
            ended.add(turn)
            running, after_end = None, True
        elif turn is not None:
            assert turn == running, f"{name} of turn {turn} outside it"
    assert running is None, "a turn never ended before closed"


@target("mock_play", st.tuples(scripts(), st.lists(st.sampled_from(["prompt", "answer", "cancel", "compact"]), max_size=6)), examples=120)
def mock_play(case: tuple[dict[str, Any], list[str]]) -> None:
    """A script that loads plays without an internal error, keeping the engine's promises."""
    script_doc, commands = case
    try:
        script = load_script(json.dumps(script_doc))
    except ScriptError:
        return  # refused, with its reason (the mock_scripts target holds the loader to that)
    loop = Loop()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            _play(loop, script, commands)
    finally:
        loop.close()
    assert "Traceback" not in stderr.getvalue(), stderr.getvalue()[-3000:]


def _play(loop: Loop, script: dict[str, Any], commands: list[str]) -> None:
    runtime = Engine(loop, mock_script=script)
    scope = Scope(runtime)
    app = App()
    replies: list[str] = []
    session: list[str] = []

    def settle(seconds: float = 0.002) -> None:
        # What is ready, then a moment for the scripts' 1 ms sleeps (the promises checked
        # are about order, so how far a turn got by then does not matter).
        loop.call_soon(loop.stop)
        loop.run()
        if seconds:
            loop.call_later(seconds, loop.stop)
            loop.run()

    def command(name: str, **args: Any) -> None:
        def done(value: Any, error: Any) -> None:
            replies.append(name)
            if name == "open" and error is None:
                session.append(value["id"])

        sent.append(name)
        runtime.execute(name, args, app, scope, done)
        settle()

    sent: list[str] = []
    command("open", agent="mock", dir="/")
    if not session:
        return
    sid = session[0]
    for name in [*commands, "prompt"]:
        if ("closed",) in app.out:
            break
        if name == "prompt":
            command("prompt", session=sid, text="go")
        elif name == "answer":
            request = app.requests[-1] if app.requests else "q1"
            command("answer", session=sid, request=request, answer={"Permission": "AllowOnce"})
            command("answer", session=sid, request=request, answer={"Question": [{"Text": ""}]})
        else:
            command(name, session=sid)
    if ("closed",) not in app.out:
        command("close", session=sid)
    timer = loop.call_later(10, loop.stop)
    loop.run(until=lambda: ("closed",) in app.out)
    timer.cancel()
    settle(0)
    assert sorted(replies) == sorted(sent), f"commands without exactly one reply: sent {sent}, replied {replies}"
    check_invariants(app.out)
    assert not runtime.sessions, "a session outlived its close"

