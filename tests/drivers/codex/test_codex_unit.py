"""The Codex driver without a process: its TOML writer, its pure mappings, and the driver
fed with app-server lines as the real CLI (0.171.0) wrote them."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from typing import Any

import pytest

from agentproto.drivers.codex.mapping import (
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
from agentproto.drivers.codex.usage import plan_usage_error, plan_usage_of
from scripted import NEVER_RUN, Conversation

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


# -- plan usage (account/rateLimits/read, as 0.171.0 answers it) ----------------------


def bucket(**fields: Any) -> dict[str, Any]:
    return {"limitId": "codex", "limitName": None, "primary": None, "secondary": None, "credits": None,
            "planType": "pro", "rateLimitReachedType": None, **fields}  # fmt: skip


def test_plan_usage_windows_by_length_and_every_bucket():
    main = bucket(primary={"usedPercent": 12, "windowDurationMins": 300, "resetsAt": 1796482800},
                  secondary={"usedPercent": 99.6, "windowDurationMins": 10080, "resetsAt": None})  # fmt: skip
    spark = bucket(limitId="codex_spark", limitName="Spark", primary={"usedPercent": -3, "windowDurationMins": 60},
                   secondary={"usedPercent": 1000, "windowDurationMins": 43200, "resetsAt": -5})  # fmt: skip
    odd = bucket(limitId="codex_odd", primary={"usedPercent": 5, "windowDurationMins": 90},
                 secondary={"usedPercent": 6, "windowDurationMins": 1440})  # fmt: skip
    bare = bucket(limitId="a_first", primary={"usedPercent": 1}, secondary={"usedPercent": "x"})
    bad = bucket(limitId="z_bad", primary={"usedPercent": float("nan")}, secondary={"usedPercent": float("inf")})
    buckets = {"codex": main, "codex_spark": spark, "codex_odd": odd, "a_first": bare, "z_bad": bad}
    result = {"rateLimits": main, "rateLimitsByLimitId": buckets, "rateLimitResetCredits": None}
    usage = plan_usage_of(result, 1796480000_250000000)
    assert usage["plan"] == "pro" and usage["reset_credits"] is None
    assert usage["fetched_at"] == {"secs_since_epoch": 1796480000, "nanos_since_epoch": 250000000}
    assert [(w["label"], w["used_percent"], w["resets_at"]) for w in usage["windows"]] == [
        ("Session", 12, {"secs_since_epoch": 1796482800, "nanos_since_epoch": 0}),
        ("Week", 100, None),
        ("a_first Primary", 1, None),  # no name, no length: its id and its slot
        ("codex_odd 90 min", 5, None),
        ("codex_odd Day", 6, None),
        ("Spark 1h", 0, None),  # clamped to a uint8
        ("Spark 30 days", 255, None),
    ]  # z_bad's NaN and infinity are no percent: left out


def test_plan_usage_reset_credits_only_from_what_codex_gives():
    def credits(summary: Any) -> Any:
        return plan_usage_of({"rateLimits": bucket(planType="unknown"), "rateLimitResetCredits": summary}, 0)

    assert credits(None)["reset_credits"] is None and credits(None)["plan"] is None
    assert credits({"availableCount": None})["reset_credits"] is None
    assert credits({"availableCount": 3, "credits": None})["reset_credits"] == {"available": 3, "next_expires_at": None}
    listed = {"availableCount": 2, "credits": [
        {"id": "a", "status": "available", "expiresAt": 300}, {"id": "b", "status": "redeemed", "expiresAt": 100},
        {"id": "c", "status": "available", "expiresAt": 200}, {"id": "d", "status": "available", "expiresAt": None}]}  # fmt: skip
    assert credits(listed)["reset_credits"] == {"available": 2, "next_expires_at": {"secs_since_epoch": 200, "nanos_since_epoch": 0}}
    assert credits({"availableCount": 2**40})["reset_credits"]["available"] == 2**32 - 1


@pytest.mark.parametrize(
    ("message", "account", "env", "kind"),
    [
        ("chatgpt authentication required to read rate limits", {"account": {"type": "apiKey"}}, {}, "UnsupportedFeature"),
        ("codex account authentication required to read rate limits", {"account": None, "requiresOpenaiAuth": True}, {},
         "AuthRequired"),
        ("codex account authentication required to read rate limits", {"account": None, "requiresOpenaiAuth": True},
         {"OPENAI_API_KEY": "sk"}, "UnsupportedFeature"),
        ("codex account authentication required to read rate limits", {"account": None, "requiresOpenaiAuth": False}, {},
         "UnsupportedFeature"),  # a custom model provider
        ("chatgpt authentication required to read rate limits", None, {}, "UnsupportedFeature"),
        ("codex account authentication required to read rate limits", None, {}, "AuthRequired"),
        ("failed to fetch codex rate limits: GET http://x/wham/usage failed: 401 Unauthorized", None, {}, "AuthRequired"),
        ("failed to fetch codex rate limits: GET http://x/wham/usage failed: 503 Service Unavailable",
         {"account": None, "requiresOpenaiAuth": False}, {}, "ProtocolFailed"),
    ],
)  # fmt: skip
def test_plan_usage_errors_are_typed_by_the_login(message, account, env, kind):
    assert plan_usage_error(message, account, env).kind == kind


# -- the driver fed with real lines, through the scripted transport ----------------------

THREAD = "01a2275f-6163-71d2-ba3b-e0c8d8c4a703"
TURN = "01a2275f-6179-70d3-a6cb-854b3c8cdbf0"
CODEX = {"id": "codex", "path": NEVER_RUN}


def answer(conv: Conversation, method: str, result: Any) -> None:
    """Codex answers the driver's last ``method`` call."""
    conv.feed({"id": conv.transport.sent(method)["id"], "result": result})


