"""Errors say who broke it (agentproto/core/errors.py): the app, the agent, the machine, or us.

The family is checked without I/O (every kind has its class, its explanation and a body the
reference schema takes), and the one kind that needs a bug to appear, ``Internal``, is
checked through real sidecars with a fault injected into their runtime: the command gets
``Internal``, the traceback goes to stderr, and the sidecar carries on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import jsonschema
import pytest
from ops_support import check_ops_line
from sidecar import ROOT, base_env, check_line

from agentproto.core import errors
from agentproto.core.errors import (
    ERROR_KINDS,
    AgentError,
    AgentFault,
    AppError,
    InternalError,
    Kind,
    SetupError,
    error_from_body,
)
from agentproto.core.explain import EXPLANATIONS
from agentproto.core.wire import FrameError

REFERENCE = json.loads((ROOT / "fixtures" / "anyagent-schema.json").read_text())
OURS = json.loads((ROOT / "agentproto" / "schema.json").read_text())


def _validator(schema: dict[str, Any]) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator({"$ref": "#/definitions/ErrorBody", "definitions": schema["definitions"]})


WHOSE = {
    AppError: {"BadFrame", "InvalidRequest", "InvalidConfiguration", "UnknownSession", "SessionClosed",
               "SessionBusy", "UnsupportedFeature", "ConsumerLagged", "BudgetExceeded"},
    AgentFault: {"ProtocolFailed", "ProcessExited", "AuthRequired", "HandshakeTimeout", "ResumeFailed"},
    SetupError: {"NotInstalled", "SpawnFailed"},
    InternalError: {"Internal"},
}


def test_kinds_are_constants_and_each_has_one_fault_and_an_explanation() -> None:
    constants = {v for k, v in vars(Kind).items() if k.isupper()}
    assert constants == set(ERROR_KINDS) and len(ERROR_KINDS) == len(set(ERROR_KINDS))
    assert set().union(*WHOSE.values()) == set(ERROR_KINDS)
    assert set(EXPLANATIONS) == set(ERROR_KINDS)
    documented = OURS["definitions"]["ErrorBody"]["properties"]["kind"]["examples"]
    assert documented == list(ERROR_KINDS), "run python scripts/gen_schema.py"
    for cls, kinds in WHOSE.items():
        for kind in kinds:
            error = AgentError.detail(kind, "why")
            assert type(error) is cls and error.kind == kind, kind
            assert isinstance(error, AgentError) and error.fault == cls.fault
            # Read back from the wire (a client's side): the same class.
            assert type(error_from_body(json.loads(json.dumps(error.body())))) is cls


def test_the_named_constructors_classify_too() -> None:
    assert isinstance(AgentError.not_installed("claude"), SetupError)
    assert isinstance(AgentError.auth_required("log in", []), AgentFault)
    assert isinstance(AgentError.process_exited("1", "boom"), AgentFault)
    assert isinstance(AgentError.unknown_session("s1"), AppError)
    assert isinstance(AgentError.session_closed("s1"), AppError)
    assert isinstance(AgentError(Kind.INVALID_REQUEST, "m", detail="d"), AppError)
    # A kind this version does not know (a newer sidecar's) is still an AgentError.
    newer = error_from_body({"kind": "SomethingNew", "message": "m", "extra": 1})
    assert type(newer) is AgentError and newer.body() == {"kind": "SomethingNew", "message": "m", "extra": 1}
    frame = FrameError(7, "missing field `cmd`")
    assert isinstance(frame, AppError) and frame.frame_id == 7
    assert frame.body() == {"kind": "BadFrame", "message": "missing field `cmd`", "detail": "missing field `cmd`"}


def test_protocol_failed_quotes_the_offending_line_cut_to_a_readable_length() -> None:
    short = AgentError.protocol_failed("unexpected message", b'{"type":"weird"}')
    assert isinstance(short, AgentFault)
    assert short.body() == {
        "kind": "ProtocolFailed",
        "message": "protocol failure: unexpected message",
        "detail": "unexpected message",
        "line": '{"type":"weird"}',
    }
    long_line = b'{"text":"' + b"x" * 100_000 + b"\xff" + b'"}'
    body = AgentError.protocol_failed("too odd", long_line).body()
    assert body["line"].startswith('{"text":"xxx') and len(body["line"]) < errors.LINE_EXCERPT + 40
    assert body["line"].endswith(f"({len(long_line)} characters)")
    assert "line" not in AgentError.protocol_failed("no line to show").body()
    for error in (short, AgentError.protocol_failed("too odd", long_line)):
        assert not list(_validator(REFERENCE).iter_errors(error.body()))
        assert not list(_validator(OURS).iter_errors(error.body()))


def test_internal_logs_the_traceback_and_answers_internal(capsys: pytest.CaptureFixture[str]) -> None:
    def buggy() -> None:
        {}["missing"]

    try:
        buggy()
    except Exception:
        error = AgentError.internal("discover")
    assert isinstance(error, InternalError) and error.kind == "Internal"
    assert error.message == "internal error: discover: KeyError('missing')"
    err = capsys.readouterr().err
    assert "internal error on discover" in err and "Traceback" in err and "in buggy" in err


# -- through real sidecars, with a bug injected into the runtime ----------------------------

#: Runs agentproto's own entry point with Engine.discover replaced by a bug.
BUGGY = """
import sys
from agentproto.engine.runtime import Engine

