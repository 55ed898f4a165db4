"""Every fenced block of README.md and docs/*.md runs in a test, or is marked as one that
cannot run here and is checked as far as it can be.

A block carries one marker, an HTML comment on the line right before its fence:

- ``<!-- cookbook: NAME -->``: a test takes the block by NAME (``recipe`` of
  tests/test_cookbook.py) and runs it, or checks it against the real thing (a transcript,
  the command line's synopsis). This file runs the docs' small examples and copy-paste
  sessions; tests/test_cookbook*.py and tests/test_readme.py run the others.
- ``<!-- not-run: REASON -->``: it cannot run here (a container image, a cluster, a real
  signed-in agent, the whole suite). ``NOT_RUN`` lists every such block, so that a new one
  is reviewed, each with the check made of it here: parsed, its commands run locally
  where they can be (a Dockerfile's CMD against the zipapp, a Pod's readiness probe, an
  agent's command with ``--help``).

The links of the same documents are checked by tests/test_docs.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
from sidecar import ROOT, Sidecar, base_env

from agentproto.cli import build_parser
from tests.test_cookbook import python_path_env, recipe

DOCUMENTS = ("README.md", *(f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md"))))


class Block:
    def __init__(self, doc: str, line: int, marker: str, text: str) -> None:
        self.doc, self.line, self.marker, self.text = doc, line, marker, text
        #: Its first line, without a trailing comment, at most 50 characters: its key in CHECKS.
        self.first = (text.splitlines()[0] if text else "").split("  #")[0].rstrip()[:50]

    def __repr__(self) -> str:
        return f"{self.doc}:{self.line} ({self.first[:60]!r})"


def blocks(doc: str) -> list[Block]:
    """The fenced blocks of ``doc``, each with the marker on the line before its fence."""
    lines = (ROOT / doc).read_text(encoding="utf-8").split("\n")
    found, start = [], None
    for i, line in enumerate(lines):
        if line.startswith("```"):
            if start is None:
                start = i
            else:
                before = lines[start - 1] if start else ""
                found.append(Block(doc, start + 1, before, "\n".join(lines[start + 1 : i]) + "\n"))
                start = None
    assert start is None, f"{doc}: a fence opened at line {start + 1 if start is not None else 0} is never closed"
    return found


ALL = [block for doc in DOCUMENTS for block in blocks(doc)]
COOKBOOK = re.compile(r"<!-- cookbook: (\S+) -->")
NOT_RUN = re.compile(r"<!-- not-run: (.+) -->")


def test_every_block_is_run_or_marked() -> None:
    unmarked = [b for b in ALL if not COOKBOOK.fullmatch(b.marker) and not NOT_RUN.fullmatch(b.marker)]
    assert not unmarked, f"blocks neither run by a test (cookbook: NAME) nor marked not-run: {unmarked}"


def test_every_cookbook_block_is_taken_by_a_test() -> None:
    tests = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").glob("test_*.py"))
    names = [COOKBOOK.fullmatch(b.marker)[1] for b in ALL if COOKBOOK.fullmatch(b.marker)]  # type: ignore[index]
    assert len(names) == len(set(names)), "a cookbook name is used twice"
    untaken = [name for name in names if f'"{name}"' not in tests]
    assert not untaken, f"cookbook blocks no test takes by name: {untaken}"


# -- the blocks that cannot run here, and what is checked of each --------------------------


def agentproto_on_path(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has ``python3`` (this checkout importable) and the
    ``agentproto`` launcher the install script writes (``--prefix tmp_path``), HOME and XDG
    dirs in ``tmp_path``."""
    env = python_path_env(tmp_path)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "install.py"), "--prefix", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0 and (tmp_path / "bin" / "agentproto").is_file(), done.stderr
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env["HOME"] = str(home)
    for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        env[name] = str(home / name.lower())
    return env


