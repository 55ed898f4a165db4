"""What the Claude Code CLI's messages say, as protocol 1 events: its stream of deltas,
whole ``assistant`` messages, tool uses and their results, subagents' content.

Rules of this file:
- Text reaches the app once: from the stream's deltas, and from a whole ``assistant``
  message only for what the deltas did not carry (synthetic or unstreamed messages).
- The deltas the CLI writes in one burst (one per API stream event) go out joined as one
  event, at the same moment: consecutive deltas of one message are held and flushed
  before any other event and at the end of the loop tick.
- Everything read is type-checked (drivers/fields.py): a wrong field is skipped, never
  turned into text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from agentproto.drivers.base import Deltas
from agentproto.drivers.claude.mapping import result_text, tool_snapshot
from agentproto.drivers.fields import obj, objects, opt_integer, opt_text, text

if TYPE_CHECKING:
    from agentproto.core.wire_types import JsonObject, PlanEntry, ToolUpdate
    from agentproto.drivers.base import Host
    from agentproto.drivers.claude.types import (
        AssistantMessage,
        ContentBlock,
        StreamEventMessage,
        UserMessage,
    )

#: A stream delta's type -> the member holding its text and the event it becomes.
DELTA_FIELDS = {"text_delta": ("text", "TextDelta"), "thinking_delta": ("thinking", "ReasoningDelta")}
TODO_STATUS = {"pending": "Pending", "in_progress": "InProgress", "completed": "Completed"}
#: The usage members that count towards the context window.
CONTEXT_TOKENS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens")


class _Message:
    """What the stream told us of one assistant message: its blocks' streamed text."""

    __slots__ = ("blocks", "emitted", "ended", "matched", "uuid")

    def __init__(self) -> None:
        self.blocks: dict[int, tuple[str, list[str]]] = {}  # index -> (type, its text's pieces)
        self.matched: set[int] = set()
        self.emitted = False
        self.ended = False
        self.uuid: str | None = None  # the transcript entry of its last block


