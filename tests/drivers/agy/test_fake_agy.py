"""The Antigravity test double (tests/fakes/fake_agy.py) behaves as seed 003 says ``agy`` does.

Driven directly as a subprocess (no agentproto), with a private HOME per test; the MCP
server and the hook listener are tiny stdlib HTTP servers on 127.0.0.1 in the test.
"""

from __future__ import annotations

import json
import os
import select
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

FAKE = Path(__file__).resolve().parents[2] / "fakes" / "fake_agy.py"
STREAM = ["--input-format", "stream-json", "--output-format", "stream-json"]
UUID_LEN = 36


def agy_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_AGY")}
    env.update(HOME=str(home), **extra)
    return env


def run(home: Path, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FAKE), *args], cwd=home, env=agy_env(home, **env), input=stdin,
                          capture_output=True, text=True, timeout=10)


def user(content: Any) -> dict[str, Any]:
    return {"event": "user", "message": {"role": "user", "content": content}}


def turn_text(items: Any) -> str:
    """A user message carrying its own model script (the FAKE_AGY_TURN directive)."""
    return "FAKE_AGY_TURN: " + json.dumps(items)


class Agy:
    """One print-mode agy process on the seed's launch line, read line by line."""

    def __init__(self, home: Path, *extra: str, skip: bool = True, add_dir: Path | None = None, **env: str) -> None:
        argv = [str(FAKE), *STREAM] + (["--dangerously-skip-permissions"] if skip else [])
        argv += ["--add-dir", str(add_dir or home / "session"), *extra, "--print", ""]
        self.proc = subprocess.Popen(argv, cwd=home, env=agy_env(home, **env), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self.buffer = b""

    def line(self, timeout: float = 5.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([self.proc.stdout], [], [], left)[0], f"no line; have {self.buffer!r}"
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            assert chunk, f"stdout closed; have {self.buffer!r}"
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\n", 1)
        value = json.loads(raw)
        assert isinstance(value, dict)
        return value

    def send(self, message: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((message if isinstance(message, str) else json.dumps(message)).encode() + b"\n")
        self.proc.stdin.flush()

    def turn(self, content: Any) -> list[dict[str, Any]]:
        self.send(user(content))
        return self.until_result()

    def until_result(self) -> list[dict[str, Any]]:
        events = [self.line()]
        while events[-1]["event"] != "result":
            events.append(self.line())
        return events

    def close(self) -> tuple[int, str]:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=5)
        return code, self.proc.stderr.read().decode()

    def rest(self) -> bytes:
        assert self.proc.stdout is not None
        return self.buffer + self.proc.stdout.read()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "session").mkdir()
    return tmp_path


@pytest.fixture
def agy(home: Path) -> Iterator[Any]:
    started: list[Agy] = []

    def start(*extra: str, **kw: Any) -> Agy:
        started.append(Agy(home, *extra, **kw))
        return started[-1]

    yield start
    for process in started:
        process.kill()


def steps(events: list[dict[str, Any]], step_type: str | None = None) -> list[dict[str, Any]]:
    found = [e["step_update"] for e in events if e["event"] == "step_update"]
    return [s for s in found if step_type is None or s["step_type"] == step_type]


def plugin(home: Path, files: dict[str, Any], name: str = "agentproto") -> Path:
    """``session/.agents/plugins/<name>/`` with plugin.json and ``files`` (dicts are written as JSON)."""
    root = home / "session" / ".agents" / "plugins" / name
    (root / "rules").mkdir(parents=True, exist_ok=True)
    (root / "plugin.json").write_text(json.dumps({"name": name}))
    for relative, content in files.items():
        (root / relative).write_text(content if isinstance(content, str) else json.dumps(content))
    return root


class Recorder(ThreadingHTTPServer):
    """A loopback HTTP server whose handler answers through ``answer(path, headers, body)``."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.seen: list[tuple[str, dict[str, str], Any]] = []
        super().__init__(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    server: Recorder

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
        self.server.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        status, headers, reply = self.server.answer(self.path, self.headers, body)
        data = reply if isinstance(reply, bytes) else b"" if reply is None else json.dumps(reply).encode()
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Any]:
    servers: list[Recorder] = []

    def start(answer: Any) -> Recorder:
        servers.append(Recorder(answer))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


# -- the command line


def test_version_and_models_on_the_executable(home: Path) -> None:
    assert os.access(FAKE, os.X_OK) and FAKE.read_text().startswith("#!/usr/bin/env python3\n")
    version = run(home, "--version")
    assert (version.returncode, version.stdout) == (0, "1.1.24\n")
    listed = run(home, "models")
    assert listed.returncode == 0
    ids = [line.split("\t")[0] for line in listed.stdout.splitlines()]
    assert len(ids) >= 3 and all("\t" in line for line in listed.stdout.splitlines())
    as_json = run(home, "--output-format=json", "models")
    assert [m["id"] for m in json.loads(as_json.stdout)["models"]] == ids
    chosen = run(home, "models", FAKE_AGY_MODELS="m-one=Model One,m-two")
    assert chosen.stdout == "m-one\tModel One\nm-two\tm-two\n"


def test_signed_out_models_and_print_mode_fail(home: Path) -> None:
    models = run(home, "models", FAKE_AGY_SIGNED_OUT="1")
    assert models.returncode == 1 and "Please sign in" in models.stderr and models.stdout == ""
    launch = run(home, *STREAM, "--dangerously-skip-permissions", "--print", "", FAKE_AGY_SIGNED_OUT="1")
    assert launch.returncode == 1
    (only,) = [json.loads(line) for line in launch.stdout.splitlines()]  # no init: the ERROR result alone
    assert only["event"] == "result"
    result = only["result"]
    assert (result["status"], result["error"], result["conversation_id"]) == \
        ("ERROR", "authentication failed or timed out", "")
    assert result["usage"]["total_tokens"] == 0 and "error: authentication failed" in launch.stderr
    quiet = run(home, *STREAM, "--dangerously-skip-permissions", "--print", "", FAKE_AGY_SIGNED_OUT="stderr")
    assert (quiet.returncode, quiet.stdout) == (1, "")  # says it on stderr only
    assert "error: Please sign in" in quiet.stderr
    worded = run(home, *STREAM, "--dangerously-skip-permissions", "--print", "", FAKE_AGY_SIGNED_OUT="Unauthenticated")
    (only,) = [json.loads(line) for line in worded.stdout.splitlines()]
    assert (worded.returncode, only["result"]["error"]) == (1, "Unauthenticated")


@pytest.mark.parametrize(("args", "message"), [
    (["--bogus"], "flag provided but not defined: -bogus"),
    (["--print"], "flag needs an argument: -print"),
    (["-p", "--model", "x"], 'Error: unexpected argument "x".'),  # -p took "--model" as its prompt
    (["--dangerously-skip-permissions=maybe", "-p", "hi"], 'invalid boolean value "maybe"'),
    (["usage"], 'Error: unexpected argument "usage".'),
    (["--input-format", "stream-json", "--print", ""], "requires --output-format stream-json"),
])
def test_usage_errors_exit_2_on_stderr(home: Path, args: list[str], message: str) -> None:
    done = run(home, *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert message in done.stderr


def test_a_bare_p_takes_the_next_flag_as_its_prompt(home: Path) -> None:
    done = run(home, "--output-format", "json", "-p", "--model")
    assert done.returncode == 0
    result = json.loads(done.stdout)
    assert (result["status"], result["response"]) == ("SUCCESS", "echo: --model\n")
    assert len(result["conversation_id"]) == UUID_LEN


def test_unknown_model_and_conversation_fail_at_startup(home: Path) -> None:
    for flag, value, words in (("--model", "gemini-9", 'model "gemini-9" is not recognized'),
                               ("--conversation", "no-such-id", 'conversation "no-such-id" not found'),
                               ("--conversation", "../../etc/passwd", "not found")):
        done = run(home, *STREAM, flag, value, "--print", "")
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        assert done.returncode == 1 and [e["event"] for e in lines] == ["result"]
        assert words in lines[0]["result"]["error"]


# -- print mode with stream-json


def test_init_comes_first_then_a_text_turn(agy: Any, home: Path) -> None:
    process = agy()
    init = process.line()  # written before any input
    assert init["event"] == "init" and len(init["conversation_id"]) == UUID_LEN
    assert init["init"]["cwd"] == str(home) and init["init"]["permission_mode"] == "always-proceed"
    assert init["init"]["model"] and "run_command" in init["init"]["tools"] and "call_mcp_tool" in init["init"]["tools"]
    events = process.turn([{"type": "text", "text": "hello there agy friend"}])
    (prompt,) = steps(events, "user_input")
    assert (prompt["state"], prompt["step_index"], prompt["conversation_id"]) == ("DONE", 0, init["conversation_id"])
    reply = steps(events, "agent_response")
    assert [s["state"] for s in reply] == ["ACTIVE"] * (len(reply) - 1) + ["DONE"] and len(reply) >= 3
    assert {s["step_index"] for s in reply} == {1}
    assert "".join(s.get("text_delta", "") for s in reply) == "echo: hello there agy friend\n"
    done = reply[-1]
    assert done["text_delta"] == "\n" and done["duration_seconds"] >= 0
    assert set(done["usage"]) == {"input_tokens", "output_tokens", "thinking_tokens", "cache_read_tokens",
                                  "total_tokens"}
    result = events[-1]["result"]
    assert (result["status"], result["response"], result["num_turns"]) == ("SUCCESS", "echo: hello there agy friend\n", 1)
    assert result["usage"] == done["usage"] and "error" not in result
    assert process.turn("plain string content")[-1]["result"]["num_turns"] == 2
    assert process.close()[0] == 0


def test_input_lines_that_fail_or_are_ignored(agy: Any) -> None:
    process = agy()
    process.line()
    failing = [
        (user([{"type": "text", "text": "look"}, {"type": "image", "source": {}}]),
         'stream input content block type "image" is not supported'),
        ({"event": "control_request", "request": {"subtype": "interrupt"}},
         'stream input "control_request" messages are not supported yet'),
        ({"type": "user", "message": {}}, 'stream input message is missing the "event" field'),
        ({"event": "user", "text": "hi"}, 'stream input "user" message is missing the "message" field'),
        ({"event": "user", "message": {"text": "hi"}}, 'stream input "user" message has no content'),
        ("this is not json", "invalid stream input message: Expecting value: line 1 column 1 (char 0)"),
        (user([{"type": "text", "text": 3}]), 'stream input "text" content block has no "text" string'),
    ]
    for line, error in failing:
        process.send(line)
        (event,) = process.until_result()
        assert (event["result"]["status"], event["result"]["error"]) == ("ERROR", error)
    broken = process.turn(turn_text([{"exit": "soon"}]))[-1]["result"]  # a turn, failed by its script
    assert broken["error"] == "fake_agy script: invalid literal for int() with base 10: 'soon'"
    process.send({"event": "assistant", "message": {}})  # ignored: no result of its own
    events = process.turn("still here")
    assert events[0]["event"] == "step_update" and events[-1]["result"]["response"] == "echo: still here\n"
    assert events[-1]["result"]["num_turns"] == 2
    code, stderr = process.close()
    assert code == 0 and 'warning: ignoring unsupported stream input message event "assistant"' in stderr
    assert 'error: stream input content block type "image" is not supported' in stderr


def test_tools_really_run_and_file_contents_stay_off_the_stream(agy: Any, home: Path) -> None:
    process = agy()
    process.line()
    events = process.turn(turn_text([
        {"text": "working", "tools": [
            {"name": "run_command", "parameters": {"CommandLine": "echo made > made.txt && echo ok"}},
            {"name": "write_to_file", "parameters": {"TargetFile": "{cwd}/w.txt", "CodeContent": "secret body\n"}},
            {"name": "view_file", "parameters": {"AbsolutePath": "{cwd}/w.txt"}},
            {"name": "view_file", "parameters": {"AbsolutePath": "{cwd}/missing.txt"}}]},
        {"tools": [{"name": "replace_file_content", "parameters": {
            "TargetFile": "w.txt", "TargetContent": "secret", "ReplacementContent": "public"}}]},
        {"text": "last tool said: {tool_output}", "hidden_steps": 1}]))
    assert (home / "made.txt").read_text() == "made\n" and (home / "w.txt").read_text() == "public body\n"
    tools = steps(events, "tool")
    by_index: dict[int, list[dict[str, Any]]] = {}
    for s in tools:
        by_index.setdefault(s["step_index"], []).append(s)
    assert [[s["state"] for s in group] for group in by_index.values()] == [["ACTIVE", "DONE"]] * 3 + \
        [["ACTIVE", "ERROR"], ["ACTIVE", "DONE"]]
    run_done, write_done, view_done, missing, replace_done = (group[-1] for group in by_index.values())
    assert run_done["tool_name"] == "run_command" and run_done["tool_info"]["output"] == "ok\n"
    assert run_done["tool_info"]["parameters"] == {"CommandLine": "echo made > made.txt && echo ok"}
    assert write_done["tool_info"]["parameters"] == {"TargetFile": f"{home}/w.txt"}  # the content is not shown
    assert view_done["tool_info"]["output"] == "secret body\n"
    assert missing["tool_info"]["error"]["type"] == "TOOL_ERROR" and "no such file" in missing["tool_info"]["error"][
        "message"]
    assert "secret" not in json.dumps(replace_done["tool_info"]["parameters"])
    tool_only = [s for s in steps(events, "agent_response") if s["step_index"] == replace_done["step_index"] - 1]
    assert [s["state"] for s in tool_only] == ["DONE"] and "text_delta" not in tool_only[0]  # no text, just usage
    result = events[-1]["result"]
    assert result["response"] == f"last tool said: Edited {home}/w.txt\n"
    indexes = [s["step_index"] for s in steps(events)]
    assert indexes == sorted(indexes) and indexes[-1] == replace_done["step_index"] + 2  # one index unseen


def test_without_skip_permissions_a_command_is_auto_denied(agy: Any, home: Path) -> None:
    process = agy(skip=False)
    assert process.line()["init"]["permission_mode"] == "request-review"
    events = process.turn(turn_text([{"tools": [{"name": "run_command", "parameters": {"CommandLine": "touch x"}}]},
                                     "never said"]))
    result = events[-1]["result"]
    assert (result["status"], result["response"]) == ("SUCCESS", "")
    assert result["denied_actions"] == [{"action": "command", "display_name": "RunCommand"}]
    assert not steps(events, "tool") and not (home / "x").exists()
    assert "auto-denied" in process.close()[1]


def test_usage_errors_and_deaths_come_from_the_script_file(agy: Any, home: Path) -> None:
    script = home / "script.json"
    script.write_text(json.dumps({"turns": [
        {"text": "thoughtful", "thinking_tokens": 7, "usage": {"input_tokens": 5000, "cache_read_tokens": 800}},
        [{"error": "quota exhausted"}],
        ["{history} turns before this one", {"raw": ["not json at all", '{"event":"novel","novel":{}}']},
         {"exit": 3, "stderr": "boom\n"}]]}))
    process = agy(FAKE_AGY_SCRIPT=str(script))
    process.line()
    first = process.turn("one")
    done = steps(first, "agent_response")[-1]
    assert done["usage"] == {"input_tokens": 5000, "output_tokens": 8, "thinking_tokens": 7,
                             "cache_read_tokens": 800, "total_tokens": 5008}
    failed = process.turn("two")[-1]["result"]
    assert (failed["status"], failed["error"], failed["num_turns"]) == ("ERROR", "quota exhausted", 2)
    assert failed["usage"] == done["usage"]
    process.send(user("three"))
    assert process.proc.wait(timeout=5) == 3
    lines = [json.loads(line) if line.startswith(b"{") else line for line in process.rest().splitlines()]
    assert lines[-2:] == [b"not json at all", {"event": "novel", "novel": {}}]  # and no result
    assert "".join(s.get("text_delta", "") for s in steps([x for x in lines if isinstance(x, dict)])) == \
        "2 turns before this one\n"
    assert "boom" in process.proc.stderr.read().decode()


# -- plugins: rules, MCP, hooks


def test_rules_are_loaded_cut_at_24000_bytes_and_seen_by_the_model(agy: Any, home: Path) -> None:
    guidance = "Be brief. " + "x" * 30_000
    plugin(home, {"rules/AGENTS.md": guidance,
                  "rules/notes.md": "---\ntrigger: always_on\n---\nThe sky is green.\n",
                  "rules/manual.md": "---\ntrigger: manual\n---\nOnly when asked.\n"})
    (home / "session" / ".agents" / "plugins" / "broken").mkdir()  # no plugin.json: skipped
    dump = home / "dump.json"
    process = agy(FAKE_AGY_DUMP=str(dump))
    process.line()
    reply = process.turn(turn_text("{rule_files}|{rules}"))[-1]["result"]["response"]
    files, _, text = reply.partition("|")
    assert files == "agentproto/rules/AGENTS.md, agentproto/rules/notes.md"
    assert "The sky is green." in text and "Only when asked" not in text and text.startswith("Be brief. ")
    loaded = json.loads(dump.read_text())
    assert stat.S_IMODE(dump.stat().st_mode) == 0o600
    agents = next(r for r in loaded["rules"] if r["file"].endswith("AGENTS.md"))
    assert (agents["bytes"], agents["loaded_bytes"], len(agents["text"])) == (len(guidance), 24_000, 24_000)
    assert [r["trigger"] for r in loaded["rules"]] == ["always_on", "manual", "always_on"]
    assert loaded["plugins"] == ["agentproto"] and any("broken" in w for w in loaded["warnings"])


def mcp_answer(path: str, headers: Any, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    """A Streamable HTTP MCP server: a session id from initialize, required on every later request."""
    if "id" not in body:
        return 202, {}, None
    if body["method"] == "initialize":
        result = {"protocolVersion": body["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "tiny", "version": "1"}}
        return 200, {"Mcp-Session-Id": "s-42"}, {"jsonrpc": "2.0", "id": body["id"], "result": result}
    if headers.get("Mcp-Session-Id") != "s-42":
        return 400, {}, {"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32600, "message": "no session"}}
    if body["method"] == "tools/list":
        tool = {"name": "shout", "description": "Upper-cases text",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}
        return 200, {}, {"jsonrpc": "2.0", "id": body["id"], "result": {"tools": [tool]}}
    text = body["params"]["arguments"].get("text", "")
    result = {"content": [{"type": "text", "text": text.upper()}], "isError": text == "fail"}
    reply = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": result})
    # Answered as an SSE stream, with a notification first: the client must pick the reply by its id.
    progress = json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}})
    return 200, {"Content-Type": "text/event-stream"}, f"data: {progress}\n\nevent: message\ndata: {reply}\n\n".encode()


def test_mcp_tool_of_the_plugin_is_called_over_streamable_http(agy: Any, home: Path, server: Any) -> None:
    mcp = server(mcp_answer)
    plugin(home, {"mcp_config.json": {"mcpServers": {"tools": {"url": f"{mcp.url}/tok/mcp/tools",
                                                              "headers": {"Authorization": "Bearer sekrit"}}}}})
    dump = home / "dump.json"
    process = agy(FAKE_AGY_DUMP=str(dump))
    process.line()
    call = {"name": "call_mcp_tool", "parameters": {"ServerName": "agentproto_tools", "ToolName": "shout",
                                                     "Arguments": {"text": "hello"}}}
    failing = {"name": "call_mcp_tool", "parameters": {"ServerName": "agentproto_tools", "ToolName": "shout",
                                                        "Arguments": {"text": "fail"}}}
    events = process.turn(turn_text([{"tools": [call, failing]}, "{mcp_tools}: {tool_output}"]))
    done = [s for s in steps(events, "tool") if s["state"] != "ACTIVE"]
    assert done[0]["state"] == "DONE" and done[0]["tool_info"]["output"] == "HELLO"
    assert done[0]["tool_info"]["parameters"] == call["parameters"]
    assert done[1]["state"] == "ERROR" and done[1]["tool_info"]["error"]["message"] == "FAIL"
    assert events[-1]["result"]["response"] == "agentproto_tools/shout: FAIL\n"
    methods = [(body["method"], headers.get("mcp-session-id")) for _, headers, body in mcp.seen]
    assert methods == [("initialize", None), ("notifications/initialized", "s-42"), ("tools/list", "s-42"),
                       ("tools/call", "s-42"), ("tools/call", "s-42")]
    assert all(path == "/tok/mcp/tools" and h["authorization"] == "Bearer sekrit" for path, h, _ in mcp.seen)
    schema = home / ".gemini" / "antigravity-cli" / "mcp" / "agentproto_tools" / "shout.json"
    assert json.loads(schema.read_text())["inputSchema"]["properties"] == {"text": {"type": "string"}}
    assert "sekrit" not in dump.read_text() and "/tok/" not in dump.read_text()


def hook_command(url: str) -> str:
    if shutil.which("curl"):
        return f"curl -s --noproxy '*' -X POST -H 'Content-Type: application/json' --data-binary @- {url}"
    post = "import sys,urllib.request as u;print(u.urlopen(u.Request(sys.argv[1],sys.stdin.buffer.read())).read().decode())"
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(post)} {url}"


def test_hooks_run_through_curl_and_an_injected_step_reaches_the_model(agy: Any, home: Path, server: Any) -> None:
    def answer(path: str, headers: Any, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        if path.endswith("/PreInvocation") and body["invocationNum"] == 0:
            return 200, {}, {"injectSteps": [{"userMessage": "remember the llama"}]}
        if path.endswith("/PreToolUse"):
            return 200, {}, {"decision": "deny", "reason": "no shell today"}
        return 200, {}, {}

    hooks = server(answer)
    plugin(home, {"hooks.json": {
        "SessionStart": [{"type": "command", "command": hook_command(f"{hooks.url}/t/hook/SessionStart")}],
        "PreInvocation": [{"type": "command", "command": hook_command(f"{hooks.url}/t/hook/PreInvocation"),
                           "timeout": 10}],
        "PreToolUse": [{"matcher": "run_command", "hooks": [{"type": "command",
                                                             "command": hook_command(f"{hooks.url}/t/hook/PreToolUse")}]}],
        "Stop": [{"matcher": "*", "hooks": [{"type": "command", "command": "true"}]}]}})  # wrong shape: skipped
    process = agy()
    conversation = process.line()["conversation_id"]
    events = process.turn(turn_text([
        {"text": "trying", "tools": [{"name": "run_command", "parameters": {"CommandLine": "touch ran"}}]},
        "{echo} after {tool_output}"]))
    assert [s["state"] for s in steps(events, "user_input")] == ["DONE", "DONE"]  # the prompt, then the injected one
    response = events[-1]["result"]["response"]
    assert response.startswith("echo: FAKE_AGY_TURN: [") and events[-1]["result"]["num_turns"] == 1
    assert response.endswith(" [injected: remember the llama] after tool call denied by pre-tool hook: no shell today\n")
    denied = [s for s in steps(events, "tool") if s["state"] != "ACTIVE"]
    assert denied[0]["state"] == "ERROR" and not (home / "ran").exists()
    seen = [(path.rsplit("/", 1)[1], body) for path, _, body in hooks.seen]
    assert [name for name, _ in seen] == ["SessionStart", "PreInvocation", "PreToolUse", "PreInvocation"]
    start, first, _, second = (body for _, body in seen)
    assert (start["hookEventName"], start["source"], start["conversationId"]) == ("SessionStart", "startup", conversation)
    assert (first["invocationNum"], first["initialNumSteps"], second["invocationNum"]) == (0, 0, 1)
    assert first["workspacePaths"] == [str(home), str(home / "session")]
    assert "lifecycle events take flat handlers" in process.close()[1]


# -- signals and conversations


def proc_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie waiting for init counts as gone
    except FileNotFoundError:
        return True


def test_sigint_cuts_a_tool_step_and_kills_its_command(agy: Any, home: Path) -> None:
    process = agy()
    conversation = process.line()["conversation_id"]
    process.send(user(turn_text([{"tools": [{"name": "run_command", "parameters": {
        "CommandLine": "sleep 30 & echo $! > sleep.pid; wait; echo never > late.txt"}}]}, "unreached"])))
    seen = [process.line(30) for _ in range(3)]
    tool = seen[-1]["step_update"]
    assert (tool["step_type"], tool["state"]) == ("tool", "ACTIVE")
    pidfile = home / "sleep.pid"
    deadline = time.monotonic() + 30
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.01)
    sleeper = int(pidfile.read_text())
    os.kill(process.proc.pid, signal.SIGINT)
    event = process.line(30)
    assert event["event"] == "result"  # and no DONE for the tool step before it
    assert (event["result"]["status"], event["result"]["error"], event["result"]["conversation_id"]) == \
        ("ERROR", "interrupted", conversation)
    assert process.proc.wait(timeout=30) == 130
    assert process.proc.stderr.read().decode().endswith("error: interrupted\n")
    assert process.rest() == b""
    deadline = time.monotonic() + 30
    while not proc_gone(sleeper):
        assert time.monotonic() < deadline, "the command's child outlived the interrupt"
        time.sleep(0.01)
    assert not (home / "late.txt").exists()
    # The cut-off turn is part of the conversation: a new process goes on from it.
    resumed = agy("--conversation", conversation)
    assert resumed.line()["conversation_id"] == conversation
    assert resumed.line()["step_update"]["step_type"] == "system_message"
    assert resumed.turn(turn_text("{history} earlier"))[-1]["result"]["response"] == "1 earlier\n"


def test_sigint_stops_the_whole_command_before_any_of_it_dies(agy: Any, home: Path) -> None:
    # The shell waits for its first child only, then would write late.txt: if that child
    # died while the shell could still run (killed one by one, the shell last, behind 40
    # other children), the shell went on. The whole tree is frozen before anything dies.
    process = agy()
    process.line()
    command = ("sleep 30 & first=$!; for i in $(seq 40); do sleep 30 & done; echo $first > sleep.pid; "
               "wait $first; echo never > late.txt")
    process.send(user(turn_text([{"tools": [{"name": "run_command", "parameters": {"CommandLine": command}}]}])))
    while process.line(30).get("step_update", {}).get("step_type") != "tool":
        pass
    pidfile = home / "sleep.pid"
    deadline = time.monotonic() + 30
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.01)
    os.kill(process.proc.pid, signal.SIGINT)
    assert process.line(30)["result"]["error"] == "interrupted"
    assert process.proc.wait(timeout=30) == 130
    assert not (home / "late.txt").exists()
    # Killed before agy exited; dying is the kernel's next step for it, not always done yet.
    first, deadline = int(pidfile.read_text()), time.monotonic() + 5
    while not proc_gone(first) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc_gone(first)


def test_sigint_while_idle_exits_without_a_result(agy: Any) -> None:
    process = agy()
    process.line()
    os.kill(process.proc.pid, signal.SIGINT)
    assert process.proc.wait(timeout=5) == 130
    assert process.rest() == b"" and process.proc.stderr.read().decode() == "error: interrupted\n"


def test_conversation_keeps_history_and_totals_across_processes(agy: Any, home: Path) -> None:
    first = agy("--model", "gemini-3-flash")
    init = first.line()
    assert init["init"]["model"] == "gemini-3-flash"
    conversation = init["conversation_id"]
    one = first.turn("the first question")
    assert first.close()[0] == 0
    record = home / ".gemini" / "antigravity-cli" / "conversations" / f"{conversation}.json"
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    second = agy("--conversation", conversation)
    again = second.line()
    assert again["conversation_id"] == conversation and again["init"]["model"] != "gemini-3-flash"  # --model decides
    note = second.line()["step_update"]
    assert (note["step_type"], note["state"]) == ("system_message", "DONE")
    assert note["step_index"] == max(s["step_index"] for s in steps(one)) + 1
    two = second.turn(turn_text("{history} earlier; previous was {previous}; model {model}"))
    result = two[-1]["result"]
    assert result["response"] == f"1 earlier; previous was the first question; model {again['init']['model']}\n"
    assert result["num_turns"] == 2 and steps(two)[0]["step_index"] == note["step_index"] + 1
    per_call = [s["usage"] for s in steps(one + two, "agent_response") if s["state"] == "DONE"]
    assert result["usage"] == {k: sum(u[k] for u in per_call) for k in per_call[0]}
    assert result["usage"]["total_tokens"] > one[-1]["result"]["usage"]["total_tokens"]


STDIO_SERVER = r"""
import json, os, sys
open("server.pid", "w").write(str(os.getpid()))
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "stdio", "version": "1"}}
    elif msg["method"] == "tools/list":
        result = {"tools": [{"name": "where", "inputSchema": {"type": "object"}}]}
    else:
        result = {"content": [{"type": "text", "text": os.getcwd() + " " + os.environ["GREETING"]}]}
    print(json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}), flush=True)
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""


