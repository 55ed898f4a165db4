"""``agentproto chat``, from a pipe (one turn: the answer on stdout, the rest on stderr) and
in a real pseudo-terminal (tests/fakes/terminal.py): prompts, permissions, questions, the chat
commands, Ctrl-C, exit codes, colour, the spinner and the tool line, tokens and cost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sidecar import LINE, ROOT, base_env, script
from terminal import GUARD, Terminal, terminals  # noqa: F401  (a fixture)


ACP_AGENT = ROOT / "tests" / "fakes" / "acp_test_agent.py"
ESC = b"\x1b["
END = {"End": {"Completed": {"source": "Protocol"}}}


def run(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agentproto", "chat", *args],
        input=stdin,
        capture_output=True,
        env=base_env(env),
        cwd=str(ROOT),
        timeout=GUARD * 2,
    )


def write_script(tmp_path: Path, body: dict[str, Any], name: str = "script.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(body))
    return str(path)


def say(text: str, message: str = "m1") -> dict[str, Any]:
    return {"Emit": {"TextDelta": {"message_id": message, "text": text}}}


def tool(status: str, **extra: Any) -> dict[str, Any]:
    body = {"id": "tool-1", "kind": "Execute", "title": "make test", "status": status,
            "input": {"Command": {"command": "make test", "cwd": None}}, "output": None, "diffs": [],
            "locations": [], "raw": None, **extra}
    return {"Emit": {"ToolUpdated": body}}


def acp_agent() -> str:
    return json.dumps({"acp": {"name": "acp-test", "path": str(ACP_AGENT), "args": []}})


# -- from a pipe: stdout is the answer, and only the answer -------------------------------------


def test_one_turn_from_a_pipe() -> None:
    result = run("mock", stdin=b"title for this diff\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"title for this diff\n" and result.stderr == b""


def test_empty_stdin_is_a_usage_error() -> None:
    result = run("mock", stdin=b"")
    assert result.returncode == 2
    assert b"stdin was empty" in result.stderr and result.stdout == b""


def test_a_denied_permission_is_noted_on_stderr_never_in_the_answer() -> None:
    result = run("--mock", script("turn"), stdin=b"run the tests")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"Let me check. Done.\n"
    assert result.stderr.decode() == (
        "Allow Execute: cargo test?\n  $ cargo test\n[y]es, [n]o (n REASON says why): n (no terminal to ask)\n"
    )


def test_failures_from_a_pipe() -> None:
    died = run("--mock", script("die"), stdin=b"x")
    assert died.returncode == 1 and b"ProcessExited" in died.stderr and died.stdout == b"hi\n"
    unknown = run("no-such-agent", stdin=b"x")
    assert unknown.returncode == 1 and b"NotInstalled" in unknown.stderr
    bad_reference = run("{not json", stdin=b"x")
    assert bad_reference.returncode == 2 and b"JSON agent reference" in bad_reference.stderr
    unreadable = run("--mock", "/no/such/script.json", stdin=b"x")
    assert unreadable.returncode == 1 and b"cannot read mock script" in unreadable.stderr


def test_an_unknown_agent_name_suggests_the_closest_catalog_id() -> None:
    result = run("cladue", stdin=b"x")
    assert result.returncode == 1
    assert b"unknown agent: cladue; did you mean claude? (known: mock, claude, codex" in result.stderr
    far = run("zzzzzz", stdin=b"x")
    assert b"did you mean" not in far.stderr and b"unknown agent: zzzzzz (known: mock" in far.stderr


def _tools_file(tmp_path: Path) -> str:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([{"name": "lookup", "description": "Look a word up", "input_schema": {"type": "object"}}]))
    return str(path)


def test_a_tool_call_from_a_pipe_gets_an_error_result(tmp_path: Path) -> None:
    result = run("--mock", script("tools"), "--tools", _tools_file(tmp_path), stdin=b"look it up")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"Looking it up. Done.\n"
    assert result.stderr.decode() == (
        "[mcp agentproto/lookup] lookup (Running)\n"
        'Tool lookup({"word": "agent"}): its result? (no terminal to ask: an error result)\n'
        "[mcp agentproto/lookup] lookup (Failed)\n"
    )
    bad = run("--mock", script("tools"), "--tools", str(tmp_path / "missing.json"), stdin=b"x")
    assert bad.returncode == 1 and b"cannot read tools" in bad.stderr


def test_a_mock_script_with_no_turn_left_says_so_instead_of_hanging(tmp_path: Path) -> None:
    result = run("--mock", write_script(tmp_path, {"turns": []}), stdin=b"anyone there?")
    assert result.returncode == 1 and result.stdout == b""
    assert b"the mock script has no turn left to play: nothing would answer this prompt" in result.stderr


def test_json_prints_the_raw_events(tmp_path: Path) -> None:
    result = run("--json", "--mock", script("turn"), stdin=b"x")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.decode().splitlines()]
    for event in events:
        assert not list(LINE.iter_errors({"event": event}))
    kinds = [next(iter(e["kind"])) if isinstance(e["kind"], dict) else e["kind"] for e in events]
    assert kinds[0] == "TurnStarted" and "RequestOpened" in kinds and kinds[-2:] == ["TurnEnded", "StatusChanged"]
    assert b"Allow Execute" in result.stderr  # asked (and denied) as ever, on stderr


def test_the_turn_ends_with_its_tokens_and_cost_when_known(tmp_path: Path) -> None:
    usage = {"Usage": {"input_tokens": 1234, "cached_input_tokens": 1000, "output_tokens": 56}}
    cost = {"Emit": {"ContextUsage": {"used_tokens": 1290, "window_tokens": 200000, "cost_usd": 0.0123}}}
    result = run("--mock", write_script(tmp_path, {"turns": [[say("hi"), cost, usage, END]]}), stdin=b"x")
    assert result.returncode == 0 and result.stdout == b"hi\n"
    [line] = result.stderr.decode().splitlines()
    assert line.startswith("(1,234 tokens in (1,000 cached), 56 out · $0.0123 so far · ") and line.endswith("s)")
    plain = run("mock", stdin=b"x")
    assert plain.stderr == b""  # the echo mock reports no usage: no line


def test_sigterm_during_a_piped_turn_exits_non_zero(tmp_path: Path) -> None:
    path = write_script(tmp_path, {"turns": [[say("thinking"), {"Sleep": 60000}, END]]})
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentproto", "chat", "--mock", path],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base_env(), cwd=str(ROOT),
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"go")
    proc.stdin.close()
    assert proc.stdout.read(8) == b"thinking"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(GUARD) == 128 + signal.SIGTERM
    assert proc.stderr is not None and b"turn cancelled" in proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()


@pytest.mark.parametrize("env", [{}, {"NO_COLOR": "1"}, {"TERM": "xterm"}])
def test_no_escape_codes_into_pipes(env: dict[str, str]) -> None:
    result = run("--mock", script("turn"), stdin=b"x", env=env)
    assert result.returncode == 0 and b"Allow" in result.stderr
    assert ESC not in result.stdout and ESC not in result.stderr


def test_color_always_colours_stderr_but_no_color_wins() -> None:
    coloured = run("--color", "always", "--mock", script("turn"), stdin=b"x")
    assert b"\x1b[33mAllow Execute" in coloured.stderr and ESC not in coloured.stdout
    plain = run("--color", "always", "--mock", script("turn"), stdin=b"x", env={"NO_COLOR": "1"})
    assert ESC not in plain.stderr


def test_auth_required_prints_the_login_steps_as_text() -> None:
    result = run(acp_agent(), stdin=b"x", env={"ACP_TEST_AUTH": "new"})
    assert result.returncode == 1
    err = result.stderr.decode()
    assert "AuthRequired" in err and "{" not in err.split("AuthRequired", 1)[1]  # no raw JSON
    assert f"run `LOGIN=… {ACP_AGENT} --login` in a terminal" in err
    assert "set TEST_AGENT_KEY in the environment" in err


# -- what a permission shows, and how answers are read ---------------------------------------


def test_what_will_run_shows_the_command_the_files_and_the_url() -> None:
    from agentproto.commands.chat_screen import what_will_run

    command = {"input": {"Command": {"command": "rm -rf build", "cwd": "/src"}}, "diffs": []}
    assert what_will_run(command) == ["$ rm -rf build   (in /src)"]
    edit = {"input": {"Path": "a.py"}, "diffs": [
        {"path": "a.py", "old_text": "one\ntwo\nthree\n", "new_text": "one\n2\nthree\nfour\n"},
        {"path": "b.py", "old_text": None, "new_text": "x\ny\n"}]}
    assert what_will_run(edit) == ["a.py: +2 -1 lines", "b.py: new file, 2 lines"]
    assert what_will_run({"input": {"Url": "https://example.com/x"}, "diffs": []}) == ["URL: https://example.com/x"]
    assert what_will_run({"input": {"Path": "notes.md"}, "diffs": []}) == ["path: notes.md"]
    mcp = {"input": "None", "diffs": [], "raw": {"name": "mcp__s__t", "input": {"q": 1}}}
    assert what_will_run(mcp) == ['{"q": 1}']


def _permission(request_id: str, kind: str, title: str, tool_input: Any, diffs: list[Any]) -> list[Any]:
    tool_body = {"id": f"tool-{request_id}", "kind": kind, "title": title, "status": "Pending", "input": tool_input,
                 "output": None, "diffs": diffs, "locations": [], "raw": None}
    body = {"id": request_id, "tool": tool_body, "options": ["AllowOnce", "AllowAlways", "DenyOnce"], "detail": None}
    return [{"Emit": {"RequestOpened": {"Permission": body}}}, "AwaitAnswer"]


def test_a_permission_shows_the_files_and_diff_summary_of_an_edit_and_the_url_of_a_fetch(tmp_path: Path) -> None:
    """What the agent would do, not only how it describes it: through a real chat."""
    diffs = [{"path": "src/a.py", "old_text": "one\ntwo\nthree\n", "new_text": "one\n2\nthree\nfour\n"},
             {"path": "src/new.py", "old_text": None, "new_text": "x = 1\ny = 2\n"}]
    turn = [*_permission("r1", "Edit", "Tidy the module", {"Path": "src/a.py"}, diffs),
            *_permission("r2", "Fetch", "Read the docs", {"Url": "https://example.com/docs?q=1"}, []),
            say("ok"), END]
    result = run("--mock", write_script(tmp_path, {"turns": [turn]}), stdin=b"tidy up")
    assert result.returncode == 0 and result.stdout == b"ok\n", result.stderr
    keys = "[y]es, [a]lways, [n]o (n REASON says why): n (no terminal to ask)"
    assert result.stderr.decode() == (
        f"Allow Edit: Tidy the module?\n  src/a.py: +2 -1 lines\n  src/new.py: new file, 2 lines\n{keys}\n"
        f"Allow Fetch: Read the docs?\n  URL: https://example.com/docs?q=1\n{keys}\n"
    )


def test_permission_answers() -> None:
    from agentproto.commands.chat_screen import permission_answer

    every = ["AllowOnce", "AllowAlways", "DenyOnce", "DenyAlways"]
    assert permission_answer(every, "y") == {"Permission": "AllowOnce"}
    assert permission_answer(every, "A") == {"Permission": "AllowAlways"}
    assert permission_answer(every, "n") == permission_answer(every, "") == {"Permission": "DenyOnce"}
    assert permission_answer(every, "n  not on main ") == {"Deny": {"message": "not on main"}}
    assert permission_answer(every, "maybe") is None  # asked again
    assert permission_answer(["AllowOnce"], "n") == "Cancel"  # nothing to deny with
    assert permission_answer(["AllowOnce", "DenyAlways"], "a") is None  # not offered
    assert permission_answer(["AllowOnce", "DenyAlways"], "n") == {"Deny": {"message": "denied"}}


def test_question_choices_by_number_or_label() -> None:
    from agentproto.commands.chat_screen import choices_named

    q = {"choices": [{"id": "c-red", "label": "Red"}, {"id": "c-blue", "label": "Blue"}], "multi_select": False}
    assert choices_named(q, "2") == ["c-blue"] and choices_named(q, "red") == ["c-red"]
    assert choices_named(q, "green") == [] and choices_named(q, "3") == []
    several = {**q, "multi_select": True}
    assert choices_named(several, "1, blue") == ["c-red", "c-blue"]


# -- in a terminal ---------------------------------------------------------------------------


def test_a_turn_then_quit(terminals) -> None:
    term = terminals("chat", "mock", env={"NO_COLOR": "1"})
    banner = term.expect("> ")
    assert "Mock · session s1 · in " in banner and "/help" in banner and "Mock mock" not in banner
    term.type("stream this line back\n")
    assert term.expect("> ") == "stream this line back\n"
    term.type("/quit\n")
    assert term.wait() == 0
    assert ESC not in term.output


def test_colour_on_a_terminal_but_not_with_term_dumb_or_no_color(terminals) -> None:
    term = terminals("chat", "mock", env={"TERM": "xterm"})
    term.expect("\x1b[1m> \x1b[0m")
    term.type("\x04")  # Ctrl-D: end of input closes the session
    assert term.wait() == 0
    for env in ({"TERM": "dumb"}, {"TERM": "xterm", "NO_COLOR": "1"}, {"TERM": "xterm", "NO_COLOR": "1"}):
        plain = terminals("chat", "mock", env=env)
        plain.expect("> ")
        plain.type("\x04")
        assert plain.wait() == 0 and ESC not in plain.output, env
    never = terminals("chat", "--color", "never", "mock", env={"TERM": "xterm"})
    never.expect("> ")
    never.type("/quit\n")
    assert never.wait() == 0
    assert b"\x1b[1m" not in never.output and b"\x1b[33m" not in never.output


def test_ctrl_c_at_the_prompt_exits_130(terminals) -> None:
    term = terminals("chat", "mock", env={"NO_COLOR": "1"})
    term.expect("> ")
    # One turn first: the chat's loop is surely running (a Ctrl-C during start-up ends the
    # process through KeyboardInterrupt, 130 either way, and would prove nothing).
    term.type("hi\n")
    assert term.expect("> ") == "hi\n"
    term.type("\x03")
    assert term.wait() == 130


def test_ctrl_c_cancels_a_turn_and_the_prompt_comes_back(terminals, tmp_path: Path) -> None:
    # Turns without an End: each runs until it is cancelled.
    path = write_script(tmp_path, {"turns": [[say(f"thinking {n}", f"m{n}")] for n in (1, 2)]})
    term = terminals("chat", "--mock", path, env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("never ends\n")
    term.expect("thinking 1")
    term.type("\x03")
    assert "turn cancelled" in term.expect("> ")
    term.type("again\n")
    term.expect("thinking 2")
    term.type("/cancel\n")  # the same, as a command
    assert "turn cancelled" in term.expect("> ")
    term.type("\x03")  # at the prompt, Ctrl-C ends the chat
    assert term.wait() == 130


def test_ctrl_c_at_a_question_cancels_and_the_next_line_is_a_prompt(terminals, tmp_path: Path) -> None:
    turn = json.loads(Path(script("turn")).read_text())["turns"][0]
    second = [say("second turn", "m2"), END]
    term = terminals("chat", "--mock", write_script(tmp_path, {"turns": [turn, second]}), env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("run the tests\n")
    term.expect("(n REASON says why): ")
    term.type("\x03")
    assert "turn cancelled" in term.expect("> ")
    term.type("next\n")
    assert term.expect("> ") == "second turn\n"
    term.type("/quit\n")
    assert term.wait() == 0


def test_a_permission_shows_what_will_run_and_yes_lets_it(terminals) -> None:
    term = terminals("chat", "--mock", script("turn"), env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("run the tests\n")
    assert term.expect("[y]es, [n]o (n REASON says why): ") == (
        "Let me check. \nAllow Execute: cargo test?\n  $ cargo test\n"
    )
    term.type("maybe\n")  # not an answer: asked again
    term.expect("answer [y]es, [n]o (n REASON says why): ")
    term.type("y\n")
    assert term.expect("> ") == "Done.\n"
    term.type("/quit\n")
    assert term.wait() == 0


@pytest.mark.parametrize(
    "reply,outcome", [("y", "zz-yes-1"), ("a", "zz-always"), ("n", "zz-no"), ("", "zz-no"), ("n not now", "zz-no")]
)
def test_permission_answers_reach_the_agent(terminals, reply: str, outcome: str) -> None:
    """A real ACP agent (a child process) reports the option it got (ACP carries no reason)."""
    term = terminals("chat", acp_agent(), env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("tool\n")
    assert "[a]lways" in term.expect("(n REASON says why): ")
    term.type(reply + "\n")
    seen = term.expect("> ")
    assert f"outcome: {outcome}" in seen and "InvalidRequest" not in seen
    term.type("/quit\n")
    assert term.wait() == 0
    assert term.descendants, "the ACP agent ran as a child process"


def test_questions_are_asked_one_by_one(terminals) -> None:
    term = terminals("chat", "--json", "--mock", script("question"), env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("go\n")
    assert "[Color] Which color?\n  1) Red  2) Blue\n" in term.expect("(a number or a label; empty cancels) ")
    term.type("green\n")
    term.expect("not one of the choices: green")
    term.expect("(a number or a label; empty cancels) ")
    term.type("blue\n")
    assert "Name it" in term.expect("(your answer; empty cancels) ")
    term.type("Azure\n")
    seen = term.expect("> ")
    closed = [json.loads(line) for line in seen.splitlines() if line.startswith("{")]
    assert any("RequestClosed" in e["kind"] for e in closed if isinstance(e["kind"], dict))
    assert {"TurnEnded": {"stop": {"Completed": {"source": "Protocol"}}, "background": [], "usage": None}} in [
        e["kind"] for e in closed
    ]
    term.type("/quit\n")
    assert term.wait() == 0


def test_the_chat_commands(terminals) -> None:
    term = terminals("chat", "--mock", script("configure"), env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("/help\n")
    helped = term.expect("> ")
    for command in ("/help", "/model", "/mode", "/set OPTION VALUE", "/cancel", "/info", "/quit", "//TEXT"):
        assert command in helped
    term.type("/model\n")
    assert term.expect("> ") == 'model: "sonnet"\n  sonnet  Sonnet\n  opus  Opus\n/model NAME switches\n'
    term.type("/model opus\n")
    assert term.expect("> ") == 'model = "opus"\n'
    term.type("/model gpt\n")
    assert "InvalidConfiguration" in term.expect("> ")
    term.type("/mode\n")
    assert term.expect("> ") == "Mock has no option mode (options: model)\n"
    term.type("/set model\n")
    assert 'model: "opus"' in term.expect("> ")
    term.type("/set\n")
    assert "usage: /set OPTION VALUE" in term.expect("> ")
    term.type("/info\n")
    info = term.expect("> ")
    assert "agent: Mock mock (mock)" in info and "session: s1 in " in info and 'option model: "opus"' in info
    term.type("/cancel\n")
    assert term.expect("> ") == "no turn is running\n"
    term.type("/frobnicate now\n")
    assert term.expect("> ") == "unknown command /frobnicate; /help lists them (// sends a line starting with /)\n"
    term.type("go\n")
    assert term.expect("> ") == "hi\n"
    term.type("//slash reaches the agent\n")  # the script's one turn is spent: refused here
    assert "the mock script has no turn left to play" in term.expect("> ")
    term.type("/quit\n")
    assert term.wait() == 0


def test_a_leading_double_slash_sends_a_slash(terminals) -> None:
    term = terminals("chat", "mock", env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("//compact now\n")
    assert term.expect("> ") == "/compact now\n"  # the echo mock says what it got
    term.type("/quit\n")
    assert term.wait() == 0


def test_the_user_types_a_tool_calls_result(terminals, tmp_path: Path) -> None:
    term = terminals("chat", "--mock", script("tools"), "--tools", _tools_file(tmp_path), env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("look it up\n")
    assert term.expect("its result? ").endswith('Tool lookup({"word": "agent"}): ')
    term.type("one who acts\n")
    assert "[mcp agentproto/lookup] lookup (Completed)\n Done.\n" in term.expect("> ")
    term.type("/quit\n")
    assert term.wait() == 0


def _slow_turn(tmp_path: Path) -> str:
    return write_script(tmp_path, {"turns": [[
        {"Sleep": 1500},
        tool("Running"),
        {"Emit": {"ToolOutputDelta": {"tool_id": "tool-1", "text": "compiling\nrunning 3 tests\n"}}},
        {"Sleep": 1500},
        tool("Completed", output="ok"),
        say("all green"),
        END,
    ]]})


def test_a_spinner_and_one_updating_tool_line_on_a_live_terminal(terminals, tmp_path: Path) -> None:
    term = terminals("chat", "--mock", _slow_turn(tmp_path), env={"TERM": "xterm"})
    term.expect("> ")
    term.type("test it\n")
    term.expect("working…")  # nothing streams yet: the spinner and the time
    term.expect("[Execute] make test (Running) · running 3 tests")  # the tool's line, updated in place
    term.expect("[Execute] make test (Completed)")
    term.expect("all green")
    term.expect("> ")
    term.type("/quit\n")
    assert term.wait() == 0
    text = term.text()
    assert "\r\x1b[K" in text  # drawn and erased in place
    assert "(Running)\n" not in text  # the running tool never became a line of its own


@pytest.mark.parametrize("env", [{"TERM": "dumb"}, {"TERM": "xterm", "NO_COLOR": "1"}])
def test_no_spinner_without_a_live_terminal(terminals, tmp_path: Path, env: dict[str, str]) -> None:
    term = terminals("chat", "--mock", _slow_turn(tmp_path), env=env)
    term.expect("> ")
    term.type("test it\n")
    assert term.expect("> ") == "[Execute] make test (Running)\n[Execute] make test (Completed)\nall green\n"
    term.type("/quit\n")
    assert term.wait() == 0
    assert "working…" not in term.text() and "\r" not in term.text().replace("\r\n", "\n")


def test_no_spinner_into_a_pipe(tmp_path: Path) -> None:
    result = run("--mock", _slow_turn(tmp_path), stdin=b"x", env={"TERM": "xterm"})
    assert result.returncode == 0 and result.stdout == b"all green\n"
    assert result.stderr == b"[Execute] make test (Running)\n[Execute] make test (Completed)\n"


def test_an_exhausted_mock_script_answers_at_the_prompt(terminals, tmp_path: Path) -> None:
    term = terminals("chat", "--mock", write_script(tmp_path, {"turns": [[say("only once"), END]]}),
                     env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("first\n")
    assert term.expect("> ") == "only once\n"
    term.type("second\n")
    assert term.expect("> ") == (
        "the mock script has no turn left to play: nothing would answer this prompt (/quit ends the chat)\n"
    )
    term.type("/quit\n")
    assert term.wait() == 0


def test_sigterm_in_a_terminal_exits_143(terminals) -> None:
    term = terminals("chat", "mock", env={"NO_COLOR": "1"})
    term.expect("> ")
    os.kill(term.proc.pid, signal.SIGTERM)
    assert term.wait() == 128 + signal.SIGTERM


def test_a_prompt_typed_during_a_turn_runs_next_and_the_prompt_waits_for_it(terminals, tmp_path: Path) -> None:
    turns = [[say("one"), {"Sleep": 2000}, END], [say("two", "m2"), END]]
    term = terminals("chat", "--mock", write_script(tmp_path, {"turns": turns}), env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("first\n")
    term.expect("one")
    # Typed while turn one runs: queued behind it, and shown so in the transcript, on a line
    # of its own (not glued to turn one's answer).
    term.type("second\n")
    # No prompt between the two turns: it comes after two.
    assert term.expect("> ") == "\n» second  (queued)\ntwo\n"
    term.type("/quit\n")
    assert term.wait() == 0


def test_a_steered_prompt_spends_no_turn_of_the_mock_script(terminals, tmp_path: Path) -> None:
    """With ``steer``, a prompt typed during a turn joins it: the script's next turn is still there."""
    turns = [[say("one"), {"Sleep": 2000}, END], [say("two", "m2"), END]]
    term = terminals("chat", "--mock", write_script(tmp_path, {"steer": True, "turns": turns}), env={"NO_COLOR": "1"})
    term.expect("> ")
    term.type("first\n")
    term.expect("one")
    term.type("and also this\n")  # steered into the running turn
    term.expect("> ")
    term.type("next\n")
    assert term.expect("> ") == "two\n"
    term.type("/quit\n")
    assert term.wait() == 0