def open_codex(**args: Any) -> Conversation:
    """A Codex session through its whole handshake, as app-server 0.171.0 answers it."""
    conv = Conversation()
    conv.open(CODEX, **args)
    answer(conv, "initialize", {"userAgent": "codex_cli_rs/0.171.0 (Linux; x86_64) agentproto (0.1)"})
    assert conv.transport.written[1] == {"method": "initialized"}
    answer(conv, "account/read", {"account": {"type": "apiKey"}, "requiresOpenaiAuth": True})
    answer(conv, "model/list", {"data": [{"id": "gpt-5", "model": "gpt-5", "displayName": "GPT-5", "hidden": False}]})
    answer(conv, "thread/start", {"thread": {"id": THREAD, "name": None}, "model": "gpt-5",
                                  "reasoningEffort": "medium", "sandbox": {"type": "workspaceWrite"}})
    info = conv.reply("open")
    assert info["resume_token"] == THREAD
    assert info["details"]["version"] == "0.171.0"
    return conv


@pytest.mark.parametrize(
    ("account", "listed"),
    [({"type": "chatgpt", "email": "a@b", "planType": "pro"}, True), ({"type": "apiKey"}, False), ({"type": "amazonBedrock"}, False)],
)
def test_plan_usage_is_a_feature_of_a_chatgpt_login_only(account, listed):
    # The pinned Codex cannot be given a ChatGPT login whose account/read succeeds offline
    # (its workspace routing wants an HTTPS backend), so this is fed the reply real 0.171.0
    # gives a ChatGPT login.
    conv = Conversation()
    conv.open(CODEX)
    answer(conv, "initialize", {"userAgent": "codex_cli_rs/0.171.0 (Linux; x86_64) agentproto (0.1)"})
    answer(conv, "account/read", {"account": account, "requiresOpenaiAuth": True})
    answer(conv, "model/list", {"data": []})
    answer(conv, "thread/start", {"thread": {"id": THREAD, "name": None}, "model": "gpt-5", "sandbox": {"type": "readOnly"}})
    features = conv.reply("open")["details"]["capabilities"]["features"]
    assert ("PlanUsage" in features) == listed, features
    conv.close()


@pytest.fixture
def conv():
    conv = open_codex()
    yield conv
    conv.close()


def start(conv: Conversation) -> None:
    conv.command("prompt", text="go")
    request = conv.transport.sent("turn/start")
    assert request["params"]["input"] == [{"type": "text", "text": "go", "text_elements": []}]
    conv.feed({"id": request["id"], "result": {"turn": {"id": TURN, "status": "inProgress"}}})


