"""cli_fast.py: the commonest command lines read without argparse, into exactly what argparse
makes of them, and every other command line left to argparse.

Every command line of up to five words over an alphabet of the words that matter (the
commands, the flags read without argparse and some they are not, values that look like
flags, a command name as a value) is read both ways: wherever cli_fast answers, argparse
accepts the same line (no usage error, ``check_usage`` included) with the same namespace.
A flag added to ``serve`` or ``agent`` in cli_args.py without its default in cli_fast.py
fails here. The module sets of these starts (no argparse) are held in test_startup.py.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import subprocess
import sys
from typing import Any

import pytest
from sidecar import ROOT, base_env

from agentproto import cli, cli_fast
from agentproto.cli_args import check_usage

COMMANDS: dict[str, Any] = {"serve": cli.cmd_serve, "agent": cli.cmd_agent}
PARSER = cli.build_parser()

#: The words the command lines are made of.
WORDS = ("serve", "agent", "list", "--single-shot", "--mock", "--record", "--db", "--control", "--transport",
         "--version", "--help", "x", "", "-x", "--mock=x", "--mo")  # fmt: skip


def argparse_reads(argv: list[str]) -> dict[str, Any] | None:
    """What argparse (and check_usage) make of ``argv``: its namespace, or None for an exit
    (a usage error, --help, --version)."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            args = PARSER.parse_args(argv)
            check_usage(PARSER, args)
        except SystemExit:
            return None
    return vars(args)


@pytest.mark.parametrize(
    "argv",
    [
        ["serve"], ["agent"], ["agent", "--single-shot"], ["--single-shot"],
        ["serve", "--mock", "fixtures/mock-scripts/turn.json"], ["--single-shot", "--mock", "a b", "--record", "r"],
        ["agent", "--record", "r.ndjson", "--single-shot", "--db", "off", "--control", "/tmp/c"],
        ["serve", "--db", ""], ["--single-shot", "--mock", "serve"],
    ],
)  # fmt: skip
def test_the_commonest_command_lines_read_as_argparse_reads_them(argv: list[str]) -> None:
    fast = cli_fast.parse(argv, COMMANDS)
    assert fast is not None
    assert vars(fast) == argparse_reads(argv)


@pytest.mark.parametrize(
    "argv",
    [
        [], ["--help"], ["serve", "--help"], ["list"], ["serve", "--mock"], ["serve", "--mock", "-x"],
        ["serve", "--mock=x"], ["serve", "--mo", "x"], ["serve", "--mock", "a", "--mock", "b"],
        ["serve", "--transport", "stdio"], ["serve", "--single-shot"], ["--mock", "x"], ["--single-shot", "serve"],
        ["--single-shot", "agent"], ["--version", "serve"], ["serve", "--version"], ["agent", "extra"],
        ["--single-shot", "--single-shot"], ["--single-shot", "--db", "x"],
    ],
)  # fmt: skip
def test_every_other_command_line_is_left_to_argparse(argv: list[str]) -> None:
    assert cli_fast.parse(argv, COMMANDS) is None


def test_no_command_line_reads_otherwise_than_argparse_reads_it() -> None:
    read = 0
    for length in range(1, 6):
        for words in itertools.product(WORDS, repeat=length):
            argv = list(words)
            if argv == ["--version"]:
                continue  # it prints and exits: below
            fast = cli_fast.parse(argv, COMMANDS)
            if fast is not None:
                read += 1
                assert vars(fast) == argparse_reads(argv), argv
    assert read > 100  # the alphabet does reach the shapes cli_fast reads


def test_version_prints_and_exits_as_argparse_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as fast:
        cli_fast.parse(["--version"], COMMANDS)
    fast_out = capsys.readouterr()
    with pytest.raises(SystemExit) as slow:
        PARSER.parse_args(["--version"])
    assert (fast.value.code or 0, fast_out) == (slow.value.code or 0, capsys.readouterr())
    assert fast_out.out.startswith("agentproto ")


def test_a_usage_error_after_a_fast_prefix_is_still_argparse_s() -> None:
    # `serve --mock` (no value) is not read here: argparse says what is wrong, exit 2.
    done = subprocess.run(
        [sys.executable, "-m", "agentproto", "serve", "--mock"], capture_output=True, env=base_env(),
        cwd=str(ROOT), timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.decode().strip() == (
        "python3 -m agentproto serve: argument --mock: expected one argument (see `python3 -m agentproto serve --help`)"
    )
