"""Resume across a sidecar restart, per real ACP agent: a session whose sidecar ended by
SIGTERM resumes in a new sidecar (same HOME, as a restarted service would be) from its
``resume_token``, and the model's next request carries the earlier conversation.

Gemini CLI 0.61.0 is not here: it records the conversation under another id than the ACP
session id it answers session/new with (two chat files at session/new, the prompts in the
second), so session/load of that id finds no conversation ("No previous sessions found for
this project."). docs/agents.md says so."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from acp_real_support import AcpWorld, ClaudeAcpWorld, CodexAcpWorld, OpencodeWorld, QwenWorld, running, stop_of, texts
from sidecar import Sidecar

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
