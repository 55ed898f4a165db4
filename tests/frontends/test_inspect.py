"""``inspect``: the live sessions of a running sidecar through its control socket, from
another process; what turns cost, from the observations database (one row per ended
turn, never a prompt or an answer); the op on every framing; the table at 80 columns; the
database off, unwritable and locked."""

from __future__ import annotations

import datetime
import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from ops_support import Proc, check_ops_line, done_of, result_of, single_shot, validator, write_script
from sidecar import ROOT, Sidecar, base_env
from terminal import terminals  # noqa: F401  (a fixture)

from agentproto.frontends.inspect_op import aligned, parse_since, render

PROMPT = "a prompt that must never be stored"
VIEWS = {"agents": validator("InspectAgents"), "cost": validator("InspectCost")}


def in_schema(view: dict[str, Any]) -> dict[str, Any]:
    """``view``, checked against schema.json's definition of its kind (the --format json contract)."""
    errors = list(VIEWS[view["view"]].iter_errors(view))
    assert not errors, f"{errors[0].message}: {json.dumps(view)[:500]}"
    return view
ANSWER = "an answer that must never be stored"


def costly_script(tmp_path: Path) -> str:
    """Two turns on a mock with a model option; each reports usage and a running cost."""

    def turn(used: int, total: float, usage: dict[str, int]) -> list[Any]:
        return [
            {"Emit": {"TextDelta": {"message_id": f"m{used}", "text": ANSWER}}},
            {"Emit": {"ContextUsage": {"used_tokens": used, "window_tokens": 1000, "cost_usd": total}}},
            {"Usage": usage},
            {"End": {"Completed": {"source": "Protocol"}}},
        ]

    options = [{"id": "model", "name": "Model", "category": None, "live": True, "current": "sonnet",
                "kind": {"Select": {"choices": [{"value": "sonnet", "label": "S", "description": None}]}}}]  # fmt: skip
    turns = [
        turn(100, 0.10, {"input_tokens": 120, "cached_input_tokens": 20, "output_tokens": 30}),
        turn(200, 0.25, {"input_tokens": 300, "cached_input_tokens": 100, "output_tokens": 45}),
    ]
    return write_script(tmp_path, "costly", turns, options=options)


def inspect_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentproto", "inspect", *args], capture_output=True, text=True,
                          env=base_env(env), cwd=str(ROOT), timeout=60)  # fmt: skip


def test_inspect_a_running_server_through_its_control_socket(tmp_path: Path) -> None:
    control = tmp_path / "control.sock"
    db = tmp_path / "obs.db"
    agent = {"acp": {"name": "acp-test", "path": str(ROOT / "tests" / "fakes" / "acp_test_agent.py"), "args": []}}
    with Sidecar(["--mock", costly_script(tmp_path), "--control", str(control), "--db", str(db)]) as sc:
        assert stat.S_IMODE(os.lstat(control).st_mode) == 0o600
        mock = sc.open(dir=str(tmp_path))
        sc.ok({"cmd": "prompt", "session": mock, "text": PROMPT})
        sc.events(mock, until="TurnEnded")
        acp = sc.open(agent, dir=str(tmp_path))
        done = inspect_cli("--sock", str(control), "--format", "json")
        assert done.returncode == 0, done.stderr
        view = in_schema(json.loads(done.stdout))
        assert view["view"] == "agents" and view["pid"] == sc.proc.pid
        rows = {row["id"]: row for row in view["agents"]}
        assert set(rows) == {mock, acp}
        row = rows[mock]
        assert (row["agent"], row["model"], row["status"], row["turns"]) == ("mock", "sonnet", "Idle", 1)
        assert row["tokens"] == {"input": 120, "output": 30, "cached_input": 20} and row["cost_usd"] == 0.10
        assert row["open_requests"] == 0 and row["pid"] is None and row["age_s"] >= 0
        acp_pid = rows[acp]["pid"]
        assert isinstance(acp_pid, int) and os.path.exists(f"/proc/{acp_pid}")  # the agent's own process
        one = in_schema(json.loads(inspect_cli("--sock", str(control), "--agent", mock, "--format", "json").stdout))
        assert one["agent"]["info"]["id"] == mock and one["agent"]["tokens"]["input"] == 120
        table = inspect_cli("--sock", str(control), "--format", "table").stdout.splitlines()
        assert table[0].split()[:3] == ["SESSION", "AGENT", "MODEL"] and len(table) == 3
        # AGENTPROTO_CONTROL names the socket too.
        assert json.loads(inspect_cli(env={"AGENTPROTO_CONTROL": str(control)}).stdout)["pid"] == sc.proc.pid
        # The socket answers inspect only.
        import socket

        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(control))
            sock.sendall(b'{"op": "open", "agent": "mock", "dir": "/"}\n{"op": "inspect", "view": "nope"}\n')
            reader = sock.makefile("rb")
            lines = [json.loads(reader.readline()) for _ in range(4)]
        assert lines[:2] == [{"kind": "error", "message": "the control socket answers only inspect"},
                             {"kind": "done", "exit_code": 2}]  # fmt: skip
        assert lines[2]["ok"] is False and "view" in lines[2]["error"]["message"] and lines[3]["exit_code"] == 1
    assert not control.exists()  # removed at exit


