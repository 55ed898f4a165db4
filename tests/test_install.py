"""scripts/install.py, tried as a user would: a temp HOME, the base interpreter (no venv, no
checkout on sys.path), the launcher run from another directory by name through PATH; the
PATH warning; bytecode for the interpreter that installed; --prefix; --uninstall removing
exactly what was written; the refusal to overwrite what it did not write; an update; and
every example of every --help text run from the installed copy (`help_examples`)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sidecar import ROOT

from agentproto import __version__
from tests.test_packaging import BASE_PYTHON, check_entry_point, clean_env

INSTALL = str(ROOT / "scripts" / "install.py")
STAMP = re.compile(rf"{re.escape(__version__)}(\+g[0-9a-f]{{40}}(\.dirty)?)?")


def install(home: Path, *args: str, path: str = "/usr/bin:/bin") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASE_PYTHON, "-I", INSTALL, *args], capture_output=True, text=True, timeout=120,
        env=clean_env(HOME=str(home), PATH=path), cwd=str(home),
    )  # fmt: skip


def tree(root: Path) -> dict[str, str]:
    """Every file and directory under root, with its content's sha256 (directories: "dir")."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        found[rel] = "dir" if path.is_dir() and not path.is_symlink() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temp HOME with agentproto installed the default way (~/.local); returns HOME."""
    home = tmp_path_factory.mktemp("home")
    done = install(home)
    assert done.returncode == 0, done.stderr
    return home


def elsewhere(home: Path) -> tuple[Path, dict[str, str]]:
    """A directory that is not the checkout, and an environment whose PATH has ~/.local/bin."""
    cwd = home / "elsewhere"
    cwd.mkdir(exist_ok=True)
    return cwd, clean_env(HOME=str(home), PATH=f"{home}/.local/bin:/usr/bin:/bin")


