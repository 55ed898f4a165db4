"""`serve --transport jsonrpc`: JSON-RPC 2.0 on stdio, spoken in raw lines."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ops_support import SCHEMA, Proc, kind_name, script, validator

EVENT = validator("Event")
RESULT = validator("OpsResult")


class Rpc(Proc):
    def __init__(self, *args: str) -> None:
        super().__init__(["serve", "--transport", "jsonrpc", *args])
        self.notifications: list[Any] = []

    def call(self, method: str, params: Any = None, rpc_id: Any = 1) -> Any:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.response()

    def response(self) -> Any:
        """The next line that is not a notification; notifications are kept, checked."""
        while True:
            line = self.line()
            if isinstance(line, dict) and "method" in line and "id" not in line:
                assert line["jsonrpc"] == "2.0" and line["method"] == "event"
                assert not list(EVENT.iter_errors(line["params"])), line
                self.notifications.append(line)
                continue
            if isinstance(line, dict) and "result" in line:
                ops_result = {"kind": "result", **line["result"]}
                errors = list(RESULT.iter_errors(ops_result))
                assert not errors, (errors[0].message, line)
            return line


@pytest.fixture
def rpc():
    p = Rpc("--mock", script("turn"))
    yield p
    p.stop()


def test_request_method_and_direct_methods_share_the_default_session(rpc):
    opened = rpc.call("request", {"op": "open", "agent": "mock", "dir": "/tmp"}, rpc_id="a")
    assert opened["id"] == "a" and opened["result"]["op"] == "open" and opened["result"]["ok"] is True
    sid = opened["result"]["session"]["id"]
    prompted = rpc.call("prompt", {"text": "go"}, rpc_id=2)
    assert prompted["id"] == 2 and prompted["result"]["waiting"]["Permission"]["id"] == "r1"
    kinds = [kind_name(n["params"]["kind"]) for n in rpc.notifications]
    assert kinds[0] == "TurnStarted" and kinds[-2:] == ["RequestOpened", "StatusChanged"]  # all before the response
    rpc.notifications.clear()
    answered = rpc.call("request", {"op": "answer", "request": "r1", "answer": {"Permission": "AllowOnce"}}, rpc_id=3)
    assert answered["result"]["stop"] == {"Completed": {"source": "Protocol"}}
    assert "TurnEnded" in [kind_name(n["params"]["kind"]) for n in rpc.notifications]
    assert all(n["params"]["session_id"] == sid for n in rpc.notifications)


def test_a_command_refusal_is_a_result_with_ok_false(rpc):
    response = rpc.call("info", {"session": "s99"}, rpc_id=4)
    assert response["id"] == 4 and "error" not in response
    assert response["result"]["ok"] is False and response["result"]["error"]["kind"] == "UnknownSession"
    response = rpc.call("explain", {"code": "nope"}, rpc_id=5)
    assert response["result"]["ok"] is False


def test_a_parse_error_has_id_null(rpc):
    rpc.write(b'{"jsonrpc": "2.0", "id": 3, "method": \n')
    response = rpc.response()
    assert response["id"] is None and response["error"]["code"] == -32700
    assert response["error"]["message"].startswith("Parse error")
    assert rpc.call("capabilities", rpc_id=4)["id"] == 4  # and the server goes on


@pytest.mark.parametrize(
    "line",
    [
        {"jsonrpc": "1.0", "id": 9, "method": "capabilities"},
        {"id": 9, "method": "capabilities"},
        {"jsonrpc": "2.0", "id": 9, "method": 5},
        {"id": 9, "method": 5},
        {"jsonrpc": "2.0", "id": 9, "method": "capabilities", "params": "x"},
        {"jsonrpc": "2.0", "id": 9},
    ],
)
def test_invalid_requests_with_a_readable_id_keep_it(rpc, line):
    rpc.send(line)
    response = rpc.response()
    assert response["id"] == 9 and response["error"]["code"] == -32600, response


@pytest.mark.parametrize(
    "line",
    [
        {"jsonrpc": "2.0", "id": True, "method": "capabilities"},
        {"jsonrpc": "2.0", "id": {"n": 1}, "method": "capabilities"},
        {"jsonrpc": "2.0", "id": float("nan"), "method": "capabilities"},  # NaN: Python's json reads it
        {"jsonrpc": "2.0", "id": float("inf"), "method": "capabilities"},  # what 1e400 becomes
        {"jsonrpc": "2.0", "id": 9, "result": {}},
        5,
        "request",
        [],
    ],
)
def test_invalid_requests_without_a_readable_id_get_id_null(rpc, line):
    rpc.send(line)
    response = rpc.response()
    assert isinstance(response, dict), response  # `[]` gets one error object, not an array
    assert response["id"] is None and response["error"]["code"] == -32600


def test_a_batch_over_the_bound_is_one_error(rpc):
    from agentproto.core.jsonrpc import MAX_BATCH

    rpc.send([{"jsonrpc": "2.0", "id": i, "method": "capabilities"} for i in range(MAX_BATCH + 1)])
    response = rpc.response()
    assert isinstance(response, dict) and response["id"] is None and response["error"]["code"] == -32600
    assert rpc.call("capabilities", rpc_id=7)["id"] == 7


def test_unknown_method_and_bad_params_keep_the_id(rpc):
    assert rpc.call("nope", {}, rpc_id=11) == {
        "jsonrpc": "2.0",
        "id": 11,
        "error": {"code": -32601, "message": "Method not found: nope"},
    }
    response = rpc.call("explain", {}, rpc_id=12)
    assert response["id"] == 12 and response["error"]["code"] == -32602
    assert "missing required `code`" in response["error"]["message"]
    response = rpc.call("request", {"op": "frob"}, rpc_id=13)
    assert response["error"]["code"] == -32602 and "unknown op: frob" in response["error"]["message"]
    response = rpc.call("request", ["op"], rpc_id=14)
    assert response["error"]["code"] == -32602
    response = rpc.call("prompt", ["positional"], rpc_id=15)
    assert response["error"]["code"] == -32602


def test_notifications_run_but_are_never_answered(rpc):
    rpc.send({"jsonrpc": "2.0", "method": "request", "params": {"op": "open", "agent": "mock", "dir": "/tmp"}})
    rpc.send({"jsonrpc": "2.0", "method": "nope"})
    rpc.send({"jsonrpc": "2.0", "method": "explain", "params": {}})
    response = rpc.call("info", None, rpc_id=21)  # the notification's open made the default session
    assert response["id"] == 21 and response["result"]["session"]["id"] == "s1"


def test_batches_answer_in_one_array_without_notifications(rpc):
    rpc.send(
        [
            {"jsonrpc": "2.0", "id": 1, "method": "open", "params": {"agent": "mock", "dir": "/tmp"}},
            {"jsonrpc": "2.0", "method": "capabilities"},
            {"jsonrpc": "2.0", "id": 2, "method": "info"},
            {"jsonrpc": "1.0", "id": 3, "method": "info"},
            {"jsonrpc": "2.0", "id": 4, "method": "nope"},
        ]
    )
    batch = rpc.response()
    assert isinstance(batch, list) and [r["id"] for r in batch] == [1, 2, 3, 4]
    assert batch[1]["result"]["session"]["id"] == batch[0]["result"]["session"]["id"]
    assert batch[2]["error"]["code"] == -32600 and batch[3]["error"]["code"] == -32601
    rpc.send([{"jsonrpc": "2.0", "method": "capabilities"}, {"jsonrpc": "2.0", "method": "explain", "params": {"code": "x"}}])
    # An all-notification batch gets nothing: the next line is the next call's answer.
    assert rpc.call("capabilities", rpc_id=99)["id"] == 99


def test_halt_ends_the_server(rpc):
    assert rpc.call("halt", rpc_id=1)["result"] == {"op": "halt", "ok": True}
    assert rpc.wait(15) == 0


def test_eof_ends_the_server_with_exit_0():
    p = Rpc()
    try:
        p.send({"jsonrpc": "2.0", "id": 1, "method": "generate", "params": {"agent": "mock", "dir": "/tmp", "prompt": "a b"}})
        p.close_stdin()
        response = p.response()
        assert response["result"]["text"] == "a b"
        assert p.wait(15) == 0
    finally:
        p.stop()


def test_record(tmp_path):
    record = tmp_path / "rpc.ndjson"
    p = Rpc("--record", str(record))
    try:
        p.call("capabilities", rpc_id=1)
        p.write(b"oops\n")
        p.response()
        p.close_stdin()
        assert p.wait(15) == 0
    finally:
        p.stop()
    pairs = [json.loads(line) for line in record.read_text().splitlines()][1:]  # after the header
    assert json.loads(pairs[0]["request"])["method"] == "capabilities"
    assert json.loads(pairs[0]["response"])["result"]["op"] == "capabilities"
    assert pairs[1]["request"] == "oops" and json.loads(pairs[1]["response"])["error"]["code"] == -32700


def test_schema_has_the_ops_definitions():
    assert {"OpsRequest", "OpsLine", "OpsResult", "OpsVersion"} <= set(SCHEMA["definitions"])
