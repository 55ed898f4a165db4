"""What Codex's app-server tells us during a session, and what it asks: notifications
about the thread and its items mapped to events, and its requests to the app
(approvals, questions) with their answers. A part of ``CodexDriver`` (drivers/codex/driver.py), which
holds the session and its turn; the pure value mappings are in ``codex_mapping.py``.

Rules of this file:
- Only the process's own thread is mapped; other threads' items (subagents) are skipped.
- Codex reports ``thread/status/changed`` idle *before* ``turn/completed``; status is
  the engine's, so thread status is ignored here and the turn ends on ``turn/completed``.
- Approvals are always asked (approval policy ``on-request``) and routed to the engine,
  which answers them itself for AutoApprove and AcceptEdits. Codex asks before every MCP
  tool call with an elicitation (``_meta.codex_approval_kind: "mcp_tool_call"``): for the
  app's own tools it is accepted here (the app decides when it answers the ToolCall; the
  server is configured to approve them, so this is only a fallback), for any other MCP
  server it is a Permission request like the others.
- Every request of Codex's gets an answer: the app's, an immediate one (other elicitations
  are declined: protocol 1 has no forms; unknown methods refused), or an error when its
  handling fails.
- Every field is type-checked (drivers/fields.py): a wrong one is skipped with a
  Diagnostic, never turned into text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentproto.core.errors import AgentError
from agentproto.core.jsonrpc import INTERNAL_ERROR, METHOD_NOT_FOUND
from agentproto.core.wire import tool_update
from agentproto.drivers import ratelimits
from agentproto.drivers.codex.mapping import (
    LOGIN,
    file_diffs,
    is_auth_error,
    plan_entries,
    tool_for_item,
)
from agentproto.drivers.fields import (
    integer,
    named,
    obj,
    objects,
    opt_integer,
    opt_text,
    strings,
    text,
)

if TYPE_CHECKING:
    from agentproto.core.wire_types import AgentRequest, PermissionRequest, Question, StopReason, ToolUpdate, TurnUsage
    from agentproto.drivers.base import Host
    from agentproto.drivers.codex.types import NotificationParams, QuestionAnswer, RequestParams, ThreadItem

APPROVALS = (
    "item/commandExecution/requestApproval",
    "item/fileChange/requestApproval",
    "item/permissions/requestApproval",
)
ELICITATION = "mcpServer/elicitation/request"
#: The notifications that are a warning to pass on as a Diagnostic.
WARNINGS = ("warning", "configWarning", "deprecationNotice", "guardianWarning")
#: Notifications about the thread as a whole: one about another thread is none of ours.
THREAD_NOTIFICATIONS = frozenset(
    {
        *WARNINGS,
        "serverRequest/resolved",
        "turn/started",
        "error",
        "thread/name/updated",
        "thread/tokenUsage/updated",
        "thread/compacted",
    }
)
#: Notifications about one item of the running turn, named by ``itemId``.
ITEM_NOTIFICATIONS = frozenset(
    {
        "item/reasoning/summaryPartAdded",
        "item/commandExecution/outputDelta",
        "item/fileChange/outputDelta",
        "item/fileChange/patchUpdated",
        "item/mcpToolCall/progress",
    }
)


class CodexItems:
    """The notification and request half of ``CodexDriver`` (a mixin of it)."""

    # What it shares with the driver (drivers/codex/driver.py sets each one).
    host: "Host"
    thread_id: str | None
    turn_id: str | None
    _turn_wanted: bool
    _ended: set[str]
    _streamed: set[str]
    _tools: dict[str, ToolUpdate]
    _requests: dict[str, tuple[Any, str, RequestParams]]  # by our id: Codex's id, method, params
    _usage_total: dict[str, int]
    _compacted_turn: Any

    def _progress(self) -> None:
        raise NotImplementedError

    def _end_turn(self, stop: StopReason, usage: TurnUsage | None = None) -> None:
        raise NotImplementedError

    def _turn_usage(self) -> TurnUsage | None:
        raise NotImplementedError

    def _reply(self, request_id: Any, result: Any) -> None:
        raise NotImplementedError

    def _reply_error(self, request_id: Any, code: int, message: str) -> None:
        raise NotImplementedError

    # -- notifications --------------------------------------------------------------------

    def _mine(self, params: NotificationParams | RequestParams) -> bool:
        thread = params.get("threadId")
        return thread is None or bool(thread == self.thread_id)

    def _current(self, params: NotificationParams) -> bool:
        """A notification about our running turn (not a stale or foreign one)."""
        if not self._mine(params) or not self._turn_wanted:
            return False
        turn = params.get("turnId")
        if turn is None or self.turn_id is None:
            return turn not in self._ended
        return bool(turn == self.turn_id)

    def _skipped(self, method: str, why: str) -> None:
        self.host.diagnostic("Warning", f"codex: skipped {method}: {why}")

    def _notification(self, method: str, params: NotificationParams) -> None:
        if method in THREAD_NOTIFICATIONS and not self._mine(params):
            return
        if method == "serverRequest/resolved":
            # Codex settled a request itself (an interrupt, a timeout): the app must not
            # keep waiting on it. One the app answered was popped already.
            request_id = self._request_id(params.get("requestId"))
            if self._requests.pop(request_id, None) is not None:
                self.host.request_withdrawn(request_id)
            return
        if method == "turn/started":
            turn_id = obj(params.get("turn")).get("id")
            if self._turn_wanted and self.turn_id is None and isinstance(turn_id, str) and turn_id not in self._ended:
                self.turn_id = turn_id  # a compaction turn, started by thread/compact/start
            return
        if method == "turn/completed":
            self._turn_completed(params)
            return
        if method in WARNINGS:
            message = text(params.get("message")) or text(params.get("summary"))
            if text(params.get("details")):
                message += f" ({params['details']})"
            self.host.diagnostic("Warning", f"codex: {message}")
            return
        if method == "error":
            error = obj(params.get("error"))
            message = text(error.get("message"), "an error")
            info = error.get("codexErrorInfo")
            if ratelimits.is_rate_limit(message) or info in ("usageLimitExceeded", "serverOverloaded"):
                # One report of every rate limit (drivers/ratelimits.py); Codex names no reset.
                level = "Warning" if params.get("willRetry") else "Error"
                ratelimits.report(self.host, f"codex: {message}", None, level)
                if not params.get("willRetry"):
                    self._progress()
            elif params.get("willRetry"):
                self.host.diagnostic("Warning", f"codex: {message} (retrying)")
            else:
                self.host.diagnostic("Error", f"codex: {message}")
                self._progress()
            return
        if method == "thread/name/updated":
            if text(params.get("threadName")):
                self.host.update(title=params["threadName"])
            return
        if method == "thread/tokenUsage/updated":
            usage = obj(params.get("tokenUsage"))
            total = obj(usage.get("total"))
            self._usage_total = {k: integer(total.get(k)) for k in ("inputTokens", "cachedInputTokens", "outputTokens")}
            used = integer(obj(usage.get("last")).get("totalTokens"))
            window = opt_integer(usage.get("modelContextWindow"))
            self.host.emit({"ContextUsage": {"used_tokens": used, "window_tokens": window, "cost_usd": None}})
            running = self._turn_usage() if self._turn_wanted else None
            if running is not None:
                self.host.spent(running)  # the turn's tokens so far: budgets count them
            return
        if method == "thread/compacted":
            self._compacted(params.get("turnId"))
            return
        if not self._current(params):
            return
        self._progress()
        if method in ("item/started", "item/completed"):
            item = params.get("item")
            if not isinstance(item, dict) or not isinstance(item.get("id"), str):
                self._skipped(method, "its item has no string id")
                return
            self._item(item, method == "item/completed")
            return
        if method == "turn/plan/updated":
            self.host.emit({"PlanUpdated": {"entries": plan_entries(params.get("plan"))}})
            return
        item_id = params.get("itemId")
        if method not in ITEM_NOTIFICATIONS:
            return  # newer app-servers add notifications; nothing to map
        if not isinstance(item_id, str):
            self._skipped(method, "its itemId is not a string")
        elif method == "item/reasoning/summaryPartAdded":
            if integer(params.get("summaryIndex")) > 0:
                self.host.emit({"ReasoningDelta": {"message_id": item_id, "text": "\n\n"}})
        elif method in ("item/commandExecution/outputDelta", "item/fileChange/outputDelta"):
            delta = params.get("delta")
            if isinstance(delta, str):
                self.host.emit({"ToolOutputDelta": {"tool_id": item_id, "text": delta}})
            else:
                self._skipped(method, "its delta is not a string")
        elif method == "item/fileChange/patchUpdated":
            tool = self._tools.get(item_id)
            if tool is not None:
                changes = objects(params.get("changes"))
                tool["diffs"] = file_diffs(changes)
                tool["locations"] = [text(c.get("path")) for c in changes]
                self.host.emit({"ToolUpdated": dict(tool)})
        elif method == "item/mcpToolCall/progress":
            progress = params.get("message")
            if isinstance(progress, str):
                self.host.emit({"ToolOutputDelta": {"tool_id": item_id, "text": progress + "\n"}})
            else:
                self._skipped(method, "its message is not a string")

    def _message_completed(self, item_id: str, delta: str, whole: str) -> None:
        """A message item is complete: its whole text, unless its deltas streamed it, then its end."""
        if item_id not in self._streamed and whole:
            self.host.emit({delta: {"message_id": item_id, "text": whole}})
        self._streamed.discard(item_id)
        self.host.emit({"MessageEnded": {"message_id": item_id}})

    def _item(self, item: ThreadItem, completed: bool) -> None:
        kind = item.get("type")
        item_id = text(item.get("id"))
        if kind == "agentMessage":
            if completed:
                self._message_completed(item_id, "TextDelta", text(item.get("text")))
            return
        if kind == "reasoning":
            if completed:
                whole = "\n\n".join(strings(item.get("summary")) or strings(item.get("content")))
                if whole or item_id in self._streamed:  # an empty summary never streamed is no message
                    self._message_completed(item_id, "ReasoningDelta", whole)
            return
        if kind == "contextCompaction":
            if completed:
                self._compacted(self.turn_id)
            return
        if kind == "plan":
            if completed and text(item.get("text")):
                self.host.emit({"PlanProposed": {"markdown": item["text"]}})
            return
        tool = tool_for_item(item)
        if tool is None:
            return
        if completed:
            self._tools.pop(item_id, None)
        else:
            self._tools[item_id] = tool
        self.host.emit({"ToolUpdated": tool})

    def _compacted(self, turn_id: Any) -> None:
        # Codex reports a compaction as an item and (older versions) as thread/compacted.
        if turn_id is None or turn_id != self._compacted_turn:
            self._compacted_turn = turn_id
            self.host.emit("ContextCompacted")

    def _turn_completed(self, params: NotificationParams) -> None:
        turn = obj(params.get("turn"))
        turn_id = turn.get("id")
        if not self._mine(params) or not self._turn_wanted or not isinstance(turn_id, str) or turn_id in self._ended:
            return
        if self.turn_id is not None and turn_id != self.turn_id:
            return
        self.turn_id = turn_id
        status = turn.get("status")
        usage = self._turn_usage()
        error = obj(turn.get("error"))
        if status == "completed":
            self._end_turn({"Completed": {"source": "Protocol"}}, usage)
        elif status == "interrupted":
            self._end_turn("Cancelled", usage)
        elif is_auth_error(error):
            message = f"authentication failed: {text(error.get('message'))}"
            self._end_turn({"Failed": {"message": message}}, usage)
            self.host.fail(AgentError.auth_required(message + "; run `codex login` or set OPENAI_API_KEY", LOGIN))
        else:
            message = text(error.get("message")) or f"the turn ended {text(status, 'without a status')}"
            if text(error.get("additionalDetails")):
                message += f" ({error['additionalDetails']})"
            self._end_turn({"Failed": {"message": message}}, usage)

    # -- requests from Codex --------------------------------------------------------------

    def _server_request(self, rpc_id: Any, method: str, params: RequestParams) -> None:
        try:
            if method in APPROVALS:
                self._permission(rpc_id, method, params)
            elif method == "item/tool/requestUserInput":
                self._question(rpc_id, params)
            elif method == ELICITATION:
                self._elicitation(rpc_id, params)
            else:
                self._reply_error(rpc_id, METHOD_NOT_FOUND, f"agentproto does not handle {method}")
        except Exception:
            # Codex waits for every request's answer: one we failed to handle still gets
            # one (the line guard reports the failure itself).
            self._requests.pop(self._request_id(rpc_id), None)
            self._reply_error(rpc_id, INTERNAL_ERROR, f"agentproto could not handle {method}")
            raise

    def _request_id(self, rpc_id: Any) -> str:
        return f"codex-{rpc_id}"

    def _permission(self, rpc_id: Any, method: str, params: RequestParams) -> None:
        self._progress()
        item_id = text(params.get("itemId"), f"approval-{rpc_id}")
        command = text(params.get("command"))
        tool = self._tools.get(item_id)
        if tool is None:
            if method == "item/commandExecution/requestApproval":
                tool = tool_update(
                    item_id,
                    "Execute",
                    command,
                    "Pending",
                    {"Command": {"command": command, "cwd": opt_text(params.get("cwd"))}},
                )
            elif method == "item/fileChange/requestApproval":
                tool = tool_update(item_id, "Edit", "Edit files", "Pending")
            else:
                tool = tool_update(
                    item_id,
                    "Other",
                    "Extra permissions",
                    "Pending",
                    raw={"name": "permissions", "input": params.get("permissions")},
                )
        tool = {**tool, "status": "Pending"}
        options = ["AllowOnce", "AllowAlways", "DenyOnce"]
        available = params.get("availableDecisions")
        if isinstance(available, list):
            names = {d if isinstance(d, str) else next(iter(d), "") for d in available if isinstance(d, (str, dict))}
            options = []
            if "accept" in names:
                options.append("AllowOnce")
            if names & {"acceptForSession", "acceptWithExecpolicyAmendment"}:
                options.append("AllowAlways")
            options.append("DenyOnce")  # Codex takes "decline" even when it does not list it
        request_id = self._request_id(rpc_id)
        self._requests[request_id] = (rpc_id, method, params)
        detail = opt_text(params.get("reason"))
        root = text(params.get("grantRoot"))
        if method == "item/fileChange/requestApproval" and root:
            detail = (detail + "; " if detail else "") + f"grant write access to {root}"
        self.host.emit(
            {"RequestOpened": {"Permission": {"id": request_id, "tool": tool, "options": options, "detail": detail}}}
        )

    def _elicitation(self, rpc_id: Any, params: RequestParams) -> None:
        meta = obj(params.get("_meta"))
        if meta.get("codex_approval_kind") != "mcp_tool_call":
            # A server's own form: protocol 1 has none, so refuse (the call fails, never hangs).
            self._reply(rpc_id, {"action": "decline", "content": None, "_meta": None})
            return
        server, name = text(params.get("serverName")), text(meta.get("tool_name"))
        if self.host.is_app_tool(server, name):
            self._reply(rpc_id, {"action": "accept", "content": None, "_meta": None})
            return
        self._progress()
        # The mcpToolCall item Codex started for this call, if it is known.
        tool = next(
            (
                t
                for t in self._tools.values()
                if t["kind"] == {"Mcp": {"server": server, "tool": name}} and t["status"] in ("Pending", "Running")
            ),
            None,
        )
        if tool is None:
            tool = tool_update(
                f"elicitation-{rpc_id}",
                {"Mcp": {"server": server, "tool": name}},
                f"{server}: {name}",
                "Pending",
                raw={"name": name, "input": meta.get("tool_params")},
            )
        options = ["AllowOnce"]
        if "session" in strings(meta.get("persist")):
            options.append("AllowAlways")
        options.append("DenyOnce")
        request_id = self._request_id(rpc_id)
        self._requests[request_id] = (rpc_id, ELICITATION, params)
        permission: PermissionRequest = {
            "id": request_id,
            "tool": {**tool, "status": "Pending"},
            "options": options,
            "detail": opt_text(params.get("message")),
        }
        self.host.emit({"RequestOpened": {"Permission": permission}})

    def _question(self, rpc_id: Any, params: RequestParams) -> None:
        self._progress()
        questions: list[Question] = []
        for q in objects(params.get("questions")):
            opts = named(q.get("options"), "label")
            questions.append(
                {
                    "id": text(q.get("id")),
                    "text": text(q.get("question")),
                    "header": opt_text(q.get("header")),
                    "choices": [
                        {"id": o["label"], "label": o["label"], "description": opt_text(o.get("description"))}
                        for o in opts
                    ],
                    "multi_select": False,
                    "allows_free_text": bool(q.get("isOther")) or not opts,
                }
            )
        request_id = self._request_id(rpc_id)
        self._requests[request_id] = (rpc_id, "item/tool/requestUserInput", params)
        self.host.emit({"RequestOpened": {"Question": {"id": request_id, "questions": questions}}})

    def answer(self, request: AgentRequest, answer: Any) -> None:
        body = request["Permission"] if "Permission" in request else request["Question"]
        pending = self._requests.pop(body["id"], None)
        if pending is None:
            return
        rpc_id, method, params = pending
        self._progress()
        if method == "item/tool/requestUserInput":
            answers: dict[str, QuestionAnswer] = {}
            if isinstance(answer, dict) and "Question" in answer:
                for question, given in zip(objects(params.get("questions")), answer["Question"]):
                    values = given.get("Choices") if "Choices" in given else [given.get("Text", "")]
                    answers[text(question.get("id"))] = {"answers": list(values or [])}
            self._reply(rpc_id, {"answers": answers})
            return
        choice = answer.get("Permission") if isinstance(answer, dict) else None
        if method == ELICITATION:
            if choice in ("AllowOnce", "AllowAlways"):
                # AllowAlways: Codex stops asking for this tool for the rest of the session.
                persist = {"persist": "session"} if choice == "AllowAlways" else None
                self._reply(rpc_id, {"action": "accept", "content": None, "_meta": persist})
            else:
                action = "cancel" if answer == "Cancel" else "decline"
                self._reply(rpc_id, {"action": action, "content": None, "_meta": None})
            return
        if method == "item/permissions/requestApproval":
            if choice in ("AllowOnce", "AllowAlways"):
                granted = {k: v for k, v in obj(params.get("permissions")).items() if v is not None}
                self._reply(rpc_id, {"permissions": granted, "scope": "session" if choice == "AllowAlways" else "turn"})
            else:
                self._reply(rpc_id, {"permissions": {}, "scope": "turn"})
            return
        if answer == "Cancel":
            decision: Any = "cancel"
        elif choice == "AllowOnce":
            decision = "accept"
        elif choice == "AllowAlways":
            decision = "acceptForSession"
            offered_list = params.get("availableDecisions")
            for offered in offered_list if isinstance(offered_list, list) else []:
                if offered == "acceptForSession":
                    break
                if isinstance(offered, dict) and "acceptWithExecpolicyAmendment" in offered:
                    decision = offered
                    break
        else:
            decision = "decline"
        self._reply(rpc_id, {"decision": decision})
