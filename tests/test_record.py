"""--record: the ordered transcript of protocol 1 on stdio, and the recorder's own rules
(0600, append, never through a symlink, best effort)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from ops_support import Proc, script
from sidecar import ROOT, Sidecar, base_env

from agentproto.record import Recorder


def test_serve_records_every_line_in_and_out_in_order(tmp_path: Path) -> None:
    record = tmp_path / "serve.ndjson"
    with Sidecar(["--mock", script("turn"), "--record", str(record)]) as sidecar:
        session = sidecar.open()
        sidecar.send({"id": 2, "cmd": "prompt", "session": session, "text": "go"})
        sidecar.events(session, until="RequestOpened")
        sidecar.write_raw(b"\n   \nnot json\n")
        sidecar.wait_for(lambda line: line.get("error", {}).get("kind") == "BadFrame")
        sidecar.close_stdin()
        sidecar.drain()
        assert sidecar.close() == 0
        seen = sidecar.seen
    records = [json.loads(line) for line in record.read_text().splitlines()]
    header, records = records[0], records[1:]
    assert header["recording"] == 1 and header["frontend"] == "serve" and header["mock"]["path"] == script("turn")
    # The app's lines, and (besides them) its mock session's launch and the input's end.
    entries = [entry for entry in records if entry["dir"] in ("in", "out")]
    assert all(set(entry) == {"t", "dir", "line"} for entry in entries)
    assert [entry["dir"] for entry in records if entry not in entries] == ["launch", "eof"]
    times = [entry["t"] for entry in records]
    assert times == sorted(times) and all(isinstance(t, int) for t in times)
    ins = [entry["line"] for entry in entries if entry["dir"] == "in"]
    outs = [json.loads(entry["line"]) for entry in entries if entry["dir"] == "out"]
    # Every command as sent (blank lines carry nothing and are not recorded) ...
    assert [json.loads(line)["cmd"] for line in ins[:-1]] == ["open", "prompt"] and ins[-1] == "not json"
    # ... and every line out, exactly as the app read them, in the same order.
    assert outs == seen and "hello" in outs[0] and outs[-1] == {"closed": session}
    # A command is recorded before its reply, and the reply before the turn's first event.
    order = [(entry["dir"], json.loads(entry["line"]) if entry["line"].startswith("{") else None) for entry in entries]
    prompt_in = next(i for i, (d, obj) in enumerate(order) if d == "in" and obj and obj.get("cmd") == "prompt")
    prompt_reply = next(i for i, (d, obj) in enumerate(order) if d == "out" and obj.get("id") == 2)
    first_event = next(i for i, (d, obj) in enumerate(order) if d == "out" and "event" in obj)
    assert prompt_in < prompt_reply < first_event


def test_a_too_long_line_is_recorded_by_its_head_and_size(tmp_path: Path) -> None:
    record = tmp_path / "serve.ndjson"
    line = b'{"id": 3, "cmd": "discover", "pad": "' + b"x" * (9 * 1024 * 1024) + b'"}\n'
    done = subprocess.run(
        [sys.executable, "-m", "agentproto", "serve", "--record", str(record)],
        input=line, capture_output=True, env=base_env(), cwd=str(ROOT), timeout=60,
    )
    assert done.returncode == 0
    entries = [json.loads(raw) for raw in record.read_text().splitlines()][1:]  # after the header
    too_long = [entry for entry in entries if entry["dir"] == "in"]
    assert len(too_long) == 1 and too_long[0]["too_long"] > 8 * 1024 * 1024
    assert too_long[0]["line"].startswith('{"id": 3') and len(too_long[0]["line"]) <= 256
    assert json.loads([e for e in entries if e["dir"] == "out"][-1]["line"])["error"]["kind"] == "BadFrame"


def test_the_record_file_is_private_and_appended(tmp_path: Path) -> None:
    path = tmp_path / "r.ndjson"
    path.write_text('{"request": "earlier", "response": "kept"}\n')
    os.chmod(path, 0o600)
    recorder = Recorder(str(path), clock=lambda: 42)
    recorder.pair(b"  {\"op\": \"halt\"}\n", b'{"kind":"done","exit_code":0}\n')
    recorder.line("in", b"caf\xc3\xa9 \xff", conn=3)
    recorder.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [
        {"request": "earlier", "response": "kept"},
        {"request": '{"op": "halt"}', "response": '{"kind":"done","exit_code":0}\n'},
        {"t": 42, "dir": "in", "line": "café \ufffd", "conn": 3},
    ]
    fresh = tmp_path / "new.ndjson"
    Recorder(str(fresh)).line("out", "x")
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o600


def test_a_record_never_goes_through_a_symlink(tmp_path: Path, capsys) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    link = tmp_path / "link.ndjson"
    link.symlink_to(target)
    recorder = Recorder(str(link))
    recorder.line("in", "secret")
    recorder.line("in", "secret again")
    assert target.read_text() == ""
    err = capsys.readouterr().err
    assert err.count("recording skipped") == 1  # one line, however many records fail


def test_an_unwritable_record_never_halts_serve(tmp_path: Path) -> None:
    p = Proc(["serve", "--record", str(tmp_path / "no" / "such" / "dir" / "r")])
    try:
        p.send({"id": 1, "cmd": "discover"})
        assert p.line()["hello"]
        assert p.line()["id"] == 1
        p.close_stdin()
        assert p.wait() == 0
    finally:
        p.stop()
    assert p.stderr.count("recording skipped") == 1


def test_open_up_front_refuses_a_bad_path(tmp_path: Path) -> None:
    import pytest

    from agentproto.private import UnsafePath

    link = tmp_path / "link"
    link.symlink_to(tmp_path / "target")
    with pytest.raises(UnsafePath):
        Recorder(str(link)).open()
    with pytest.raises(OSError):
        Recorder(str(tmp_path / "missing" / "dir" / "r")).open()
    good = Recorder(str(tmp_path / "ok"))
    good.open()
    good.line("to_agent", b'{"jsonrpc":"2.0"}', session="s1")
    good.close()
    assert json.loads((tmp_path / "ok").read_text())["session"] == "s1"
