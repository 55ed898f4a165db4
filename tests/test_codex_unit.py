"""The Codex driver without a process: its TOML writer, its pure mappings, and the driver
fed with app-server lines as the real CLI (0.171.0) wrote them."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from typing import Any

import pytest

from agentproto.drivers.base import Launch
from agentproto.drivers.codex import CodexDriver
from agentproto.drivers.codex_mapping import (
    auth_status,
    config_options,
    file_diffs,
    is_auth_error,
    mcp_config,
    plan_entries,
    toml_key,
    toml_value,
    tool_for_item,
)
from agentproto.loop import Loop

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def roundtrip(value: Any) -> Any:
    return tomllib.loads(f"v = {toml_value(value)}")["v"]


# -- TOML --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", "plain", 'say "hi"', "back\\slash", "tab\tnew\nline\r\n", "\x00\x01\x1f\x7f", "é ünï 中文 😀",
     "'''", '"""', "\\u0041", "#not a comment", "\u2028\u2029", "\ufeff"],
)
def test_toml_strings_roundtrip(text):
    assert roundtrip(text) == text


def test_toml_random_strings_roundtrip():
    rng = random.Random(4)
    alphabet = [chr(c) for c in range(0x250)] + ["😀", "\U0010ffff", "\ufffe", "\u00a0"]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert roundtrip(text) == text


def test_toml_lone_surrogate_is_refused_not_mangled():
    with pytest.raises(ValueError, match="surrogate"):
        toml_value("bad \udc80")


def test_toml_nested_values_and_odd_keys():
    value = {
        "plain": 1,
        "with space": [True, False, -3, 2.5],
        "dotted.key": {"quote\"key": "v", "": "empty key"},
        "unicode é": [],
        "nested": {"a": {"b": ["x", {"c": "d"}]}},
    }
    assert roundtrip(value) == value
    assert toml_key("a-b_c9") == "a-b_c9"
    assert toml_key("a.b") == '"a.b"'
    assert tomllib.loads(f"v = {toml_value(float('inf'))}")["v"] == float("inf")


def test_mcp_config_is_codex_mcp_servers_table_with_every_value_in_the_environment():
    servers = [
        {"name": "fs tools", "connection": {"Stdio": {"command": "/bin/x", "args": ["-a", 'q"uote'], "env": {"K": "sk-test-SECRET-1"}}}},
        {"name": "web", "connection": {"Http": {"url": "https://h/mcp", "headers": {
            "Authorization": "Bearer sk-test-SECRET-2", "X": "sk-test-SECRET-3"}}}},
        {"name": "bare", "connection": {"Stdio": {"command": "y"}}},
    ]
    table, env = mcp_config(servers)
    assert table == {
        "fs tools": {
            "command": "/bin/sh",
            "args": ["-c", 'export K="$AGENTPROTO_MCP_0_0"; unset AGENTPROTO_MCP_0_0; exec "$0" "$@"', "/bin/x", "-a", 'q"uote'],
            "env_vars": ["AGENTPROTO_MCP_0_0"],
        },
        "web": {"url": "https://h/mcp", "env_http_headers": {"Authorization": "AGENTPROTO_MCP_1_0", "X": "AGENTPROTO_MCP_1_1"}},
        "bare": {"command": "y", "args": []},
    }
    assert env == {
        "AGENTPROTO_MCP_0_0": "sk-test-SECRET-1",
        "AGENTPROTO_MCP_1_0": "Bearer sk-test-SECRET-2",
        "AGENTPROTO_MCP_1_1": "sk-test-SECRET-3",
    }
    assert roundtrip(table) == table
    assert "SECRET" not in toml_value(table)


def test_the_stdio_wrapper_gives_the_server_exactly_its_env_through_a_real_shell(tmp_path):
    tricky = {"PLAIN": "a b", "QUOTES": "it's \"$HOME\" `x` \\ $(id)\nline 2", "EMPTY": "", "AGENTPROTO_MCP_0_0": "mine"}
    table, env = mcp_config([{"name": "s", "connection": {"Stdio": {
        "command": sys.executable, "args": ["-c", "import json, os; print(json.dumps(dict(os.environ)))", "x y"], "env": tricky}}}])
    entry = table["s"]
    passed = {name: env[name] for name in entry["env_vars"]}  # what Codex forwards (env_vars)
    out = subprocess.run([entry["command"], *entry["args"]], env={"PATH": "/usr/bin:/bin", **passed},
                         capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout)
    for name, value in tricky.items():
        assert seen[name] == value
    assert sorted(n for n in seen if n.startswith("AGENTPROTO_MCP_")) == ["AGENTPROTO_MCP_0_0"]  # the server's own


