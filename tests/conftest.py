"""Suite-wide set-up and markers.

tests/ mirrors the package: tests/core/, tests/loopio/, tests/tools/, tests/drivers/ (one
folder per agent family), tests/engine/, tests/frontends/, tests/commands/; the command line,
the client and the project-wide checks at the top; tests/fakes/ holds the fake agents, the
fake model APIs and the shared helpers (``from sidecar import ...``), tests/fuzz/ the fuzzers.
pytest imports test files by their path from the root (``--import-mode=importlib`` in
pyproject.toml), so two folders may hold files of the same name; this file puts tests/fakes/
and tests/ (for the ``fuzz`` package) on sys.path, and a test file that shares another's
helpers imports it by its path (``from tests.frontends.test_serve import RawServe``).

``core`` marks every test that needs only a Python >= 3.10 and the pip packages of
tests/requirements.txt. The files named in ``NOT_CORE`` below need more (node and the pinned
npm tools in .cache/, anyagent-py, whose wheel is tagged for CPython 3.11 only, Chromium, or
root), so they are not core; so is a single test marked ``@pytest.mark.not_core(REASON)`` in
a file that is otherwise core. `.ci/run` runs the whole suite on the default Python and
`pytest -m core` on every other version. A new test file is core unless it is named here; a
name here that names no test file fails the run (a renamed file cannot silently become core),
and so does a ``not_core`` mark without its reason. tests/test_core_selection.py fails when a
core test reaches for one of those (a helper that finds a pinned CLI, a path into .cache/'s
npm parts, ``node``, Chromium, a call only root may make), naming the file and the line.

A run leaves nothing under the user's home. Each pytest process (every xdist worker, before
any test module is imported) gets ``HOME`` in the run's temp dir and ``XDG_CONFIG_HOME``,
``XDG_CACHE_HOME``, ``XDG_DATA_HOME``, ``XDG_STATE_HOME`` and ``XDG_RUNTIME_DIR`` (where every
serve opens its control socket) inside it, and the variables
that move a tool's home elsewhere (``CODEX_HOME``, ``CLAUDE_CONFIG_DIR``, ...) unset, so
every agent CLI, sidecar and tool a test starts with the inherited environment (or with a
HOME of its own) writes there. A test that builds an environment from nothing must give
it a HOME: without one, node and Python fall back to the user's home from the password
database. The check: the run's first process touches a marker before the tests and, once
they are over, lists everything under the user's home (its HOME at start and its
password-database home) newer than the marker, the checkout and the package managers'
caches (``~/.npm``, ``~/.cache/pip``, ``~/.cache/node-gyp``: the install step's) excepted;
anything listed fails the run. Another process writing under ~ meanwhile shows up too.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
for _path in (str(TESTS), str(TESTS / "fakes")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

#: The user's homes, as the first pytest process found them (workers inherit the run's HOME).
USER_HOMES = os.environ.setdefault(
    "AGENTPROTO_TEST_USER_HOMES",
    os.pathsep.join(dict.fromkeys([os.path.expanduser("~"), pwd.getpwuid(os.getuid()).pw_dir])),
).split(os.pathsep)
#: The install step's package caches, written before the tests run: not the suite's.
PACKAGE_CACHES = (".npm", os.path.join(".cache", "pip"), os.path.join(".cache", "node-gyp"))
#: Variables that put a tool's state somewhere else than under HOME: unset for the run.
FOLLOW_HOME = (
    "CODEX_HOME", "CLAUDE_CONFIG_DIR", "GEMINI_CLI_HOME", "GEMINI_DIR", "CURSOR_CONFIG_DIR",
    "NPM_CONFIG_CACHE", "npm_config_cache", "NPM_CONFIG_USERCONFIG", "npm_config_userconfig",
    "PIP_CACHE_DIR", "PYTHONUSERBASE", "AGENTPROTO_DB",
)  # fmt: skip
XDG_HOMES = {"XDG_CONFIG_HOME": ".config", "XDG_CACHE_HOME": ".cache", "XDG_DATA_HOME": ".local/share",
             "XDG_STATE_HOME": ".local/state"}  # fmt: skip
_MARKER: Path | None = None


def _controller(config: pytest.Config) -> bool:
    """The run's first process (not an xdist worker)."""
    return not hasattr(config, "workerinput")


@pytest.hookimpl(trylast=True)  # after the tmpdir plugin made the run's temp dir factory
def pytest_configure(config: pytest.Config) -> None:
    global _MARKER
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    if _controller(config):
        _MARKER = base / "home-marker"
        _MARKER.touch()
    home = base / "home"
    home.mkdir(mode=0o700, exist_ok=True)
    os.environ["HOME"] = str(home)
    for name, under in XDG_HOMES.items():
        os.environ[name] = str(home / under)
        (home / under).mkdir(mode=0o700, parents=True, exist_ok=True)
    for name in FOLLOW_HOME:
        os.environ.pop(name, None)
    # Every serve's control socket goes into the run's own control directory, not the user's
    # (/tmp/agentproto-UID): a test's `inspect` sees this run's sidecars only. Claude Code
    # 2.1.332 makes its messaging socket there too (and leaves it when killed), not in /tmp/cc-socks.
    (home / "run").mkdir(mode=0o700, exist_ok=True)
    os.environ["XDG_RUNTIME_DIR"] = str(home / "run")
    os.environ.pop("AGENTPROTO_CONTROL_DIR", None)


