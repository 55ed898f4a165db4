"""Replay is safe to run on a recording from a stranger (a pull request): hostile recordings,
built from valid records, replayed by ``python3 -m agentproto replay FILE`` in a process
with an audit hook (``sys.addaudithook``) that logs every process start and every open of
a watched path. No replay starts a process, none opens ``mock.path``, and nothing outside
the replay's own temp directory changes (a fake HOME, the targets, and TMPDIR itself are
snapshotted before and after). SECURITY.md, "Replaying a recording", states the rules."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from sidecar import ROOT, Sidecar, script

from agentproto.loopio import private
from agentproto.core.recording import Normalizer, _replace_path
from tests.commands.test_replay import no_agents_env, records, replay, write

FIXTURES = ROOT / "fixtures" / "recordings"
SPAWNS = ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.fork", "os.forkpty", "os.system", "pty.spawn")

#: The replay process: an audit hook logging spawns (and opens of WATCH), then the CLI.
AUDITED = """
import json, runpy, sys
log_path, watch, recording = sys.argv[1:4]
log = open(log_path, "a", encoding="utf-8")
SPAWNS = %r
def hook(event, args):
    if event in SPAWNS:
        log.write(json.dumps([event, repr(args[:2])[:300]]) + "\\n"); log.flush()  # never the env
    elif event == "open" and watch and isinstance(args[0], str) and args[0].startswith(watch):
        log.write(json.dumps([event, args[0]]) + "\\n"); log.flush()