def test_mcp_values_that_cannot_be_passed_are_refused():
    with pytest.raises(ValueError, match="A-B"):
        mcp_config([{"name": "s", "connection": {"Stdio": {"command": "c", "env": {"A-B": "1"}}}}])
    with pytest.raises(ValueError, match="NUL"):
        mcp_config([{"name": "s", "connection": {"Http": {"url": "u", "headers": {"H": "a\0b"}}}}])


# -- pure mappings -----------------------------------------------------------------------


def test_file_diffs_from_codex_changes():
    changes = [
        {"path": "/w/new.txt", "kind": {"type": "add"}, "diff": "hello\n"},
        {"path": "/w/gone.txt", "kind": {"type": "delete"}, "diff": "bye\n"},
        {"path": "/w/a.py", "kind": {"type": "update", "move_path": None},
         "diff": "--- a/a.py\n+++ b/a.py\n@@ -1,3 +1,3 @@\n keep\n-old\n+new\n tail\n"},
        {"path": "/w/b.py", "kind": {"type": "update", "move_path": "/w/c.py"}, "diff": "@@ -1 +1 @@\n-x\n+y\n"},
    ]
    assert file_diffs(changes) == [
        {"path": "/w/new.txt", "old_text": None, "new_text": "hello\n"},
        {"path": "/w/gone.txt", "old_text": "bye\n", "new_text": ""},
        {"path": "/w/a.py", "old_text": "keep\nold\ntail\n", "new_text": "keep\nnew\ntail\n"},
        {"path": "/w/c.py", "old_text": "x\n", "new_text": "y\n"},
    ]


def test_command_item_maps_to_execute():
    item = {"type": "commandExecution", "id": "call_2", "command": "/bin/bash -lc 'echo made'", "cwd": "/w",
            "status": "completed", "commandActions": [], "aggregatedOutput": "made\n", "exitCode": 0}
    tool = tool_for_item(item)
    assert tool["kind"] == "Execute" and tool["status"] == "Completed" and tool["output"] == "made\n"
    assert tool["input"] == {"Command": {"command": "/bin/bash -lc 'echo made'", "cwd": "/w"}}
    assert tool_for_item(dict(item, exitCode=1))["status"] == "Failed"
    declined = tool_for_item(dict(item, status="declined", aggregatedOutput=None, exitCode=None))
    assert declined["status"] == "Failed" and declined["output"] == "declined"
    assert tool_for_item(dict(item, status="inProgress", exitCode=None))["status"] == "Running"


def test_other_items_map_to_tool_kinds():
    mcp = tool_for_item({"type": "mcpToolCall", "id": "m", "server": "fs", "tool": "read", "status": "completed",
                         "arguments": {"p": 1}, "result": {"content": [{"type": "text", "text": "data"}]}, "error": None})
    assert mcp["kind"] == {"Mcp": {"server": "fs", "tool": "read"}} and mcp["output"] == "data"
    assert mcp["raw"] == {"name": "read", "input": {"p": 1}}
    search = tool_for_item({"type": "webSearch", "id": "w", "query": "codex", "action": {"type": "search", "query": "codex"}})
    assert search["kind"] == "Fetch" and search["input"] == {"Query": "codex"}
    edit = tool_for_item({"type": "fileChange", "id": "f", "status": "inProgress",
                          "changes": [{"path": "/w/x", "kind": {"type": "add"}, "diff": "x\n"}]})
    assert edit["kind"] == "Edit" and edit["input"] == {"Path": "/w/x"} and edit["locations"] == ["/w/x"]
    assert tool_for_item({"type": "agentMessage", "id": "a", "text": "hi"}) is None
    assert tool_for_item({"type": "somethingNew", "id": "n"}) is None


def test_auth_and_plan_and_errors():
    assert auth_status({"account": None, "requiresOpenaiAuth": True}, {})["Unauthenticated"]["login"][0]["Terminal"]["command"] == ["codex", "login"]
    assert auth_status({"account": None, "requiresOpenaiAuth": True}, {"OPENAI_API_KEY": "k"}) == {"Authenticated": {"kind": "ApiKey", "account": None}}
    assert auth_status({"account": {"type": "chatgpt", "email": "a@b", "planType": "pro"}}, {}) == {
        "Authenticated": {"kind": "Subscription", "account": {"email": "a@b", "plan": "pro"}}}
    assert auth_status({"account": None, "requiresOpenaiAuth": False}, {}) == "Unknown"
    assert plan_entries([{"step": "a", "status": "completed"}, {"step": "b", "status": "inProgress"}, {"step": "c", "status": "pending"}]) == [
        {"text": "a", "status": "Completed"}, {"text": "b", "status": "InProgress"}, {"text": "c", "status": "Pending"}]
    assert is_auth_error({"message": "x", "codexErrorInfo": {"httpConnectionFailed": {"httpStatusCode": 401}}})
    assert is_auth_error({"message": "x", "codexErrorInfo": "unauthorized"})
    assert not is_auth_error({"message": "x", "codexErrorInfo": {"httpConnectionFailed": {"httpStatusCode": 500}}})


