#!/usr/bin/env python3
"""A deterministic ACP agent for the tests, written with the `agent-client-protocol` SDK.

The SDK is a test dependency only; agentproto never imports it. The prompt text picks
the scenario (its first word), so one agent binary serves every test:

  chunks     a thought, three message chunks, a plan, usage, a title, end_turn
  tool       an edit tool call needing permission (unusual option ids); the outcome
             decides the tool's end and is reported as text
  fs PATH    fs/read_text_file (line 2, limit 2) of PATH, fs/write_text_file of
             PATH.out, then a read of ../outside.txt; results reported as text
  terminal   terminal/create of a python child (env, output byte limit), streamed in
             a tool call, wait_for_exit, output, release; results as text
  terminals N  N terminals running ``sleep 60``, never released (they end with the
             session), then one released and one more created: each answer as a line
  bigterm N  a terminal writing N lines of 64 KiB once the tool call showing it is known
             to the client (it counts its lines in ./progress); exit status as text
  slow       waits until cancelled; ``slow-permission`` asks a permission first
  hang       never answers and ignores cancel (turn timeout)
  auth       -32000 at session/prompt
  ratelimit  a 429 error at its session's first such prompt, then a message
  refuse / max / turns   stopReason refusal / max_tokens / max_turn_requests
  die        exits with status 3 mid-turn
  garbage    writes a non-JSON line, then answers normally
  children   starts a grandchild that ignores SIGTERM (pid written to PATH)
  flood N    N message chunks
  elicit     elicitation/create (form: every kind of property; ``elicit url``: URL mode);
             the answer (or the error code) as JSON text
  withdraw   a permission (``withdraw elicit``: an elicitation) withdrawn at once with
             $/cancel_request; the answer as text (``error -32800``)
  mode       switches its own mode (current_mode_update) and config (config_option_update)
  calltool SERVER TOOL ARGS   calls TOOL (ARGS: JSON) of the session/new mcpServers entry
             SERVER with the MCP SDK's client over that entry's transport
             (tests/fakes/acp_test_mcp.py), shown as a tool call titled mcp__SERVER__TOOL; the
             result as text. ``calltool-ask`` asks a permission for that tool call first.

Environment: ACP_TEST_AUTH=new fails session/new with -32000; ACP_TEST_RESUME=1
advertises session/resume (else only session/load); ACP_TEST_NO_LOAD=1 drops loadSession;
ACP_TEST_TOOL_NAMING=gemini|codex names an MCP tool call as Gemini CLI
(title ``TOOL (SERVER MCP Server)``) or codex-acp (title ``Tool: SERVER/TOOL``, the permission
request naming only ``rawInput.server_name``) do, instead of Claude's ``mcp__SERVER__TOOL``;
ACP_TEST_NO_HTTP=1 does not advertise MCP over HTTP (mcpCapabilities.http);
ACP_TEST_INIT_GATE=PATH answers ``initialize`` only once PATH exists (a handshake that
takes as long as the test wants), or exits with status 4 if PATH holds ``exit``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import acp
from acp import RequestError


def config_options(mode: str, model: str, fast: bool) -> list[dict[str, Any]]:
    return [
        {
            "id": "perm-mode",
            "name": "Mode",
            "category": "mode",
            "type": "select",
            "currentValue": mode,
            "options": [
                {"value": "ask", "name": "Ask", "description": "Ask before edits"},
                {"value": "code", "name": "Code"},
                {"value": "plan", "name": "Plan"},
            ],
        },
        {
            "id": "llm",
            "name": "Model",
            "category": "model",
            "type": "select",
            "currentValue": model,
            "options": [
                {"group": "fast", "name": "Fast", "options": [{"value": "small-1", "name": "Small"}]},
                {"group": "smart", "name": "Smart", "options": [{"value": "large-2", "name": "Large"}]},
            ],
        },
        {"id": "fast", "name": "Fast", "type": "boolean", "currentValue": fast},
    ]


class TestAgent:
    def __init__(self) -> None:
        self.conn: Any = None
        self.sessions: dict[str, dict[str, Any]] = {}
        self.cancelled: dict[str, asyncio.Event] = {}
        self.counter = 0

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, **kwargs: Any) -> dict:
        gate = os.environ.get("ACP_TEST_INIT_GATE")
        while gate and not os.path.exists(gate):
            await asyncio.sleep(0.01)
        if gate and open(gate).read() == "exit":
            os._exit(4)
        caps: dict[str, Any] = {
            "loadSession": not os.environ.get("ACP_TEST_NO_LOAD"),
            "promptCapabilities": {"image": True, "embeddedContext": True},
            "mcpCapabilities": {"http": not os.environ.get("ACP_TEST_NO_HTTP"), "sse": False},
        }
        if os.environ.get("ACP_TEST_RESUME"):
            caps["sessionCapabilities"] = {"resume": {}}
        self.client_caps = client_capabilities
        return {
            "protocolVersion": 1,
            "agentCapabilities": caps,
            "agentInfo": {"name": "acp-test-agent", "title": "ACP test agent", "version": "9.8.7"},
            "authMethods": [
                {"id": "tl", "name": "Terminal login", "type": "terminal", "args": ["--login"], "env": {"LOGIN": "1"}},
                {"id": "key", "name": "API key", "type": "env_var", "vars": [{"name": "TEST_AGENT_KEY"}]},
                {"id": "inside", "name": "Agent login", "description": "Sign in inside the agent"},
            ],
        }

    async def _new(self, cwd: str, mcp_servers: Any, session_id: str | None = None) -> dict:
        if os.environ.get("ACP_TEST_AUTH") == "new":
            raise RequestError(-32000, "Authentication required: no key")
        if session_id is None:
            self.counter += 1
            session_id = f"sess-{self.counter}"
        self.sessions[session_id] = {
            "cwd": cwd,
            "mode": "ask",
            "model": "small-1",
            "fast": False,
            "mcp": [
                s.model_dump(by_alias=True, exclude_none=True) if hasattr(s, "model_dump") else s
                for s in (mcp_servers or [])
            ],
        }
        self.cancelled[session_id] = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(self._commands(session_id)))
        return {
            "sessionId": session_id,
            "configOptions": config_options("ask", "small-1", False),
            "modes": {
                "currentModeId": "ask",
                "availableModes": [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}],
            },
        }

    async def _commands(self, session_id: str) -> None:
        await self.update(
            session_id,
            {
                "sessionUpdate": "available_commands_update",
                "availableCommands": [
                    {"name": "review", "description": "Review the diff", "input": {"hint": "what to review"}},
                    {"name": "clear", "description": "Clear the context"},
                ],
            },
        )

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> dict:
        return await self._new(cwd, mcp_servers)

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None, **kwargs: Any) -> dict:
        result = await self._new(cwd, mcp_servers, session_id)
        # session/load replays the history before it answers.
        await self.update(
            session_id, {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "old question"}}
        )
        await self.update(
            session_id, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "old answer"}}
        )
        result.pop("sessionId")
        return result

    async def resume_session(self, cwd: str, session_id: str, mcp_servers: Any = None, **kwargs: Any) -> dict:
        result = await self._new(cwd, mcp_servers, session_id)
        result.pop("sessionId")
        return result

    async def set_config_option(self, config_id: str, session_id: str, value: Any, **kwargs: Any) -> dict:
        state = self.sessions[session_id]
        key = {"perm-mode": "mode", "llm": "model", "fast": "fast"}.get(config_id)
        if key is None:
            raise RequestError.invalid_params({"configId": config_id})
        if key == "model" and value not in ("small-1", "large-2"):
            raise RequestError.invalid_params({"value": value})
        state[key] = value
        if key == "model" and value == "large-2":
            state["mode"] = "code"  # a dependent change, reported in the full answer
        return {"configOptions": config_options(state["mode"], state["model"], state["fast"])}

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> dict:
        self.sessions[session_id]["mode"] = mode_id
        return {}

    async def authenticate(self, method_id: str, **kwargs: Any) -> dict:
        return {}

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled[session_id].set()

    async def update(self, session_id: str, update: dict[str, Any]) -> None:
        await self.conn.session_update(session_id=session_id, update=update)

    async def say(self, session_id: str, text: str) -> None:
        await self.update(
            session_id, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
        )

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> dict:
        texts = [getattr(b, "text", None) for b in prompt]
        words = " ".join(t for t in texts if t).split()
        self.cancelled[session_id].clear()
        scenario = words[0] if words else "chunks"
        handler = getattr(self, "scenario_" + scenario.replace("-", "_"), None)
        if handler is None:
            await self.say(session_id, f"echo: {' '.join(words)}")
            for block in prompt[1:]:
                if getattr(block, "type", None) == "resource_link":
                    await self.say(session_id, f" link: {block.name}")
                elif getattr(block, "type", None) == "image":
                    await self.say(session_id, f" image: {block.mime_type}")
            return {"stopReason": "end_turn"}
        return await handler(session_id, words[1:])

    async def scenario_chunks(self, sid: str, args: list[str]) -> dict:
        await self.update(
            sid, {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "thinking..."}}
        )
        await self.update(
            sid,
            {
                "sessionUpdate": "plan",
                "entries": [
                    {"content": "look", "priority": "high", "status": "completed"},
                    {"content": "answer", "priority": "medium", "status": "in_progress"},
                    {"content": "rest", "priority": "low", "status": "pending"},
                ],
            },
        )
        for text in ("Hello", ", ", "world"):
            await self.say(sid, text)
        await self.update(
            sid,
            {
                "sessionUpdate": "usage_update",
                "used": 1234,
                "size": 200000,
                "cost": {"amount": 0.25, "currency": "USD"},
            },
        )
        await self.update(sid, {"sessionUpdate": "session_info_update", "title": "Greeting the world"})
        return {
            "stopReason": "end_turn",
            "usage": {"totalTokens": 30, "inputTokens": 20, "outputTokens": 10, "cachedReadTokens": 5},
        }

    async def scenario_tool(self, sid: str, args: list[str]) -> dict:
        path = os.path.join(self.sessions[sid]["cwd"], "edited.txt")
        await self.update(
            sid,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "call-1",
                "title": "Edit edited.txt",
                "kind": "edit",
                "status": "pending",
                "locations": [{"path": path, "line": 3}],
                "rawInput": {"file_path": path, "new": "b"},
            },
        )
        answer = await self.conn.request_permission(
            session_id=sid,
            tool_call={"toolCallId": "call-1", "title": "Edit edited.txt (needs approval)"},
            options=[
                {"optionId": "zz-never", "name": "Never", "kind": "reject_always"},
                {"optionId": "zz-yes-1", "name": "Yes, once", "kind": "allow_once"},
                {"optionId": "zz-always", "name": "Always", "kind": "allow_always"},
                {"optionId": "zz-no", "name": "No", "kind": "reject_once"},
            ],
        )
        outcome = answer.outcome
        chosen = getattr(outcome, "option_id", None) or outcome.outcome
        if chosen in ("zz-yes-1", "zz-always"):
            await self.update(
                sid, {"sessionUpdate": "tool_call_update", "toolCallId": "call-1", "status": "in_progress"}
            )
            await self.update(
                sid,
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": "call-1",
                    "status": "completed",
                    "content": [
                        {"type": "diff", "path": path, "oldText": "a", "newText": "b"},
                        {"type": "content", "content": {"type": "text", "text": "edited"}},
                    ],
                    "rawOutput": {"ok": True},
                },
            )
        else:
            await self.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "call-1", "status": "failed"})
        await self.say(sid, f"outcome: {chosen}")
        if outcome.outcome == "cancelled":
            return {"stopReason": "cancelled"}
        return {"stopReason": "end_turn"}

    async def scenario_calltool(self, sid: str, args: list[str], ask: bool = False) -> dict:
        import json

        import acp_test_mcp

        server, tool = args[0], args[1]
        arguments = json.loads(" ".join(args[2:]) or "{}")
        state = self.sessions[sid]
        entry = acp_test_mcp.entry_named(state["mcp"], server)
        if entry is None:
            await self.say(sid, f"no MCP server {server}")
            return {"stopReason": "end_turn"}
        naming = os.environ.get("ACP_TEST_TOOL_NAMING", "claude")
        call_id = f"mcp_{server}_{tool}-1" if naming == "gemini" else "mcp-1"
        title = {"gemini": f"{tool} ({server} MCP Server)", "codex": f"Tool: {server}/{tool}"}.get(
            naming, f"mcp__{server}__{tool}"
        )
        call = {"toolCallId": call_id, "title": title, "kind": "other", "rawInput": arguments}
        await self.update(sid, {"sessionUpdate": "tool_call", "status": "pending", **call})
        if naming == "codex":
            # codex-acp: the request names the server in rawInput, the tool only in the
            # earlier update of the same toolCallId.
            call = {"toolCallId": call_id, "rawInput": {"server_name": server, "arguments": arguments}}
        if ask:
            answer = await self.conn.request_permission(
                session_id=sid,
                tool_call=call,
                options=[
                    {"optionId": "mcp-yes", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "mcp-no", "name": "Deny", "kind": "reject_once"},
                ],
            )
            chosen = getattr(answer.outcome, "option_id", None) or answer.outcome.outcome
            if chosen != "mcp-yes":
                await self.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "failed"})
                await self.say(sid, f"permission: {chosen}")
                return {"stopReason": "end_turn"}
        await self.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress"})
        names, text, is_error = await acp_test_mcp.call_tool(entry, state["cwd"], tool, arguments)
        await self.update(
            sid,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": call_id,
                "status": "failed" if is_error else "completed",
                "content": [{"type": "content", "content": {"type": "text", "text": text}}],
            },
        )
        transport = acp_test_mcp.transport_of(entry)
        await self.say(sid, f"via {transport}, tools {','.join(names)}: {text}")
        return {"stopReason": "end_turn"}

    async def scenario_calltool_ask(self, sid: str, args: list[str]) -> dict:
        return await self.scenario_calltool(sid, args, ask=True)

    async def scenario_fs(self, sid: str, args: list[str]) -> dict:
        cwd = self.sessions[sid]["cwd"]
        path = os.path.join(cwd, args[0] if args else "notes.txt")
        results = []
        try:
            read = await self.conn.read_text_file(session_id=sid, path=path, line=2, limit=2)
            results.append("read=" + repr(read.content))
        except RequestError as exc:
            results.append(f"read-error={exc}")
        try:
            await self.conn.write_text_file(session_id=sid, path=path + ".out", content="written\nby agent\n")
            results.append("write=ok")
        except RequestError as exc:
            results.append(f"write-error={exc}")
        for outside in (os.path.join(cwd, "..", "outside.txt"), os.path.join(cwd, "escape", "secret.txt")):
            try:
                got = await self.conn.read_text_file(session_id=sid, path=outside)
                results.append("outside-read=" + repr(got.content))
            except RequestError as exc:
                results.append(f"outside-refused={exc.code}")
            try:
                await self.conn.write_text_file(session_id=sid, path=outside, content="pwned")
                results.append("outside-write=ok")
            except RequestError as exc:
                results.append(f"outside-write-refused={exc.code}")
        await self.say(sid, "\n".join(results))
        return {"stopReason": "end_turn"}

    async def scenario_terminal(self, sid: str, args: list[str]) -> dict:
        code = (
            "import os, sys, time\n"
            "print('hello from', os.environ.get('TERM_TEST_VAR'), os.getcwd())\n"
            "sys.stdout.flush()\n"
            "time.sleep(0.2)\n"
            "print('é' * 40)\n"
            "sys.exit(7)\n"
        )
        term = await self.conn.create_terminal(
            session_id=sid,
            command=sys.executable,
            args=["-c", code],
            env=[{"name": "TERM_TEST_VAR", "value": "42"}],
            output_byte_limit=50,
        )
        tid = term.terminal_id
        await self.update(
            sid,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "call-t",
                "title": "Run python",
                "kind": "execute",
                "status": "in_progress",
                "rawInput": {"command": ["python", "-c", "..."]},
                "content": [{"type": "terminal", "terminalId": tid}],
            },
        )
        status = await self.conn.wait_for_terminal_exit(session_id=sid, terminal_id=tid)
        out = await self.conn.terminal_output(session_id=sid, terminal_id=tid)
        # A second terminal killed while running: its signal is reported.
        sleeper = await self.conn.create_terminal(session_id=sid, command="sleep", args=["30"])
        await self.conn.kill_terminal(session_id=sid, terminal_id=sleeper.terminal_id)
        killed = await self.conn.wait_for_terminal_exit(session_id=sid, terminal_id=sleeper.terminal_id)
        await self.conn.release_terminal(session_id=sid, terminal_id=sleeper.terminal_id)
        await self.conn.release_terminal(session_id=sid, terminal_id=tid)
        try:
            await self.conn.terminal_output(session_id=sid, terminal_id=tid)
            released = "still-there"
        except RequestError:
            released = "gone"
        await self.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "call-t", "status": "completed"})
        await self.say(
            sid,
            f"exit={status.exit_code} truncated={out.truncated} len={len(out.output.encode())} "
            f"killed={killed.signal} released={released}\n{out.output}",
        )
        return {"stopReason": "end_turn"}

    async def scenario_bigterm(self, sid: str, args: list[str]) -> dict:
        cwd = self.sessions[sid]["cwd"]
        go, progress = os.path.join(cwd, "go"), os.path.join(cwd, "progress")
        code = (
            "import os, time\n"
            f"while not os.path.exists({go!r}): time.sleep(0.01)\n"
            f"fd = os.open({progress!r}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)\n"
            "line = b'x' * 65535 + b'\\n'\n"
            f"for i in range({int(args[0])}):\n"
            "    os.write(1, line)\n"
            "    os.pwrite(fd, b'%12d' % (i + 1), 0)\n"
        )
        term = await self.conn.create_terminal(session_id=sid, command=sys.executable, args=["-c", code])
        await self.update(
            sid,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "call-big",
                "title": "Write a lot",
                "kind": "execute",
                "status": "in_progress",
                "content": [{"type": "terminal", "terminalId": term.terminal_id}],
            },
        )
        # A round trip: the client has read the tool call (and knows the terminal) by now.
        await self.conn.terminal_output(session_id=sid, terminal_id=term.terminal_id)
        open(go, "w").close()
        status = await self.conn.wait_for_terminal_exit(session_id=sid, terminal_id=term.terminal_id)
        await self.conn.release_terminal(session_id=sid, terminal_id=term.terminal_id)
        await self.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "call-big", "status": "completed"})
        await self.say(sid, f"exit={status.exit_code}")
        return {"stopReason": "end_turn"}

    async def scenario_terminals(self, sid: str, args: list[str]) -> dict:
        """N terminals running ``sleep 60``, none released (they end with the session); then
        one is released and another created. Each answer as a line: ok, or the error."""
        results = []
        created = []
        for _ in range(int(args[0])):
            try:
                term = await self.conn.create_terminal(session_id=sid, command="sleep", args=["60"])
                created.append(term.terminal_id)
                results.append("ok")
            except RequestError as exc:
                results.append(f"refused={exc.code}: {exc}")
        if created:
            await self.conn.kill_terminal(session_id=sid, terminal_id=created[0])
            await self.conn.wait_for_terminal_exit(session_id=sid, terminal_id=created[0])
            await self.conn.release_terminal(session_id=sid, terminal_id=created[0])
            try:
                await self.conn.create_terminal(session_id=sid, command="sleep", args=["60"])
                results.append("after-release=ok")
            except RequestError as exc:
                results.append(f"after-release=refused={exc.code}: {exc}")
        await self.say(sid, "\n".join(results))
        return {"stopReason": "end_turn"}

    async def scenario_slow(self, sid: str, args: list[str]) -> dict:
        await self.say(sid, "working")
        await self.cancelled[sid].wait()
        return {"stopReason": "cancelled"}

    async def scenario_slow_permission(self, sid: str, args: list[str]) -> dict:
        await self.update(
            sid,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "call-s",
                "title": "Run rm",
                "kind": "execute",
                "status": "pending",
                "rawInput": {"command": "rm -rf build"},
            },
        )
        answer = await self.conn.request_permission(
            session_id=sid,
            tool_call={"toolCallId": "call-s"},
            options=[
                {"optionId": "ok", "name": "OK", "kind": "allow_once"},
                {"optionId": "nope", "name": "Nope", "kind": "reject_once"},
            ],
        )
        if answer.outcome.outcome == "cancelled":
            return {"stopReason": "cancelled"}
        return {"stopReason": "end_turn"}

    async def scenario_hang(self, sid: str, args: list[str]) -> dict:
        await self.say(sid, "about to hang")
        await asyncio.Event().wait()
        return {"stopReason": "end_turn"}

    async def scenario_ratelimit(self, sid: str, args: list[str]) -> dict:
        state = self.sessions[sid]
        state["limited"] = state.get("limited", 0) + 1
        if state["limited"] == 1:
            raise RequestError(429, "Rate limit exceeded, try again later")
        await self.say(sid, "after the limit")
        return {"stopReason": "end_turn"}

    async def scenario_auth(self, sid: str, args: list[str]) -> dict:
        raise RequestError(-32000, "Authentication required")

    async def scenario_refuse(self, sid: str, args: list[str]) -> dict:
        return {"stopReason": "refusal"}

    async def scenario_max(self, sid: str, args: list[str]) -> dict:
        await self.say(sid, "partial")
        return {"stopReason": "max_tokens"}

    async def scenario_turns(self, sid: str, args: list[str]) -> dict:
        return {"stopReason": "max_turn_requests"}

    async def scenario_die(self, sid: str, args: list[str]) -> dict:
        await self.say(sid, "dying")
        await asyncio.sleep(0.05)
        sys.stderr.write("fatal: the test agent dies\n")
        sys.stderr.flush()
        os._exit(3)

    async def scenario_garbage(self, sid: str, args: list[str]) -> dict:
        os.write(1, b"this is not json\n")
        await self.say(sid, "after garbage")
        return {"stopReason": "end_turn"}

    async def scenario_children(self, sid: str, args: list[str]) -> dict:
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
        child = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        with open(args[0], "w") as f:
            f.write(str(child.pid))
        await self.say(sid, f"child {child.pid}")
        return {"stopReason": "end_turn"}

    async def scenario_flood(self, sid: str, args: list[str]) -> dict:
        for i in range(int(args[0]) if args else 1000):
            await self.say(sid, f"{i} ")
        return {"stopReason": "end_turn"}

    async def scenario_mode(self, sid: str, args: list[str]) -> dict:
        state = self.sessions[sid]
        state["mode"] = "plan"
        await self.update(sid, {"sessionUpdate": "current_mode_update", "currentModeId": "plan"})
        state["model"] = "large-2"
        await self.update(
            sid,
            {
                "sessionUpdate": "config_option_update",
                "configOptions": config_options(state["mode"], state["model"], state["fast"]),
            },
        )
        await self.say(sid, "switched")
        return {"stopReason": "end_turn"}

    async def scenario_elicit(self, sid: str, args: list[str]) -> dict:
        import json

        # ``elicit url``: a URL-mode request (agentproto advertises form mode only).
        params: dict[str, Any] = {"sessionId": sid, "mode": "form", "message": "How should I refactor?",
                                  "requestedSchema": ELICIT_SCHEMA}
        if args[:1] == ["url"]:
            params = {"sessionId": sid, "mode": "url", "elicitationId": "e-1", "url": "https://example.invalid/",
                      "message": "Authorize"}
        try:
            answer = await self.conn._conn.send_request("elicitation/create", params)
        except RequestError as exc:
            answer = {"error": exc.code}
        await self.say(sid, json.dumps(answer, sort_keys=True))
        return {"stopReason": "end_turn"}

    async def scenario_withdraw(self, sid: str, args: list[str]) -> dict:
        """Asks a permission (or, ``withdraw elicit``, a question) and withdraws it at once
        with ``$/cancel_request``; the answer's error code as text."""
        raw = self.conn._conn
        rpc_id = raw._next_request_id
        if args[:1] == ["elicit"]:
            method, params = "elicitation/create", {"sessionId": sid, "mode": "form", "message": "?",
                                                   "requestedSchema": ELICIT_SCHEMA}
        else:
            method, params = "session/request_permission", {
                "sessionId": sid, "toolCall": {"toolCallId": "call-w", "title": "Run ls", "kind": "execute"},
                "options": [{"optionId": "ok", "name": "OK", "kind": "allow_once"}],
            }
        asked = asyncio.ensure_future(raw.send_request(method, params))
        await asyncio.sleep(0)  # the request is written before the cancellation
        await raw.send_notification("$/cancel_request", {"requestId": rpc_id})
        try:
            await asked
            said = "answered"
        except RequestError as exc:
            said = f"error {exc.code}"
        await self.say(sid, said)
        return {"stopReason": "end_turn"}

    async def scenario_env(self, sid: str, args: list[str]) -> dict:
        await self.say(sid, " ".join(f"{name}={os.environ.get(name)}" for name in args))
        return {"stopReason": "end_turn"}

    async def scenario_mcp(self, sid: str, args: list[str]) -> dict:
        import json

        await self.say(sid, json.dumps(self.sessions[sid]["mcp"], sort_keys=True))
        return {"stopReason": "end_turn"}


#: The form ``elicit`` asks: every kind of property a form may hold.
ELICIT_SCHEMA = {
    "type": "object",
    "properties": {
        "strategy": {"type": "string", "title": "Strategy", "enum": ["safe", "bold"], "enumNames": ["Safe", "Bold"]},
        "areas": {"type": "array", "title": "Areas", "items": {"anyOf": [{"const": "api", "title": "API"},
                                                                         {"const": "ui", "title": "UI"}]}},
        "tests": {"type": "boolean", "description": "Write tests?"},
        "budget": {"type": "integer"},
        "note": {"type": "string"},
    },
    "required": ["strategy"],
}


def main() -> None:
    asyncio.run(acp.run_agent(TestAgent(), use_unstable_protocol=True))


if __name__ == "__main__":
    main()
