"""The ops framing: ``{"op": NAME, ...}`` requests, answered by ``kind`` lines ending in ``done``.

Shared by the ``agent`` loop, ``--single-shot``, HTTP (one POST or a batch), JSON-RPC and
MCP. Every op runs through ``Engine.execute``, the one dispatcher; this file only frames.

Rules of this file:
- A request's fields are the protocol 1 command's fields (``op`` in place of ``cmd``, no
  ``id``); they are checked with ``wire.COMMANDS``' own checks, so the two framings can
  never disagree. Unknown keys are ignored.
- Every request ends with exactly one ``done``: 0 success, 1 a command that failed
  (``result`` with ``ok: false`` and the ErrorBody), 2 a protocol error (``error``).
- A ``prompt`` (or ``answer``) streams its turn through ``TurnEnded``, or the
  ``RequestOpened`` it waits on, and the ``StatusChanged`` that follows either (Idle,
  NeedsInput), then its ``result`` and ``done``.
- Session-shaped ops take ``session`` or use the context's default session, set by the
  last successful ``open``. A session's events wait in its mailbox (ops_hub.py) until a
  request on that session streams them, so a client that asks nothing loses nothing and
  never blocks the agent (up to ``MAILBOX_FREE`` events; past that the engine's flow
  control pauses the agent).
- With an ``idle_timeout`` (HTTP's ``--session-idle-timeout``; 0: never), a session the
  hub (ops_hub.py) opened is closed, as a ``close`` op would close it, once it has been
  idle that long: no turn running or queued (an agent rides out a rate limit inside its
  turn), no open request (the app's tool calls and hooks included), no request of the hub
  following it (an HTTP request for it, an event stream). Its events, a request starting
  or ending on it, restart the clock.
"""

from __future__ import annotations

from agentproto import CONTRACT, PROTOCOL, __version__
from agentproto.core.errors import ERROR_KINDS, AgentError, Kind
from agentproto.core.explain import canonical, explain
from agentproto.core.typecheck import TYPE_CHECKING, Protocol
from agentproto.core.wire import (
    COMMAND_NAMES,
    COMMANDS,
    FieldError,
    check_fields,
    decode_json_line,
    event_kind_name,
    json_type_name,
)
from agentproto.drivers import catalog
from agentproto.frontends.ops_hub import OpsHub as OpsHub

if TYPE_CHECKING:
    from typing import Any

    from agentproto.engine.session import EngineSession

EXIT_OK, EXIT_FAILED, EXIT_PROTOCOL = 0, 1, 2

#: Every op, in the order ``capabilities`` lists them.
OPERATIONS: tuple[str, ...] = ("capabilities", *COMMAND_NAMES, "explain", "inspect", "halt")
#: Ops that name a session (``session`` may be left out: the default session is used).
SESSION_OPS = frozenset(name for name, (required, _) in COMMANDS.items() if "session" in required)
TRANSPORTS = ("stdio", "agent", "single-shot", "unix", "http", "jsonrpc", "mcp")
#: Where an op's value goes in its result.
RESULT_FIELD = {
    "discover": "discovery",
    "probe": "details",
    "plan_usage": "plan_usage",
    "plan_usage_all": "plan_usage_all",
    "generate": "text",
}


