"""The console's HTTP API (frontends/console_http.py) through real processes and sockets:
the page and its headers, the one-time secret, the event streams (ids, Last-Event-ID, the
ring, resync, slow readers) and the session list's stream. The browser tests are in
tests/test_console_browser.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from console_support import TOKEN, Sidecar
from ops_support import ROOT, script, write_script

PAGE_HEADERS = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def kinds(messages):
    out = []
    for m in messages:
        data = m["data"]
        if "event" in data:
            kind = data["event"]["kind"]
            out.append(kind if isinstance(kind, str) else next(iter(kind)))
        else:
            out.append(next(iter(data)))
    return out


@pytest.fixture
def console(tmp_path):
    s = Sidecar("--mock", script("turn"), "--db", str(tmp_path / "obs.db"), env={"AGENTPROTO_AUTH_TOKEN": TOKEN})
    s.token = TOKEN
    yield s
    s.stop()


def test_the_page_is_served_with_its_security_headers_and_no_cookie(console):
    size = 0
    for path, kind in (("/", "text/html"), ("/console.js", "text/javascript"), ("/console.css", "text/css")):
        status, head, body = console.request("GET", path, headers={"Authorization": ""})
        assert status == 200 and head["Content-Type"].startswith(kind), (path, status)
        csp = head["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
        for name, value in PAGE_HEADERS.items():
            assert head[name] == value, (path, name)
        assert "Set-Cookie" not in head
        size += len(body)
    assert size < 150_000
    html = console.request("GET", "/")[2].decode()
    assert "<script>" not in html and "style=" not in html and "http" not in html.split("<body>")[1]
    # The streams and the ops need the token; the page does not.
    console.token = None
    assert console.request("GET", "/v1/sessions")[0] == 401
    assert console.request("GET", "/v1/sessions/s1/events")[0] == 401


def test_the_urls_secret_is_good_once_for_the_token_and_never_logged(tmp_path):
    s = Sidecar("--mock", script("turn"), "--db", "off")
    try:
        assert s.url_line.startswith(f"agentproto console: open http://127.0.0.1:{s.port}/#secret=")
        secret = s.secret()
        assert s.exchange("not-" + secret)[0] == 403
        status, body = s.exchange(secret)
        assert status == 200 and len(body["token"]) >= 32
        assert s.exchange(secret)[0] == 403  # once
        s.token = body["token"]
        assert s.open()
        # Nothing put the secret or the token on a command line or in the log.
        cmdline = open(f"/proc/{s.proc.proc.pid}/cmdline", "rb").read().decode()
        assert secret not in cmdline and body["token"] not in cmdline
        s.token = None
        assert s.request("POST", "/v1/agent", {"op": "capabilities"})[0] == 401
    finally:
        s.stop()
    assert secret not in s.proc.stderr and body["token"] not in s.proc.stderr


def test_a_sessions_stream_numbers_each_line_by_its_sequence_and_resumes_after_last_event_id(console):
    sid = console.open()
    stream = console.stream(f"/v1/sessions/{sid}/events")
    assert stream.status == 200 and stream.headers["content-type"] == "text/event-stream"
    waiting = console.result({"op": "prompt", "session": sid, "text": "go"})
    assert "Permission" in waiting["waiting"]
    # First answer wins; the same request answered again is InvalidRequest.
    first = console.result({"op": "answer", "session": sid, "request": "r1", "answer": {"Permission": "AllowOnce"}})
    again = console.result({"op": "answer", "session": sid, "request": "r1", "answer": {"Permission": "DenyOnce"}})
    assert first["ok"] and not again["ok"] and again["error"]["kind"] == "InvalidRequest"
    console.result({"op": "close", "session": sid})
    messages = list(stream.messages())
    assert stream.ended
    ids = [m["id"] for m in messages]
    assert ids == list(range(1, len(ids) + 1))
    events = [m for m in messages if "event" in m["data"]]
    assert [m["data"]["event"]["sequence"] for m in events] == [m["id"] for m in events]
    assert messages[-1]["data"] == {"closed": sid}
    assert kinds(messages)[:3] == ["TurnStarted", "StatusChanged", "TextDelta"]
    # A reconnect after id 5 gets 6.. exactly; one at the last id only the end.
    again_stream = console.stream(f"/v1/sessions/{sid}/events", last_id=5)
    assert [m["id"] for m in again_stream.messages()] == ids[5:]
    last = console.stream(f"/v1/sessions/{sid}/events", last_id=ids[-1])
    assert list(last.messages()) == []
    # An id the ring never held (a sidecar restarted meanwhile): resync, then from the oldest.
    future = console.stream(f"/v1/sessions/{sid}/events", last_id=10_000)
    got = list(future.messages())
    assert got[0]["event"] == "resync" and got[0]["data"]["resync"] == sid and got[0]["data"]["oldest"] == 1
    assert [m["id"] for m in got[1:]] == ids
    assert console.request("GET", "/v1/sessions/nope/events")[0] == 404


def flood_script(tmp_path, events: int, size: int) -> str:
    text = "x" * size
    turn = [{"Repeat": {"times": events, "steps": [{"Emit": {"TextDelta": {"message_id": "m1", "text": text}}}]}},
            {"End": {"Completed": {"source": "Protocol"}}}]
    return write_script(tmp_path, "flood", [turn, turn])


def test_the_ring_holds_the_latest_2000_lines_and_an_older_last_event_id_gets_resync(tmp_path):
    s = Sidecar("--mock", flood_script(tmp_path, 2500, 10), "--db", "off", env={"AGENTPROTO_AUTH_TOKEN": TOKEN})
    s.token = TOKEN
    try:
        sid = s.open()
        assert s.result({"op": "prompt", "session": sid, "text": "go"})["ok"]
        s.result({"op": "close", "session": sid})
        fresh = list(s.stream(f"/v1/sessions/{sid}/events").messages())
        assert len(fresh) == 2000 and fresh[-1]["data"] == {"closed": sid}
        oldest = fresh[0]["id"]
        assert [m["id"] for m in fresh] == list(range(oldest, oldest + 2000))
        behind = list(s.stream(f"/v1/sessions/{sid}/events", last_id=oldest - 2).messages())
        assert behind[0]["event"] == "resync" and behind[0]["data"]["oldest"] == oldest
        assert [m["id"] for m in behind[1:]] == [m["id"] for m in fresh]
        just = list(s.stream(f"/v1/sessions/{sid}/events", last_id=oldest - 1).messages())
        assert just[0]["id"] == oldest  # nothing missed: no resync
    finally:
        s.stop()


def test_the_ring_is_bounded_by_bytes_too(tmp_path):
    s = Sidecar("--mock", flood_script(tmp_path, 600, 16_000), "--db", "off", env={"AGENTPROTO_AUTH_TOKEN": TOKEN})
    s.token = TOKEN
    try:
        sid = s.open()
        assert s.result({"op": "prompt", "session": sid, "text": "go"})["ok"]
        stream = s.stream(f"/v1/sessions/{sid}/events")
        held = 0
        count = 0
        for message in stream.messages():
            held += len(json.dumps(message["data"], separators=(",", ":")))
            count += 1
            if "event" in message["data"] and message["data"]["event"]["kind"] == {"StatusChanged": "Idle"}:
                break
        assert 200 < count < 600 and held <= 4 * 1024 * 1024
        stream.close()
    finally:
        s.stop()


def test_a_reader_that_falls_behind_gets_resync_and_never_holds_the_session_back(tmp_path):
    s = Sidecar("--mock", flood_script(tmp_path, 6000, 2000), "--db", "off", env={"AGENTPROTO_AUTH_TOKEN": TOKEN})
    s.token = TOKEN
    try:
        sid = s.open()
        slow = s.stream(f"/v1/sessions/{sid}/events", rcvbuf=4096)  # reads nothing while the turns run
        for _ in range(2):  # 24 MB of events: far past the socket buffers and the ring
            result = s.result({"op": "prompt", "session": sid, "text": "go"})
            assert result["ok"] and next(iter(result["stop"])) == "Completed"
        s.result({"op": "close", "session": sid})
        got = list(slow.messages())
        resyncs = [i for i, m in enumerate(got) if m["event"] == "resync"]
        assert resyncs, "a reader that fell behind the ring got no resync"
        after = got[resyncs[-1] + 1 :]
        assert after[0]["id"] == got[resyncs[-1]]["data"]["oldest"]
        ids = [m["id"] for m in after]
        assert ids == list(range(ids[0], ids[0] + len(ids))) and after[-1]["data"] == {"closed": sid}
    finally:
        s.stop()


def test_the_session_list_stream_sends_a_snapshot_then_changes(console):
    before = console.open()
    listing = console.stream("/v1/sessions")
    first = listing.take(1)[0]
    assert first["event"] == "sessions" and [r["id"] for r in first["data"]["sessions"]] == [before]
    row = first["data"]["sessions"][0]
    assert {"id", "agent", "model", "status", "turns", "tokens", "cost_usd", "open_requests", "age_s"} <= set(row)
    after = console.open()
    seen: set[str] = set()
    for message in listing.messages():
        assert message["event"] == "update"
        seen |= {r["id"] for r in message["data"]["sessions"]}
        if after in seen:
            break
    console.result({"op": "close", "session": before})
    for message in listing.messages():
        if before in message["data"]["gone"]:
            break
    listing.close()


def test_a_page_of_another_origin_cannot_read_a_stream(console):
    sid = console.open()
    for origin in (f"http://127.0.0.1:{console.port + 1}", "null", "https://example.com"):
        stream = console.stream(f"/v1/sessions/{sid}/events", headers={"Origin": origin})
        assert stream.status == 403, origin
    own = console.stream(f"/v1/sessions/{sid}/events", headers={"Origin": f"http://127.0.0.1:{console.port}"})
    assert own.status == 200
    own.close()


def test_serve_transport_http_serves_the_page_and_streams_without_a_token(tmp_path):
    s = Sidecar("--mock", script("turn"), "--db", "off", serve=True)
    try:
        assert s.request("GET", "/")[0] == 200
        sid = s.open()
        stream = s.stream(f"/v1/sessions/{sid}/events")
        assert stream.status == 200
        s.result({"op": "close", "session": sid})
        assert list(stream.messages())[-1]["data"] == {"closed": sid}
    finally:
        s.stop()


def wait_gone(sidecar, sid):
    """Until the session list says ``sid`` is gone (it may be gone already)."""
    listing = sidecar.stream("/v1/sessions")
    for message in listing.messages():
        if message["event"] == "sessions" and sid not in [r["id"] for r in message["data"]["sessions"]]:
            break
        if sid in message["data"].get("gone", []):
            break
    listing.close()


def test_an_event_stream_keeps_its_session_from_expiring(tmp_path):
    s = Sidecar("--mock", script("turn"), "--db", "off", "--session-idle-timeout", "0.5",
                env={"AGENTPROTO_AUTH_TOKEN": TOKEN})
    s.token = TOKEN
    try:
        watched, unwatched = s.open(), s.open()
        stream = s.stream(f"/v1/sessions/{watched}/events")
        wait_gone(s, unwatched)  # the unwatched one expires
        assert s.result({"op": "info", "session": watched})["ok"]
        stream.close()
        wait_gone(s, watched)  # once its stream is gone, so does the watched one
    finally:
        s.stop()


def test_console_help_and_a_bad_listen_address():
    run = subprocess.run([sys.executable, "-m", "agentproto", "console", "--help"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0 and "python3 -m agentproto console" in run.stdout
    run = subprocess.run([sys.executable, "-m", "agentproto", "console", "--listen", "nope"], capture_output=True,
                         text=True, cwd=ROOT, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 2 and "expected HOST:PORT" in run.stderr


def test_ring_events_sets_how_many_lines_a_ring_holds(tmp_path):
    s = Sidecar("--mock", flood_script(tmp_path, 100, 10), "--db", "off", "--ring-events", "50",
                env={"AGENTPROTO_AUTH_TOKEN": TOKEN})
    s.token = TOKEN
    try:
        sid = s.open()
        assert s.result({"op": "prompt", "session": sid, "text": "go"})["ok"]
        s.result({"op": "close", "session": sid})
        got = list(s.stream(f"/v1/sessions/{sid}/events").messages())
        assert len(got) == 50 and got[-1]["data"] == {"closed": sid}
    finally:
        s.stop()


def test_a_console_run_recorded_replays_and_holds_neither_the_secret_nor_the_token(tmp_path):
    record = tmp_path / "console.ndjson"
    s = Sidecar("--mock", script("turn"), "--db", "off", "--record", str(record))
    try:
        secret = s.secret()
        status, body = s.exchange(secret)
        s.token = body["token"]
        sid = s.open()
        stream = s.stream(f"/v1/sessions/{sid}/events")
        assert "Permission" in s.result({"op": "prompt", "session": sid, "text": "go"})["waiting"]
        assert s.result({"op": "answer", "session": sid, "request": "r1", "answer": {"Permission": "AllowOnce"}})["ok"]
        s.result({"op": "close", "session": sid})
        assert list(stream.messages())[-1]["data"] == {"closed": sid}
    finally:
        s.stop()
    text = record.read_text()
    assert secret not in text and body["token"] not in text and "/v1/console" not in text
    run = subprocess.run([sys.executable, "-m", "agentproto", "replay", str(record)], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_rings_of_the_latest_32_closed_sessions_stay(console):
    ids = [console.open() for _ in range(34)]
    for sid in ids:
        console.result({"op": "close", "session": sid})
    assert console.request("GET", f"/v1/sessions/{ids[0]}/events")[0] == 404
    assert console.request("GET", f"/v1/sessions/{ids[1]}/events")[0] == 404
    got = list(console.stream(f"/v1/sessions/{ids[2]}/events").messages())
    assert got[-1]["data"] == {"closed": ids[2]}


@pytest.mark.parametrize("kind", [
    {"TextDelta": {"message_id": "m1", "text": "plain"}},
    {"TextDelta": {"message_id": "m1", "text": "héllo \u202e \ud800 \n\"quoted\""}},
    {"ContextUsage": {"used_tokens": 1, "window_tokens": None, "cost_usd": float("nan")}},
    "ContextCompacted",
])
def test_the_ops_line_made_from_the_rings_encoding_is_encodes_byte_for_byte(kind):
    from agentproto.core.wire import encode
    from agentproto.frontends.console_http import Console

    class Session:
        id = "s1"

    event = {"sequence": 3, "occurred_at": {"secs_since_epoch": 1, "nanos_since_epoch": 2}, "session_id": "s1",
             "turn_info": None, "kind": kind, "extensions": {}}
    console = Console.__new__(Console)  # the tap's event path needs no loop: only these
    console.rings, console.lists, console.ring_events = {}, [], 2000
    console.event(Session(), event)  # type: ignore[arg-type]
    line = {"kind": "event", "event": event}
    assert console.event_line(line) == encode(line)
    assert console.event_line({"kind": "event", "event": dict(event)}) is None  # another event: encode's