def test_the_terminal_hanging_up_mid_turn_ends_the_chat_with_129_and_nothing_left(terminals, tmp_path: Path) -> None:  # noqa: F811
    """The terminal goes away (its master closed: the kernel sends SIGHUP) while a turn runs
    on a real agent that ignores SIGTERM and the end of its input and has detached a process
    of its own: chat ends with 128 + SIGHUP, and every process it started is gone (the
    agent's close sequence: its stdin closed, SIGTERM, then SIGKILL)."""
    from lifetime_support import STUBBORN, assert_all_gone, wait_for_pids

    pids = tmp_path / "pids"
    agent = json.dumps({"acp": {"name": "stubborn", "path": STUBBORN, "args": []}})
    term = terminals("chat", agent, env={"NO_COLOR": "1", "STUBBORN": "detach,ignore-term,ignore-eof",
                                         "STUBBORN_PIDS": str(pids)}, cwd=str(tmp_path))  # fmt: skip
    term.expect("> ")
    term.type("hello there\r")
    started = wait_for_pids(pids, 2)
    term.note_descendants()
    os.close(term.master)  # the hang-up
    term.master = os.open(os.devnull, os.O_RDONLY)  # what Terminal.close closes
    assert term.proc.wait(GUARD) == 128 + signal.SIGHUP
    assert_all_gone(started + sorted(term.descendants))