def discover(self, done):
    raise RuntimeError("injected bug")

Engine.discover = discover
from agentproto.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _run_buggy(args: list[str], stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BUGGY, *args],
        input=stdin, capture_output=True, text=True, env=base_env(), cwd=str(ROOT), timeout=60,
    )


def test_a_bug_in_a_command_answers_internal_and_serve_goes_on() -> None:
    frames = [
        {"id": 1, "cmd": "discover"},
        {"id": 2, "cmd": "open", "agent": "mock", "dir": str(ROOT)},
    ]
    done = _run_buggy(["serve"], "".join(json.dumps(f) + "\n" for f in frames))
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    for line in lines:
        check_line(line)
    replies = {line["id"]: line for line in lines if "id" in line}
    assert replies[1]["error"]["kind"] == "Internal", replies[1]
    assert "discover" in replies[1]["error"]["message"] and "injected bug" in replies[1]["error"]["message"]
    assert replies[2]["ok"]["agent"]["id"] == "mock", "the next command still runs"
    assert [line["closed"] for line in lines if "closed" in line] == [replies[2]["ok"]["id"]]
    assert done.returncode == 0
    assert "Traceback" in done.stderr and "RuntimeError: injected bug" in done.stderr


def test_a_bug_in_an_ops_request_answers_internal() -> None:
    done = _run_buggy(["--single-shot"], '{"op": "discover"}\n')
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    for line in lines:
        check_ops_line(line)
    result = next(line for line in lines if line["kind"] == "result")
    assert result["ok"] is False and result["error"]["kind"] == "Internal", result
    assert lines[-1] == {"kind": "done", "exit_code": 1} and done.returncode == 1
    assert "Traceback" in done.stderr and "RuntimeError: injected bug" in done.stderr


def test_a_bug_in_a_driver_open_fails_that_open_and_leaves_no_session(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentproto.drivers.mock import MockDriver
    from agentproto.loopio.loop import Loop
    from agentproto.engine.runtime import Engine, Scope

    def broken_open(self: MockDriver) -> None:
        raise RuntimeError("injected bug")

    monkeypatch.setattr(MockDriver, "open", broken_open)
    loop = Loop()
    try:
        runtime = Engine(loop)
        scope = Scope(runtime, shared=True)
        answers: list[Any] = []

        class Sink:
            def event(self, session: Any, event: Any) -> None: ...
            def session_error(self, session: Any, error: Any) -> None: ...
            def session_closed(self, session: Any) -> None: ...

        runtime.execute("open", {"agent": "mock", "dir": str(ROOT)}, Sink(), scope, lambda v, e: answers.append((v, e)))
        [(value, error)] = answers
        assert value is None and isinstance(error, InternalError) and "injected bug" in error.message
        assert runtime.sessions == {} and scope.sessions() == []
        with pytest.raises(AgentError) as closed:
            scope.lookup("s1")
        assert closed.value.kind == "SessionClosed"
        assert "RuntimeError: injected bug" in capsys.readouterr().err
    finally:
        loop.close()