sys.addaudithook(hook)
sys.argv = ["agentproto", "replay", recording]
runpy.run_module("agentproto", run_name="__main__", alter_sys=True)
""" % (SPAWNS,)


def snapshot(*roots: Path) -> dict[str, Any]:
    """Every path under ``roots`` with its type, size and content digest."""
    seen: dict[str, Any] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                digest = None
                if os.path.isfile(path) and not os.path.islink(path):
                    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
                seen[path] = (st.st_mode, st.st_size, digest)
    return seen


class World:
    """A fake HOME (with ``.ssh``), a TMPDIR for the replay, and the audit log."""

    def __init__(self, tmp_path: Path) -> None:
        self.base = tmp_path
        self.home = tmp_path / "home"
        (self.home / ".ssh").mkdir(parents=True)
        (self.home / ".ssh" / "id_rsa").write_text("THE-PRIVATE-KEY\n")
        self.tmpdir = tmp_path / "tmpdir"
        self.tmpdir.mkdir()
        self.marker = tmp_path / "ran"
        self.log = tmp_path / "audit.log"
        self.inputs = tmp_path / "inputs"
        self.inputs.mkdir()

    def replay(self, recs: list[dict[str, Any]], watch: str = "") -> subprocess.CompletedProcess[str]:
        path = write(self.inputs / "hostile.ndjson", recs)
        before = snapshot(self.home, self.tmpdir)
        env = {**no_agents_env(), "HOME": str(self.home), "TMPDIR": str(self.tmpdir)}
        done = subprocess.run(
            [sys.executable, "-c", AUDITED, str(self.log), watch, str(path)],
            capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120,
        )  # fmt: skip
        self.events = [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []
        after = snapshot(self.home, self.tmpdir)
        self.changed = {p: (before.get(p), after.get(p)) for p in before.keys() | after.keys()
                        if before.get(p) != after.get(p)}  # fmt: skip
        return done

    def check_safe(self) -> None:
        spawns = [event for event in self.events if event[0] in SPAWNS]
        assert spawns == [], spawns
        assert not self.marker.exists(), "a command of the recording ran"
        assert self.changed == {}, self.changed


def header(**fields: Any) -> dict[str, Any]:
    return {"recording": 1, "agentproto": "0.1.0", "frontend": "agent", "tmpdir": "/recorded-tmp",
            "mock": None, "t": 1, **fields}  # fmt: skip


def shell_open(world: World) -> dict[str, Any]:
    agent = {"acp": {"name": "evil", "path": "/bin/sh", "args": ["-c", f"touch {world.marker}"]}}
    return {"op": "open", "agent": agent, "dir": str(world.base)}


# -- 1. a session with no recorded wire is never started ------------------------------------------


def test_an_agent_without_a_recorded_wire_is_exit_2_before_anything_runs(tmp_path: Path) -> None:
    world = World(tmp_path)
    installation = {"id": "evil", "name": "evil", "executable_path": "/bin/sh", "source": "Pinned",
                    "upgrade": None, "acp_args": ["-c", f"touch {world.marker}"]}  # fmt: skip
    recs = [
        header(),
        {"t": 2, "dir": "launch", "session": "s1", "agent": installation},
        {"request": json.dumps(shell_open(world)), "response": '{"kind":"result","op":"open","ok":true}'},
    ]
    done = world.replay(recs)
    world.check_safe()  # first: a spawn or a change is what this test is about
    assert done.returncode == 2, done.stderr
    assert "session s1 has no recorded agent wire and its agent is evil (/bin/sh)" in done.stderr
    assert "replay starts no agent" in done.stderr


@pytest.mark.parametrize("op", ["open", "probe", "generate", "plan_usage"])
def test_an_agent_request_without_a_launch_record_starts_nothing_and_is_exit_2(tmp_path: Path, op: str) -> None:
    # No launch record to check up front: the runtime refuses the agent when the request comes.
    world = World(tmp_path)
    request = {**shell_open(world), "op": op, **({"prompt": "hi"} if op == "generate" else {})}
    recs = [header(), {"request": json.dumps(request), "response": "{}"}]
    done = world.replay(recs)
    world.check_safe()  # first: a spawn or a change is what this test is about
    assert done.returncode == 2, done.stderr
    who = "a request" if op == "plan_usage" else "session s1"
    assert f"{who} has no recorded agent wire and its agent is evil (/bin/sh)" in done.stderr


def test_a_launch_record_saying_mock_does_not_let_another_agent_run(tmp_path: Path) -> None:
    world = World(tmp_path)
    mock = {"id": "mock", "name": "Mock", "executable_path": "mock", "source": "Pinned", "upgrade": None,
            "acp_args": None}  # fmt: skip
    recs = [header(), {"t": 2, "dir": "launch", "session": "s1", "agent": mock},
            {"request": json.dumps(shell_open(world)), "response": "{}"}]  # fmt: skip
    done = world.replay(recs)
    world.check_safe()  # first: a spawn or a change is what this test is about
    assert done.returncode == 2, done.stderr


@pytest.mark.parametrize("op", ["discover", "plan_usage_all"])
def test_discover_in_a_recording_runs_no_version_probe(tmp_path: Path, op: str) -> None:
    # An agent CLI on PATH would get `--version` run: a fake one that leaves a mark.
    # plan_usage_all discovers, then asks each agent found: this machine's claude is refused.
    world = World(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    fake.write_text(f"#!/bin/sh\ntouch {world.marker}\necho 1.0.0\n")
    fake.chmod(0o755)
    recs = [header(), {"request": json.dumps({"op": op}), "response": "{}"}]
    path = write(world.inputs / "discover.ndjson", recs)
    env = {**no_agents_env(), "HOME": str(world.home), "TMPDIR": str(world.tmpdir),
           "AGENTPROTO_CLAUDE_PATH": str(fake), "PATH": f"{bin_dir}:{no_agents_env()['PATH']}"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", AUDITED, str(world.log), "", str(path)],
                          capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=120)  # fmt: skip
    if op == "discover":
        assert done.returncode == 1, done.stderr  # drift: this machine's agents, no version
    else:
        assert done.returncode == 2, done.stderr
        assert "a request has no recorded agent wire and its agent is claude" in done.stderr
    events = [json.loads(line) for line in world.log.read_text().splitlines()] if world.log.exists() else []
    assert [e for e in events if e[0] in SPAWNS] == []
    assert not world.marker.exists()


# -- 2. the mock script comes from the recording ------------------------------------------------------


def mock_recording() -> list[dict[str, Any]]:
    return records(FIXTURES / "mock-serve.ndjson")


def test_the_embedded_mock_script_is_played_and_mock_path_never_opened(tmp_path: Path) -> None:
    world = World(tmp_path)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"turns": [[{"End": {"Failed": {"message": "the other script"}}}]]}))
    recs = mock_recording()
    recs[0]["mock"]["path"] = str(elsewhere)
    done = world.replay(recs, watch=str(elsewhere))
    world.check_safe()  # first: a spawn or a change is what this test is about
    assert done.returncode == 0, done.stderr
    assert world.events == []  # never opened


def test_a_mock_header_without_its_text_is_exit_2_and_mock_path_never_opened(tmp_path: Path) -> None:
    world = World(tmp_path)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(Path(script("turn")).read_bytes())
    recs = mock_recording()
    recs[0]["mock"] = {"path": str(elsewhere), "sha256": hashlib.sha256(elsewhere.read_bytes()).hexdigest()}
    done = world.replay(recs, watch=str(elsewhere))
    world.check_safe()  # first: a spawn or a change is what this test is about
    assert done.returncode == 2, done.stderr
    assert "without embedding its text (`mock.text`)" in done.stderr and "which replay never opens" in done.stderr
    assert world.events == []


@pytest.mark.parametrize("tamper", ["sha256", "text"])
def test_a_mock_script_whose_sha256_does_not_match_is_exit_2(tmp_path: Path, tamper: str) -> None:
    world = World(tmp_path)
    recs = mock_recording()
    if tamper == "sha256":
        recs[0]["mock"]["sha256"] = "0" * 64
    else:
        recs[0]["mock"]["text"] = recs[0]["mock"]["text"].replace("Let me check.", "Let me see.")
    done = world.replay(recs)
    world.check_safe()  # first: a spawn or a change is what this test is about
    assert done.returncode == 2, done.stderr
    assert "does not have the header's sha256" in done.stderr


# -- 3. what the recorded agent asks of agentproto is answered from the recording -------------------


def acp_hostile(world: World) -> list[dict[str, Any]]:
    """The ACP recording, its session in the fake HOME, its agent asking (mid-turn) to write
    ~/.ssh/authorized_keys, to read ~/.ssh/id_rsa and to run a command in a terminal; the
    recorded answers are agentproto's as they would have been."""
    text = (FIXTURES / "acp.ndjson").read_text()
    recorded_dir = json.loads(text.splitlines()[2])["cwd"]
    text = text.replace(recorded_dir, str(world.home))
    recs = [json.loads(line) for line in text.splitlines()]
    recs[0]["tmpdir"] = "/recorded-tmp"  # the fake HOME is not a temp path of the recording
    prompt = next(i for i, r in enumerate(recs) if r.get("dir") == "to_agent" and "session/prompt" in r["line"])
    ssh = world.home / ".ssh"

    def asks(read: int, rpc_id: str, method: str, params: dict[str, Any], result: Any) -> list[dict[str, Any]]:
        request = {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": {"sessionId": "sess-1", **params}}
        answer = {"jsonrpc": "2.0", "id": rpc_id, "result": result}
        asked, answered = (json.dumps(m, separators=(",", ":")) for m in (request, answer))
        return [
            {"t": 1, "dir": "from_agent", "line": asked, "session": "s1", "read": read},
            {"t": 1, "dir": "to_agent", "line": answered, "session": "s1"},
        ]

    inserted = (
        asks(30, "w1", "fs/write_text_file", {"path": str(ssh / "authorized_keys"), "content": "ssh-rsa EVIL"}, None)
        + asks(31, "r1", "fs/read_text_file", {"path": str(ssh / "id_rsa")}, {"content": "recorded"})
        + asks(32, "t1", "terminal/create", {"command": "/bin/sh", "args": ["-c", f"touch {world.marker}"]},
               {"terminalId": "term-1"})
    )  # fmt: skip
    return recs[: prompt + 1] + inserted + recs[prompt + 1 :]


def test_a_recorded_agents_fs_and_terminal_requests_touch_nothing_and_replay_faithfully(tmp_path: Path) -> None:
    world = World(tmp_path)
    done = world.replay(acp_hostile(world))
    world.check_safe()  # first: a spawn or a change is what this test is about
    # The recorded answers are what replay answers: no drift, and nothing was done.
    assert done.returncode == 0, done.stderr
    assert "THE-PRIVATE-KEY" not in done.stderr
    assert not (world.home / ".ssh" / "authorized_keys").exists()


def test_an_agent_request_the_recording_never_answered_gets_an_error_not_a_service(tmp_path: Path) -> None:
    world = World(tmp_path)
    recs = [r for r in acp_hostile(world) if not (r.get("dir") == "to_agent" and '"id":"r1"' in r["line"])]
    done = world.replay(recs)
    world.check_safe()  # first: a spawn or a change is what this test is about
    assert done.returncode == 1, done.stderr  # the live answer (an error) is not in the recording
    assert "replay: the recording holds no answer to this fs/read_text_file" in done.stderr
    assert "THE-PRIVATE-KEY" not in done.stderr


def test_confined_paths_are_refused_outside_the_replays_directory(tmp_path: Path) -> None:
    from agentproto.frontends.control import run_inspect
    from agentproto.drivers.acp import fs as acp_fs
    from agentproto.drivers.claude.mapping import attachment_block
    from agentproto.core.jsonrpc import RpcError

    inside, outside = tmp_path / "root", tmp_path / "home"
    inside.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("THE-SECRET")
    (inside / "mine").write_text("mine")
    private.confine(str(inside))
    try:
        assert "THE-SECRET" not in json.dumps(attachment_block(str(outside / "secret")))
        assert "mine" in json.dumps(attachment_block(str(inside / "mine")))
        with pytest.raises(RpcError, match="outside"):
            acp_fs.write_text_file(str(outside), {"path": "x", "content": "evil"})
        assert not (outside / "x").exists()
        answers: list[Any] = []
        run_inspect(None, {"view": "cost", "db": str(outside / "db")}, lambda v, e: answers.append(e))  # type: ignore[arg-type]
        assert answers and answers[0] is not None and "outside" in answers[0].message
    finally:
        private.confine(None)
    assert "THE-SECRET" in json.dumps(attachment_block(str(outside / "secret")))


# -- 4. temp paths are paths of their own ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("/var/tmp/x", "/var/tmp/x"),
        ("/tmpx", "/tmpx"),
        ("/tmp.bak/x", "/tmp.bak/x"),
        ("/tmp/x", "$TMP/x"),
        ("/tmp", "$TMP"),
        ('"/tmp/x"', '"$TMP/x"'),
        ("'/tmp/x'", "'$TMP/x'"),
        ('\\"/tmp\\"', '\\"$TMP\\"'),
        ("\\/tmp\\/x", "$TMP\\/x"),
        ("\\/var\\/tmp\\/x", "\\/var\\/tmp\\/x"),
        ("dir=/tmp/x", "dir=$TMP/x"),
        ("PATH=/bin:/tmp/x:/var/tmp", "PATH=/bin:$TMP/x:/var/tmp"),
        ("cd /tmp; ls /tmpfoo", "cd $TMP; ls /tmpfoo"),
        ("file:///tmp/a.png", "file://$TMP/a.png"),
        ("x/tmp/y", "x/tmp/y"),
    ],
)
def test_the_recordings_tmpdir_is_replaced_only_as_a_path_of_its_own(text: str, want: str) -> None:
    assert _replace_path(text, "/tmp", "$TMP") == want
    recorded = Normalizer("/tmp", "/tmp", "/tmp/replay-abc", None)
    assert recorded.recorded_side(text) == want
    live = Normalizer("/elsewhere", "/tmp", "/tmp/replay-abc", None)
    assert live.live_side(text) == want