def note(method: str, **params: Any) -> dict[str, Any]:
    """A notification about our thread's running turn."""
    return {"method": method, "params": {"threadId": THREAD, "turnId": TURN, **params}}


def completed(status: str = "completed", error: Any = None) -> dict[str, Any]:
    return {"method": "turn/completed", "params": {"threadId": THREAD, "turn": {"id": TURN, "status": status, "error": error}}}


def test_open_spawns_app_server_in_the_session_dir(conv):
    spawn = conv.transport.spawn
    assert spawn.argv == [NEVER_RUN, "app-server"] and spawn.cwd == "/"
    assert spawn.wait_group  # Codex keeps the thread locked until its whole group is gone
    assert conv.transport.sent("thread/start")["params"] == {"cwd": "/", "approvalPolicy": "on-request"}


def test_garbled_and_unknown_lines_are_survivable(conv):
    conv.feed(b"{not json")
    conv.feed(b"[1, 2]")
    conv.feed({"method": "brand/newNotification", "params": {"threadId": THREAD}})
    conv.feed({"id": 7, "method": "brand/newRequest", "params": {}})
    assert conv.names() == ["Diagnostic", "Diagnostic"]
    assert conv.transport.written[-1] == {"id": 7, "error": {"code": -32601, "message": "agentproto does not handle brand/newRequest"}}


def test_idle_before_completed_still_ends_the_turn_once(conv):
    start(conv)
    conv.feed(
        note("item/agentMessage/delta", itemId="msg_1", delta="Hi"),
        note("item/completed", item={"type": "agentMessage", "id": "msg_1", "text": "Hi"}),
        {"method": "thread/status/changed", "params": {"threadId": THREAD, "status": {"type": "idle"}}},
        completed(),
        completed(),
    )
    assert conv.names() == ["TurnStarted", "StatusChanged", "TextDelta", "MessageEnded", "TurnEnded", "StatusChanged"]
    assert conv.events("TextDelta") == [{"message_id": "msg_1", "text": "Hi"}]
    assert conv.events("TurnEnded")[0]["stop"] == {"Completed": {"source": "Protocol"}}


def test_deltas_of_one_read_are_one_event(conv):
    start(conv)
    conv.feed(*(note("item/agentMessage/delta", itemId="msg_1", delta=d) for d in ("a", "b", "c")))
    conv.feed(note("item/agentMessage/delta", itemId="msg_1", delta="d"))
    assert conv.events("TextDelta") == [{"message_id": "msg_1", "text": "abc"}, {"message_id": "msg_1", "text": "d"}]


def test_other_threads_are_skipped(conv):
    start(conv)
    conv.feed({"method": "item/agentMessage/delta", "params": {"threadId": "other", "turnId": "x", "itemId": "m", "delta": "no"}})
    assert conv.events("TextDelta") == []


def test_command_approval_options_and_answers(conv):
    start(conv)
    params = {
        "kind": "command", "threadId": THREAD, "turnId": TURN, "itemId": "call_2", "reason": "needs it",
        "command": "/bin/bash -lc 'touch /x'", "cwd": "/w",
        "availableDecisions": ["accept", {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["touch", "/x"]}}, "cancel"],
    }
    conv.feed({"method": "item/commandExecution/requestApproval", "id": 0, "params": params})
    permission = conv.events("RequestOpened")[-1]["Permission"]
    assert permission["options"] == ["AllowOnce", "AllowAlways", "DenyOnce"]
    assert permission["tool"]["kind"] == "Execute" and permission["tool"]["status"] == "Pending"
    assert permission["detail"] == "needs it"
    conv.command("answer", request=permission["id"], answer={"Permission": "AllowAlways"})
    assert conv.transport.written[-1] == {"id": 0, "result": {"decision": {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["touch", "/x"]}}}}
    for rpc_id, reply, decision in [(1, {"Permission": "AllowOnce"}, "accept"), (2, {"Permission": "DenyOnce"}, "decline"),
                                    (3, {"Deny": {"message": "no"}}, "decline"), (4, "Cancel", "cancel")]:
        conv.feed({"method": "item/fileChange/requestApproval", "id": rpc_id, "params": {"threadId": THREAD, "turnId": TURN, "itemId": f"f{rpc_id}"}})
        permission = conv.events("RequestOpened")[-1]["Permission"]
        assert permission["tool"]["kind"] == "Edit"
        conv.command("answer", request=permission["id"], answer=reply)
        assert conv.transport.written[-1] == {"id": rpc_id, "result": {"decision": decision}}


