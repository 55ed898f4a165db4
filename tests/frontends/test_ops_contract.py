"""The `agentproto/1` contract: the committed schema covers every ops request and result,
every advertised operation validates when really run, and every error kind is explained."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from ops_support import (
    OPS_REQUEST,
    ROOT,
    Proc,
    check_ops_request,
    done_of,
    result_of,
    single_shot,
    write_script,
)
from sidecar import _SCHEMA as SCHEMA

from agentproto.core.explain import EXPLANATIONS
from agentproto.frontends.ops_framing import CHECKS, OPERATIONS, OpsError, parse_request
from agentproto.core.wire import COMMANDS, ERROR_KINDS


def test_committed_schemas_are_what_the_generators_produce():
    done = subprocess.run([sys.executable, "scripts/gen_schema_ops.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_ops_requests_are_derived_from_protocol_1_frames():
    variants = {v["properties"]["op"]["const"]: v for v in SCHEMA["definitions"]["OpsRequest"]["oneOf"]}
    assert list(variants) == list(OPERATIONS)
    frames = {v["properties"]["cmd"]["const"]: v for v in SCHEMA["definitions"]["Frame"]["oneOf"]}
    for op, variant in variants.items():
        required, optional = CHECKS[op]
        assert set(variant["required"]) == {"op", *required} - {"session"}, op
        if op in COMMANDS:
            assert set(variant["properties"]) - {"op"} == set(frames[op]["properties"]) - {"cmd"}, op


def test_every_error_kind_is_explained():
    assert set(EXPLANATIONS) == set(ERROR_KINDS)
    for kind, text in EXPLANATIONS.items():
        assert len(text) > 80 and "What to do" in text, kind
        code, lines = single_shot(f'{{"op": "explain", "code": "{kind.lower()}"}}')
        assert code == 0 and result_of(lines) == {"kind": "result", "op": "explain", "ok": True, "code": kind, "text": text}


def test_parse_request_messages():
    cases = {
        '{"op": "prompt", "text": "x"}': "missing required `session`",
        '{"op": "open", "dir": "."}': "missing required `agent`",
        '{"text": "x"}': "missing required `op`",
        '{"op": 5}': "invalid `op`: must be a string (an op name), got number",
        '{"op": "nope"}': f"unknown op: nope (valid ops: {', '.join(CHECKS)})",
        '{"op": "answer", "session": "s1", "request": "r", "answer": {"Permission": "Maybe"}}': "invalid `answer`",
        '{"op": "open", "agent": "mock", "dir": "/", "permission_mode": "Yolo"}': "invalid `permission_mode`: must "
        'be one of "Ask", "AcceptEdits", "AutoApprove" or null, got string "Yolo"',
        '{"op": "rollback", "session": "s1", "turns": 1, "scope": "All"}': 'invalid `scope`: must be one of "Conversation", '
        '"ConversationAndFiles", got string "All"',
        # Only a name of a fixed set is quoted back: a mistyped value may be a secret.
        '{"op": "open", "agent": "mock", "dir": "/", "env": "TOKEN=s3cret"}': "invalid `env`: must be an object of "
        "strings or null, got string",
    }
    for text, message in cases.items():
        with pytest.raises(OpsError) as info:
            parse_request(json.loads(text))
        assert info.value.message.startswith(message), (text, info.value.message)
        assert "s3cret" not in info.value.message
    assert parse_request({"op": "info"}, "s7") == ("info", {"session": "s7"})
    assert parse_request({"op": "info", "session": None}, "s7") == ("info", {"session": "s7"})


def test_the_schema_refuses_what_the_parser_refuses():
    assert not OPS_REQUEST.is_valid({"op": "nope"})
    assert not OPS_REQUEST.is_valid({"op": "explain"})
    assert not OPS_REQUEST.is_valid({"op": "open", "dir": "."})
    assert OPS_REQUEST.is_valid({"op": "prompt", "text": "default session"})
    assert OPS_REQUEST.is_valid({"op": "capabilities", "unknown": "ignored"})


def test_every_advertised_operation_validates_when_run(tmp_path):
    """Run one request of every op `capabilities` advertises; each request must match
    OpsRequest and every line (the result included) OpsLine, which Proc.ops checks."""
    mock = write_script(
        tmp_path,
        "all",
        [
            [{"Emit": {"TextDelta": {"message_id": "m1", "text": "hi"}}}, {"End": {"Completed": {"source": "Protocol"}}}],
            [{"Emit": {"TextDelta": {"message_id": "m2", "text": "more"}}}, {"End": {"Completed": {"source": "Protocol"}}}],
        ],
        rollback=True,
        compact=True,
        options=[
            {
                "id": "model",
                "name": "Model",
                "category": None,
                "kind": {"Select": {"choices": [{"value": "a", "label": "A"}, {"value": "b", "label": "B"}]}},
                "current": "a",
                "live": True,
            }
        ],
    )
    p = Proc(["agent", "--mock", mock])
    try:
        advertised = result_of(p.request({"op": "capabilities"}))["operations"]
        assert advertised == list(OPERATIONS)
        requests = {
            "capabilities": {"op": "capabilities"},
            "discover": {"op": "discover"},
            "probe": {"op": "probe", "agent": "mock"},
            "plan_usage": {"op": "plan_usage", "agent": "mock"},
            "plan_usage_all": {"op": "plan_usage_all", "dir": str(tmp_path)},
            "open": {"op": "open", "agent": "mock", "dir": str(tmp_path)},
            "generate": {"op": "generate", "agent": "mock", "dir": str(tmp_path), "prompt": "x"},
            "prompt": {"op": "prompt", "text": "hello"},
            "answer": {"op": "answer", "request": "r1", "answer": {"Permission": "AllowOnce"}},
            "configure": {"op": "configure", "option": "model", "value": "b"},
            "cancel": {"op": "cancel"},
            "rollback": {"op": "rollback", "turns": 1, "scope": "Conversation"},
            "dequeue": {"op": "dequeue", "prompt": "p9"},
            "compact": {"op": "compact"},
            "info": {"op": "info"},
            "close": {"op": "close"},
            "explain": {"op": "explain", "code": "BadFrame"},
            "inspect": {"op": "inspect"},
            "halt": {"op": "halt"},
        }
        order = ["capabilities", "discover", "probe", "plan_usage", "plan_usage_all", "generate", "open", "prompt", "answer",
                 "configure", "cancel", "rollback", "dequeue", "compact", "info", "close", "explain", "inspect", "halt"]
        assert sorted(order) == sorted(advertised) == sorted(requests)
        outcomes = {}
        for op in order:
            request = requests[op]
            check_ops_request(request)
            lines = p.request(request, timeout=30)
            assert done_of(lines) in (0, 1), (op, lines)
            result = result_of(lines)
            assert result["op"] == op
            outcomes[op] = result["ok"]
        # Most succeed; the rest are refusals that still match the schema.
        assert all(outcomes[op] for op in ("capabilities", "discover", "probe", "plan_usage_all", "generate", "open", "prompt",
                                            "configure", "cancel", "rollback", "compact", "info", "close",
                                            "explain", "halt")), outcomes
        assert outcomes["answer"] is False and outcomes["dequeue"] is False
        assert p.wait(15) == 0
    finally:
        p.stop()


def test_both_framings_refuse_the_same_fields_the_same_way():
    """One validation loop (wire.check_fields): for every command, a protocol 1 frame and an
    ops request with the same wrong field are refused naming the same field and type."""
    from agentproto.core.wire import FrameError, command_from_object

    wrong: dict[str, Any] = {"agent": 5, "dir": 5, "prompt": 5, "session": 5, "text": 5, "request": 5,
                             "answer": 5, "option": 5, "value": [], "turns": 0, "scope": "x", "prompt_id": 5}
    for name, (required, optional) in COMMANDS.items():
        valid = {"agent": "mock", "dir": "/tmp", "prompt": "p", "session": "s1", "text": "t", "request": "r1",
                 "answer": "Cancel", "option": "model", "value": "m", "turns": 1, "scope": "Conversation"}
        base = {key: valid[key] for key in required}
        for key in list(required) + [k for k in optional if k in ("env", "args", "attachments", "turn", "clear_queue")]:
            bad = {**base, key: wrong.get(key, 5)}
            with pytest.raises(FrameError) as frame:
                command_from_object({"id": 1, "cmd": name, **bad})
            with pytest.raises(OpsError) as ops:
                parse_request({"op": name, **bad})
            expected = frame.value.message.split(" must be ", 1)[1]
            assert f"invalid `{key}`: must be {expected}" == ops.value.message, (name, key)
        for key in required:
            if key == "session":
                continue
            with pytest.raises(FrameError) as frame:
                command_from_object({"id": 1, "cmd": name, **{k: v for k, v in base.items() if k != key}})
            with pytest.raises(OpsError) as ops:
                parse_request({"op": name, **{k: v for k, v in base.items() if k != key}})
            assert frame.value.message == f"{name}: missing field `{key}`"
            assert ops.value.message == f"missing required `{key}`"
