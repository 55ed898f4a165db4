"""The app's own tools and hooks, sans-IO: what an app declares at ``open``, the requests
each tool call or hook invocation opens, and the answer the agent gets for each.

An app declares ``tools`` (and ``hooks``) when it opens a session. agentproto serves the
tools to the agent as one MCP server named ``agentproto`` (listener.py serves it over
HTTP); each call becomes a ``ToolCall`` request in the session's stream, each hook
invocation a ``Hook`` request, and the app's ``answer`` goes back to the agent.

Rules of this file:
- Declarations are checked whole at open: a problem names the entry and its field
  (``InvalidConfiguration``). What is kept is what was declared, so the agent sees the
  schemas verbatim.
- Every request has exactly one outcome and the agent always hears it: the app's answer,
  or an error result for a tool call (Deny, Cancel, an ended or cancelled turn, the
  session's close, ``tool_timeout``) and the neutral ``{}`` for a hook (Cancel, an ended
  turn, the close, ``hook_timeout``). The engine is told once (``closed``) and says
  ``RequestClosed`` once.
- An answer that does not fit (content of the wrong shape, a result that breaks the tool's
  ``output_schema``) is refused and the request stays open: nothing half-formed reaches
  the agent.
- No descriptor here: a listener (or a driver's own channel) hands the calls in, and the
  session's loop runs the timers.
"""

from __future__ import annotations

import json
import re

from agentproto.core.errors import AgentError, Kind
from agentproto.core.typecheck import TYPE_CHECKING, Protocol
from agentproto.core.wire import json_type_name as _type_name

if TYPE_CHECKING:
    from typing import Any, Callable, Union

    from agentproto.core.mcp import ToolCall
    from agentproto.core.mcp_types import CallToolResult, McpContent, McpTool
    from agentproto.core.wire_types import CheckedTool, JsonObject, OpenHook, OpenToolCall
    from agentproto.loopio.loop import Loop, Timer

#: The MCP server the app's tools are served as (Claude's model sees ``mcp__agentproto__<name>``).
APP_SERVER = "agentproto"
#: A tool's name, and a hook event's (both end up in names and paths the agents build);
#: compiled on first use (``re`` caches it), never by a start.
NAME = r"[A-Za-z0-9_-]{1,64}"
TOOL_TIMEOUT = 600.0
HOOK_TIMEOUT = 60.0
TOOL_FIELDS = ("name", "description", "input_schema", "output_schema")

if TYPE_CHECKING:
    #: What the agent is given: a tool call's result, or a hook's output (the app's object).
    Outcome = Union[CallToolResult, JsonObject]
    #: Gives a hook's output to the agent.
    Reply = Callable[[JsonObject], None]
    #: Gives the agent a request's outcome: a ToolCall's ``call.result`` (a CallToolResult),
    #: a Hook's ``Reply`` (its output).
    Resolve = Callable[[Any], None]


def _invalid(detail: str) -> AgentError:
    return AgentError.detail(Kind.INVALID_CONFIGURATION, detail)


def _object_schema(value: Any, at: str) -> JsonObject:
    # MCP's inputSchema and outputSchema describe objects: the arguments, the structured result.
    if not isinstance(value, dict):
        raise _invalid(f"{at}: expected a JSON Schema object, got {_type_name(value)}")
    if "type" in value and value["type"] != "object":
        raise _invalid(f'{at}: MCP tools take and give objects: its "type" must be "object"')
    return value


def _array(value: Any, field: str, of: str) -> list[Any]:
    """The array ``field`` must be ([] when it is absent)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _invalid(f"{field}: expected an array of {of}, got {_type_name(value)}")
    return value


def _name(value: Any, at: str, expected: str) -> str:
    """A tool's or hook event's name: 1 to 64 of A-Z a-z 0-9 _ - (MCP's and the hooks' rule)."""
    if not isinstance(value, str) or not re.fullmatch(NAME, value):
        shown = json.dumps(value)[:80] if isinstance(value, str) else _type_name(value)
        raise _invalid(f"{at}: expected {expected}, got {shown}")
    return value


def check_tools(value: Any) -> list[CheckedTool]:
    """The app's tool declarations, checked; ``InvalidConfiguration`` names the bad entry."""
    tools: list[CheckedTool] = []
    seen: set[str] = set()
    for index, entry in enumerate(_array(value, "tools", f"{{{', '.join(TOOL_FIELDS)}}}")):
        at = f"tools[{index}]"
        if not isinstance(entry, dict):
            raise _invalid(f"{at}: expected an object {{{', '.join(TOOL_FIELDS)}}}, got {_type_name(entry)}")
        unknown = sorted(set(entry) - set(TOOL_FIELDS))
        if unknown:
            raise _invalid(f"{at}: unknown field `{unknown[0]}` (a tool has {', '.join(TOOL_FIELDS)})")
        name = _name(entry.get("name"), f"{at}.name", "1 to 64 of A-Z a-z 0-9 _ -")
        if name in seen:
            raise _invalid(f"{at}.name: {name} is declared twice")
        seen.add(name)
        at = f"tools[{index}] ({name})"
        if not isinstance(entry.get("description"), str):
            raise _invalid(f"{at}.description: expected a string, got {_type_name(entry.get('description'))}")
        schema = entry.get("input_schema")
        tool: CheckedTool = {
            "name": name,
            "description": entry["description"],
            "input_schema": {"type": "object"} if schema is None else _object_schema(schema, f"{at}.input_schema"),
        }
        if entry.get("output_schema") is not None:
            tool["output_schema"] = _object_schema(entry["output_schema"], f"{at}.output_schema")
        tools.append(tool)
    return tools


