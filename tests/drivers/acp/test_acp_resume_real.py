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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import fake_anthropic
import fake_chat
import fake_openai
from acp_real_support import AcpWorld, ClaudeAcpWorld, CodexAcpWorld, OpencodeWorld, QwenWorld, stop_of, texts
from sidecar import Sidecar


def claude(tmp: Path) -> tuple[AcpWorld, Callable[[str], None], Callable[[], Any], Callable[[], None]]:
    api = fake_anthropic.FakeAnthropic().start()
    return (
        ClaudeAcpWorld(tmp, api),
        lambda answer: api.push(fake_anthropic.text(answer)),
        lambda: api.main_requests()[-1].body,
        api.stop,
    )


def codex(tmp: Path) -> tuple[AcpWorld, Callable[[str], None], Callable[[], Any], Callable[[], None]]:
    api = fake_openai.FakeOpenAI()
    return (
        CodexAcpWorld(tmp, api),
        lambda answer: api.script(fake_openai.text(answer)),
        lambda: api.response_requests()[-1].body,
        api.close,
    )


def chat(world_class: Any) -> Callable[[Path], Any]:
    def make(tmp: Path) -> tuple[AcpWorld, Callable[[str], None], Callable[[], Any], Callable[[], None]]:
        api = fake_chat.FakeChat()
        return (
            world_class(tmp, api),
            lambda answer: api.script(fake_chat.text(answer)),
            lambda: api.turns()[-1].body,
            api.close,
        )

    return make


AGENTS = {"claude-acp": claude, "codex-acp": codex, "qwen": chat(QwenWorld), "opencode": chat(OpencodeWorld)}


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_a_session_resumes_in_a_new_sidecar_after_sigterm(agent: str, tmp_path: Path) -> None:
    world, answer, last_request, stop = AGENTS[agent](tmp_path)
    try:
        answer("noted")
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
        answer("it was kumquat")
        resumed = world.open(resume=token)
        assert resumed["resume_token"] == token
        world.prompt(resumed["id"], "which word?")
        events = world.turn(resumed["id"])
        assert stop_of(events) == "Completed" and texts(events) == "it was kumquat"
        body = json.dumps(last_request())
        assert "remember the word kumquat" in body and "which word?" in body
    finally:
        try:
            world.close()
        finally:
            stop()
