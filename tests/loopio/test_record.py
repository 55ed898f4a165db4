"""--record: the ordered transcript of protocol 1 on stdio, and the recorder's own rules
(0600, append, never through a symlink, best effort)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from ops_support import Proc, script
from sidecar import ROOT, Sidecar, base_env

from agentproto.loopio.record import Recorder


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

    from agentproto.loopio.private import UnsafePath

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


# -- every frontend: its requests and its sessions' agent wire, in one file -------------------

ACP_AGENT = {"acp": {"name": "acp-test", "path": str(ROOT / "tests" / "fakes" / "acp_test_agent.py"), "args": []}}


def _generate(work: Path) -> dict:
    from suite_secrets import API_KEY

    return {"agent": ACP_AGENT, "dir": str(work), "prompt": "chunks", "env": {"SERVICE_API_KEY": API_KEY}}


def _ops_loop(record: Path, work: Path) -> None:
    p = Proc(["agent", "--record", str(record)])
    try:
        assert p.request({"op": "generate", **_generate(work)}, timeout=30)[-1]["exit_code"] == 0
        p.close_stdin()
        assert p.wait(30) == 0
    finally:
        p.stop()


def _single_shot(record: Path, work: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentproto", "--single-shot", "--record", str(record)],
        input=json.dumps({"op": "generate", **_generate(work)}).encode(), capture_output=True,
        env=base_env(), cwd=str(ROOT), timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def _http(record: Path, work: Path) -> None:
    import http.client

    p = Proc(["serve", "--transport", "http", "--port", "0", "--record", str(record)])
    try:
        port = int(p.banner(r"listening on http://[\d.]+:(\d+)/").group(1))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/v1/agent", body=json.dumps({"op": "generate", **_generate(work)}),
                     headers={"Content-Type": "application/json"})  # fmt: skip
        assert b'"exit_code":0' in conn.getresponse().read()
        conn.close()
    finally:
        p.stop()


def _rpc(transport: str, record: Path, work: Path) -> None:
    p = Proc(["serve", "--transport", transport, "--record", str(record)])
    try:
        if transport == "mcp":
            hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
            p.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
            assert p.line()["id"] == 1
            p.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            call = {"method": "tools/call", "params": {"name": "agentproto_generate", "arguments": _generate(work)}}
        else:
            call = {"method": "generate", "params": _generate(work)}
        p.send({"jsonrpc": "2.0", "id": 2, **call})
        while (answer := p.line(30)).get("id") != 2:
            pass  # log notifications first
        assert "result" in answer, answer
        p.close_stdin()
        assert p.wait(30) == 0
    finally:
        p.stop()


def _serve(record: Path, work: Path) -> None:
    args = _generate(work)
    with Sidecar(["--record", str(record)]) as sc:
        session = sc.open(args["agent"], dir=args["dir"], env=args["env"])
        sc.ok({"cmd": "prompt", "session": session, "text": "chunks"}, 30)
        sc.events(session, until="TurnEnded", timeout=30)
        sc.ok({"cmd": "close", "session": session}, 30)
        sc.wait_for(lambda line: line.get("closed") == session, 30)
        sc.close_stdin()
        sc.drain()


def _unix(record: Path, work: Path) -> None:
    import socket

    path = str(work / "ap.sock")
    p = Proc(["serve", "--transport", "unix", "--listen", path, "--record", str(record)])
    try:
        p.banner("listening on")
        args = _generate(work)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(path)
            reader = sock.makefile("rb")
            reader.readline()  # hello

            def until(needle: bytes) -> None:
                while needle not in (line := reader.readline()):
                    assert line, f"the connection ended before {needle!r}"

            open_frame = {"id": 1, "cmd": "open", "agent": args["agent"], "dir": args["dir"], "env": args["env"]}
            sock.sendall((json.dumps(open_frame) + "\n").encode())
            until(b'{"id":1,"ok"')
            sock.sendall(b'{"id": 2, "cmd": "prompt", "session": "s1", "text": "chunks"}\n')
            until(b"TurnEnded")
            sock.sendall(b'{"id": 3, "cmd": "close", "session": "s1"}\n')
            until(b'{"closed"')
    finally:
        p.stop()


FRONTENDS = {
    "agent": _ops_loop,
    "single-shot": _single_shot,
    "http": _http,
    "jsonrpc": lambda record, work: _rpc("jsonrpc", record, work),
    "mcp": lambda record, work: _rpc("mcp", record, work),
    "serve": _serve,
    "unix": _unix,
}


@pytest.mark.parametrize("frontend", list(FRONTENDS))
def test_every_frontend_records_its_requests_and_its_sessions_agent_wire(frontend: str, tmp_path: Path) -> None:
    from suite_secrets import API_KEY

    record = tmp_path / "rec.ndjson"
    FRONTENDS[frontend](record, tmp_path)
    text = record.read_text(encoding="utf-8")
    records = [json.loads(line) for line in text.splitlines()]
    assert records[0]["recording"] == 1 and records[0]["frontend"] == frontend
    # The app's side: the seed's pairs on the ops framings, the transcript on protocol 1.
    if frontend in ("serve", "unix"):
        ins = [json.loads(r["line"]) for r in records if r.get("dir") == "in"]
        assert [frame["cmd"] for frame in ins][:2] == ["open", "prompt"]
        assert any('"TurnEnded"' in r["line"] for r in records if r.get("dir") == "out")
    else:
        pairs = [r for r in records if "request" in r]
        generate = next(p for p in pairs if "generate" in p["request"])
        last = generate["response"].rstrip("\n").split("\n")[-1]
        assert json.loads(last).get("kind") == "done" or json.loads(last).get("id") == 2, last
        assert "Hello, world" in generate["response"]  # the chunks the agent streamed, joined
    # The agent's wire, in the same file, tied to its session.
    wire = [r for r in records if r.get("dir") in ("launch", "spawn", "to_agent", "from_agent", "exit", "control")]
    assert len({r["session"] for r in wire}) == 1
    assert wire[0]["dir"] == "launch" and wire[0]["agent"]["id"] == "acp-test"
    sent = [json.loads(r["line"]).get("method") for r in wire if r["dir"] == "to_agent"]
    assert sent[:3] == ["initialize", "session/new", "session/prompt"], sent
    got = [r for r in wire if r["dir"] == "from_agent"]
    assert any('"agent_message_chunk"' in r["line"] for r in got) and all(isinstance(r["read"], int) for r in got)
    # The key the app handed the session is in no frontend's record.
    assert API_KEY not in text and '"[redacted]"' in text.replace('\\"', '"')


def test_record_wire_writes_the_same_lines_as_record(tmp_path: Path) -> None:
    record, own = tmp_path / "all.ndjson", tmp_path / "wire.ndjson"
    with Sidecar(["--record", str(record)]) as sc:
        session = sc.open(ACP_AGENT, dir=str(tmp_path), record_wire=str(own))
        sc.ok({"cmd": "prompt", "session": session, "text": "chunks"}, 30)
        sc.events(session, until="TurnEnded", timeout=30)
        sc.ok({"cmd": "close", "session": session}, 30)
        sc.wait_for(lambda line: line.get("closed") == session, 30)
        sc.close_stdin()
        sc.drain()

    def wire(path: Path) -> list[dict]:
        found = [json.loads(line) for line in path.read_text().splitlines()]
        return [{k: v for k, v in r.items() if k != "t"} for r in found if "session" in r and "recording" not in r]

    own_records = [json.loads(line) for line in own.read_text().splitlines()]
    assert own_records[0]["recording"] == 1 and own_records[0]["frontend"] == "record_wire"
    assert stat.S_IMODE(os.stat(own).st_mode) == 0o600
    assert len(wire(own)) > 5 and wire(own) == wire(record)


def test_a_write_refused_part_way_leaves_only_whole_records(tmp_path: Path) -> None:
    # The file-size limit stands in for a full disk: a write is cut short, then refused
    # (EFBIG, as ENOSPC). Every request is still answered, one line says so, and the file
    # keeps whole records only, so what was recorded still replays.
    import resource

    record = tmp_path / "r.ndjson"
    codes = ["BadFrame", "SessionBusy", "NotInstalled", "BadFrame", "SessionBusy", "NotInstalled"]
    requests = b"".join(json.dumps({"op": "explain", "code": code}).encode() + b"\n" for code in codes)

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))

    done = subprocess.run(
        [sys.executable, "-m", "agentproto", "agent", "--record", str(record)], input=requests,
        capture_output=True, env=base_env({"AGENTPROTO_DB": "off"}), cwd=str(ROOT), timeout=60, preexec_fn=small_files,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.count(b'"kind":"done"') == len(codes)
    assert done.stderr.count(b"recording skipped") == 1 and b"File too large" in done.stderr
    text = record.read_text()
    assert 0 < len(text) <= 3000 and text.endswith("\n")
    pairs = [json.loads(line) for line in text.splitlines()][1:]  # every line is a whole record
    assert 0 < len(pairs) < len(codes)
    replayed = subprocess.run([sys.executable, "-m", "agentproto", "replay", str(record)], capture_output=True,
                              env=base_env({"AGENTPROTO_DB": "off"}), cwd=str(ROOT), timeout=60)  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
