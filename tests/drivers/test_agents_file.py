"""The user's agents.json: a declared ACP agent joins the catalog by name (discover, probe,
open), and the file is read only when it is the user's own, at the one path.

End to end through a real ``python -m agentproto serve`` with a temp ``XDG_CONFIG_HOME``;
the declared agent is the SDK-built test agent (tests/fakes/acp_test_agent.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sidecar import Sidecar, base_env, kind_name

from agentproto.drivers import agents_file

AGENT_SCRIPT = Path(__file__).resolve().parents[1] / "fakes" / "acp_test_agent.py"
SECRET = "sk-declared-0123456789abcdef"


def declare(config: Path, agents: Any, mode: int = 0o600, whole: bool = False) -> Path:
    """Write ``config``/agentproto/agents.json holding ``agents`` (the "agents" object; with
    ``whole``, the whole document: a string is written as it is)."""
    folder = config / "agentproto"
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    path = folder / "agents.json"
    doc = agents if whole else {"agents": agents}
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    path.chmod(mode)
    return path


def mine(**extra: Any) -> dict[str, Any]:
    return {"command": str(AGENT_SCRIPT), "version_args": [], **extra}


def sidecar(config: Path, *args: str, cwd: str | None = None, xdg: str | None = None) -> Sidecar:
    return Sidecar(args, env=base_env({"XDG_CONFIG_HOME": xdg if xdg is not None else str(config)}), cwd=cwd)


def discovered(sc: Sidecar) -> dict[str, Any]:
    report: dict[str, Any] = sc.ok({"cmd": "discover"}, timeout=60)
    return report


def test_a_declared_agent_is_listed_probed_and_opened_by_name(tmp_path: Path) -> None:
    declare(tmp_path / "cfg", {"mine": mine(name="My agent")})
    work = tmp_path / "work"
    work.mkdir()
    with sidecar(tmp_path / "cfg") as sc:
        report = discovered(sc)
        entry = next(a for a in report["agents"] if a["id"] == "mine")
        assert entry["name"] == "My agent" and entry["executable_path"] == str(AGENT_SCRIPT)
        assert entry["version"] is None  # "version_args": [] asks none
        assert report["diagnostics"] == []
        details = sc.ok({"cmd": "probe", "agent": "mine", "dir": str(work)}, timeout=60)
        assert details["version"] == "9.8.7"
        session = sc.open("mine", str(work))
        sc.ok({"cmd": "prompt", "session": session, "text": "chunks"})
        events = sc.events(session, "TurnEnded", 30)
        text = "".join(e["kind"]["TextDelta"]["text"] for e in events if kind_name(e["kind"]) == "TextDelta")
        assert text == "Hello, world"
        sc.ok({"cmd": "close", "session": session}, timeout=20)


def test_a_declared_agents_env_reaches_it(tmp_path: Path) -> None:
    # ACP_TEST_AUTH=new makes the test agent refuse session/new as not logged in.
    declare(tmp_path / "cfg", {"plain": mine(), "gated": mine(env={"ACP_TEST_AUTH": "new"})})
    with sidecar(tmp_path / "cfg") as sc:
        sc.open("plain", str(tmp_path))
        error = sc.error({"cmd": "open", "agent": "gated", "dir": str(tmp_path)}, timeout=60)
        assert error["kind"] == "AuthRequired"


def test_a_declared_agents_env_values_are_redacted_from_a_record(tmp_path: Path) -> None:
    declare(tmp_path / "cfg", {"mine": mine(env={"MINE_API_KEY": SECRET})})
    record = tmp_path / "run.jsonl"
    with sidecar(tmp_path / "cfg", "--record", str(record)) as sc:
        session = sc.open("mine", str(tmp_path))
        # The agent is sent the value (as an agent echoing its key would write it).
        sc.ok({"cmd": "prompt", "session": session, "text": f"chunks {SECRET}"})
        sc.events(session, "TurnEnded", 30)
        sc.ok({"cmd": "close", "session": session}, timeout=20)
    text = record.read_text()
    assert "chunks " in text and "[redacted]" in text
    assert SECRET not in text


def test_a_declared_id_never_shadows_a_built_in_one(tmp_path: Path) -> None:
    path = declare(tmp_path / "cfg", {"mock": mine(), "codex": mine(), "mine": mine()})
    with sidecar(tmp_path / "cfg") as sc:
        report = discovered(sc)
        ids = [a["id"] for a in report["agents"]] + [m["id"] for m in report["missing"]]
        assert ids.count("mock") == 1 and ids.count("codex") == 1 and "mine" in ids
        assert all(a["executable_path"] != str(AGENT_SCRIPT) for a in report["agents"] if a["id"] != "mine")
        warnings = [d["message"] for d in report["diagnostics"]]
        assert f"{path}: agents.mock: mock is a built-in agent; a declared agent never shadows one (pick another id)" in warnings
        assert any(w.startswith(f"{path}: agents.codex: codex is a built-in agent") for w in warnings)
        # "mock" is still the scripted echo agent, not the declared one.
        session = sc.open("mock", str(tmp_path))
        sc.ok({"cmd": "prompt", "session": session, "text": "hi"})
        assert any(kind_name(e["kind"]) == "TextDelta" for e in sc.events(session, "TurnEnded"))


@pytest.mark.parametrize("what", ["file", "directory"])
def test_a_group_or_world_writable_agents_json_is_not_read(tmp_path: Path, what: str) -> None:
    path = declare(tmp_path / "cfg", {"mine": mine()}, mode=0o620 if what == "file" else 0o600)
    if what == "directory":
        path.parent.chmod(0o777)
    with sidecar(tmp_path / "cfg") as sc:
        report = discovered(sc)
        assert "mine" not in [a["id"] for a in report["agents"]]
        fix = f"chmod 600 {path}" if what == "file" else f"chmod 700 {path.parent}"
        (warning,) = [d["message"] for d in report["diagnostics"]]
        assert warning.startswith(f"{path}: not read: ") and warning.endswith(fix)
        error = sc.error({"cmd": "open", "agent": "mine", "dir": str(tmp_path)})
        assert error["kind"] == "NotInstalled" and error["message"].endswith(fix)


def test_an_agents_json_owned_by_another_user_is_not_read(tmp_path: Path) -> None:
    path = declare(tmp_path / "cfg", {"mine": mine()})
    loaded = agents_file.load(["mock"], {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}, uid=os.getuid() + 1)
    assert loaded.agents == ()
    assert loaded.problems == (f"{path}: not read: it is owned by uid {os.getuid()}, not by you (uid {os.getuid() + 1})",)
    assert [a.id for a in agents_file.load(["mock"], {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}).agents] == ["mine"]


def test_agents_json_is_never_read_from_the_working_directory(tmp_path: Path) -> None:
    # A relative XDG_CONFIG_HOME would name the project's own file: it is ignored (XDG's
    # rule), and the user's ~/.config is read instead.
    project = tmp_path / "project"
    declare(project / "cfg", {"planted": mine()})
    home = tmp_path / "home"
    declare(home / ".config", {"mine": mine()})
    env = base_env({"XDG_CONFIG_HOME": "cfg", "HOME": str(home)})
    with Sidecar(env=env, cwd=str(project)) as sc:
        ids = [a["id"] for a in discovered(sc)["agents"]]
        assert "mine" in ids and "planted" not in ids
        error = sc.error({"cmd": "open", "agent": "planted", "dir": str(project)})
        assert error["kind"] == "NotInstalled"


def test_an_invalid_entry_costs_that_entry_only_with_a_clear_error(tmp_path: Path) -> None:
    path = declare(tmp_path / "cfg", {"mine": mine(), "broken": {"command": "./agent", "args": ["ok", 3]}})
    with sidecar(tmp_path / "cfg") as sc:
        report = discovered(sc)
        assert "mine" in [a["id"] for a in report["agents"]]
        assert [d["message"] for d in report["diagnostics"]] == [
            f"{path}: agents.broken.command: a relative path is refused (it would depend on the working directory)",
            f"{path}: agents.broken.args[1]: must be a string (without NUL)",
        ]
        error = sc.error({"cmd": "open", "agent": "broken", "dir": str(tmp_path)})
        assert error["kind"] == "NotInstalled"
        assert "agents.broken.command: a relative path is refused" in error["message"]


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ("{", "not read: not valid JSON: line 1 column 2: Expecting property name enclosed in double quotes"),
        ("[]", 'must be an object: {"agents": {ID: {"command": ..., "args": [...], "env": {...}}}}'),
        ({"agent": {}}, "unknown key 'agent'"),
        ({"agents": []}, "agents: must be an object of ID: entry"),
        ({"agents": {"Mine": mine()}}, "agents.Mine: an id is 1-64 of a-z 0-9 . _ - (starting with a letter or digit)"),
        ({"agents": {"x": "cmd"}}, 'agents.x: must be an object with at least "command"'),
        ({"agents": {"x": {}}}, "agents.x.command: required: the executable's name on PATH or its absolute path"),
        ({"agents": {"x": mine(protocol="stdio")}}, 'agents.x.protocol: must be "acp"'),
        ({"agents": {"x": mine(cmd="y")}}, "agents.x: unknown key 'cmd' (known: command, args, env, name,"),
        ({"agents": {"x": mine(env=["A=1"])}}, "agents.x.env: must be an object of NAME: string"),
        ({"agents": {"x": mine(env={"A B": "1"})}}, "agents.x.env: 'A B' is not a variable name"),
        ({"agents": {"x": mine(env={"KEY": 1})}}, "agents.x.env.KEY: must be a string (without NUL)"),
        ({"agents": {"x": mine(args="--acp")}}, "agents.x.args: must be an array of strings"),
        ({"agents": {"x": mine(name=3)}}, "agents.x.name: must be a string"),
    ],
)
def test_every_problem_of_the_file_is_a_clear_sentence(tmp_path: Path, doc: Any, problem: str) -> None:
    path = declare(tmp_path / "cfg", doc, whole=True)
    loaded = agents_file.load(["mock"], {"XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    assert loaded.agents == ()
    assert len(loaded.problems) == 1 and loaded.problems[0].startswith(f"{path}: {problem}")
    # A problem never quotes an env value (it may be a secret).
    assert "sk-" not in loaded.problems[0]


def test_an_absent_file_declares_nothing_silently(tmp_path: Path) -> None:
    assert agents_file.load(["mock"], {"XDG_CONFIG_HOME": str(tmp_path)}) == agents_file.Loaded(
        str(tmp_path / "agentproto" / "agents.json"), (), ()
    )
    # Unset (or relative) XDG_CONFIG_HOME: ~/.config.
    assert agents_file.path({"HOME": "/h"}).endswith(os.path.join(".config", "agentproto", "agents.json"))



def test_a_declared_agents_recording_replays_where_it_is_not_declared(tmp_path: Path) -> None:
    # A recording is a bug report: it must replay on a machine whose agents.json lacks the
    # agent (replay starts no agent; the recorded installation says it speaks ACP).
    import subprocess
    import sys

    declare(tmp_path / "cfg", {"mine": mine(args=[])})
    record = tmp_path / "run.ndjson"
    with sidecar(tmp_path / "cfg", "--record", str(record)) as sc:
        session = sc.open("mine", str(tmp_path))
        sc.ok({"cmd": "prompt", "session": session, "text": "chunks"})
        sc.events(session, "TurnEnded", 30)
        sc.ok({"cmd": "close", "session": session}, timeout=20)
        sc.wait_for(lambda line: line.get("closed") == session, 20)
        sc.close_stdin()
        sc.drain()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = base_env({"XDG_CONFIG_HOME": str(elsewhere), "AGENTPROTO_DB": "off"})
    done = subprocess.run([sys.executable, "-m", "agentproto", "replay", str(record)],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
