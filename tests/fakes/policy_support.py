"""Shared by the policy tests (issue 24): a mock script of permission requests, one turn run
with the app answering what it is shown, and who answered each request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sidecar import Sidecar, kinds


def permission(rid: str, kind: Any, command: str | None = None, paths: tuple[str, ...] = ()) -> dict[str, Any]:
    tool_input: Any = {"Command": {"command": command, "cwd": None}} if command is not None else "None"
    return {
        "Emit": {
            "RequestOpened": {
                "Permission": {
                    "id": rid,
                    "tool": {
                        "id": f"tool-{rid}",
                        "kind": kind,
                        "title": rid,
                        "status": "Pending",
                        "input": tool_input,
                        "output": None,
                        "diffs": [{"path": p, "old_text": None, "new_text": "x"} for p in paths],
                        "locations": [],
                        "raw": None,
                    },
                    "options": ["AllowOnce", "DenyOnce"],
                    "detail": None,
                }
            }
        }
    }


def script(tmp_path: Path, requests: list[dict[str, Any]]) -> str:
    steps: list[Any] = []
    for request in requests:
        steps += [request, "AwaitAnswer"]
    steps.append({"End": {"Completed": {"source": "Protocol"}}})
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"turns": [steps, steps]}))
    return str(path)


def run_turn(sc: Sidecar, sid: str, answer_app: bool = True) -> list[dict[str, Any]]:
    """One prompt's events; requests the app is shown (not closed at once) are answered."""
    sc.ok({"cmd": "prompt", "session": sid, "text": "go"})
    events: list[dict[str, Any]] = []
    while True:
        line = sc.wait_for(lambda x: "event" in x and x["event"]["session_id"] == sid, 30)
        event = line["event"]
        events.append(event)
        kind = event["kind"]
        if kinds([event]) == ["StatusChanged"] and kind["StatusChanged"] == "NeedsInput" and answer_app:
            opened = [e for e in events if kinds([e]) == ["RequestOpened"]][-1]
            rid = opened["kind"]["RequestOpened"]["Permission"]["id"]
            sc.ok({"cmd": "answer", "session": sid, "request": rid, "answer": {"Permission": "AllowOnce"}})
        if kinds([event]) == ["TurnEnded"]:
            return events


def answered_by(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Request id -> who answered it: the policy's extensions, or "app"."""
    out: dict[str, Any] = {}
    for event in events:
        if kinds([event]) == ["RequestClosed"]:
            by = event["extensions"].get("agentproto", {}).get("answered_by")
            out[event["kind"]["RequestClosed"]["request_id"]] = by or "app"
    return out
