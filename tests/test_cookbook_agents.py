"""The recipes that need more than Python: the Node apps (the README's quickstart and the
cookbook's longer one, node), and the README's MCP host quickstart, registering ``serve
--transport mcp`` in the real pinned Claude Code and Codex, each run against its fake model
API (tests/fakes/fake_anthropic.py, tests/fakes/fake_openai.py), whose model calls
``agentproto_generate`` with the mock agent: the delegated answer must come back to the
model as the tool's result. The commands are the README's, as written: ``claude``, ``codex``
and ``python3`` are found on PATH (the pinned CLIs, and the suite's interpreter with this
checkout on PYTHONPATH, as an installed agentproto would be), and the absolute
``~/.local/bin/agentproto`` is a launcher in the test's HOME that runs this checkout, as the
install script's would."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import fake_openai as fo
import pytest
from fake_anthropic import FakeAnthropic, claude_bin, processes_with_env, text, tool_search, tool_use
from sidecar import ROOT, base_env
from tests.test_cookbook import recipe


def tools_path(tmp_path: Path, **tools: str) -> str:
    """A PATH whose first directory has ``python3`` (agentproto importable from any
    directory: a host starts its MCP servers with an environment of its own) and ``tools``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(ROOT))} exec {sys.executable} "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    for name, target in tools.items():
        (bin_dir / name).symlink_to(target)
    return f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"


@pytest.mark.parametrize("name,printed", [("app.mjs", "the agent said: hello from Node (Completed)\n"),
                                          ("quick.mjs", "hello from Node\n")])
def test_the_node_app_speaks_protocol_1(tmp_path: Path, name: str, printed: str) -> None:
    node = shutil.which("node")
    assert node, "node is needed for this test (see docs/testing.md)"
    app = tmp_path / "app.mjs"
    app.write_text(recipe(name))
    env = base_env()
    env["PATH"] = tools_path(tmp_path)
    done = subprocess.run([node, str(app)], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == printed
    assert "require(" not in recipe(name) and 'from "node:' in recipe(name)  # no package


def installed_launcher(home: str) -> None:
    """``~/.local/bin/agentproto`` in ``home``: this checkout's agentproto, installed by
    scripts/install.py as the README says."""
    env = {**base_env(), "HOME": home}
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "install.py")], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0 and (Path(home) / ".local" / "bin" / "agentproto").is_file(), done.stderr


def commands(tool: str, home: str) -> list[list[str]]:
    """The MCP quickstart's commands that start with ``tool``, each as argv, ``~/`` expanded
    to ``home`` as the shell does."""
    joined = recipe("mcp").replace("\\\n", " ")
    return [[home + word[1:] if word.startswith("~/") else word for word in shlex.split(line)]
            for line in joined.splitlines() if line.startswith(tool + " ")]


def test_the_mcp_commands_are_absolute() -> None:
    # A host starts its MCP servers from a directory of its own: `python3 -m agentproto`
    # resolves only inside a checkout, so the registered command is an absolute path.
    for tool in ("claude", "codex"):
        add = commands(tool, "/home/someone")[0]
        server = add[add.index("--") + 1:]
        assert server == ["/home/someone/.local/bin/agentproto", "mcp"], server


def delegated(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True, timeout=30)  # codex exec wants a repository
    call = {"agent": "mock", "prompt": "the delegated task, done by the mock", "dir": str(work)}
    return work, call


def test_claude_code_delegates_through_the_registered_mcp_server(tmp_path: Path) -> None:
    [add, run] = commands("claude", str(tmp_path))
    assert add[:3] == ["claude", "mcp", "add"] and run[:2] == ["claude", "-p"]
    installed_launcher(str(tmp_path))
    work, call = delegated(tmp_path)
    config = tmp_path / "claude-config"
    config.mkdir()
    with FakeAnthropic() as api:
        env = base_env(api.cli_env(str(config)))
        env["PATH"] = tools_path(tmp_path, claude=claude_bin())
        env["HOME"] = str(tmp_path)
        registered = subprocess.run(add, cwd=str(work), env=env, capture_output=True, text=True, timeout=60)
        assert registered.returncode == 0, registered.stderr
        api.push(tool_search("mcp__agentproto__agentproto_generate"),
                 tool_use("mcp__agentproto__agentproto_generate", call), text("the review is in"))
        done = subprocess.run(run + ["--output-format", "json"], cwd=str(work), env=env, capture_output=True,
                              text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)["result"] == "the review is in"
        # Claude Code defers an MCP server's tools: named to the model at first, loaded by
        # its ToolSearch call.
        first, loaded, second = api.main_requests()[:3]
        assert "mcp__agentproto__agentproto_generate" in json.dumps(first.body)
        offered = [tool["name"] for tool in loaded.body.get("tools", [])]
        assert "mcp__agentproto__agentproto_generate" in offered
        [result] = [block for block in second.body["messages"][-1]["content"] if block.get("type") == "tool_result"]
        assert json.loads(result["content"]) == {"op": "generate", "ok": True, "text": call["prompt"]}
    assert wait_gone(str(config)) == []  # the host ended its MCP server (and so the sidecar)


def test_codex_delegates_through_the_registered_mcp_server(tmp_path: Path) -> None:
    world = fo.CodexWorld(str(tmp_path / "codex"))
    try:
        [add, run] = commands("codex", world.env["HOME"])
        assert add[:3] == ["codex", "mcp", "add"] and run[:2] == ["codex", "exec"]
        installed_launcher(world.env["HOME"])
        work, call = delegated(tmp_path)
        env = base_env(world.env)
        env["PATH"] = tools_path(tmp_path, codex=fo.pinned_codex())
        registered = subprocess.run(add, cwd=str(work), env=env, capture_output=True, text=True, timeout=60)
        assert registered.returncode == 0, registered.stderr
        world.api.script(fo.mcp_call("agentproto", "agentproto_generate", call), fo.text("the tests are written"))
        done = subprocess.run(run, cwd=str(work), env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "the tests are written" in done.stdout
        first, second = world.api.wait_requests(2)[:2]
        assert "mcp__agentproto" in first.namespaces()
        [output] = second.function_outputs().values()
        shown = output if isinstance(output, str) else json.dumps(output)
        assert '{"op":"generate","ok":true,"text":"the delegated task, done by the mock"}' in shown, shown
        assert world.wait_no_codex() == []
    finally:
        world.close()


def wait_gone(marker: str, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        left = processes_with_env(marker)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