class OpsError(Exception):
    """A protocol error: answered with ``{"kind": "error", "message": ...}`` and done 2."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _own_checks() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    def string(value: Any) -> str | None:
        return None if isinstance(value, str) else "a string"

    def count(value: Any) -> str | None:
        return None if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else "a whole number >= 0"

    def paths(value: Any) -> str | None:
        if isinstance(value, str) or isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return None
        return "a path, or a non-empty list of paths"

    def session_id(value: Any) -> str | None:
        return None if isinstance(value, (str, int)) and not isinstance(value, bool) else "a session id"

    # Types here (a protocol error); the values (a view, a span...) in inspect.check_args.
    inspect_keys: dict[str, Any] = dict.fromkeys(("view", "sock", "since", "by", "format"), string)
    inspect_keys.update(top=count, agent=session_id, db=paths)
    return {
        "capabilities": ({}, {}),
        "explain": ({"code": string}, {}),
        "inspect": ({}, inspect_keys),
        "halt": ({}, {}),
    }


#: name -> (required checks, optional checks): protocol 1's table plus the ops-only ops.
CHECKS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {**COMMANDS, **_own_checks()}
assert tuple(CHECKS) == tuple(COMMANDS) + ("capabilities", "explain", "inspect", "halt")


def decode_request(raw: bytes) -> Any:
    try:
        return decode_json_line(raw)
    except ValueError as exc:
        raise OpsError(f"malformed JSON: {str(exc).removeprefix('not JSON: ')}") from None


def parse_request(obj: Any, default_session: str | None = None) -> tuple[str, dict[str, Any]]:
    """``(op, args)`` of one request object, or ``OpsError``."""
    if not isinstance(obj, dict):
        raise OpsError(f"malformed request: expected a JSON object, got {json_type_name(obj)}")
    op = obj.get("op")
    if op is None:
        raise OpsError("missing required `op`")
    if not isinstance(op, str):
        raise OpsError(f"invalid `op`: must be a string (an op name), got {json_type_name(op)}")
    if op not in CHECKS:
        raise OpsError(f"unknown op: {op} (valid ops: {', '.join(CHECKS)})")
    required, optional = CHECKS[op]
    try:
        # The one validation loop (wire.py's); in this framing a null is "not given" and
        # ``session`` may be the context's default.
        args = check_fields(obj, required, optional, defaults={"session": default_session}, null_is_missing=True)
    except FieldError as error:
        if error.expected is None:
            raise OpsError(f"missing required `{error.key}`") from None
        raise OpsError(f"invalid `{error.key}`: must be {error.expected}, got {error.got}") from None
    return op, args


def capabilities() -> dict[str, Any]:
    return {
        "contract": CONTRACT,
        "protocol": PROTOCOL,
        "agentproto": __version__,
        "operations": list(OPERATIONS),
        "agents": [catalog.MOCK.id, *(spec.id for spec in catalog.CATALOG)],
        "transports": list(TRANSPORTS),
    }


class Out(Protocol):
    """Where one request's lines go. A line passed with a session must be followed by
    ``session.delivered(1)`` once written (or dropped): that is the flow control."""

    def line(self, obj: dict[str, Any], session: EngineSession | None = None) -> None: ...

    def done(self, exit_code: int) -> None: ...


class OpsContext:
    """The default session of one loop, connection, POST or batch, over a hub."""

    def __init__(self, hub: OpsHub) -> None:
        self.hub = hub
        self.runtime = hub.runtime
        self.default: str | None = None
        self.halted = False

    def run_raw(self, raw: bytes, out: Out) -> None:
        try:
            obj = decode_request(raw)
        except OpsError as error:
            protocol_error(out, error.message)
            return
        self.run(obj, out)

    def run(self, obj: Any, out: Out) -> None:
        try:
            op, args = parse_request(obj, self.default)
        except OpsError as error:
            protocol_error(out, error.message)
            return
        self.run_parsed(op, args, out)

    def run_parsed(self, op: str, args: dict[str, Any], out: Out) -> None:
        run = _Run(self, op, args, out)
        try:
            run.start()
        except Exception:  # a bug must cost one request, never the server
            run.fail(AgentError.internal(op))


def protocol_error(out: Out, message: str) -> None:
    out.line({"kind": "error", "message": message})
    out.done(EXIT_PROTOCOL)


class _Run:
    """One request being answered."""

    def __init__(self, ctx: OpsContext, op: str, args: dict[str, Any], out: Out) -> None:
        self.ctx = ctx
        self.hub = ctx.hub
        self.op = op
        self.args = args
        self.out = out
        self.finished = False
        self.follower: _Follower | None = None

    def line(self, obj: dict[str, Any], session: EngineSession | None = None) -> None:
        if self.finished:
            if session is not None:
                session.delivered(1)
            return
        self.out.line(obj, session)

    def result(self, ok: bool, **fields: Any) -> None:
        if self.finished:
            return
        self.out.line({"kind": "result", "op": self.op, "ok": ok, **fields})
        self.finished = True
        if self.follower is not None:
            self.follower.stop()
        self.out.done(EXIT_OK if ok else EXIT_FAILED)

    def fail(self, error: AgentError, **fields: Any) -> None:
        if self.op in ("prompt", "answer") and "stop" not in fields:
            # Clients rely on a prompt's result always carrying a stop (or waiting).
            fields["stop"] = {"Failed": {"message": error.message}}
        self.result(False, **fields, error=error.body())

    # Only generate's throwaway session reaches here (its collector already counted it).
    def generate_event(self, session: EngineSession, event: dict[str, Any]) -> None:
        self.line({"kind": "event", "event": event})

    def start(self) -> None:
        op, args, ctx = self.op, self.args, self.ctx
        if op == "capabilities":
            self.result(True, **capabilities())
        elif op == "explain":
            kind = canonical(args["code"])
            if kind is None:
                known = ", ".join(ERROR_KINDS)
                self.fail(AgentError.detail(Kind.INVALID_REQUEST, f"unknown error code {args['code']}; known: {known}"))
            else:
                self.result(True, code=kind, text=explain(kind))
        elif op == "inspect":
            from agentproto.frontends.control import run_inspect

            run_inspect(ctx.runtime, args, self._inspected)
        elif op == "halt":
            ctx.halted = True
            self.result(True)
        elif op in SESSION_OPS:
            self._session_op()
        else:
            self.ctx.runtime.execute(op, args, self.hub, self.hub.scope, self._done, on_event=self.generate_event)

    def _inspected(self, view: Any, error: AgentError | None) -> None:
        if error is not None:
            self.fail(error)
            return
        from agentproto.frontends.inspect_op import render

        # The seed's inspect: the payload in the result, and streamed as log lines too.
        for text in render(view, self.args.get("format") or "json"):
            self.line({"kind": "log", "stream": "stdout", "text": text})
        self.result(True, **view)

    def _done(self, value: Any, error: AgentError | None) -> None:
        if error is not None:
            self.fail(error)
            return
        if self.op == "open":
            self.ctx.default = value["id"]
            self.hub.opened(value["id"])
            self.result(True, session=value)
        else:
            self.result(True, **{RESULT_FIELD[self.op]: value})

    def _session_op(self) -> None:
        session_id = self.args["session"]
        try:
            session = self.hub.scope.lookup(session_id)
        except AgentError as error:
            self.fail(error, session_id=session_id)
            return
        mode = self.op if self.op in ("prompt", "answer") else "command"
        follower = self.follower = _Follower(self, session, mode)
        if mode == "answer" and session.turn is not None:
            follower.turn = session.turn.id
        self.hub.box(session).follow(follower)
        if not self.finished:
            self.ctx.runtime.execute(self.op, self.args, self.hub, self.hub.scope, follower.command_done)


class _Follower:
    """A request streaming one session's events: until its command's reply ("command"),
    or until its turn ends or waits for an answer ("prompt", "answer").

    A turn is followed once the command replied ("armed"): an answer's turn is the one
    running when it was sent, a prompt's the one its Delivery names (or the turn its
    queued prompt starts later)."""

    def __init__(self, run: _Run, session: EngineSession, mode: str) -> None:
        self.run = run
        self.session = session
        self.mode = mode
        self.turn: str | None = None
        self.prompt_id: str | None = None
        self.ended: dict[str, Any] = {}  # turn id -> TurnEnded body, as seen
        self.armed = False
        self.ending = False

    def stop(self) -> None:
        box = self.run.hub.boxes.get(self.session.id)
        if box is not None:
            box.unfollow(self)

    def command_done(self, value: Any, error: AgentError | None) -> None:
        run = self.run
        sid = self.session.id
        if error is not None:
            run.fail(error, session_id=sid)
            return
        if self.mode == "command":
            if run.op == "info":
                run.result(True, session=value)
            else:
                if run.op == "close" and run.ctx.default == sid:
                    run.ctx.default = None
                run.result(True, session_id=sid)
            return
        if self.mode == "prompt":
            self.prompt_id = value["prompt_id"]
            kind = value["kind"]
            self.turn = None
            for tag in ("Started", "Steered"):
                if tag in kind:
                    self.turn = kind[tag]["turn_id"]
        self.armed = True
        if self.turn is not None:
            self._check_turn()
        elif self.mode == "answer":
            # A tool call or hook outside any turn: there is no turn to stream.
            run.result(True, **self._fields())

    def _check_turn(self) -> None:
        """Just armed, or a queued prompt's turn just started: is it over, or waiting?"""
        turn_id = self.turn
        if turn_id in self.ended:
            self._turn_ended(self.ended[turn_id])
            return
        current = self.session.turn
        if current is not None and current.id == turn_id and current.requests:
            self.run.result(True, **self._fields(), waiting=next(iter(current.requests.values())))

    def observe(self, line: dict[str, Any]) -> None:
        if self.mode == "command" or self.run.finished or self.ending or line.get("kind") != "event":
            return
        event = line["event"]
        kind = event["kind"]
        name = event_kind_name(kind)
        turn_id: str | None = (event.get("turn_info") or {}).get("id")
        if name == "TurnEnded" and turn_id is not None:
            self.ended[turn_id] = kind[name]
        if not self.armed:
            return
        if name == "TurnStarted":
            if self.turn is None and kind[name]["origin"] == {"Prompt": self.prompt_id}:
                self.turn = turn_id
        elif self.turn is None or turn_id != self.turn:
            return
        elif name == "TurnEnded":
            self._turn_ended(kind[name])
        elif name == "RequestOpened":
            # The session's StatusChanged NeedsInput follows in the same tick: it is part of
            # this request's answer (before its done), not a stale first line of the next.
            self.ending = True
            waiting = kind[name]
            self.run.hub.loop.call_soon(lambda: self.run.result(True, **self._fields(), waiting=waiting))

    def _fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"session_id": self.session.id}
        if self.prompt_id is not None:
            fields["prompt_id"] = self.prompt_id
        if self.turn is not None:
            fields["turn_id"] = self.turn
        return fields

    def _turn_ended(self, body: dict[str, Any]) -> None:
        stop = body["stop"]
        fields = {**self._fields(), "stop": stop, "usage": body.get("usage")}
        if isinstance(stop, dict) and "Failed" in stop:
            # The session error (if any) follows TurnEnded within the same tick.
            self.ending = True

            def report() -> None:
                error = self.run.hub.errors.get(self.session.id) or AgentError.detail(
                    Kind.PROTOCOL_FAILED, stop["Failed"].get("message", "the turn failed")
                )
                self.run.fail(error, **fields)

            self.run.hub.loop.call_soon(report)
        elif not self.session.queue and self.session.pending_steer is None:
            # The turn's StatusChanged Idle follows TurnEnded in the same tick: it is part
            # of this prompt's answer, before its done (not a stale first line of the next
            # request). A queued prompt's TurnStarted is not: that belongs to its own turn.
            self.ending = True
            self.run.hub.loop.call_soon(lambda: self.run.result(True, **fields))
        else:
            self.run.result(True, **fields)

    def closed(self) -> None:
        if self.mode == "command" or self.run.finished or self.ending:
            return
        error = self.run.hub.errors.get(self.session.id) or AgentError.session_closed(self.session.id)
        self.run.fail(error, **self._fields())
