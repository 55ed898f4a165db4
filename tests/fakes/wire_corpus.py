"""The captured-wire corpus: real agent conversations, replayed through the real drivers.

``fixtures/wire/<agent>/<case>.jsonl`` is one conversation, one JSON value per line:

- first a header: ``{"case": NAME, "about": WHAT IT SHOWS, "source": WHERE THE LINES COME FROM}``;
- then the conversation, in the order it happened:
  ``{"app": {"cmd": ..., fields}}`` a command the app sent (session commands name the
  session themselves; ``open``'s agent path is ``$AGENT``, its dir ``$DIR``),
  ``{"to_agent": VALUE}`` a line the driver wrote (the replay checks the driver writes the
  same, in the same order),
  ``{"from_agent": LINE}`` or ``{"from_agent": [LINE, ...]}`` what the agent wrote in one
  read (raw text, so a malformed line is just a line),
  ``{"exit": {"status": S, "stderr": TEXT}}`` the agent exited;
- then what the app saw, in order: ``{"expect": {"reply": CMD, "ok": VALUE}}`` (or
  ``"error"``), ``{"expect": {"event": EVENT}}``, ``{"expect": {"session_error": BODY}}``,
  ``{"expect": {"closed": true}}``.

Volatile values are placeholders, in the file and in what a replay compares: ``$DIR``
(the session's dir), ``$AGENT`` (the executable), ``$SESSION`` (an id the driver makes up
itself: Claude's session id), ``$VERSION`` (agentproto's own version in an ACP
``clientInfo``), ``$TOOLS_URL`` (the session's listener URL of the app's tools),
``$HOOK_BASE`` (what its ``hook_urls`` start with: the listener and its token); events are
compared without ``occurred_at``. Everything else must match,
except that what the app sees may carry members the file does not have (protocol 1 grows
by additive optional fields, which the engine adds without any driver changing): lines to
the agent must be exactly the same, lines to the app must have every expected member.

    python -m tests.wire_corpus capture [CASE ...]   # re-capture from the pinned CLIs
    python -m tests.wire_corpus bless FILE ...       # rewrite a file's expectations
    python -m tests.wire_corpus list

Capture runs the real agents (claude and codex against the fake APIs in tests/, the ACP
test agent) through the same in-process runtime, with the child-process transport
wrapped so that every exchange lands on the timeline; run it with the venv's bin on
PATH, inside ``unshare -n`` as scripts/test does. ``bless`` is for hand-made cases (a
captured file with malformed lines put in): it replays the conversation and writes what
the driver produced as the expectations, which must then be read and checked by a person.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from agentproto.loopio.process_transport import process_transport
from agentproto.loopio.transport import LineTransport, Spawn
from agentproto.core.errors import AgentError
from agentproto.loopio.loop import Loop
from agentproto.loopio.record import Wire
from scripted import NEVER_RUN, Conversation
from wrapped import Wrapped

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "fixtures" / "wire"


# -- the file ---------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    path: Path
    header: dict[str, Any]
    conversation: list[dict[str, Any]]
    expects: list[dict[str, Any]]


def load(path: Path) -> Case:
    values = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    header, rest = values[0], values[1:]
    assert "case" in header, f"{path}: the first line names the case"
    conversation = [v for v in rest if "expect" not in v]
    expects = [v["expect"] for v in rest if "expect" in v]
    for entry in conversation:
        assert len(entry) == 1 and next(iter(entry)) in ("app", "to_agent", "from_agent", "exit"), f"{path}: {entry}"
    return Case(path, header, conversation, expects)


def dump(header: dict[str, Any], conversation: list[dict[str, Any]], expects: list[dict[str, Any]]) -> str:
    lines = [header, *conversation, *({"expect": e} for e in expects)]
    return "".join(json.dumps(v, ensure_ascii=False, separators=(", ", ": ")) + "\n" for v in lines)


def cases() -> list[Path]:
    return sorted(CORPUS.glob("*/*.jsonl"))


# -- placeholders ------------------------------------------------------------------------


class Names:
    """The run's volatile values and their placeholders (longest first when replacing)."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, placeholder: str, value: str | None) -> None:
        if value:
            self.values[placeholder] = value

    def _pairs(self) -> list[tuple[str, str]]:
        return sorted(self.values.items(), key=lambda pair: -len(pair[1]))

    def hide(self, value: Any) -> Any:
        """A value with every volatile string replaced by its placeholder."""
        text = json.dumps(value, ensure_ascii=False)
        for placeholder, real in self._pairs():
            text = text.replace(json.dumps(real, ensure_ascii=False)[1:-1], placeholder)
        return json.loads(text)

    def fill(self, text: str) -> str:
        """Raw text with every placeholder replaced by this run's value."""
        for placeholder, real in self.values.items():
            text = text.replace(placeholder, real)
        return text