def test_inspect_a_dead_socket_is_an_error_not_a_hang(tmp_path: Path) -> None:
    started = time.monotonic()
    done = inspect_cli("--sock", str(tmp_path / "nobody.sock"))
    assert done.returncode == 1 and "nobody.sock" in done.stderr
    assert time.monotonic() - started < 30


def test_cost_rows_are_per_turn_with_the_running_cost_differenced(tmp_path: Path) -> None:
    db = tmp_path / "obs.db"
    with Sidecar(["--mock", costly_script(tmp_path), "--db", str(db)]) as sc:
        session = sc.open(dir=str(tmp_path))
        for _ in range(2):
            sc.ok({"cmd": "prompt", "session": session, "text": PROMPT})
            sc.events(session, until="TurnEnded")
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600
    rows = sqlite3.connect(db).execute(
        "SELECT agent, model, session, turn, input_tokens, output_tokens, cached_input_tokens, cost_usd, stop FROM turns"
    ).fetchall()
    assert [r[:7] for r in rows] == [("mock", "sonnet", "s1", "t1", 120, 30, 20), ("mock", "sonnet", "s1", "t2", 300, 45, 100)]
    assert [r[7] for r in rows] == pytest.approx([0.10, 0.15]) and {r[8] for r in rows} == {"Completed"}
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("obs.db*"))
    assert PROMPT.encode() not in raw and ANSWER.encode() not in raw
    done = inspect_cli("--view", "cost", "--db", str(db), "--top", "1", "--format", "json")
    view = in_schema(json.loads(done.stdout))
    assert view["total"]["turns"] == 2 and view["total"]["cost_usd"] == pytest.approx(0.25)
    assert view["total"]["input_tokens"] == 420 and view["groups"][0]["key"] == "mock"
    assert view["top"][0]["turn"] == "t2" and view["top"][0]["cost_usd"] == pytest.approx(0.15)
    for by, key in (("model", "sonnet"), ("day", time.strftime("%Y-%m-%d", time.gmtime()))):
        assert json.loads(inspect_cli("--view", "cost", "--db", str(db), "--by", by).stdout)["groups"][0]["key"] == key
    by_session = json.loads(inspect_cli("--view", "cost", "--db", str(db), "--by", "session").stdout)
    assert by_session["groups"][0]["key"].endswith("/s1") and by_session["groups"][0]["turns"] == 2
    assert json.loads(inspect_cli("--view", "cost", "--db", str(db), "--since", "2999-01-01").stdout)["total"]["turns"] == 0
    table = inspect_cli("--view", "cost", "--db", str(db), "--top", "2", "--format", "table").stdout.splitlines()
    assert all(len(line) <= 80 for line in table) and any(line.startswith("TOTAL") for line in table)


