"""Cost databases merged (``inspect --view cost --db A --db B``, ``--by db``), their schema
version, the retention of their rows (``--db-keep``, ``AGENTPROTO_DB_KEEP``) and the first
run's line naming the database: with databases written by real ``serve`` runs of the mock."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from ops_support import Proc, done_of, result_of, write_script
from sidecar import ROOT, Sidecar, base_env

from agentproto.engine.observations import SCHEMA_VERSION


def costly(tmp_path: Path, cost: float) -> str:
    turn = [
        {"Emit": {"ContextUsage": {"used_tokens": 10, "window_tokens": 1000, "cost_usd": cost}}},
        {"Usage": {"input_tokens": 100, "cached_input_tokens": 0, "output_tokens": 10}},
        {"End": {"Completed": {"source": "Protocol"}}},
    ]
    return write_script(tmp_path, f"cost{cost}", [turn])


def one_turn(tmp_path: Path, args: list[str], env: dict[str, str] | None = None, cost: float = 0.5) -> str:
    """One mock turn in a real ``serve`` run; its stderr."""
    with Sidecar(["--mock", costly(tmp_path, cost), *args], env=env) as sc:
        session = sc.open(dir=str(tmp_path))
        sc.ok({"cmd": "prompt", "session": session, "text": "hi"})
        sc.events(session, until="TurnEnded")
        assert sc.close() == 0
    return sc.stderr.decode()


def inspect_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentproto", "inspect", "--view", "cost", "--format", "json", *args],
                          capture_output=True, text=True, env=base_env(env), cwd=str(ROOT), timeout=60)  # fmt: skip


def count(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM turns").fetchone()[0])


def test_several_databases_unite_their_rows_and_group_by_db(tmp_path: Path) -> None:
    """Two machines' databases (each written by its own serve run), one of them copied in
    twice: the rows are united, a turn counts once, ``--by db`` splits them per file."""
    a, b = tmp_path / "a" / "obs.db", tmp_path / "b" / "obs.db"
    one_turn(tmp_path, ["--db", str(a)], cost=0.5)
    one_turn(tmp_path, ["--db", str(a)], cost=0.25)
    one_turn(tmp_path, ["--db", str(b)], cost=1.0)
    copy = tmp_path / "copy" / "obs.db"
    copy.parent.mkdir(mode=0o700)
    shutil.copy(a, copy)
    done = inspect_cli("--db", str(a), "--db", str(b), "--db", str(copy), "--by", "db", "--top", "5")
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert view["db"] == str(a) and view["dbs"] == [str(a), str(b), str(copy)]
    assert view["total"]["turns"] == 3 and view["total"]["cost_usd"] == pytest.approx(1.75)
    groups = {g["key"]: (g["turns"], g["cost_usd"]) for g in view["groups"]}
    assert groups == {str(b): (1, pytest.approx(1.0)), str(a): (2, pytest.approx(0.75))}
    assert [row["db"] for row in view["top"]] == [str(b), str(a), str(a)]
    by_agent = json.loads(inspect_cli("--db", str(a), "--db", str(b)).stdout)
    assert by_agent["groups"] == [{"key": "mock", **by_agent["total"]}] and by_agent["total"]["turns"] == 3
    # A missing database holds no rows; the table names every database.
    table = inspect_cli("--db", str(a), "--db", str(tmp_path / "none.db"), "--format", "table").stdout.splitlines()
    assert [line.split()[0] for line in table[1:3]] == ["database"] * 2, table
    assert table[1].endswith("a/obs.db") and table[2].endswith("/none.db") and all(len(x) <= 80 for x in table)
    assert [line.split()[:2] for line in table if line.startswith("TOTAL")] == [["TOTAL", "2"]]
    # A file made but never written (no table yet) holds no rows either.
    empty = tmp_path / "empty.db"
    empty.touch(mode=0o600)
    assert json.loads(inspect_cli("--db", str(a), "--db", str(empty)).stdout)["total"]["turns"] == 2
    # The op takes a list too, and the schema's `db` enum check still refuses junk.
    p = Proc(["agent", "--db", "off"])
    try:
        p.request({"op": "open", "agent": "mock", "dir": str(tmp_path)})
        view = result_of(p.request({"op": "inspect", "view": "cost", "db": [str(a), str(b)], "by": "db"}))
        assert view["total"]["turns"] == 3 and len(view["groups"]) == 2
        refused = p.request({"op": "inspect", "view": "cost", "db": []})
        assert refused == [{"kind": "error", "message": "invalid `db`: must be a path, or a non-empty list of paths, "
                                                        "got array"}, {"kind": "done", "exit_code": 2}]  # fmt: skip
    finally:
        p.stop()


def test_a_database_of_another_schema_version_is_refused_naming_both(tmp_path: Path) -> None:
    from agentproto.engine.observations import SCHEMA

    good = tmp_path / "good.db"
    one_turn(tmp_path, ["--db", str(good)])
    with sqlite3.connect(good) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.executescript(SCHEMA + "PRAGMA user_version = 7;")
        conn.execute("INSERT INTO turns (ended_at, agent, run, session, turn, input_tokens, output_tokens, "
                     "cached_input_tokens, duration_ms, stop) VALUES (?, 'mock', 'r', 's1', 't1', 1, 1, 0, 1, "
                     "'Completed')", (time.time(),))  # fmt: skip
    done = inspect_cli("--db", str(good), "--db", str(other))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().endswith(f"inspect: {other} is an observations database of schema version 7; this "
                                   f"agentproto reads and writes version {SCHEMA_VERSION}"), done.stderr  # fmt: skip
    # A serve run never writes into it: one line, the turn runs, the file keeps its one row.
    err = one_turn(tmp_path, ["--db", str(other)])
    assert err.count("schema version 7") == 1 and "not writing to it in this run" in err, err
    assert count(other) == 1
    # A file written before versions (user_version 0, the same table) is version 1: read, and
    # marked 1 by the next writer.
    legacy = tmp_path / "legacy.db"
    with sqlite3.connect(legacy) as conn:
        conn.executescript(SCHEMA.replace(f"PRAGMA user_version = {SCHEMA_VERSION};", ""))
        assert conn.execute("PRAGMA user_version").fetchone() == (0,)
    one_turn(tmp_path, ["--db", str(legacy)])
    assert json.loads(inspect_cli("--db", str(legacy)).stdout)["total"]["turns"] == 1
    with sqlite3.connect(legacy) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


def backdate(db: Path, days: list[float]) -> None:
    """Add rows ended ``days`` ago (as a run of long ago would have)."""
    with sqlite3.connect(db) as conn:
        for n, ago in enumerate(days):
            conn.execute("INSERT INTO turns (ended_at, agent, run, session, turn, input_tokens, output_tokens, "
                         "cached_input_tokens, duration_ms, stop) VALUES (?, 'mock', 'old', 's1', ?, 1, 1, 0, 1, "
                         "'Completed')", (time.time() - ago * 86400, f"t{n}"))  # fmt: skip


def ages(db: Path) -> list[int]:
    with sqlite3.connect(db) as conn:
        return [round((time.time() - t) / 86400) for (t,) in conn.execute("SELECT ended_at FROM turns ORDER BY ended_at")]


def test_rows_older_than_the_retention_are_pruned_when_the_writer_opens_the_file(tmp_path: Path) -> None:
    db = tmp_path / "obs.db"
    one_turn(tmp_path, ["--db", str(db)])
    backdate(db, [400, 100, 30])
    assert ages(db) == [400, 100, 30, 0]
    one_turn(tmp_path, ["--db", str(db)])  # the default: 90 days
    assert ages(db) == [30, 0, 0]
    one_turn(tmp_path, ["--db", str(db), "--db-keep", "0"])  # 0 keeps every row
    backdate(db, [1000])
    one_turn(tmp_path, ["--db", str(db)], env={"AGENTPROTO_DB_KEEP": "none"})
    assert ages(db) == [1000, 30, 0, 0, 0, 0]
    one_turn(tmp_path, ["--db", str(db)], env={"AGENTPROTO_DB_KEEP": "2w"})
    assert ages(db) == [0] * 5
    one_turn(tmp_path, ["--db", str(db), "--db-keep", "1"], env={"AGENTPROTO_DB_KEEP": "none"})  # the flag wins
    backdate(db, [2, 1.5])
    one_turn(tmp_path, ["--db", str(db), "--db-keep", "36h"])
    assert ages(db) == [0] * 7
    # A bad value is a usage error before anything runs.
    bad = subprocess.run([sys.executable, "-m", "agentproto", "serve", "--db-keep", "soon"], capture_output=True,
                         text=True, env=base_env(), cwd=str(ROOT), timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    assert bad.returncode == 2 and "--db-keep (or AGENTPROTO_DB_KEEP) 'soon': a span" in bad.stderr, bad.stderr


def test_pruning_is_bounded_per_go(tmp_path: Path) -> None:
    """At most PRUNE_ROWS rows per go, the oldest first: a huge backlog costs the loop a
    bounded moment, and the next open prunes on."""
    from agentproto.engine.observations import PRUNE_ROWS

    db = tmp_path / "obs.db"
    one_turn(tmp_path, ["--db", str(db)])
    with sqlite3.connect(db) as conn:
        old = time.time() - 200 * 86400
        conn.executemany("INSERT INTO turns (ended_at, agent, run, session, turn, input_tokens, output_tokens, "
                         "cached_input_tokens, duration_ms, stop) VALUES (?, 'mock', 'old', 's1', ?, 1, 1, 0, 1, "
                         "'Completed')", [(old + n, f"t{n}") for n in range(PRUNE_ROWS + 10)])  # fmt: skip
    one_turn(tmp_path, ["--db", str(db)])
    assert count(db) == 10 + 2
    one_turn(tmp_path, ["--db", str(db)])
    assert count(db) == 3


def serve_stderr(env: dict[str, str], tmp_path: Path) -> str:
    return one_turn(tmp_path, [], env=env)


def test_the_first_run_says_where_the_database_lives_once(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    where = tmp_path / "state" / "agentproto" / "observations.db"
    first = serve_stderr(env, tmp_path)
    assert first.count(str(where)) == 1 and "observations: recording what turns cost in" in first, first
    assert str(where) not in serve_stderr(env, tmp_path)  # not on later runs
    # --single-shot: its stdout stays the answer's lines only (the line is on stderr).
    env2 = {"XDG_STATE_HOME": str(tmp_path / "state2")}
    done = subprocess.run([sys.executable, "-m", "agentproto", "--single-shot", "--mock", costly(tmp_path, 0.1)],
                          input=json.dumps({"op": "generate", "agent": "mock", "dir": str(tmp_path), "prompt": "hi"}),
                          capture_output=True, text=True, env=base_env(env2), cwd=str(ROOT), timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines: list[Any] = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[-1]["kind"] == "done" and "observations" not in done.stdout
    assert "observations: recording what turns cost in " + str(tmp_path / "state2") in done.stderr