def check_hooks(value: Any) -> list[str]:
    """The hook event names the app answers, checked."""
    value = _array(value, "hooks", "hook event names")
    for index, event in enumerate(value):
        _name(event, f"hooks[{index}]", "a hook event name (1 to 64 of A-Z a-z 0-9 _ -)")
        if event in value[:index]:
            raise _invalid(f"hooks[{index}]: {event} is listed twice")
    return list(value)


def refusal(
    agent: str, takes_tools: bool, hook_events: frozenset[str], tools: list[Any], hooks: list[str]
) -> AgentError | None:
    """Why this agent's driver cannot be given the app's tools or hooks (UnsupportedFeature)."""
    if tools and not takes_tools:
        return AgentError.detail(Kind.UNSUPPORTED_FEATURE, f"tools: agentproto cannot give {agent} the app's tools")
    if hooks and not hook_events:
        return AgentError.detail(Kind.UNSUPPORTED_FEATURE, f"hooks: {agent} has no hook channel")
    unknown = [event for event in hooks if event not in hook_events]
    if unknown:
        offered = ", ".join(sorted(hook_events))
        why = f"hooks: {agent} has no hook {unknown[0]} (it has {offered})"
        return AgentError.detail(Kind.UNSUPPORTED_FEATURE, why)
    return None


# -- answers ---------------------------------------------------------------------------------


def error_result(message: str) -> CallToolResult:
    """A CallToolResult that tells the agent the call failed, and why."""
    return {"content": [{"type": "text", "text": message}], "isError": True}


def _content_item(item: Any, at: str) -> McpContent | str:
    """One content item of a ToolResult as MCP has it, or why it cannot be one."""
    if not isinstance(item, dict):
        return f"{at}: expected a content item, got {_type_name(item)}"
    kind = item.get("type")
    if kind == "text":
        if set(item) != {"type", "text"} or not isinstance(item["text"], str):
            return f'{at}: a text item is {{"type": "text", "text": string}}'
        return {"type": "text", "text": item["text"]}
    if kind == "image":
        data, mime = item.get("data"), item.get("mime_type")
        if set(item) != {"type", "data", "mime_type"} or not isinstance(data, str) or not isinstance(mime, str):
            return f'{at}: an image item is {{"type": "image", "data": base64 string, "mime_type": string}}'
        if not mime.startswith("image/"):
            return f"{at}.mime_type: expected an image type (image/...), got {mime[:80]}"
        import base64
        import binascii

        try:
            base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return f"{at}.data: not base64"
        return {"type": "image", "data": data, "mimeType": mime}
    return f'{at}.type: expected "text" or "image", got {json.dumps(kind)[:80]}'


