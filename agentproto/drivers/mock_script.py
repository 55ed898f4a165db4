"""The mock's scripts (``serve --mock``): anyagent's mock-script format and agentproto's steps,
loaded and checked before any session plays one (drivers/mock.py plays them).

Rules of this file:
- A script that does not load is a ScriptError naming the turn, the step and what is wrong;
  an Emit step's EventKind is checked against the wire schema (a known kind must have its
  schema's shape), so nothing malformed fails mid-turn.
- agentproto's steps beside anyagent's: CallTool, Hook, UsageReport (a running usage report
  that adds to the turn's: budgets count it) and RateLimit (the API's 429: the turn fails
  with a rate-limit Diagnostic, its reset ``retry_after_ms`` from now; ``end: false`` only
  reports it, the turn's steps go on; ``exit: true`` then ends the mock's process, as Die).
- agentproto's fields beside anyagent's: ``plan_usage``, the PlanUsage the mock answers
  ``plan_usage`` with (checked against the wire schema; ``fetched_at`` may be left out: the
  mock's clock fills it; without it, as in anyagent's format, ``plan_usage`` is
  UnsupportedFeature), and ``resumable`` (the mock can be resumed by its token, going on with
  the script where that session left it: drivers/mock.py).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from agentproto.core.wire import event_kind_name, load_json

SCRIPT_FIELDS: dict[str, Any] = {
    "turns": [],
    "steer": False,
    "steer_rejects": False,
    "steer_ack": True,
    "ignore_close": False,
    "deterministic": True,
    "deterministic_agent": True,
    "buffer": 64,
    "stale_before_ack": None,
    "compact": False,
    "permissions": True,
    "resume": False,
    "resumable": False,
    "rollback": False,
    "rollback_refusal": None,
    "options": [],
    "echo_options": False,
    "echo_input": False,
    "hook_events": [],
    "plan_usage": None,
}

#: How many steps play before the mock yields to the loop, so one session's flood never
#: stalls other sessions or the app's commands.


class ScriptError(ValueError):
    pass


#: The wire schema's patterns, compiled once (it is agentproto's own: trusted).
_PATTERNS: dict[str, Any] = {}


@lru_cache(maxsize=1)
def _event_kinds() -> tuple[dict[str, Any], dict[str, Any]]:
    """Each EventKind variant's schema by its name, and the definitions they refer to."""
    from importlib import resources

    text = resources.files("agentproto").joinpath("schema.json").read_text(encoding="utf-8")
    definitions = json.loads(text)["definitions"]
    variants: dict[str, Any] = {}
    for variant in definitions["EventKind"]["oneOf"]:
        for name in [*variant.get("required", ()), *([variant["const"]] if "const" in variant else ())]:
            variants[name] = variant
    return variants, definitions


def _check_kind(kind: Any, where: str) -> None:
    name = event_kind_name(kind)
    if not name:
        raise ScriptError(f"{where}: expected an EventKind (a string or a one-key object), got {json.dumps(kind)[:80]}")
    # The engine reads what a script emits (message ids, tool statuses, requests): a known
    # kind must have its schema's shape, checked here rather than failing mid-turn.
    variants, definitions = _event_kinds()
    variant = variants.get(name)
    if variant is not None:
        from agentproto.core.jsonschema_lite import validate_json  # only scripts need it

        problems = validate_json(kind, {**variant, "definitions": definitions}, trusted=True, patterns=_PATTERNS)
        if problems:
            raise ScriptError(f"{where}: not a valid {name}: {problems[0]}")


def _check_plan_usage(usage: Any) -> None:
    if not isinstance(usage, dict):
        raise ScriptError("plan_usage: expected a PlanUsage object")
    from agentproto.core.jsonschema_lite import validate_json

    _, definitions = _event_kinds()
    value = {"fetched_at": {"secs_since_epoch": 0, "nanos_since_epoch": 0}, **usage}
    schema = {"$ref": "#/definitions/PlanUsage", "definitions": definitions}
    problems = validate_json(value, schema, trusted=True, patterns=_PATTERNS)
    if problems:
        raise ScriptError(f"plan_usage: not a valid PlanUsage: {problems[0]}")


