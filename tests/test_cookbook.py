"""The cookbook (docs/cookbook.md) and the README's quickstarts, run as written: each
recipe's block is taken out of README.md or docs/*.md (by its ``<!-- cookbook: NAME -->``
marker, one per name across them all), written to a file and run from a directory of its
own, with agentproto on PYTHONPATH as the cookbook says. The recipes that need node or the
pinned agent CLIs are in test_cookbook_agents.py."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

from sidecar import ROOT, base_env

#: The documents that hold recipes: the README's quickstarts and the docs/ pages.
DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))


def recipe(name: str) -> str:
    """The fenced block right after ``<!-- cookbook: NAME -->``, in whichever document has it."""
    found = [
        block
        for doc in DOCUMENTS
        for block in re.findall(rf"<!-- cookbook: {re.escape(name)} -->\n```[a-z]*\n(.*?)```\n",
                                doc.read_text(encoding="utf-8"), re.S)
    ]
    assert len(found) == 1, f"the documents have {len(found)} cookbook blocks named {name}"
    return str(found[0])


def python_path_env(tmp_path: Path) -> dict[str, str]:
    """This checkout's agentproto on PYTHONPATH, and ``python3`` the suite's interpreter (a
    user's python3 with agentproto importable), first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").symlink_to(sys.executable)
    env = base_env()
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def test_the_shell_script_drives_a_turn_through_serve(tmp_path: Path) -> None:
    script = tmp_path / "ask.sh"
    script.write_text(recipe("ask.sh"))
    script.chmod(0o755)
    assert len(recipe("ask.sh").splitlines()) <= 25  # a short script, as the cookbook says
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [str(script), ".", 'hello "there", agent — ünïcode'], cwd=str(work), env=python_path_env(tmp_path),
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == 'hello "there", agent — ünïcode\n'  # the mock answers with the prompt


def test_the_shell_script_says_when_the_open_fails(tmp_path: Path) -> None:
    script = tmp_path / "ask.sh"
    script.write_text(recipe("ask.sh"))
    script.chmod(0o755)
    env = python_path_env(tmp_path)
    env["AGENT"] = "no-such-agent"
    done = subprocess.run([str(script), ".", "hi"], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0 and done.stdout == ""
    # The error's message, and nothing else: no traceback of the JSON helper on the way.
    assert done.stderr.startswith("open failed: unknown agent: no-such-agent (known: mock, "), done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


def ci_run_block() -> str:
    """The ``run: |`` script of the CI job's agentproto step, as the runner executes it."""
    job = recipe("ci.yml")
    assert "python3 -m agentproto --single-shot --mock turn.json" in job  # the mock plays a script, as its prose says
    block = job.split("run: |\n", 1)[1]
    return textwrap.dedent(block)


def test_the_ci_job_passes_against_the_mock(tmp_path: Path) -> None:
    # As the job says: agentproto vendored into the repository, on PYTHONPATH from the step's env.
    [vendored] = re.findall(r"PYTHONPATH: (\S+)", recipe("ci.yml"))
    subprocess.run([sys.executable, str(ROOT / "scripts" / "vendor.py"), str(tmp_path / vendored)], check=True,
                   capture_output=True, timeout=60)
    env = python_path_env(tmp_path)
    env["PYTHONPATH"] = vendored  # relative, as in the job: the checkout is the current directory
    done = subprocess.run(["bash", "-e", "-c", ci_run_block()], cwd=str(tmp_path), env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "agent step ok: pong\n"


def test_the_ci_job_fails_when_the_agent_step_does(tmp_path: Path) -> None:
    # The job is a real check: an answer that is not the one expected fails the step.
    block = ci_run_block()
    assert '{"message_id": "m1", "text": "pong"}' in block
    broken = block.replace('{"message_id": "m1", "text": "pong"}', '{"message_id": "m1", "text": "pang"}')
    done = subprocess.run(["bash", "-e", "-c", broken], cwd=str(tmp_path), env=python_path_env(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "AssertionError" in done.stderr


def test_the_python_client_answers_permission_prompts_by_its_policy(tmp_path: Path) -> None:
    app = tmp_path / "policy.py"
    app.write_text(recipe("policy.py"))
    done = subprocess.run([sys.executable, str(app)], cwd=str(tmp_path), env=base_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "README.md -> allowed\nrm -rf build -> denied\nturn: Completed\n"


# The README's quickstarts: the Python ones and the CI step (the Node one and the MCP host's
# are in test_cookbook_agents.py).


def test_the_python_quickstart_prints_the_answer(tmp_path: Path) -> None:
    app = tmp_path / "quick.py"
    app.write_text(recipe("quick.py"))
    assert len(recipe("quick.py").splitlines()) <= 15  # about ten lines, as the README promises
    done = subprocess.run([sys.executable, str(app)], cwd=str(tmp_path), env=base_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello from Python\n"  # the mock answers with the prompt


def test_the_tools_quickstart_answers_the_agents_call(tmp_path: Path) -> None:
    app = tmp_path / "quick_tools.py"
    app.write_text(recipe("quick-tools.py"))
    done = subprocess.run([sys.executable, str(app)], cwd=str(tmp_path), env=base_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "the agent got: agent: one who acts\n"


def test_the_ci_quickstart_plays_its_mock_script(tmp_path: Path) -> None:
    block = recipe("quick-ci.sh")
    shown = [line[2:] for line in block.splitlines() if line.startswith("# ")]  # what the README says it prints
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=str(tmp_path),
                          env=python_path_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == shown == [
        '{"kind":"result","op":"generate","ok":true,"text":"pong"}', '{"kind":"done","exit_code":0}']