def tool_result(tool: CheckedTool, answer: Any) -> CallToolResult | str:
    """The MCP ``CallToolResult`` an answer gives a call of ``tool``, or why it does not fit."""
    if answer == "Cancel":
        return error_result("cancelled")
    if isinstance(answer, dict) and isinstance(answer.get("Deny"), dict):
        return error_result(str(answer["Deny"].get("message", "")))
    body = answer.get("ToolResult") if isinstance(answer, dict) else None
    if not isinstance(body, dict):
        return "a tool call takes a ToolResult, Deny or Cancel answer"
    unknown = sorted(set(body) - {"content", "is_error", "structured"})
    if unknown:
        return f"ToolResult: unknown field `{unknown[0]}` (it has content, is_error, structured)"
    is_error = body.get("is_error", False)  # left out: not an error
    if not isinstance(is_error, bool):
        return f"ToolResult.is_error: expected a boolean, got {_type_name(is_error)}"
    content = body.get("content")
    if not isinstance(content, list):
        return f"ToolResult.content: expected an array of content items, got {_type_name(content)}"
    items: list[McpContent] = []
    for index, item in enumerate(content):
        converted = _content_item(item, f"ToolResult.content[{index}]")
        if isinstance(converted, str):
            return converted
        items.append(converted)
    result: CallToolResult = {"content": items, "isError": is_error}
    structured = body.get("structured")
    if structured is not None:
        if not isinstance(structured, dict):
            return f"ToolResult.structured: expected an object, got {_type_name(structured)}"
        result["structuredContent"] = structured
        if not items:
            # MCP: a structured result also comes as its JSON text, for clients that read only content.
            result["content"] = [{"type": "text", "text": json.dumps(structured, separators=(",", ":"))}]
    schema = tool.get("output_schema")
    if schema is not None and not is_error:
        if structured is None:
            return f"{tool['name']} declares an output_schema: a result that is not an error needs `structured`"
        from agentproto.core.jsonschema_lite import validate_json  # only tools with an output_schema need it

        problems = validate_json(structured, schema)
        if problems:
            return f"ToolResult.structured does not match {tool['name']}'s output_schema: " + "; ".join(problems[:5])
    return result


def hook_output(answer: Any) -> JsonObject | str:
    """The output a hook invocation gets from an answer, or why the answer does not fit."""
    if answer == "Cancel":
        return {}
    if isinstance(answer, dict) and isinstance(answer.get("HookResult"), dict):
        output: JsonObject = answer["HookResult"]
        return output
    return "a hook takes a HookResult (an object: the hook's output) or Cancel answer"


# -- the requests of one session -------------------------------------------------------------


class Registration(Protocol):
    """A session's place on the loopback listener: its URLs, and its token until ``close``."""

    @property
    def tools_url(self) -> str: ...

    def hook_url(self, event: str) -> str: ...

    def close(self) -> None:
        """The token is dead at once: every later request with it is a 404."""


if TYPE_CHECKING:
    #: Opens the listener if needed and registers a session's tools and hooks on it.
    Listen = Callable[["AppTools"], Registration]


class Pending:
    """One open ToolCall or Hook request."""

    __slots__ = ("id", "kind", "request", "tool", "resolve", "timer", "turn", "outcome")

    def __init__(
        self, request_id: str, kind: str, request: OpenToolCall | OpenHook, tool: CheckedTool | None, resolve: Resolve
    ) -> None:
        self.id = request_id
        self.kind = kind  # "ToolCall" or "Hook"
        self.request = request  # the RequestOpened payload, as the app sees it
        self.tool = tool  # a ToolCall's declaration
        self.resolve: Resolve = resolve  # gives the agent its answer
        self.timer: Timer | None = None
        #: The engine's: the turn the request was opened in (None: outside any turn).
        self.turn: Any = None
        #: What the agent was given as the request closed (None while it is open).
        self.outcome: Any = None  # a ToolCall's CallToolResult, a Hook's output (a JsonObject)


class LaunchFacts(Protocol):
    """What of a session's ``Launch`` (drivers/base.py) the tools and hooks need."""

    agent_id: str
    tools: list[CheckedTool]
    hooks: list[str]
    tool_timeout: float
    hook_timeout: float


class DriverFacts(Protocol):
    """What of a ``Driver`` (drivers/base.py) says whether it can take them."""

    app_tools: bool
    hook_events: frozenset[str]


_NONE: frozenset[str] = frozenset()