def _check_steps(steps: Any, where: str) -> None:
    if not isinstance(steps, list):
        raise ScriptError(f"{where}: expected an array of steps")
    for i, step in enumerate(steps):
        at = f"{where}[{i}]"
        if step in ("AwaitAnswer", "Die"):
            continue
        if not isinstance(step, dict) or len(step) != 1:
            raise ScriptError(f"{at}: unknown step {json.dumps(step)[:80]}")
        (tag, body), = step.items()
        if tag == "Emit":
            _check_kind(body, at)
        elif tag == "End":
            if body not in ("Cancelled", "Refused") and not (
                isinstance(body, dict) and len(body) == 1 and next(iter(body)) in ("Completed", "Failed")
            ):
                raise ScriptError(f"{at}: End takes a StopReason")
        elif tag == "Sleep":
            if not isinstance(body, int) or isinstance(body, bool) or body < 0:
                raise ScriptError(f"{at}: Sleep takes milliseconds (a non-negative integer)")
        elif tag == "Usage":
            if not isinstance(body, dict) or not all(
                isinstance(body.get(k), int) for k in ("input_tokens", "cached_input_tokens", "output_tokens")
            ):
                raise ScriptError(f"{at}: Usage takes input_tokens, cached_input_tokens, output_tokens")
        elif tag == "UsageReport":
            counts = ("input_tokens", "cached_input_tokens", "output_tokens")
            if not isinstance(body, dict) or set(body) - {*counts, "cost_usd"} or not all(
                isinstance(body.get(k, 0), int) and not isinstance(body.get(k, 0), bool) for k in counts
            ):
                raise ScriptError(f"{at}: UsageReport takes input_tokens, cached_input_tokens, output_tokens, cost_usd")
            if not isinstance(body.get("cost_usd", 0), (int, float)) or isinstance(body.get("cost_usd"), bool):
                raise ScriptError(f"{at}: UsageReport's cost_usd is a number")
        elif tag == "RateLimit":
            delay = body.get("retry_after_ms") if isinstance(body, dict) else None
            if not isinstance(body, dict) or set(body) - {"retry_after_ms", "message", "end", "exit"} or not (
                delay is None or (isinstance(delay, int) and not isinstance(delay, bool) and delay >= 0)
            ):
                raise ScriptError(f"{at}: RateLimit takes {{retry_after_ms, message, end, exit}}")
            if not all(isinstance(body.get(flag, False), bool) for flag in ("end", "exit")):
                raise ScriptError(f"{at}: RateLimit's end and exit are booleans")
        elif tag == "Repeat":
            if not isinstance(body, dict) or not isinstance(body.get("times"), int):
                raise ScriptError(f"{at}: Repeat takes {{times, steps}}")
            _check_steps(body.get("steps"), f"{at}.Repeat.steps")
        elif tag == "Nested":
            if not isinstance(body, list) or len(body) != 2 or not isinstance(body[0], str):
                raise ScriptError(f"{at}: Nested takes [tool id, EventKind]")
            _check_kind(body[1], at)
        elif tag == "Hook":
            if not isinstance(body, dict) or not isinstance(body.get("event"), str) or set(body) - {"event", "input"}:
                raise ScriptError(f"{at}: Hook takes {{event, input}}")
            if not isinstance(body.get("input", {}), dict):
                raise ScriptError(f"{at}: Hook takes {{event, input}} (input: an object)")
        elif tag == "CallTool":
            if not isinstance(body, dict) or not isinstance(body.get("tool"), str):
                raise ScriptError(f"{at}: CallTool takes {{tool, arguments}}")
            if not isinstance(body.get("arguments", {}), dict) or set(body) - {"tool", "arguments"}:
                raise ScriptError(f"{at}: CallTool takes {{tool, arguments}} (arguments: an object)")
        else:
            raise ScriptError(f"{at}: unknown step `{tag}`")


def load_script(text: str) -> dict[str, Any]:
    """Parse and check a mock script; raise ScriptError naming what is wrong."""
    try:
        raw = load_json(text, lines=True)
    except ValueError as exc:
        raise ScriptError(str(exc)) from None
    if not isinstance(raw, dict):
        raise ScriptError("a script is a JSON object")
    unknown = sorted(set(raw) - set(SCRIPT_FIELDS))
    if unknown:
        raise ScriptError(f"unknown field `{unknown[0]}`; expected one of {', '.join(SCRIPT_FIELDS)}")
    script = {**SCRIPT_FIELDS, **raw}
    if not isinstance(script["turns"], list):
        raise ScriptError("turns: expected an array of turns")
    for i, turn in enumerate(script["turns"]):
        _check_steps(turn, f"turns[{i}]")
    if not isinstance(script["resumable"], bool):
        raise ScriptError("resumable: expected a boolean")
    if not isinstance(script["options"], list) or not all(
        isinstance(o, dict) and isinstance(o.get("id"), str) for o in script["options"]
    ):
        raise ScriptError("options: expected an array of ConfigOption")
    if script["stale_before_ack"] is not None:
        _check_kind(script["stale_before_ack"], "stale_before_ack")
    if not isinstance(script["hook_events"], list) or not all(isinstance(e, str) for e in script["hook_events"]):
        raise ScriptError("hook_events: expected an array of hook event names")
    if script["plan_usage"] is not None:
        _check_plan_usage(script["plan_usage"])
    for i, turn in enumerate(script["turns"]):
        for event in _hook_steps(turn):
            if event not in script["hook_events"]:
                raise ScriptError(f"turns[{i}]: a Hook step fires {event}, which is not in hook_events")
    return script


def _hook_steps(steps: list[Any]) -> list[str]:
    """The events the Hook steps of ``steps`` fire (inside Repeat too)."""
    events: list[str] = []
    for step in steps:
        if isinstance(step, dict) and "Hook" in step:
            events.append(step["Hook"]["event"])
        elif isinstance(step, dict) and "Repeat" in step:
            events += _hook_steps(step["Repeat"]["steps"])
    return events