def test_install_writes_the_package_with_bytecode_and_a_launcher(installed: Path) -> None:
    bin_dir, lib = installed / ".local" / "bin", installed / ".local" / "lib" / "agentproto"
    assert sorted(p.name for p in bin_dir.iterdir()) == ["agentproto"]
    launcher = bin_dir / "agentproto"
    assert os.access(launcher, os.X_OK)
    first = launcher.read_text().splitlines()[0]
    assert first == f"#!{BASE_PYTHON} -IS", first  # one interpreter start, isolated, no site
    [version] = [p for p in lib.iterdir() if p.is_dir()]
    assert STAMP.fullmatch(version.name) and (version / "agentproto" / "VERSION").read_text().strip() == version.name
    assert (version / "agentproto" / "mock_scripts" / "turn.json").is_file()
    tag = subprocess.run([BASE_PYTHON, "-c", "import sys; print(sys.implementation.cache_tag)"],
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    for module in ("cli", "cli_args", "__main__", "frontends/serve", "drivers/mock"):
        source = version / "agentproto" / f"{module}.py"
        compiled = source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
        assert compiled.is_file(), compiled
    manifest = json.loads((lib / "install-manifest.json").read_text())
    listed = {*manifest["versions"][0]["files"], manifest["launcher"]["path"]}
    on_disk = {str(p) for p in (installed / ".local").rglob("*") if p.is_file() and p.name != "install-manifest.json"}
    assert listed == on_disk


def test_install_warns_when_the_bin_directory_is_not_on_path(tmp_path: Path) -> None:
    done = install(tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{tmp_path}/.local/bin is not on your PATH" in done.stderr
    quiet = install(tmp_path, path=f"{tmp_path}/.local/bin:/usr/bin:/bin")
    assert quiet.returncode == 0 and "not on your PATH" not in quiet.stderr, quiet.stderr


def test_the_launcher_runs_every_entry_point_from_any_directory(installed: Path) -> None:
    """--version (the stamp), schema, --single-shot, MCP tools, a serve session; by name via PATH."""
    cwd, env = elsewhere(installed)
    stamp = next(p.name for p in (installed / ".local" / "lib" / "agentproto").iterdir() if p.is_dir())
    check_entry_point(["agentproto"], cwd, version=stamp, PATH=env["PATH"], HOME=str(installed))


def test_agentproto_mcp_answers_initialize_from_an_install(installed: Path) -> None:
    cwd, env = elsewhere(installed)
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
    done = subprocess.run(["agentproto", "mcp"], input=json.dumps(hello) + "\n", capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    [reply] = [json.loads(line) for line in done.stdout.splitlines()]
    assert reply["id"] == 1 and reply["result"]["serverInfo"]["name"] == "agentproto"


def test_mock_names_and_usage_hints_from_an_install(installed: Path) -> None:
    cwd, env = elsewhere(installed)
    played = subprocess.run(["agentproto", "chat", "--mock", "turn"], input="go", capture_output=True, text=True,
                            env=env, cwd=cwd, timeout=60)  # fmt: skip
    assert played.returncode == 0 and "Done." in played.stdout, played
    typo = subprocess.run(["agentproto", "lst"], capture_output=True, text=True, env=env, cwd=cwd, timeout=60)
    assert (typo.returncode, typo.stderr) == (
        2, "agentproto: unknown command 'lst'. Did you mean 'list'? (see `agentproto --help`)\n"
    )  # fmt: skip


def test_prefix_installs_there_and_uninstall_removes_exactly_what_it_wrote(tmp_path: Path) -> None:
    prefix = tmp_path / "opt"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "mine").write_text("#!/bin/sh\n")  # the user's: must survive
    (prefix / "lib" / "other").mkdir(parents=True)
    before = tree(tmp_path)
    done = install(tmp_path, "--prefix", str(prefix))
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / ".local").exists()
    version = subprocess.run([str(prefix / "bin" / "agentproto"), "--version"], capture_output=True, text=True,
                             env=clean_env(HOME=str(tmp_path)), cwd=tmp_path, timeout=60)  # fmt: skip
    assert STAMP.fullmatch(version.stdout.strip().removeprefix("agentproto ")), version
    # An update of the same version: replaced, and nothing else left behind.
    again = install(tmp_path, "--prefix", str(prefix))
    assert again.returncode == 0, again.stderr
    gone = install(tmp_path, "--prefix", str(prefix), "--uninstall")
    assert gone.returncode == 0, gone.stderr
    assert tree(tmp_path) == before
    # And what it created itself goes too, once empty.
    fresh = tmp_path / "fresh"
    assert install(tmp_path, "--prefix", str(fresh)).returncode == 0
    assert install(tmp_path, "--prefix", str(fresh), "--uninstall").returncode == 0
    assert not fresh.exists()


def test_install_refuses_to_overwrite_what_it_did_not_write(tmp_path: Path) -> None:
    bin_dir = tmp_path / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "agentproto").write_text("#!/bin/sh\necho the user's own\n")
    before = tree(tmp_path)
    done = install(tmp_path)
    assert done.returncode == 1
    assert done.stderr == f"install.py: {bin_dir}/agentproto exists and was not written by scripts/install.py: not touching it\n"
    assert tree(tmp_path) == before
    nothing = install(tmp_path, "--uninstall")
    assert nothing.returncode == 1 and "nothing to uninstall" in nothing.stderr
    assert tree(tmp_path) == before


def test_a_launcher_changed_since_the_install_is_kept(tmp_path: Path) -> None:
    assert install(tmp_path).returncode == 0
    launcher = tmp_path / ".local" / "bin" / "agentproto"
    launcher.write_text(launcher.read_text() + "# edited by hand\n")
    refused = install(tmp_path)
    assert refused.returncode == 1 and "changed since scripts/install.py wrote it" in refused.stderr
    done = install(tmp_path, "--uninstall")
    assert done.returncode == 0 and f"kept {launcher}" in done.stderr
    assert launcher.read_text().endswith("# edited by hand\n")
    assert not (tmp_path / ".local" / "lib").exists()


def test_an_upgrade_keeps_the_version_before_it_and_no_older(tmp_path: Path) -> None:
    """A sidecar started before an upgrade still imports lazily from its version's directory:
    that one stays, the one before it goes."""
    assert install(tmp_path).returncode == 0
    lib = tmp_path / ".local" / "lib" / "agentproto"
    manifest = json.loads((lib / "install-manifest.json").read_text())
    [current] = manifest["versions"]
    # Two earlier versions, as install.py would have written them (their directories ours).
    older = []
    for name in ("0.0.1", "0.0.2"):
        (lib / name / "agentproto").mkdir(parents=True)
        (lib / name / "agentproto" / "__init__.py").write_text("")
        older.append({"version": name, "dir": str(lib / name), "files": [str(lib / name / "agentproto" / "__init__.py")],
                      "dirs": [str(lib / name / "agentproto")]})  # fmt: skip
    manifest["versions"] = [*older, current]
    (lib / "install-manifest.json").write_text(json.dumps(manifest))
    assert install(tmp_path).returncode == 0
    assert sorted(p.name for p in lib.iterdir()) == sorted([current["version"], "install-manifest.json", "0.0.2"])


