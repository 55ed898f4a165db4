"""JSON-RPC 2.0 and MCP on stdio: two more framings of the same ops.

JSON-RPC (``serve --transport jsonrpc``): method ``request`` takes an ops request as
``params``; every op is also a method of its own with its fields as ``params``. A
session's events go out as ``event`` notifications before the response; the response's
``result`` is the op's result object (``op``, ``ok``, and the payload or ``error``), so
a command refusal is a result with ``ok: false``. Framing errors follow the spec:
-32700 parse error, -32600 invalid request (always with id null), -32601 unknown method,
-32602 bad params. Requests are answered in order; only ``cancel`` starts at once.

MCP (``serve --transport mcp``): newline-delimited JSON-RPC with ``initialize``, ``ping``,
``tools/list`` and ``tools/call``. Each tool ``agentproto_<op>`` has the op's request
schema (from agentproto/schema.json, without ``op``) as its ``inputSchema``; a result is
the op's result object as JSON text plus ``structuredContent``, ``isError`` when refused.
Tool calls run concurrently: a long ``prompt`` never delays a ``ping``.
"""

from __future__ import annotations

import copy
import functools
import json
import signal
import sys
from typing import Any, Callable

from agentproto import __version__
from agentproto.engine import Session, log
from agentproto.runtime import Runtime
from agentproto.ops import (
    EXIT_FAILED,
    EXIT_OK,
    OPERATIONS,
    OpsContext,
    OpsError,
    OpsHub,
    parse_request,
)
from agentproto.serve import INPUT_PAUSE_LINES
from agentproto.streams import LineReader, Output
from agentproto.transports import (
    Job,
    Pipeline,
    Recorder,
    _finish_when_drained,
)
from agentproto.wire import (
    DEFAULT_MAX_LINE,
    TooLong,
    decode_json_line,
    encode,
    event_kind_name,
)

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603


