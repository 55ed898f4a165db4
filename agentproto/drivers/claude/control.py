"""The Claude Code CLI's control protocol, both ways, over the stream-json lines.

Ours to the CLI: ``control_request`` lines (initialize, interrupt, set_model...) with our
own ids (``ap_N``), each answered by a ``control_response`` that runs its callback once.
The CLI's to us: ``can_use_tool`` (every permission, since the CLI runs with
``--permission-prompt-tool stdio``) becomes a Permission or Question request for the
app, except for the app's own tools (``mcp__agentproto__<name>``), which are allowed here:
calling them is the app's decision, made when it answers the ToolCall. ``hook_callback``
goes to the engine's hook entry point (``Host.hook``) for the events registered at
``initialize``, and the app's output is the callback's response. ``control_cancel_request``
withdraws one.

Rules of this file:
- Every control request of the CLI's gets exactly one ``control_response``: the app's
  answer, an immediate one (a tool denied for the session), or an error (a subtype we
  do not handle, or one whose handling failed), so the CLI never waits forever.
- Answers map to what the CLI takes: ``behavior`` allow (with the input, the question's
  answers, the session rules of AllowAlways) or deny (with a message).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from agentproto.drivers.base import APP_SERVER
from agentproto.drivers.claude.mapping import (
    APP_TOOL_PREFIX,
    PERMISSION_OPTIONS,
    always_rules,
    hook_callback_id,
    question_answers,
    question_request,
    tool_snapshot,
)
from agentproto.drivers.fields import obj, opt_text, text

if TYPE_CHECKING:
    from agentproto.core.wire_types import AgentRequest, JsonObject
    from agentproto.drivers.base import Host
    from agentproto.drivers.claude.stream import MessageStream
    from agentproto.drivers.claude.types import (
        ControlCancel,
        ControlRequest,
        ControlRequestBody,
        ControlResponse,
        ControlResponseBody,
        OutgoingRequest,
        PendingRequest,
        PermissionReply,
    )

#: The callback of one of our control requests: (response, None) or (None, error text); the
#: response's shape is the request's, so each callback names its own type.
OnControl = Callable[[Any, str | None], None]


class ControlChannel:
    def __init__(self, host: "Host", send: Callable[[Any], None], stream: "MessageStream") -> None:
        self.host = host
        self.send = send
        self.stream = stream
        self._calls: dict[str, OnControl] = {}
        self._counter = 0
        self.requests: dict[str, PendingRequest] = {}  # the CLI's open requests, by its id
        self._always_deny: set[str] = set()
        #: Our hook callback ids (``initialize``'s hooks) -> the hook event each one is.
        self.hook_ids: dict[str, str] = {}
        #: The CLI's hook callbacks the app has not answered yet (its request ids).
        self.hooks_waiting: set[str] = set()

    def register_hooks(self, events: list[str]) -> None:
        self.hook_ids = {hook_callback_id(event): event for event in events}

    # -- ours to the CLI
    def request(self, request: OutgoingRequest, callback: OnControl) -> None:
        self._counter += 1
        request_id = f"ap_{self._counter}"
        self._calls[request_id] = callback
        self.send({"type": "control_request", "request_id": request_id, "request": request})

    def on_response(self, msg: ControlResponse) -> None:
        response = obj(msg.get("response"))
        callback = self._calls.pop(text(response.get("request_id")), None)
        if callback is None:
            return
        if response.get("subtype") == "error":
            callback(None, text(response.get("error")) or "error")
        else:
            body = response.get("response")
            callback(body if isinstance(body, dict) else {}, None)

    def fail_calls(self, reason: str) -> None:
        """The CLI is gone: every call still waiting gets ``reason``."""
        self.hooks_waiting.clear()  # nobody to answer any more
        calls, self._calls = self._calls, {}
        for callback in calls.values():
            callback(None, reason)

    # -- the CLI's to us
    def reply(
        self, request_id: str, response: PermissionReply | JsonObject | None = None, error: str | None = None
    ) -> None:
        if error is not None:
            body: ControlResponseBody = {"subtype": "error", "request_id": request_id, "error": error}
        else:
            body = {"subtype": "success", "request_id": request_id, "response": response or {}}
        self.send({"type": "control_response", "response": body})

    def on_request(self, msg: ControlRequest) -> None:
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
                self._hook(request_id, body)
            else:
                self.reply(request_id, error=f"agentproto does not handle {subtype}")
        except Exception:
            # One we failed to handle still gets its answer (the line guard reports the
            # failure itself).
            self.requests.pop(request_id, None)
            self.reply(request_id, error=f"agentproto could not handle {subtype}")
            raise

    def _hook(self, request_id: str, body: ControlRequestBody) -> None:
        event = self.hook_ids.get(text(body.get("callback_id")))
        if event is None:
            self.reply(request_id, {})  # not one of ours: the neutral output
            return
        self.hooks_waiting.add(request_id)

        def reply(output: JsonObject) -> None:
            # Once: the engine calls it once. A callback the CLI withdrew (or a CLI that is
            # gone) gets nothing.
            if request_id in self.hooks_waiting:
                self.hooks_waiting.discard(request_id)
                self.reply(request_id, output)

        self.host.hook(event, body.get("input"), reply)

    def _permission(self, request_id: str, body: ControlRequestBody) -> None:
        stream = self.stream
        name = text(body.get("tool_name"))
        tool_input = obj(body.get("input"))
        tool_id = text(body.get("tool_use_id"), request_id)
        parent = stream.parents.get(tool_id)
        tool = stream.tools.get(tool_id)
        if tool is None:
            tool = stream.tools[tool_id] = tool_snapshot(tool_id, name, tool_input)
            stream.emit({"ToolUpdated": dict(tool)}, parent)
        if name.startswith(APP_TOOL_PREFIX) and self.host.is_app_tool(APP_SERVER, name[len(APP_TOOL_PREFIX) :]):
            # The app's own tool: the app decides when it answers the ToolCall, so it is
            # never asked a Permission first, whatever the mode.
            self.reply(request_id, {"behavior": "allow", "updatedInput": tool_input})
            if tool["status"] == "Pending":
                stream.tool_status(tool, "Running", parent=parent)
            return
        if name in self._always_deny:
            self.reply(request_id, {"behavior": "deny", "message": "The user denied this tool for the session."})
            stream.tool_status(tool, "Denied", parent=parent)
            return
        self.requests[request_id] = {"request_id": request_id, "request": body, "parent": parent}
        if name == "AskUserQuestion":
            stream.emit({"RequestOpened": question_request(request_id, tool_input)}, parent)
            return
        if name == "ExitPlanMode" and isinstance(tool_input.get("plan"), str):
            stream.emit({"PlanProposed": {"markdown": tool_input["plan"]}}, parent)
        detail = (
            opt_text(body.get("description"))
            or opt_text(body.get("decision_reason"))
            or opt_text(body.get("blocked_path"))
        )
        permission = {"id": request_id, "tool": dict(tool), "options": list(PERMISSION_OPTIONS), "detail": detail}
        stream.emit({"RequestOpened": {"Permission": permission}}, parent)

    def on_cancel(self, msg: ControlCancel) -> None:
        request_id = text(msg.get("request_id"))
        self.hooks_waiting.discard(request_id)  # its Hook request ends by its own timeout
        if self.requests.pop(request_id, None) is not None:
            self.host.request_withdrawn(request_id)

    # -- the app's answers
    def answer(self, request: AgentRequest, answer: Any) -> None:
        if "Permission" in request:
            request_id = request["Permission"]["id"]
        else:
            request_id = request["Question"]["id"]
        pending = self.requests.pop(request_id, None)
        if pending is None:
            return  # withdrawn by the CLI, or already answered
        body = pending["request"]
        tool_name = text(body.get("tool_name"))
        tool_input = obj(body.get("input"))
        if answer == "Cancel":
            reply: PermissionReply = {"behavior": "deny", "message": "The user dismissed this request."}
        elif "Deny" in answer:
            reply = {"behavior": "deny", "message": answer["Deny"]["message"]}
        elif "Question" in answer and "Question" in request:  # (check_answer paired them)
            answers = question_answers(request, answer["Question"])
            reply = {"behavior": "allow", "updatedInput": {**tool_input, "answers": answers}}
        else:
            choice = answer["Permission"]
            if choice in ("AllowOnce", "AllowAlways"):
                reply = {"behavior": "allow", "updatedInput": tool_input}
                if choice == "AllowAlways":
                    reply["updatedPermissions"] = always_rules(tool_name, body.get("permission_suggestions"))
            else:
                if choice == "DenyAlways":
                    self._always_deny.add(tool_name)
                reply = {"behavior": "deny", "message": "The user denied this tool use."}
        self.reply(pending["request_id"], reply)
        tool = self.stream.tools.get(text(body.get("tool_use_id")))
        if tool is not None and reply["behavior"] == "allow" and tool["status"] == "Pending":
            self.stream.tool_status(tool, "Running", parent=pending.get("parent"))
