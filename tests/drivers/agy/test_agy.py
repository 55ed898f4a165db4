"""The Antigravity driver end to end: protocol 1 frames -> agentproto serve -> the ``agy``
test double (tests/fakes/fake_agy.py, after seed 003) as the real CLI would run.

Each test has its own HOME (the double keeps its conversations there) and TMPDIR (where
the sidecar's private area, and each session's plugin directory, live), so a test can
see every file a session made and check that nothing, file or process, outlives it.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fake_anthropic import processes_with_env
from fake_mcp import ENV_STDIO_MCP, HttpMcp, cmdlines, wait_for_file
from listener_support import post
from sidecar import ROOT, Sidecar, base_env, kind_name, kinds

FAKE = ROOT / "tests" / "fakes" / "fake_agy.py"


def script(*items: Any) -> str:
    """A prompt carrying its own model turn (the double's FAKE_AGY_TURN directive)."""
    return "FAKE_AGY_TURN: " + json.dumps(list(items))


def of(events: list[dict[str, Any]], name: str) -> list[Any]:
    return [e["kind"][name] for e in events if kind_name(e["kind"]) == name]


def said(events: list[dict[str, Any]]) -> str:
    return "".join(delta["text"] for delta in of(events, "TextDelta"))


def stop_of(events: list[dict[str, Any]]) -> Any:
    return of(events, "TurnEnded")[-1]["stop"]


class World:
    """A sidecar whose ``agy`` is the double, with a private HOME and TMPDIR."""

    def __init__(self, root: Path, reference: bool = True, **env: str) -> None:
        self.root = root
        self.home = root / "home"
        self.work = root / "work"
        self.tmp = root / "tmp"
        for path in (self.home, self.work, self.tmp):
            path.mkdir(exist_ok=True)
        self.env = {"AGENTPROTO_AGY_BIN": str(FAKE), "HOME": str(self.home), "TMPDIR": str(self.tmp), **env}
        # ToolCall and Hook requests are agentproto's additions: not in the reference schema.
        self.sc = Sidecar(env=self.env, reference=reference)

    def options(self, **options: Any) -> dict[str, Any]:
        return {"agent": "agy", "dir": str(self.work), **options}

    def open(self, **options: Any) -> dict[str, Any]:
        return self.sc.ok({"cmd": "open", **self.options(**options)}, timeout=30)

    def open_error(self, **options: Any) -> dict[str, Any]:
        return self.sc.error({"cmd": "open", **self.options(**options)}, timeout=30)

    def turn(self, session: str, text: str, timeout: float = 30, **fields: Any) -> list[dict[str, Any]]:
        self.sc.ok({"cmd": "prompt", "session": session, "text": text, **fields})
        return self.sc.events(session, "TurnEnded", timeout)

    def until(self, session: str, predicate: Any, timeout: float = 30) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            line = self.sc.wait_for(lambda l: "event" in l and l["event"]["session_id"] == session,
                                    max(0.01, deadline - time.monotonic()))
            out.append(line["event"])
            if predicate(line["event"]):
                return out

    def close(self, session: str) -> None:
        self.sc.ok({"cmd": "close", "session": session}, timeout=30)
        self.sc.wait_for(lambda l: l.get("closed") == session, 15)

    def session_dirs(self) -> list[Path]:
        return sorted(self.tmp.glob("agentproto-*/agy-*"))

    def plugin(self) -> Path:
        (found,) = self.session_dirs()
        return found / ".agents" / "plugins" / "agentproto"

    def processes(self) -> list[int]:
        """The live processes the sessions started (the sidecar has the same HOME: not it)."""
        return [pid for pid in processes_with_env(str(self.home)) if pid != self.sc.proc.pid]

    def conversations(self) -> list[str]:
        return sorted(p.stem for p in (self.home / ".gemini" / "antigravity-cli" / "conversations").glob("*.json"))


def read_json(path: Path, timeout: float = 10) -> Any:
    """A JSON file another process writes (whole once it parses)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def wait_gone(world: World, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while (world.processes() or world.session_dirs()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not world.processes(), f"agy processes left behind: {cmdlines(world.processes())}"
    assert not world.session_dirs(), f"session directories left behind: {world.session_dirs()}"


@pytest.fixture
def world(request: pytest.FixtureRequest, tmp_path: Path):
    w = World(tmp_path, reference="listener" not in request.node.name)
    try:
        yield w
    finally:
        w.sc.close()
        try:
            wait_gone(w)
        finally:
            for pid in w.processes():
                os.kill(pid, signal.SIGKILL)


# -- catalog and discovery -----------------------------------------------------------------


def test_discover_lists_agy_with_its_version_and_pins_by_path(world: World) -> None:
    report = world.sc.ok({"cmd": "discover"}, timeout=30)
    (entry,) = [a for a in report["agents"] if a["id"] == "agy"]
    assert entry["name"] == "Antigravity" and entry["source"] == "EnvOverride"
    assert entry["executable_path"] == str(FAKE) and entry["version"] == "1.1.24"
    info = world.open(agent={"id": "agy", "path": str(FAKE)})
    assert info["agent"]["source"] == "Pinned"
    world.close(info["id"])


def test_a_missing_agy_is_listed_with_the_seed_install_hint(tmp_path: Path) -> None:
    env = base_env({"PATH": "/nonexistent", "HOME": str(tmp_path)})
    out = subprocess.run([sys.executable, "-m", "agentproto", "list", "--all"], env=env, capture_output=True,
                         text=True, timeout=30, cwd=str(ROOT))
    line = next(line for line in out.stdout.splitlines() if line.startswith("agy "))
    assert "brew install --cask antigravity-cli" in line, out.stdout
    with Sidecar(env={"PATH": "/nonexistent", "HOME": str(tmp_path)}) as sc:
        (missing,) = [m for m in sc.ok({"cmd": "discover"})["missing"] if m["id"] == "agy"]
        assert missing["install_hint"] == "brew install --cask antigravity-cli"
        assert str(tmp_path / ".local" / "bin" / "agy") in missing["searched"]
        error = sc.error({"cmd": "open", "agent": "agy", "dir": str(tmp_path)})
        assert error["kind"] == "NotInstalled"


def test_agy_is_found_on_path_then_in_the_per_user_install_place(tmp_path: Path) -> None:
    # A wrapper, as a cask's link would be: the double's shebang needs python3 on PATH.
    wrapper = f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n'
    on_path, local = tmp_path / "bin" / "agy", tmp_path / "home" / ".local" / "bin" / "agy"
    for path in (on_path, local):
        path.parent.mkdir(parents=True)
        path.write_text(wrapper)
        path.chmod(0o755)
    system = "/usr/bin:/bin"
    for path_var, found, source in ((f"{on_path.parent}:{system}", on_path, "Path"),
                                    (system, local, "KnownLocation")):
        with Sidecar(env={"PATH": path_var, "HOME": str(tmp_path / "home")}) as sc:
            (entry,) = [a for a in sc.ok({"cmd": "discover"}, timeout=30)["agents"] if a["id"] == "agy"]
            assert (entry["executable_path"], entry["source"], entry["version"]) == (str(found), source, "1.1.24")


def test_probe_reports_version_models_and_sign_in(world: World) -> None:
    details = world.sc.ok({"cmd": "probe", "agent": "agy", "dir": str(world.work),
                           "env": {"FAKE_AGY_VERSION": "1.2.3", "FAKE_AGY_MODELS": "m-one=Model One,m-two"}}, timeout=30)
    assert details["version"] == "1.2.3"
    assert details["auth"] == {"Authenticated": {"kind": {"Other": "Google account"}, "account": None}}
    (model,) = details["config_options"]
    assert model["id"] == "model" and model["live"] is True
    assert model["kind"]["Select"]["choices"] == [{"value": "m-one", "label": "Model One"},
                                                  {"value": "m-two", "label": "m-two"}]
    assert "Permissions" not in details["capabilities"]["features"]
    assert details["capabilities"]["mcp_transports"] == ["Stdio", "Http"]
    assert world.conversations() == []  # probe starts no conversation


def test_signed_out_probe_is_unauthenticated_and_open_is_auth_required(world: World) -> None:
    env = {"FAKE_AGY_SIGNED_OUT": "1"}
    details = world.sc.ok({"cmd": "probe", "agent": "agy", "dir": str(world.work), "env": env}, timeout=30)
    login = [{"Terminal": {"command": [str(FAKE)], "env": {},
                           "description": "Run `agy` once in a terminal and sign in"}}]
    assert details["auth"] == {"Unauthenticated": {"login": login}}
    error = world.open_error(env=env)
    assert error["kind"] == "AuthRequired" and error["login"] == login, error
    assert "authentication failed" in error["message"]


@pytest.mark.parametrize(("how", "said"), [
    ("stderr", "Please sign in"),  # stderr only, no result line
    ("UNAUTHENTICATED: you are not logged in", "not logged in"),  # an ERROR result in other words
    ("sign-in required", "sign-in required"),
])
def test_open_signed_out_is_auth_required_however_agy_says_it(world: World, how: str, said: str) -> None:
    """Print mode exits at start-up because agy is signed out: AuthRequired with the login
    step (not SpawnFailed), whether agy says so on stderr only or in an ERROR result."""
    error = world.open_error(env={"FAKE_AGY_SIGNED_OUT": how})
    login = [{"Terminal": {"command": [str(FAKE)], "env": {},
                           "description": "Run `agy` once in a terminal and sign in"}}]
    assert error["kind"] == "AuthRequired" and error["login"] == login, error
    assert said in error["message"] and "sign in" in error["message"], error
    assert world.session_dirs() == []  # the session's directory went with the failed open


# -- launch --------------------------------------------------------------------------------


def test_launch_line_directory_and_environment(world: World) -> None:
    dump = world.root / "dump.json"
    info = world.open(env={"FAKE_AGY_DUMP": str(dump), "MY_VAR": "from-the-session"}, args=["--effort", "high"])
    assert info["details"]["config_options"][0]["current"] == "gemini-3.1-pro-high"  # init's model
    seen = read_json(dump)
    (session_dir,) = world.session_dirs()
    assert seen["argv"] == ["--input-format", "stream-json", "--output-format", "stream-json",
                            "--dangerously-skip-permissions", "--disable-slash-commands", "--add-dir",
                            str(session_dir), "--effort", "high", "--print", ""]
    assert seen["cwd"] == str(world.work) and seen["workspaces"] == [str(world.work), str(session_dir)]
    assert seen["permission_mode"] == "always-proceed" and seen["plugins"] == ["agentproto"]
    assert stat.S_IMODE(session_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(session_dir.parent.stat().st_mode) == 0o700
    events = world.turn(info["id"], script("env {env:MY_VAR} cwd {cwd}"))
    assert said(events) == f"env from-the-session cwd {world.work}\n"
    assert world.conversations() == [info["resume_token"]]
    world.close(info["id"])
    wait_gone(world)


@pytest.mark.parametrize("mode", [None, "AutoApprove", "omitted"])
def test_omitted_null_or_auto_approve_opens(world: World, mode: Any) -> None:
    options = {} if mode == "omitted" else {"permission_mode": mode}
    info = world.open(**options)
    assert "Permissions" not in info["details"]["capabilities"]["features"]
    world.close(info["id"])


@pytest.mark.parametrize("mode", ["Ask", "AcceptEdits"])
def test_explicit_ask_or_accept_edits_is_unsupported(world: World, mode: str) -> None:
    error = world.open_error(permission_mode=mode)
    assert error["kind"] == "UnsupportedFeature", error
    assert f"permission_mode {mode}" in error["message"] and "always-proceed" in error["message"]
    assert world.processes() == [] and world.session_dirs() == []


def test_omitted_mode_still_means_ask_for_the_other_drivers() -> None:
    # The mock's turn asks before its tool: with permission_mode omitted or null that is
    # Ask there, as before (only agy tells the two apart).
    with Sidecar(["--mock", str(ROOT / "fixtures" / "mock-scripts" / "turn.json")]) as sc:
        for options in ({}, {"permission_mode": None}):
            session = sc.open("mock", **options)
            sc.ok({"cmd": "prompt", "session": session, "text": "go"})
            assert kinds(sc.events(session, "RequestOpened"))[-1] == "RequestOpened"


def test_fork_generate_config_home_and_sse_are_unsupported(world: World) -> None:
    for options, needle in (({"fork": "abc"}, "fork"), ({"config_home": str(world.root)}, "config_home"),
                            ({"mcp_servers": [{"name": "s", "connection": {"Sse": {"url": "http://127.0.0.1:1/",
                                                                                  "headers": {}}}}]}, "Sse")):
        error = world.open_error(**options)
        assert error["kind"] == "UnsupportedFeature" and needle in error["message"], error
    error = world.sc.error({"cmd": "generate", **world.options(prompt="hi")}, timeout=30)
    assert error["kind"] == "UnsupportedFeature" and "generate" in error["message"], error
    assert world.processes() == [] and world.session_dirs() == []


def test_notes_and_reminder_are_refused_by_agents_that_cannot_take_them(tmp_path: Path) -> None:
    with Sidecar() as sc:
        for field in ("notes", "reminder"):
            error = sc.error({"cmd": "open", "agent": "mock", "dir": str(tmp_path), field: "x"})
            assert error["kind"] == "UnsupportedFeature" and error["message"].endswith(f"{field}: mock cannot take it")
        sc.open("mock", str(tmp_path), notes="", reminder=None)  # empty or null: nothing to refuse


# -- the session directory -----------------------------------------------------------------


def test_plugin_files_rules_and_their_24000_byte_limit(world: World) -> None:
    instructions, notes = "Always answer in French.", "The build command is make."
    info = world.open(instructions=instructions, notes=notes)
    plugin = world.plugin()
    assert json.loads((plugin / "plugin.json").read_text()) == {"name": "agentproto"}
    assert (plugin / "rules" / "AGENTS.md").read_text() == instructions
    assert (plugin / "rules" / "notes.md").read_text() == f"---\ntrigger: always_on\n---\n{notes}"
    for path in [plugin / "plugin.json", *(plugin / "rules").iterdir()]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not (plugin / "mcp_config.json").exists() and not (plugin / "hooks.json").exists()
    events = world.turn(info["id"], script("rules: {rules} | files: {rule_files}"))
    assert said(events) == (f"rules: {instructions}\n{notes} | files: agentproto/rules/AGENTS.md, "
                            "agentproto/rules/notes.md\n")
    world.close(info["id"])
    wait_gone(world)
    front = len("---\ntrigger: always_on\n---\n")
    info = world.open(instructions="é" * 12_000, notes="n" * (24_000 - front))  # exactly at the limit: fine
    world.close(info["id"])
    for field, value in (("instructions", "é" * 12_000 + "x"), ("notes", "n" * (24_001 - front))):
        error = world.open_error(**{field: value})
        assert error["kind"] == "InvalidConfiguration", error
        assert error["message"].startswith(f"invalid configuration: {field}: 24,001 bytes") and "24,000" in error["message"]
    wait_gone(world)


def test_mcp_servers_go_in_mcp_config_and_their_tool_is_called(world: World) -> None:
    http = HttpMcp()
    try:
        env_dump = world.root / "stdio-env.json"
        servers = [
            {"name": "web", "connection": {"Http": {"url": http.url, "headers": {"X-Secret": "s3cret-header"}}}},
            {"name": "local", "connection": {"Stdio": {"command": sys.executable, "args": [
                "-c", ENV_STDIO_MCP, str(env_dump), str(ROOT / "tests")], "env": {"STDIO_SECRET": "s3cret-env"}}}},
        ]
        info = world.open(mcp_servers=servers)
        config_file = world.plugin() / "mcp_config.json"
        assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
        config = json.loads(config_file.read_text())["mcpServers"]
        assert config["web"] == {"url": http.url, "headers": {"X-Secret": "s3cret-header"}}
        assert config["local"]["command"] == sys.executable and config["local"]["env"] == {"STDIO_SECRET": "s3cret-env"}
        call = {"name": "call_mcp_tool", "parameters": {"ServerName": "agentproto_web", "ToolName": "shout",
                                                        "Arguments": {"text": "hi"}}}
        events = world.turn(info["id"], script({"text": "calling", "tools": [call]}, "got {tool_output}"))
        tools = of(events, "ToolUpdated")
        assert tools[0]["kind"] == {"Mcp": {"server": "web", "tool": "shout"}} and tools[0]["status"] == "Running"
        assert tools[-1]["status"] == "Completed" and tools[-1]["output"] == "HI"
        assert said(events).endswith("got HI\n")
        assert http.wait_for("tools/call")[1]["x-secret"] == "s3cret-header"
        assert json.loads(wait_for_file(str(env_dump)))["STDIO_SECRET"] == "s3cret-env"
        for cmdline in cmdlines(world.processes()).values():
            assert b"s3cret" not in cmdline
        world.close(info["id"])
    finally:
        http.close()


def test_images_are_saved_in_the_session_directory_and_named_in_text(world: World) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    (world.work / "cat.png").write_bytes(png)
    (world.work / "notes.txt").write_text("plain")
    os.mkfifo(world.work / "pipe.png")  # named as an image, but a FIFO: refused, never read
    info = world.open(reminder="Keep it short.")
    events = world.turn(info["id"], script({"text": "user: {user}"}), attachments=["cat.png", "notes.txt"])
    (saved,) = (Path(world.session_dirs()[0]) / "images").iterdir()
    assert saved.name == "1-cat.png" and saved.read_bytes() == png and stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert said(events) == (
        "user: <system-reminder>\nKeep it short.\n</system-reminder>\nFAKE_AGY_TURN: "
        + json.dumps([{"text": "user: {user}"}])
        + f"\n[Attached image {world.work / 'cat.png'}: saved as {saved}; view it with view_file]"
        + f"\n[Attached file: {world.work / 'notes.txt'}]\n"
    )
    assert stop_of(events) == {"Completed": {"source": "Protocol"}}
    # The model views the file the text block names (agy would fail an image block).
    view = {"name": "view_file", "parameters": {"AbsolutePath": str(saved)}}
    events = world.turn(info["id"], script({"text": "look: {user}", "tools": [view]}), attachments=["missing.png", "pipe.png"])
    tools = of(events, "ToolUpdated")
    assert tools[0]["kind"] == "Read" and tools[0]["input"] == {"Path": str(saved)}
    assert tools[-1]["status"] == "Completed"
    assert f"[Attachment {world.work / 'missing.png'} could not be attached: No such file or directory]" in said(events)
    assert f"[Attachment {world.work / 'pipe.png'} could not be attached: it is not a regular file]" in said(events)
    world.close(info["id"])


def test_the_reminder_starts_every_user_message(world: World) -> None:
    info = world.open(reminder="Be careful.")
    for prompt in ("one", "two"):
        events = world.turn(info["id"], prompt)
        assert said(events) == f"echo: <system-reminder>\nBe careful.\n</system-reminder>\n{prompt}\n"
    world.close(info["id"])


# -- messages and events -------------------------------------------------------------------


def test_text_tools_usage_and_context(world: World) -> None:
    info = world.open()
    session = info["id"]
    first = world.turn(session, script({"text": "one two three four five six", "deltas": 3,
                                        "usage": {"input_tokens": 1000, "cache_read_tokens": 400}}))
    deltas = of(first, "TextDelta")
    assert [d["text"] for d in deltas] == ["one two ", "three four ", "five six", "\n"]  # DONE's last delta once
    assert len({d["message_id"] for d in deltas}) == 1
    assert of(first, "MessageEnded") == [{"message_id": deltas[0]["message_id"]}]
    ended = of(first, "TurnEnded")[0]
    assert ended["usage"] == {"input_tokens": 1000, "cached_input_tokens": 400, "output_tokens": 6}
    assert of(first, "ContextUsage") == [{"used_tokens": 1006, "window_tokens": None, "cost_usd": None}]
    (work, target) = (str(world.work), str(world.work / "made.txt"))
    calls = [
        {"name": "run_command", "parameters": {"CommandLine": "echo ran", "Cwd": work}},
        {"name": "write_to_file", "parameters": {"TargetFile": target, "CodeContent": "secret body"}},
        {"name": "replace_file_content", "parameters": {"TargetFile": target, "TargetContent": "nope",
                                                        "ReplacementContent": "x"}},
        {"name": "list_dir", "parameters": {"DirectoryPath": work}},
        {"name": "mystery_tool", "parameters": {"a": 1}},
    ]
    second = world.turn(session, script({"text": "working", "tools": calls, "usage": {"input_tokens": 10}},
                                        {"text": "done", "usage": {"input_tokens": 20}}))
    final: dict[str, Any] = {}
    for update in of(second, "ToolUpdated"):
        final[update["id"]] = update
    shell, write, replace, listing, mystery = final.values()
    assert shell["kind"] == "Execute" and shell["input"] == {"Command": {"command": "echo ran", "cwd": work}}
    assert shell["status"] == "Completed" and shell["output"] == "ran\n" and shell["title"] == "run_command: echo ran"
    assert write["kind"] == "Edit" and write["locations"] == [target] and write["status"] == "Completed"
    assert "secret body" not in json.dumps(write)  # agy leaves file contents off its stream
    assert replace["kind"] == "Edit" and replace["status"] == "Failed" and "found 0 times" in replace["output"]
    assert listing["kind"] == "Search" and "made.txt" in listing["output"]
    assert mystery["kind"] == "Other" and mystery["raw"] == {"name": "mystery_tool", "input": {"a": 1}}
    assert mystery["status"] == "Failed"
    assert said(second) == "working\ndone\n"
    # The turn's own figures; the context is the conversation's totals (both turns).
    assert of(second, "TurnEnded")[0]["usage"] == {"input_tokens": 30, "cached_input_tokens": 0, "output_tokens": 2}
    assert of(second, "ContextUsage")[0]["used_tokens"] == 1006 + 30 + 2
    world.close(session)


def test_an_error_result_fails_the_turn_and_the_session_goes_on(world: World) -> None:
    info = world.open()
    events = world.turn(info["id"], script("partial", {"error": "quota exhausted"}))
    assert stop_of(events) == {"Failed": {"message": "quota exhausted"}}
    assert said(world.turn(info["id"], "again")) == "echo: again\n"
    world.close(info["id"])


def test_bad_lines_and_unknown_events_are_diagnostics_and_nothing_after_them_is_lost(world: World) -> None:
    info = world.open()
    raw = ["not json at all", "[1, 2]", json.dumps({"event": "brand_new", "brand_new": {}}),
           json.dumps({"no_event": True})]
    events = world.turn(info["id"], script({"raw": raw}, "still here"))
    diagnostics = [d["message"] for d in of(events, "Diagnostic")]
    assert len(diagnostics) == 4 and all(d.startswith("agy wrote") for d in diagnostics), diagnostics
    assert "unknown event \"brand_new\"" in diagnostics[2] and "unknown event null" in diagnostics[3]
    assert said(events) == "still here\n" and stop_of(events) == {"Completed": {"source": "Protocol"}}
    world.close(info["id"])


def test_a_prompt_that_looks_like_a_slash_command_is_text(world: World) -> None:
    info = world.open()
    # A prompt that would be a slash command of agy's: with --disable-slash-commands it is text.
    assert said(world.turn(info["id"], "/settings please")) == "echo: /settings please\n"
    world.close(info["id"])


# -- interrupts, model switches, resume ----------------------------------------------------


def agy_pids(world: World) -> list[int]:
    return [pid for pid, cmd in cmdlines(world.processes()).items() if b"fake_agy.py" in cmd]


def test_cancel_interrupts_the_tool_and_a_new_process_keeps_the_conversation(world: World) -> None:
    info = world.open()
    session = info["id"]
    world.turn(session, "first")
    (before,) = agy_pids(world)
    sleep = {"name": "run_command", "parameters": {"CommandLine": "sleep 30"}}
    world.sc.ok({"cmd": "prompt", "session": session, "text": script({"text": "sleeping", "tools": [sleep]})})
    running = world.until(session, lambda e: kind_name(e["kind"]) == "ToolUpdated")
    tool_id = of(running, "ToolUpdated")[0]["id"]
    # Sent while the turn runs: queued, then answered by the new process.
    queued = world.sc.ok({"cmd": "prompt", "session": session, "text": script("history {history}, previous {previous}")})
    assert "Queued" in queued["kind"]
    world.sc.ok({"cmd": "cancel", "session": session})
    events = world.sc.events(session, "TurnEnded")
    assert stop_of(events) == "Cancelled"
    assert of(events, "ToolUpdated")[-1] == {**of(running, "ToolUpdated")[0], "status": "Failed", "output": "interrupted"}
    assert of(events, "ToolUpdated")[-1]["id"] == tool_id
    events = world.sc.events(session, "TurnEnded")
    assert said(events).startswith("history 2, previous FAKE_AGY_TURN")
    assert stop_of(events) == {"Completed": {"source": "Protocol"}}
    # The resumed process's system_message step: a Diagnostic at level Info.
    assert [d["level"] for d in of(events, "Diagnostic") if "Resumed conversation" in d["message"]] == ["Info"]
    (after,) = agy_pids(world)
    assert after != before
    argv = cmdlines([after])[after].split(b"\0")
    assert argv[argv.index(b"--conversation") + 1].decode() == info["resume_token"]
    assert not [pid for pid, cmd in cmdlines(world.processes()).items() if b"sleep 30" in cmd]
    world.close(session)


def test_cancel_right_after_the_prompt_and_a_prompt_while_restarting(world: World) -> None:
    info = world.open()
    session = info["id"]
    for _ in range(3):
        world.sc.ok({"cmd": "prompt", "session": session, "text": script({"text": "slow", "delay": 5})})
        world.sc.ok({"cmd": "cancel", "session": session})
        assert stop_of(world.sc.events(session, "TurnEnded")) == "Cancelled"
        # At once: the new process may not be up yet; the prompt waits for it.
        assert said(world.turn(session, "after")) == "echo: after\n"
    world.close(session)


def test_model_switch_restarts_on_the_same_conversation(world: World) -> None:
    info = world.open(configure={"model": "gemini-3-flash"})
    session = info["id"]
    assert info["configuration"]["options"]["model"] == "gemini-3-flash"
    world.turn(session, "one")
    world.sc.ok({"cmd": "configure", "session": session, "option": "model", "value": "claude-sonnet-4-6"})
    updated = world.until(session, lambda e: kind_name(e["kind"]) == "SessionUpdated")
    assert of(updated, "SessionUpdated")[0]["configuration"]["options"]["model"] == "claude-sonnet-4-6"
    events = world.turn(session, script("model {model}, history {history}"))
    assert said(events) == "model claude-sonnet-4-6, history 1\n"
    # During a turn: applied when the turn ends, before the next one.
    world.sc.ok({"cmd": "prompt", "session": session, "text": script({"text": "slow", "delay": 1})})
    reply = world.sc.send({"cmd": "configure", "session": session, "option": "model", "value": "gemini-3.1-pro-low"})
    queued = world.sc.ok({"cmd": "prompt", "session": session, "text": script("model {model}")})
    assert "Queued" in queued["kind"]
    assert said(world.sc.events(session, "TurnEnded")) == "slow\n"
    assert said(world.sc.events(session, "TurnEnded")) == "model gemini-3.1-pro-low\n"
    assert "ok" in world.sc.reply(reply)
    # A model agy does not know: refused, and the session goes on with its model.
    error = world.sc.error({"cmd": "configure", "session": session, "option": "model", "value": "no-such-model"})
    assert error["kind"] == "InvalidConfiguration" and "no-such-model" in error["message"], error
    assert said(world.turn(session, script("model {model}"))) == "model gemini-3.1-pro-low\n"
    assert world.sc.ok({"cmd": "info", "session": session})["configuration"]["options"]["model"] == "gemini-3.1-pro-low"
    world.close(session)


def test_a_model_set_while_a_new_process_starts_applies_before_the_next_turn(tmp_path: Path) -> None:
    # A restarted agy that takes a while to write its init: the model is set (and a prompt
    # sent) while it starts. The prompt must not run on the model that process started with.
    slow = tmp_path / "slow-restart-agy"
    slow.write_text('#!/bin/sh\ncase " $* " in *" --conversation "*) sleep 1.5 ;; esac\n'
                    f'exec {sys.executable} {FAKE} "$@"\n')
    slow.chmod(0o755)
    world = World(tmp_path, AGENTPROTO_AGY_BIN=str(slow))
    try:
        session = world.open()["id"]
        world.turn(session, "first")
        world.sc.ok({"cmd": "prompt", "session": session, "text": script({"text": "slow", "delay": 5})})
        world.until(session, lambda e: kind_name(e["kind"]) == "StatusChanged")
        world.sc.ok({"cmd": "cancel", "session": session})
        assert stop_of(world.sc.events(session, "TurnEnded")) == "Cancelled"
        deadline = time.monotonic() + 10
        while not [c for c in cmdlines(world.processes()).values() if b"slow-restart-agy" in c]:
            assert time.monotonic() < deadline, "the new process never started"
            time.sleep(0.02)
        reply = world.sc.send({"cmd": "configure", "session": session, "option": "model", "value": "gemini-3-flash"})
        assert said(world.turn(session, script("model {model}"))) == "model gemini-3-flash\n"
        assert "ok" in world.sc.reply(reply)
        world.close(session)
        wait_gone(world)
    finally:
        world.sc.close()
        for pid in world.processes():
            os.kill(pid, signal.SIGKILL)


def test_resume_keeps_history_and_fork_is_unsupported(world: World) -> None:
    info = world.open()
    world.turn(info["id"], "remember me")
    world.close(info["id"])
    token = info["resume_token"]
    again = world.open(resume=token)
    assert again["resume_token"] == token
    events = world.turn(again["id"], script("previous {previous}"))
    assert said(events) == "previous remember me\n"
    world.close(again["id"])
    error = world.open_error(resume="no-such-conversation")
    assert error["kind"] == "ResumeFailed" and "no-such-conversation" in error["message"], error
    for fork in ({"fork": token}, {"fork": token, "fork_at": "u-1"}, {"fork_at": "u-1"}):
        error = world.open_error(resume=token, **fork)
        assert error["kind"] == "UnsupportedFeature" and "cannot fork" in error["message"], (fork, error)


def test_an_unexpected_exit_ends_the_session(world: World) -> None:
    info = world.open()
    session = info["id"]
    world.sc.ok({"cmd": "prompt", "session": session, "text": script("bye", {"exit": 3, "stderr": "agy: boom\n"})})
    lines = []
    while not any(line.get("closed") == session for line in lines):
        lines.append(world.sc.next_line(15))
    events = [line["event"] for line in lines if "event" in line]
    assert stop_of(events) == {"Failed": {"message": "agent exited during the turn"}}
    (error,) = [line["error"] for line in lines if line.get("session") == session]
    assert error["kind"] == "ProcessExited" and error["status"] == "3" and "agy: boom" in error["stderr"]
    wait_gone(world)
    assert world.sc.error({"cmd": "prompt", "session": session, "text": "x"})["kind"] == "SessionClosed"


def test_an_exit_while_idle_ends_the_session_with_its_dir_and_listener_token(world: World) -> None:
    tool = {"name": "lookup", "description": "Look a word up", "input_schema": {"type": "object"}}
    info = world.open(tools=[tool])
    session, url = info["id"], info["tools_url"]
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    assert post(url, initialize).status == 200
    world.turn(session, "hello")
    (pid,) = agy_pids(world)
    os.kill(pid, signal.SIGKILL)  # nobody asked: no turn runs
    lines = []
    while not any(line.get("closed") == session for line in lines):
        lines.append(world.sc.next_line(30))
    events = [line["event"] for line in lines if "event" in line]
    assert of(events, "TurnEnded") == []  # no turn ran: none to end
    (error,) = [line["error"] for line in lines if line.get("session") == session]
    assert error["kind"] == "ProcessExited", error
    wait_gone(world)
    assert post(url, initialize).status == 404  # the token died with the session


@pytest.mark.parametrize("how", ["close", "eof", "sigterm"])
def test_nothing_outlives_the_session(tmp_path: Path, how: str) -> None:
    world = World(tmp_path)
    try:
        info = world.open(instructions="x", notes="y")
        session = info["id"]
        sleep = {"name": "run_command", "parameters": {"CommandLine": "sleep 60"}}
        world.sc.ok({"cmd": "prompt", "session": session, "text": script({"text": "s", "tools": [sleep]})})
        world.until(session, lambda e: kind_name(e["kind"]) == "ToolUpdated")
        # The step is reported as it starts: its command may be a moment behind.
        deadline = time.monotonic() + 10
        while len(world.processes()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert world.session_dirs() and len(world.processes()) >= 2
        if how == "close":
            world.close(session)
        elif how == "eof":
            world.sc.close_stdin()
            assert world.sc.proc.wait(15) == 0
        else:
            world.sc.proc.send_signal(signal.SIGTERM)
            world.sc.proc.wait(15)
        wait_gone(world)
        if how != "close":  # the sidecar is gone: its whole private area with it
            assert not list(world.tmp.glob("agentproto-*"))
    finally:
        world.sc.close()
        for pid in world.processes():
            os.kill(pid, signal.SIGKILL)


def test_handshake_timeout(tmp_path: Path) -> None:
    slow = tmp_path / "slow-agy"
    slow.write_text(f"#!/bin/sh\nsleep 30\nexec {sys.executable} {FAKE} \"$@\"\n")
    slow.chmod(0o755)
    world = World(tmp_path, AGENTPROTO_AGY_BIN=str(slow), AGENTPROTO_AGY_HANDSHAKE_TIMEOUT="1")
    try:
        error = world.open_error()
        assert error["kind"] == "HandshakeTimeout" and "no init in 1 s" in error["message"], error
        wait_gone(world)
    finally:
        world.sc.close()


def test_only_the_flat_hook_events_are_offered(world: World) -> None:
    error = world.open_error(hooks=["PreToolUse"])
    assert error["kind"] == "UnsupportedFeature", error
    assert "no hook PreToolUse" in error["message"] and "PreInvocation" in error["message"]
    assert world.processes() == [] and world.session_dirs() == []


# -- the app's tools and hooks, through the listener -----------------------------------------


def answer(world: World, session: str, request: str, value: Any) -> None:
    world.sc.ok({"cmd": "answer", "session": session, "request": request, "answer": value})


def test_the_apps_tool_is_called_through_the_listener(world: World) -> None:
    tool = {"name": "lookup", "description": "Look a word up",
            "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}}}
    info = world.open(tools=[tool])
    session, url = info["id"], info["tools_url"]
    assert "Tools" in info["details"]["capabilities"]["features"]
    config_file = world.plugin() / "mcp_config.json"
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    assert json.loads(config_file.read_text()) == {"mcpServers": {"agentproto": {"url": url}}}
    token = url.split("/")[3]
    call = {"name": "call_mcp_tool", "parameters": {"ServerName": "agentproto_agentproto", "ToolName": "lookup",
                                                    "Arguments": {"word": "agy"}}}
    world.sc.ok({"cmd": "prompt", "session": session,
                 "text": script({"text": "tools: {mcp_tools}", "tools": [call]}, "it said {tool_output}")})
    opened = world.until(session, lambda e: kind_name(e["kind"]) == "RequestOpened")
    request = of(opened, "RequestOpened")[0]["ToolCall"]
    assert request["tool"] == "lookup" and request["arguments"] == {"word": "agy"}
    for cmdline in cmdlines(world.processes()).values():
        assert token.encode() not in cmdline
    answer(world, session, request["id"], {"ToolResult": {"content": [{"type": "text", "text": "a CLI"}],
                                                         "is_error": False}})
    events = opened + world.sc.events(session, "TurnEnded")
    assert said(events) == "tools: agentproto_agentproto/lookup\nit said a CLI\n"
    tools = of(events, "ToolUpdated")
    assert tools[0]["kind"] == {"Mcp": {"server": "agentproto", "tool": "lookup"}}
    assert tools[-1]["status"] == "Completed" and tools[-1]["output"] == "a CLI"
    world.close(session)
    wait_gone(world)
    assert token not in world.sc.stderr.decode(errors="replace")


def test_hooks_post_through_curl_to_the_listener_and_an_injected_step_reaches_the_model(world: World) -> None:
    info = world.open(hooks=["SessionStart", "PreInvocation", "Stop"])
    session = info["id"]
    assert "Hooks" in info["details"]["capabilities"]["features"]
    plugin = world.plugin()
    hooks = json.loads((plugin / "hooks.json").read_text())
    assert sorted(hooks) == ["PreInvocation", "SessionStart", "Stop"]
    configs = sorted((plugin / "hooks").iterdir())
    assert [p.name for p in configs] == ["PreInvocation.curl", "SessionStart.curl", "Stop.curl"]
    for config in configs:
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        assert "/hook/" + config.stem in config.read_text()
    (handler,) = hooks["PreInvocation"]
    assert handler["type"] == "command" and "/hook/" not in handler["command"] and "-K" in handler["command"]
    assert handler["timeout"] == 70  # the app's hook_timeout (60 s) wins over agy's
    # SessionStart runs as agy starts, outside any turn.
    started = world.until(session, lambda e: kind_name(e["kind"]) == "RequestOpened")
    start = of(started, "RequestOpened")[0]["Hook"]
    assert start["event"] == "SessionStart" and start["input"]["source"] == "startup"
    assert started[-1]["turn_info"] is None
    answer(world, session, start["id"], {"HookResult": {}})
    world.sc.ok({"cmd": "prompt", "session": session, "text": "hello"})
    pre = of(world.until(session, lambda e: kind_name(e["kind"]) == "RequestOpened"), "RequestOpened")[0]["Hook"]
    assert pre["event"] == "PreInvocation" and pre["input"]["invocationNum"] == 0
    answer(world, session, pre["id"], {"HookResult": {"injectSteps": [{"userMessage": "Mention the weather."}]}})
    stop = world.until(session, lambda e: kind_name(e["kind"]) == "RequestOpened")
    assert of(stop, "UserMessage")[0]["text"] == "Mention the weather."
    assert said(stop) == "echo: hello [injected: Mention the weather.]\n"
    answer(world, session, of(stop, "RequestOpened")[0]["Hook"]["id"], "Cancel")
    events = world.sc.events(session, "TurnEnded")
    assert stop_of(events) == {"Completed": {"source": "Protocol"}}
    world.close(session)


@pytest.mark.parametrize("action", ["deny", "ask"])
def test_a_policy_with_a_deny_or_ask_rule_is_unsupported_before_anything_starts(world: World, action: str) -> None:
    # agy's print mode never asks: a deny rule would silently allow (issue 24).
    error = world.open_error(policy=[{"action": "allow", "command": ["ls"]}, {"action": action, "command": ["rm **"]}])
    assert error["kind"] == "UnsupportedFeature" and "policy" in error["message"], error
    assert world.processes() == [] and world.session_dirs() == []


def test_an_allow_only_policy_opens(world: World) -> None:
    info = world.open(policy=[{"action": "allow", "command": ["ls"]}])
    assert info["policy"] == [{"action": "allow", "command": ["ls"]}]
    world.close(info["id"])


def test_a_usd_budget_is_unsupported_on_agy_which_reports_no_usage(world: World) -> None:
    error = world.open_error(budget={"usd": 1})
    assert error["kind"] == "UnsupportedFeature" and "budget.usd" in error["message"], error
    info = world.open(budget={"turns": 3})  # a bound agentproto counts itself is fine
    assert info["budget"]["limits"] == {"turns": 3}
    world.close(info["id"])


def test_a_rate_limited_agy_turn_is_reported_and_sent_again_on_the_same_process(world: World) -> None:
    world.sc.close()
    turns = world.root / "turns.json"
    turns.write_text(json.dumps([[{"error": "429 Too Many Requests: rate limit exceeded"}], "after the limit"]))
    world.env["FAKE_AGY_SCRIPT"] = str(turns)
    world.sc = Sidecar(env=world.env)
    session = world.open(retry={"max_wait_s": 30})["id"]
    (pid,) = agy_pids(world)
    events = world.turn(session, "go")
    assert stop_of(events) == {"Completed": {"source": "Protocol"}} and said(events) == "after the limit\n"
    limits = [e["extensions"]["agentproto"]["rate_limit"] for e in events
              if "rate_limit" in e["extensions"].get("agentproto", {})]  # fmt: skip
    assert limits == [{"retry_at": None, "message": "agy: 429 Too Many Requests: rate limit exceeded"}], limits
    assert agy_pids(world) == [pid]
    # Not every ERROR is a rate limit: without one, the turn fails as before.
    events = world.turn(session, script({"error": "quota exhausted"}))
    assert stop_of(events) == {"Failed": {"message": "quota exhausted"}}
    assert not [e for e in events if "rate_limit" in e["extensions"].get("agentproto", {})]
    world.close(session)


def test_a_rate_limited_agy_turn_whose_process_ends_during_the_wait_is_resumed_and_sent_again(
    world: World, tmp_path: Path
) -> None:
    # agy ends the turn with an ERROR result naming a 429 (its wording is the double's CHOICE):
    # agentproto waits (5 s, no reset named); agy is killed meanwhile, and a new agy, started
    # on the same conversation (--conversation), takes the same turn.
    turns = tmp_path / "turns.json"
    turns.write_text(json.dumps(["noted", [{"error": "429 Too Many Requests: Resource has been exhausted"}],
                                 "after the restart, previous: {previous}"]))  # fmt: skip
    record = tmp_path / "restart.ndjson"
    world.sc.close()
    world.env["FAKE_AGY_SCRIPT"] = str(turns)
    world.sc = Sidecar(["--record", str(record)], env=world.env)
    info = world.open(retry={"max_wait_s": 60})
    session, token = info["id"], info["resume_token"]
    assert said(world.turn(session, "remember kumquat")) == "noted\n"
    world.sc.ok({"cmd": "prompt", "session": session, "text": "which word?"})
    world.sc.wait_for(lambda line: "event" in line and "retry" in line["event"]["extensions"].get("agentproto", {}), 30)
    first = agy_pids(world)
    assert len(first) == 1
    os.kill(first[0], signal.SIGKILL)  # the agent ends while agentproto waits
    lines = world.until(session, lambda e: kind_name(e["kind"]) == "TurnEnded", 60)
    assert stop_of(lines) == {"Completed": {"source": "Protocol"}}, lines[-1]
    (restart,) = [e for e in lines if "restart" in e["extensions"].get("agentproto", {})]
    body = restart["extensions"]["agentproto"]["restart"]
    assert body == {"status": "SIGKILL", "process": 2, "resume_token": token}, body
    # The new agy read the conversation back: the failed turn's prompt is its previous one.
    assert said(lines) == "after the restart, previous: which word?\n", said(lines)
    assert len(of(lines, "TurnStarted")) == 1  # the same turn, its events in order
    assert first[0] not in agy_pids(world) and len(agy_pids(world)) == 1
    assert world.conversations() == [token] and len(world.session_dirs()) == 1  # the ended one's dir is gone
    world.close(session)
    world.sc.close()
    records = [json.loads(line) for line in record.read_text().splitlines()]
    spawns = [r for r in records if r.get("dir") == "spawn"]
    assert len(spawns) == 2 and f"--conversation {token}" in " ".join(spawns[1]["argv"]), spawns
    assert [r["process"] for r in records if r.get("dir") == "restart"] == [2]
    # The recording replays offline, the second process's lines played to the second fake.
    # (Its TMPDIR the recording's: the work dir is under the system's temp dir, not under it.)
    env = {**base_env(), "AGENTPROTO_AGY_BIN": "/nonexistent", "AGENTPROTO_DB": "off", "TMPDIR": str(world.tmp)}
    done = subprocess.run([sys.executable, "-m", "agentproto", "replay", str(record)], capture_output=True, text=True,
                          timeout=120, env=env, cwd=str(ROOT))  # fmt: skip
    assert done.returncode == 0 and "every response matched" in done.stderr, done.stderr