def test_the_inspect_op_on_every_framing(tmp_path: Path) -> None:
    # The ops loop: the payload in the result, also streamed as log lines.
    p = Proc(["agent", "--db", "off"])
    try:
        p.request({"op": "open", "agent": "mock", "dir": str(tmp_path)})
        lines = p.request({"op": "inspect", "format": "table"})
        result = result_of(lines)
        assert result["view"] == "agents" and [r["id"] for r in result["agents"]] == ["s1"]
        logs = [line["text"] for line in lines if line["kind"] == "log"]
        assert logs[0].startswith("SESSION") and "s1" in logs[1]
        refused = p.request({"op": "inspect", "view": "cost"})
        assert done_of(refused) == 1 and "off" in result_of(refused)["error"]["message"]
        bad = p.request({"op": "inspect", "top": "many"})
        assert done_of(bad) == 2 and bad[0]["message"].startswith("invalid `top`")
    finally:
        p.stop()
    # --single-shot
    code, lines = single_shot('{"op": "inspect", "view": "agents"}')
    assert code == 0 and result_of(lines)["agents"] == []
    # JSON-RPC: the method, its result the view.
    rpc = Proc(["serve", "--transport", "jsonrpc"])
    try:
        rpc.send({"jsonrpc": "2.0", "id": 1, "method": "inspect", "params": {}})
        answer = rpc.line()
        while "id" not in answer:  # the log lines come first, as notifications
            assert answer["method"] == "log"
            answer = rpc.line()
        assert answer["result"]["view"] == "agents" and answer["result"]["ok"] is True
    finally:
        rpc.stop()
    # MCP: the agentproto_inspect tool, listed and called.
    mcp = Proc(["serve", "--transport", "mcp"])
    try:
        mcp.send({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        tools = {tool["name"] for tool in mcp.line()["result"]["tools"]}
        assert "agentproto_inspect" in tools
        mcp.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                  "params": {"name": "agentproto_inspect", "arguments": {"view": "agents"}}})  # fmt: skip
        answer = mcp.line()
        assert answer["id"] == 2 and answer["result"]["isError"] is False
        assert in_schema({k: v for k, v in answer["result"]["structuredContent"].items() if k not in ("op", "ok")})
    finally:
        mcp.stop()
    # HTTP: POST /v1/agent, the result and its log lines in the body.
    import http.client

    web = Proc(["serve", "--transport", "http", "--port", "0", "--mock", costly_script(tmp_path)])
    try:
        port = int(web.banner(r"listening on http://[\d.]+:(\d+)/").group(1))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        batch = "\n".join(json.dumps(r) for r in ({"op": "open", "agent": "mock", "dir": str(tmp_path)},
                                                    {"op": "inspect", "format": "table"}))  # fmt: skip
        conn.request("POST", "/v1/agent/batch", body=batch, headers={"Content-Type": "application/json"})
        lines = [json.loads(line) for line in conn.getresponse().read().splitlines() if line.strip()]
        conn.close()
        inspected = [line for line in lines if line.get("op") == "inspect"]
        assert len(inspected) == 1 and [r["model"] for r in inspected[0]["agents"]] == ["sonnet"]
        assert any(line["kind"] == "log" and line["text"].startswith("SESSION") for line in lines)
    finally:
        web.stop()


def test_the_database_off_and_unwritable_cost_nothing_but_a_line(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with Sidecar(["--mock", costly_script(tmp_path)], env={"AGENTPROTO_DB": "off", "XDG_STATE_HOME": str(state)}) as sc:
        session = sc.open(dir=str(tmp_path))
        sc.ok({"cmd": "prompt", "session": session, "text": "x"})
        sc.events(session, until="TurnEnded")
    assert not state.exists()
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "obs.db").mkdir()  # a directory where the file should be
    with Sidecar(["--mock", costly_script(tmp_path), "--db", str(blocked / "obs.db")]) as sc:
        session = sc.open(dir=str(tmp_path))
        for _ in range(2):
            sc.ok({"cmd": "prompt", "session": session, "text": "x"})
            events = sc.events(session, until="TurnEnded")
            assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}
        sc.close_stdin()
        sc.drain()
        assert sc.close() == 0
    assert sc.stderr.decode().count("observations") == 1


