"""Suite-wide markers.

``core`` marks every test that needs only a Python >= 3.10 and the pip packages of
tests/requirements.txt. The files below need more (node and the pinned npm tools in .cache/,
or anyagent-py, whose wheel is tagged for CPython 3.11 only), so they are not core. `.ci/run`
runs the whole suite on the default Python and `pytest -m core` on every other version.
A new test file is core unless it is named here.
"""

from __future__ import annotations

import pytest

NOT_CORE = {
    "test_claude.py": "the pinned Claude Code CLI (npm)",
    "test_claude_client.py": "the pinned Claude Code CLI (npm)",
    "test_chat_real.py": "the pinned Claude Code CLI (npm)",
    "test_codex.py": "the pinned Codex CLI (npm)",
    "test_acp_real.py": "the pinned ACP agents (npm)",
    "test_replay_real.py": "the pinned Claude Code and Codex CLIs (npm)",
    "test_observations_real.py": "the pinned Claude Code and Codex CLIs (npm)",
    "test_anyagent_compat.py": "anyagent-py (a CPython 3.11 wheel)",
    "test_typegen.py": "json-schema-to-typescript and tsc (npm)",
    "test_cookbook_agents.py": "node, and the pinned Claude Code and Codex CLIs (npm)",
    "test_other_users.py": "root (it runs an attacker as uid 65534)",
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name not in NOT_CORE:
            item.add_marker(pytest.mark.core)


@pytest.fixture(scope="session", autouse=True)
def no_secret_in_any_record(tmp_path_factory: pytest.TempPathFactory):
    """Every record the suite writes (any file in the run's temp dirs that starts with a
    record header) and every committed recording: none may hold a secret the suite used."""
    import os

    # Every sidecar of the run keeps its observations in the run's temp dir, not the user's.
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    from pathlib import Path

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
