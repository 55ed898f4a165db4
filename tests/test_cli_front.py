"""The command line's front door, from a checkout and a zipapp: did-you-mean for commands,
flags and choices; the program named as it was typed; the top-level help listing each
command once; `completion bash|zsh`; `mcp`; the shipped mock scripts by name (`--mock
turn`), and a recording made with one replaying. The installed copy: tests/test_install.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sidecar import ROOT, base_env

from tests.test_packaging import BASE_PYTHON, build_pyz, clean_env

SHIPPED = sorted(p.stem for p in (ROOT / "agentproto" / "mock_scripts").glob("*.json"))


def run(*args: str, stdin: str = "", cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentproto", *args], input=stdin, capture_output=True, text=True,
                          env=base_env(), cwd=str(cwd), timeout=60)  # fmt: skip


def usage_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2 and done.stdout == "", done
    [line] = done.stderr.splitlines()
    return line


# -- did you mean ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,line",
    [
        (["lst"], "python3 -m agentproto: unknown command 'lst'. Did you mean 'list'? (see `python3 -m agentproto --help`)"),
        (["serv", "--mock", "turn"], "python3 -m agentproto: unknown command 'serv'. Did you mean 'serve'?"),
        (["frobnicate"], "python3 -m agentproto: unknown command 'frobnicate'. (see"),
        (["serve", "--transprt", "mcp"],
         "python3 -m agentproto serve: unknown flag '--transprt'. Did you mean '--transport'? "
         "(see `python3 -m agentproto serve --help`)"),
        (["serve", "--transprt=mcp"], "unknown flag '--transprt'. Did you mean '--transport'?"),
        (["chat", "--jsn"], "python3 -m agentproto chat: unknown flag '--jsn'. Did you mean '--json'?"),
        (["--singel-shot"], "python3 -m agentproto: unknown flag '--singel-shot'. Did you mean '--single-shot'?"),
        (["mcp", "--transport", "stdio"],
         "python3 -m agentproto mcp: unknown flag '--transport'. It is a flag of: serve "
         "(`python3 -m agentproto serve --transport`)"),
        (["serve", "--transport", "htp"],
         "python3 -m agentproto serve: argument --transport: invalid choice: 'htp'. Did you mean 'http'? "
         "Choose from stdio, unix, http, jsonrpc, mcp"),
        (["completion", "fish"], "argument shell: invalid choice: 'fish'. Choose from bash, zsh"),
        (["schema", "extra"], "python3 -m agentproto schema: unexpected argument 'extra'"),
    ],
)  # fmt: skip
def test_a_mistyped_command_flag_or_choice_names_the_nearest(args: list[str], line: str) -> None:
    assert line in usage_error(run(*args))


def test_the_top_level_help_lists_each_command_once() -> None:
    text = run("--help").stdout
    listed = re.findall(r"^  ([a-z][a-z-]*)  ", text, re.M)
    assert len(listed) == len(set(listed)) and {"serve", "mcp", "completion", "list", "inspect"} <= set(listed), text
    for name in listed:
        assert len(re.findall(rf"^  {name}\s", text, re.M)) == 1, name
    assert "{serve," not in text  # argparse's own list of the choices is not shown


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_pyz.build(tmp_path_factory.mktemp("pyz") / "agentproto.pyz")


def test_hints_and_examples_name_the_program_as_typed(pyz: Path, tmp_path: Path) -> None:
    """A zipapp's usage, errors and examples say `python3 …/agentproto.pyz`; a checkout's
    `python3 -m agentproto` (the installed launcher's: tests/test_install.py)."""
    done = subprocess.run([BASE_PYTHON, "-I", str(pyz), "serve", "--transprt", "mcp"], capture_output=True, text=True,
                          env=clean_env(HOME=str(tmp_path)), cwd=tmp_path, timeout=60)  # fmt: skip
    prog = f"python3 {pyz}"
    assert usage_error(done) == (
        f"{prog} serve: unknown flag '--transprt'. Did you mean '--transport'? (see `{prog} serve --help`)"
    )
    helped = subprocess.run([BASE_PYTHON, "-I", str(pyz), "serve", "--help"], capture_output=True, text=True,
                            env=clean_env(HOME=str(tmp_path)), cwd=tmp_path, timeout=60).stdout  # fmt: skip
    assert helped.startswith(f"usage: {prog} serve") and f"\n  {prog} serve --mock turn\n" in helped
    assert "python3 -m agentproto" not in helped
    checkout = run("chat", "--help").stdout
    assert checkout.startswith("usage: python3 -m agentproto chat ") and "python3 -m agentproto chat --mock question" in checkout
    top = run().stderr
    assert top.startswith("usage: python3 -m agentproto ") and "python3 -m agentproto: give a command" in top


# -- completion ---------------------------------------------------------------------------------


def complete(script: str, words: list[str]) -> list[str]:
    """What bash completes for ``words`` (the last one being typed), with the script sourced."""
    program = (
        f"source {script}\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        "_agentproto; printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    done = subprocess.run(["bash", "--norc", "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_bash_completion_completes_commands_flags_and_choices(tmp_path: Path) -> None:
    script = tmp_path / "agentproto.bash"
    done = run("completion", "bash")
    assert done.returncode == 0 and done.stderr == ""
    script.write_text(done.stdout)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    registered = subprocess.run(["bash", "--norc", "-c", f"source {script}; complete -p agentproto"],
                                capture_output=True, text=True)  # fmt: skip
    assert registered.stdout.strip() == "complete -o default -F _agentproto agentproto"
    assert complete(str(script), ["agentproto", "se"]) == ["serve"]
    assert complete(str(script), ["agentproto", "mc"]) == ["mcp-bridge", "mcp"]
    assert complete(str(script), ["agentproto", "serve", "--tr"]) == ["--transport"]
    assert complete(str(script), ["agentproto", "serve", "--transport", "j"]) == ["jsonrpc"]
    assert complete(str(script), ["agentproto", "--single-s"]) == ["--single-shot"]
    assert complete(str(script), ["agentproto", "mcp", "--mo"]) == ["--mock"]
    assert complete(str(script), ["agentproto", "chat", "--mock", "qu"]) == ["question", "queued"]
    assert complete(str(script), ["agentproto", "completion", ""]) == ["bash", "zsh"]


def test_zsh_completion_is_a_compdef_script_of_every_command() -> None:
    done = run("completion", "zsh")
    assert done.returncode == 0 and done.stdout.startswith("#compdef agentproto\n")
    for command in ("serve", "mcp", "agent", "list", "chat", "schema", "mcp-bridge", "replay", "inspect", "completion"):
        assert f"'{command}:" in done.stdout and f"\n                {command}) _arguments " in done.stdout, command
    assert "'--transport[" in done.stdout and ":(stdio unix http jsonrpc mcp)'" in done.stdout
    assert done.stdout.count("'") % 2 == 0
    zsh = shutil.which("zsh")
    if zsh:  # not installed here; where it is, its parser checks the script too
        assert subprocess.run([zsh, "-n", "-c", done.stdout]).returncode == 0


# -- mcp ----------------------------------------------------------------------------------------


def test_mcp_is_serve_transport_mcp_with_serves_other_options(tmp_path: Path) -> None:
    record = tmp_path / "mcp.ndjson"
    frames = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]  # fmt: skip
    stdin = "".join(json.dumps(f) + "\n" for f in frames)
    flagged = run("serve", "--transport", "mcp", "--mock", "turn", stdin=stdin)
    short = run("mcp", "--mock", "turn", "--record", str(record), "--stall-timeout", "5", "--tool-calls", "4",
                stdin=stdin)  # fmt: skip
    assert short.returncode == flagged.returncode == 0, short.stderr
    assert short.stdout == flagged.stdout
    header = json.loads(record.read_text().splitlines()[0])
    assert header["frontend"] == "mcp" and header["mock"]["path"].endswith("mock_scripts/turn.json")
    assert "--transport " not in run("mcp", "--help").stdout.split("options:")[1]


# -- the shipped mock scripts, by name ------------------------------------------------------------


def test_mock_takes_a_shipped_name_a_path_or_a_file_of_that_name(tmp_path: Path) -> None:
    assert run("chat", "--mock", "turn", stdin="go").stdout == "Let me check. Done.\n"
    # A name is a name: `turn.json` that is not there is an error, never the shipped turn.
    absent = run("chat", "--mock", "turn.json", stdin="go", cwd=tmp_path)
    assert absent.returncode == 1 and "mock script turn.json: no such file, nor a shipped mock script of that name. " \
        "Did you mean 'turn'?" in absent.stderr, absent.stderr
    # A file of that name in the current directory is the file (a path wins).
    (tmp_path / "turn").write_text(json.dumps({"turns": [[{"Emit": {"TextDelta": {"message_id": "m", "text": "mine"}}},
                                                          {"End": {"Completed": {"source": "Protocol"}}}]]}))  # fmt: skip
    assert run("chat", "--mock", "turn", stdin="go", cwd=tmp_path).stdout == "mine\n"
    missing = run("chat", "--mock", "./turn.json", stdin="go", cwd=tmp_path)
    assert missing.returncode == 1 and missing.stderr == "agentproto: cannot read mock script ./turn.json: No such file or directory\n"


def test_an_unknown_mock_name_lists_the_shipped_ones() -> None:
    done = run("serve", "--mock", "tunr")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        "agentproto: mock script tunr: no such file, nor a shipped mock script of that name. Did you mean 'turn'? "
        f"The shipped ones: {', '.join(SHIPPED)} (or give a path)\n"
    )
    assert len(SHIPPED) >= 10 and "question" in SHIPPED


def test_fixtures_mock_scripts_are_the_shipped_ones() -> None:
    """One copy: the tests' fixtures/mock-scripts is a link to the package's."""
    link = ROOT / "fixtures" / "mock-scripts"
    assert link.is_symlink() and link.resolve() == (ROOT / "agentproto" / "mock_scripts").resolve()


def test_a_recording_made_with_a_mock_name_replays(tmp_path: Path) -> None:
    """The header embeds the script's text (replay never opens mock.path), so a recording
    made with `--mock question` replays anywhere, a zipapp's path or not."""
    record = tmp_path / "named.ndjson"
    session = [
        {"id": 1, "cmd": "open", "agent": "mock", "dir": str(tmp_path)},
        {"id": 2, "cmd": "prompt", "session": "s1", "text": "hi"},
    ]
    made = run("serve", "--mock", "question", "--record", str(record), stdin="".join(json.dumps(f) + "\n" for f in session))
    assert made.returncode == 0, made.stderr
    header = json.loads(record.read_text().splitlines()[0])
    shipped = (ROOT / "agentproto" / "mock_scripts" / "question.json").read_text()
    assert header["mock"]["text"] == shipped and header["mock"]["path"] == str(ROOT / "agentproto" / "mock_scripts" / "question.json")
    replayed = run("replay", str(record), cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


# -- `schema | head -c 10` ----------------------------------------------------------------------


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_schema_into_head_ends_as_a_closed_reader_does(unbuffered: str) -> None:
    """README: a stdout whose reader went away ends any command quietly, status 1. The schema
    is more than a pipe holds: the reader goes while the write is under way, which an
    unbuffered stdout (PYTHONUNBUFFERED, as many hosts set it) took as a short count: it
    ended 0, the rest of the schema dropped unsaid."""
    import fcntl
    import os
    import termios
    import time

    read_end, write_end = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "agentproto", "schema"], stdout=write_end, stderr=subprocess.PIPE,
                            env={**base_env(), "PYTHONUNBUFFERED": unbuffered}, cwd=str(ROOT))  # fmt: skip
    os.close(write_end)
    try:
        assert len(os.read(read_end, 10)) == 10
        deadline = time.monotonic() + 30
        while True:  # the pipe full again: the writer is inside its write
            buffered = bytearray(4)
            fcntl.ioctl(read_end, termios.FIONREAD, buffered)
            if int.from_bytes(buffered, sys.byteorder) >= 60000:
                break
            assert time.monotonic() < deadline and proc.poll() is None, "the schema was never more than a pipe"
            time.sleep(0.01)
    finally:
        os.close(read_end)
    assert proc.wait(timeout=30) == 1
    assert proc.stderr is not None and proc.stderr.read() == b""


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_schema_into_a_shell_pipeline_into_head(unbuffered: str) -> None:
    """The README's words, as typed: `… | head -c 10` (pipefail shows the command's status)."""
    done = subprocess.run(["bash", "-c", "set -o pipefail; python3 -m agentproto schema | head -c 10"],
                          capture_output=True, text=True, env={**base_env(), "PYTHONUNBUFFERED": unbuffered},
                          cwd=str(ROOT), timeout=60)  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (1, '{\n  "$sche', "")


def test_building_the_parser_leaves_argparse_as_it_was() -> None:
    """cli_args.translations_once looks argparse's texts up once per build, then puts
    argparse's gettext back: an embedder's own parsers translate as before."""
    import argparse

    from agentproto.cli import build_parser

    before = argparse._  # type: ignore[attr-defined]
    parser = build_parser()
    assert argparse._ is before  # type: ignore[attr-defined]
    assert "show this help message and exit" in parser.format_help()


# -- docs/cli.md's blocks -------------------------------------------------------------------------


def test_the_typos_block_shows_what_the_command_line_says() -> None:
    """docs/cli.md "Help, typos and completion": each command, run from the checkout, prints
    the line under it (up to its `…`), exit 2."""
    from tests.test_cookbook import recipe

    lines = recipe("typos").splitlines()
    pairs = [(lines[i], lines[i + 1]) for i in range(0, len(lines), 2)]
    assert len(pairs) == 2
    for command, shown in pairs:
        argv = command.split("#")[0].split()
        assert argv[:3] == ["python3", "-m", "agentproto"], command
        said = usage_error(run(*argv[3:]))
        expected = shown.removeprefix("# ").split("…")[0]
        assert said.startswith(expected), (said, expected)


def test_the_completion_block_runs_from_an_install(tmp_path: Path) -> None:
    from tests.test_cookbook import recipe
    from tests.test_install import install

    assert install(tmp_path).returncode == 0
    env = clean_env(HOME=str(tmp_path), PATH=f"{tmp_path}/.local/bin:/usr/bin:/bin")
    bash_line, zsh_line = (line.split("  #")[0].strip() for line in recipe("completion").splitlines())
    (tmp_path / ".zfunc").mkdir()
    done = subprocess.run(["bash", "--norc", "-c", f"{bash_line}\ncomplete -p agentproto\n{zsh_line}"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stdout == "complete -o default -F _agentproto agentproto\n", done
    assert (tmp_path / ".zfunc" / "_agentproto").read_text().startswith("#compdef agentproto\n")