def test_a_session_whose_dir_is_under_var_tmp_replays(tmp_path: Path) -> None:
    if not os.path.isdir("/var/tmp") or not os.access("/var/tmp", os.W_OK):
        pytest.fail("/var/tmp is needed")
    work = tempfile.mkdtemp(prefix="agentproto-test-", dir="/var/tmp")
    try:
        record = tmp_path / "var.ndjson"
        with Sidecar(["--mock", script("turn"), "--record", str(record)]) as sc:
            session = sc.open(dir=work)
            sc.ok({"cmd": "prompt", "session": session, "text": "go"})
            sc.events(session, until="RequestOpened")
            sc.close_stdin()
            sc.drain()
        assert work in record.read_text()
        done = replay(record)
        assert done.returncode == 0, done.stderr
    finally:
        os.rmdir(work)


def test_while_children_are_refused_no_child_starts_not_even_a_terminal(tmp_path: Path) -> None:
    # The backstop under replay's own checks: every child of a session starts in start_tree.
    from agentproto.loopio import process_transport as process
    from agentproto.drivers.acp.services import Terminals
    from agentproto.core.jsonrpc import RpcError
    from agentproto.loopio.loop import Loop

    marker = tmp_path / "ran"
    process.refuse_children("no children now")
    loop = Loop()
    try:
        with pytest.raises(PermissionError, match="no children now"):
            process.start_tree(["/bin/sh", "-c", f"touch {marker}"], None, dict(os.environ), -1, -1)
        terminals = Terminals(loop, lambda: dict(os.environ), str(tmp_path), lambda _t, _x: None)
        with pytest.raises(RpcError, match="no children now"):
            terminals.create({"command": "/bin/sh", "args": ["-c", f"touch {marker}"]})
    finally:
        process.refuse_children(None)
        loop.close()
    assert not marker.exists()


