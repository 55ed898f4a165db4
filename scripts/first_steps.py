#!/usr/bin/env python3
"""A newcomer's first steps, timed: the README's commands, from a fresh clone to a first
``chat claude`` turn and to a first protocol 1 session from Python and from Node.

    python3 scripts/first_steps.py [--keep]

Everything happens in a temp directory with a temp HOME (and XDG dirs): ``git clone`` of
this checkout's committed HEAD, then each step as the README gives it, run from the clone
(or, for the quickstarts, from another directory with the clone on ``PYTHONPATH``):

1. ``echo 'hello from agentproto' | python3 -m agentproto chat mock`` (the first command);
2. ``python3 scripts/install.py --prefix DIR`` when the clone has it, then ``agentproto``
   from that prefix; without it, ``python3 -m agentproto`` from the clone;
3. ``agentproto list``;
4. ``echo … | agentproto chat claude``: the pinned Claude Code of ``.cache/agents`` (what
   ``npm install -g @anthropic-ai/claude-code`` gives; its download is not counted, see
   the note printed) on PATH, against the fake Anthropic API of
   tests/fakes/fake_anthropic.py on 127.0.0.1 (no key, no network);
5. the README's Python quickstart (protocol 1 through the client);
6. the README's Node quickstart (protocol 1 over a child process's pipes).

Each step's wall time is printed, and the running total. Run it as the suite runs (inside
``unshare -n`` with loopback up, where that works) to be sure nothing reaches the network:
``unshare -n sh -c 'ip link set lo up && exec python3 scripts/first_steps.py'``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes import fake_anthropic as fa  # noqa: E402


def block(name: str, readme: str) -> str:
    found = re.findall(rf"<!-- cookbook: {re.escape(name)} -->\n```[a-z]*\n(.*?)```\n", readme, re.S)
    if len(found) != 1:
        raise SystemExit(f"the README has {len(found)} blocks named {name}")
    return str(found[0])


class Steps:
    def __init__(self) -> None:
        self.total = 0.0
        self.rows: list[tuple[str, float, float]] = []

    def run(self, title: str, argv: list[str], *, cwd: Path, env: dict[str, str], stdin: str = "",
            expect: str | None = None) -> str:
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=str(cwd), env=env, input=stdin, capture_output=True, text=True, timeout=300)
        took = time.perf_counter() - started
        if done.returncode != 0 or (expect is not None and expect not in done.stdout):
            raise SystemExit(f"{title}: exit {done.returncode}\nstdout: {done.stdout[-2000:]}\n"
                             f"stderr: {done.stderr[-2000:]}")
        self.total += took
        self.rows.append((title, took, self.total))
        print(f"{took * 1000:9.0f} ms {self.total:8.2f} s  {title}", flush=True)
        return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--keep", action="store_true", help="keep the temp directory (its path is printed)")
    args = parser.parse_args()
    claude = fa.PINNED_CLAUDE
    node = shutil.which("node")
    if not claude.exists() or node is None:
        raise SystemExit("needs the pinned CLIs (.cache/agents: scripts/install-test-deps) and node")
    top = Path(tempfile.mkdtemp(prefix="first-steps-"))
    home = top / "home"
    home.mkdir()
    bin_dir = top / "bin"  # what `npm install -g @anthropic-ai/claude-code` puts on PATH
    bin_dir.mkdir()
    (bin_dir / "claude").symlink_to(claude)
    env = {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "NO_COLOR": "1",
    }
    python = shutil.which("python3", path=env["PATH"]) or sys.executable
    print(f"python3: {python} ({subprocess.run([python, '--version'], capture_output=True, text=True).stdout.strip()})")
    print(f"in {top}; HOME={home}")
    print("      step    total  what")
    steps = Steps()
    clone = top / "agentproto"
    steps.run("git clone (local, this checkout's HEAD)", ["git", "clone", "-q", str(ROOT), str(clone)],
              cwd=top, env=env)
    readme = (clone / "README.md").read_text(encoding="utf-8")
    steps.run("README's first command: echo … | python3 -m agentproto chat mock",
              ["bash", "-c", "echo 'hello from agentproto' | python3 -m agentproto chat mock"], cwd=clone, env=env,
              expect="hello from agentproto")
    if (clone / "scripts" / "install.py").exists():
        prefix = top / "prefix"
        steps.run("python3 scripts/install.py --prefix DIR", [python, "scripts/install.py", "--prefix", str(prefix)],
                  cwd=clone, env=env)
        launcher = next(p for p in (prefix / "bin" / "agentproto", prefix / "agentproto") if p.exists())
        agentproto = [str(launcher)]
        where = top  # installed: any directory
    else:
        print("          (no scripts/install.py in this tree: python3 -m agentproto from the clone)")
        agentproto = [python, "-m", "agentproto"]
        where = clone
    steps.run("agentproto list", [*agentproto, "list"], cwd=where, env=env, expect="mock")
    config = top / "claude-config"
    config.mkdir()
    with fa.FakeAnthropic() as api:
        api.push(fa.text("Hello! I am Claude, ready to help."))
        chat_env = {**env, **api.cli_env(str(config))}
        steps.run("echo … | agentproto chat claude (pinned CLI, fake API)", [*agentproto, "chat", "claude"],
                  cwd=where, env=chat_env, stdin="hello, who are you?", expect="Hello! I am Claude")
        calls = len(api.main_requests())
    app_dir = top / "app"
    app_dir.mkdir()
    (app_dir / "quick.py").write_text(block("quick.py", readme))
    (app_dir / "quick.mjs").write_text(block("quick.mjs", readme))
    app_env = {**env, "PYTHONPATH": str(clone)}
    steps.run("README's Python quickstart (protocol 1 through the client)", [python, "quick.py"], cwd=app_dir,
              env=app_env, expect="hello from Python")
    steps.run("README's Node quickstart (protocol 1 over a child's pipes)", [node, "quick.mjs"], cwd=app_dir,
              env=app_env, expect="hello from Node")
    print(f"the fake API answered {calls} model call(s); the pinned claude's npm download "
          f"({du(claude)} under .cache/agents) is not counted: it was installed before")
    if args.keep:
        print(f"kept {top}")
    else:
        shutil.rmtree(top, ignore_errors=True)
    return 0


def du(claude: Path) -> str:
    done = subprocess.run(["du", "-sh", str(claude.parents[2])], capture_output=True, text=True)
    return done.stdout.split()[0] if done.returncode == 0 and done.stdout else "?"


if __name__ == "__main__":
    sys.exit(main())
