"""The ACP session once it is open: prompts and their turns, the agent's session updates as
events, and the agent's requests (permissions, fs/*, terminal/*) with their answers. A part of
``AcpDriver`` (drivers/acp/driver.py: the handshake, the session's setup, its end).

Rules of this file:
- Turn content is only taken from an open session (session/load's replay of history
  ends before the session opens); before that only the session's state is.
- A permission answer selects the agent's option whose *kind* matches; option ids differ
  between agents and are never guessed. ``cancel`` answers every open permission with
  ``cancelled``, as the spec says, and marks the turn's unfinished tools cancelled. A
  permission for one of the app's own tools is allowed here: the app decides when it
  answers the ToolCall.
- Every request of the agent's gets an answer: the app's, the service's (fs/* inside
  ``dir``, terminal/* as real processes: acp_services), ``method not found``, or an
  error when its handling fails. In a replay (``Launch.recorded_answer``) fs/* and
  terminal/* get the recorded answer instead, and nothing is served.
- A turn whose agent has been silent for the turn timeout (and waits on nothing of ours) ends
  Failed; a prompt's error that is a rate limit (429, or its words in the message or in
  ``data.message``) is reported as one (ratelimits.py)."""

from __future__ import annotations

import base64
import mimetypes
import os
from typing import TYPE_CHECKING, Any

from agentproto.core.errors import AgentError
from agentproto.core.jsonrpc import INTERNAL_ERROR, METHOD_NOT_FOUND, OnResponse, RpcError
from agentproto.drivers import ratelimits
from agentproto.drivers.acp import fs as acp_fs
from agentproto.drivers.acp.mapping import (
    FINISHED,
    KIND_CHOICES,
    app_tool_called,
    block_text,
    cost_of,
    map_commands,
    map_context_usage,
    map_plan,
    map_stop_reason,
    map_usage,
    merge_tool_call,
    permission_outcome,
    public_tool,
)
from agentproto.drivers.base import APP_SERVER
from agentproto.drivers.fields import obj, objects, text
from agentproto.loopio import private

if TYPE_CHECKING:
    from agentproto.core.wire_types import AgentRequest, ConfigOption, SlashCommand, StopReason, TurnUsage
    from agentproto.drivers.acp.services import Terminals
    from agentproto.drivers.acp.types import (
        AcpToolCall,
        AcpToolSnapshot,
        CommandsUpdate,
        ConfigOptionsUpdate,
        ContentChunk,
        ExitStatus,
        ModeUpdate,
        PermissionOption,
        PermissionParams,
        PlanUpdate,
        SessionInfoUpdate,
        UsageUpdate,
    )
    from agentproto.drivers.base import Host, Launch, Lifecycle
    from agentproto.loopio.loop import Alarm, Loop
    from agentproto.loopio.transport import LineTransport

#: ACP's JSON-RPC error code for "authentication required".
AUTH_REQUIRED = -32000
#: How many times per turn timeout the turn timer looks for a sign of life.
TIMER_CHECKS = 8


class AcpTurn:
    """One prompt turn of an ACP session: its id, its JSON-RPC request id, its tools."""

    __slots__ = ("id", "rpc_id", "cancelled", "prompt", "tools", "cost_base")

    def __init__(self, turn_id: str, prompt: str, cost_base: float = 0.0) -> None:
        self.id, self.cost_base = turn_id, cost_base  # the session's cost before it (mapping.turn_cost)
        self.rpc_id: int | None = None
        self.cancelled = False
        self.prompt = prompt
        self.tools: list[str] = []


