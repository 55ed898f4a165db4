"""Driving a real pinned ACP agent (tests/acp-agents, installed into .cache/acp-agents)
through ``serve`` against a fake model API on 127.0.0.1.

An ``AcpWorld`` is a temp HOME (XDG dirs in it), a work dir, a sidecar whose environment
is the agent's (the fake's URL and key, the HOME) plus a unique marker every process of
the world inherits, so a test can find and count them in /proc. A missing agent fails its
test with the instruction (never a skip).
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from fake_anthropic import FakeAnthropic
from fake_chat import FakeChat, Logged
from fake_gemini import FakeGemini
from fake_openai import FakeOpenAI, codex_config
from sidecar import Sidecar, kind_name

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".cache" / "acp-agents" / "node_modules" / ".bin"


def acp_agent_bin(name: str) -> str:
    path = BIN / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: run scripts/install-test-deps (tests/acp-agents/package.json)", pytrace=False)
    return str(path)


def marked_processes(marker: str) -> list[int]:
    """Live (non-zombie) processes whose environment carries ``marker``."""
    needle = f"AGENTPROTO_TEST_MARKER={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z":
            found.append(int(entry))
    return found


class AcpWorld:
    def __init__(self, tmp: Path, agent_id: str, command: str, env: dict[str, str], reference: bool = True) -> None:
        self.agent = {"id": agent_id, "path": acp_agent_bin(command)}
        self.home = Path(env.get("HOME") or tmp / "home")
        self.work = tmp / "work"
        for path in (self.home, self.work, self.home / ".config", self.home / ".cache", self.home / ".local" / "share"):
            path.mkdir(parents=True, exist_ok=True)
        self.marker = f"acp-test-{uuid.uuid4().hex}"
        self.env = {
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "AGENTPROTO_TEST_MARKER": self.marker,
            **env,
        }
        if os.geteuid() == 0:
            self.env.setdefault("IS_SANDBOX", "1")  # claude-agent-acp's Claude Code refuses root otherwise
        self.sc = Sidecar(env=self.env, reference=reference)

    # -- sessions
    def open(self, timeout: float = 120, **options: Any) -> dict[str, Any]:
        return self.sc.ok({"cmd": "open", "agent": self.agent, "dir": str(self.work), **options}, timeout=timeout)

    def open_error(self, timeout: float = 120, **options: Any) -> dict[str, Any]:
        return self.sc.error({"cmd": "open", "agent": self.agent, "dir": str(self.work), **options}, timeout=timeout)

    def prompt(self, session: str, text: str) -> None:
        self.sc.ok({"cmd": "prompt", "session": session, "text": text})

    def next_event(self, session: str, *names: str, timeout: float = 90) -> dict[str, Any]:
        line = self.sc.wait_for(
            lambda l: "event" in l and l["event"]["session_id"] == session and kind_name(l["event"]["kind"]) in names,
            timeout,
        )
        return line["event"]

    def request(self, session: str, timeout: float = 90) -> dict[str, Any]:
        """The next RequestOpened's body ({"Permission": ...} or {"ToolCall": ...}); fails on
        a TurnEnded first."""
        event = self.next_event(session, "RequestOpened", "TurnEnded", timeout=timeout)
        assert kind_name(event["kind"]) == "RequestOpened", f"the turn ended with no request: {event}"
        body: dict[str, Any] = event["kind"]["RequestOpened"]
        return body

    def answer(self, session: str, request: str, answer: Any) -> None:
        self.sc.ok({"cmd": "answer", "session": session, "request": request, "answer": answer})

    def turn(self, session: str, timeout: float = 90) -> list[dict[str, Any]]:
        return self.sc.events(session, "TurnEnded", timeout)

    def close_session(self, session: str) -> None:
        self.sc.ok({"cmd": "close", "session": session}, timeout=60)

    # -- processes
    def processes(self) -> list[int]:
        return [p for p in marked_processes(self.marker) if p != self.sc.proc.pid]

    def wait_gone(self, timeout: float = 15) -> list[int]:
        deadline = time.monotonic() + timeout
        while True:
            left = self.processes()
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    def close(self) -> None:
        try:
            if self.sc.proc.poll() is None:
                self.sc.close()
        finally:
            left = self.wait_gone()
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            assert not left, f"agent processes left behind: {left}"


def texts(events: list[dict[str, Any]]) -> str:
    return "".join(e["kind"]["TextDelta"]["text"] for e in events if kind_name(e["kind"]) == "TextDelta")


def stop_of(events: list[dict[str, Any]]) -> str:
    ended = events[-1]["kind"]["TurnEnded"]["stop"]
    return kind_name(ended)


# -- each agent's world ----------------------------------------------------------------------


class GeminiWorld(AcpWorld):
    def __init__(self, tmp: Path, api: FakeGemini, trust: bool = True) -> None:
        home = tmp / "home"
        (home / ".gemini").mkdir(parents=True)
        self.api = api
        super().__init__(tmp, "gemini", "gemini", api.cli_env(str(home)), reference=False)
        if trust:
            self.trust_file.write_text(json.dumps({str(self.work): "TRUST_FOLDER"}))

    @property
    def trust_file(self) -> Path:
        return self.home / ".gemini" / "trustedFolders.json"


class ClaudeAcpWorld(AcpWorld):
    def __init__(self, tmp: Path, api: FakeAnthropic) -> None:
        config = tmp / "home" / ".claude"
        config.mkdir(parents=True)
        self.api = api
        super().__init__(tmp, "claude-acp", "claude-agent-acp", api.cli_env(str(config)), reference=False)


class CodexAcpWorld(AcpWorld):
    def __init__(self, tmp: Path, api: FakeOpenAI) -> None:
        home = tmp / "home"
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True)
        # A model codex knows (gpt-5.3-codex): with its metadata Codex offers apply_patch.
        (codex_home / "config.toml").write_text(codex_config(api.base_url, model="gpt-5.3-codex"))
        self.api = api
        env = {"HOME": str(home), "CODEX_HOME": str(codex_home), "FAKE_OPENAI_API_KEY": "sk-fake"}
        super().__init__(tmp, "codex-acp", "codex-acp", env, reference=False)


def qwen_conversation(request: Logged) -> bool:
    messages = (request.body or {}).get("messages") or [{}]
    return str(messages[0].get("content", "")).startswith("You are Qwen Code")


class QwenWorld(AcpWorld):
    def __init__(self, tmp: Path, api: FakeChat) -> None:
        home = tmp / "home"
        (home / ".qwen").mkdir(parents=True)
        settings = {"security": {"auth": {"selectedType": "openai"}}, "memory": {"enableManagedAutoMemory": False}}
        (home / ".qwen" / "settings.json").write_text(json.dumps(settings))
        api.match = qwen_conversation
        self.api = api
        env = {"HOME": str(home), "OPENAI_BASE_URL": api.base_url, "OPENAI_API_KEY": "sk-fake", "OPENAI_MODEL": "fake-model"}
        super().__init__(tmp, "qwen", "qwen", env, reference=False)


def opencode_conversation(request: Logged) -> bool:
    messages = (request.body or {}).get("messages") or [{}]
    return str(messages[0].get("content", "")).startswith("You are opencode")


class OpencodeWorld(AcpWorld):
    def __init__(self, tmp: Path, api: FakeChat, permission: dict[str, str] | None = None) -> None:
        home = tmp / "home"
        config = home / ".config" / "opencode"
        config.mkdir(parents=True)
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Fake",
            "options": {"baseURL": api.base_url, "apiKey": "sk-fake"},
            "models": {"fake-model": {"name": "Fake model", "tool_call": True}},
        }
        settings = {
            "autoupdate": False,
            "share": "disabled",
            "provider": {"fake": provider},
            "model": "fake/fake-model",
            "small_model": "fake/fake-model",
            "permission": permission or {"bash": "ask", "edit": "ask"},
        }
        (config / "opencode.json").write_text(json.dumps(settings))
        api.match = opencode_conversation
        self.api = api
        env = {"HOME": str(home), "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1"}
        super().__init__(tmp, "opencode", "opencode", env, reference=False)
