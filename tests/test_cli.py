"""The command line: ``--version``, ``--help`` (every command's, with an example), the usage
errors (one line, exit 2), ``schema``, ``list`` (clean versions read in parallel, where
missing agents were searched, ``--json``, progress only on a terminal), a stdout whose
reader went away (every command ends at once, quietly, status 1), SIGTERM with a reader
that stopped reading, and an address in use (1). ``chat`` has its own file (test_chat.py)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from sidecar import ROOT, base_env, script
from terminal import GUARD, terminals  # noqa: F401  (a fixture)

from agentproto import __version__
from agentproto.drivers import catalog

SCHEMA = json.loads((ROOT / "agentproto" / "schema.json").read_text())
COMMANDS = ("serve", "agent", "list", "probe", "chat", "schema", "mcp-bridge", "replay", "inspect")


def run(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agentproto", *args],
        input=stdin,
        capture_output=True,
        env=base_env(env),
        cwd=str(ROOT),
        timeout=GUARD * 2,
    )


def write_script(tmp_path: Path, body: dict[str, Any]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(body))
    return str(path)


def executable(path: Path, body: str) -> str:
    path.write_text(body)
    path.chmod(0o755)
    return str(path)


# -- help, version, usage errors ----------------------------------------------------------------


def test_version_and_help() -> None:
    version = run("--version")
    assert version.returncode == 0 and version.stdout.decode().strip() == f"agentproto {__version__}"
    helped = run("--help")
    assert helped.returncode == 0
    for command in COMMANDS:
        assert f"\n  {command} " in helped.stdout.decode()
    assert "examples:" in helped.stdout.decode() and "130 interrupted" in helped.stdout.decode()


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_a_description_and_an_example(command: str) -> None:
    helped = run(command, "--help")
    assert helped.returncode == 0
    text = helped.stdout.decode()
    description, _, examples = text.partition("\nexamples:\n")
    assert len(description.split("\n\n")[1]) > 60, text  # the paragraph after the usage line
    assert f"python3 -m agentproto {command}" in examples or f"agentproto {command}" in examples


def test_serve_help_says_the_token_can_come_from_the_environment() -> None:
    text = " ".join(run("serve", "--help").stdout.decode().split())
    assert "AGENTPROTO_AUTH_TOKEN, which stays out of ps" in text


def test_chat_help_names_the_commands_no_color_and_agent_references() -> None:
    text = run("chat", "--help").stdout.decode()
    for needle in ("/help", "NO_COLOR", '{"acp"', "--mock SCRIPT", "--json", "--color {auto,always,never}"):
        assert needle in text, needle


def test_no_command_is_a_usage_error() -> None:
    result = run()
    assert result.returncode == 2
    assert result.stdout == b"" and b"usage: python3 -m agentproto" in result.stderr and b"give a command" in result.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["--single-shot", "serve"], "--single-shot is the ops framing's, not serve's"),
        (["--mock", "x.json"], "--mock without a command needs --single-shot"),
        (["--record", "r.jsonl"], "--record without a command needs --single-shot"),
        (["--mock", "x.json", "serve"], "--mock goes after the command: python3 -m agentproto serve --mock"),
        (["serve", "--port", "8080"], "--port needs --transport http or --transport mcp (the transport is stdio)"),
        (["serve", "--listen", "/tmp/x.sock"], "--listen needs --transport unix or --transport http or --transport mcp"),
        (["serve", "--socket", "/tmp/x.sock", "--transport", "http"], "--socket needs --transport unix"),
        (["serve", "--transport", "jsonrpc", "--auth-token", "x" * 20], "--auth-token needs --transport http or --transport mcp"),
        (["serve", "--stall-timeout", "-5"], "--stall-timeout: must be a number of seconds above 0, got -5"),
        (["serve", "--stall-timeout", "nan"], "--stall-timeout: must be a number of seconds above 0, got nan"),
        (["serve", "--stall-timeout", "soon"], "--stall-timeout: not a number of seconds: 'soon'"),
        (["agent", "--stall-timeout", "0"], "must be a number of seconds above 0, got 0"),
        (["chat", "codex", "--mock", "x.json"], "--mock plays a script as the mock agent; it does not go with codex"),
        (["serve", "--transport", "carrier-pigeon"], "argument --transport: invalid choice"),
        (["list", "--frobnicate"], "unknown flag '--frobnicate'"),
        (["--replay", "r.ndjson", "schema"], "--replay PATH goes alone (it is `replay PATH`), not with schema"),
        (["--replay", "r.ndjson", "--single-shot"], "--replay PATH goes alone (it is `replay PATH`), not with --single"),
        (["--replay", "r.ndjson", "--record", "x"], "--replay PATH goes alone (it is `replay PATH`), not with --record"),
    ],
)
def test_flags_that_would_be_ignored_are_one_line_usage_errors(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.decode().splitlines()
    assert message in line and line.endswith("--help`)"), line
    assert result.stdout == b""


def test_the_usage_checks_keep_what_is_right() -> None:
    assert run("--single-shot", stdin=b'{"op": "capabilities"}').returncode == 0
    assert run("--replay", str(ROOT / "fixtures" / "recordings" / "mock-ops.ndjson")).returncode == 0
    assert run("--single-shot", "agent", stdin=b'{"op": "capabilities"}').stdout.count(b'"kind":"done"') == 1
    assert run("--mock", script("turn"), "--single-shot", stdin=b'{"op": "capabilities"}').returncode == 0
    assert run("chat", "--mock", script("turn"), stdin=b"x").returncode == 0  # mock is the default agent
    assert run("chat", "mock", "--mock", script("turn"), stdin=b"x").returncode == 0


@pytest.mark.parametrize("command", [["serve"], ["agent", "--single-shot"], ["chat"]])
def test_a_mock_script_that_is_not_utf8_is_one_line_exit_1(command: list[str], tmp_path: Path) -> None:
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"turns": [], "name": "caf\xe9"}')
    result = run(*command, "--mock", str(bad), stdin=b'{"op": "capabilities"}')
    assert result.returncode == 1, result.stderr
    assert result.stderr.decode().splitlines() == [f"agentproto: mock script {bad}: not UTF-8 text (at byte 26)"]


def test_schema_prints_the_schema() -> None:
    result = run("schema")
    assert result.returncode == 0
    assert json.loads(result.stdout) == SCHEMA


def test_an_address_in_use_is_a_failure_not_a_usage_error() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        result = run("serve", "--transport", "http", "--port", str(taken.getsockname()[1]))
    finally:
        taken.close()
    assert result.returncode == 1
    [line] = result.stderr.decode().splitlines()
    assert line.startswith("agentproto: cannot listen on 127.0.0.1:") and "in use" in line


# -- list ----------------------------------------------------------------------------------------


def _fake_agents(tmp_path: Path) -> dict[str, str]:
    """claude and codex printing their real --version lines, gemini failing its --version,
    claude-acp printing nothing; each waits (up to 5 s) until all four have started, so
    they only all succeed if discovery runs them in parallel."""
    started = tmp_path / "started"
    started.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wait = (
        f'touch {started}/$(basename "$0"); i=0; while [ "$(ls {started} | wc -l)" -lt 4 ] && [ $i -lt 100 ]; '
        "do sleep 0.05; i=$((i+1)); done\n"
        f'[ "$(ls {started} | wc -l)" -ge 4 ] || {{ echo "ran alone" >&2; exit 9; }}\n'
    )
    executable(bin_dir / "claude", f"#!/bin/sh\n{wait}echo '2.1.197 (Claude Code)'\n")
    executable(bin_dir / "codex", f"#!/bin/sh\n{wait}echo 'codex-cli 0.171.0'\n")
    executable(bin_dir / "gemini", f"#!/bin/sh\n{wait}echo 'gemini: cannot read its settings' >&2\nexit 3\n")
    executable(bin_dir / "claude-agent-acp", f"#!/bin/sh\n{wait}exit 0\n")
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}


def test_list_shows_clean_versions_and_where_the_missing_were_searched(tmp_path: Path) -> None:
    env = _fake_agents(tmp_path)
    codex = next(spec for spec in catalog.CATALOG if spec.id == "codex")
    agy = next(spec for spec in catalog.CATALOG if spec.id == "agy")
    env[codex.env_override] = str(tmp_path / "nowhere" / "codex")  # points nowhere: PATH's is used
    env[agy.env_override] = str(tmp_path / "no-agy")
    result = run("list", "--all", env=env)
    assert result.returncode == 0 and result.stderr == b"", result.stderr
    lines = result.stdout.decode().splitlines()
    assert lines[0].split() == ["AGENT", "STATUS", "VERSION", "WHERE"]
    assert lines[1].split() == ["mock", "built-in", __version__, "inside", "agentproto:", "nothing", "to", "install"]
    rows = {line.split()[0]: (index, line.split()) for index, line in enumerate(lines) if not line.startswith(" ")}
    bin_dir = tmp_path / "bin"
    assert rows["claude"][1] == ["claude", "installed", "2.1.197", str(bin_dir / "claude")]
    assert rows["codex"][1] == ["codex", "installed", "0.171.0", str(bin_dir / "codex")]
    note = lines[rows["codex"][0] + 1].strip()
    assert note == f"${codex.env_override}={tmp_path}/nowhere/codex is not an executable; using {bin_dir}/codex"
    assert rows["gemini"][1][:3] == ["gemini", "installed", "unknown"]
    assert "--version` failed (exit status 3: gemini: cannot read its settings)" in lines[rows["gemini"][0] + 1]
    assert rows["claude-acp"][1][:3] == ["claude-acp", "installed", "unknown"]
    assert lines[rows["claude-acp"][0] + 1].strip().endswith("--version` printed nothing")
    index, agy_row = rows["agy"]
    assert agy_row[1:3] == ["missing", "-"] and lines[index].endswith(f"install: {agy.install_hint}")
    searched = lines[index + 1].strip()
    assert searched.startswith(f"searched: ${agy.env_override}={tmp_path}/no-agy (not an executable), PATH, ")
    assert f"{tmp_path}/.local/bin/agy" in searched
    assert set(rows) == {"AGENT", "mock"} | {spec.id for spec in catalog.CATALOG}
    assert "ran alone" not in result.stdout.decode(), "the versions were read one after another"
    assert not any(line.startswith("not installed:") for line in lines)  # --all: a row each instead
    # Without --all, the missing agents are one line, their notes kept (loose, at the end).
    short = run("list", "--no-probe", env=env).stdout.decode().splitlines()
    missing = [spec.id for spec in catalog.CATALOG if spec.id not in ("claude", "codex", "gemini", "claude-acp")]
    assert short[-1] == f"not installed: {', '.join(missing)} (`list --all` shows how to install each)"
    assert not any(line.split()[0] in missing for line in short[:-1] if not line.startswith(" "))
    assert f"${agy.env_override}={tmp_path}/no-agy is not an executable" not in "\n".join(short)  # a searched note


def test_list_json_is_the_discovery_report(tmp_path: Path) -> None:
    result = run("list", "--json", env=_fake_agents(tmp_path))
    assert result.returncode == 0 and result.stderr == b""
    report = json.loads(result.stdout)
    wrapped = {"$ref": "#/definitions/DiscoveryReport", "definitions": SCHEMA["definitions"]}
    jsonschema.validate(report, wrapped)
    versions = {agent["id"]: agent["version"] for agent in report["agents"]}
    assert versions == {"mock": "mock", "claude": "2.1.197", "codex": "0.171.0", "gemini": None, "claude-acp": None}
    # Each agent probed: its AgentDetails added (``details``), or why not (``probe_error``).
    details = {"$ref": "#/definitions/AgentDetails", "definitions": SCHEMA["definitions"]}
    by_id = {agent["id"]: agent for agent in report["agents"]}
    jsonschema.validate(by_id["mock"]["details"], details)
    assert by_id["mock"]["details"]["version"] == "mock" and "probe_error" not in by_id["mock"]
    for fake in ("claude", "codex", "gemini", "claude-acp"):  # shell scripts: no agent protocol
        assert "details" not in by_id[fake] and by_id[fake]["probe_error"]["message"], by_id[fake]
    (tmp_path / "again").mkdir()
    again = json.loads(run("list", "--json", "--no-probe", env=_fake_agents(tmp_path / "again")).stdout)
    assert not any("details" in agent or "probe_error" in agent for agent in again["agents"])


def test_list_probes_the_agents_at_once_each_within_its_timeout(tmp_path: Path) -> None:
    """Two agents whose probe never answers: both are started before either gives up (each
    waits for the other, else fails "ran alone"), each is that agent's Timeout after
    --timeout, and no process of theirs outlives list."""
    bin_dir, started, pids, cwds = tmp_path / "bin", tmp_path / "started", tmp_path / "pids", tmp_path / "cwds"
    for folder in (bin_dir, started, pids, cwds):
        folder.mkdir()
    for name, version in (("claude", "2.1.197 (Claude Code)"), ("codex", "codex-cli 0.171.0")):
        executable(bin_dir / name, f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "{version}"; exit 0; }}\n'
                   f"pwd > {cwds}/{name}; ls -A >> {cwds}/{name}; echo $$ > {pids}/{name}; touch {started}/{name}; i=0\n"
                   f'while [ "$(ls {started} | wc -l)" -lt 2 ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done\n'
                   f'[ "$(ls {started} | wc -l)" -ge 2 ] || {{ echo "ran alone" >&2; exit 9; }}\nexec sleep 300\n')  # fmt: skip
    result = run("list", "--timeout", "12", env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)})
    assert result.returncode == 0 and result.stderr == b"", result.stderr
    text = result.stdout.decode()
    assert text.count("probe failed: HandshakeTimeout: the agent did not finish its handshake in time: no answer "
                      "within 12 s (--timeout)") == 2, text
    assert "ran alone" not in text, "the agents were probed one after another"
    assert "login: logged in" in text  # the mock's, probed beside them
    left = [int(p.read_text()) for p in pids.iterdir() if _running(int(p.read_text()))]
    assert not left, f"probes left running: {left}"
    # Each ran in one empty private directory of list's (not its cwd), removed at its exit.
    places = {tuple(p.read_text().splitlines()) for p in cwds.iterdir()}
    assert len(places) == 1 and len(next(iter(places))) == 1, places
    [(where,)] = places
    assert os.path.basename(where).startswith("probe-") and where != str(ROOT) and not os.path.exists(where)


def test_probe_prints_one_agents_details(tmp_path: Path) -> None:
    table = run("probe", "mock")
    assert table.returncode == 0 and table.stderr == b"", table.stderr
    lines = table.stdout.decode().splitlines()
    assert lines[:2] == ["agent         mock", "version       mock"] and lines[2] == "login         logged in (API key)"
    as_json = run("probe", "mock", "--json")
    jsonschema.validate(json.loads(as_json.stdout), {"$ref": "#/definitions/AgentDetails",
                                                     "definitions": SCHEMA["definitions"]})  # fmt: skip
    unknown = run("probe", "clade")
    assert unknown.returncode == 1 and unknown.stdout == b""
    assert unknown.stderr.decode().startswith("agentproto probe: clade: unknown agent: clade; did you mean claude?")
    missing = run("probe", "gemini", env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert missing.returncode == 1 and "agent not installed: gemini; install it with: npm" in missing.stderr.decode()
    bad = run("probe", "{nope")
    assert bad.returncode == 2 and b"JSON agent reference" in bad.stderr


def _slow_agent(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable(bin_dir / "codex", "#!/bin/sh\nsleep 1\necho 'codex-cli 0.171.0'\n")
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}


def test_list_shows_progress_on_a_live_terminal_only(terminals, tmp_path: Path) -> None:
    env = _slow_agent(tmp_path)
    live = terminals("list", env={**env, "TERM": "xterm"})
    live.expect("reading the agents' versions…")
    live.expect("probing 2 agents (login, models, commands)… 1/2")  # the mock answered, codex takes 1 s
    live.expect("codex ")
    assert live.wait() == 0
    assert "\r\x1b[K" in live.text()  # the progress line was erased before the table
    for quiet in ({"TERM": "dumb"}, {"TERM": "xterm", "NO_COLOR": "1"}):
        term = terminals("list", env={**env, **quiet})
        term.expect("codex ")
        assert term.wait() == 0 and "reading the agents' versions" not in term.text(), quiet
    piped = run("list", env={**env, "TERM": "xterm"})
    assert piped.returncode == 0 and piped.stderr == b""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_list_and_no_version_probe_outlives_it(tmp_path: Path, signum: int) -> None:
    """An agent whose ``--version`` hangs (and one that leaves a child behind): a signal
    ends ``list`` at once, 128 + N, and takes every probe with it (they were left running)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pids = tmp_path / "pids"
    pids.mkdir()
    executable(bin_dir / "codex", f"#!/bin/sh\necho $$ > {pids}/codex\nexec sleep 300\n")
    executable(bin_dir / "claude", f"#!/bin/sh\nsetsid sleep 300 & echo $! > {pids}/detached\n"
                                   f"echo $$ > {pids}/claude\nexec sleep 300\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentproto", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=base_env({"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}), cwd=str(ROOT),
    )
    started: list[int] = []
    try:
        deadline = time.monotonic() + GUARD
        while len(list(pids.iterdir())) < 3 or any(not p.read_text().strip() for p in pids.iterdir()):
            assert time.monotonic() < deadline, "hang guard: the probes never started"
            time.sleep(0.05)
        started = [int(p.read_text()) for p in pids.iterdir()]
        proc.send_signal(signum)
        assert proc.wait(GUARD) == 128 + signum
        out, err = proc.communicate()
        assert out == b"" and b"Traceback" not in err, err
        left = [pid for pid in started if _running(pid)]
        assert not left, f"probes left running: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in started:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """Still alive 5 s on: neither gone nor a zombie. A process killed just now may not have
    run its death yet on a loaded machine, and a killed orphan may wait a moment for init to
    reap it: both are waited for (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + 5
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state == "Z":
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)


# -- a reader that went away, a reader that stopped ---------------------------------------------


def _closed_pipe() -> int:
    """The write end of a pipe whose read end is already closed: the first write is EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    return write_end


@pytest.mark.parametrize(
    "args,stdin",
    [
        (["list"], b""),
        (["list", "--json"], b""),
        (["schema"], b""),
        (["--help"], b""),
        (["chat", "--help"], b""),
        (["--version"], b""),
        (["chat"], b"hi"),
        (["chat", "--json"], b"hi"),
        (["serve"], b'{"id": 1, "cmd": "discover"}\n'),
        (["agent"], b'{"op": "capabilities"}\n'),
        (["--single-shot"], b'{"op": "capabilities"}'),
        (["serve", "--transport", "jsonrpc"], b'{"jsonrpc": "2.0", "id": 1, "method": "capabilities"}\n'),
        (["serve", "--transport", "mcp"], b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}\n'),
        (["inspect", "--view", "cost", "--db", "off"], b""),
    ],
)
def test_a_closed_stdout_ends_every_command_at_once_and_quietly(args: list[str], stdin: bytes) -> None:
    stdout = _closed_pipe()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "agentproto", *args], input=stdin, stdout=stdout, stderr=subprocess.PIPE,
            env=base_env(), cwd=str(ROOT), timeout=GUARD,
        )
    finally:
        os.close(stdout)
    assert done.returncode == 1, done.stderr
    assert done.stderr == b"", done.stderr  # no traceback, no complaint: how Unix tools end


@pytest.mark.parametrize("command", [["chat", "--mock"], ["serve", "--mock"]])
def test_a_flood_into_head_ends_when_head_does(command: list[str]) -> None:
    """``… | head -c 10``: once the reader has its 10 bytes and goes, the command ends, status 1."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentproto", *command, script("flood")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base_env(), cwd=str(ROOT),
    )
    assert proc.stdin is not None and proc.stdout is not None
    if command[0] == "chat":
        proc.stdin.write(b"go")
        proc.stdin.close()
    else:
        proc.stdin.write(b'{"id":1,"cmd":"open","agent":"mock","dir":"."}\n{"id":2,"cmd":"prompt","session":"s1","text":"go"}\n')
        proc.stdin.flush()
    assert len(proc.stdout.read(10)) == 10
    proc.stdout.close()
    status = proc.wait(GUARD)
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stderr.close()
    if not proc.stdin.closed:
        proc.stdin.close()
    assert status == 1 and b"Traceback" not in err and b"Broken pipe" not in err, err


def _big_flood(tmp_path: Path) -> str:
    """More than a pipe holds: a reader that never reads leaves the writer stuck."""
    chunk = {"Emit": {"TextDelta": {"message_id": "m1", "text": "x" * 100}}}
    return write_script(tmp_path, {"turns": [[{"Repeat": {"times": 5000, "steps": [chunk]}}, {"Sleep": 60000}]]})


def _buffered(read_end: int) -> int:
    buffered = bytearray(4)
    fcntl.ioctl(read_end, termios.FIONREAD, buffered)
    return int.from_bytes(buffered, sys.byteorder)


def _wait_until_the_pipe_is_full(read_end: int) -> None:
    """Until the writer is stuck: the pipe holds at least half its 64 KiB and has not grown
    for 0.5 s. Not a byte count: a full pipe's 16 pages may each hold less than 4 KiB (a
    write's tail goes to the last page only if it fits whole), so a full pipe held 59,913
    bytes in one run in 15 and 60,043 in the others."""
    deadline = time.monotonic() + GUARD
    last, still = -1, 0
    while still < 10 or last < 32768:
        assert time.monotonic() < deadline, "hang guard: the pipe never filled"
        time.sleep(0.05)
        now = _buffered(read_end)
        still = still + 1 if now == last else 0
        last = now


@pytest.mark.parametrize("command,status", [("chat", 128 + signal.SIGTERM), ("serve", 0), ("agent", 0)])
def test_sigterm_ends_a_command_whose_reader_stopped_reading(tmp_path: Path, command: str, status: int) -> None:
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentproto", command, "--mock", _big_flood(tmp_path)],
        stdin=subprocess.PIPE, stdout=write_end, stderr=subprocess.PIPE, env=base_env(), cwd=str(ROOT),
    )
    os.close(write_end)
    try:
        assert proc.stdin is not None
        if command == "chat":
            proc.stdin.write(b"go")
            proc.stdin.close()
        elif command == "agent":
            proc.stdin.write(b'{"op":"open","agent":"mock","dir":"."}\n{"op":"prompt","text":"go"}\n')
            proc.stdin.flush()
        else:
            proc.stdin.write(b'{"id":1,"cmd":"open","agent":"mock","dir":"."}\n'
                             b'{"id":2,"cmd":"prompt","session":"s1","text":"go"}\n')
            proc.stdin.flush()
        _wait_until_the_pipe_is_full(read_end)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(GUARD) == status  # the hang guard: before the fix it never exited
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(read_end)


def test_the_list_table_shows_no_control_character_an_agent_sent() -> None:
    from agentproto.commands.listing import table

    report: Any = {"agents": [{"id": "mine", "name": "Mine", "executable_path": "/opt/mine", "source": "Path",
                               "version": "1"}], "missing": [], "diagnostics": []}  # fmt: skip
    model = {"id": "model", "name": "Model", "live": True, "current": "a\x1b]0;owned\x07",
             "kind": {"Select": {"choices": [{"value": "a\x1b]0;owned\x07", "name": "a"}, {"value": "b\u202e", "name": "b"}]}}}
    details = {"auth": "Unknown", "config_options": [model], "commands": [{"name": "x\x1b[2J", "description": ""}],
               "capabilities": {"features": [], "mcp_transports": []}}  # fmt: skip
    text = table(report, {"mine": ("details", details)})
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "models: a?]0;owned?*, b?" in text and "commands: /x?[2J" in text
