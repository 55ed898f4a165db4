"""Answers to an agent's requests, sans-IO: whether the app's answer fits the request, and
the answers agentproto gives by itself.

A request is a ``RequestOpened`` payload as the app saw it: ``{"Permission": {...}}``,
``{"Question": {...}}``, or the app's own ``{"ToolCall": {...}}`` and ``{"Hook": {...}}``
(whose answers apptools.py checks). The engine asks ``auto_answer`` before showing a
permission to the app (the session's permission mode may approve it; it never answers a
ToolCall: tools are the app's), checks every answer the app sends with ``check_answer``,
and generate, which has nobody to ask, takes ``hands_off_answer``.
"""

from __future__ import annotations

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

    from agentproto.core.wire_types import AgentRequest, Answer, PermissionAnswer, Request

#: The tool kinds AcceptEdits approves without asking.
EDIT_KINDS = frozenset({"Edit", "Delete", "Move"})


def request_id_of(request: Request) -> str:
    """The id the app answers a request by."""
    (body,) = request.values()
    return str(body["id"])  # type: ignore[index]  # (each variant's body has an id)


def auto_answer(request: Request, permission_mode: str) -> PermissionAnswer | None:
    """The answer the permission mode gives a request without asking the app, or None."""
    if "Permission" not in request:
        return None  # a question always needs the app
    body = request["Permission"]
    tool_kind = (body.get("tool") or {}).get("kind")
    if permission_mode == "AutoApprove" or (permission_mode == "AcceptEdits" and tool_kind in EDIT_KINDS):
        options = body.get("options", [])
        return {"Permission": "AllowOnce" if "AllowOnce" in options or not options else options[0]}
    return None


def hands_off_answer(request: Request) -> Answer | None:
    """generate's answer, with nobody to ask: permissions are declined and questions that
    take free text get blank answers, the app's tools fail and its hooks are neutral. None
    when only a person could answer (a choice)."""
    if "ToolCall" in request:
        return {"Deny": {"message": "generate answers no tool call"}}
    if "Hook" in request:
        return "Cancel"
    if "Permission" in request:
        offered = request["Permission"].get("options", [])
        choice = next((c for c in ("DenyOnce", "DenyAlways") if c in offered), None)
        return {"Permission": choice} if choice else "Cancel"
    questions = request["Question"]["questions"]
    if all(q.get("allows_free_text") for q in questions):
        return {"Question": [{"Text": ""} for _ in questions]}
    return None


def check_answer(request: AgentRequest, answer: Any) -> str | None:
    """Why ``answer`` does not fit ``request``, or None."""
    if answer == "Cancel":
        return None
    if "Permission" in request:
        options = request["Permission"].get("options", [])
        if "Permission" in answer:
            if answer["Permission"] not in options:
                return f"{answer['Permission']} is not offered (offered: {', '.join(options)})"
            return None
        if "Deny" in answer:
            if not any(o.startswith("Deny") for o in options):
                return "denying is not offered"
            return None
        return "a permission request takes a Permission, Deny or Cancel answer"
    questions = request["Question"]["questions"]
    if "Question" not in answer:
        return "a question request takes a Question or Cancel answer"
    entries = answer["Question"]
    if len(entries) != len(questions):
        return f"expected {len(questions)} answers, one per question, got {len(entries)}"
    for question, entry in zip(questions, entries):
        qid = question.get("id")
        if "Choices" in entry:
            offered = {c.get("id") for c in question.get("choices", [])}
            picked = entry["Choices"]
            if not picked:
                return f"{qid}: pick at least one choice"
            if len(picked) > 1 and not question.get("multi_select"):
                return f"{qid}: only one choice is allowed"
            unknown = [c for c in picked if c not in offered]
            if unknown:
                return f"{qid}: unknown choice {unknown[0]}"
        elif "Text" in entry and not question.get("allows_free_text"):
            return f"{qid}: free text is not allowed"
    return None