def error_response(rpc_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": message}}


class Invalid(Exception):
    pass


def check_message(msg: Any) -> tuple[Any, str, Any, bool]:
    """``(id, method, params, is_notification)`` of a JSON-RPC request, or ``Invalid``."""
    if not isinstance(msg, dict):
        raise Invalid("a request is a JSON object")
    if msg.get("jsonrpc") != "2.0":
        raise Invalid('`jsonrpc` must be "2.0"')
    method = msg.get("method")
    if not isinstance(method, str):
        raise Invalid("`method` must be a string")
    if "params" in msg and not isinstance(msg["params"], (dict, list)):
        raise Invalid("`params` must be an object or an array")
    notification = "id" not in msg
    rpc_id = msg.get("id")
    if not notification and (isinstance(rpc_id, bool) or not isinstance(rpc_id, (str, int, float, type(None)))):
        raise Invalid("`id` must be a string, a number or null")
    return rpc_id, method, msg.get("params"), notification


def ops_object(method: str, params: Any) -> dict[str, Any]:
    """The ops request a JSON-RPC call stands for; ``OpsError`` (-32602) when params don't fit."""
    if method == "request":
        if not isinstance(params, dict):
            raise OpsError("`request` takes an ops request object as params")
        return params
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise OpsError(f"`{method}` takes its fields as a params object")
    return {**params, "op": method}


class _RpcOut:
    """The ops ``Out`` of one JSON-RPC call: events as notifications, then the response."""

    def __init__(self, rpc_id: Any, notification: bool, write: Callable[[bytes, Session | None], None], respond: Callable[[dict[str, Any] | None], None]) -> None:
        self.rpc_id = rpc_id
        self.notification = notification
        self.write = write
        self.respond = respond
        self.result: dict[str, Any] | None = None
        self.error: str | None = None

    def line(self, obj: dict[str, Any], session: Session | None = None) -> None:
        kind = obj.get("kind")
        if kind == "result":
            self.result = {k: v for k, v in obj.items() if k != "kind"}
        elif kind == "error":
            self.error = obj["message"]
        if kind in ("result", "error") or self.notification:
            if session is not None:
                session.delivered(1)
            return
        params = obj["event"] if kind == "event" else {k: v for k, v in obj.items() if k != "kind"}
        self.write(encode({"jsonrpc": "2.0", "method": kind, "params": params}), session)

    def done(self, exit_code: int) -> None:
        if self.notification:
            self.respond(None)
        elif self.result is not None:
            self.respond({"jsonrpc": "2.0", "id": self.rpc_id, "result": self.result})
        else:
            self.respond(error_response(self.rpc_id, INVALID_PARAMS, self.error or "invalid params"))


class JsonRpcServer:
    MAX_JOBS = 1024

    def __init__(self, runtime: Runtime, output: Output, recorder: Recorder | None, on_finished: Callable[[], None]) -> None:
        self.runtime = runtime
        self.loop = runtime.loop
        self.output = output
        self.recorder = recorder
        self.on_finished = on_finished
        self.hub = OpsHub(runtime)
        self.ctx = OpsContext(self.hub)
        self.pipeline = Pipeline(self.loop, output.send, self._after)
        self.reader = LineReader(self.loop, sys.stdin.fileno(), self._line, self._eof, self._busy)
        self.ending = False

    def start(self) -> None:
        self.reader.start()

    def _busy(self) -> bool:
        return len(self.output) > INPUT_PAUSE_LINES or len(self.pipeline) > self.MAX_JOBS

    def _line(self, raw: bytes | TooLong) -> None:
        if self.ending:
            return
        if isinstance(raw, TooLong):
            self._submit_error(b"", error_response(None, PARSE_ERROR, f"Parse error: line over {DEFAULT_MAX_LINE} bytes"))
            return
        if not raw.strip():
            return
        try:
            msg = decode_json_line(raw)
        except ValueError as exc:
            self._submit_error(raw, error_response(None, PARSE_ERROR, f"Parse error: {exc}"))
            return
        op = _op_of(msg)
        self.pipeline.submit(Job(lambda job: self._run(msg, job), raw, eager=op == "cancel", op=op))

    def _submit_error(self, raw: bytes, response: dict[str, Any]) -> None:
        def run(job: Job) -> None:
            self.pipeline.write(job, encode(response))
            self.pipeline.finish(job)

        self.pipeline.submit(Job(run, raw))

    def _run(self, msg: Any, job: Job) -> None:
        def write(data: bytes, session: Session | None = None) -> None:
            self.pipeline.write(job, data, session)

        if not isinstance(msg, list):
            def single(response: dict[str, Any] | None) -> None:
                if response is not None:
                    write(encode(response))
                self.pipeline.finish(job)

            self.call(msg, write, single)
            return
        if not msg:
            write(encode(error_response(None, INVALID_REQUEST, "Invalid Request: an empty batch")))
            self.pipeline.finish(job)
            return
        responses: list[dict[str, Any]] = []

        def step(index: int) -> None:
            if index == len(msg):
                if responses:
                    write(encode(responses))
                self.pipeline.finish(job)
                return

            def answered(response: dict[str, Any] | None) -> None:
                if response is not None:
                    responses.append(response)
                self.loop.call_soon(lambda: step(index + 1))

            self.call(msg[index], write, answered)

        step(0)

    def call(self, msg: Any, write: Callable[[bytes, Session | None], None], respond: Callable[[dict[str, Any] | None], None]) -> None:
        """Answer one JSON-RPC request object (``respond(None)`` for a notification)."""
        try:
            rpc_id, method, params, notification = check_message(msg)
        except Invalid as exc:
            respond(error_response(None, INVALID_REQUEST, f"Invalid Request: {exc}"))
            return
        if method != "request" and method not in OPERATIONS:
            respond(None if notification else error_response(rpc_id, METHOD_NOT_FOUND, f"Method not found: {method}"))
            return
        try:
            op, args = parse_request(ops_object(method, params), self.ctx.default)
        except OpsError as exc:
            respond(None if notification else error_response(rpc_id, INVALID_PARAMS, f"Invalid params: {exc.message}"))
            return
        self.ctx.run_parsed(op, args, _RpcOut(rpc_id, notification, write, respond))

    def _after(self, job: Job) -> bool:
        if self.recorder is not None and job.raw:
            self.recorder.record(job.raw, b"".join(job.captured))
        if self.ctx.halted:
            self.end()
            return False
        if self.reader.eof and not self.pipeline.jobs:
            self.loop.call_soon(self.end)
        return True

    def _eof(self) -> None:
        if not self.pipeline.jobs:
            self.end()

    def end(self) -> None:
        if self.ending:
            return
        self.ending = True
        self.reader.close()
        self.hub.close_all(self.on_finished)


def _op_of(msg: Any) -> str | None:
    """The op a single JSON-RPC request stands for (a batch counts as an `open`: never overtaken)."""
    if isinstance(msg, list):
        return "open"
    if not isinstance(msg, dict):
        return None
    method, params = msg.get("method"), msg.get("params")
    if method == "request" and isinstance(params, dict):
        op = params.get("op")
        return op if isinstance(op, str) else None
    return method if isinstance(method, str) else None


# -- MCP ------------------------------------------------------------------------------------

MCP_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MCP_TOOL_OPS = (
    "capabilities",
    "discover",
    "probe",
    "generate",
    "open",
    "prompt",
    "answer",
    "cancel",
    "configure",
    "info",
    "close",
    "explain",
)
INSTRUCTIONS = (
    "agentproto drives coding agents (Claude Code, Codex, Gemini, ACP agents) for you. "
    "agentproto_generate runs one hands-off turn and returns its text; for a conversation, "
    "agentproto_open a session, then agentproto_prompt it (and agentproto_answer when the "
    "result is `waiting`), then agentproto_close. agentproto_capabilities lists the agents; "
    "agentproto_explain explains an error kind."
)

_SCHEMA: dict[str, Any] | None = None


def _schema() -> dict[str, Any]:
    global _SCHEMA
    if _SCHEMA is None:
        from importlib import resources

        _SCHEMA = json.loads(resources.files("agentproto").joinpath("schema.json").read_text(encoding="utf-8"))
    return _SCHEMA


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            found.add(ref[len("#/definitions/") :])
        for value in node.values():
            _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def _rebase(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: ("#/$defs/" + v[len("#/definitions/") :] if k == "$ref" and isinstance(v, str) and v.startswith("#/definitions/") else _rebase(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_rebase(v) for v in node]
    return node


def request_schema(op: str) -> dict[str, Any]:
    """The op's request variant from agentproto/schema.json."""
    for variant in _schema()["definitions"]["OpsRequest"]["oneOf"]:
        if variant["properties"]["op"]["const"] == op:
            return dict(variant)
    raise KeyError(op)


def input_schema(op: str) -> dict[str, Any]:
    """The op's request schema without ``op``, self-contained (``$defs``)."""
    variant = copy.deepcopy(request_schema(op))
    props = variant["properties"]
    del props["op"]
    required = [name for name in variant.get("required", []) if name != "op"]
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    definitions = _schema()["definitions"]
    needed: set[str] = set()
    _refs(props, needed)
    seen: set[str] = set()
    while needed - seen:
        name = sorted(needed - seen)[0]
        seen.add(name)
        _refs(definitions[name], needed)
    if seen:
        out["$defs"] = {name: copy.deepcopy(definitions[name]) for name in sorted(seen)}
    rebased: dict[str, Any] = _rebase(out)
    return rebased


def tools() -> list[dict[str, Any]]:
    return [
        {
            "name": f"agentproto_{op}",
            "title": f"agentproto {op}",
            "description": request_schema(op)["description"],
            "inputSchema": input_schema(op),
        }
        for op in MCP_TOOL_OPS
    ]


class _ToolOut:
    """The ops ``Out`` of one tool call: the result object becomes the tool result."""

    def __init__(self, respond: Callable[[dict[str, Any]], None], progress: Callable[[dict[str, Any]], None] | None) -> None:
        self.respond = respond
        self.progress = progress
        self.result: dict[str, Any] | None = None
        self.error: str | None = None

    def line(self, obj: dict[str, Any], session: Session | None = None) -> None:
        if session is not None:
            session.delivered(1)
        kind = obj.get("kind")
        if kind == "result":
            self.result = {k: v for k, v in obj.items() if k != "kind"}
        elif kind == "error":
            self.error = obj["message"]
        elif kind == "event" and self.progress is not None:
            self.progress(obj["event"])

    def done(self, exit_code: int) -> None:
        if self.result is None:
            self.respond({"error": {"code": INVALID_PARAMS, "message": f"Invalid params: {self.error}"}})
            return
        text = json.dumps(self.result, ensure_ascii=False)
        self.respond(
            {
                "result": {
                    "content": [{"type": "text", "text": text}],
                    "structuredContent": self.result,
                    "isError": not self.result.get("ok", False),
                }
            }
        )


class McpServer:
    def __init__(self, runtime: Runtime, output: Output, recorder: Recorder | None, on_finished: Callable[[], None]) -> None:
        self.runtime = runtime
        self.loop = runtime.loop
        self.output = output
        self.recorder = recorder
        self.on_finished = on_finished
        self.hub = OpsHub(runtime)
        self.ctx = OpsContext(self.hub)
        self.reader = LineReader(
            self.loop, sys.stdin.fileno(), self._line, self._eof, lambda: len(self.output) > INPUT_PAUSE_LINES
        )
        self.pending = 0
        self.ending = False
        self._tools: list[dict[str, Any]] | None = None

    def start(self) -> None:
        self.reader.start()

    def _send(self, obj: Any, captured: list[bytes] | None = None) -> None:
        data = encode(obj)
        if captured is not None:
            captured.append(data)
        self.output.send(data)

    def _line(self, raw: bytes | TooLong) -> None:
        if self.ending:
            return
        if isinstance(raw, TooLong):
            self._send(error_response(None, PARSE_ERROR, f"Parse error: line over {DEFAULT_MAX_LINE} bytes"))
            return
        if not raw.strip():
            return
        captured: list[bytes] = []
        self.pending += 1

        def finished() -> None:
            self.pending -= 1
            if self.recorder is not None:
                self.recorder.record(raw, b"".join(captured))
            if self.reader.eof and self.pending == 0:
                self.loop.call_soon(self.end)

        try:
            msg = decode_json_line(raw)
        except ValueError as exc:
            self._send(error_response(None, PARSE_ERROR, f"Parse error: {exc}"), captured)
            finished()
            return
        if not isinstance(msg, list):
            def single(response: dict[str, Any] | None) -> None:
                if response is not None:
                    self._send(response, captured)
                finished()

            self.handle(msg, single, captured)
            return
        if not msg:
            self._send(error_response(None, INVALID_REQUEST, "Invalid Request: an empty batch"), captured)
            finished()
            return
        slots: list[Any] = [None] * len(msg)
        left = [len(msg)]

        def answered(index: int, response: dict[str, Any] | None) -> None:
            slots[index] = response
            left[0] -= 1
            if left[0] == 0:
                responses = [r for r in slots if r is not None]
                if responses:
                    self._send(responses, captured)
                finished()

        for index, element in enumerate(msg):
            self.handle(element, functools.partial(answered, index), captured)

    def handle(self, msg: Any, respond: Callable[[dict[str, Any] | None], None], captured: list[bytes]) -> None:
        try:
            rpc_id, method, params, notification = check_message(msg)
        except Invalid as exc:
            respond(error_response(None, INVALID_REQUEST, f"Invalid Request: {exc}"))
            return

        def reply(body: dict[str, Any]) -> None:
            respond(None if notification else {"jsonrpc": "2.0", "id": rpc_id, **body})

        def fail(code: int, message: str) -> None:
            reply({"error": {"code": code, "message": message}})

        if method == "initialize":
            wanted = params.get("protocolVersion") if isinstance(params, dict) else None
            version = wanted if wanted in MCP_VERSIONS else MCP_VERSIONS[-1]
            reply(
                {
                    "result": {
                        "protocolVersion": version,
                        "capabilities": {"tools": {"listChanged": False}},
                        "serverInfo": {"name": "agentproto", "title": "agentproto", "version": __version__},
                        "instructions": INSTRUCTIONS,
                    }
                }
            )
        elif method == "ping":
            reply({"result": {}})
        elif method == "tools/list":
            if self._tools is None:
                self._tools = tools()
            reply({"result": {"tools": self._tools}})
        elif method == "tools/call":
            self._call(params, reply, fail, captured)
        elif method.startswith("notifications/"):
            respond(None)
        else:
            # Includes `server/discover` (the stateless 2026-07-28 draft): -32601 makes a
            # current client fall back to `initialize`.
            fail(METHOD_NOT_FOUND, f"Method not found: {method}")

    def _call(self, params: Any, reply: Callable[[dict[str, Any]], None], fail: Callable[[int, str], None], captured: list[bytes]) -> None:
        if not isinstance(params, dict) or not isinstance(params.get("name"), str):
            fail(INVALID_PARAMS, "Invalid params: tools/call takes {name, arguments}")
            return
        name = params["name"]
        op = name[len("agentproto_") :] if name.startswith("agentproto_") else ""
        if op not in MCP_TOOL_OPS:
            fail(INVALID_PARAMS, f"Unknown tool: {name}")
            return
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            fail(INVALID_PARAMS, "Invalid params: `arguments` must be an object")
            return
        try:
            op, args = parse_request({**arguments, "op": op}, self.ctx.default)
        except OpsError as exc:
            fail(INVALID_PARAMS, f"Invalid arguments for {name}: {exc.message}")
            return
        token = (params.get("_meta") or {}).get("progressToken") if isinstance(params.get("_meta"), dict) else None
        progress = None
        if token is not None:
            count = [0]

            def progress(event: dict[str, Any]) -> None:
                count[0] += 1
                kind = event["kind"]
                name = event_kind_name(kind)
                message = name
                if name in ("TextDelta", "ReasoningDelta"):
                    message = kind[name]["text"]
                notice = {"progressToken": token, "progress": count[0], "message": message}
                self._send({"jsonrpc": "2.0", "method": "notifications/progress", "params": notice}, captured)

        self.ctx.run_parsed(op, args, _ToolOut(reply, progress))

    def _eof(self) -> None:
        if self.pending == 0:
            self.end()

    def end(self) -> None:
        if self.ending:
            return
        self.ending = True
        self.reader.close()
        self.hub.close_all(self.on_finished)


def _run_stdio(runtime: Runtime, make: Callable[..., Any], recorder: Recorder | None) -> int:
    loop = runtime.loop
    status = [EXIT_OK]

    def failed(exc: OSError) -> None:
        log(f"stdout stopped accepting writes: {exc.strerror or exc}")
        status[0] = EXIT_FAILED
        server.end()

    output = Output(loop, sys.stdout.fileno(), failed)
    server = make(runtime, output, recorder, lambda: _finish_when_drained(loop, output))
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, server.end)
    server.start()
    try:
        loop.run()
    finally:
        output.close()
    return status[0]


def run_jsonrpc(runtime: Runtime, recorder: Recorder | None = None) -> int:
    return _run_stdio(runtime, JsonRpcServer, recorder)


def run_mcp(runtime: Runtime, recorder: Recorder | None = None) -> int:
    return _run_stdio(runtime, McpServer, recorder)
