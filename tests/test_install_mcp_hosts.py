"""The issue's failing recipe, passing: an MCP host registers the installed `agentproto mcp`
by name and starts it from another directory. The pinned Claude Code's `claude mcp add` and
`claude mcp list` (whose health check spawns the server and runs MCP's initialize) in a temp
HOME; no model API is involved (the run has no network but loopback)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fake_anthropic import PINNED_CLAUDE

from tests.test_install import install
from tests.test_packaging import clean_env


def test_claude_code_connects_to_the_installed_agentproto_mcp(tmp_path: Path) -> None:
    assert install(tmp_path).returncode == 0
    project = tmp_path / "some-project"  # not the checkout: `python3 -m agentproto` would fail here
    project.mkdir()
    env = clean_env(HOME=str(tmp_path), PATH=f"{tmp_path}/.local/bin:{PINNED_CLAUDE.parent}:/usr/bin:/bin")
    for name in [k for k in env if k.startswith(("ANTHROPIC_", "CLAUDE_"))]:
        del env[name]
    # `mcp --help`'s example, as the shell expands it; and by name, found on the host's PATH.
    launcher = f"{tmp_path}/.local/bin/agentproto"
    for name, command in (("absolute", [launcher, "mcp"]), ("by-name", ["agentproto", "mcp"])):
        added = subprocess.run(["claude", "mcp", "add", name, "--", *command], capture_output=True, text=True,
                               env=env, cwd=project, timeout=120)  # fmt: skip
        assert added.returncode == 0, added.stdout + added.stderr
    listed = subprocess.run(["claude", "mcp", "list"], capture_output=True, text=True, env=env, cwd=project, timeout=120)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert f"absolute: {launcher} mcp - ✔ Connected" in listed.stdout, listed.stdout
    assert "by-name: agentproto mcp - ✔ Connected" in listed.stdout, listed.stdout