def test_config_options_keep_unlisted_current_model():
    options = {o["id"]: o for o in config_options([{"model": "m1", "displayName": "M1", "supportedReasoningEfforts": [{"reasoningEffort": "max"}]}], "custom", None, "read-only", "default")}
    assert [c["value"] for c in options["model"]["kind"]["Select"]["choices"]] == ["custom", "m1"]
    assert "max" in [c["value"] for c in options["effort"]["kind"]["Select"]["choices"]]
    assert options["sandbox"]["current"] == "read-only"
    assert all(o["live"] for o in options.values())


# -- the driver fed with real lines ------------------------------------------------------


class FakeHost:
    def __init__(self) -> None:
        self.loop = Loop()
        self.session_id = "s1"
        self.calls: list[tuple[str, Any]] = []

    def opened(self, details, **info):
        self.calls.append(("opened", (details, info)))

    def open_failed(self, error):
        self.calls.append(("open_failed", error))

    def turn_acknowledged(self):
        self.calls.append(("ack", None))

    def emit(self, kind, extensions=None, parent_tool_id=None):
        self.calls.append(("emit", kind))

    def end_turn(self, stop, usage=None):
        self.calls.append(("end_turn", (stop, usage)))

    def update(self, **info):
        self.calls.append(("update", info))

    def diagnostic(self, level, message):
        self.calls.append(("diagnostic", (level, message)))

    def fail(self, error):
        self.calls.append(("fail", error))

    def request_withdrawn(self, request_id):
        self.calls.append(("withdrawn", request_id))

    def closed(self):
        self.calls.append(("closed", None))

    def emitted(self) -> list[Any]:
        return [c[1] for c in self.calls if c[0] == "emit"]


class FakeProc:
    def __init__(self) -> None:
        self.written: list[dict[str, Any]] = []

    def write_json(self, obj: Any) -> None:
        self.written.append(json.loads(json.dumps(obj)))


THREAD = "01a2275f-6163-71d2-ba3b-e0c8d8c4a703"
TURN = "01a2275f-6179-70d3-a6cb-854b3c8cdbf0"


@pytest.fixture
def driver():
    host = FakeHost()
    launch = Launch(agent_id="codex", installation={}, executable="codex", dir="/w")
    d = CodexDriver(host, launch)
    d.transport = FakeProc()  # type: ignore[assignment]
    d.thread_id = THREAD
    yield d
    host.loop.close()


def feed(driver: CodexDriver, *messages: dict[str, Any]) -> None:
    for m in messages:
        driver.on_line(json.dumps(m).encode())


def start(driver: CodexDriver) -> None:
    driver.start_turn("t1", "go", [])
    request = driver.transport.written[-1]
    assert request["method"] == "turn/start"
    assert request["params"]["input"] == [{"type": "text", "text": "go", "text_elements": []}]
    feed(driver, {"id": request["id"], "result": {"turn": {"id": TURN, "status": "inProgress"}}})


def test_garbled_and_unknown_lines_are_survivable(driver):
    driver.on_line(b"{not json")
    driver.on_line(b"[1, 2]")
    feed(driver, {"method": "brand/newNotification", "params": {"threadId": THREAD}})
    feed(driver, {"id": 7, "method": "brand/newRequest", "params": {}})
    diags = [c[1] for c in driver.host.calls if c[0] == "diagnostic"]
    assert len(diags) == 2 and all(level == "Warning" for level, _ in diags)
    assert driver.transport.written[-1] == {"id": 7, "error": {"code": -32601, "message": "agentproto does not handle brand/newRequest"}}