def test_an_answer_into_a_full_stdout_is_not_tried_again_per_delta(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression (test_cli's ``test_sigterm_ends_a_command_whose_reader_stopped_reading[chat]``
    was flaky): each delta retried the write of a full stdout, and each try copied up to
    WRITE_CHUNK of what was queued. A flood into a pipe nobody read cost the square of its
    size (seconds for 5000 deltas on a loaded machine), and SIGTERM waited for all of it.
    Now the first try finds the pipe full, and the loop writes the rest when it takes more."""
    from agentproto.commands.chat_screen import Screen
    from agentproto.loopio.loop import Loop, SystemIO
    from agentproto.loopio.streams import WRITE_CHUNK

    class Counting(SystemIO):
        offered = 0  # bytes handed to write(), taken or not

        def write(self, fd: int, data: bytes | memoryview) -> int:
            self.offered += len(data)
            return super().write(fd, data)

    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"f" * 4096)  # nobody reads: the pipe fills
    except BlockingIOError:
        pass
    io = Counting()
    loop = Loop(io)
    with os.fdopen(w, "w", closefd=False) as stdout:
        monkeypatch.setattr(sys, "stdout", stdout)
        screen = Screen(loop, "never", lambda _exc: None)
    deltas = 3000
    for _ in range(deltas):
        screen.answer("y" * 100)
    assert io.offered <= WRITE_CHUNK, io.offered  # unfixed: 443 MB, one try per delta
    # Nothing is lost: once the reader reads, the loop writes every delta.
    os.set_blocking(r, False)
    got = bytearray()

    def read_all() -> bool:
        try:
            got.extend(os.read(r, 1 << 20))
        except BlockingIOError:
            pass
        return got.count(b"y") == deltas * 100

    loop.run(until=read_all)
    assert got.count(b"y") == deltas * 100
    screen.out.close()
    loop.close()
    os.close(r)
    os.close(w)


def test_a_policy_answers_before_chat_asks(tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps([{"action": "allow", "command": ["cargo test"]}]))
    result = run("--mock", script("turn"), "--policy", str(policy), stdin=b"x")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"Let me check. Done.\n"
    assert result.stderr == b"[policy rule 0: allow] cargo test\n"  # nothing asked
    bad = run("--mock", script("turn"), "--policy", str(tmp_path / "missing.json"), stdin=b"x")
    assert bad.returncode == 1 and b"cannot read policy" in bad.stderr