def run(command: str | list[str], tmp_path: Path, env: dict[str, str], cwd: str | None = None,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``command`` (a shell block, or argv) in its own process group, which is killed
    whole if it is still there after 60 s (a block's background server included)."""
    argv = ["bash", "-e", "-o", "pipefail", "-c", command] if isinstance(command, str) else command
    proc = subprocess.Popen(argv, cwd=cwd or str(tmp_path), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(input or "", timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"still running after 60 s: {command!r}; stderr: {err[-2000:]}") from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def install_script_runs(tmp_path: Path, env: dict[str, str]) -> None:
    """The install script's help runs (agentproto_on_path installed with it; tests/test_install.py
    runs it into ~/.local of a temp HOME)."""
    done = run([sys.executable, str(ROOT / "scripts" / "install.py"), "--help"], tmp_path, env)
    assert done.returncode == 0 and "--prefix" in done.stdout and "--uninstall" in done.stdout, done.stderr


def check_first_commands(block: Block, tmp_path: Path) -> None:
    chat, suite = block.text.splitlines()
    done = run(chat.split("#")[0], tmp_path, python_path_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello from agentproto\n"  # the mock answers with the prompt
    assert suite.split("#")[0].strip() == "bash scripts/test"
    assert run(["bash", "-n", str(ROOT / "scripts" / "test")], tmp_path, base_env()).returncode == 0


def check_real_agent(block: Block, tmp_path: Path) -> None:
    env = agentproto_on_path(tmp_path)
    install, listing, chat = (line.split("#")[0].strip() for line in block.text.splitlines())
    assert install == "python3 scripts/install.py"
    install_script_runs(tmp_path, env)
    done = run(listing, tmp_path, env)
    assert done.returncode == 0 and done.stdout.splitlines()[1].split()[:2] == ["mock", "built-in"], done.stdout
    done = run(chat + " --help", tmp_path, env)  # a real, signed-in Claude Code is not here
    assert done.returncode == 0 and "usage: agentproto chat" in done.stdout, done.stderr


def check_install(block: Block, tmp_path: Path) -> None:
    assert all(line.startswith("python3 scripts/install.py") for line in block.text.splitlines())
    install_script_runs(tmp_path, agentproto_on_path(tmp_path))


def check_diagram(block: Block, tmp_path: Path) -> None:
    assert "agentproto serve" in block.text  # a picture: nothing to run


def check_suite_commands(block: Block, tmp_path: Path) -> None:
    for script in ("scripts/test", ".ci/run"):
        assert script in block.text
        assert run(["bash", "-n", str(ROOT / script)], tmp_path, base_env()).returncode == 0, script


def check_transports_overview(block: Block, tmp_path: Path) -> None:
    parser = build_parser()
    for line in block.text.splitlines():
        argv = shlex.split(line.split("|")[-1].split("#")[0])
        assert argv[:3] == ["python3", "-m", "agentproto"], line
        parser.parse_args(argv[3:])  # a usage error exits 2: SystemExit fails the test


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dockerfile_cmd(tmp_path: Path) -> tuple[list[str], str]:
    """The Dockerfile's CMD as argv, the zipapp built into ``tmp_path`` where the image
    copies it, on a free port; and that port's address."""
    text = recipe_of_many_machines("dockerfile")
    [cmd] = [json.loads(line[len("CMD "):]) for line in text.splitlines() if line.startswith("CMD ")]
    pyz = tmp_path / "agentproto.pyz"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "build_pyz.py"), "-o", str(pyz)], check=True,
                   capture_output=True, timeout=60)
    port = free_port()
    argv = [sys.executable if word == "python3" else str(pyz) if word == "/opt/agentproto.pyz" else word
            for word in cmd]
    argv = [word.replace(":8080", f":{port}") for word in argv]
    return argv, f"127.0.0.1:{port}"


def recipe_of_many_machines(lang: str) -> str:
    first = {"dockerfile": "FROM ", "yaml": "apiVersion: "}[lang]
    [text] = [b.text for b in blocks("docs/many-machines.md") if b.first.startswith(first)]
    return text


class PodSidecar:
    """The image's CMD run here, with the Secret's token in its environment."""

    def __init__(self, tmp_path: Path, token: str) -> None:
        argv, self.address = dockerfile_cmd(tmp_path)
        env = base_env()
        env["AGENTPROTO_AUTH_TOKEN"] = token
        self.proc = subprocess.Popen(argv, cwd=str(tmp_path), env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        banner = self.proc.stderr.readline()
        assert "listening on http://0.0.0.0:" in banner, banner

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)  # as Kubernetes stops a pod
        return self.proc.wait(15)


def check_dockerfile(block: Block, tmp_path: Path) -> None:
    known = {"FROM", "RUN", "COPY", "USER", "WORKDIR", "EXPOSE", "CMD", "ENV"}
    logical = block.text.replace("\\\n", " ").splitlines()
    assert {line.split()[0] for line in logical if line.strip()} <= known
    for line in logical:
        if line.startswith("RUN "):  # they install from the network: parsed, not run
            assert run(["bash", "-n", "-c", line[4:]], tmp_path, base_env()).returncode == 0, line
    assert "COPY dist/agentproto.pyz /opt/agentproto.pyz" in logical  # where build_pyz.py writes it
    # The image installs the agents at the versions the tests pin.
    pins = json.loads((ROOT / "tests" / "agents" / "package.json").read_text())["dependencies"]
    for package in ("@anthropic-ai/claude-code", "@openai/codex"):
        assert f"{package}@{pins[package]}" in block.text, (package, pins[package])
    token = "a-token-from-the-secret-0123456789"
    sidecar = PodSidecar(tmp_path, token)
    try:
        import urllib.request

        request = urllib.request.Request(f"http://{sidecar.address}/v1/agent/version",
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert json.loads(answer.read())["contract"] == "agentproto/1"
    finally:
        assert sidecar.stop() == 0


def check_pod(block: Block, tmp_path: Path) -> None:
    import yaml

    pod = yaml.safe_load(block.text)
    assert pod["kind"] == "Pod" and pod["apiVersion"] == "v1"
    [container] = pod["spec"]["containers"]
    env = {entry["name"]: entry for entry in container["env"]}
    assert env["AGENTPROTO_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "token"  # from a Secret
    assert "value" not in env["AGENTPROTO_AUTH_TOKEN"]
    assert container["ports"] == [{"containerPort": 8080}]
    probe = container["readinessProbe"]["exec"]["command"]
    token = "a-token-from-the-secret-0123456789"
    sidecar = PodSidecar(tmp_path, token)
    try:
        command = [sys.executable if word == "python3" else word.replace("127.0.0.1:8080", sidecar.address)
                   for word in probe]
        for given, ready in ((token, True), ("not-the-token-0123456789", False)):
            probe_env = {**base_env(), "AGENTPROTO_AUTH_TOKEN": given}
            done = run(command, tmp_path, probe_env)
            assert (done.returncode == 0) is ready, done.stderr  # a wrong token: not ready (401)
    finally:
        assert sidecar.stop() == 0


def check_cost_merge(block: Block, tmp_path: Path) -> None:
    """The command on two databases, each written by a serve run of the echo mock (the
    pods' sidecars): both files' turns, one group per file."""
    argv = shlex.split(block.text)
    assert argv[:2] == ["agentproto", "inspect"] and argv.count("--db") == 2
    for name in ("pod-0.db", "pod-1.db"):
        with Sidecar(["--db", str(tmp_path / name)]) as sc:
            session = sc.open(dir=str(tmp_path))
            sc.ok({"cmd": "prompt", "session": session, "text": "hello"})
            sc.events(session, until="TurnEnded")
            assert sc.close() == 0
    done = run([sys.executable, "-m", "agentproto", *argv[1:], "--format", "json"], tmp_path, base_env())
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert view["total"]["turns"] == 2 and sorted(g["key"] for g in view["groups"]) == ["pod-0.db", "pod-1.db"]


def check_ts_pack(block: Block, tmp_path: Path) -> None:
    # tests/test_ts_client.py packs into a temp dir and installs offline; here: the commands
    # are those, and the tarball the page names is the one npm pack writes (agentproto's version).
    from agentproto import __version__

    assert block.text.splitlines()[0].split("  #")[0].split() == ["cd", "clients/typescript", "&&", "npm", "pack"]
    assert "npm install /path/to/agentproto-VERSION.tgz" in block.text
    package = json.loads((ROOT / "clients" / "typescript" / "package.json").read_text())
    assert (package["name"], package["version"]) == ("agentproto", __version__)


def check_console_commands(block: Block, tmp_path: Path) -> None:
    """Each command, on a free port, prints the URL with its one-time secret; then it is stopped."""
    for line in block.text.splitlines():
        argv = shlex.split(line.split("#")[0])
        if "--port" in argv:
            argv[argv.index("--port") + 1] = str(free_port())
        assert argv[:4] == ["python3", "-m", "agentproto", "console"], line
        proc = subprocess.Popen([sys.executable, *argv[1:], "--db", "off"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=base_env(), cwd=str(ROOT))  # fmt: skip
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline()
            assert re.fullmatch(r"agentproto console: open http://127\.0\.0\.1:\d+/#secret=[\w-]+\n", url), url
        finally:
            proc.terminate()
            proc.communicate(timeout=30)


#: Every block marked <!-- not-run -->, by its document and first line, with its check.
CHECKS: dict[tuple[str, str], Callable[[Block, Path], None]] = {
    ("README.md", "echo 'hello from agentproto' | python3 -m agentpro"): check_first_commands,
    ("README.md", "python3 scripts/install.py"): check_real_agent,
    ("README.md", "your app ──stdin──►  agentproto serve  ──► engine "): check_diagram,
    ("README.md", "python3 scripts/install.py [--prefix DIR]"): check_install,
    ("docs/install.md", "python3 scripts/install.py [--prefix DIR]"): check_install,
    ("docs/many-machines.md", "FROM node:22-slim"): check_dockerfile,
    ("docs/many-machines.md", "apiVersion: v1"): check_pod,
    ("docs/many-machines.md", "agentproto inspect --view cost --since 7d --db pod"): check_cost_merge,
    ("docs/testing.md", "bash scripts/test"): check_suite_commands,
    ("docs/typescript.md", "cd clients/typescript && npm pack"): check_ts_pack,
    ("docs/transports.md", "python3 -m agentproto agent"): check_transports_overview,
    ("docs/console.md", "python3 -m agentproto console"): check_console_commands,
}
MARKED = [b for b in ALL if NOT_RUN.fullmatch(b.marker)]


def test_the_marked_blocks_are_the_reviewed_ones() -> None:
    found = {(b.doc, b.first) for b in MARKED}
    assert found == set(CHECKS), f"new: {found - set(CHECKS)}; gone: {set(CHECKS) - found}"


@pytest.mark.parametrize("block", MARKED, ids=repr)
def test_a_marked_block_is_checked_as_far_as_it_can_be(block: Block, tmp_path: Path) -> None:
    CHECKS[(block.doc, block.first)](block, tmp_path)


# -- the docs' examples and copy-paste sessions, run as written ---------------------------


def shown_output(block: str) -> list[str]:
    """What a block says it prints: its ``# `` lines after the last command."""
    lines = block.splitlines()
    tail = []
    for line in reversed(lines):
        if not line.startswith("# "):
            break
        tail.append(line[2:])
    return tail[::-1]


@pytest.mark.parametrize("name", ["ops-loop", "jsonrpc", "http", "unix", "mcp-http"])
def test_the_transport_sessions_print_what_they_say(name: str, tmp_path: Path) -> None:
    block = recipe(name)
    if name in ("http", "mcp-http"):
        port = str(free_port())  # the port as written may be taken here
        block = block.replace("8080", port).replace("8090", port)
    env = python_path_env(tmp_path)
    env.pop("AGENTPROTO_AUTH_TOKEN", None)
    done = run(block, tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == shown_output(recipe(name)) != []


def test_the_acp_open_line_is_a_valid_open() -> None:
    with Sidecar([]) as sc:
        sc.write_raw(recipe("acp-open").encode())
        error = sc.reply(1)["error"]
    # Nothing at /opt/my-agent here: the agent is missing, the line itself is right.
    assert error["kind"] == "NotInstalled" and error["message"].endswith("no executable at /opt/my-agent"), error


def test_the_open_with_tools_gives_the_session_its_tools_url() -> None:
    with Sidecar([]) as sc:
        sc.write_raw(recipe("open-tools").replace("\n  ", " ").encode())
        info = sc.reply(1)["ok"]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/[\w-]+/mcp/agentproto", info["tools_url"]), info["tools_url"]


def test_the_hello_is_what_serve_writes() -> None:
    with Sidecar([]) as sc:
        assert sc.hello == json.loads(recipe("hello"))


def test_discover_with_a_mock_script_runs_from_the_checkout(tmp_path: Path) -> None:
    done = run(recipe("mock-discover"), tmp_path, python_path_env(tmp_path), cwd=str(ROOT))
    assert done.returncode == 0, done.stderr
    [reply] = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"id"')]
    assert [agent["id"] for agent in reply["ok"]["agents"]] == ["mock"], reply  # with --mock, the mock alone


def commands_of(block: str) -> list[str]:
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def test_record_then_replay_as_the_page_says(tmp_path: Path) -> None:
    record, replay, update = commands_of(recipe("record"))
    env = python_path_env(tmp_path)
    session = '{"id":1,"cmd":"open","agent":"mock","dir":"."}\n{"id":2,"cmd":"prompt","session":"s1","text":"hi"}\n'
    done = run(record, tmp_path, env, input=session)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "session.ndjson").stat().st_size > 0
    for command in (replay, update, replay):
        done = run(command, tmp_path, env)
        assert done.returncode == 0, (command, done.stderr)


def test_inspect_a_running_sidecar_and_the_cost_as_the_page_says(tmp_path: Path) -> None:
    serve, ask, cost = (c.replace("/tmp/ap.ctl", str(tmp_path / "ap.ctl")) for c in commands_of(recipe("inspect")))
    env = agentproto_on_path(tmp_path)
    server = subprocess.Popen(shlex.split(serve), cwd=str(tmp_path), env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert server.stdin is not None and server.stdout is not None
        server.stdout.readline()  # the hello: the control socket is open
        server.stdin.write(b'{"id":1,"cmd":"open","agent":"mock","dir":"."}\n')
        server.stdin.flush()
        server.stdout.readline()
        done = run(shlex.split(ask), tmp_path, env)
        assert done.returncode == 0 and "s1" in done.stdout and "mock" in done.stdout, done.stdout + done.stderr
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        assert server.wait(15) == 0
    done = run(shlex.split(cost), tmp_path, env)
    assert done.returncode == 0, done.stderr


def test_the_zipapp_size_the_install_page_gives_is_right(tmp_path: Path) -> None:
    said = re.search(r"about (\d+) KiB, stdlib `zipapp`", (ROOT / "docs" / "install.md").read_text(encoding="utf-8"))
    assert said is not None
    pyz = tmp_path / "agentproto.pyz"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "build_pyz.py"), "-o", str(pyz)], check=True,
                   capture_output=True, timeout=60)
    size = pyz.stat().st_size / 1024
    assert abs(size - int(said[1])) <= 0.15 * size, f"the zipapp is {size:.0f} KiB; the page says {said[1]}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def test_list_and_probe_as_the_page_says(tmp_path: Path) -> None:
    listing, versions, probe = commands_of(recipe("list"))
    env = agentproto_on_path(tmp_path)
    env["PATH"] = f"{tmp_path / 'bin'}:/usr/bin:/bin"  # no agent CLI: the mock alone is installed
    done = run(listing, tmp_path, env)
    assert done.returncode == 0 and done.stdout.splitlines()[2].strip() == "login: logged in (API key)", done
    assert done.stdout.splitlines()[-1].startswith("not installed: claude, codex")
    done = run(versions, tmp_path, env)
    assert done.returncode == 0 and "login:" not in done.stdout and "npm install -g @openai/codex" in done.stdout
    done = run(probe, tmp_path, env)
    assert done.returncode == 0 and done.stdout.startswith("agent         mock\n"), done


def test_replay_several_recordings_as_the_page_says(tmp_path: Path) -> None:
    [command] = commands_of(recipe("replay-several"))
    (tmp_path / "recordings").mkdir()
    for path in sorted((ROOT / "fixtures" / "recordings").glob("*.ndjson"))[:2]:
        (tmp_path / "recordings" / path.name).write_bytes(path.read_bytes())
    env = python_path_env(tmp_path)
    done = run(command, tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == "agentproto: 2 recordings: 2 ok", done.stderr
    (tmp_path / "recordings" / "bad.ndjson").write_text("not a record\n")
    done = run(command, tmp_path, env)
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == "agentproto: 3 recordings: 2 ok, 1 invalid"


def test_inspect_every_sidecar_as_the_page_says(tmp_path: Path) -> None:
    every, one = commands_of(recipe("inspect-every-sidecar"))
    env = agentproto_on_path(tmp_path)
    env["AGENTPROTO_CONTROL_DIR"] = str(tmp_path / "ctl")
    servers = [subprocess.Popen(["agentproto", "serve", "--db", "off"], cwd=str(tmp_path), env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
               for _ in range(2)]  # fmt: skip
    try:
        first = servers[0]
        assert first.stdin is not None and first.stdout is not None
        first.stdout.readline()  # the hello
        first.stdin.write(b'{"id":1,"cmd":"open","agent":"mock","dir":"."}\n')
        first.stdin.flush()
        first.stdout.readline()  # the open's reply: its control socket has been open since the hello
        for server in servers[1:]:
            assert server.stdout is not None
            server.stdout.readline()
        for server in servers:  # opened just after the hello: waited for (a hang guard)
            deadline = time.monotonic() + 30
            while not (tmp_path / "ctl" / f"{server.pid}.sock").exists():
                assert time.monotonic() < deadline
                time.sleep(0.02)
        done = run(every, tmp_path, env)
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)  # not a terminal: JSON, as --format json
        assert [view["pid"] for view in found["sidecars"]] == sorted(server.pid for server in servers), found
        table = run(every + " --format table", tmp_path, env).stdout
        heads = [line.split()[2] for line in table.splitlines() if line.startswith("sidecar pid ")]
        assert heads == [str(pid) for pid in sorted(server.pid for server in servers)], table
        done = run(one, tmp_path, env)
        assert done.returncode == 0 and "s1" in done.stdout and "mock" in done.stdout, done.stdout + done.stderr
    finally:
        for server in servers:
            server.stdin.close()  # type: ignore[union-attr]
            assert server.wait(15) == 0
def test_the_agents_json_example_is_valid() -> None:
    """docs/agents.md's agents.json parses with no problem (agents_file.py's checks)."""
    from agentproto.drivers import agents_file

    loaded = agents_file.parse(json.loads(recipe("agents-json")), "agents.json", ["mock", "claude"])
    assert loaded.problems == ()
    assert [(a.id, a.command, a.args) for a in loaded.agents] == [
        ("mine", "my-agent", ("--acp",)),
        ("hermes", os.path.expanduser("~/.local/bin/hermes"), ("acp",)),
    ]
