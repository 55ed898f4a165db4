"""Answers to an agent's requests (agentproto/core/answers.py), without I/O: the app's answer
checked against the request, and the answers agentproto gives by itself."""

from __future__ import annotations

from typing import Any

import pytest

from agentproto.core.answers import auto_answer, check_answer, hands_off_answer, request_id_of


def permission(options: list[str], tool_kind: str = "Execute") -> dict[str, Any]:
    return {"Permission": {"id": "r1", "tool": {"kind": tool_kind}, "options": options}}


def question(*questions: dict[str, Any]) -> dict[str, Any]:
    return {"Question": {"id": "q1", "questions": list(questions)}}


PICK = {"id": "a", "choices": [{"id": "x"}, {"id": "y"}]}
FREE = {"id": "b", "allows_free_text": True}
ALL = ["AllowOnce", "AllowAlways", "DenyOnce", "DenyAlways"]


def test_request_ids() -> None:
    assert request_id_of(permission(ALL)) == "r1" and request_id_of(question(PICK)) == "q1"


@pytest.mark.parametrize(
    ("request_", "mode", "answer"),
    [
        (permission(ALL), "Ask", None),
        (permission(ALL), "AutoApprove", {"Permission": "AllowOnce"}),
        (permission(["AllowAlways", "DenyOnce"]), "AutoApprove", {"Permission": "AllowAlways"}),
        (permission([]), "AutoApprove", {"Permission": "AllowOnce"}),
        (permission(ALL, "Edit"), "AcceptEdits", {"Permission": "AllowOnce"}),
        (permission(ALL, "Move"), "AcceptEdits", {"Permission": "AllowOnce"}),
        (permission(ALL, "Execute"), "AcceptEdits", None),
        ({"Permission": {"id": "r1", "tool": None, "options": ALL}}, "AcceptEdits", None),
        (question(PICK), "AutoApprove", None),
    ],
)
def test_auto_answer_follows_the_permission_mode(request_: dict[str, Any], mode: str, answer: Any) -> None:
    assert auto_answer(request_, mode) == answer


def test_hands_off_declines_and_blanks_free_text_but_never_picks_a_choice() -> None:
    assert hands_off_answer(permission(ALL)) == {"Permission": "DenyOnce"}
    assert hands_off_answer(permission(["AllowOnce", "DenyAlways"])) == {"Permission": "DenyAlways"}
    assert hands_off_answer(permission(["AllowOnce"])) == "Cancel"
    assert hands_off_answer(question(FREE, FREE)) == {"Question": [{"Text": ""}, {"Text": ""}]}
    assert hands_off_answer(question(FREE, PICK)) is None


@pytest.mark.parametrize(
    ("request_", "answer", "problem"),
    [
        (permission(ALL), "Cancel", None),
        (permission(ALL), {"Permission": "AllowOnce"}, None),
        (permission(["AllowOnce"]), {"Permission": "DenyOnce"}, "DenyOnce is not offered (offered: AllowOnce)"),
        (permission(ALL), {"Deny": {"message": "no"}}, None),
        (permission(["AllowOnce"]), {"Deny": {"message": "no"}}, "denying is not offered"),
        (permission(ALL), {"Question": []}, "a permission request takes a Permission, Deny or Cancel answer"),
        (question(PICK), {"Permission": "AllowOnce"}, "a question request takes a Question or Cancel answer"),
        (question(PICK), {"Question": [{"Choices": ["x"]}]}, None),
        (question(PICK, FREE), {"Question": [{"Choices": ["x"]}]}, "expected 2 answers, one per question, got 1"),
        (question(PICK), {"Question": [{"Choices": []}]}, "a: pick at least one choice"),
        (question(PICK), {"Question": [{"Choices": ["x", "y"]}]}, "a: only one choice is allowed"),
        (question({**PICK, "multi_select": True}), {"Question": [{"Choices": ["x", "y"]}]}, None),
        (question(PICK), {"Question": [{"Choices": ["z"]}]}, "a: unknown choice z"),
        (question(PICK), {"Question": [{"Text": "mine"}]}, "a: free text is not allowed"),
        (question(FREE), {"Question": [{"Text": "mine"}]}, None),
    ],
)
def test_check_answer(request_: dict[str, Any], answer: Any, problem: str | None) -> None:
    assert check_answer(request_, answer) == problem