def test_idle_before_completed_still_ends_the_turn_once(driver):
    start(driver)
    feed(
        driver,
        {"method": "item/agentMessage/delta", "params": {"threadId": THREAD, "turnId": TURN, "itemId": "msg_1", "delta": "Hi"}},
        {"method": "item/completed", "params": {"threadId": THREAD, "turnId": TURN, "item": {"type": "agentMessage", "id": "msg_1", "text": "Hi"}}},
        {"method": "thread/status/changed", "params": {"threadId": THREAD, "status": {"type": "idle"}}},
        {"method": "turn/completed", "params": {"threadId": THREAD, "turn": {"id": TURN, "status": "completed", "error": None}}},
        {"method": "turn/completed", "params": {"threadId": THREAD, "turn": {"id": TURN, "status": "completed", "error": None}}},
    )
    names = [c[0] for c in driver.host.calls]
    assert names == ["ack", "emit", "emit", "end_turn"]
    assert driver.host.emitted() == [{"TextDelta": {"message_id": "msg_1", "text": "Hi"}}, {"MessageEnded": {"message_id": "msg_1"}}]
    assert driver.host.calls[-1][1][0] == {"Completed": {"source": "Protocol"}}


def test_other_threads_are_skipped(driver):
    start(driver)
    feed(driver, {"method": "item/agentMessage/delta", "params": {"threadId": "other", "turnId": "x", "itemId": "m", "delta": "no"}})
    assert driver.host.emitted() == []


def test_command_approval_options_and_answers(driver):
    start(driver)
    params = {
        "kind": "command", "threadId": THREAD, "turnId": TURN, "itemId": "call_2", "reason": "needs it",
        "command": "/bin/bash -lc 'touch /x'", "cwd": "/w",
        "availableDecisions": ["accept", {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["touch", "/x"]}}, "cancel"],
    }
    feed(driver, {"method": "item/commandExecution/requestApproval", "id": 0, "params": params})
    request = driver.host.emitted()[-1]["RequestOpened"]
    permission = request["Permission"]
    assert permission["options"] == ["AllowOnce", "AllowAlways", "DenyOnce"]
    assert permission["tool"]["kind"] == "Execute" and permission["tool"]["status"] == "Pending"
    assert permission["detail"] == "needs it"
    driver.answer(request, {"Permission": "AllowAlways"})
    assert driver.transport.written[-1] == {"id": 0, "result": {"decision": {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["touch", "/x"]}}}}
    for rpc_id, answer, decision in [(1, {"Permission": "AllowOnce"}, "accept"), (2, {"Permission": "DenyOnce"}, "decline"),
                                     (3, {"Deny": {"message": "no"}}, "decline"), (4, "Cancel", "cancel")]:
        feed(driver, {"method": "item/fileChange/requestApproval", "id": rpc_id, "params": {"threadId": THREAD, "turnId": TURN, "itemId": f"f{rpc_id}"}})
        request = driver.host.emitted()[-1]["RequestOpened"]
        assert request["Permission"]["tool"]["kind"] == "Edit"
        driver.answer(request, answer)
        assert driver.transport.written[-1] == {"id": rpc_id, "result": {"decision": decision}}


def test_question_maps_both_ways(driver):
    start(driver)
    params = {"threadId": THREAD, "turnId": TURN, "itemId": "q", "isBlocking": True, "questions": [
        {"id": "color", "header": "Color", "question": "Which color?", "isOther": True, "isSecret": False,
         "options": [{"label": "Red", "description": "warm"}, {"label": "Blue", "description": "cool"}]},
        {"id": "name", "header": "Name", "question": "Your name?", "isOther": False, "isSecret": False, "options": None},
    ]}
    feed(driver, {"method": "item/tool/requestUserInput", "id": 5, "params": params})
    request = driver.host.emitted()[-1]["RequestOpened"]
    q = request["Question"]["questions"]
    assert q[0]["choices"][0] == {"id": "Red", "label": "Red", "description": "warm"}
    assert q[0]["allows_free_text"] and q[1]["allows_free_text"] and q[1]["choices"] == []
    driver.answer(request, {"Question": [{"Choices": ["Blue"]}, {"Text": "Ada"}]})
    assert driver.transport.written[-1] == {"id": 5, "result": {"answers": {"color": {"answers": ["Blue"]}, "name": {"answers": ["Ada"]}}}}