def test_the_launcher_runs_isolated_from_the_environment_and_the_directory(installed: Path, tmp_path: Path) -> None:
    """An MCP host's environment or a project directory cannot put modules of its own in
    front of agentproto's or the stdlib's: the launcher's -I -S ignores PYTHONPATH,
    PYTHONSTARTUP, sitecustomize and the current directory."""
    marker = tmp_path / "hijacked"
    planted = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    for where in (tmp_path / "cwd", tmp_path / "path"):
        (where / "agentproto").mkdir(parents=True)
        (where / "agentproto" / "__init__.py").write_text(planted)
        (where / "json.py").write_text(planted)
        (where / "sitecustomize.py").write_text(planted)
    (tmp_path / "startup.py").write_text(planted)
    _, env = elsewhere(installed)
    env.update(PYTHONPATH=str(tmp_path / "path"), PYTHONSTARTUP=str(tmp_path / "startup.py"))
    for args, stdin in ((["--version"], ""), (["--single-shot"], '{"op": "capabilities"}')):
        done = subprocess.run(["agentproto", *args], input=stdin, capture_output=True, text=True, env=env,
                              cwd=tmp_path / "cwd", timeout=60)  # fmt: skip
        assert done.returncode == 0 and done.stderr == "", done
    assert not marker.exists(), marker.read_text()


# -- every example of every --help, from the install --------------------------------------------

#: Examples that cannot run here, with the reason; every other example runs (and must).
NOT_RUN = {
    "agentproto chat claude": "a signed-in Claude Code, interactive",
    "echo 'title for this diff' | agentproto chat codex > title.txt": "a signed-in Codex",
    "agentproto chat '{\"acp\": {\"name\": \"mine\", \"path\": \"/opt/mine\", \"args\": []}}'": "a placeholder agent",
    "npx json-schema-to-typescript -i agentproto.schema.json -o agentproto.d.ts": "the npm registry",
    "AGENTPROTO_TOOLS_URL=http://127.0.0.1:PORT/TOKEN/mcp/agentproto agentproto mcp-bridge": "a live session's URL",
    "claude mcp add agentproto -- ~/.local/bin/agentproto mcp": "tests/test_install_mcp_hosts.py runs it with the "
                                                               "pinned claude",
    "agentproto inspect --sock /tmp/ap.ctl": "run while the `serve --control /tmp/ap.ctl &` example serves",
    "agentproto inspect --session s1": "a live sidecar holding s1 (tests/frontends/test_inspect_sidecars.py)",
    "agentproto probe claude": "an installed Claude Code (tests/commands/test_list_real.py probes the pinned one)",
    "agentproto probe codex --json | jq .auth": "an installed Codex, and jq",
    "agentproto probe '{\"acp\": {\"name\": \"mine\", \"path\": \"/opt/mine\", \"args\": []}}'": "a placeholder agent",
}
#: What an example meant for a terminal is given on stdin (every other one gets none).
STDIN = {"agentproto chat --mock question": "yes\n"}
#: Examples that serve until stopped: started, checked to listen, then ended.
SERVERS = {
    "agentproto serve --transport unix --listen /tmp/agentproto.sock": "unix",
    "AGENTPROTO_AUTH_TOKEN=$(openssl rand -hex 16) agentproto serve --transport http --port 8080": "http",
    "agentproto serve --control /tmp/ap.ctl &": "control",
}


def help_examples(env: dict[str, str], cwd: Path) -> list[str]:
    """Every example line of the top-level help and each command's, comments dropped."""
    def examples(*args: str) -> tuple[str, list[str]]:
        text = subprocess.run(["agentproto", *args, "--help"], capture_output=True, text=True, env=env, cwd=cwd,
                              timeout=60).stdout  # fmt: skip
        block = text.split("\nexamples:\n", 1)[1].split("\n\n", 1)[0]
        return text, [line.strip().split("   #")[0].split("  # ")[0].strip() for line in block.splitlines()]

    top, found = examples()
    commands = re.findall(r"^  (\S+)\s{2,}", top.split("\ncommands:\n", 1)[1].split("\n\n", 1)[0], re.M)
    for command in commands:
        found += examples(command)[1]
    return list(dict.fromkeys(found))


