"""``python -m agentproto replay``: every recording in fixtures/recordings/ replays (add a
file, gain a test) with no agent CLI on PATH; a deliberately edited copy is drift (exit
1, naming the request and the first differing line, recorded vs live); a garbled one is
exit 2; ``--update`` rewrites the responses and keeps the agent wire."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sidecar import ROOT, Sidecar, base_env, script

from agentproto.core.redact import Secrets
from recordings import RECORDINGS, files

CLI_DIRS = (str(ROOT / ".cache"), "node_modules")


def no_agents_env() -> dict[str, str]:
    """An environment where no agent CLI can be found: PATH without the pinned CLIs' dirs."""
    env = base_env()
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not any(d in p for d in CLI_DIRS))
    env["AGENTPROTO_DB"] = "off"
    return env


def replay(*paths_and_flags: Path | str) -> subprocess.CompletedProcess[str]:
    """``replay`` of the paths (and flags, given as strings), as a user runs it."""
    flags = [a for a in paths_and_flags if isinstance(a, str)]
    paths = [str(a) for a in paths_and_flags if not isinstance(a, str)]
    return subprocess.run(
        [sys.executable, "-m", "agentproto", "replay", *flags, *paths],
        capture_output=True, text=True, env=no_agents_env(), cwd=str(ROOT), timeout=120,
    )  # fmt: skip


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return path


def test_the_recordings_cover_every_frontend_and_agent() -> None:
    frontends = {records(path)[0]["frontend"] for path in files()}
    assert frontends == {"serve", "unix", "agent", "single-shot", "http", "jsonrpc", "mcp"}
    agents = {r["agent"]["id"] for path in files() for r in records(path) if r.get("dir") == "launch"}
    assert {"mock", "claude", "codex", "acp-test"} <= agents


@pytest.mark.parametrize("path", files(), ids=lambda p: p.stem)
def test_every_recording_replays_without_its_agent(path: Path) -> None:
    done = replay(path)
    assert done.returncode == 0, done.stderr
    assert "every response matched" in done.stderr


def _edit_first_expectation(recs: list[dict]) -> tuple[list[dict], str]:
    """The copy with its first reply changed (a pair's response, or the first line out
    after the first command), and the request it answers."""
    for r in recs:
        if "response" in r:
            r["response"] = r["response"].replace("{", '{"edited":true,', 1)
            return recs, r["request"]
    first_in = next(i for i, r in enumerate(recs) if r.get("dir") == "in")
    for r in recs[first_in:]:
        if r.get("dir") == "out":
            r["line"] = r["line"].replace("{", '{"edited":true,', 1)
            return recs, recs[first_in]["line"]
    raise AssertionError("nothing to edit")


@pytest.mark.parametrize("path", files(), ids=lambda p: p.stem)
def test_an_edited_recording_is_drift_naming_request_and_line(path: Path, tmp_path: Path) -> None:
    recs, request = _edit_first_expectation(records(path))
    done = replay(write(tmp_path / path.name, recs))
    assert done.returncode == 1, done.stderr
    assert "drift:" in done.stderr and f"request {request[:300]}" in done.stderr  # long ones are cut
    assert "recorded: " in done.stderr and '"edited":true' in done.stderr.split("recorded: ", 1)[1].split("\n")[0]
    live = done.stderr.split("live:     ", 1)[1].split("\n")[0]
    assert '"edited"' not in live