class AcpTurns:
    """The turn half of ``AcpDriver`` (a mixin of it)."""

    # What it shares with the driver (drivers/acp/driver.py sets each one).
    host: "Host"
    launch: "Launch"
    loop: "Loop"
    terminals: "Terminals"
    transport: "LineTransport | None"
    turn_timeout: float
    life: Lifecycle
    _session: str | None
    _turn: AcpTurn | None
    _cost_seen: float = 0.0  # the session's cost in the agent's last usage_update
    _turn_check: "Alarm"
    _last_seen: float
    _heard: int
    _heard_checked: int
    _waiting_on_us: int
    _instructed: bool
    _message: tuple[str, Any, str] | None
    _message_seq: int
    _tools: dict[str, AcpToolSnapshot]
    _permissions: dict[str, tuple[Any, list[PermissionOption]]]
    _permission_seq: int
    _term_tool: dict[str, str]
    _term_backlog: dict[str, list[str]]
    _commands: list[SlashCommand]
    _options: list[tuple[ConfigOption, str, str]]
    _features_seen: set[str]
    _title: str | None

    def _request(self, method: str, params: dict[str, Any], on_answer: OnResponse) -> int:
        raise NotImplementedError

    def _notify(self, method: str, params: dict[str, Any]) -> None:
        raise NotImplementedError

    def _respond(self, rpc_id: Any, result: Any = None, error: RpcError | None = None) -> None:
        raise NotImplementedError

    def _caps(self) -> dict[str, Any]:
        raise NotImplementedError

    def _error(self, step: str, error: RpcError) -> AgentError:
        raise NotImplementedError

    def _changed(self) -> None:
        raise NotImplementedError

    def _replace_config_options(self, config_options: Any) -> None:
        raise NotImplementedError

    # -- turns ------------------------------------------------------------------------

    def start_turn(self, turn_id: str, text: str, attachments: list[str]) -> None:
        turn = AcpTurn(turn_id, text, self._cost_seen)
        self._turn = turn
        blocks = self._prompt_blocks(text, attachments)
        turn.rpc_id = self._request(
            "session/prompt",
            {"sessionId": self._session, "prompt": blocks},
            lambda r, e: self._on_prompt_answer(turn, r, e),
        )
        self.host.turn_acknowledged()
        self._last_seen = self.loop.time()
        self._arm_turn_timer()

    def _prompt_blocks(self, text: str, attachments: list[str]) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if self.launch.instructions and not self._instructed:
            # ACP has no system prompt: the instructions lead the session's first prompt.
            self._instructed = True
            blocks.append({"type": "text", "text": self.launch.instructions})
        blocks.append({"type": "text", "text": text})
        images = bool((self._caps().get("promptCapabilities") or {}).get("image"))
        for path in attachments:
            full = os.path.abspath(os.path.join(self.launch.dir, path))
            mime = mimetypes.guess_type(full)[0] or ""
            if images and mime.startswith("image/"):
                try:
                    private.check_confined(full, "attachment")  # replay reads nothing outside its own
                    with open(full, "rb") as f:
                        data = base64.b64encode(f.read()).decode("ascii")
                    blocks.append({"type": "image", "data": data, "mimeType": mime, "uri": "file://" + full})
                    continue
                except OSError:
                    pass
            link: dict[str, Any] = {"type": "resource_link", "uri": "file://" + full, "name": os.path.basename(full)}
            if mime:
                link["mimeType"] = mime
            blocks.append(link)
        return blocks

    def _arm_turn_timer(self) -> None:
        self._heard_checked = self._heard
        self._turn_check.set(self.turn_timeout / TIMER_CHECKS)

    def _turn_timer(self) -> None:
        """Every part of the timeout: a turn whose agent wrote nothing (and waits on nothing of
        ours) for the whole timeout ends Failed. Lines are counted, not timed."""
        turn = self._turn
        if turn is None or self.life.state != "open":
            return
        now = self.loop.time()
        if self._heard != self._heard_checked or self._waiting_on_us:
            # It wrote since the last check, or it waits on us (a permission, a terminal).
            self._heard_checked = self._heard
            self._last_seen = now
        if now - self._last_seen < self.turn_timeout:
            self._turn_check.set(self.turn_timeout / TIMER_CHECKS)
            return
        self._notify("session/cancel", {"sessionId": self._session})
        self._notify("$/cancel_request", {"requestId": turn.rpc_id})  # and we stop waiting for it
        why = f"the agent did not answer the prompt within {self.turn_timeout:g}s"
        self._end_turn(turn, {"Failed": {"message": why}})

    def _on_prompt_answer(self, turn: AcpTurn, result: Any, error: RpcError | None) -> None:
        if self._turn is not turn:
            return  # a turn that already ended (timed out)
        if error is not None:
            if error.code == AUTH_REQUIRED:
                # A session error: the engine ends the running turn Failed itself.
                self._end_turn(turn, None)
                self.host.fail(self._error("session/prompt", error))
                return
            if turn.cancelled:
                self._end_turn(turn, "Cancelled")
                return
            message = self._error("session/prompt", error).message
            data = error.data if isinstance(error.data, dict) else {}
            said = f"{message} ({data['message']})" if isinstance(data.get("message"), str) else message
            if error.code == 429 or ratelimits.is_rate_limit(said):  # one report (drivers/ratelimits.py)
                ratelimits.report(self.host, said, None, "Error")  # codex-acp says 429 in data.message
            self._end_turn(turn, {"Failed": {"message": message}})
            return
        result = result if isinstance(result, dict) else {}
        stop, warning = map_stop_reason(result.get("stopReason"))
        if warning:
            self.host.diagnostic("Warning", warning)
        self._end_turn(turn, stop, map_usage(result.get("usage")))

    def _end_turn(self, turn: AcpTurn, stop: StopReason | None, usage: TurnUsage | None = None) -> None:
        """Finish the turn's bookkeeping and report ``stop`` (None: report nothing)."""
        self._end_message()
        if stop == "Cancelled" or isinstance(stop, dict) and "Failed" in stop:
            # The spec: the client marks the turn's unfinished tool calls cancelled.
            for tool_id in turn.tools:
                snapshot = self._tools.get(tool_id)
                if snapshot is not None and snapshot["status"] not in FINISHED:
                    snapshot["status"] = "Cancelled"
                    self.host.emit({"ToolUpdated": public_tool(snapshot)})
        self._cancel_permissions()
        for tool_id in turn.tools:
            snapshot = self._tools.get(tool_id)
            if snapshot is not None and snapshot["status"] in FINISHED and not snapshot["_terminals"]:
                del self._tools[tool_id]
        self._turn = None
        self._turn_check.cancel()
        if stop is not None:
            self.host.end_turn(stop, usage)

    def cancel(self) -> None:
        turn = self._turn
        if turn is None or self.life.state != "open":
            return
        turn.cancelled = True
        self._notify("session/cancel", {"sessionId": self._session})
        self._cancel_permissions()

    def _cancel_permissions(self) -> None:
        pending, self._permissions = self._permissions, {}
        for rpc_id, _ in pending.values():
            self._waiting_on_us -= 1
            self._respond(rpc_id, {"outcome": {"outcome": "cancelled"}})

    # -- session updates --------------------------------------------------------------

    def _message_id(self, kind: str, acp_id: Any) -> str:
        current = self._message
        if current is not None and current[0] == kind and current[1] == acp_id:
            return current[2]
        self._end_message()
        self._message_seq += 1
        our_id = f"m{self._message_seq}"
        self._message = (kind, acp_id, our_id)
        return our_id

    def _end_message(self) -> None:
        if self._message is not None:
            self.host.emit({"MessageEnded": {"message_id": self._message[2]}})
            self._message = None

    def _chunk_text(self, update: ContentChunk) -> str:
        """The text of a chunk update ("" for none); a text block whose text is not a
        string is skipped with a Diagnostic, never turned into text."""
        content = update.get("content")
        if isinstance(content, dict) and content.get("type") == "text" and not isinstance(content.get("text"), str):
            self.host.diagnostic(
                "Warning", f"the agent sent a chunk ({update['sessionUpdate']}) whose text is not a string; skipped"
            )
            return ""
        return block_text(content)

    def _on_message_chunk(self, update: ContentChunk) -> None:
        text = self._chunk_text(update)
        if text:
            self.host.emit(
                {"TextDelta": {"message_id": self._message_id("text", update.get("messageId")), "text": text}}
            )

    def _on_thought_chunk(self, update: ContentChunk) -> None:
        text = self._chunk_text(update)
        if text:
            message_id = self._message_id("thought", update.get("messageId"))
            self.host.emit({"ReasoningDelta": {"message_id": message_id, "text": text}})

    def _on_user_chunk(self, update: ContentChunk) -> None:
        text = self._chunk_text(update)
        # An echo of the caller's own prompt is not provider-originated user content.
        if text and not (self._turn is not None and text.strip() and text.strip() in self._turn.prompt):
            self.host.emit(
                {"UserMessage": {"message_id": self._message_id("user", update.get("messageId")), "text": text}}
            )

    def _on_tool_call(self, update: AcpToolCall) -> None:
        tool_id = update.get("toolCallId")
        if not isinstance(tool_id, str):
            return
        self._end_message()
        self._emit_tool(self._merge_tool(tool_id, update))

    def _merge_tool(self, tool_id: str, update: AcpToolCall) -> AcpToolSnapshot:
        previous = self._tools.get(tool_id)
        snapshot = merge_tool_call(previous, {**update, "toolCallId": tool_id})
        self._tools[tool_id] = snapshot
        if previous is None and self._turn is not None:
            self._turn.tools.append(tool_id)
        for terminal_id in snapshot["_terminals"]:
            if terminal_id not in self._term_tool:
                self._term_tool[terminal_id] = tool_id
        return snapshot

    def _emit_tool(self, snapshot: AcpToolSnapshot) -> None:
        self.host.emit({"ToolUpdated": public_tool(snapshot)})
        # Terminal output that arrived before the tool call named its terminal.
        for terminal_id in snapshot["_terminals"]:
            for chunk in self._term_backlog.pop(terminal_id, []):
                self.host.emit({"ToolOutputDelta": {"tool_id": snapshot["id"], "text": chunk}})

    def _terminal_output(self, terminal_id: str, text: str) -> None:
        tool_id = self._term_tool.get(terminal_id)
        if tool_id is not None and self.life.state == "open":
            self.host.emit({"ToolOutputDelta": {"tool_id": tool_id, "text": text}})
        else:
            backlog = self._term_backlog.setdefault(terminal_id, [])
            if sum(map(len, backlog)) < 1 << 20:
                backlog.append(text)

    def _on_plan(self, update: PlanUpdate) -> None:
        self.host.emit({"PlanUpdated": {"entries": map_plan(update.get("entries"))}})

    def _on_commands(self, update: CommandsUpdate) -> None:
        self._commands = map_commands(update.get("availableCommands"))
        self._changed()

    def _on_mode(self, update: ModeUpdate) -> None:
        mode = update.get("currentModeId", update.get("modeId"))
        for option, _, _ in self._options:
            if option["category"] == "mode" or option["id"] == "mode":
                option["current"] = mode
                break
        self._changed()

    def _on_config_options(self, update: ConfigOptionsUpdate) -> None:
        self._replace_config_options(update.get("configOptions"))
        self._changed()

    def _on_session_info(self, update: SessionInfoUpdate) -> None:
        if "title" in update:
            title = update["title"]
            self._title = title if isinstance(title, str) else None
            if self.life.state == "open":
                self.host.update(title=self._title)

    def _on_usage(self, update: UsageUpdate) -> None:
        cost, turn, usage = cost_of(update), self._turn, map_context_usage(update)
        if cost is not None:  # the session's so far (ACP): the turn's part counts for budgets, even with no ``used``
            self._cost_seen = cost
            if turn is not None:
                no_tokens: TurnUsage = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}
                self.host.spent(no_tokens, cost - turn.cost_base)
        if usage is None:
            return
        if "ContextUsage" not in self._features_seen:
            self._features_seen.add("ContextUsage")
            self._changed()
        self.host.emit({"ContextUsage": usage})

    # -- requests from the agent ------------------------------------------------------

    def _on_agent_request(self, rpc_id: Any, method: str, params: Any) -> None:
        # ``params``: an object whose shape is the method's (PermissionParams, fs/*, terminal/*).
        try:
            if self.launch.recorded_answer is not None and method.startswith(("fs/", "terminal/")):
                self._answer_as_recorded(rpc_id, method)
            elif method == "session/request_permission":
                self._on_permission(rpc_id, params)
            elif method == "fs/read_text_file":
                self._respond(rpc_id, acp_fs.read_text_file(self.launch.dir, params))
            elif method == "fs/write_text_file":
                acp_fs.write_text_file(self.launch.dir, params)
                self._respond(rpc_id, {})  # ACP's empty response objects: {}, not null
            elif method == "terminal/create":
                self._respond(rpc_id, self.terminals.create(params))
            elif method == "terminal/output":
                self._respond(rpc_id, self.terminals.output(params))
            elif method == "terminal/wait_for_exit":
                self._waiting_on_us += 1

                def reply(status: ExitStatus) -> None:
                    self._waiting_on_us -= 1
                    self._last_seen = self.loop.time()
                    self._respond(rpc_id, status)

                try:
                    self.terminals.wait_for_exit(params, reply)
                except RpcError:
                    self._waiting_on_us -= 1
                    raise
            elif method == "terminal/kill":
                self.terminals.kill(params)
                self._respond(rpc_id, {})
            elif method == "terminal/release":
                self.terminals.release(params)
                self._term_backlog.pop(params.get("terminalId"), None)
                self._respond(rpc_id, {})
            else:
                self._respond(rpc_id, error=RpcError(METHOD_NOT_FOUND, f"method not found: {method}"))
        except RpcError as exc:
            self._respond(rpc_id, error=exc)
        except Exception:
            # The agent waits for every request's answer: one we failed to handle still
            # gets one (the line guard reports the failure itself).
            self._forget_permission(rpc_id)
            self._respond(rpc_id, error=RpcError(INTERNAL_ERROR, f"agentproto could not handle {method}"))
            raise

    def _answer_as_recorded(self, rpc_id: Any, method: str) -> None:
        """Replay: the recording's answer to a request agentproto serves itself; nothing is
        read, written or started for it (Launch.recorded_answer)."""
        assert self.launch.recorded_answer is not None
        answer = self.launch.recorded_answer(rpc_id)
        if answer is None:
            raise RpcError(INTERNAL_ERROR, f"replay: the recording holds no answer to this {method}")
        if self.transport is not None:
            self.transport.write(answer.encode("utf-8", "surrogatepass") + b"\n")

    def _forget_permission(self, rpc_id: Any) -> None:
        for request_id, (pending, _) in list(self._permissions.items()):
            if pending == rpc_id:
                del self._permissions[request_id]
                self._waiting_on_us -= 1

    def _on_permission(self, rpc_id: Any, params: PermissionParams) -> None:
        options: list[PermissionOption] = [o for o in objects(params.get("options")) if "optionId" in o]
        choices: list[str] = []
        for option in options:
            choice = KIND_CHOICES.get(text(option.get("kind")))
            if choice and choice not in choices:
                choices.append(choice)
        tool_call: AcpToolCall = obj(params.get("toolCall"))
        raw_id = tool_call.get("toolCallId")
        earlier = self._tools.get(raw_id) if isinstance(raw_id, str) else None
        servers = tuple(s["name"] for s in self.launch.mcp_servers)  # a name they could spell alike
        app_tool = app_tool_called(tool_call, earlier["_acp"] if earlier else None, servers)
        if app_tool is not None and self.host.is_app_tool(APP_SERVER, app_tool):
            # The app's own tool: the app answers its ToolCall, never a Permission first, whatever the mode.
            allow = "AllowOnce" if "AllowOnce" in choices else "AllowAlways"
            self._respond(rpc_id, {"outcome": permission_outcome(options, {"Permission": allow})})
            return
        if self._turn is None or (self._turn.cancelled) or not choices:
            # Outside a turn, after a cancel, or nothing we can offer: the spec's answer.
            self._respond(rpc_id, {"outcome": {"outcome": "cancelled"}})
            return
        tool_id = raw_id if isinstance(raw_id, str) else f"perm-tool-{rpc_id}"
        before = self._tools.get(tool_id)
        snapshot = self._merge_tool(tool_id, tool_call)
        if before is None or public_tool(before) != public_tool(snapshot):
            self._end_message()
            self._emit_tool(snapshot)
        self._permission_seq += 1
        request_id = f"perm-{self._permission_seq}"
        self._permissions[request_id] = (rpc_id, options)
        self._waiting_on_us += 1
        detail = " / ".join(o["name"] for o in options if text(o.get("name"))) or None
        body = {"id": request_id, "tool": public_tool(snapshot), "options": choices, "detail": detail}
        self.host.emit({"RequestOpened": {"Permission": body}})

    def answer(self, request: AgentRequest, answer: Any) -> None:
        payload = request.get("Permission") if isinstance(request, dict) else None
        if not isinstance(payload, dict):
            return
        entry = self._permissions.pop(payload.get("id"), None)  # type: ignore[arg-type]
        if entry is None:
            return
        rpc_id, options = entry
        self._waiting_on_us -= 1
        self._last_seen = self.loop.time()
        self._respond(rpc_id, {"outcome": permission_outcome(options, answer)})