class AppTools:
    """One session's tools and hooks: the tool set the listener serves (``mcp.ToolSet``),
    the entry point of hook invocations, and the requests both keep open. Every session
    has one; it serves nothing until ``serve`` is given a launch that declares some."""

    __slots__ = ("loop", "opened", "closed", "declared", "hooks", "timeouts", "pending", "counter", "accepting",
                 "registration", "_listing")

    def __init__(self, loop: "Loop", opened: Callable[[Pending], None], closed: Callable[[Pending], None]) -> None:
        self.loop = loop
        self.opened = opened
        self.closed = closed
        self.declared: dict[str, CheckedTool] = {}
        self.hooks = _NONE
        self.timeouts = (TOOL_TIMEOUT, HOOK_TIMEOUT)
        self.pending: dict[str, Pending] = {}
        self.counter = 0
        self.accepting = True
        self.registration: Registration | None = None
        self._listing: list[McpTool] = []

    def serve(self, launch: LaunchFacts, driver: DriverFacts, listen: Listen | None) -> None:
        """Serve the launch's tools and hooks, if it declares any: AgentError when the driver
        cannot take them (UnsupportedFeature), OSError when the listener cannot open."""
        if not launch.tools and not launch.hooks:
            return
        problem = refusal(launch.agent_id, driver.app_tools, driver.hook_events, launch.tools, launch.hooks)
        if problem is None and listen is None:
            problem = AgentError.detail(Kind.UNSUPPORTED_FEATURE, "tools and hooks: this runtime has no listener")
        if problem is not None:
            raise problem
        self.declared = {tool["name"]: tool for tool in launch.tools}
        self.hooks = frozenset(launch.hooks)
        self.timeouts = (launch.tool_timeout, launch.hook_timeout)
        self._listing = [_mcp_tool(tool) for tool in launch.tools]
        assert listen is not None
        self.registration = listen(self)

    @property
    def features(self) -> list[str]:
        """The capabilities the session has because of them."""
        return (["Tools"] if self.declared else []) + (["Hooks"] if self.hooks else [])

    @property
    def tools_url(self) -> str | None:
        return self.registration.tools_url if self.registration is not None and self.declared else None

    def hook_url(self, event: str) -> str | None:
        return self.registration.hook_url(event) if self.registration is not None and event in self.hooks else None

    def owns_tool(self, server: str, tool: str) -> bool:
        return server == APP_SERVER and tool in self.declared

    # -- mcp.ToolSet ---------------------------------------------------------------------
    def tools(self) -> list[McpTool]:
        return self._listing

    def call(self, call: "ToolCall") -> None:
        if not self.accepting:
            call.result(error_result("the session is closing"))
            return
        self.counter += 1
        request_id = f"call-{self.counter}"
        request: OpenToolCall = {"ToolCall": {"id": request_id, "tool": call.name, "arguments": call.arguments}}
        self._open(request_id, request, call.result, self.timeouts[0], self.declared[call.name])

    # -- hooks: the one entry point, whatever channel the agent invokes them through -----
    def has_hook(self, event: str) -> bool:
        return event in self.hooks

    def hook(self, event: str, input: Any, reply: Reply) -> None:
        if not self.accepting or event not in self.hooks:
            reply({})  # the neutral answer: nobody asked for this hook
            return
        self.counter += 1
        request_id = f"hook-{self.counter}"
        request: OpenHook = {"Hook": {"id": request_id, "event": event, "input": input}}
        self._open(request_id, request, reply, self.timeouts[1], None)

    def _open(
        self,
        request_id: str,
        request: OpenToolCall | OpenHook,
        resolve: Resolve,
        timeout: float,
        tool: CheckedTool | None,
    ) -> None:
        pending = Pending(request_id, "ToolCall" if "ToolCall" in request else "Hook", request, tool, resolve)
        self.pending[request_id] = pending
        pending.timer = self.loop.call_later(timeout, lambda: self._expire(pending, timeout))
        self.opened(pending)

    # -- outcomes --------------------------------------------------------------------------
    def answer(self, request_id: str, answer: Any) -> str | None:
        """Give an open request the app's answer; why it does not fit (it stays open), or None."""
        pending = self.pending[request_id]
        outcome = tool_result(pending.tool, answer) if pending.tool is not None else hook_output(answer)
        if isinstance(outcome, str):
            return outcome
        self._close(pending, outcome)
        return None

    def end(self, request_id: str, why: str) -> bool:
        """Close an open request without the app (an ended turn, the close); False if not ours."""
        pending = self.pending.get(request_id)
        if pending is None:
            return False
        self._close(pending, error_result(why) if pending.tool is not None else {})
        return True

    def _expire(self, pending: Pending, timeout: float) -> None:
        if self.pending.get(pending.id) is pending:
            pending.timer = None
            self.end(pending.id, f"timed out: the app did not answer within {timeout:g} s")

    def shutdown(self, why: str) -> None:
        """The session is closing: end every open request, take no new one, kill the token."""
        self.accepting = False
        for request_id in list(self.pending):
            self.end(request_id, why)
        registration, self.registration = self.registration, None
        if registration is not None:
            registration.close()

    def _close(self, pending: Pending, outcome: Outcome) -> None:
        del self.pending[pending.id]
        if pending.timer is not None:
            pending.timer.cancel()
        pending.outcome = outcome
        pending.resolve(outcome)
        self.closed(pending)


def _mcp_tool(tool: CheckedTool) -> McpTool:
    listed: McpTool = {"name": tool["name"], "description": tool["description"], "inputSchema": tool["input_schema"]}
    if "output_schema" in tool:
        listed["outputSchema"] = tool["output_schema"]
    return listed