@pytest.mark.parametrize("path", files(), ids=lambda p: p.stem)
def test_a_garbled_recording_is_exit_2_naming_the_line(path: Path, tmp_path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    garbled = tmp_path / path.name
    garbled.write_text("\n".join(lines[:1] + [lines[1][: len(lines[1]) // 2]] + lines[2:]) + "\n", encoding="utf-8")
    done = replay(garbled)
    assert done.returncode == 2, done.stderr
    assert "line 2: not JSON" in done.stderr


def test_what_is_not_a_valid_record_is_exit_2(tmp_path: Path) -> None:
    cases = {
        "missing": None,
        "empty": "",
        "array": "[1, 2]\n",
        "pair-types": '{"request": 1, "response": "x"}\n',
        "pair-extra": '{"request": "{}", "response": "x", "more": 1}\n',
        "unknown-dir": '{"t": 1, "dir": "sideways", "line": "x"}\n',
        "wire-no-session": '{"t": 1, "dir": "to_agent", "line": "x"}\n',
        "not-utf8": b"\xff\xfe\n",
    }
    for name, content in cases.items():
        path = tmp_path / f"{name}.ndjson"
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif content is not None:
            path.write_text(content)
        done = replay(path)
        assert done.returncode == 2, (name, done.stderr)
        assert str(path) in done.stderr, name


def test_a_header_naming_a_mock_script_without_its_text_is_exit_2(tmp_path: Path) -> None:
    # Replay never opens mock.path (tests/commands/test_replay_safety.py checks it is not opened).
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"turns": [], "name": "caf\xe9"}')
    header = {"recording": 1, "agentproto": "0", "frontend": "agent", "tmpdir": "/tmp", "t": 1,
              "mock": {"path": str(bad), "sha256": None, "script": None}}  # fmt: skip
    done = replay(write(tmp_path / "r.ndjson", [header]))
    assert done.returncode == 2, done.stderr
    assert f"without embedding its text (`mock.text`) (recorded from {bad}, which replay never opens)" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_a_record_without_its_directions_members_is_exit_2_saying_which(tmp_path: Path) -> None:
    cases = {
        '{"t": 1, "dir": "spawn", "session": "s"}': "a spawn record without `argv`",
        '{"t": 1, "dir": "id", "session": "s", "purpose": "p", "value": 5}': "`value` of a id record has the wrong type",
        '{"t": 1, "dir": "from_agent", "session": "s", "line": "x", "read": true}': "`read` of a from_agent record",
        '{"t": 1, "dir": "post", "line": "x"}': "a post record without `path`",
    }
    for index, (line, message) in enumerate(cases.items()):
        path = tmp_path / f"{index}.ndjson"
        path.write_text(line + "\n")
        done = replay(path)
        assert done.returncode == 2 and message in done.stderr, (line, done.stderr)


def claude_deltas(recs: list[dict]) -> list[dict]:
    return [r for r in recs if r.get("dir") == "from_agent" and '"text_delta"' in r["line"]]


def test_a_changed_agent_answer_drifts_what_the_app_sees(tmp_path: Path) -> None:
    recs = records(RECORDINGS / "claude.ndjson")
    delta = next(r for r in claude_deltas(recs) if '"text":"from a"' in r["line"])
    delta["line"] = delta["line"].replace('"text":"from a"', '"text":"FROM A"')
    done = replay(write(tmp_path / "claude.ndjson", recs))
    assert done.returncode == 1
    # The real driver mapped the edited line: the app would now see other text.
    assert "Hello FROM A recorded Claude." in done.stderr.split("live:", 1)[1].split("\n")[0]


def test_the_reads_of_a_recording_are_replayed_as_they_were_read(tmp_path: Path) -> None:
    # Claude's deltas came in one read, and the driver merged them into one TextDelta.
    recs = records(RECORDINGS / "claude.ndjson")
    deltas = claude_deltas(recs)
    assert len(deltas) > 1 and len({r["read"] for r in deltas}) == 1
    for number, r in enumerate(deltas):  # as if each had come in a read of its own
        r["read"] = 1000 + number
    done = replay(write(tmp_path / "claude.ndjson", recs))
    assert done.returncode == 1
    assert '"text":"Hello "' in done.stderr.split("live:", 1)[1].split("\n")[0]


def test_a_driver_that_writes_something_else_to_its_agent_is_drift(tmp_path: Path) -> None:
    recs = records(RECORDINGS / "codex.ndjson")
    sent = next(r for r in recs if r.get("dir") == "to_agent" and '"turn/start"' in r["line"])
    sent["line"] = sent["line"].replace("say hello", "say goodbye")
    done = replay(write(tmp_path / "codex.ndjson", recs))
    assert done.returncode == 1
    assert "what the driver of s1 wrote to its agent differs" in done.stderr
    assert "say goodbye" in done.stderr.split("recorded:", 1)[1].split("\n")[0]


def test_replay_option_at_the_top_level_and_the_seed_spelling(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "agentproto", "--replay", str(RECORDINGS / "single-shot.ndjson")],
                          capture_output=True, text=True, env=no_agents_env(), cwd=str(ROOT), timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_update_rewrites_the_responses_and_keeps_the_agent_wire(tmp_path: Path) -> None:
    original = records(RECORDINGS / "acp.ndjson")
    recs, _ = _edit_first_expectation(json.loads(json.dumps(original)))
    path = write(tmp_path / "acp.ndjson", recs)
    assert replay(path).returncode == 1
    done = replay(path, "--update")
    assert done.returncode == 0, done.stderr
    assert os.stat(path).st_mode & 0o777 == 0o600
    updated = records(path)
    assert '"edited"' not in path.read_text()
    wire = lambda rs: [r["line"] for r in rs if r.get("dir") == "from_agent"]  # noqa: E731
    # Kept, under today's redaction rules (the fixture predates some: an auth method's env).
    assert wire(updated) == [Secrets().redact_json(line) for line in wire(original)] and updated[0]["recording"] == 1
    assert replay(path).returncode == 0


def test_replay_never_writes_what_the_recording_names(tmp_path: Path) -> None:
    named = tmp_path / "named-wire.ndjson"
    record = tmp_path / "serve.ndjson"
    with Sidecar(["--mock", script("turn"), "--record", str(record)]) as sc:
        sc.open(dir=str(tmp_path), record_wire=str(named))
        sc.close_stdin()
        sc.drain()
    named.unlink()
    done = replay(record)
    assert done.returncode == 0, done.stderr
    assert not named.exists()


def test_a_recording_carries_its_mock_script(tmp_path: Path) -> None:
    import hashlib
    import shutil

    mock = tmp_path / "mine.json"
    shutil.copy(script("turn"), mock)
    record = tmp_path / "serve.ndjson"
    with Sidecar(["--mock", str(mock), "--record", str(record)]) as sc:
        session = sc.open(dir=str(tmp_path))
        sc.ok({"cmd": "prompt", "session": session, "text": "go"})
        sc.events(session, until="RequestOpened")
        sc.close_stdin()
        sc.drain()
    header = records(record)[0]
    assert header["mock"]["path"] == str(mock) and header["agentproto"]
    assert header["mock"]["sha256"] == hashlib.sha256(mock.read_bytes()).hexdigest()
    assert header["mock"]["script"] == json.loads(mock.read_text())
    mock.unlink()  # replay needs only the recording
    done = replay(record)
    assert done.returncode == 0, done.stderr


def test_a_plan_usages_fetched_at_is_the_clocks_on_both_framings(tmp_path: Path) -> None:
    """A PlanUsage's fetched_at is read from the clock (the mock's, a real agent's): replay
    zeroes it on both sides, as it does an event's occurred_at."""
    mock = tmp_path / "plan.json"
    mock.write_text(json.dumps({"plan_usage": {"plan": "max", "windows": []}}))
    serve = tmp_path / "serve.ndjson"
    with Sidecar(["--mock", str(mock), "--record", str(serve)]) as sc:
        assert sc.ok({"cmd": "plan_usage_all"})[0]["plan_usage"]["fetched_at"]["nanos_since_epoch"] >= 0
        assert sc.ok({"cmd": "plan_usage", "agent": "mock"})["plan"] == "max"
        sc.close_stdin()
        sc.drain()
    ops = tmp_path / "ops.ndjson"
    requests = '{"op": "plan_usage_all"}\n{"op": "plan_usage", "agent": "mock"}\n'
    done = subprocess.run([sys.executable, "-m", "agentproto", "agent", "--mock", str(mock), "--record", str(ops)],
                          input=requests, capture_output=True, text=True, env=no_agents_env(), cwd=str(ROOT),
                          timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stdout.count('"fetched_at"') == 2, done.stderr
    for path in (serve, ops):
        assert len(records(path)) > 2
        done = replay(path)
        assert done.returncode == 0, done.stderr


def test_every_drifted_request_of_the_ops_framings_is_reported(tmp_path: Path) -> None:
    recs = records(RECORDINGS / "mock-ops.ndjson")
    pairs = [r for r in recs if "response" in r]
    for r in (pairs[0], pairs[3]):  # open, and explain: each request's response is its own
        r["response"] = r["response"].replace("{", '{"edited":true,', 1)
    done = replay(write(tmp_path / "two.ndjson", recs))
    assert done.returncode == 1
    drifts = [line for line in done.stderr.splitlines() if line.startswith("agentproto: drift:")]
    assert len(drifts) == 2 and '"op": "open"' in drifts[0] and '"op": "explain"' in drifts[1]
    assert "2 drift(s)" in done.stderr


def test_an_appended_recording_replays_run_by_run(tmp_path: Path) -> None:
    # Two processes recording into one file (append mode): two runs, each replayed against a
    # runtime of its own (the second's session is s1 again), a drift named by its run.
    from ops_support import Proc

    record = tmp_path / "twice.ndjson"
    for text in ("first run", "second run"):
        p = Proc(["agent", "--record", str(record)])  # the echo mock
        try:
            p.request({"op": "open", "agent": "mock", "dir": str(tmp_path)})
            p.request({"op": "prompt", "text": text})
            p.close_stdin()
            assert p.wait() == 0
        finally:
            p.stop()
    recs = records(record)
    assert [r["frontend"] for r in recs if "recording" in r] == ["agent", "agent"]
    done = replay(record)
    assert done.returncode == 0, done.stderr
    last = next(r for r in reversed(recs) if "response" in r and "second run" in r["request"])
    last["response"] = last["response"].replace("{", '{"edited":true,', 1)
    done = replay(write(tmp_path / "edited.ndjson", recs))
    assert done.returncode == 1 and "(run 2): request" in done.stderr and "(run 1)" not in done.stderr



def test_input_more_than_a_socket_takes_at_once_replays(tmp_path: Path) -> None:
    # A 9 MiB line (recorded by its head and size) and a 4 MiB one: replay writes each into
    # the frontend's socket pair in many writes, as the frontend reads them.
    record = tmp_path / "big.ndjson"
    lines = b'{"id": 1, "cmd": "discover", "pad": "' + b"x" * (9 * 1024 * 1024) + b'"}\n'
    lines += json.dumps({"id": 2, "cmd": "discover", "pad": "y" * (4 * 1024 * 1024)}).encode() + b"\n"
    done = subprocess.run(
        [sys.executable, "-m", "agentproto", "serve", "--record", str(record)],
        input=lines, capture_output=True, env=no_agents_env(), cwd=str(ROOT), timeout=60,
    )  # fmt: skip
    assert done.returncode == 0
    recs = records(record)
    assert [bool(r.get("too_long")) for r in recs if r.get("dir") == "in"] == [True, False]
    done = replay(record)
    assert done.returncode == 0, done.stderr
    assert "every response matched" in done.stderr


def test_a_single_shot_request_more_than_a_socket_takes_is_whole_before_its_end(tmp_path: Path) -> None:
    # --single-shot's input ends right after the request: the end (the write side shut) must
    # wait until the last of its 4 MiB is written, or the request replays cut short.
    record = tmp_path / "big.ndjson"
    request = json.dumps({"op": "capabilities", "pad": "y" * (4 * 1024 * 1024)})
    done = subprocess.run(
        [sys.executable, "-m", "agentproto", "--single-shot", "--record", str(record)],
        input=request, capture_output=True, text=True, env=no_agents_env(), cwd=str(ROOT), timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and '"kind":"result"' in done.stdout
    done = replay(record)
    assert done.returncode == 0, done.stderr
    assert "every response matched" in done.stderr


def test_several_recordings_a_line_each_and_the_worst_exit_code(tmp_path: Path) -> None:
    """``replay A B C`` (a glob in CI): each file replayed as if alone, a line per file,
    then the worst code of them, 2 (invalid) over 1 (drift) over 0, in any order given."""
    good = files()[0]
    drifted = write(tmp_path / "drifted.ndjson", _edit_first_expectation(records(good))[0])
    lines = good.read_text(encoding="utf-8").splitlines()
    garbled = tmp_path / "garbled.ndjson"
    garbled.write_text("\n".join(lines[:1] + [lines[1][: len(lines[1]) // 2]] + lines[2:]) + "\n", encoding="utf-8")
    cases = [((good,), 0), ((good, drifted), 1), ((drifted, good), 1), ((garbled, drifted, good), 2),
             ((good, drifted, garbled), 2), ((good, good), 0)]  # fmt: skip
    for paths, code in cases:
        done = replay(*paths)
        assert done.returncode == code, (paths, done.stderr)
        tail = done.stderr.splitlines()
        if len(paths) == 1:
            assert tail[-1] == f"agentproto: {good}: every response matched", done.stderr  # one file: as before
            continue
        word = {good: "ok", drifted: "drift", garbled: "invalid"}
        assert tail[-1 - len(paths) : -1] == [f"agentproto: {word[p]}  {p}" for p in paths], done.stderr
        assert tail[-1].startswith(f"agentproto: {len(paths)} recordings: "), done.stderr
    both = replay(garbled, drifted)
    assert "line 2: not JSON" in both.stderr and "drift:" in both.stderr  # the later file was replayed too