def test_a_locked_database_delays_rows_never_a_turn(tmp_path: Path) -> None:
    db = tmp_path / "obs.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.executescript("PRAGMA journal_mode=WAL;")
    from agentproto.engine.observations import SCHEMA

    holder.executescript(SCHEMA)
    holder.execute("BEGIN EXCLUSIVE")
    with Sidecar(["--mock", costly_script(tmp_path), "--db", str(db)]) as sc:
        session = sc.open(dir=str(tmp_path))
        sc.ok({"cmd": "prompt", "session": session, "text": "x"})
        sc.events(session, until="TurnEnded")
        deadline = time.monotonic() + 10
        while b"locked" not in sc.stderr and time.monotonic() < deadline:
            sc.ok({"cmd": "info", "session": session})  # the session goes on meanwhile
            time.sleep(0.2)
        holder.execute("ROLLBACK")
        holder.close()
    assert sc.stderr.count(b"observations") == 1 and b"locked" in sc.stderr
    # Kept, and written once the lock was gone (at the latest as the sidecar ended).
    assert sqlite3.connect(db).execute("SELECT count(*) FROM turns").fetchone() == (1,)


def test_since_takes_spans_and_iso_dates() -> None:
    now = 1_800_000_000.0
    assert parse_since("30m", now) == now - 1800 and parse_since("24h", now) == now - 86400
    assert parse_since("7d", now) == now - 7 * 86400 and parse_since("90s", now) == now - 90
    utc = datetime.timezone.utc
    assert parse_since("2027-01-15", now) == datetime.datetime(2027, 1, 15, tzinfo=utc).timestamp()
    assert parse_since("2027-01-15T10:00:00+02:00", now) == datetime.datetime(2027, 1, 15, 8, tzinfo=utc).timestamp()
    from agentproto.core.errors import AgentError

    with pytest.raises(AgentError):
        parse_since("yesterday", now)


def test_the_table_is_aligned_within_80_columns() -> None:
    rows = [["s" + str(i), "claude-with-a-very-long-agent-name-indeed", "model-" * 6, "Working", "12",
             "1,234,567", "89,012", "1", "3h04m", "123456"] for i in range(3)]  # fmt: skip
    header = ("SESSION", "AGENT", "MODEL", "STATUS", "TURNS", "IN", "OUT", "REQ", "AGE", "PID")
    lines = aligned(header, rows, {4, 5, 6, 7, 8, 9})
    assert all(len(line) <= 80 for line in lines)
    starts = {line.index("Working") for line in lines[1:]}
    assert len(starts) == 1  # columns line up
    view = {"view": "agents", "pid": 1, "agents": []}
    assert render(view, "table") == ["no live sessions"] and json.loads(render(view, "json")[0]) == view
    for line in (render(view, "json")):
        check_ops_line({"kind": "log", "stream": "stdout", "text": line})


@pytest.mark.parametrize("transport", ["stdio", "unix", "http", "jsonrpc", "mcp"])
def test_every_serve_transport_answers_on_its_control_socket(transport: str, tmp_path: Path) -> None:
    control = tmp_path / "control.sock"
    args = ["serve", "--transport", transport, "--db", "off"]
    args += {"unix": ["--listen", str(tmp_path / "ap.sock")], "http": ["--port", "0"]}.get(transport, [])
    p = Proc(args, env={"AGENTPROTO_CONTROL": str(control)})  # the variable, as --control PATH
    try:
        p.banner("control socket on")
        assert stat.S_IMODE(os.lstat(control).st_mode) == 0o600
        done = inspect_cli("--sock", str(control), "--format", "json")
        assert done.returncode == 0, done.stderr
        view = in_schema(json.loads(done.stdout))
        assert {k: view[k] for k in ("view", "pid", "agents")} == {"view": "agents", "pid": p.proc.pid, "agents": []}
        assert view["command"] == ("serve" if transport == "stdio" else f"serve --transport {transport}")
        assert view["started_at"].endswith("Z")
    finally:
        p.stop()
    assert not control.exists()


def test_open_requests_count_what_waits_for_the_app(tmp_path: Path) -> None:
    from ops_support import script

    p = Proc(["agent", "--db", "off", "--mock", script("turn")])
    try:
        p.request({"op": "open", "agent": "mock", "dir": str(tmp_path)})
        p.request({"op": "prompt", "text": "run the tests"})  # ends at its permission request
        view = {k: v for k, v in result_of(p.request({"op": "inspect"})).items() if k not in ("kind", "op", "ok")}
        (row,) = in_schema(view)["agents"]
        assert row["open_requests"] == 1 and row["turns"] == 1 and row["status"] != "Idle"
        p.request({"op": "answer", "request": "r1", "answer": {"Permission": "AllowOnce"}})
        (row,) = result_of(p.request({"op": "inspect"}))["agents"]
        assert row["open_requests"] == 0
    finally:
        p.stop()


