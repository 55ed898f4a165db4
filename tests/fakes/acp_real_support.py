"""Driving a real pinned ACP agent (tests/acp-agents, installed into .cache/acp-agents)
through ``serve`` against a fake model API on 127.0.0.1.

An ``AcpWorld`` is a temp HOME (XDG dirs in it), a work dir, a sidecar whose environment
is the agent's (the fake's URL and key, the HOME) plus a unique marker every process of
the world inherits, so a test can find and count them in /proc. A missing agent fails its
test with the instruction (never a skip).

Each agent's world also speaks its fake model's language, so that one scenario runs against
every agent (tests/drivers/acp/test_acp_scenarios_real.py): the steps that make the model
answer, stream, hang, run a shell command, read a file, write two files or call the app's
tool in that agent's tool names; what the model was sent (the user's texts, the tool results,
the tools offered, per model request); and, as class attributes, what the pinned agent is
known to do where agents differ (its version, how a denied command ends, which tools ask).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import fake_anthropic
import fake_chat
import fake_gemini
import fake_openai
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
    # -- what the pinned agent is (set by each agent's world)
    #: Its id in ``open``'s agent, and its command in .cache/acp-agents.
    ID: ClassVar[str]
    COMMAND: ClassVar[str]
    #: Its fake model API's class (a context manager serving on 127.0.0.1).
    API: ClassVar[Any]
    #: The version ``probe`` reports.
    VERSION: ClassVar[str]
    #: The fewest TextDeltas the agent relays a four-chunk answer in.
    STREAMED_DELTAS: ClassVar[int] = 2
    #: The ``TurnEnded.usage`` of a one-answer turn (the fake's figures; None: it reports none).
    TURN_USAGE: ClassVar[dict[str, int] | None] = None
    #: How a turn whose command was denied ends.
    DENIED_STOPS: ClassVar[tuple[str, ...]] = ("Completed",)
    #: The kinds of the permissions the read step asks.
    READ_ASKS: ClassVar[tuple[str, ...]] = ()
    #: The options a session that writes files is opened with; whether each write asks a
    #: permission; whether an edit's diff comes with its completion (else only earlier).
    WRITE_OPTIONS: ClassVar[dict[str, Any]] = {}
    WRITES_ASK: ClassVar[bool] = True
    DIFFS_ON_COMPLETION: ClassVar[bool] = True
    #: What the model hears back from ``write_both`` (the read before it included).
    WRITE_RESULTS: ClassVar[tuple[str, ...]] = ()
    #: The app's tool ``lookup`` as the model is offered it (in ``offered(...)``).
    APP_LOOKUP: ClassVar[str] = ""

    def __init__(self, tmp: Path, env: dict[str, str], reference: bool = True) -> None:
        self.agent = {"id": self.ID, "path": acp_agent_bin(self.COMMAND)}
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

    def turn_allowing(self, session: str, timeout: float = 90) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The turn's events, each permission it asks answered AllowOnce, and those
        permissions in order (a request for the app's tool fails it)."""
        events: list[dict[str, Any]] = []
        asked: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            line = self.sc.wait_for(
                lambda l: "event" in l and l["event"]["session_id"] == session, max(0.01, deadline - time.monotonic())
            )
            events.append(line["event"])
            kind = kind_name(line["event"]["kind"])
            if kind == "TurnEnded":
                return events, asked
            if kind == "RequestOpened":
                request = line["event"]["kind"]["RequestOpened"]
                assert list(request) == ["Permission"], request
                asked.append(request["Permission"])
                self.answer(session, request["Permission"]["id"], {"Permission": "AllowOnce"})

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

    # -- the model's side, in the fake's words (each agent's world says them)
    api: Any  # the fake model API the agent talks to

    def script(self, *steps: Any) -> None:
        """Queue the model's next answers."""
        self.api.script(*steps)

    def say(self, text: str) -> Any:
        """An answer of ``text`` in one piece."""
        raise NotImplementedError

    def stream(self, text: str) -> Any:
        """An answer of ``text`` streamed in four chunks."""
        raise NotImplementedError

    def hang(self, text: str) -> Any:
        """The first half of ``text`` streamed, then nothing until the agent hangs up."""
        raise NotImplementedError

    def shell(self, command: str) -> Any:
        """A call of the agent's shell tool that asks a permission to run ``command``
        (described as "run it")."""
        raise NotImplementedError

    def shell_title(self, command: str) -> str:
        """The title of the permission ``shell(command)`` asks."""
        return command

    def shell_input(self, command: str) -> Any:
        """The ``input`` of the permission ``shell(command)`` asks."""
        return {"Command": {"command": command, "cwd": None}}

    def read(self, path: Path) -> Any:
        """A call of the agent's tool that reads ``path``."""
        raise NotImplementedError

    def write_both(self, new: Path, new_text: str, old: Path, old_text: str) -> list[Any]:
        """The calls that create ``new`` and overwrite the existing ``old`` (after whatever
        the agent needs first: a read of a file before it overwrites it)."""
        raise NotImplementedError

    def diff_old_texts(self, before: str) -> tuple[str | None, str | None]:
        """The ``old_text`` of the diff of a write that creates a file, and of one that
        overwrites a file which held ``before``."""
        return "", before

    def app_tool(self, tool: str, arguments: dict[str, Any]) -> Any:
        """A call of the app's tool ``tool``, by the agent's name for it."""
        raise NotImplementedError

    # -- what the model was sent: its n-th model request of the conversation
    def requests(self) -> list[Any]:
        """The conversation's model requests, in order, as the fake logged them."""
        raise NotImplementedError

    def user_texts(self, n: int) -> list[str]:
        return list(self.requests()[n].user_texts())

    def tool_results(self, n: int) -> str:
        """Every tool result in it (the history's included), as JSON."""
        raise NotImplementedError

    def offered(self, n: int) -> list[str]:
        """The names of the tools it offers the model."""
        return list(self.requests()[n].tool_names())

    def request_body(self, n: int) -> Any:
        """Its JSON body, whole."""
        return self.requests()[n].body


