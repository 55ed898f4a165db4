"""``output_schema`` on Codex, and the ``OutputSchema`` capability (anyagent HEAD's).

The real pinned ``codex app-server`` against the fake Responses API on 127.0.0.1. Codex is
the agent that honours an open's ``output_schema`` natively: every ``turn/start`` carries
it as ``outputSchema`` and Codex sends it to the model API as the response's JSON Schema
format. So a Codex session (probe, open, generate) that was given one lists
``OutputSchema`` in its features, and one that was not lists no such value (anyagent's
clients never send ``output_schema``, and so never read a Capability their schema lacks).
"""

from __future__ import annotations

from typing import Any

import pytest

import fake_openai as fo
from agentproto.client import Runtime
from sidecar import Sidecar, base_env, kind_name

SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}},
    "required": ["title"],
    "additionalProperties": False,
}


@pytest.fixture
def world(tmp_path):
    w = fo.CodexWorld(str(tmp_path))
    yield w
    w.close()


def features(details: dict[str, Any]) -> list[str]:
    return list(details["capabilities"]["features"])


def schema_sent(request: fo.Request) -> Any:
    """The JSON Schema the model API was asked to answer in (the Responses API's
    ``text.format``), or None."""
    text = (request.body or {}).get("text") or {}
    fmt = text.get("format") or {}
    return fmt.get("schema") if fmt.get("type") == "json_schema" else None


def test_probe_lists_output_schema_only_when_given_one(world):
    # reference=False: a line carrying OutputSchema is ours (the reference's Capability lacks it).
    with Sidecar(env=world.env, reference=False) as sc:
        plain = sc.ok({"cmd": "probe", "agent": "codex", "dir": world.work}, timeout=60)
        assert "OutputSchema" not in features(plain)
        given = sc.ok({"cmd": "probe", "agent": "codex", "dir": world.work, "output_schema": SCHEMA}, timeout=60)
        assert "OutputSchema" in features(given)
        assert set(features(plain)) == set(features(given)) - {"OutputSchema"}
    assert world.wait_no_codex() == []


def test_open_with_output_schema_constrains_every_turn(world):
    world.api.script(fo.text('{"title": "Fix the parser"}'), fo.text('{"title": "Again"}'))
    with Sidecar(env=world.env, reference=False) as sc:
        info = sc.ok({"cmd": "open", "agent": "codex", "dir": world.work, "output_schema": SCHEMA}, timeout=60)
        assert "OutputSchema" in features(info["details"])
        session = info["id"]
        for text in ("name it", "once more"):
            sc.ok({"cmd": "prompt", "session": session, "text": text})
            events = sc.events(session, "TurnEnded", timeout=60)
            assert events[-1]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}
        turns = [r for r in world.api.response_requests() if r.user_texts()]
        assert len(turns) == 2
        assert all(schema_sent(r) == SCHEMA for r in turns), [r.body.get("text") for r in turns]
        sc.ok({"cmd": "close", "session": session}, timeout=30)
    assert world.wait_no_codex() == []


def test_open_without_output_schema_sends_none(world):
    world.api.script(fo.text("free text"))
    with Sidecar(env=world.env) as sc:  # every line also a reference line: no OutputSchema
        info = sc.ok({"cmd": "open", "agent": "codex", "dir": world.work}, timeout=60)
        assert "OutputSchema" not in features(info["details"])
        sc.ok({"cmd": "prompt", "session": info["id"], "text": "hi"})
        sc.events(info["id"], "TurnEnded", timeout=60)
        turn = [r for r in world.api.response_requests() if r.user_texts()][-1]
        assert schema_sent(turn) is None
        sc.ok({"cmd": "close", "session": info["id"]}, timeout=30)


def test_python_client_generate_and_open_with_output_schema(world):
    world.api.script(fo.text('{"title": "A title"}'), fo.text('{"title": "Open"}'))
    with Runtime.start(env=base_env(world.env)) as rt:
        assert rt.generate("codex", "title this", dir=world.work, output_schema=SCHEMA) == '{"title": "A title"}'
        session = rt.open("codex", dir=world.work, output_schema=SCHEMA)
        assert "OutputSchema" in session.info["details"]["capabilities"]["features"]
        session.prompt("and this")
        for event in session.events(timeout=60):
            if kind_name(event["kind"]) == "TurnEnded":
                break
        session.close()
    turns = [r for r in world.api.response_requests() if r.user_texts()]
    assert [schema_sent(r) for r in turns] == [SCHEMA, SCHEMA]
    assert world.wait_no_codex() == []
