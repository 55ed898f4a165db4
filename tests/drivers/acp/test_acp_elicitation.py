"""ACP 1.7's elicitation and request cancellation, end to end through ``serve`` and the
SDK-built test agent: ``elicitation/create`` (form mode) is a protocol-1 ``Question``;
``$/cancel_request`` withdraws what the agent asked, and agentproto sends one for a prompt
it stops waiting for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sidecar import Sidecar
from tests.drivers.acp.test_acp import agent_ref, close, of_kind, open_session, texts


@pytest.fixture
def sidecar():
    with Sidecar() as sc:
        yield sc


def ask(sc: Sidecar, session: str, text: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    sc.ok({"cmd": "prompt", "session": session, "text": text})
    events = sc.events(session, "RequestOpened", 30)
    return events, events[-1]["kind"]["RequestOpened"]


def test_a_form_elicitation_is_a_question_and_its_answer_typed_content(sidecar: Sidecar, tmp_path: Path) -> None:
    info = open_session(sidecar, tmp_path)
    session = info["id"]
    events, opened = ask(sidecar, session, "elicit")
    question = opened["Question"]
    # The agent asks questions: the capability is learned (SessionUpdated), as ContextUsage is.
    updated = [e["kind"]["SessionUpdated"] for e in events if "SessionUpdated" in e["kind"]]
    assert "Questions" not in info["details"]["capabilities"]["features"]
    assert "Questions" in updated[-1]["details"]["capabilities"]["features"]
    assert [q["id"] for q in question["questions"]] == ["strategy", "areas", "tests", "budget", "note"]
    strategy, areas, tests, budget, note = question["questions"]
    assert strategy == {
        "id": "strategy", "text": "Strategy", "header": "How should I refactor?",
        "choices": [{"id": "safe", "label": "Safe"}, {"id": "bold", "label": "Bold"}],
        "multi_select": False, "allows_free_text": False,
    }
    assert areas["choices"] == [{"id": "api", "label": "API"}, {"id": "ui", "label": "UI"}] and areas["multi_select"]
    assert tests["text"] == "Write tests?" and [c["id"] for c in tests["choices"]] == ["true", "false"]
    assert budget["allows_free_text"] and budget["choices"] == [] and note["allows_free_text"]
    # The session waits for the app meanwhile.
    answer = {"Question": [{"Choices": ["bold"]}, {"Choices": ["api", "ui"]}, {"Choices": ["false"]},
                           {"Text": " 12 "}, {"Text": "carefully"}]}
    sidecar.ok({"cmd": "answer", "session": session, "request": question["id"], "answer": answer})
    events = sidecar.events(session, "TurnEnded", 30)
    assert {"request_id": question["id"]} in of_kind(events, "RequestClosed")
    assert json.loads(texts(events)) == {
        "action": "accept",
        "content": {"strategy": "bold", "areas": ["api", "ui"], "tests": False, "budget": 12, "note": "carefully"},
    }
    close(sidecar, session)


def test_a_cancelled_question_and_a_cancelled_turn_answer_cancel(sidecar: Sidecar, tmp_path: Path) -> None:
    session = open_session(sidecar, tmp_path)["id"]
    _, opened = ask(sidecar, session, "elicit")
    sidecar.ok({"cmd": "answer", "session": session, "request": opened["Question"]["id"], "answer": "Cancel"})
    assert json.loads(texts(sidecar.events(session, "TurnEnded", 30))) == {"action": "cancel"}
    _, opened = ask(sidecar, session, "elicit")
    sidecar.ok({"cmd": "cancel", "session": session})
    events = sidecar.events(session, "TurnEnded", 30)
    assert {"request_id": opened["Question"]["id"]} in of_kind(events, "RequestClosed")
    close(sidecar, session)


def test_a_url_elicitation_is_refused_invalid_params(sidecar: Sidecar, tmp_path: Path) -> None:
    session = open_session(sidecar, tmp_path)["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "elicit url"})
    events = sidecar.events(session, "TurnEnded", 30)
    assert not of_kind(events, "RequestOpened")
    assert json.loads(texts(events)) == {"error": -32602}
    close(sidecar, session)


@pytest.mark.parametrize("what", ["permission", "elicit"])
def test_the_agents_cancel_request_withdraws_what_it_asked(sidecar: Sidecar, tmp_path: Path, what: str) -> None:
    session = open_session(sidecar, tmp_path)["id"]
    _, opened = ask(sidecar, session, "withdraw" if what == "permission" else "withdraw elicit")
    request_id = (opened.get("Permission") or opened["Question"])["id"]
    events = sidecar.events(session, "TurnEnded", 30)
    # Closed for the app, answered -32800 ("Request cancelled") to the agent, the turn goes on.
    assert of_kind(events, "RequestClosed") == [{"request_id": request_id}]
    assert texts(events) == "error -32800"
    assert "Completed" in of_kind(events, "TurnEnded")[0]["stop"]
    error = sidecar.error({"cmd": "answer", "session": session, "request": request_id, "answer": "Cancel"})
    assert error["kind"] == "InvalidRequest"
    close(sidecar, session)


def test_a_prompt_given_up_on_is_cancelled_with_cancel_request(sidecar: Sidecar, tmp_path: Path) -> None:
    wire = tmp_path / "wire.ndjson"
    session = open_session(sidecar, tmp_path, env={"AGENTPROTO_ACP_TURN_TIMEOUT": "1"}, record_wire=str(wire))["id"]
    sidecar.ok({"cmd": "prompt", "session": session, "text": "hang"})
    sidecar.events(session, "TurnEnded", 30)
    close(sidecar, session)
    sent = [json.loads(json.loads(r)["line"]) for r in wire.read_text().splitlines() if '"to_agent"' in r]
    prompt = next(m for m in sent if m.get("method") == "session/prompt")
    assert {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": prompt["id"]}} in sent


def test_elicitation_form_mode_is_advertised(tmp_path: Path) -> None:
    wire = tmp_path / "wire.ndjson"
    with Sidecar() as sc:
        sc.ok({"cmd": "open", "agent": agent_ref(), "dir": str(tmp_path), "record_wire": str(wire)}, timeout=30)
    sent = [json.loads(json.loads(r)["line"]) for r in wire.read_text().splitlines() if '"to_agent"' in r]
    assert sent[0]["params"]["clientCapabilities"]["elicitation"] == {"form": {}}


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({}, "elicitation mode None is not supported (agentproto advertises form only)"),
        ({"mode": "form"}, "requestedSchema: a form needs an object schema with properties"),
        ({"mode": "form", "requestedSchema": {"properties": []}}, "requestedSchema: a form needs"),
        ({"mode": "form", "requestedSchema": {"properties": {"a": 3}}}, "requestedSchema.properties.a: not a schema"),
        ({"mode": "form", "requestedSchema": {"properties": {"a": {"type": "object"}}}},
         "requestedSchema.properties.a: type 'object' is not one a form may ask"),
        ({"mode": "form", "requestedSchema": {"properties": {"a": {"type": "array", "items": 1}}}},
         "requestedSchema.properties.a: type 'array' is not one a form may ask"),
    ],
)
def test_a_form_that_cannot_be_a_question_is_refused_naming_why(params: dict[str, Any], why: str) -> None:
    from agentproto.drivers.acp.elicitation import question_of

    assert str(question_of("elicit-1", params)).startswith(why)


def test_odd_but_valid_properties_still_make_questions() -> None:
    from agentproto.drivers.acp.elicitation import question_of, response_of

    params = {"mode": "form", "requestedSchema": {"properties": {
        "n": {"type": "number", "title": 7},           # a title that is not text: the name
        "e": {"type": "string", "enum": ["x", 2]},      # an enum of not only strings: free text
        "c": {"enum": ["a", "b"]},                      # no type, an enum: a choice
    }}}  # fmt: skip
    question = question_of("elicit-1", params)
    assert isinstance(question, dict)
    assert [(q["text"], q["allows_free_text"], len(q["choices"])) for q in question["questions"]] == [
        ("n", True, 0), ("e", True, 0), ("c", False, 2)]  # fmt: skip
    answer = {"Question": [{"Text": "1.5e3"}, {"Text": "two"}, {"Choices": ["b"]}]}
    assert response_of(params, answer) == {"action": "accept", "content": {"n": 1500.0, "e": "two", "c": "b"}}
    assert response_of(params, {"Question": [{"Text": "lots"}, {"Text": ""}, {"Choices": ["a"]}]})["content"]["n"] == "lots"