def edited_in_line(name: str, cmd: str, **fields: Any) -> list[dict[str, Any]]:
    """A fixture recording whose protocol 1 ``cmd`` line gets ``fields``; its temp directory
    is its session's own folder (so the test's fake HOME, under /tmp too, is not one)."""
    recs = records(FIXTURES / f"{name}.ndjson")
    for rec in recs:
        line = json.loads(rec["line"]) if rec.get("dir") == "in" else {}
        if line.get("cmd") == "open":
            recs[0]["tmpdir"] = os.path.dirname(line["dir"])
        if line.get("cmd") == cmd:
            rec["line"] = json.dumps({**line, **fields})
    return recs


def test_a_recorded_prompts_attachment_outside_the_replay_is_never_read(tmp_path: Path) -> None:
    # The live driver would read the file and write it to the (recorded) agent; the drift
    # report quotes that line: a key in a CI log.
    world = World(tmp_path)
    recs = edited_in_line("claude", "prompt", attachments=[str(world.home / ".ssh" / "id_rsa")])
    done = world.replay(recs)
    world.check_safe()  # first: a spawn or a change is what this test is about
    assert "THE-PRIVATE-KEY" not in done.stderr
    assert done.returncode == 1, done.stderr  # the recording had no attachment: drift
    assert "replay touches nothing outside its own directory: attachment" in done.stderr