@contextlib.contextmanager
def running(world_class: type[AcpWorld], tmp: Path, **options: Any) -> Iterator[Any]:
    """A world of ``world_class`` with its fake model API (``world.api``) serving; on the way
    out, the world closed (no process of it left) and the API stopped."""
    with world_class.API() as api:
        world = world_class(tmp, api, **options)
        try:
            yield world
        finally:
            world.close()


def texts(events: list[dict[str, Any]]) -> str:
    return "".join(e["kind"]["TextDelta"]["text"] for e in events if kind_name(e["kind"]) == "TextDelta")


def stop_of(events: list[dict[str, Any]]) -> str:
    ended = events[-1]["kind"]["TurnEnded"]["stop"]
    return kind_name(ended)


# -- each agent's world ----------------------------------------------------------------------


class GeminiWorld(AcpWorld):
    """Gemini runs shell commands itself; it reads and writes files through fs/*."""

    ID = "gemini"
    COMMAND = "gemini"
    API = FakeGemini
    VERSION = "0.61.0"
    DENIED_STOPS = ("Completed", "Cancelled")
    WRITE_RESULTS = ("Successfully created and wrote to new file", "Successfully overwrote file")
    APP_LOOKUP = "mcp_agentproto_lookup"

    def __init__(self, tmp: Path, api: FakeGemini, trust: bool = True) -> None:
        home = tmp / "home"
        (home / ".gemini").mkdir(parents=True)
        self.api = api
        super().__init__(tmp, api.cli_env(str(home)), reference=False)
        if trust:
            self.trust_file.write_text(json.dumps({str(self.work): "TRUST_FOLDER"}))

    @property
    def trust_file(self) -> Path:
        return self.home / ".gemini" / "trustedFolders.json"

    def say(self, text: str) -> Any:
        return fake_gemini.text(text)

    def stream(self, text: str) -> Any:
        return fake_gemini.text(text, chunks=4)

    def hang(self, text: str) -> Any:
        return fake_gemini.Hang(text[: -(-len(text) // 2)])

    def shell(self, command: str) -> Any:
        return fake_gemini.call("run_shell_command", {"command": command, "description": "run it"})

    def shell_input(self, command: str) -> Any:
        return "None"

    def read(self, path: Path) -> Any:
        return fake_gemini.call("read_file", {"file_path": str(path)})

    def write_both(self, new: Path, new_text: str, old: Path, old_text: str) -> list[Any]:
        # Gemini reads a file (through fs/*) before it writes it, by itself: a missing file must
        # come back as ACP's "Resource not found" (-32002), or it fails the write before asking
        # (issue 22).
        return [
            fake_gemini.call("write_file", {"file_path": str(new), "content": new_text}),
            fake_gemini.call("write_file", {"file_path": str(old), "content": old_text}),
        ]

    def app_tool(self, tool: str, arguments: dict[str, Any]) -> Any:
        return fake_gemini.call(f"mcp_agentproto_{tool}", arguments)

    def requests(self) -> list[Any]:
        return list(self.api.turns())

    def tool_results(self, n: int) -> str:
        return json.dumps(self.requests()[n].function_responses())


class ClaudeAcpWorld(AcpWorld):
    """The adapter runs its tools itself (Claude Code's Bash, Read, Write: no fs/* nor
    terminal/*)."""

    ID = "claude-acp"
    COMMAND = "claude-agent-acp"
    API = FakeAnthropic
    VERSION = "0.23.1"
    TURN_USAGE = {"input_tokens": 12, "cached_input_tokens": 0, "output_tokens": 7}
    WRITE_RESULTS = ("old content", "File created successfully", "has been updated successfully")
    APP_LOOKUP = "mcp__agentproto__lookup"

    def __init__(self, tmp: Path, api: FakeAnthropic) -> None:
        config = tmp / "home" / ".claude"
        config.mkdir(parents=True)
        self.api = api
        super().__init__(tmp, api.cli_env(str(config)), reference=False)

    def script(self, *steps: Any) -> None:
        self.api.push(*steps)

    def say(self, text: str) -> Any:
        return fake_anthropic.text(text)

    def stream(self, text: str) -> Any:
        return fake_anthropic.text(text, chunk=-(-len(text) // 4))

    def shell(self, command: str) -> Any:
        return fake_anthropic.tool_use("Bash", {"command": command, "description": "run it"})

    def read(self, path: Path) -> Any:
        return fake_anthropic.tool_use("Read", {"file_path": str(path)})

    def write_both(self, new: Path, new_text: str, old: Path, old_text: str) -> list[Any]:
        return [
            self.read(old),  # Claude Code writes only what it read
            fake_anthropic.tool_use("Write", {"file_path": str(new), "content": new_text}),
            fake_anthropic.tool_use("Write", {"file_path": str(old), "content": old_text}),
        ]

    def diff_old_texts(self, before: str) -> tuple[str | None, str | None]:
        return None, None  # a Write's diff carries no old text

    def app_tool(self, tool: str, arguments: dict[str, Any]) -> Any:
        return fake_anthropic.tool_use(f"mcp__agentproto__{tool}", arguments)

    def requests(self) -> list[Any]:
        return list(self.api.main_requests())

    def user_texts(self, n: int) -> list[str]:
        out = []
        for message in self.request_body(n).get("messages", []):
            if message.get("role") != "user":
                continue
            content = message.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            out.extend(b["text"] for b in blocks if b.get("type") == "text")
        return out

    def tool_results(self, n: int) -> str:
        out = []
        for message in self.request_body(n).get("messages", []):
            if isinstance(message.get("content"), list):
                out.extend(b for b in message["content"] if b.get("type") == "tool_result")
        return json.dumps(out)

    def offered(self, n: int) -> list[str]:
        return [t["name"] for t in self.request_body(n).get("tools", [])]


class CodexAcpWorld(AcpWorld):
    """Codex's sandbox cannot start in this container: its commands ask to run outside it
    (``sandbox_permissions: require_escalated``), which is what asks the permission; and
    apply_patch runs in the sandbox unless the preset is Full Access (which asks nothing)."""

    ID = "codex-acp"
    COMMAND = "codex-acp"
    API = FakeOpenAI
    VERSION = "0.16.0"
    STREAMED_DELTAS = 4
    DENIED_STOPS = ("Cancelled",)  # codex-acp's only "no" is Abort
    READ_ASKS = ("Read",)  # cat, run outside the sandbox
    WRITE_OPTIONS = {"configure": {"mode": "full-access"}}
    WRITES_ASK = False
    WRITE_RESULTS = ("Success. Updated the following files:", "A new.txt", "M old.txt")
    APP_LOOKUP = "mcp__agentproto__lookup"

    def __init__(self, tmp: Path, api: FakeOpenAI) -> None:
        home = tmp / "home"
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True)
        # A model codex knows (gpt-5.3-codex): with its metadata Codex offers apply_patch.
        (codex_home / "config.toml").write_text(codex_config(api.base_url, model="gpt-5.3-codex"))
        self.api = api
        env = {"HOME": str(home), "CODEX_HOME": str(codex_home), "FAKE_OPENAI_API_KEY": "sk-fake"}
        super().__init__(tmp, env, reference=False)

    def say(self, text: str) -> Any:
        return fake_openai.text(text)

    def stream(self, text: str) -> Any:
        return fake_openai.text(text, chunks=4)

    def hang(self, text: str) -> Any:
        return fake_openai.text(text, chunks=2, delay=120)

    def shell(self, command: str) -> Any:
        return fake_openai.exec_command(command, escalated=True)

    def shell_input(self, command: str) -> Any:
        return {"Command": {"command": f"/bin/bash -lc {command}", "cwd": str(self.work)}}

    def read(self, path: Path) -> Any:
        return fake_openai.exec_command(f"cat {path}", escalated=True)

    def write_both(self, new: Path, new_text: str, old: Path, old_text: str) -> list[Any]:
        patch = (
            fake_openai.add_file_patch(new.name, new_text)[: -len("*** End Patch\n")]
            + f"*** Update File: {old.name}\n@@\n"
            + "".join(f"-{line}\n" for line in old.read_text().splitlines())
            + "".join(f"+{line}\n" for line in old_text.splitlines())
            + "*** End Patch\n"
        )
        return [fake_openai.apply_patch(patch)]

    def diff_old_texts(self, before: str) -> tuple[str | None, str | None]:
        return None, before

    def app_tool(self, tool: str, arguments: dict[str, Any]) -> Any:
        return fake_openai.mcp_call("agentproto", tool, arguments)

    def requests(self) -> list[Any]:
        return list(self.api.response_requests())

    def tool_results(self, n: int) -> str:
        items = self.request_body(n).get("input") or []
        kinds = ("function_call_output", "custom_tool_call_output")
        return json.dumps([i.get("output") for i in items if isinstance(i, dict) and i.get("type") in kinds])

    def offered(self, n: int) -> list[str]:
        """Its tools, and each MCP server's as ``<namespace>__<tool>`` (Codex offers a
        server's tools as a namespace ``mcp__<server>`` of functions)."""
        request = self.requests()[n]
        names: list[str] = request.tool_names()
        for namespace, tools in request.namespaces().items():
            names += [f"{namespace}__{tool.get('name')}" for tool in tools]
        return names


class ChatWorld(AcpWorld):
    """An agent against the fake Chat Completions API (tests/fakes/fake_chat.py)."""

    def say(self, text: str) -> Any:
        return fake_chat.text(text)

    def stream(self, text: str) -> Any:
        return fake_chat.text(text, chunks=4)

    def hang(self, text: str) -> Any:
        return fake_chat.text(text, chunks=2, hang=True)

    def requests(self) -> list[Any]:
        return list(self.api.turns())

    def tool_results(self, n: int) -> str:
        return json.dumps(self.requests()[n].tool_results())


def qwen_conversation(request: Logged) -> bool:
    messages = (request.body or {}).get("messages") or [{}]
    return str(messages[0].get("content", "")).startswith("You are Qwen Code")


class QwenWorld(ChatWorld):
    """Qwen runs shell commands itself (no terminal/*) and reads and writes through fs/*. Its
    memory-extraction subagent (a second model call after each turn) is turned off in the
    temp HOME's settings; the fake takes only requests with Qwen Code's own system prompt as
    the conversation's."""

    ID = "qwen"
    COMMAND = "qwen"
    API = FakeChat
    VERSION = "0.24.4"
    # Qwen overwrites only a file it read in the session; in its default mode it asks for
    # neither write here (a new file, a file it has read, inside the workspace).
    WRITES_ASK = False
    WRITE_RESULTS = ("Successfully created and wrote to new file", "old content", "Successfully overwrote file")

    def __init__(self, tmp: Path, api: FakeChat) -> None:
        home = tmp / "home"
        (home / ".qwen").mkdir(parents=True)
        settings = {"security": {"auth": {"selectedType": "openai"}}, "memory": {"enableManagedAutoMemory": False}}
        (home / ".qwen" / "settings.json").write_text(json.dumps(settings))
        api.match = qwen_conversation
        self.api = api
        env = {"HOME": str(home), "OPENAI_BASE_URL": api.base_url, "OPENAI_API_KEY": "sk-fake", "OPENAI_MODEL": "fake-model"}
        super().__init__(tmp, env, reference=False)

    def shell(self, command: str) -> Any:
        return fake_chat.call("run_shell_command", {"command": command, "description": "run it"})

    def shell_title(self, command: str) -> str:
        return f"{command} (run it)"

    def read(self, path: Path) -> Any:
        return fake_chat.call("read_file", {"file_path": str(path)})

    def write_both(self, new: Path, new_text: str, old: Path, old_text: str) -> list[Any]:
        return [
            fake_chat.call("write_file", {"file_path": str(new), "content": new_text}),
            self.read(old),
            fake_chat.call("write_file", {"file_path": str(old), "content": old_text}),
        ]


def opencode_conversation(request: Logged) -> bool:
    messages = (request.body or {}).get("messages") or [{}]
    return str(messages[0].get("content", "")).startswith("You are opencode")


class OpencodeWorld(ChatWorld):
    """opencode allows every tool by default: the config asks for ``bash`` and ``edit``
    (``permission``). It runs commands itself and reads files itself. Its title generator
    (a second model call at the first prompt) is told apart by its system prompt: the fake
    takes only opencode's own."""

    ID = "opencode"
    COMMAND = "opencode"
    API = FakeChat
    VERSION = "1.18.33"
    TURN_USAGE = {"input_tokens": 12, "cached_input_tokens": 0, "output_tokens": 7}
    DIFFS_ON_COMPLETION = False  # an edit's diff comes with its permission
    WRITE_RESULTS = ("Wrote file successfully.", "old content")
    APP_LOOKUP = "agentproto_lookup"

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
        super().__init__(tmp, env, reference=False)

    def shell(self, command: str) -> Any:
        return fake_chat.call("bash", {"command": command, "description": "run it"})

    def read(self, path: Path) -> Any:
        return fake_chat.call("read", {"filePath": str(path)})

    def write_both(self, new: Path, new_text: str, old: Path, old_text: str) -> list[Any]:
        return [
            fake_chat.call("write", {"filePath": str(new), "content": new_text}),
            self.read(old),
            fake_chat.call("write", {"filePath": str(old), "content": old_text}),
        ]

    def app_tool(self, tool: str, arguments: dict[str, Any]) -> Any:
        return fake_chat.call(f"agentproto_{tool}", arguments)


#: Every pinned ACP agent's world, in the order the scenarios run them.
WORLDS: list[type[AcpWorld]] = [GeminiWorld, ClaudeAcpWorld, CodexAcpWorld, QwenWorld, OpencodeWorld]
