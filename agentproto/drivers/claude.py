"""The Claude Code driver: the ``claude`` CLI over stream-json and its control protocol.

The CLI is launched the way Anthropic's own SDK launches it (``--input-format
stream-json --output-format stream-json --verbose``), with ``--permission-prompt-tool
stdio`` so every permission comes to us as a ``can_use_tool`` control request and
``--include-partial-messages`` so text streams as deltas. One process serves the whole
session; each user message we write is one turn, ended by a ``result`` message.

Rules of this file:
- The mapping is pure and lives in ``claude_mapping.py`` (dicts in, protocol values out),
  tested on captured CLI output without a process.
- Text reaches the app once: from the stream's deltas, and from a whole ``assistant``
  message only for what the deltas did not carry (synthetic or unstreamed messages).
- The CLI is the source of truth for turn boundaries: a ``result`` ends the turn whose
  user message it answers, in the order the messages were written, so a late result of
  a cancelled turn never ends the next one.
- Unknown message types and subtypes are skipped (newer CLIs add them); a line that is
  not JSON becomes a ``Diagnostic``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar

from agentproto import private
from agentproto.drivers.base import Host, Launch, LineDriver
from agentproto.drivers.fields import obj, opt_integer, opt_text, text
from agentproto.drivers.claude_mapping import (
    FEATURES,
    MCP_TRANSPORTS,
    PERMISSION_OPTIONS,
    always_rules,
    auth_status,
    build_argv,
    config_options,
    initial_mode,
    login_methods,
    mcp_config,
    question_answers,
    question_request,
    result_text,
    slash_commands,
    stop_reason,
    tool_snapshot,
    turn_usage,
    user_message,
)
from agentproto.loop import Timer
from agentproto.errors import AgentError, Kind
from agentproto.wire import decode_json_line

HANDSHAKE_TIMEOUT = 60.0
#: A stream delta's type -> the member holding its text and the event it becomes.
DELTA_FIELDS = {"text_delta": ("text", "TextDelta"), "thinking_delta": ("thinking", "ReasoningDelta")}
#: How long ``close`` waits after ending the CLI's input before signalling its group.
CLOSE_GRACE = 2.0

# -- the driver --------------------------------------------------------------------------


class _Message:
    """What the stream told us of one assistant message: its blocks' streamed text."""

    __slots__ = ("blocks", "emitted", "ended", "matched", "uuid")

    def __init__(self) -> None:
        self.blocks: dict[int, list[Any]] = {}  # index -> [type, text]
        self.matched: set[int] = set()
        self.emitted = False
        self.ended = False
        self.uuid: str | None = None  # the transcript entry of its last block


