"""Protocol 1's values as mypy types: the TypedDicts of what agentproto/schema.json describes.

Rules of this file:
- Types only, for mypy: everything is declared under ``if TYPE_CHECKING:`` and every importer
  imports this module under ``if TYPE_CHECKING:`` too, so it costs no start-up time (nothing
  here exists at run time: build values as dict literals, never by calling these classes).
- Each TypedDict follows its schema definition of the same name: a required member is a
  required key, an optional one is ``NotRequired``; a one-key variant (``{"Failed": {...}}``)
  is its own ``@final`` TypedDict (so ``"Failed" in value`` narrows the union for mypy) and
  the definition is the ``Union`` of its variants.
- ``JsonObject`` is for values that really are arbitrary JSON (a tool's arguments, a JSON
  Schema, an agent's raw input kept for the app): never for a message whose fields are known.
"""

from __future__ import annotations

from agentproto.core.typecheck import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, Literal, TypedDict, Union, final

    from typing_extensions import NotRequired

    #: An arbitrary JSON object (tool arguments, JSON Schemas, raw agent input).
    JsonObject = dict[str, Any]

    class SystemTime(TypedDict):
        secs_since_epoch: int
        nanos_since_epoch: int

    # -- tools ---------------------------------------------------------------------------

    class McpToolName(TypedDict):
        server: str
        tool: str

    @final
    class McpKind(TypedDict):
        Mcp: McpToolName

    #: "Read", "Edit", ..., "Subagent", or {"Mcp": {...}}.
    ToolKind = Union[str, McpKind]

    class CommandLine(TypedDict):
        command: str
        cwd: str | None

    @final
    class CommandInput(TypedDict):
        Command: CommandLine

    @final
    class PathInput(TypedDict):
        Path: str

    @final
    class PatternInput(TypedDict):
        Pattern: str

    @final
    class UrlInput(TypedDict):
        Url: str

    @final
    class QueryInput(TypedDict):
        Query: str

    @final
    class TextInput(TypedDict):
        Text: str

    #: "None" or one of the one-key variants.
    ToolInput = Union[str, CommandInput, PathInput, PatternInput, UrlInput, QueryInput, TextInput]

    class FileDiff(TypedDict):
        path: str
        old_text: str | None
        new_text: str

    class RawTool(TypedDict):
        name: str
        input: Any

    class SubagentInfo(TypedDict, total=False):
        role: str | None
        model: str | None
        summary: str | None
        tokens: int | None

    class ToolUpdate(TypedDict):
        id: str
        kind: ToolKind
        title: str
        status: str
        input: ToolInput
        output: NotRequired[str | None]
        diffs: list[FileDiff]
        locations: list[str]
        raw: NotRequired[RawTool | None]
        subagent: NotRequired[SubagentInfo | None]

    @final
    class ToolUpdated(TypedDict):
        ToolUpdated: ToolUpdate

    class TextContent(TypedDict):
        type: Literal["text"]
        text: str

    class ImageContent(TypedDict):
        type: Literal["image"]
        data: str
        mime_type: str

    class AppTool(TypedDict):
        """One of the app's own tools, as the app declares it at ``open``."""

        name: str
        description: str
        input_schema: NotRequired[JsonObject | None]
        output_schema: NotRequired[JsonObject | None]

    #: One content item of a tool result (MCP's text and image content).
    ToolContent = Union[TextContent, ImageContent]

    class CheckedTool(TypedDict):
        """An ``AppTool`` as apptools.check_tools returns it: its input schema filled in."""

        name: str
        description: str
        input_schema: JsonObject
        output_schema: NotRequired[JsonObject]

    # -- plans, usage, stop reasons ------------------------------------------------------

    class PlanEntry(TypedDict):
        text: str
        status: str

    class TurnUsage(TypedDict):
        input_tokens: int
        cached_input_tokens: int
        output_tokens: int

    class CompletedBody(TypedDict):
        source: str

    @final
    class Completed(TypedDict):
        Completed: CompletedBody

    class FailedBody(TypedDict):
        message: str

    @final
    class Failed(TypedDict):
        Failed: FailedBody

    #: "Cancelled", "Refused", {"Completed": ...} or {"Failed": ...}.
    StopReason = Union[str, Completed, Failed]

    class ContextUsageBody(TypedDict):
        used_tokens: int
        window_tokens: int | None
        cost_usd: float | None

    @final
    class ContextUsage(TypedDict):
        """The EventKind ``ContextUsage``."""

        ContextUsage: ContextUsageBody

    # -- agents, auth, options -----------------------------------------------------------

    class TerminalLogin(TypedDict):
        command: list[str]
        env: dict[str, str]
        description: str

    @final
    class TerminalMethod(TypedDict):
        Terminal: TerminalLogin

    class EnvVarName(TypedDict):
        name: str

    @final
    class EnvVarMethod(TypedDict):
        EnvVar: EnvVarName

    LoginMethod = Union[TerminalMethod, EnvVarMethod]

    class AccountInfo(TypedDict, total=False):
        email: str | None
        plan: str | None

    @final
    class OtherAuth(TypedDict):
        Other: str

    #: "Subscription", "ApiKey", "CloudProvider" or {"Other": "..."}.
    AuthKind = Union[str, OtherAuth]

    class AuthenticatedBody(TypedDict):
        kind: AuthKind
        account: NotRequired[AccountInfo | None]

    @final
    class Authenticated(TypedDict):
        Authenticated: AuthenticatedBody

    class UnauthenticatedBody(TypedDict):
        login: list[LoginMethod]

    @final
    class Unauthenticated(TypedDict):
        Unauthenticated: UnauthenticatedBody

    #: "Unknown", {"Authenticated": ...} or {"Unauthenticated": ...}.
    AuthStatus = Union[str, Authenticated, Unauthenticated]

    ConfigValue = Union[str, bool]

    class ConfigChoice(TypedDict):
        value: str
        label: str
        description: NotRequired[str | None]
        options: NotRequired[list[ConfigOption]]

    class SelectBody(TypedDict):
        choices: list[ConfigChoice]

    @final
    class SelectKind(TypedDict):
        Select: SelectBody

    #: "Boolean" or {"Select": {"choices": [...]}}.
    ConfigKind = Union[str, SelectKind]

    class ConfigOption(TypedDict):
        """A session setting the agent offers; its ``current`` value, when it has one."""

        id: str
        name: str
        category: NotRequired[str | None]
        kind: ConfigKind
        current: NotRequired[ConfigValue | None]
        live: bool

    class SlashCommand(TypedDict):
        name: str
        description: str
        input_hint: NotRequired[str | None]

    class Capabilities(TypedDict):
        features: list[str]
        mcp_transports: list[str]

    class AgentDetails(TypedDict):
        version: NotRequired[str | None]
        auth: AuthStatus
        capabilities: Capabilities
        config_options: list[ConfigOption]
        commands: list[SlashCommand]

    class MissingAgent(TypedDict):
        id: str
        name: str
        searched: list[str]
        install_hint: str

    class AgentInstallation(TypedDict):
        id: str
        name: str
        executable_path: str
        source: str
        upgrade: NotRequired[MissingAgent | None]
        acp_args: NotRequired[list[str] | None]
        version: NotRequired[str | None]

    class Diagnostic(TypedDict):
        level: str  # Info, Warning, Error
        message: str

    class DiscoveryReport(TypedDict):
        agents: list[AgentInstallation]
        missing: list[MissingAgent]
        diagnostics: list[Diagnostic]

    class UsageWindow(TypedDict):
        #: "Session" (5h), "Week", or an agent's own label.
        label: str
        used_percent: int
        resets_at: NotRequired[SystemTime | None]

    class ResetCredits(TypedDict):
        available: int
        next_expires_at: NotRequired[SystemTime | None]

    class PlanUsage(TypedDict):
        plan: NotRequired[str | None]
        windows: list[UsageWindow]
        reset_credits: NotRequired[ResetCredits | None]
        fetched_at: SystemTime

    class SessionConfiguration(TypedDict):
        options: dict[str, ConfigValue]

    class SessionInfo(TypedDict):
        id: str
        agent: AgentInstallation
        details: AgentDetails
        configuration: SessionConfiguration
        resume_token: NotRequired[str | None]
        title: NotRequired[str | None]
        status: NotRequired[Any]
        tools_url: NotRequired[str | None]
        hook_urls: NotRequired[dict[str, str]]
        policy: NotRequired[list[JsonObject]]  # the permission policy in force (engine/guard.py)
        budget: NotRequired[JsonObject]  # its bounds, spent, left and price table

    # -- MCP servers the app forwards ----------------------------------------------------

    class StdioServer(TypedDict):
        command: str
        args: list[str]
        env: dict[str, str]

    class HttpServer(TypedDict):
        url: str
        headers: dict[str, str]

    @final
    class StdioConnection(TypedDict):
        Stdio: StdioServer

    @final
    class HttpConnection(TypedDict):
        Http: HttpServer

    @final
    class SseConnection(TypedDict):
        Sse: HttpServer

    McpConnection = Union[StdioConnection, HttpConnection, SseConnection]

    class McpServer(TypedDict):
        name: str
        connection: McpConnection

    # -- requests to the app -------------------------------------------------------------

    class Choice(TypedDict):
        id: str
        label: str
        description: NotRequired[str | None]

    class Question(TypedDict):
        id: str
        text: str
        header: NotRequired[str | None]
        choices: list[Choice]
        multi_select: bool
        allows_free_text: bool

    class QuestionRequest(TypedDict):
        id: str
        questions: list[Question]

    class PermissionRequest(TypedDict):
        id: str
        tool: ToolUpdate
        options: list[str]
        detail: NotRequired[str | None]

    class ToolCall(TypedDict):
        id: str
        tool: str
        arguments: JsonObject  # the tool's arguments, as the agent gave them

    class HookCall(TypedDict):
        id: str
        event: str
        input: Any  # the hook's input, as the agent gave it

    # The variants of ``Request`` (what ``RequestOpened`` carries and ``answer`` names).
    @final
    class OpenPermission(TypedDict):
        Permission: PermissionRequest

    @final
    class OpenQuestion(TypedDict):
        Question: QuestionRequest

    @final
    class OpenToolCall(TypedDict):
        ToolCall: ToolCall

    @final
    class OpenHook(TypedDict):
        Hook: HookCall

    Request = Union[OpenPermission, OpenQuestion, OpenToolCall, OpenHook]
    #: What an agent asks the app through its driver (ToolCall and Hook are the app's tools').
    AgentRequest = Union[OpenPermission, OpenQuestion]

    # -- the app's answers ---------------------------------------------------------------

    @final
    class ChoicesAnswer(TypedDict):
        Choices: list[str]

    @final
    class TextAnswer(TypedDict):
        Text: str

    QuestionAnswer = Union[ChoicesAnswer, TextAnswer]

    @final
    class PermissionAnswer(TypedDict):
        Permission: str

    @final
    class QuestionAnswers(TypedDict):
        Question: list[QuestionAnswer]

    @final
    class DenyAnswer(TypedDict):
        Deny: FailedBody

    @final
    class ToolResultAnswer(TypedDict):
        ToolResult: JsonObject  # content, structured, is_error: apptools.py checks them

    #: "Cancel" or one of the one-key variants.
    Answer = Union[str, PermissionAnswer, QuestionAnswers, DenyAnswer, ToolResultAnswer]

    # -- lines ---------------------------------------------------------------------------

    class ErrorBody(TypedDict):
        kind: str
        message: str
        line: NotRequired[str]
        login: NotRequired[list[LoginMethod]]

    class TurnContext(TypedDict):
        id: str
        parent_tool_id: NotRequired[str | None]

    class Event(TypedDict):
        sequence: int
        occurred_at: SystemTime
        session_id: str
        turn_info: NotRequired[TurnContext | None]
        #: An EventKind: a bare name or a one-key object (``{"TextDelta": {...}}``).
        kind: Any
        extensions: NotRequired[JsonObject | None]

    class Hello(TypedDict):
        protocol: int
        anyagent: str
        agentproto: NotRequired[str]

    class HelloLine(TypedDict):
        hello: Hello

    class ReplyLine(TypedDict):
        id: int
        ok: Any

    class ErrorReplyLine(TypedDict):
        id: int | None
        error: ErrorBody

    class EventLine(TypedDict):
        event: Event