def test_a_recorded_config_home_outside_the_replay_is_never_made(tmp_path: Path) -> None:
    world = World(tmp_path)
    recs = edited_in_line("codex", "open", config_home=str(world.home / ".codex-planted"))
    recs = recs[: next(i for i, r in enumerate(recs) if r.get("dir") == "from_agent")]  # the open is enough
    done = world.replay(recs)
    world.check_safe()  # first: a spawn or a change is what this test is about
    assert not (world.home / ".codex-planted").exists()
    assert done.returncode == 1, done.stderr  # the open fails now: drift, nothing made
    assert "config_home" in done.stderr


def test_a_recorded_dir_climbing_out_of_the_replays_directory_is_not_made(tmp_path: Path) -> None:
    # Replay makes the recording's directories inside its root: ROOT/../../home/x is not.
    world = World(tmp_path)  # TMPDIR is tmp_path/tmpdir, the root one below it
    climbing = "/recorded-tmp/../../home/planted"
    recs = [header(), {"request": json.dumps({"op": "open", "agent": "mock", "dir": climbing}), "response": "{}"}]
    done = world.replay(recs)
    world.check_safe()  # first: a spawn or a change is what this test is about
    assert not (world.home / "planted").exists()
    assert done.returncode == 1, done.stderr  # no such directory: the open fails, drift
