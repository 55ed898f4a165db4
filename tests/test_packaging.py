"""The ways to get agentproto onto a machine, each tried as a user would: a wheel (`python -m
build`) and `pip install .` into fresh venvs, the zipapp (scripts/build_pyz.py) and a vendored
copy (scripts/vendor.py), each run from another directory by an interpreter that has no
agentproto of its own; and the one-line refusal of Python 3.9.

Nothing here reaches a network: the wheel is built with this venv's `build` and setuptools
(no isolation), and `pip install .` gets setuptools from .cache/wheelhouse
(scripts/install-test-deps puts the pinned wheel there)."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path
from typing import Any

import pytest
from sidecar import ROOT, check_line

sys.path.insert(0, str(ROOT / "scripts"))
import build_pyz  # noqa: E402
import vendor  # noqa: E402

from agentproto import __version__  # noqa: E402

SCHEMA_TEXT = (ROOT / "agentproto" / "schema.json").read_text(encoding="utf-8")
WHEELHOUSE = ROOT / ".cache" / "wheelhouse"
PYTHON39 = Path("/root/.pyenv/versions/3.9.18/bin/python")


def _base_python() -> str:
    """The interpreter this venv was made from: it has no agentproto and none of the test
    deps. (sys._base_executable is the venv's own python on 3.10.)"""
    candidate = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return str(candidate) if candidate.exists() else getattr(sys, "_base_executable", sys.executable)


BASE_PYTHON = _base_python()


def clean_env(**extra: str) -> dict[str, str]:
    """The environment minus anything that could put a checkout or the venv on sys.path."""
    drop = ("PYTHON", "VIRTUAL_ENV", "PIP_", "AGENTPROTO_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    # pip reads no user or site configuration and keeps no cache: the install is what the
    # test says, nothing more.
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.update(extra)
    return env


def run(argv: list[str], cwd: Path, stdin: str = "", timeout: float = 120, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout, env=clean_env(**extra))


def check_entry_point(argv: list[str], cwd: Path, version: str = __version__, **extra: str) -> None:
    """`--version` (``version``: a copy's VERSION stamp where it has one), `schema`,
    `--single-shot` capabilities, the MCP tools' schemas (read from the package data at run
    time) through `serve --transport mcp` and `mcp`, a shipped mock script by name, and an
    echo-mock session through `serve`. ``extra``: environment variables (PATH, HOME)."""
    shown = run([*argv, "--version"], cwd, **extra)
    assert shown.returncode == 0 and shown.stdout.strip() == f"agentproto {version}", shown
    schema = run([*argv, "schema"], cwd, **extra)
    assert schema.returncode == 0, schema.stderr
    assert json.loads(schema.stdout) == json.loads(SCHEMA_TEXT)

    shot = run([*argv, "--single-shot"], cwd, stdin='{"op": "capabilities"}\n', **extra)
    lines = [json.loads(line) for line in shot.stdout.splitlines()]
    assert shot.returncode == 0 and lines[-1] == {"kind": "done", "exit_code": 0}, shot
    result = next(line for line in lines if line["kind"] == "result")
    assert result["contract"] == "agentproto/1" and "mock" in result["agents"]

    frames = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    for spelling in (["serve", "--transport", "mcp"], ["mcp"]):
        mcp = run([*argv, *spelling], cwd, stdin="".join(json.dumps(f) + "\n" for f in frames), **extra)
        replies = {r["id"]: r for r in map(json.loads, mcp.stdout.splitlines()) if "id" in r}
        assert mcp.returncode == 0 and 2 in replies, mcp
        tools = {t["name"]: t for t in replies[2]["result"]["tools"]}
        assert {"agent", "dir"} <= set(tools["agentproto_open"]["inputSchema"]["properties"])

    played = run([*argv, "chat", "--mock", "turn"], cwd, stdin="go", **extra)  # the shipped turn.json, by name
    assert played.returncode == 0 and played.stdout.strip() == "Let me check. Done.", played

    assert mock_session(argv, cwd, **extra) == "hello from elsewhere"


def mock_session(argv: list[str], cwd: Path, **extra: str) -> str:
    """open + prompt on the echo mock through `serve`, then EOF; every line schema-checked.
    Returns the streamed text."""
    proc = subprocess.Popen(
        [*argv, "serve"], cwd=cwd, env=clean_env(**extra), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin and proc.stdout and proc.stderr
    lines: queue.Queue[Any] = queue.Queue()

    def read() -> None:
        assert proc.stdout
        for raw in proc.stdout:
            lines.put(json.loads(raw))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()

    def next_line() -> Any:
        line = lines.get(timeout=30)
        assert line is not None, proc.stderr.read() if proc.stderr else ""
        check_line(line)
        return line

    def send(frame: dict[str, Any]) -> None:
        assert proc.stdin
        proc.stdin.write((json.dumps(frame) + "\n").encode())
        proc.stdin.flush()

    try:
        assert "hello" in next_line()
        send({"id": 1, "cmd": "open", "agent": "mock", "dir": str(cwd)})
        while "ok" not in (line := next_line()):
            pass
        session = line["ok"]["id"]
        send({"id": 2, "cmd": "prompt", "session": session, "text": "hello from elsewhere"})
        text = []
        while True:
            line = next_line()
            kind = line.get("event", {}).get("kind", {})
            if isinstance(kind, dict) and "TextDelta" in kind:
                text.append(kind["TextDelta"]["text"])
            if isinstance(kind, dict) and "TurnEnded" in kind:
                break
        proc.stdin.close()
        rest = []
        while (line := lines.get(timeout=30)) is not None:
            check_line(line)
            rest.append(line)
        assert {"closed": session} in rest
        assert proc.wait(timeout=30) == 0
        return "".join(text)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_base_interpreter_has_no_agentproto(tmp_path):
    """What makes the runs below mean something: outside this venv and checkout, nothing
    named agentproto can be imported."""
    done = run([BASE_PYTHON, "-I", "-c", "import agentproto"], tmp_path)
    assert done.returncode == 1 and "No module named 'agentproto'" in done.stderr


# -- the zipapp ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = build_pyz.build(tmp_path_factory.mktemp("build") / "agentproto.pyz")
    # Copied alone into another directory: nothing else travels with it.
    alone = tmp_path_factory.mktemp("alone") / "agentproto.pyz"
    shutil.copy2(built, alone)
    return alone


def test_zipapp_holds_the_package_its_data_and_a_version_stamp(pyz):
    with zipfile.ZipFile(pyz) as archive:
        names = {n for n in archive.namelist() if not n.endswith("/")}  # not the directory entries
        stamp = archive.read("agentproto/VERSION").decode().strip()
    expected = {f"agentproto/{p.as_posix()}" for p in vendor.package_files()}
    assert names == expected | {"__main__.py", "agentproto/VERSION"}
    assert "agentproto/schema.json" in names and not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert stamp.startswith(__version__)
    assert pyz.read_bytes().startswith(b"#!/usr/bin/env python3\n") and os.access(pyz, os.X_OK)


def test_zipapp_runs_isolated_from_another_directory(pyz, tmp_path):
    with zipfile.ZipFile(pyz) as archive:
        stamp = archive.read("agentproto/VERSION").decode().strip()
    check_entry_point([BASE_PYTHON, "-I", str(pyz)], tmp_path, version=stamp)


def test_build_pyz_writes_dist_by_default(tmp_path):
    """The documented command, as is: `python scripts/build_pyz.py` → dist/agentproto.pyz."""
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "agentproto", checkout / "agentproto", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "scripts", checkout / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    done = run([BASE_PYTHON, "-I", "scripts/build_pyz.py"], checkout)
    assert done.returncode == 0, done.stderr
    target = checkout / "dist" / "agentproto.pyz"
    assert done.stdout.startswith(f"wrote {target}")
    version = run([BASE_PYTHON, "-I", str(target), "--version"], tmp_path)
    assert version.stdout.strip().startswith(f"agentproto {__version__}"), version


# -- vendoring ------------------------------------------------------------------------------


def test_vendored_copy_runs_as_python_m_agentproto(tmp_path):
    project = tmp_path / "project"
    done = run([BASE_PYTHON, "-I", str(ROOT / "scripts" / "vendor.py"), str(project / "third_party")], tmp_path)
    assert done.returncode == 0, done.stderr
    copy = project / "third_party" / "agentproto"
    files = {p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()}
    assert files == {p.as_posix() for p in vendor.package_files()} | {"VERSION"}
    stamp = (copy / "VERSION").read_text().strip()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if commit.returncode == 0:
        assert re.fullmatch(rf"{re.escape(__version__)}\+g{commit.stdout.strip()}(\.dirty)?", stamp), stamp
    else:
        assert stamp == __version__
    # The copy, not something else, is what runs.
    where = run([BASE_PYTHON, "-c", "import agentproto; print(agentproto.__file__)"], copy.parent)
    assert where.stdout.strip() == str(copy / "__init__.py")
    check_entry_point([BASE_PYTHON, "-m", "agentproto"], copy.parent, version=stamp)
    # The directory run as a script, from elsewhere: its own modules (inspect.py…) must not
    # stand in for the stdlib's, and the package must still be found.
    check_entry_point([BASE_PYTHON, str(copy)], tmp_path, version=stamp)


def test_vendor_replaces_its_own_copy_and_refuses_a_foreign_directory(tmp_path):
    assert run([BASE_PYTHON, str(ROOT / "scripts" / "vendor.py"), str(tmp_path)], tmp_path).returncode == 0
    (tmp_path / "agentproto" / "stale.py").write_text("")
    assert run([BASE_PYTHON, str(ROOT / "scripts" / "vendor.py"), str(tmp_path)], tmp_path).returncode == 0
    assert not (tmp_path / "agentproto" / "stale.py").exists()

    foreign = tmp_path / "other"
    (foreign / "agentproto").mkdir(parents=True)
    (foreign / "agentproto" / "mine.py").write_text("# someone's own package\n")
    done = run([BASE_PYTHON, str(ROOT / "scripts" / "vendor.py"), str(foreign)], tmp_path)
    assert done.returncode != 0 and "not a copy made by scripts/vendor.py" in done.stderr
    assert (foreign / "agentproto" / "mine.py").read_text() == "# someone's own package\n"


# -- the wheel and `pip install .` ------------------------------------------------------------


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What a clean checkout holds for packaging (the build writes build/ and *.egg-info
    into its source tree: not into this checkout)."""
    src = tmp_path_factory.mktemp("src")
    shutil.copytree(ROOT / "agentproto", src / "agentproto", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    return src


@pytest.fixture(scope="module")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(source)], source, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("*.whl")
    return built


def fresh_venv(path: Path) -> Path:
    done = run([BASE_PYTHON, "-m", "venv", str(path)], path.parent, timeout=300)
    assert done.returncode == 0, done.stderr
    return path / "bin"


def test_wheel_ships_the_package_its_data_and_the_license(wheel):
    assert wheel.name == f"agentproto-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"agentproto-{__version__}.dist-info/METADATA").decode()
        entry_points = archive.read(f"agentproto-{__version__}.dist-info/entry_points.txt").decode()
    package = {n for n in names if not n.startswith(f"agentproto-{__version__}.dist-info/")}
    assert package == {f"agentproto/{p.as_posix()}" for p in vendor.package_files()}
    assert f"agentproto-{__version__}.dist-info/licenses/LICENSE" in names
    assert "License-Expression: MIT" in metadata and "Requires-Python: >=3.10" in metadata
    assert "agentproto = agentproto.cli:main" in entry_points


def test_wheel_installs_into_a_fresh_venv(wheel, tmp_path):
    bin_dir = fresh_venv(tmp_path / "venv")
    done = run([str(bin_dir / "python"), "-m", "pip", "install", "--no-index", "--no-deps", str(wheel)], tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    check_entry_point([str(bin_dir / "agentproto")], elsewhere)
    check_entry_point([str(bin_dir / "python"), "-I", "-m", "agentproto"], elsewhere)


def test_pip_install_dot_into_a_fresh_venv(source, tmp_path):
    wheels = list(WHEELHOUSE.glob("setuptools-*.whl"))
    assert wheels, f"no setuptools wheel in {WHEELHOUSE}: run scripts/install-test-deps"
    bin_dir = fresh_venv(tmp_path / "venv")
    # Build isolation, as a user's `pip install .` has, with setuptools from the wheelhouse.
    done = run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--no-index", "--find-links", str(WHEELHOUSE), "."],
        source,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    check_entry_point([str(bin_dir / "agentproto")], elsewhere)


# -- Python 3.9 -----------------------------------------------------------------------------


def python39() -> str:
    if not PYTHON39.exists():
        print(f"no Python 3.9 at {PYTHON39}")
        pytest.skip(f"no Python 3.9 at {PYTHON39}")
    return str(PYTHON39)


@pytest.mark.parametrize("how", ["checkout", "zipapp"])
def test_python_3_9_gets_one_line_and_exit_1(how, pyz, tmp_path):
    py = python39()
    argv, cwd = ([py, "-m", "agentproto"], ROOT) if how == "checkout" else ([py, str(pyz)], tmp_path)
    for args in (["--version"], ["serve"], []):
        done = run([*argv, *args], cwd)
        version = run([py, "-c", "import platform; print(platform.python_version())"], tmp_path).stdout.strip()
        assert (done.returncode, done.stdout, done.stderr) == (
            1,
            "",
            f"agentproto needs Python 3.10 or newer (this is {version})\n",
        ), args


def test_the_zipapp_serves_the_console_page_from_inside_itself(pyz, tmp_path):
    """The page's files are package data read with importlib.resources: out of the zip too."""
    import http.client

    proc = subprocess.Popen([BASE_PYTHON, "-I", str(pyz), "console", "--db", "off"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path)})  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode()
        port = int(re.search(r"127\.0\.0\.1:(\d+)/", url).group(1))  # type: ignore[union-attr]
        for path, expected in (("/", b"<title>agentproto console</title>"), ("/console.js", b"readEvents"),
                               ("/console.css", b"#events")):  # fmt: skip
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read()
            conn.close()
            assert response.status == 200 and expected in body, (path, response.status)
    finally:
        proc.terminate()
        proc.wait(30)