def test_stdio_mcp_server_of_the_plugin(agy: Any, home: Path) -> None:
    (home / "server.py").write_text(STDIO_SERVER)
    plugin(home, {"mcp_config.json": {"mcpServers": {
        "local": {"command": sys.executable, "args": [str(home / "server.py")], "env": {"GREETING": "hi"}},
        "down": {"url": "http://127.0.0.1:9/mcp"}}}})
    process = agy()
    process.line()
    call = {"name": "call_mcp_tool", "parameters": {"ServerName": "agentproto_local", "ToolName": "where"}}
    down = {"name": "call_mcp_tool", "parameters": {"ServerName": "agentproto_down", "ToolName": "x"}}
    events = process.turn(turn_text([{"tools": [call, down]}, "{mcp_tools}"]))
    first, second = (s for s in steps(events, "tool") if s["state"] != "ACTIVE")
    assert first["tool_info"]["output"] == f"{home} hi"
    assert second["state"] == "ERROR" and "agentproto_down" in second["tool_info"]["error"]["message"]
    assert events[-1]["result"]["response"] == "agentproto_local/where\n"
    code, stderr = process.close()
    assert code == 0 and "MCP server agentproto_down: MCP server unreachable" in stderr
    assert proc_gone(int((home / "server.pid").read_text()))  # nothing the process started outlives it