def test_the_database_is_in_the_state_dir_unless_agentproto_db_moves_it(tmp_path: Path) -> None:
    def one_turn(env: dict[str, str]) -> None:
        with Sidecar(["--mock", costly_script(tmp_path)], env=env) as sc:
            session = sc.open(dir=str(tmp_path))
            sc.ok({"cmd": "prompt", "session": session, "text": PROMPT})
            sc.events(session, until="TurnEnded")

    def turns(db: Path) -> int:
        return sqlite3.connect(db).execute("SELECT count(*) FROM turns").fetchone()[0]

    state = tmp_path / "state"
    one_turn({"XDG_STATE_HOME": str(state)})
    default = state / "agentproto" / "observations.db"
    assert turns(default) == 1
    assert stat.S_IMODE(os.stat(default.parent).st_mode) == 0o700 and stat.S_IMODE(os.stat(default).st_mode) == 0o600
    moved = tmp_path / "elsewhere" / "obs.db"
    one_turn({"XDG_STATE_HOME": str(state), "AGENTPROTO_DB": str(moved)})
    assert turns(moved) == 1 and turns(default) == 1
    # inspect reads the same place by the same rules.
    env = {"XDG_STATE_HOME": str(state)}
    assert json.loads(inspect_cli("--view", "cost", env=env).stdout)["db"] == str(default)
    viewed = json.loads(inspect_cli("--view", "cost", env={**env, "AGENTPROTO_DB": str(moved)}).stdout)
    assert viewed["db"] == str(moved) and viewed["total"]["turns"] == 1


def test_the_command_prints_a_table_on_a_terminal_and_json_elsewhere(terminals, tmp_path: Path) -> None:  # noqa: F811
    db = str(tmp_path / "none-yet.db")
    term = terminals("inspect", "--view", "cost", "--db", db)
    assert term.wait() == 0
    lines = term.text().splitlines()
    assert lines[0].startswith("cost since ") and lines[1].startswith("database ") and db.endswith(lines[1][-12:])
    assert lines[2].split() == ["AGENT", "TURNS", "IN", "OUT", "CACHED", "COST"] and lines[3].split()[0] == "TOTAL"
    piped = inspect_cli("--view", "cost", "--db", db)
    assert in_schema(json.loads(piped.stdout))["total"]["turns"] == 0


#: A recursive query that never ends: in a trigger or a view, it would hold whoever runs it.
ENDLESS = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"


def test_a_database_with_an_endless_trigger_or_view_never_holds_the_loop(tmp_path: Path) -> None:
    """A database file is data: a trigger planted on ``turns`` (the writer) or a view named
    ``turns`` (inspect) runs out of a work budget instead of holding the loop for ever."""
    from agentproto.engine.observations import SCHEMA

    trapped = tmp_path / "trigger.db"
    with sqlite3.connect(trapped) as db:
        db.executescript(SCHEMA + f"CREATE TRIGGER trap AFTER INSERT ON turns BEGIN {ENDLESS}; END;")
    with Sidecar(["--mock", costly_script(tmp_path), "--db", str(trapped)]) as sc:
        session = sc.open(dir=str(tmp_path))
        for _ in range(2):
            sc.ok({"cmd": "prompt", "session": session, "text": "x"})
            sc.events(session, until="TurnEnded")
            time.sleep(1.2)  # the rows are flushed (FLUSH_DELAY) meanwhile
            sc.ok({"cmd": "info", "session": session})  # and the loop still answers
        sc.close_stdin()
        sc.drain()
        assert sc.close() == 0
    err = sc.stderr.decode()
    assert err.count("observations") == 1 and "writing took more than 0.5 s; not writing to it again" in err, err
    assert sqlite3.connect(trapped).execute("SELECT count(*) FROM turns").fetchone() == (0,)

    viewed = tmp_path / "view.db"
    columns = ", ".join(f"x AS {c}" for c in ("id", "ended_at", "agent", "model", "run", "session", "turn",
                                              "input_tokens", "output_tokens", "cached_input_tokens", "cost_usd",
                                              "duration_ms", "stop"))  # fmt: skip
    with sqlite3.connect(viewed) as db:
        db.execute(f"CREATE VIEW turns AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
                   f"SELECT {columns} FROM r")  # fmt: skip
    done = inspect_cli("--view", "cost", "--db", str(viewed))
    assert done.returncode == 1 and done.stderr.strip().endswith("reading took more than 2 s: interrupted"), done.stderr
    # The op on a sidecar's loop: a structured error, and the sidecar serves on.
    p = Proc(["agent", "--db", "off"])
    try:
        p.request({"op": "open", "agent": "mock", "dir": str(tmp_path)})
        refused = p.request({"op": "inspect", "view": "cost", "db": str(viewed)})
        assert done_of(refused) == 1 and "interrupted" in result_of(refused)["error"]["message"]
        assert result_of(p.request({"op": "inspect"}))["agents"][0]["id"] == "s1"
    finally:
        p.stop()


