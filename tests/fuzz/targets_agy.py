"""Fuzz target: what ``agy`` writes (seed 003's stream-json), read by the real Antigravity
driver through the real runtime and engine, with the app prompting, cancelling and
switching models in between.

The contract: no agy line makes the driver raise (the line guard's "skipped a line it
could not handle" never shows), every event is valid protocol 1 and keeps the engine's
ordering promises (as the mock's player checks them), every command gets exactly one
reply, and the session closes exactly once with its directory gone.
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
from typing import Any

from fuzz.gen import json_values
from fuzz.harness import target
from fuzz.targets_mock import check_invariants
from hypothesis import strategies as st

from agentproto.loopio import private
from agentproto.core.errors import AgentError
from scripted import NEVER_RUN, Conversation

CONVERSATION = "c0ffee00-0000-4000-8000-000000000000"
maybe = st.none() | json_values


@st.composite
def _perturbed(draw: Any, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` as agy writes it, or with one member retyped or dropped (a newer or broken
    agy): one injury at a time keeps the rest of the line meaningful to the driver."""
    roll = draw(st.integers(0, 3))
    if roll >= 2:
        return base
    key = draw(st.sampled_from(sorted(base)))
    if roll == 0:
        base[key] = draw(json_values)
    else:
        del base[key]
    return base


@st.composite
def agy_line(draw: Any) -> str:
    kind = draw(st.sampled_from(["step"] * 6 + ["result", "init", "garbage", "value"]))
    if kind == "garbage":
        return draw(st.sampled_from(["not json", "{", "[1, 2]", "", '{"event": 5}', '{"event": "result"}']))
    if kind == "value":
        return json.dumps(draw(json_values))
    if kind == "init":
        body = draw(_perturbed({"model": draw(st.sampled_from(["m-a", "m-b"])), "cwd": "/"}))
        return json.dumps({"event": "init", "conversation_id": CONVERSATION, "init": body})
    if kind == "result":
        body = draw(_perturbed({
            "conversation_id": CONVERSATION,
            "status": draw(st.sampled_from(["SUCCESS", "ERROR"])),
            "error": draw(st.sampled_from(["interrupted", "boom"])),
            "usage": {"input_tokens": draw(st.integers(0, 9)), "total_tokens": draw(st.integers(0, 9))},
            "denied_actions": [{"action": "x"}],
        }))
        return json.dumps({"event": "result", "result": body})
    name = draw(st.sampled_from(["run_command", "view_file", "call_mcp_tool", "write_to_file", "grep_search", "new"]))
    params = draw(_perturbed({"CommandLine": "ls", "AbsolutePath": "/a", "ServerName": "agentproto_agentproto",
                              "ToolName": "t", "Query": "q"}))
    info = draw(_perturbed({"name": name, "parameters": params, "output": "out",
                            "error": {"type": "TOOL_ERROR", "message": "m"}}))
    body = draw(_perturbed({
        "conversation_id": CONVERSATION,
        "step_index": draw(st.integers(0, 4)),
        "state": draw(st.sampled_from(["ACTIVE", "DONE", "ERROR", "NEW"])),
        "step_type": draw(st.sampled_from(["user_input", "agent_response", "tool", "tool", "system_message", "new"])),
        "text_delta": draw(st.text(max_size=4)),
        "tool_name": name,
        "tool_info": info,
        "usage": {"input_tokens": draw(st.integers(0, 9)), "output_tokens": 1},
        "text": "note",
    }))
    return json.dumps({"event": "step_update", "step_update": body})


def _action(kind: str) -> st.SearchStrategy[tuple[str, Any]]:
    if kind == "read":
        return st.lists(agy_line(), min_size=1, max_size=4).map(lambda lines: ("read", lines))
    if kind == "model":
        return st.sampled_from(["m-a", "m-b", "m-c"]).map(lambda model: ("model", model))
    return st.just((kind, None))


#: Mostly agy's lines, and the app's commands between them (an exit ends it all: rarely).
actions = st.sampled_from(["read"] * 8 + ["prompt"] * 3 + ["cancel"] * 2 + ["model"] * 2 + ["exit"]).flatmap(_action)


def _directories() -> set[str]:
    """The agy session directories in this process's private area (other processes on the
    machine have their own areas, and their own sessions come and go)."""
    marker = private.session_dir("fuzz")
    private.remove_tree(marker)
    return set(glob.glob(os.path.join(os.path.dirname(marker), "agy-*")))


@target("agy_lines", st.lists(actions, max_size=10), examples=100)
def agy_lines(plan: list[tuple[str, Any]]) -> None:
    """agy's stream read by the agy driver: no line raises, the engine's promises hold."""
    before = _directories()
    stderr = io.StringIO()
    conv = Conversation()
    try:
        with contextlib.redirect_stderr(stderr):
            _play(conv, plan)
    finally:
        conv.runtime.close_all()
        conv.settle()
        conv.loop.close()
    assert "Traceback" not in stderr.getvalue(), stderr.getvalue()[-3000:]
    assert _directories() <= before, "a session directory outlived its session"


def _play(conv: Conversation, plan: list[tuple[str, Any]]) -> None:
    sent: list[str] = []

    def command(name: str, **args: Any) -> None:
        sent.append(name)
        conv.command(name, **args)

    command("open", agent={"id": "agy", "path": NEVER_RUN}, dir="/")
    conv.feed(json.dumps({"event": "init", "conversation_id": CONVERSATION, "init": {"model": "m-a"}}))
    if conv.session_id is None:
        return
    command("prompt", text="go")  # most lines only count inside a turn
    for action, value in plan:
        if ("closed",) in conv.out:
            break
        if action == "read":
            conv.feed(*value)
        elif action == "prompt":
            command("prompt", text="go")
        elif action == "cancel":
            command("cancel")
        elif action == "model":
            command("configure", option="model", value=value)
        else:
            conv.transport.exit("1", "agy: gone")
            conv.settle()
        # A process asked to go (cancel, a model switch) goes; its successor says init.
        if conv.transport.signals or conv.transport.stdin_closed:
            if not conv.transport.exited:
                conv.transport.exit("130")
                conv.settle()
            if ("closed",) not in conv.out and conv.transport.exited:
                conv.feed(json.dumps({"event": "init", "conversation_id": CONVERSATION, "init": {"model": "m-b"}}))
    if ("closed",) not in conv.out:
        command("close")
    conv.run_until(lambda: ("closed",) in conv.out, 10)
    conv.settle()
    replied = [o[1] for o in conv.out if o[0] == "reply"]
    unanswered = [name for name in sent if name not in replied]
    # A configure waits for the new process: the close answers it (SessionClosed) if not.
    assert not unanswered, f"commands without a reply: {unanswered}"
    assert len(replied) == len(sent), f"sent {sent}, replied {replied}"
    skipped = [d for d in conv.diagnostics() if "could not handle" in d]
    assert not skipped, skipped
    for error in conv.errors():
        assert isinstance(error, AgentError)
    check_invariants([o if o[0] != "error" else ("error", o[1].kind) for o in conv.out if o[0] != "reply"])
    assert not conv.runtime.sessions, "a session outlived its close"