def test_plan_usage_and_failures(driver):
    start(driver)
    feed(
        driver,
        {"method": "turn/plan/updated", "params": {"threadId": THREAD, "turnId": TURN, "explanation": None,
                                                    "plan": [{"step": "read", "status": "completed"}]}},
        {"method": "thread/tokenUsage/updated", "params": {"threadId": THREAD, "turnId": TURN, "tokenUsage": {
            "total": {"totalTokens": 330, "inputTokens": 300, "cachedInputTokens": 20, "outputTokens": 30},
            "last": {"totalTokens": 110, "inputTokens": 100, "cachedInputTokens": 0, "outputTokens": 10},
            "modelContextWindow": 1000}}},
        {"method": "error", "params": {"threadId": THREAD, "turnId": TURN, "willRetry": False,
                                        "error": {"message": "bad request", "codexErrorInfo": "badRequest"}}},
        {"method": "turn/completed", "params": {"threadId": THREAD, "turn": {"id": TURN, "status": "failed",
                                                                              "error": {"message": "bad request", "codexErrorInfo": "badRequest"}}}},
    )
    assert {"PlanUpdated": {"entries": [{"text": "read", "status": "Completed"}]}} in driver.host.emitted()
    assert {"ContextUsage": {"used_tokens": 110, "window_tokens": 1000, "cost_usd": None}} in driver.host.emitted()
    assert ("diagnostic", ("Error", "codex: bad request")) in driver.host.calls
    stop, usage = driver.host.calls[-1][1]
    assert stop == {"Failed": {"message": "bad request"}}
    assert usage == {"input_tokens": 300, "cached_input_tokens": 20, "output_tokens": 30}


def test_interrupted_turn_is_cancelled_and_cancel_waits_for_the_turn_id(driver):
    driver.start_turn("t1", "go", [])
    driver.cancel()  # before Codex acknowledged: interrupt once it does
    request = driver.transport.written[-1]
    feed(driver, {"id": request["id"], "result": {"turn": {"id": TURN, "status": "inProgress"}}})
    assert driver.transport.written[-1]["method"] == "turn/interrupt"
    assert driver.transport.written[-1]["params"] == {"threadId": THREAD, "turnId": TURN}
    feed(driver, {"method": "turn/completed", "params": {"threadId": THREAD, "turn": {"id": TURN, "status": "interrupted", "error": None}}})
    assert driver.host.calls[-1] == ("end_turn", ("Cancelled", None))


def test_stalled_turn_fails_and_is_interrupted(driver):
    driver.stall_secs = 0.2
    start(driver)
    loop = driver.host.loop
    deadline = time.monotonic() + 2
    loop.run(until=lambda: any(c[0] == "end_turn" for c in driver.host.calls) or time.monotonic() > deadline)
    stop, _ = next(c[1] for c in driver.host.calls if c[0] == "end_turn")
    assert "no progress from Codex for 0.2 s" in stop["Failed"]["message"]
    assert driver.transport.written[-1]["method"] == "turn/interrupt"
    # Codex's own (late) end of that turn is not a second end.
    feed(driver, {"method": "turn/completed", "params": {"threadId": THREAD, "turn": {"id": TURN, "status": "interrupted"}}})
    assert [c[0] for c in driver.host.calls].count("end_turn") == 1


def test_configure_applies_to_the_next_turn_start(driver):
    done: list[Any] = []
    driver.configure("model", "any-model-name", done.append)
    driver.configure("effort", "high", done.append)
    driver.configure("sandbox", "read-only", done.append)
    driver.configure("mode", "plan", done.append)
    assert done == [None, None, None, None]
    driver.start_turn("t1", "go", ["/w/pic.png", "/w/notes.md"])
    params = driver.transport.written[-1]["params"]
    assert params["model"] == "any-model-name" and params["effort"] == "high"
    assert params["sandboxPolicy"] == {"type": "readOnly", "networkAccess": False}
    assert params["collaborationMode"]["mode"] == "plan"
    assert params["input"][1] == {"type": "localImage", "path": "/w/pic.png"}
    assert "/w/notes.md" in params["input"][0]["text"]
    assert driver.validate_config({"id": "model", "kind": {"Select": {"choices": []}}}, "unlisted") is None


def test_a_request_codex_resolves_itself_is_withdrawn_once(driver):
    start(driver)
    params = {"threadId": THREAD, "turnId": TURN, "itemId": "f9"}
    feed(driver, {"method": "item/fileChange/requestApproval", "id": 9, "params": params})
    request_id = driver.host.emitted()[-1]["RequestOpened"]["Permission"]["id"]
    resolved = {"method": "serverRequest/resolved", "params": {"threadId": THREAD, "requestId": 9}}
    feed(driver, resolved, resolved)  # the second one finds nothing open
    assert [c for c in driver.host.calls if c[0] == "withdrawn"] == [("withdrawn", request_id)]
    # One the app answered is not withdrawn afterwards.
    feed(driver, {"method": "item/fileChange/requestApproval", "id": 10, "params": params})
    answered = driver.host.emitted()[-1]["RequestOpened"]
    driver.answer(answered, {"Permission": "AllowOnce"})
    feed(driver, {"method": "serverRequest/resolved", "params": {"threadId": THREAD, "requestId": 10}})
    assert len([c for c in driver.host.calls if c[0] == "withdrawn"]) == 1