def test_inspect_refuses_what_is_not_a_plain_database_file_of_ours_at_once(tmp_path: Path) -> None:
    """Not a database, a FIFO (it must not block), a device, a directory, a symlink (even to a
    real database), a file in a directory others can write: one clear line, exit 1, and the
    file is never written (inspect opens it read-only)."""
    from agentproto.engine.observations import SCHEMA

    real = tmp_path / "real.db"
    with sqlite3.connect(real) as db:
        db.executescript(SCHEMA)
    (tmp_path / "text").write_text("not a database\n")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link.db").symlink_to(real)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "obs.db").write_bytes(real.read_bytes())
    cases = {
        str(tmp_path / "text"): "file is not a database",
        str(tmp_path / "fifo"): "not a regular file",
        "/dev/zero": "not a regular file",
        str(tmp_path / "dir"): "not a regular file",
        str(tmp_path / "link.db"): "a symbolic link",
        str(shared / "obs.db"): f"its directory {shared} can be written by others",
    }
    for path, why in cases.items():
        done = inspect_cli("--view", "cost", "--db", path)
        assert done.returncode == 1 and done.stdout == "", (path, done)
        assert done.stderr.count("\n") == 1 and f"cannot read {path}: {why}" in done.stderr, (path, done.stderr)
    assert (tmp_path / "text").read_text() == "not a database\n"
    assert not list(tmp_path.glob("text-*")) and not list(tmp_path.glob("fifo-*"))


def test_the_table_shows_no_control_character(tmp_path: Path) -> None:
    """What a table shows comes from agents (a model's name) and the database: an escape
    sequence there (here OSC 52, which sets a terminal's clipboard, and a colour) or a bidi
    override is shown as ``?``, never handed to the terminal; JSON keeps the value as it is."""
    from agentproto.engine.observations import SCHEMA, connect

    db = tmp_path / "obs.db"
    connect(str(db), create=True).close()
    evil_model = "sonnet\x1b]52;c;cm0gLXJmIH4K\x07\u202e"
    with sqlite3.connect(db) as conn:
        conn.executescript(SCHEMA)
        conn.execute("INSERT INTO turns (ended_at, agent, model, run, session, turn, input_tokens, output_tokens, "
                     "cached_input_tokens, cost_usd, duration_ms, stop) VALUES (?, ?, ?, 'r', 's1', 't1', 1, 1, 0, "
                     "0.5, 1, 'Completed')", (time.time(), "mock\x1b[31m", evil_model))  # fmt: skip
    for by in ("agent", "model"):
        shown = inspect_cli("--view", "cost", "--db", str(db), "--by", by, "--top", "1", "--format", "table")
        assert shown.returncode == 0, shown.stderr
        assert not any(c in shown.stdout for c in "\x1b\x07\u202e"), repr(shown.stdout)
        assert "mock?[31m" in shown.stdout
    as_json = json.loads(inspect_cli("--view", "cost", "--db", str(db), "--by", "model", "--format", "json").stdout)
    assert as_json["groups"][0]["key"] == evil_model