def test_text_output_and_continue(home: Path) -> None:
    first = run(home, "-p", "hi there")
    assert (first.returncode, first.stdout) == (0, "echo: hi there\n")
    again = run(home, "--continue", "--output-format", "json", "-p", turn_text("{history} before: {previous}"))
    assert json.loads(again.stdout)["response"] == "1 before: hi there\n"
    failed = run(home, "-p", turn_text([{"error": "no quota"}]))
    assert (failed.returncode, failed.stdout, failed.stderr) == (1, "", "error: no quota\n")


def test_sigint_during_a_slow_reply(agy: Any) -> None:
    process = agy()
    process.line()
    process.send(user(turn_text([{"text": "quick", "tools": [{"name": "list_dir", "parameters": {"DirectoryPath": "."}}]},
                                 {"delay": 30, "text": "too late"}])))
    events = [process.line() for _ in range(5)]  # the prompt, the reply (ACTIVE, DONE), the tool (ACTIVE, DONE)
    assert events[-1]["step_update"]["tool_info"]["output"] == ".gemini/\nsession/\n"
    os.kill(process.proc.pid, signal.SIGINT)
    result = process.line()["result"]
    assert (result["status"], result["error"], result["response"]) == ("ERROR", "interrupted", "quick\n")
    assert process.proc.wait(timeout=5) == 130


def test_a_slash_command_ends_the_process_unless_disabled(agy: Any) -> None:
    process = agy()
    process.line()
    process.send(user("/settings please"))
    assert process.proc.wait(timeout=5) == 2 and process.rest() == b""
    assert "/settings is answered by the CLI itself" in process.proc.stderr.read().decode()
    plain = agy("--disable-slash-commands")
    plain.line()
    assert plain.turn("/settings please")[-1]["result"]["response"] == "echo: /settings please\n"
