"""The real pinned Claude Code ACP adapter (``claude-agent-acp``,
@zed-industries/claude-agent-acp 0.23.1, Claude Code built in) through ``serve``, against
the fake Messages API on 127.0.0.1 (tests/fakes/fake_anthropic.py): what is the adapter's
own, cancel mid-stream and while a permission is pending, where it answers the prompts
after a cancel late. The scenarios it shares with the other ACP agents (probe, a streamed
turn, a shell command behind a permission, files, EOF, the app's tool) are
test_acp_scenarios_real.py's.

The adapter runs its tools itself (Claude Code's Bash, Read, Write: no fs/* nor terminal/*).
"""

from __future__ import annotations

import pytest

from acp_real_support import ClaudeAcpWorld, running, stop_of, texts
from fake_anthropic import text, tool_use
from sidecar import kind_name


@pytest.fixture
def world(tmp_path):
    with running(ClaudeAcpWorld, tmp_path) as w:
        yield w


@pytest.fixture
def api(world):
    return world.api


def answered_after_a_cancel(world: ClaudeAcpWorld, session: str, expected: str) -> None:
    """The adapter's own bug (0.23.1): the prompt that follows a cancel ends at once,
    ``end_turn`` with 0 tokens and no text, and each answer then comes a prompt late (how
    late depends on timing: seen one and two prompts behind under load). What holds: every
    turn completes and the answers arrive in order, none lost, within three prompts."""
    world.prompt(session, "again")
    events = world.turn(session)
    assert stop_of(events) == "Completed" and texts(events) == ""
    assert events[-1]["kind"]["TurnEnded"]["usage"]["output_tokens"] == 0
    seen = ""
    for prompt in ("and again", "once more"):
        world.prompt(session, prompt)
        events = world.turn(session)
        assert stop_of(events) == "Completed"
        seen += texts(events)
        assert (expected + "ok").startswith(seen), seen
        if seen == expected + "ok":
            break
    assert seen == expected + "ok"


def test_cancel_mid_stream(world, api):
    api.push(text("partial answer that hangs", hang=60), text("after the cancel"), text("ok"))
    session = world.open()["id"]
    world.prompt(session, "talk slowly")
    world.next_event(session, "TextDelta")
    world.sc.ok({"cmd": "cancel", "session": session})
    assert stop_of(world.turn(session)) == "Cancelled"
    answered_after_a_cancel(world, session, "after the cancel")


def test_cancel_while_a_permission_is_pending(world, api):
    api.push(tool_use("Bash", {"command": "echo no > never.txt", "description": "x"}), text("next"), text("ok"))
    session = world.open()["id"]
    world.prompt(session, "make the file")
    world.request(session)
    world.sc.ok({"cmd": "cancel", "session": session})
    events = world.turn(session)
    assert stop_of(events) == "Cancelled"
    assert "RequestClosed" in [kind_name(e["kind"]) for e in events]
    assert not (world.work / "never.txt").exists()
    answered_after_a_cancel(world, session, "next")