def test_question_maps_both_ways(conv):
    start(conv)
    params = {"threadId": THREAD, "turnId": TURN, "itemId": "q", "isBlocking": True, "questions": [
        {"id": "color", "header": "Color", "question": "Which color?", "isOther": True, "isSecret": False,
         "options": [{"label": "Red", "description": "warm"}, {"label": "Blue", "description": "cool"}]},
        {"id": "name", "header": "Name", "question": "Your name?", "isOther": False, "isSecret": False, "options": None},
    ]}
    conv.feed({"method": "item/tool/requestUserInput", "id": 5, "params": params})
    question = conv.events("RequestOpened")[-1]["Question"]
    q = question["questions"]
    assert q[0]["choices"][0] == {"id": "Red", "label": "Red", "description": "warm"}
    assert q[0]["allows_free_text"] and q[1]["allows_free_text"] and q[1]["choices"] == []
    conv.command("answer", request=question["id"], answer={"Question": [{"Choices": ["Blue"]}, {"Text": "Ada"}]})
    assert conv.transport.written[-1] == {"id": 5, "result": {"answers": {"color": {"answers": ["Blue"]}, "name": {"answers": ["Ada"]}}}}


def test_plan_usage_and_failures(conv):
    start(conv)
    conv.feed(
        note("turn/plan/updated", explanation=None, plan=[{"step": "read", "status": "completed"}]),
        note("thread/tokenUsage/updated", tokenUsage={
            "total": {"totalTokens": 330, "inputTokens": 300, "cachedInputTokens": 20, "outputTokens": 30},
            "last": {"totalTokens": 110, "inputTokens": 100, "cachedInputTokens": 0, "outputTokens": 10},
            "modelContextWindow": 1000}),
        note("error", willRetry=False, error={"message": "bad request", "codexErrorInfo": "badRequest"}),
        completed("failed", {"message": "bad request", "codexErrorInfo": "badRequest"}),
    )
    assert conv.events("PlanUpdated") == [{"entries": [{"text": "read", "status": "Completed"}]}]
    assert conv.events("ContextUsage") == [{"used_tokens": 110, "window_tokens": 1000, "cost_usd": None}]
    assert conv.events("Diagnostic") == [{"level": "Error", "message": "codex: bad request"}]
    ended = conv.events("TurnEnded")[-1]
    assert ended["stop"] == {"Failed": {"message": "bad request"}}
    assert ended["usage"] == {"input_tokens": 300, "cached_input_tokens": 20, "output_tokens": 30}


def test_interrupted_turn_is_cancelled_and_cancel_waits_for_the_turn_id(conv):
    conv.command("prompt", text="go")
    conv.command("cancel")  # before Codex acknowledged: interrupt once it does
    assert conv.transport.written[-1]["method"] == "turn/start"
    conv.feed({"id": conv.transport.sent("turn/start")["id"], "result": {"turn": {"id": TURN, "status": "inProgress"}}})
    interrupt = conv.transport.written[-1]
    assert interrupt["method"] == "turn/interrupt" and interrupt["params"] == {"threadId": THREAD, "turnId": TURN}
    conv.feed(completed("interrupted"))
    assert conv.events("TurnEnded")[-1]["stop"] == "Cancelled"


def test_stalled_turn_fails_and_is_interrupted():
    conv = open_codex(env={"AGENTPROTO_CODEX_STALL_SECS": "0.2"})
    start(conv)
    conv.run_until(lambda: bool(conv.events("TurnEnded")))
    assert "no progress from Codex for 0.2 s" in conv.events("TurnEnded")[0]["stop"]["Failed"]["message"]
    assert conv.transport.written[-1]["method"] == "turn/interrupt"
    # Codex's own (late) end of that turn is not a second end.
    conv.feed(completed("interrupted"))
    assert len(conv.events("TurnEnded")) == 1
    conv.close()