def written_under_home(marker: Path, homes: list[str] = USER_HOMES) -> list[str]:
    """Everything under ``homes`` newer than ``marker``, the checkout and the package caches
    pruned (``find HOME -newer MARKER``)."""
    found: list[str] = []
    for home in dict.fromkeys(homes):
        if not os.path.isdir(home):
            continue
        prune: list[str] = []
        for path in [str(ROOT), *(os.path.join(home, cache) for cache in PACKAGE_CACHES)]:
            prune += [*(["-o"] if prune else []), "-path", path]
        argv = ["find", home, "-mindepth", "1", "(", *prune, ")", "-prune", "-o", "-newer", str(marker), "-print"]
        listed = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        found += [line for line in listed.stdout.splitlines() if line]
    return found


@pytest.hookimpl(trylast=True)  # after the session's fixtures are torn down
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _MARKER is None or not _controller(session.config):
        return
    found = written_under_home(_MARKER)
    if not found:
        return
    shown = "\n".join(f"  {path}" for path in found[:50])
    if len(found) > 50:
        shown += f"\n  ... {len(found) - 50} more"
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    homes = ", ".join(dict.fromkeys(USER_HOMES))
    message = (
        f"written under the user's home ({homes}) during the run, by a test or by another process meanwhile "
        f"(a test must give every program it starts a HOME of the run; tests/conftest.py):\n{shown}"
    )
    if reporter is not None:
        reporter.write_sep("=", "files left under ~", red=True)
        reporter.write_line(message)
    else:
        print(message)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED

NOT_CORE = {
    "drivers/claude/test_claude.py": "the pinned Claude Code CLI (npm)",
    "drivers/claude/test_claude_client.py": "the pinned Claude Code CLI (npm)",
    "drivers/claude/test_claude_app_tools.py": "the pinned Claude Code CLI (npm)",
    "commands/test_chat_real.py": "the pinned Claude Code CLI (npm)",
    "drivers/codex/test_codex.py": "the pinned Codex CLI (npm)",
    "drivers/codex/test_codex_app_tools.py": "the pinned Codex CLI (npm)",
    "drivers/claude/test_claude_guard.py": "the pinned Claude Code CLI (npm)",
    "drivers/codex/test_codex_guard.py": "the pinned Codex CLI (npm)",
    "drivers/codex/test_codex_output_schema.py": "the pinned Codex CLI (npm)",
    "drivers/codex/test_codex_plan_usage.py": "the pinned Codex CLI (npm)",
    "drivers/acp/test_acp_real.py": "the pinned ACP agents (npm)",
    "drivers/acp/test_acp_scenarios_real.py": "the pinned ACP agents (npm, .cache/acp-agents)",
    "drivers/acp/test_acp_claude_real.py": "the pinned claude-agent-acp (npm, .cache/acp-agents)",
    "drivers/acp/test_acp_claude_guard.py": "the pinned claude-agent-acp (npm, .cache/acp-agents)",
    "drivers/acp/test_acp_gemini_real.py": "the pinned Gemini CLI (npm, .cache/acp-agents)",
    "drivers/acp/test_acp_qwen_real.py": "the pinned Qwen Code (npm, .cache/acp-agents)",
    "drivers/acp/test_acp_opencode_real.py": "the pinned opencode (npm, .cache/acp-agents)",
    "drivers/acp/test_acp_resume_real.py": "the pinned ACP agents (npm, .cache/acp-agents)",
    "commands/test_replay_real.py": "the pinned Claude Code and Codex CLIs (npm)",
    "commands/test_list_real.py": "the pinned Claude Code and Codex CLIs (npm)",
    "engine/test_observations_real.py": "the pinned Claude Code and Codex CLIs (npm)",
    "test_anyagent_compat.py": "anyagent-py (a CPython 3.11 wheel)",
    "core/test_typegen.py": "json-schema-to-typescript and tsc (npm)",
    "test_cookbook_agents.py": "node, and the pinned Claude Code and Codex CLIs (npm)",
    "test_install_mcp_hosts.py": "the pinned Claude Code CLI (npm)",
    "test_ts_client.py": "node, npm, the pinned tsc and Node types, and the pinned Claude Code CLI (npm)",
    "frontends/test_other_users.py": "root (it runs an attacker as uid 65534)",
    "test_console_browser.py": "headless Chromium and chromium-driver (apt)",
    "frontends/test_mcp_conformance.py": "the pinned MCP conformance kit and Node 22 (npm)",
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing = [name for name in NOT_CORE if not (TESTS / name).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py's NOT_CORE names files that do not exist: {missing}")
    for item in items:
        path = item.path.resolve()
        marked = item.get_closest_marker("not_core")
        if marked is not None and not (marked.args and isinstance(marked.args[0], str) and marked.args[0]):
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.not_core needs its reason, e.g. not_core(\"root\")")
        if marked is None and (path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else path.name) not in NOT_CORE:
            item.add_marker(pytest.mark.core)


@pytest.fixture(scope="session", autouse=True)
def no_secret_in_any_record(tmp_path_factory: pytest.TempPathFactory):
    """Every record the suite writes (any file in the run's temp dirs that starts with a
    record header) and every committed recording: none may hold a secret the suite used."""
    yield
    from suite_secrets import ALL

    roots = [tmp_path_factory.getbasetemp(), Path(__file__).resolve().parent.parent / "fixtures" / "recordings"]
    leaks = []
    for root in roots:
        for path in (p for p in root.rglob("*") if p.is_file()):
            try:
                # A record starts with its header line: a file that does not is no record,
                # and is not read whole (test_acp_services leaves a 3 GiB sparse file).
                with path.open("rb") as f:
                    if b'"recording": 1' not in f.readline(1 << 20):
                        continue
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            leaks += [f"{path}: {secret}" for secret in ALL if secret in text]
    assert not leaks, "secrets in records:\n" + "\n".join(leaks)
