"""Fuzz targets: ops requests (ops.decode_request + ops.parse_request), and a sample of
nasty requests through a real ``--single-shot`` process.

The contract: a request line decodes and parses, or raises ``OpsError`` (the documented
protocol error: ``{"kind": "error"}`` and done 2) and nothing else; for every op that is
a protocol 1 command, the ops framing accepts exactly the requests protocol 1 accepts
(the same checks, ``op`` for ``cmd``), with the same arguments. ``--single-shot`` always
ends with exactly one ``done`` line, whatever it was given, and exits with its code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from fuzz.gen import damaged, dumps, json_values, mutated_object, nasty_json, splice_nasty
from fuzz.harness import ROOT, regression, target
from fuzz.mutate import mutate_encoded
from fuzz.targets_wire import FIELDS, valid_frame
from hypothesis import strategies as st

from agentproto.frontends import ops_framing as ops
from agentproto.core import wire
from agentproto.frontends.ops_framing import CHECKS, OpsError
from agentproto.core.wire import FrameError

OPS_FIELDS = [*FIELDS, "op", "code"]


@st.composite
def valid_request(draw: Any) -> dict[str, Any]:
    frame = draw(valid_frame())
    request = {k: v for k, v in frame.items() if k not in ("id", "cmd")}
    request["op"] = draw(st.sampled_from([frame["cmd"], frame["cmd"], "capabilities", "halt", "explain"]))
    if request["op"] == "explain":
        request["code"] = draw(st.sampled_from(["BadFrame", "SessionBusy", "nope"]))
    return request


@st.composite
def request_line(draw: Any) -> bytes:
    how = draw(st.sampled_from(["valid", "mutated", "mutated", "damaged", "nasty", "json"]))
    if how == "json":
        return dumps(draw(json_values))
    request = draw(valid_request())
    if how == "valid":
        return dumps(request)
    if how == "mutated":
        return dumps(draw(mutated_object(request, OPS_FIELDS)))
    if how == "damaged":
        return draw(damaged(dumps(request)))
    return splice_nasty(request, draw(st.sampled_from(OPS_FIELDS)), draw(nasty_json))


def _as_frame(request: dict[str, Any]) -> bytes:
    frame = {k: v for k, v in request.items() if k != "op"}
    frame.update(id=1, cmd=request["op"])
    return json.dumps(frame).encode()


@target(
    "ops_requests",
    st.tuples(request_line(), st.sampled_from([None, "s-default"])),
    examples=300,
    mutate=lambda v, rng: (mutate_encoded(v[0], rng), v[1]),
)
def ops_requests(case: tuple[bytes, str | None]) -> None:
    """Ops requests: OpsError and nothing else; the same verdict as protocol 1's checks."""
    raw, default = case
    try:
        obj = ops.decode_request(raw)
    except OpsError as error:
        assert error.message.startswith("malformed JSON: ")
        return
    try:
        op, args = ops.parse_request(obj, default)
    except OpsError as error:
        assert isinstance(error.message, str) and error.message
        json.loads(wire.encode({"kind": "error", "message": error.message}))
        accepted = None
    else:
        assert op in CHECKS and isinstance(obj, dict) and obj["op"] == op
        required, optional = CHECKS[op]
        assert set(required) <= set(args) <= set(required) | set(optional)
        accepted = (op, args)
    if default is not None or not isinstance(obj, dict) or not isinstance(obj.get("op"), str) or obj["op"] not in wire.COMMANDS:
        return
    # The same request as a protocol 1 frame: the same verdict, the same arguments.
    try:
        command = wire.parse_command(_as_frame(obj))
    except FrameError as error:
        assert accepted is None, f"ops accepted what protocol 1 refuses: {error.message}"
    except (ValueError, RecursionError):
        return  # not re-encodable (a NaN, a deep value): nothing to compare
    else:
        assert accepted is not None, "ops refused what protocol 1 accepts"
        assert repr(command.args) == repr(accepted[1])


# -- a real --single-shot process ----------------------------------------------------------

NASTY_REQUESTS: list[bytes] = [
    b'{"op": "capabilities", "x": ' + b"1" * 5000 + b"}",
    b'{"op": ' + b"9" * 5000 + b"}",
    b'{"op": "explain", "code": "' + b"x" * 300_000 + b'"}',
    b'{"op": "explain", "code": "\\ud800"}',
    b'{"op": "\\udfff"}',
    b'{"op": "explain", "code": "\xed\xa0\x80"}',
    b"[" * 990 + b"]" * 990,
    b'{"op": ' + b"[" * 990 + b"]" * 990 + b"}",
    b'{"op": "capabilities", "x": ' + b"[" * 3000 + b"]" * 3000 + b"}",
    b'{"op": "capabilities"} ' + b"1" * 5000,
    b'{"op": "capabilities"} [' + b"[" * 3000,
    b'{"op": "open", "agent": "mock", "dir": ".", "env": {"A\\u0000": "b"}}',
    b'{"op": "open", "agent": "mock", "dir": ".", "args": ["\\ud800"]}',
    b'{"op": "generate", "agent": "mock", "dir": ".", "prompt": "hi", "output_schema": {"pattern": "("}}',
    b'{"op": "halt", "x": NaN}',
    b"\x00",
    b"",
]


@st.composite
def nasty_request(draw: Any) -> bytes:
    if draw(st.booleans()):
        return draw(st.sampled_from(NASTY_REQUESTS))
    return draw(request_line())


def single_shot(data: bytes, timeout: float) -> tuple[int, list[dict[str, Any]], str]:
    done = subprocess.run(
        [sys.executable, "-m", "agentproto", "--single-shot"],
        input=data,
        capture_output=True,
        cwd=str(ROOT),
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": "/nonexistent"},
        timeout=timeout,
    )
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr.decode(errors="replace")


@target("ops_single_shot", nasty_request(), examples=12, timeout=60, weight=0.3)
def ops_single_shot(data: bytes) -> None:
    """Any request to --single-shot ends with exactly one done, and exits with its code."""
    code, lines, stderr = single_shot(data, 50)
    assert lines, f"no output at all (exit {code}); stderr: {stderr[-2000:]}"
    dones = [line for line in lines if line.get("kind") == "done"]
    assert len(dones) == 1 and lines[-1] is dones[0], f"not exactly one done, last: {lines[-3:]}; stderr: {stderr[-2000:]}"
    assert code == dones[0]["exit_code"], (code, dones)
    assert "Traceback" not in stderr, stderr[-3000:]


regression("ops_single_shot", *NASTY_REQUESTS[:2])
