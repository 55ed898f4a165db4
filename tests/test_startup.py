"""What each start imports: the module set, read from a real process's ``-X importtime``.

A start pays for every module it imports, so the commands a program runs over and over
(``serve`` up to its hello, ``--version``, ``--single-shot``) import no agent driver and
none of the standard library's slow modules that agentproto used to load (dataclasses and
the inspect/ast/dis it pulls in, typing, subprocess with threading, tempfile, shutil,
importlib.resources with zipfile and pathlib). These tests hold the module set, never a
time: scripts/bench_core.py measures the time.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest
from sidecar import ROOT, base_env, check_line, script

from agentproto import cli

#: The modules under agentproto/drivers/ a start may import: the seam (base.py), the catalog
#: and the child-process transport, never an agent's own driver or its helpers.
SEAM = {"agentproto.drivers", "agentproto.drivers.base", "agentproto.drivers.catalog",
        "agentproto.loopio.transport", "agentproto.loopio.process_transport"}

#: What only a session needs: imported by the first open, never by a start that opens none.
SESSION_ONLY = {"agentproto.engine.session", "agentproto.engine.session_turns", "agentproto.engine.turns",
                "agentproto.drivers.base", "agentproto.tools.apptools", "agentproto.loopio.process_transport"}

#: Standard-library modules no start imports (whatever imports them: ours or argparse).
SLOW = {"dataclasses", "inspect", "ast", "dis", "tokenize", "typing", "subprocess", "threading", "tempfile",
        "shutil", "random", "bz2", "lzma", "pathlib", "zipfile", "importlib.resources", "textwrap", "copy"}


def imports(args: list[str], stdin: bytes = b"") -> tuple[set[str], bytes]:
    """The modules ``python -X importtime ARGS`` imports beyond what the interpreter itself
    imports for ``-c pass`` (a site hook may load some), and what it wrote on stdout."""

    def run(argv: list[str], data: bytes) -> tuple[set[str], bytes]:
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", *argv], input=data, capture_output=True, env=base_env(),
            cwd=str(ROOT), timeout=60,
        )
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
        names = set()
        for line in proc.stderr.decode().splitlines():
            if line.startswith("import time:") and "self [us]" not in line:
                names.add(line.rsplit("|", 1)[1].strip())
        return names, proc.stdout

    baseline, _ = run(["-c", "pass"], b"")
    names, out = run(args, stdin)
    assert "agentproto" in names  # the importtime report really is read
    return names - baseline, out


def check_lean(names: set[str]) -> None:
    # The commonest command lines are read without argparse (cli_fast.py); secrets are
    # scrubbed by redact.py, imported by what first records, logs or learns one.
    assert "argparse" not in names and "agentproto.cli_args" not in names
    assert "agentproto.core.redact" not in names
    drivers = {n for n in names if n.startswith("agentproto.drivers")} - SEAM
    assert not drivers, f"a start imported agent drivers: {sorted(drivers)}"
    slow = names & SLOW
    assert not slow, f"a start imported slow modules: {sorted(slow)}"


def test_serve_start_imports_no_driver_and_no_slow_module() -> None:
    # A whole idle serve: start, hello, EOF on stdin, the orderly end.
    names, out = imports(["-m", "agentproto", "serve"])
    hello = json.loads(out.splitlines()[0])
    check_line(hello)
    assert hello["hello"]["protocol"] == 1
    check_lean(names)
    # What it does import: the protocol 1 stack, and no other frontend; what only a session
    # needs (the session, the driver base, the app's tools, the process transport) waits
    # for the first open.
    assert {"agentproto.frontends.serve", "agentproto.engine.runtime", "agentproto.loopio.loop"} <= names
    assert not names & SESSION_ONLY
    assert not names & {"agentproto.frontends.ops_framing", "agentproto.frontends.ops_stdio", "agentproto.core.mcp", "agentproto.tools.listener",
                        "agentproto.loopio.record", "agentproto.commands.chat", "agentproto.core.jsonschema_lite"}


def test_single_shot_capabilities_imports_no_driver_and_no_slow_module() -> None:
    names, out = imports(["-m", "agentproto", "--single-shot"], b'{"op": "capabilities"}')
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0]["kind"] == "result" and lines[0]["ok"] is True and "mock" in lines[0]["agents"]
    assert lines[-1] == {"kind": "done", "exit_code": 0}
    check_lean(names)
    assert not names & SESSION_ONLY


def test_version_imports_nothing_but_the_cli() -> None:
    names, out = imports(["-m", "agentproto", "--version"])
    assert out == b"agentproto 0.1.0\n"
    check_lean(names)
    ours = {n for n in names if n.startswith("agentproto")}
    assert ours <= {
        "agentproto", "agentproto.__main__", "agentproto.cli", "agentproto.cli_fast", "agentproto.core.errors",
        "agentproto.loopio.private", "agentproto.core.typecheck", "agentproto.core", "agentproto.loopio",
    }, sorted(ours)  # fmt: skip
    assert "json" not in names and "selectors" not in names


def test_a_mock_session_loads_its_driver_when_it_opens() -> None:
    # The lazy imports still load what a session needs: a whole mock turn, single-shot.
    request = json.dumps({"op": "generate", "agent": "mock", "dir": str(ROOT), "prompt": "hi"}).encode()
    names, out = imports(["-m", "agentproto", "--single-shot", "--mock", script("turn")], request)
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[-1] == {"kind": "done", "exit_code": 0}, lines[-3:]
    assert {"agentproto.drivers.mock", *SESSION_ONLY} <= names


@pytest.mark.parametrize("argv", [["--version"], ["serve", "--stall-timeout", "soon"], ["no-such-command"], []])
def test_main_leaves_the_garbage_collector_on(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # main() turns collection off while a command's modules load; however it ends (an
    # argparse exit, a usage error), an embedder's interpreter gets it back.
    assert gc.isenabled()
    try:
        cli.main(argv)
    except SystemExit:
        pass
    assert gc.isenabled()
    capsys.readouterr()
