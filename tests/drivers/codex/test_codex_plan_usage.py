"""``plan_usage`` on Codex: the real pinned ``codex app-server`` asked
``account/rateLimits/read``, its ChatGPT backend the fake on 127.0.0.1.

A ChatGPT login is an ``auth.json`` of unsigned JWTs carrying the claims Codex reads, and
``chatgpt_base_url`` names the fake (``CodexWorld.login_chatgpt``): Codex then fetches
``/backend-api/wham/usage`` and ``/backend-api/wham/rate-limit-reset-credits`` from it, and
what it answers is mapped to a PlanUsage. Every other login is a typed refusal, and every
read ends with no Codex process left.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import fake_openai as fo
from lifetime_support import group_left, kill_groups, pgid_of
from sidecar import _REFERENCE, Sidecar

NOW = int(time.time())
FIVE_HOURS = {"used_percent": 42, "limit_window_seconds": 18000, "reset_after_seconds": 3600, "reset_at": NOW + 3600}
WEEK = {"used_percent": 7, "limit_window_seconds": 604800, "reset_after_seconds": 86400, "reset_at": NOW + 86400}
USAGE = {
    "plan_type": "pro",
    "rate_limit": {"allowed": True, "limit_reached": False, "primary_window": FIVE_HOURS, "secondary_window": WEEK},
    "credits": {"has_credits": False, "unlimited": False, "balance": "0"},
    "rate_limit_reset_credits": {"available_count": 2},
}


def credit(credit_id: str, status: str, expires: str | None) -> dict[str, Any]:
    return {"id": credit_id, "status": status, "reset_type": "codex_rate_limits",
            "granted_at": "2026-11-01T00:00:00Z", "expires_at": expires, "title": "Full reset"}  # fmt: skip


#: The backend's list: the redeemed credit expires first, but it is not one to be used.
CREDITS = {
    "available_count": 2,
    "credits": [
        credit("c1", "available", "2027-02-01T00:00:00Z"),
        credit("c2", "redeemed", "2026-12-01T00:00:00Z"),
        credit("c3", "available", "2027-01-15T00:00:00Z"),
    ],
}


def at(secs: int) -> dict[str, int]:
    return {"secs_since_epoch": secs, "nanos_since_epoch": 0}


def check_plan_usage(usage: Any) -> None:
    schema = {"$ref": "#/definitions/PlanUsage", "definitions": _REFERENCE["definitions"]}
    jsonschema.Draft7Validator(schema).validate(usage)


@pytest.fixture
def world(tmp_path):
    w = fo.CodexWorld(str(tmp_path))
    yield w
    w.close()


def ask(world: fo.CodexWorld, env: dict[str, str] | None = None) -> dict[str, Any]:
    """One plan_usage of Codex through a sidecar: its reply line (ok or error)."""
    with Sidecar(env={**world.env, **(env or {})}) as sc:
        reply = sc.reply(sc.send({"cmd": "plan_usage", "agent": "codex", "dir": world.work}), timeout=60)
        assert sc.close() == 0
    assert world.wait_no_codex() == []  # answered once Codex is gone
    return dict(reply)


def test_a_chatgpt_login_reads_its_windows_plan_and_reset_credits(world):
    world.login_chatgpt(plan="pro")
    world.api.usage = USAGE
    world.api.reset_credits = CREDITS
    before = time.time()
    usage = ask(world)["ok"]
    check_plan_usage(usage)
    assert usage["plan"] == "pro"
    assert usage["windows"] == [
        {"label": "Session", "used_percent": 42, "resets_at": at(NOW + 3600)},
        {"label": "Week", "used_percent": 7, "resets_at": at(NOW + 86400)},
    ]
    # The first available credit to expire (2027-01-15), as Codex read it from the list.
    assert usage["reset_credits"] == {"available": 2, "next_expires_at": at(1799971200)}
    assert before - 1 <= usage["fetched_at"]["secs_since_epoch"] <= time.time() + 1
    paths = [r.path for r in world.api.backend_requests()]
    assert "/backend-api/wham/usage" in paths and "/backend-api/wham/rate-limit-reset-credits" in paths
    asked = [r for r in world.api.backend_requests() if r.path == "/backend-api/wham/usage"][-1]
    assert asked.headers["authorization"].startswith("Bearer ") and asked.headers["chatgpt-account-id"] == "acct-test"


def test_a_report_without_reset_credits_has_none_and_other_limits_are_labelled(world):
    world.login_chatgpt(plan="plus")
    world.api.usage = {
        "plan_type": "plus",
        "rate_limit": {"allowed": True, "limit_reached": False, "primary_window": FIVE_HOURS},
        "additional_rate_limits": [
            {"limit_name": "GPT-5.3-Codex-Spark", "metered_feature": "codex_bengalfox",
             "rate_limit": {"allowed": True, "limit_reached": False, "secondary_window": {**WEEK, "used_percent": 300}}},
        ],
    }  # fmt: skip
    usage = ask(world)["ok"]
    check_plan_usage(usage)
    assert usage["plan"] == "plus"
    assert usage["reset_credits"] is None  # Codex gave none: nothing is made up
    assert usage["windows"] == [
        {"label": "Session", "used_percent": 42, "resets_at": at(NOW + 3600)},
        {"label": "GPT-5.3-Codex-Spark Week", "used_percent": 255, "resets_at": at(NOW + 86400)},  # a uint8
    ]


def test_an_api_key_login_is_unsupported(world):
    # No custom provider: Codex's own OpenAI auth, an API key in auth.json.
    (Path(world.codex_home) / "config.toml").write_text(f'chatgpt_base_url = "{world.api.chatgpt_base_url}"\n')
    (Path(world.codex_home) / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": "sk-fake"}))
    os.chmod(Path(world.codex_home) / "auth.json", 0o600)
    error = ask(world)["error"]
    assert error["kind"] == "UnsupportedFeature" and "ChatGPT login" in error["message"], error
    assert world.api.backend_requests() == [] or all("wham/usage" not in r.path for r in world.api.backend_requests())


def test_a_custom_model_provider_is_unsupported(world):
    error = ask(world)["error"]  # CodexWorld's own config: the fake Responses API, its key
    assert error["kind"] == "UnsupportedFeature" and "ChatGPT login" in error["message"], error


def test_no_login_is_auth_required_with_the_ways_to_log_in(world):
    (Path(world.codex_home) / "config.toml").write_text(f'chatgpt_base_url = "{world.api.chatgpt_base_url}"\n')
    error = ask(world)["error"]
    assert error["kind"] == "AuthRequired", error
    assert {"Terminal": {"command": ["codex", "login"], "env": {},
                         "description": "Sign in to Codex with ChatGPT or an API key"}} in error["login"]  # fmt: skip


def test_a_login_the_backend_refuses_is_auth_required(world):
    world.login_chatgpt()
    world.api.usage = fo.Error(401, "token expired")
    error = ask(world)["error"]
    assert error["kind"] == "AuthRequired" and "401" in error["message"], error


def test_a_failing_backend_is_protocol_failed_with_codexs_words(world):
    world.login_chatgpt()
    world.api.usage = fo.Error(500, "down")
    error = ask(world)["error"]
    assert error["kind"] == "ProtocolFailed" and "500" in error["message"], error
    assert "Bearer" not in json.dumps(error)


def test_a_backend_that_never_answers_is_bounded(world):
    world.login_chatgpt()
    world.api.usage = fo.Hang()
    error = ask(world, {"AGENTPROTO_CODEX_PLAN_USAGE_SECS": "2"})["error"]
    world.api.release()
    assert error["kind"] == "HandshakeTimeout" and "within 2 s" in error["message"], error


def test_codex_exiting_before_it_answers_is_process_exited(world, tmp_path):
    fake = tmp_path / "codex"
    fake.write_text("#!/bin/sh\necho 'codex: cannot start' >&2\nexit 3\n")
    fake.chmod(0o755)
    error = ask(world, {"AGENTPROTO_CODEX_BIN": str(fake)})["error"]
    assert error["kind"] == "ProcessExited" and "cannot start" in error["stderr"], error


def test_plan_usage_all_shows_codexs_real_row(world):
    world.login_chatgpt(plan="team")
    world.api.usage = {**USAGE, "plan_type": "team"}
    with Sidecar(env=world.env) as sc:
        rows = sc.ok({"cmd": "plan_usage_all"}, timeout=60)
        assert sc.close() == 0
    codex = [row for row in rows if row["agent"]["id"] == "codex"]
    assert len(codex) == 1 and codex[0]["plan_usage"]["plan"] == "team", rows
    check_plan_usage(codex[0]["plan_usage"])
    assert [w["label"] for w in codex[0]["plan_usage"]["windows"]] == ["Session", "Week"]
    assert world.wait_no_codex() == []


@pytest.mark.parametrize("end", ["eof", "sigterm"])
def test_a_sidecar_that_ends_during_a_read_leaves_no_codex_process(world, end):
    """The backend hangs; the sidecar is told to end (its stdin's EOF, SIGTERM) while Codex
    waits on it: by the time the sidecar has exited, no process of Codex's group is left,
    neither alive nor a zombie (killed and reaped by the sidecar, not left to init)."""
    world.login_chatgpt()
    world.api.usage = fo.Hang()
    sc = Sidecar(env=world.env)
    groups: set[int] = set()
    try:
        sc.send({"cmd": "plan_usage", "agent": "codex", "dir": world.work})
        deadline = time.monotonic() + 60
        while not any(r.path == "/backend-api/wham/usage" for r in world.api.backend_requests()):
            assert time.monotonic() < deadline and sc.proc.poll() is None, "Codex never asked its backend"
            time.sleep(0.05)
        groups = {pgid_of(pid) for pid in world.codex_processes()}
        assert groups
        if end == "eof":
            sc.close_stdin()
        else:
            sc.proc.send_signal(signal.SIGTERM)
        assert sc.proc.wait(15) == 0
        assert group_left(groups) == [], "a Codex process outlived the sidecar"
        assert world.codex_processes() == []
    finally:
        world.api.release()
        if sc.proc.poll() is None:
            sc.proc.kill()
        kill_groups(groups)