def test_every_help_example_runs_from_an_install(installed: Path) -> None:
    cwd, env = elsewhere(installed)
    env["AGENTPROTO_DB"] = str(installed / "observations.db")
    found = help_examples(env, cwd)
    assert set(NOT_RUN) <= set(found) and set(SERVERS) <= set(found), "an entry names no example"
    assert not [line for line in found if "python3 -m agentproto" in line or "fixtures/" in line]
    # What the examples read: a protocol-1 session for `serve --record … < commands.ndjson`.
    (cwd / "commands.ndjson").write_text(
        '{"id": 1, "cmd": "open", "agent": "mock", "dir": "."}\n'
        '{"id": 2, "cmd": "prompt", "session": "s1", "text": "hi there"}\n'
    )
    (installed / ".zfunc").mkdir(exist_ok=True)
    # What `replay recordings/*.ndjson` replays: two recordings of the mock (a glob in CI).
    (cwd / "recordings").mkdir(exist_ok=True)
    for name in ("mock-serve.ndjson", "mock-ops.ndjson"):
        shutil.copy(ROOT / "fixtures" / "recordings" / name, cwd / "recordings" / name)
    ran = []
    for line in found:
        if line in NOT_RUN:
            continue
        local = line.replace("/tmp/", f"{cwd}/").replace("--port 8080", f"--port {_free_port()}")
        if line in SERVERS:
            _run_server(local, SERVERS[line], env, cwd)
        else:
            done = subprocess.run(["bash", "-c", local], input=STDIN.get(line, ""), capture_output=True, text=True,
                                  env=env, cwd=cwd, timeout=60)  # fmt: skip
            assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
        ran.append(line)
    assert len(ran) >= 20, ran
    assert json.loads((cwd / "agentproto.schema.json").read_text())["$schema"]
    assert (installed / ".zfunc" / "_agentproto").read_text().startswith("#compdef agentproto")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_server(line: str, kind: str, env: dict[str, str], cwd: Path) -> None:
    """Start a serving example (its stdin kept open), see it serve, end it with SIGTERM."""
    command = line.removesuffix("&").strip()
    proc = subprocess.Popen(["bash", "-c", command],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            if kind == "unix" and (cwd / "agentproto.sock").exists():
                break
            if kind == "control" and (cwd / "ap.ctl").exists():
                looked = subprocess.run(["agentproto", "inspect", "--sock", str(cwd / "ap.ctl"), "--format", "json"],
                                        capture_output=True, text=True, env=env, cwd=cwd, timeout=60)  # fmt: skip
                assert looked.returncode == 0, looked.stderr
                break
            if kind == "http":
                port = int(line.rsplit(" ", 1)[1])
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    pass
            time.sleep(0.05)
        else:
            raise AssertionError(f"{line}: did not start serving")
    finally:
        os.killpg(proc.pid, 15)
        proc.communicate(timeout=30)


def test_python_3_9_installs_nothing(tmp_path: Path) -> None:
    """The launcher would run the interpreter that installed: an old one is refused, in words."""
    from tests.test_packaging import python39

    py = python39()
    done = subprocess.run([py, INSTALL], capture_output=True, text=True, env=clean_env(HOME=str(tmp_path)),
                          cwd=tmp_path, timeout=60)  # fmt: skip
    version = subprocess.run([py, "-c", "import platform; print(platform.python_version())"], capture_output=True,
                             text=True).stdout.strip()  # fmt: skip
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"install.py: agentproto needs Python 3.10 or newer (this is {version}): run it with a newer python3\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_base_interpreter_is_what_installs(installed: Path) -> None:
    """What makes the runs above mean something: the launcher's interpreter has no
    agentproto of its own, and no venv."""
    done = subprocess.run([BASE_PYTHON, "-I", "-c", "import agentproto"], capture_output=True, text=True,
                          env=clean_env(HOME=str(installed)), cwd=installed, timeout=60)  # fmt: skip
    assert done.returncode == 1 and ".venv" not in BASE_PYTHON and sys.prefix != sys.base_prefix
    assert shutil.which("agentproto", path="/usr/bin:/bin") is None