class MessageStream(Deltas):
    """One session's message state: the messages and tools of the running turn, and the
    deltas of the read being handled (``Deltas``)."""

    def __init__(self, host: "Host", new_id: Callable[[str], str]) -> None:
        super().__init__(host)
        #: Message ids the CLI did not give are made up through the launch (recorded, replayed).
        self.new_id = new_id
        self.messages: dict[str, _Message] = {}
        self.tools: dict[str, ToolUpdate] = {}
        self.parents: dict[str, str] = {}  # tool id -> the subagent tool it runs under
        self.stream_id: str | None = None  # the message the stream events are about
        self.context_used = 0
        #: The reason a synthetic "authentication_failed" message gave, this turn.
        self.auth_failed: str | None = None
        #: This turn's usage by API message (input with cache, cached, output): each report
        #: restates its message's counts, so the turn's is their sum (``Host.spent``).
        self.usage: dict[str, tuple[int, int, int]] = {}

    # -- events out
    def emit(self, kind: Any, parent: str | None = None, extensions: JsonObject | None = None) -> None:
        self.flush()
        self.host.emit(kind, extensions, parent)

    def tool_status(
        self, tool: ToolUpdate, status: str, output: str | None = None, parent: str | None = None
    ) -> None:
        tool["status"] = status
        if output is not None:
            tool["output"] = output
        self.emit({"ToolUpdated": dict(tool)}, parent)

    # -- messages in
    def on_stream_event(self, msg: StreamEventMessage) -> None:
        event = obj(msg.get("event"))
        kind = event.get("type")
        parent = opt_text(msg.get("parent_tool_use_id"))
        if kind == "message_start":
            message_id = obj(event.get("message")).get("id")
            if not isinstance(message_id, str):
                self.host.diagnostic("Warning", "claude: skipped a message_start without a string message id")
                return
            self.stream_id = message_id
            self.messages.setdefault(message_id, _Message())
            started: Any = obj(event.get("message")).get("usage")
            self.count(message_id, obj(started))
            return
        message_id = self.stream_id
        if kind == "message_delta" and message_id is not None:
            delta: Any = dict(event).get("usage")
            self.count(message_id, obj(delta))
        state = self.messages.get(message_id) if message_id else None
        if state is None or message_id is None:
            return
        index = opt_integer(event.get("index"))
        if kind == "content_block_start":
            block = obj(event.get("content_block"))
            if block.get("type") in ("text", "thinking") and index is not None:
                state.blocks[index] = (block["type"], [])
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
                entry[1].append(piece)  # joined once, if ever (_reconcile): never re-copied per delta
                state.emitted = True
                self.delta(kind_name, message_id, piece, parent)
        elif kind == "message_stop":
            self._end_message(message_id, state, parent)

    def _end_message(self, message_id: str, state: _Message, parent: str | None) -> None:
        if state.emitted and not state.ended:
            state.ended = True
            # The transcript entry's uuid is what ``fork_at`` (--resume-session-at) takes.
            extensions = {"claude": {"uuid": state.uuid}} if state.uuid else None
            self.emit({"MessageEnded": {"message_id": message_id}}, parent, extensions)

    def count(self, message_id: str, usage: JsonObject) -> None:
        """One API message's usage as the CLI restates it: the turn's so far goes to the host
        (a count the report lacks keeps its last value: message_delta carries output only)."""
        if not usage:
            return

        def tokens(key: str) -> int:
            value = usage.get(key)
            return value if isinstance(value, int) and value > 0 else 0

        cached = tokens("cache_read_input_tokens")
        last = self.usage.get(message_id, (0, 0, 0))
        fresh = tokens("input_tokens") + cached + tokens("cache_creation_input_tokens")
        counts = (fresh or last[0], cached or last[1], max(tokens("output_tokens"), last[2]))
        if counts == last:
            return
        self.usage[message_id] = counts
        self.host.spent({
            "input_tokens": sum(c[0] for c in self.usage.values()),
            "cached_input_tokens": sum(c[1] for c in self.usage.values()),
            "output_tokens": sum(c[2] for c in self.usage.values()),
        })

    def end_messages(self) -> None:
        """The turn ended: every message it streamed has ended too."""
        for message_id, state in self.messages.items():
            self._end_message(message_id, state, None)
        self.messages.clear()
        self.usage.clear()

    def on_assistant(self, msg: AssistantMessage) -> None:
        message = obj(msg.get("message"))
        parent = opt_text(msg.get("parent_tool_use_id"))
        if msg.get("error"):
            # A synthetic message reporting an error ("Not logged in", "API Error: …"):
            # the turn's result carries it as the failure; it is not the model's text.
            if msg["error"] == "authentication_failed":
                self.auth_failed = result_text(message.get("content")) or "authentication failed"
            return
        message_id = text(message.get("id")) or text(msg.get("uuid")) or self.new_id("message")
        state = self.messages.get(message_id)
        streamed = state is not None
        if state is None:
            state = self.messages[message_id] = _Message()
        if isinstance(msg.get("uuid"), str):
            state.uuid = msg["uuid"]
        usage = message.get("usage")
        if isinstance(usage, dict):
            self.count(message_id, dict(usage))
        if isinstance(usage, dict) and parent is None:
            used = sum(v for k, v in usage.items() if k in CONTEXT_TOKENS and isinstance(v, int))
            if used:
                self.context_used = used
        for block in objects(message.get("content")):
            btype = block.get("type")
            if btype in ("text", "thinking"):
                whole = block.get("text" if btype == "text" else "thinking")
                if isinstance(whole, str):
                    self._reconcile(message_id, state, btype, whole, parent)
            elif btype == "tool_use":
                self._tool_started(block, parent)
        if not streamed:
            self._end_message(message_id, state, parent)

    def _reconcile(self, message_id: str, state: _Message, btype: str, whole: str, parent: str | None) -> None:
        """Emit what the deltas of this block did not carry (all of it if none streamed)."""
        seen = ""
        for index in sorted(state.blocks):
            entry = state.blocks[index]
            if index not in state.matched and entry[0] == btype:
                state.matched.add(index)
                seen = "".join(entry[1])
                break
        rest = whole[len(seen) :] if whole.startswith(seen) else ""
        if rest:
            state.emitted = True
            self.delta("TextDelta" if btype == "text" else "ReasoningDelta", message_id, rest, parent)

    def _tool_started(self, block: ContentBlock, parent: str | None) -> None:
        tool_id = text(block.get("id"))
        name = text(block.get("name"))
        tool_input = block.get("input")
        tool = tool_snapshot(tool_id, name, tool_input)
        previous = self.tools.get(tool_id)
        if previous is not None:
            tool["status"] = previous["status"]
        self.tools[tool_id] = tool
        if parent:
            self.parents[tool_id] = parent
        self.emit({"ToolUpdated": dict(tool)}, parent)
        if name == "TodoWrite" and isinstance(tool_input, dict) and isinstance(tool_input.get("todos"), list):
            entries: list[PlanEntry] = [
                {"text": text(t.get("content")), "status": TODO_STATUS.get(text(t.get("status")), "Pending")}
                for t in objects(tool_input["todos"])
            ]
            self.emit({"PlanUpdated": {"entries": entries}}, parent)

    def on_user(self, msg: UserMessage) -> None:
        if msg.get("isReplay"):
            return
        message = obj(msg.get("message"))
        parent = opt_text(msg.get("parent_tool_use_id"))
        content = message.get("content")
        if isinstance(content, str):
            if parent:
                self._user_message(msg, content, parent)
            return
        for block in objects(content):
            if block.get("type") == "tool_result":
                tool_id = text(block.get("tool_use_id"))
                tool = self.tools.get(tool_id)
                if tool is None:
                    continue
                status = "Failed" if block.get("is_error") else "Completed"
                if tool["status"] == "Denied":
                    status = "Denied"
                self.tool_status(tool, status, result_text(block.get("content")), parent)
                self.tools.pop(tool_id, None)
            elif block.get("type") == "text" and parent:
                self._user_message(msg, text(block.get("text")), parent)

    def _user_message(self, msg: UserMessage, body: str, parent: str) -> None:
        self.user_message(text(msg.get("uuid")), body, parent)

    def user_message(self, message_id: str, body: str, parent: str) -> None:
        """User-role content of a subagent (its prompt from the parent agent): whole at once."""
        message_id = message_id or self.new_id("message")
        self.emit({"UserMessage": {"message_id": message_id, "text": body}}, parent)
        self.emit({"MessageEnded": {"message_id": message_id}}, parent)
