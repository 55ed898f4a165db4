"""docs/guard-rails.md's examples (issue 24), run as written with agentproto on PYTHONPATH:
the policy, the runaway budget, the rate-limit retry (on the same process, and on a new
one resumed) and generate's repaired output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sidecar import base_env

from tests.test_cookbook import recipe

EXPECTED = {
    "guard-policy.py": "git status --short -> allow by rule 0\nrm -rf build -> deny by rule 1\nmake deploy -> asked the app\n",
    "guard-budget.py": "budget exceeded: output_tokens 2,100 of 2,000 (over by 100)\nleft: {'output_tokens': 0}\n",
    "guard-retry.py": "rate limited: 429 Too Many Requests\ndone after the limit\nturn: Completed\n",
    "guard-restart.py": "restarted: process 2 resumed by mock-s1\ndone on the new process\nturn: Completed\n",
    "guard-generate.py": '{"name": "Ada"}\n',
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_guard_rails_examples_print_what_the_page_says(name: str, tmp_path: Path) -> None:
    app = tmp_path / name
    app.write_text(recipe(name))
    done = subprocess.run([sys.executable, str(app)], cwd=str(tmp_path), env=base_env(), capture_output=True,
                          text=True, timeout=90)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == EXPECTED[name]
