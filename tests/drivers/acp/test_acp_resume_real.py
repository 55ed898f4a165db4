"""Resume across a sidecar restart, per real ACP agent: a session whose sidecar ended by
SIGTERM resumes in a new sidecar (same HOME, as a restarted service would be) from its
``resume_token``, and the model's next request carries the earlier conversation.

Gemini CLI 0.61.0 is not here: it records the conversation under another id than the ACP
session id it answers session/new with (two chat files at session/new, the prompts in the
second), so session/load of that id finds no conversation ("No previous sessions found for
this project."). docs/agents.md says so.

And codex-acp killed while its turn waits out the API's 429 (``retry``): a new codex-acp
resumes the session and takes the same turn (engine/restart.py)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from acp_real_support import AcpWorld, ClaudeAcpWorld, CodexAcpWorld, OpencodeWorld, QwenWorld, running, stop_of, texts
from sidecar import Sidecar, kill_each

RESUMING = [ClaudeAcpWorld, CodexAcpWorld, OpencodeWorld, QwenWorld]


@pytest.mark.parametrize("world_class", RESUMING, ids=[w.ID for w in RESUMING])
def test_a_session_resumes_in_a_new_sidecar_after_sigterm(world_class: type[AcpWorld], tmp_path: Path) -> None:
    with running(world_class, tmp_path) as world:
        world.script(world.say("noted"))
        info = world.open()
        session, token = info["id"], info["resume_token"]
        assert token
        world.prompt(session, "remember the word kumquat")
        assert texts(world.turn(session)) == "noted"
        world.sc.proc.send_signal(signal.SIGTERM)
        assert world.sc.proc.wait(60) is not None
        world.sc.close()
        assert world.wait_gone() == [], "SIGTERM left agent processes behind"
        world.sc = Sidecar(env=world.env, reference=False)
        world.script(world.say("it was kumquat"))
        resumed = world.open(resume=token)
        assert resumed["resume_token"] == token
        world.prompt(resumed["id"], "which word?")
        events = world.turn(resumed["id"])
        assert stop_of(events) == "Completed" and texts(events) == "it was kumquat"
        body = json.dumps(world.request_body(-1))
        assert "remember the word kumquat" in body and "which word?" in body


def test_codex_acp_killed_while_its_turn_waits_out_a_rate_limit_is_resumed_and_the_turn_sent_again(
    tmp_path: Path,
) -> None:
    # codex-acp's Codex gives up on the API's 429 (no retries in its config); agentproto waits
    # (5 s: no reset named) and the adapter is killed meanwhile: a new one resumes the session.
    import fake_openai

    with running(CodexAcpWorld, tmp_path) as world:
        world.script(world.say("noted"), fake_openai.Error(429, "Rate limit reached."), world.say("after the restart"))
        info = world.open(retry={"max_wait_s": 60})
        session, token = info["id"], info["resume_token"]
        world.prompt(session, "remember the word kumquat")
        assert texts(world.turn(session)) == "noted"
        world.prompt(session, "which word?")
        world.sc.wait_for(lambda line: "event" in line and "retry" in line["event"]["extensions"].get("agentproto", {}), 60)
        first = world.processes()
        assert kill_each(first), first
        events = world.turn(session)
        assert stop_of(events) == "Completed" and texts(events) == "after the restart", events[-1]
        restarts = [e["extensions"]["agentproto"]["restart"] for e in events
                    if "restart" in e["extensions"].get("agentproto", {})]  # fmt: skip
        assert restarts == [{"status": "SIGKILL", "process": 2, "resume_token": token}], restarts
        body = json.dumps(world.request_body(-1))
        assert "remember the word kumquat" in body and "which word?" in body
        world.close_session(session)