def test_configure_applies_to_the_next_turn_start(conv, tmp_path):
    for option, value in [("model", "any-model-name"), ("effort", "high"), ("sandbox", "read-only"), ("mode", "plan")]:
        conv.command("configure", option=option, value=value)
    assert [error for _, error in conv.replies("configure")] == [None] * 4
    conv.command("prompt", text="go", attachments=["/w/pic.png", "/w/notes.md"])
    params = conv.transport.sent("turn/start")["params"]
    assert params["model"] == "any-model-name" and params["effort"] == "high"
    assert params["sandboxPolicy"] == {"type": "readOnly", "networkAccess": False}
    assert params["collaborationMode"]["mode"] == "plan"
    assert params["input"][1] == {"type": "localImage", "path": "/w/pic.png"}
    assert "/w/notes.md" in params["input"][0]["text"]


def test_configure_takes_any_model_or_effort_name_and_only_a_listed_sandbox(conv):
    # model and effort: any non-empty string (Codex resolves it); sandbox: one of its choices.
    for option, value in [("model", ""), ("effort", 5), ("sandbox", "anywhere"), ("effort", "unlisted")]:
        conv.command("configure", option=option, value=value)
    errors = [error for _, error in conv.replies("configure")]
    assert [e.message if e else None for e in errors] == [
        "invalid configuration: model: expects a model name",
        "invalid configuration: effort: expects a reasoning effort",
        "invalid configuration: sandbox: expects one of read-only, workspace-write, danger-full-access",
        None,
    ]


def test_a_request_codex_resolves_itself_is_withdrawn_once(conv):
    start(conv)
    params = {"threadId": THREAD, "turnId": TURN, "itemId": "f9"}
    conv.feed({"method": "item/fileChange/requestApproval", "id": 9, "params": params})
    request_id = conv.events("RequestOpened")[-1]["Permission"]["id"]
    resolved = {"method": "serverRequest/resolved", "params": {"threadId": THREAD, "requestId": 9}}
    conv.feed(resolved, resolved)  # the second one finds nothing open
    assert conv.events("RequestClosed") == [{"request_id": request_id}]
    # One the app answered is not withdrawn afterwards.
    conv.feed({"method": "item/fileChange/requestApproval", "id": 10, "params": params})
    answered = conv.events("RequestOpened")[-1]["Permission"]["id"]
    conv.command("answer", request=answered, answer={"Permission": "AllowOnce"})
    conv.feed({"method": "serverRequest/resolved", "params": {"threadId": THREAD, "requestId": 10}})
    assert len(conv.events("RequestClosed")) == 2 and conv.events("RequestClosed")[1]["request_id"] == answered


def test_close_shuts_the_agent_down_and_closes_once(conv):
    conv.command("close")
    assert conv.transport.stdin_closed and conv.transport.shutdown_grace == 3.0
    conv.run_until(lambda: ("closed",) in conv.out)
    assert conv.out.count(("closed",)) == 1 and conv.reply("close") is None


def test_codex_exiting_mid_turn_fails_the_session_with_its_stderr(conv):
    start(conv)
    conv.transport.exit("1", "thread panicked")
    conv.settle()
    assert "Failed" in conv.events("TurnEnded")[-1]["stop"]
    (error,) = conv.errors()
    assert error.kind == "ProcessExited" and "thread panicked" in str(error.body())
    assert conv.out[-1] == ("closed",)


def test_a_refused_initialize_is_protocol_failed_quoting_the_line():
    conv = Conversation()
    conv.open(CODEX)
    conv.feed({"id": conv.transport.sent("initialize")["id"], "error": {"code": -32600, "message": "bad client"}})
    ((value, error),) = conv.replies("open")
    assert error.kind == "ProtocolFailed" and "initialize: bad client" in error.message
    assert "bad client" in error.body()["line"]
    conv.close()