def session_id_of(spawn: Spawn) -> str | None:
    """An id the driver made up and handed the agent (Claude's ``--session-id``)."""
    for arg in spawn.argv:
        if arg.startswith("--session-id="):
            return arg.split("=", 1)[1]
    return None


def tools_url_of(conv: Conversation) -> str | None:
    """The session's listener URL of the app's tools (it holds a fresh token every run)."""
    return next((s.tools_url for s in conv.runtime.sessions.values() if s.tools_url), None)


def hook_base_of(conv: Conversation) -> str | None:
    """The listener URL (with its fresh token) the session's ``hook_urls`` start with."""
    for session in conv.runtime.sessions.values():
        urls = session.info.get("hook_urls") or {}
        for url in urls.values():
            return str(url).split("/hook/", 1)[0]
    return None


def seen(out: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """What the app saw (a Conversation's ``out``) as corpus expectations."""
    result: list[dict[str, Any]] = []
    for entry in out:
        if entry[0] == "reply":
            _, name, value, error = entry
            result.append({"reply": name, "error": error.body()} if error is not None else {"reply": name, "ok": value})
        elif entry[0] == "event":
            event = {k: v for k, v in entry[1].items() if k != "occurred_at"}
            result.append({"event": event})
        elif entry[0] == "error":
            result.append({"session_error": entry[1].body()})
        else:
            result.append({"closed": True})
    return result


def hide_versions(message: Any) -> Any:
    """agentproto's own version in what it tells an ACP agent is not the agent's business."""
    if isinstance(message, dict) and isinstance(message.get("params"), dict):
        info = message["params"].get("clientInfo")
        if isinstance(info, dict) and "version" in info and message.get("jsonrpc") == "2.0":
            message = json.loads(json.dumps(message))
            message["params"]["clientInfo"]["version"] = "$VERSION"
    return message


# -- replay ------------------------------------------------------------------------------


class Mismatch(AssertionError):
    pass


def replay(case: Case, directory: str) -> tuple[list[Any], list[dict[str, Any]]]:
    """Play a case's agent side to the real driver; return (what it wrote, what the app saw).

    Raises ``Mismatch`` as soon as the driver writes something other than the file says.
    """
    names = Names()
    names.set("$DIR", directory)
    names.set("$AGENT", NEVER_RUN)
    conv = Conversation(auto_exit=False)
    written_at = 0

    def check_written(upto: int) -> None:
        nonlocal written_at
        written = [hide_versions(names.hide(m)) for m in conv.transports[0].written] if conv.transports else []
        if len(written) < upto:
            raise Mismatch(f"{case.path.name}: the driver wrote {len(written)} lines, the capture has {upto} by now; "
                           f"missing: {expected_writes[len(written):upto]}")
        for index in range(written_at, upto):
            if written[index] != expected_writes[index]:
                raise Mismatch(f"{case.path.name}: line {index} to the agent differs:\n  driver:  {written[index]}\n"
                               f"  capture: {expected_writes[index]}")
        written_at = upto

    expected_writes = [entry["to_agent"] for entry in case.conversation if "to_agent" in entry]
    writes = 0
    try:
        for entry in case.conversation:
            (kind, body), = entry.items()
            if kind == "to_agent":
                writes += 1
                continue
            check_written(writes)
            if kind == "app":
                args = json.loads(names.fill(json.dumps(body)))
                conv.command(args.pop("cmd"), **args)
                if conv.transports and "$SESSION" not in names.values:
                    names.set("$SESSION", session_id_of(conv.transports[0].spawn))
                names.set("$TOOLS_URL", tools_url_of(conv))
                names.set("$HOOK_BASE", hook_base_of(conv))
            elif kind == "from_agent":
                lines = body if isinstance(body, list) else [body]
                conv.feed(*(names.fill(line).encode("utf-8", "surrogatepass") for line in lines))
            else:
                conv.transport.exit(body.get("status"), names.fill(body.get("stderr", "")))
                conv.settle()
        check_written(writes)
        written = [hide_versions(names.hide(m)) for m in conv.transports[0].written] if conv.transports else []
        if len(written) != len(expected_writes):
            raise Mismatch(f"{case.path.name}: the driver wrote more than the capture: {written[len(expected_writes):]}")
        return written, names.hide(seen(conv.out))
    finally:
        conv.raise_on = None
        conv.runtime.close_all()
        conv.settle()
        conv.loop.close()


# -- capture -----------------------------------------------------------------------------


class Recording(Wrapped):
    """The child-process transport with every exchange noted on a timeline."""

    def __init__(self, loop: Loop, spawn: Spawn, record_wire: "Wire | None", timeline: list[dict[str, Any]]) -> None:
        self.timeline = timeline
        self._read: list[str] | None = None
        super().__init__(loop, spawn, record_wire, process_transport, on_line=self._line, on_exit=self._exit)

    def _line(self, line: bytes) -> None:
        if self._read is None:
            # Lines the transport delivers in one callback came in one read: they stay
            # one read in the file (Codex merges the deltas of a read).
            self._read = []
            self.timeline.append({"from_agent": self._read})
            self.loop.call_soon(self._end_read)
        self._read.append(line.decode("utf-8", "replace"))
        self.spawn.on_line(line)

    def _end_read(self) -> None:
        self._read = None

    def _exit(self, status: str | None, stderr: str) -> None:
        self.timeline.append({"exit": {"status": status, "stderr": stderr}})
        self.spawn.on_exit(status, stderr)

    def write(self, data: bytes) -> None:
        for line in data.split(b"\n")[:-1]:
            self.timeline.append({"to_agent": json.loads(line)})
        self.inner.write(data)

    def write_json(self, obj: Any) -> None:
        self.write(json.dumps(obj, separators=(",", ":")).encode("utf-8", "surrogatepass") + b"\n")


class Capture(Conversation):
    """A Conversation with a real agent, recording the timeline a corpus file holds."""

    def __init__(self, agent: dict[str, Any], directory: str, env: dict[str, str]) -> None:
        self.timeline: list[dict[str, Any]] = []
        self.recordings: list[Recording] = []
        super().__init__()
        self.agent = agent
        self.directory = directory
        self.env = env
        self.tools_url: str | None = None
        self.hook_base: str | None = None

    def _factory(self, loop: Loop, spawn: Spawn, record_wire: "Wire | None") -> LineTransport:  # type: ignore[override]
        recording = Recording(loop, spawn, record_wire, self.timeline)
        self.recordings.append(recording)
        return recording

    def command(self, name: str, **args: Any) -> None:
        entry = {"cmd": name, **args}
        if name == "open":
            # The file names the agent's path and the dir by placeholders (see file()),
            # and leaves out the env: it points at the fake API, with its fake key.
            entry = {"cmd": "open", "agent": self.agent, "dir": self.directory, **args}
            args = {"agent": self.agent, "dir": self.directory, "env": self.env, **args}
        self.timeline.append({"app": entry})
        super().command(name, **args)
        self.tools_url = self.tools_url or tools_url_of(self)
        self.hook_base = self.hook_base or hook_base_of(self)

    def wait(self, predicate: Callable[["Capture"], bool], timeout: float = 60.0) -> None:
        self.run_until(lambda: predicate(self), timeout)

    def wait_event(self, name: str, timeout: float = 60.0) -> dict[str, Any]:
        count = len(self.events(name))
        self.run_until(lambda: len(self.events(name)) > count, timeout)
        return self.events(name)[-1]

    def finish(self) -> None:
        """Close the session and wait until it is gone."""
        self.command("close")
        self.run_until(lambda: ("closed",) in self.out, 30)
        self.settle()

    def file(self, header: dict[str, Any], names: Names) -> str:
        for recording in self.recordings:
            names.set("$SESSION", session_id_of(recording.spawn))
        names.set("$TOOLS_URL", self.tools_url)
        names.set("$HOOK_BASE", self.hook_base)
        conversation = []
        for entry in self.timeline:
            if "from_agent" in entry:
                lines = entry["from_agent"]
                entry = {"from_agent": lines[0] if len(lines) == 1 else lines}
            if "to_agent" in entry:
                entry = {"to_agent": hide_versions(entry["to_agent"])}
            conversation.append(entry)
        expects = seen(self.out)
        return names_in_text(dump(header, names.hide(conversation), names.hide(expects)), names)


def names_in_text(text: str, names: Names) -> str:
    # Raw agent lines are strings inside the file: a value may also appear JSON-escaped
    # twice (a path inside a line); hide those too.
    for placeholder, real in sorted(names.values.items(), key=lambda pair: -len(pair[1])):
        text = text.replace(json.dumps(json.dumps(real)[1:-1])[1:-1], placeholder)
    return text


# -- the captured cases ----------------------------------------------------------------------
# Each: (agent dir, case name, what it shows, scenario(capture-maker)). A scenario opens a
# session, drives it as an app would and closes it.


def _claude(name: str, about: str, replies: Callable[[Any], list[Any]], drive: Callable[[Capture], None], **open_args: Any):
    def run(out_dir: Path) -> str:
        from fake_anthropic import FakeAnthropic, claude_bin, pinned_claude_version

        with tempfile.TemporaryDirectory(prefix="capture-") as root, FakeAnthropic() as api:
            work = os.path.join(root, "work")
            config = os.path.join(root, "config")
            os.makedirs(work)
            os.makedirs(config)
            api.push(*replies(work))
            cap = Capture({"id": "claude", "path": claude_bin()}, work, api.cli_env(config))
            try:
                cap.command("open", **open_args)
                cap.wait(lambda c: bool(c.replies("open")))
                cap.reply("open")
                drive(cap)
                cap.finish()
            finally:
                cap.runtime.close_all()
                cap.settle()
            names = Names()
            names.set("$DIR", work)
            names.set("$AGENT", claude_bin())
            names.set("/capture", root)
            names.set("$API", api.url)
            text = cap.file({"case": name, "about": about, "source": f"captured from the pinned claude {pinned_claude_version()} against tests/fakes/fake_anthropic.py"}, names)
            cap.loop.close()
            return text

    return ("claude", name, run)


def _codex(name: str, about: str, script: Callable[[Any, str], list[Any]], drive: Callable[[Capture], None],
           mcp: bool = False, **open_args: Any):
    """``mcp``: the session has the app's MCP server ``remote`` (tests/fakes/fake_mcp.py's, over HTTP)."""

    def run(out_dir: Path) -> str:
        import fake_openai as fo
        from fake_mcp import HttpMcp

        with tempfile.TemporaryDirectory(prefix="capture-") as root:
            world = fo.CodexWorld(root)
            server = HttpMcp() if mcp else None
            try:
                world.api.script(*script(fo, world.work))
                env = {k: v for k, v in world.env.items() if k != "AGENTPROTO_CODEX_BIN"}
                cap = Capture({"id": "codex", "path": fo.pinned_codex()}, world.work, env)
                if server is not None:
                    open_args["mcp_servers"] = [{"name": "remote", "connection": {"Http": {"url": server.url}}}]
                try:
                    cap.command("open", **open_args)
                    cap.wait(lambda c: bool(c.replies("open")))
                    cap.reply("open")
                    drive(cap)
                    cap.finish()
                finally:
                    cap.runtime.close_all()
                    cap.settle()
                names = Names()
                names.set("$DIR", world.work)
                names.set("$AGENT", fo.pinned_codex())
                names.set("/capture", root)
                names.set("$API", world.api.base_url)
                text = cap.file({"case": name, "about": about, "source": "captured from the pinned codex 0.171.0 app-server against tests/fakes/fake_openai.py"}, names)
                cap.loop.close()
                return text
            finally:
                world.close()
                if server is not None:
                    server.close()

    return ("codex", name, run)


def _local(agent: str, script: str, source: str, name: str, about: str, drive: Callable[[Capture], None],
           open_args: dict[str, Any]):
    """A case captured from one of this repository's own agents (``tests/<script>``)."""

    def run(out_dir: Path) -> str:
        agent_path = str(ROOT / "tests" / script)
        with tempfile.TemporaryDirectory(prefix="capture-") as root:
            work = os.path.join(root, "work")
            os.makedirs(work)
            if agent == "acp":
                ref: dict[str, Any] = {"acp": {"name": "acp-test", "path": agent_path, "args": []}}
                env: dict[str, str] = {}
            else:
                ref, env = {"id": "agy", "path": agent_path}, {"HOME": os.path.join(root, "home")}
            cap = Capture(ref, work, env)
            try:
                cap.command("open", **open_args)
                cap.wait(lambda c: bool(c.replies("open")))
                cap.reply("open")
                drive(cap)
                cap.finish()
            finally:
                cap.runtime.close_all()
                cap.settle()
            names = Names()
            names.set("$DIR", work)
            names.set("$AGENT", agent_path)
            names.set("/capture", root)
            text = cap.file({"case": name, "about": about, "source": f"captured from tests/{script} ({source})"}, names)
            cap.loop.close()
            return text

    return (agent, name, run)


def _acp(name: str, about: str, drive: Callable[[Capture], None], **open_args: Any):
    return _local("acp", "acp_test_agent.py", "the agent-client-protocol SDK", name, about, drive, open_args)


def _agy(name: str, about: str, drive: Callable[[Capture], None], **open_args: Any):
    return _local("agy", "fake_agy.py", "seed 003's agy", name, about, drive, open_args)


def _turn(text: str) -> Callable[[Capture], None]:
    def drive(cap: Capture) -> None:
        cap.command("prompt", text=text)
        cap.wait_event("TurnEnded")

    return drive


def _answering(text: str, *answers: Any) -> Callable[[Capture], None]:
    """A turn whose requests get these answers, in order."""

    def drive(cap: Capture) -> None:
        cap.command("prompt", text=text)
        for answer in answers:
            opened = cap.wait_event("RequestOpened")
            body = opened.get("Permission") or opened.get("Question") or opened.get("Hook")
            cap.command("answer", request=body["id"], answer=answer)
        cap.wait_event("TurnEnded")

    return drive


LOOKUP = {"name": "lookup", "description": "Look a word up",
          "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}}}
DENY_BASH = {"HookResult": {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                                    "permissionDecisionReason": "not in this repository"}}}


def _captures() -> list[tuple[str, str, Callable[[Path], str]]]:
    import fake_anthropic as fa

    return [
        _claude("hook-callback", "the app's PreToolUse hook: registered at initialize, its hook_callback a Hook request whose "
                "deny (a HookResult) is the callback's answer; the Bash tool is blocked without a permission",
                lambda work: [fa.tool_use("Bash", {"command": "echo no > blocked.txt", "description": "Write a file"}),
                              fa.text("Blocked.")],
                _answering("write a file", DENY_BASH), hooks=["PreToolUse"]),
        _codex("app-tools", "the app's tools: the MCP server agentproto in thread/start's config (dotted keys, over stdin, "
               "never on the command line), approving its own tools", lambda fo, work: [fo.text("ok")], _turn("hi"),
               tools=[LOOKUP]),
        _acp("app-tools", "the app's tools: an http mcpServers entry named agentproto at session/new (the agent "
             "advertises mcpCapabilities.http)", _turn("chunks"), tools=[LOOKUP]),
        _claude("text-turn", "a streamed text answer: deltas of one read merged, MessageEnded with the transcript uuid, usage",
                lambda work: [fa.text("Hello from Claude, streamed in a few pieces.")], _turn("say hello")),
        _claude("thinking", "thinking streamed as ReasoningDelta before the answer",
                lambda work: [fa.thinking("Let me think about it.", "The answer is 4.")], _turn("what is 2+2")),
        _claude("tool-allowed", "a Bash tool asked as a Permission (can_use_tool), allowed, run, its result; then the answer",
                lambda work: [fa.tool_use("Bash", {"command": "echo made > made.txt", "description": "Make a file"}), fa.text("Made it.")],
                _answering("make a file", {"Permission": "AllowOnce"})),
        _codex("text-turn", "a streamed answer with reasoning: deltas, items, token usage, turn/completed",
               lambda fo, work: [fo.text("Hello from Codex", chunks=4, reasoning="thinking it over")], _turn("say hello")),
        _codex("command-approval", "a command Codex asks to run outside the sandbox: a Permission, allowed, its output",
               lambda fo, work: [fo.exec_command(f"touch {work}/made.txt && echo made", escalated=True), fo.text("done")],
               _answering("make a file", {"Permission": "AllowOnce"})),
        _codex("mcp-approval", "a tool of the app's MCP server: Codex's mcp_tool_call elicitation as a Permission, allowed; the result",
               lambda fo, work: [fo.mcp_call("remote", "shout", {"text": "hi"}), fo.text("done")],
               _answering("shout hi", {"Permission": "AllowOnce"}), mcp=True),
        _acp("chunks", "thought, plan, message chunks, usage, title, the prompt's stop reason and usage", _turn("chunks")),
        _acp("tool-permission", "a tool call, a permission picked by option kind, the tool's diff and output",
             _answering("tool", {"Permission": "AllowOnce"})),
        _acp("garbage", "a line that is not JSON from a real agent, then its next chunk", _turn("garbage")),
        _acp("refusal", "a refusal stop reason", _turn("refuse")),
        _agy("text-turn", "init, a streamed answer (the DONE update carries the last delta), usage, the result",
             _turn("say hello")),
        _agy("tool-turn", "a command that runs, a file edit that fails (state ERROR), the answer, the conversation's totals",
             _turn("FAKE_AGY_TURN: " + json.dumps([
                 {"text": "Let me look.", "tools": [
                     {"name": "run_command", "parameters": {"CommandLine": "echo ran"}},
                     {"name": "replace_file_content", "parameters": {"TargetFile": "missing.txt", "TargetContent": "a",
                                                                     "ReplacementContent": "b"}}]},
                 "It ran; the edit failed."]))),
    ]


# -- hand-made cases: captured files with lines put in ------------------------------------


def _read_with(conversation: list[dict[str, Any]], needle: str) -> int:
    """The index of the first agent read that has a line containing ``needle``."""
    for index, entry in enumerate(conversation):
        lines = entry.get("from_agent")
        if lines is not None and any(needle in line for line in (lines if isinstance(lines, list) else [lines])):
            return index
    raise LookupError(needle)


def _put_in_read(needle: str, *lines: str) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Put ``lines`` at the start of the read that has ``needle``: one read, bad and good."""

    def edit(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
        index = _read_with(conversation, needle)
        found = conversation[index]["from_agent"]
        conversation[index] = {"from_agent": [*lines, *(found if isinstance(found, list) else [found])]}
        return conversation

    return edit


def _put_before_line(needle: str, *lines: str) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Put ``lines`` just before the first line with ``needle``, in its read: where the read
    also starts what that line is about (a CLI writing a whole message in one read), the
    lines come after that start."""

    def edit(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
        index = _read_with(conversation, needle)
        found = conversation[index]["from_agent"]
        found = found if isinstance(found, list) else [found]
        at = next(i for i, line in enumerate(found) if needle in line)
        conversation[index] = {"from_agent": [*found[:at], *lines, *found[at:]]}
        return conversation

    return edit


def _put_before_read(needle: str, *entries: dict[str, Any]) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    def edit(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
        index = _read_with(conversation, needle)
        return conversation[:index] + list(entries) + conversation[index:]

    return edit


def _line(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


CODEX_THREAD_NOTE = '"method":"item/agentMessage/delta"'
CLAUDE_DELTA = '"type":"text_delta"'
ACP_CHUNK = '"sessionUpdate":"agent_message_chunk"'
AGY_DELTA = '"text_delta"'


def _derived() -> list[tuple[str, str, str, str, Callable[[list[dict[str, Any]]], list[dict[str, Any]]]]]:
    """(agent, case, from case, about, edit)."""

    def codex_ids(conversation: list[dict[str, Any]]) -> tuple[str, str]:
        lines = conversation[_read_with(conversation, CODEX_THREAD_NOTE)]["from_agent"]
        for line in lines if isinstance(lines, list) else [lines]:
            if CODEX_THREAD_NOTE in line:
                params = json.loads(line)["params"]
                return params["threadId"], params["turnId"]
        raise LookupError("a delta")

    def codex_malformed(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
        thread, turn = codex_ids(conversation)
        note = lambda method, **params: _line({"method": method, "params": {"threadId": thread, "turnId": turn, **params}})  # noqa: E731
        return _put_in_read(
            CODEX_THREAD_NOTE,
            "this is not json",
            "[1, 2]",
            note("item/commandExecution/outputDelta", delta="no itemId"),  # raised KeyError in the read loop
            note("item/agentMessage/delta", itemId="msg_x", delta=None),  # became the text "None"
            note("item/agentMessage/delta", itemId="msg_x", delta=5),  # became the text "5"
            note("item/started", item={"type": "commandExecution"}),  # an item without an id
        )(conversation)

    def codex_unknown(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
        thread, turn = codex_ids(conversation)
        return _put_before_read(
            CODEX_THREAD_NOTE,
            {"from_agent": [
                _line({"method": "brand/newNotification", "params": {"threadId": thread, "turnId": turn}}),
                _line({"method": "item/started", "params": {"threadId": thread, "turnId": turn, "item": {"type": "brandNewItem", "id": "x1"}}}),
                _line({"id": 99, "method": "brand/newRequest", "params": {"threadId": thread}}),
            ]},
            {"to_agent": {"id": 99, "error": {"code": -32601, "message": "agentproto does not handle brand/newRequest"}}},
        )(conversation)

    def claude_malformed(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return _put_before_line(
            CLAUDE_DELTA,
            "this is not json",
            "[" * 5000,  # json.loads raised RecursionError, which the driver let through
            _line({"type": "stream_event", "event": {"type": "content_block_delta", "index": 0,
                                                     "delta": {"type": "text_delta", "text": 5}}}),
            _line({"type": "control_request", "request": {"subtype": "can_use_tool"}}),  # no request_id
        )(conversation)

    def claude_unknown(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return _put_before_read(
            CLAUDE_DELTA,
            {"from_agent": [
                _line({"type": "from_a_future_cli", "x": 1}),
                _line({"type": "system", "subtype": "brand_new", "session_id": "$SESSION"}),
                _line({"type": "control_request", "request_id": "req-unknown", "request": {"subtype": "brand_new"}}),
            ]},
            {"to_agent": {"type": "control_response", "response": {
                "subtype": "error", "request_id": "req-unknown", "error": "agentproto does not handle brand_new"}}},
        )(conversation)

    def acp_update(update: Any) -> str:
        return _line({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "sess-1", "update": update}})

    acp_malformed = _put_in_read(
        ACP_CHUNK,
        "this is not json",
        acp_update({"sessionUpdate": [1]}),  # unhashable: raised TypeError in the read loop
        _line({"jsonrpc": "2.0", "id": [1], "result": {}}),  # so did a list id
        acp_update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": 5}}),
    )
    acp_unknown = _put_before_read(
        ACP_CHUNK,
        {"from_agent": [
            _line({"jsonrpc": "2.0", "method": "_vendor/ping", "params": {}}),
            acp_update({"sessionUpdate": "brand_new_update", "x": 1}),
            _line({"jsonrpc": "2.0", "id": 77, "method": "brand/new", "params": {}}),
        ]},
        {"to_agent": {"jsonrpc": "2.0", "id": 77, "error": {"code": -32601, "message": "method not found: brand/new"}}},
    )
    def agy_step(conversation: list[dict[str, Any]], **body: Any) -> str:
        lines = conversation[_read_with(conversation, AGY_DELTA)]["from_agent"]
        first = next(line for line in (lines if isinstance(lines, list) else [lines]) if AGY_DELTA in line)
        step = json.loads(first)["step_update"]
        return _line({"event": "step_update", "step_update": {**{k: step[k] for k in ("conversation_id", "step_index")},
                                                              **body}})

    def agy_malformed(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return _put_in_read(
            AGY_DELTA,
            "this is not json",
            "[1, 2]",
            _line({"event": "step_update", "step_update": "not an object"}),
            agy_step(conversation, state="ACTIVE", step_type="agent_response", text_delta=5),  # not a string
            agy_step(conversation, state="ACTIVE", step_type="tool", tool_name="run_command", tool_info=[1]),
            _line({"no_event": True}),
        )(conversation)

    def agy_unknown(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return _put_in_read(
            AGY_DELTA,
            _line({"event": "from_a_future_cli", "from_a_future_cli": {}}),
            agy_step(conversation, state="ACTIVE", step_type="brand_new_step"),
            agy_step(conversation, state="SOMETHING", step_type="agent_response"),
        )(conversation)

    return [
        ("agy", "malformed-then-good", "text-turn", "garbage, a body that is not an object, a non-string delta, a tool step whose tool_info is a list and a line without event, then the good deltas, all in one read", agy_malformed),
        ("agy", "unknown-types", "text-turn", "an event, a step type and a step state a newer CLI may write", agy_unknown),
        ("codex", "malformed-then-good", "text-turn", "garbage, a notification without itemId, non-string deltas and an item without id, then the good deltas, all in one read", codex_malformed),
        ("codex", "unknown-types", "text-turn", "a notification, an item type and a request Codex may add: skipped, skipped, answered -32601", codex_unknown),
        ("claude", "malformed-then-good", "text-turn", "garbage, deep nesting, a non-string delta and a control_request without id, then the good deltas, all in one read", claude_malformed),
        ("claude", "unknown-types", "text-turn", "a message type, a system subtype and a control request a newer CLI may send", claude_unknown),
        ("acp", "malformed-then-good", "chunks", "garbage, a list sessionUpdate, a list id and a non-string chunk, then the good chunks, all in one read", acp_malformed),
        ("acp", "unknown-types", "chunks", "an extension notification, an update kind and a request the client does not know", acp_unknown),
    ]


def derive(agent: str, name: str, source: str, about: str, edit: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> Path:
    base = load(CORPUS / agent / f"{source}.jsonl")
    header = {"case": name, "about": about, "source": f"hand-made from {agent}/{source}.jsonl ({base.header['source']})"}
    path = CORPUS / agent / f"{name}.jsonl"
    path.write_text(dump(header, edit(json.loads(json.dumps(base.conversation))), []), encoding="utf-8")
    bless(path)
    return path


# -- the command line --------------------------------------------------------------------


def bless(path: Path) -> None:
    case = load(path)
    with tempfile.TemporaryDirectory() as directory:
        _, outputs = replay(case, directory)
    path.write_text(dump(case.header, case.conversation, outputs), encoding="utf-8")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("capture", "bless", "list"):
        print(__doc__.split("\n\n")[-3], file=sys.stderr)
        return 2
    if argv[0] == "list":
        for path in cases():
            print(path.relative_to(ROOT), "-", load(path).header.get("about", ""))
        return 0
    if argv[0] == "bless":
        for name in argv[1:]:
            bless(Path(name))
        return 0
    wanted = set(argv[1:])
    for agent, name, run in _captures():
        if wanted and f"{agent}/{name}" not in wanted:
            continue
        out = CORPUS / agent / f"{name}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(run(out.parent), encoding="utf-8")
        print("captured", out.relative_to(ROOT))
    for agent, name, source, about, edit in _derived():
        if wanted and f"{agent}/{name}" not in wanted and f"{agent}/{source}" not in wanted:
            continue
        print("made", derive(agent, name, source, about, edit).relative_to(ROOT), "(read its expectations!)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