class ClaudeDriver(LineDriver):
    def __init__(self, host: Host, launch: Launch) -> None:
        super().__init__(host, launch)
        self.tools_disabled = launch.tools_disabled
        self.session_id: str | None = None
        self.state = "opening"  # opening -> open -> closing -> gone
        self._init: dict[str, Any] | None = None
        self._version: Any = False  # False until get_binary_version answered
        self._handshake: Timer | None = None
        self._control: dict[
            str, Callable[[dict[str, Any] | None, str | None], None]
        ] = {}
        self._counter = 0
        #: Entries of the user messages written, oldest first, until their result:
        #: the engine's turn id, or None for a turn the engine has given up on.
        self._written: deque[str | None] = deque()
        self._turn: str | None = None
        self._cancelling = False
        self._compacting = False
        self._auth_failed: str | None = None
        self._messages: dict[str, _Message] = {}
        self._tools: dict[str, dict[str, Any]] = {}
        self._requests: dict[str, dict[str, Any]] = {}  # our request id -> CLI request
        self._always_deny: set[str] = set()
        self._context_used = 0
        self._parents: dict[str, str] = {}  # tool id -> the subagent tool it runs under
        self._stream_id: str | None = None  # the message the stream events are about
        self._details: dict[str, Any] = {}  # as reported to the engine, kept current
        self._settings: dict[str, Any] = {}  # option id -> current value
        self._pending: list[Any] | None = (
            None  # [kind, message id, parent, text] not yet sent
        )
        self._flush_scheduled = False
        self._private: str | None = None  # the session's private directory, if it needs one

    # -- the engine's hooks
    def deterministic(self, origin: Any) -> bool:
        return True  # every turn ends with a ``result``; no quiet-window inference

    # -- lifecycle
    def open(self) -> None:
        launch = self.launch
        if launch.resume and not launch.fork:
            self.session_id = launch.resume
            new_id = None
        else:
            self.session_id = new_id = str(uuid.uuid4())
        env = launch.child_env()
        env.pop(
            "CLAUDECODE", None
        )  # a parent Claude Code must not make the child think it is nested
        if launch.config_home:
            env["CLAUDE_CONFIG_DIR"] = os.path.abspath(
                os.path.expanduser(launch.config_home)
            )
        try:
            argv = build_argv(launch, new_id, self._write_mcp_config())
        except OSError as exc:
            private.remove_tree(self._private)
            raise AgentError.detail(
                Kind.SPAWN_FAILED, f"{exc.filename or launch.executable}: {exc.strerror or exc}"
            ) from None
        try:
            # Closed means gone: the exit is reported once the CLI's whole group (its
            # MCP servers, the commands it runs) has exited.
            self.spawn(argv, env, wait_group=True)
        except BaseException:
            private.remove_tree(self._private)
            raise
        self._handshake = self.host.loop.call_later(
            HANDSHAKE_TIMEOUT, self._handshake_expired
        )
        self._request({"subtype": "initialize", "hooks": None}, self._initialized)
        self._request({"subtype": "get_binary_version"}, self._got_version)

    def _write_mcp_config(self) -> str | None:
        """``--mcp-config`` as a 0600 file in the session's private directory: the
        servers' env and header values must not be on the command line, which every
        local user can read in /proc/PID/cmdline. Removed once the CLI is gone."""
        if not self.launch.mcp_servers:
            return None
        self._private = private.session_dir("claude")
        path = os.path.join(self._private, "mcp.json")
        private.write_private(path, json.dumps(mcp_config(self.launch.mcp_servers)))
        return path

    def _handshake_expired(self) -> None:
        if self.state == "opening":
            self.state = "closing"
            self.host.open_failed(
                AgentError.detail(
                    Kind.HANDSHAKE_TIMEOUT,
                    f"claude did not answer initialize in {HANDSHAKE_TIMEOUT:g} s",
                )
            )
            self.kill()

    def _initialized(self, response: dict[str, Any] | None, error: str | None) -> None:
        if self.state != "opening":
            return
        if error is not None or response is None:
            self.state = "closing"
            self.host.open_failed(AgentError.protocol_failed(f"claude refused initialize: {error}", self.line))
            self.kill()
            return
        self._init = response
        self._maybe_opened()

    def _got_version(self, response: dict[str, Any] | None, error: str | None) -> None:
        version = response.get("version") if isinstance(response, dict) else None
        self._version = version if isinstance(version, str) else None
        self._maybe_opened()

    def _maybe_opened(self) -> None:
        if self.state != "opening" or self._init is None or self._version is False:
            return
        if self._handshake is not None:
            self._handshake.cancel()
        launch = self.launch
        auth = auth_status(self._init.get("account"), launch.executable)
        probing = launch.throwaway and not launch.tools_disabled
        if "Unauthenticated" in auth and not probing:
            self.state = "closing"
            self.host.open_failed(
                AgentError.auth_required(
                    "Claude Code is not logged in", auth["Unauthenticated"]["login"]
                )
            )
            self.kill()
            return
        self.state = "open"
        effort = launch.configure.get("effort")
        details = {
            "version": self._version,
            "auth": auth,
            "capabilities": {
                "features": list(FEATURES),
                "mcp_transports": list(MCP_TRANSPORTS),
            },
            "config_options": config_options(
                self._init,
                launch.configure.get("model"),
                initial_mode(launch),
                effort if isinstance(effort, str) else None,
            ),
            "commands": slash_commands(self._init),
        }
        self._details = details
        self._settings = {
            o["id"]: o["current"]
            for o in details["config_options"]
            if o["current"] is not None
        }
        # The engine keeps (and edits) its own copy.
        self.host.opened(json.loads(json.dumps(details)), resume_token=self.session_id)

    def _setting_changed(self, option: str, value: Any) -> bool:
        """Track a setting's value (the engine keeps its own copy); True if it changed."""
        if self._settings.get(option) == value:
            return False
        self._settings[option] = value
        for entry in self._details.get("config_options", []):
            if entry["id"] == option:
                entry["current"] = value
        return True

    def close(self) -> None:
        if self.transport is None or self.state == "gone":
            self.host.closed()
            return
        if self._turn is not None and self.state == "open":
            self._request({"subtype": "interrupt"}, lambda r, e: None)
        self.state = "closing"
        self.transport.shutdown(CLOSE_GRACE)

    def kill(self) -> None:
        if self.state == "open":
            self.state = "closing"
        if self.transport is not None:
            self.transport.kill()

    def on_exit(self, status: str | None, stderr: str) -> None:
        private.remove_tree(self._private)
        self._flush()
        previous, self.state = self.state, "gone"
        if self._handshake is not None:
            self._handshake.cancel()
        for callback in list(self._control.values()):
            callback(None, "claude exited")
        self._control.clear()
        if previous == "opening":
            tail = stderr.strip()[-2000:]
            detail = f"claude exited (status {status}) before it was ready" + (
                f": {tail}" if tail else ""
            )
            self.host.open_failed(AgentError.detail(Kind.SPAWN_FAILED, detail))
        elif previous == "open":
            self.host.fail(AgentError.process_exited(status, stderr))
        self.host.closed()


    # -- turns
    def start_turn(self, turn_id: str, text: str, attachments: list[str]) -> None:
        self._begin(turn_id)
        self.send(user_message(text, attachments))

    def compact(self) -> None:
        self._begin("compact")
        self._compacting = True
        self.send(user_message("/compact", []))

    def _begin(self, turn_id: str) -> None:
        # A turn the engine already ended (cancel grace ran out) still owes a result;
        # it must not end this one.
        self._written = deque(
            None if entry == self._turn else entry for entry in self._written
        )
        self._turn = turn_id
        self._cancelling = False
        self._compacting = False
        self._auth_failed = None
        self._written.append(turn_id)

    def cancel(self) -> None:
        if self._turn is None or self.state != "open":
            return
        self._cancelling = True
        self._request({"subtype": "interrupt"}, lambda r, e: None)

    def answer(self, request: dict[str, Any], answer: Any) -> None:
        if "Permission" in request:
            request_id = request["Permission"]["id"]
        else:
            request_id = request["Question"]["id"]
        pending = self._requests.pop(request_id, None)
        if pending is None:
            return  # withdrawn by the CLI, or already answered
        body = pending["request"]
        tool_name = str(body.get("tool_name", ""))
        tool_input = body.get("input") if isinstance(body.get("input"), dict) else {}
        if answer == "Cancel":
            reply: dict[str, Any] = {
                "behavior": "deny",
                "message": "The user dismissed this request.",
            }
        elif "Deny" in answer:
            reply = {"behavior": "deny", "message": answer["Deny"]["message"]}
        elif "Question" in answer:
            reply = {
                "behavior": "allow",
                "updatedInput": {
                    **tool_input,
                    "answers": question_answers(request, answer["Question"]),
                },
            }
        else:
            choice = answer["Permission"]
            if choice in ("AllowOnce", "AllowAlways"):
                reply = {"behavior": "allow", "updatedInput": tool_input}
                if choice == "AllowAlways":
                    reply["updatedPermissions"] = always_rules(
                        tool_name, body.get("permission_suggestions")
                    )
            else:
                if choice == "DenyAlways":
                    self._always_deny.add(tool_name)
                reply = {
                    "behavior": "deny",
                    "message": "The user denied this tool use.",
                }
        self._reply(pending["request_id"], reply)
        tool_id = body.get("tool_use_id")
        tool = self._tools.get(tool_id) if isinstance(tool_id, str) else None
        if (
            tool is not None
            and reply["behavior"] == "allow"
            and tool["status"] == "Pending"
        ):
            self._tool_status(tool, "Running", parent=pending.get("parent"))

    # -- settings
    def validate_config(self, option: dict[str, Any], value: Any) -> str | None:
        if option.get("id") == "model":
            # Any model id goes through unchanged, listed or not: the CLI resolves it.
            return (
                None
                if isinstance(value, str) and value.strip()
                else "expects a model id"
            )
        return super().validate_config(option, value)

    def configure(
        self, option: str, value: Any, done: Callable[[AgentError | None], None]
    ) -> None:
        if option == "model":
            request: dict[str, Any] = {"subtype": "set_model", "model": value}
        elif option == "mode":
            request = {"subtype": "set_permission_mode", "mode": value}
        elif option == "effort":
            request = {
                "subtype": "apply_flag_settings",
                "settings": {"effortLevel": value},
            }
        else:
            done(
                AgentError.detail(
                    Kind.INVALID_CONFIGURATION, f"{option}: claude has no such setting"
                )
            )
            return

        def applied(response: dict[str, Any] | None, error: str | None) -> None:
            if error is not None:
                done(AgentError.detail(Kind.INVALID_CONFIGURATION, f"{option}: {error}"))
            else:
                self._setting_changed(option, value)
                done(None)

        if self.state != "open":
            done(AgentError.session_closed(self.host.session_id))
            return
        self._request(request, applied)

    # -- plumbing
    def _request(
        self,
        request: dict[str, Any],
        callback: Callable[[dict[str, Any] | None, str | None], None],
    ) -> None:
        self._counter += 1
        request_id = f"ap_{self._counter}"
        self._control[request_id] = callback
        self.send(
            {"type": "control_request", "request_id": request_id, "request": request}
        )

    def _reply(
        self,
        request_id: str,
        response: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        if error is not None:
            body: dict[str, Any] = {
                "subtype": "error",
                "request_id": request_id,
                "error": error,
            }
        else:
            body = {
                "subtype": "success",
                "request_id": request_id,
                "response": response or {},
            }
        self.send({"type": "control_response", "response": body})

    def _emit(
        self,
        kind: Any,
        parent: str | None = None,
        extensions: dict[str, Any] | None = None,
    ) -> None:
        if self._pending is not None:
            self._flush()
        self.host.emit(kind, extensions, parent)

    def _delta(self, kind: str, message_id: str, text: str, parent: str | None) -> None:
        """A text or reasoning delta; the deltas of one read are sent as one event.

        The CLI writes a burst of small deltas at once (one per API stream event); the
        app gets the same text, joined, at the same moment, for far fewer events.
        """
        pending = self._pending
        if pending is not None:
            if pending[0] == kind and pending[1] == message_id and pending[2] == parent:
                pending[3] += text
                return
            self._flush()
        self._pending = [kind, message_id, parent, text]
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.host.loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._flush_scheduled = False
        self._flush()

    def _flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            kind, message_id, parent, text = pending
            self.host.emit(
                {kind: {"message_id": message_id, "text": text}}, None, parent
            )

    def _tool_status(
        self,
        tool: dict[str, Any],
        status: str,
        output: str | None = None,
        parent: str | None = None,
    ) -> None:
        tool["status"] = status
        if output is not None:
            tool["output"] = output
        self._emit({"ToolUpdated": dict(tool)}, parent)

    # -- what the CLI writes
    def on_line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            msg = decode_json_line(line)
        except ValueError as exc:
            self._flush()
            shown = line[:200].decode("utf-8", "replace")
            self.host.diagnostic("Warning", f"claude wrote a line that is {exc}: {shown}")
            return
        if self._pending is not None and not (
            isinstance(msg, dict) and msg.get("type") == "stream_event"
        ):
            self._flush()  # whatever this line reports comes after the deltas before it
        if not isinstance(msg, dict):
            self.host.diagnostic(
                "Warning", "claude wrote a JSON value that is not an object"
            )
            return
        kind = msg.get("type")
        handler = self._HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            handler(self, msg)
        # Newer CLIs add message types: what we do not know is skipped. A line that
        # raises in its handler is the line guard's (LineDriver): a Diagnostic.

    def _on_control_response(self, msg: dict[str, Any]) -> None:
        response = msg.get("response") or {}
        callback = self._control.pop(str(response.get("request_id")), None)
        if callback is None:
            return
        if response.get("subtype") == "error":
            callback(None, str(response.get("error") or "error"))
        else:
            body = response.get("response")
            callback(body if isinstance(body, dict) else {}, None)

    def _on_control_request(self, msg: dict[str, Any]) -> None:
        request_id = msg.get("request_id")
        if not isinstance(request_id, str):
            self.host.diagnostic("Warning", "claude sent a control_request without a string request_id; skipped")
            return
        body = obj(msg.get("request"))
        subtype = body.get("subtype")
        try:
            if subtype == "can_use_tool":
                self._permission(request_id, body)
            elif subtype == "hook_callback":
                self._reply(request_id, {})
            else:
                self._reply(request_id, error=f"agentproto does not handle {subtype}")
        except Exception:
            # The CLI waits for every control request's answer: one we failed to handle
            # still gets one (the line guard reports the failure itself).
            self._requests.pop(request_id, None)
            self._reply(request_id, error=f"agentproto could not handle {subtype}")
            raise

    def _permission(self, request_id: str, body: dict[str, Any]) -> None:
        name = str(body.get("tool_name", ""))
        raw_input = body.get("input")
        tool_input: dict[str, Any] = raw_input if isinstance(raw_input, dict) else {}
        raw_id = body.get("tool_use_id")
        tool_id = raw_id if isinstance(raw_id, str) else request_id
        parent = self._parents.get(tool_id)
        tool = self._tools.get(tool_id)
        if tool is None:
            tool = self._tools[tool_id] = tool_snapshot(tool_id, name, tool_input)
            self._emit({"ToolUpdated": dict(tool)}, parent)
        if name in self._always_deny:
            self._reply(
                request_id,
                {
                    "behavior": "deny",
                    "message": "The user denied this tool for the session.",
                },
            )
            self._tool_status(tool, "Denied", parent=parent)
            return
        self._requests[request_id] = {
            "request_id": request_id,
            "request": body,
            "parent": parent,
        }
        if name == "AskUserQuestion":
            self._emit(
                {"RequestOpened": question_request(request_id, tool_input)}, parent
            )
            return
        if name == "ExitPlanMode" and isinstance(tool_input.get("plan"), str):
            self._emit({"PlanProposed": {"markdown": tool_input["plan"]}}, parent)
        detail = (
            body.get("description")
            or body.get("decision_reason")
            or body.get("blocked_path")
        )
        permission = {
            "id": request_id,
            "tool": dict(tool),
            "options": list(PERMISSION_OPTIONS),
            "detail": detail if isinstance(detail, str) else None,
        }
        self._emit({"RequestOpened": {"Permission": permission}}, parent)

    def _on_control_cancel(self, msg: dict[str, Any]) -> None:
        request_id = str(msg.get("request_id"))
        if self._requests.pop(request_id, None) is not None:
            self.host.request_withdrawn(request_id)

    def _on_system(self, msg: dict[str, Any]) -> None:
        subtype = msg.get("subtype")
        if subtype == "init":
            session_id = msg.get("session_id")
            if (
                isinstance(session_id, str)
                and session_id
                and session_id != self.session_id
            ):
                self.session_id = session_id
                self.host.update(resume_token=session_id)
            if (
                self._written
                and self._written[0] is not None
                and self._written[0] == self._turn
            ):
                self.host.turn_acknowledged()
        elif subtype == "api_retry":
            self.host.diagnostic(
                "Warning",
                f"claude: API error {msg.get('error_status')} ({msg.get('error')}); retry "
                f"{msg.get('attempt')}/{msg.get('max_retries')} in {float(msg.get('retry_delay_ms') or 0) / 1000:.1f} s",
            )
        elif subtype == "compact_boundary":
            self._context_used = 0
            self._emit("ContextCompacted")
        elif subtype == "status":
            if msg.get("compact_result") == "failed":
                self.host.diagnostic(
                    "Warning", f"claude: compact failed: {msg.get('compact_error')}"
                )
            mode = msg.get("permissionMode")
            # The CLI changes its own mode too (approving ExitPlanMode leaves plan mode).
            if (
                isinstance(mode, str)
                and self._details
                and self._setting_changed("mode", mode)
            ):
                self.host.update(
                    details=json.loads(json.dumps(self._details)),
                    configuration={"options": dict(self._settings)},
                )

    def _on_stream_event(self, msg: dict[str, Any]) -> None:
        event = obj(msg.get("event"))
        kind = event.get("type")
        parent = opt_text(msg.get("parent_tool_use_id"))
        if kind == "message_start":
            message_id = obj(event.get("message")).get("id")
            if not isinstance(message_id, str):
                self.host.diagnostic("Warning", "claude: skipped a message_start without a string message id")
                return
            self._stream_id = message_id
            self._messages.setdefault(message_id, _Message())
            return
        message_id = self._stream_id
        state = self._messages.get(message_id) if message_id else None
        if state is None or message_id is None:
            return
        index = opt_integer(event.get("index"))
        if kind == "content_block_start":
            block = obj(event.get("content_block"))
            if block.get("type") in ("text", "thinking") and index is not None:
                state.blocks[index] = [block["type"], ""]
        elif kind == "content_block_delta":
            delta = obj(event.get("delta"))
            entry = state.blocks.get(index) if index is not None else None
            if entry is None:
                return
            field, kind_name = DELTA_FIELDS.get(text(delta.get("type")), (None, None))
            if field is None or kind_name is None:
                return  # signature and input_json deltas carry nothing to stream
            piece = delta.get(field)
            if not isinstance(piece, str):
                self.host.diagnostic("Warning", f"claude: skipped a {delta['type']} whose {field} is not a string")
            elif piece:
                entry[1] += piece
                state.emitted = True
                self._delta(kind_name, message_id, piece, parent)
        elif kind == "message_stop":
            self._end_message(message_id, state, parent)

    def _end_message(
        self, message_id: str, state: _Message, parent: str | None
    ) -> None:
        if state.emitted and not state.ended:
            state.ended = True
            # The transcript entry's uuid is what ``fork_at`` (--resume-session-at) takes.
            extensions = {"claude": {"uuid": state.uuid}} if state.uuid else None
            self._emit({"MessageEnded": {"message_id": message_id}}, parent, extensions)

    def _on_assistant(self, msg: dict[str, Any]) -> None:
        message = obj(msg.get("message"))
        parent = opt_text(msg.get("parent_tool_use_id"))
        if msg.get("error"):
            # A synthetic message reporting an error ("Not logged in", "API Error: …"):
            # the turn's result carries it as the failure; it is not the model's text.
            if msg["error"] == "authentication_failed":
                self._auth_failed = (
                    result_text(message.get("content")) or "authentication failed"
                )
            return
        message_id = text(message.get("id")) or text(msg.get("uuid")) or str(uuid.uuid4())
        state = self._messages.get(message_id)
        streamed = state is not None
        if state is None:
            state = self._messages[message_id] = _Message()
        if isinstance(msg.get("uuid"), str):
            state.uuid = msg["uuid"]
        usage = message.get("usage")
        if isinstance(usage, dict) and parent is None:
            used = sum(
                v
                for k, v in usage.items()
                if k
                in (
                    "input_tokens",
                    "cache_read_input_tokens",
                    "cache_creation_input_tokens",
                    "output_tokens",
                )
                and isinstance(v, int)
            )
            if used:
                self._context_used = used
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if btype in ("text", "thinking"):
                whole = block.get("text" if btype == "text" else "thinking")
                if isinstance(whole, str):
                    self._reconcile(message_id, state, btype, whole, parent)
            elif btype == "tool_use":
                self._tool_started(block, parent)
        if not streamed:
            self._end_message(message_id, state, parent)

    def _reconcile(
        self,
        message_id: str,
        state: _Message,
        btype: str,
        whole: str,
        parent: str | None,
    ) -> None:
        """Emit what the deltas of this block did not carry (all of it if none streamed)."""
        seen = ""
        for index in sorted(state.blocks):
            entry = state.blocks[index]
            if index not in state.matched and entry[0] == btype:
                state.matched.add(index)
                seen = entry[1]
                break
        rest = whole[len(seen) :] if whole.startswith(seen) else ""
        if rest:
            state.emitted = True
            self._delta(
                "TextDelta" if btype == "text" else "ReasoningDelta",
                message_id,
                rest,
                parent,
            )

    def _tool_started(self, block: dict[str, Any], parent: str | None) -> None:
        tool_id = str(block.get("id"))
        name = str(block.get("name", ""))
        tool_input = block.get("input")
        tool = tool_snapshot(tool_id, name, tool_input)
        previous = self._tools.get(tool_id)
        if previous is not None:
            tool["status"] = previous["status"]
        self._tools[tool_id] = tool
        if parent:
            self._parents[tool_id] = parent
        self._emit({"ToolUpdated": dict(tool)}, parent)
        if (
            name == "TodoWrite"
            and isinstance(tool_input, dict)
            and isinstance(tool_input.get("todos"), list)
        ):
            status = {
                "pending": "Pending",
                "in_progress": "InProgress",
                "completed": "Completed",
            }
            entries = [
                {
                    "text": str(t.get("content", "")),
                    "status": status.get(str(t.get("status")), "Pending"),
                }
                for t in tool_input["todos"]
                if isinstance(t, dict)
            ]
            self._emit({"PlanUpdated": {"entries": entries}}, parent)

    def _on_user(self, msg: dict[str, Any]) -> None:
        if msg.get("isReplay"):
            return
        message = obj(msg.get("message"))
        parent = opt_text(msg.get("parent_tool_use_id"))
        content = message.get("content")
        if isinstance(content, str):
            if parent:
                self._user_message(msg, content, parent)
            return
        for block in content or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_result":
                tool_id = str(block.get("tool_use_id"))
                tool = self._tools.get(tool_id)
                if tool is None:
                    continue
                status = "Failed" if block.get("is_error") else "Completed"
                if tool["status"] == "Denied":
                    status = "Denied"
                self._tool_status(
                    tool, status, result_text(block.get("content")), parent
                )
                self._tools.pop(tool_id, None)
            elif block.get("type") == "text" and parent:
                self._user_message(msg, str(block.get("text", "")), parent)

    def _user_message(self, msg: dict[str, Any], body: str, parent: str) -> None:
        """User-role content of a subagent (its prompt from the parent agent): whole at once."""
        message_id = str(msg.get("uuid") or uuid.uuid4())
        self._emit({"UserMessage": {"message_id": message_id, "text": body}}, parent)
        self._emit({"MessageEnded": {"message_id": message_id}}, parent)

    def _on_result(self, msg: dict[str, Any]) -> None:
        owner = self._written.popleft() if self._written else None
        if owner is None or owner != self._turn:
            return  # the result of a turn the engine already ended
        for message_id, state in self._messages.items():
            self._end_message(message_id, state, None)
        self._messages.clear()
        window = None
        for entry in (msg.get("modelUsage") or {}).values():
            if isinstance(entry, dict) and isinstance(entry.get("contextWindow"), int):
                window = max(window or 0, entry["contextWindow"])
        cost = msg.get("total_cost_usd")
        if self._context_used or isinstance(cost, (int, float)):
            self._emit(
                {
                    "ContextUsage": {
                        "used_tokens": self._context_used,
                        "window_tokens": window,
                        "cost_usd": float(cost)
                        if isinstance(cost, (int, float))
                        else None,
                    }
                }
            )
        auth_failed = self._auth_failed
        stop = stop_reason(msg, self._cancelling)
        if self._compacting and not self._cancelling and "Failed" not in stop:
            stop = {"Completed": {"source": "Protocol"}}
        self._turn = None
        self._cancelling = False
        self._compacting = False
        self._auth_failed = None
        self._tools.clear()
        self._requests.clear()
        self.host.end_turn(stop, turn_usage(msg))
        if auth_failed is not None:
            self.host.fail(
                AgentError.auth_required(
                    auth_failed, login_methods(self.launch.executable)
                )
            )

    _HANDLERS: ClassVar[dict[str, Callable[[ClaudeDriver, dict[str, Any]], None]]] = {
        "control_response": _on_control_response,
        "control_request": _on_control_request,
        "control_cancel_request": _on_control_cancel,
        "system": _on_system,
        "stream_event": _on_stream_event,
        "assistant": _on_assistant,
        "user": _on_user,
        "result": _on_result,
    }
