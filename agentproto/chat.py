"""``agentproto chat``: one session in a terminal, or one turn from a pipe.

Rules of this file:
- The chat is a ``Sink`` of one session on its own loop; stdin is read through
  ``streams.Reader`` like every other descriptor, stdout written directly (a terminal
  takes the text at once).
- Nothing is answered from inside an engine callback: a denial, a cancelled question or
  the closing of a one-turn session runs on the next tick.
- From a pipe, all of stdin is one prompt; permission requests are denied and questions
  cancelled, and the session closes after its turn.
- The app's own tools (``--tools FILE``): a ToolCall shows the tool and its arguments and
  the line typed is its result (from a pipe: an error result, nobody can type one); a Hook
  gets the neutral answer.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from agentproto.engine import Session
from agentproto.errors import AgentError, log
from agentproto.loop import Loop
from agentproto.runtime import Runtime, Scope
from agentproto.streams import Reader
from agentproto.wire import event_kind_name

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class Style:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled else text


class Chat:
    """``agentproto chat``: one session in a terminal, or one turn from a pipe."""

    def __init__(
        self,
        agent: Any,
        interactive: bool,
        mock_script: dict[str, Any] | None = None,
        tools: list[Any] | None = None,
    ) -> None:
        self.loop = Loop()
        self.runtime = Runtime(self.loop, mock_script=mock_script)
        self.scope = Scope(self.runtime)
        self.agent = agent
        self.tools = tools
        self.interactive = interactive
        self.style = Style(sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
        self.session: Session | None = None
        self.status = EXIT_OK
        self.pending: list[dict[str, Any]] = []
        self.in_text = False
        self.stdin_buffer = b""
        self.prompt_text = ""
        self.turn_running = False
        self.finished = False

    def write(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    # -- Sink
    def event(self, session: Session, event: dict[str, Any]) -> None:
        session.delivered(1)
        kind = event["kind"]
        name = event_kind_name(kind)
        body: Any = kind.get(name) if isinstance(kind, dict) else None
        if name == "TextDelta":
            self.write(body["text"])
            self.in_text = True
        elif name == "ReasoningDelta":
            self.write(self.style("2", body["text"]))
        elif name == "ToolUpdated":
            self._newline()
            self.write(self.style("36", f"[{tool_kind(body['kind'])}] {body['title']} ({body['status']})") + "\n")
        elif name == "ToolOutputDelta":
            self.write(self.style("2", body["text"]))
        elif name == "PlanUpdated":
            self._newline()
            for entry in body["entries"]:
                self.write(f"  - [{entry['status']}] {entry['text']}\n")
        elif name == "PlanProposed":
            self._newline()
            self.write(body["markdown"] + "\n")
        elif name == "RequestOpened":
            self._newline()
            self.pending.append(body)
            if len(self.pending) == 1:
                self._ask()
        elif name == "RequestClosed":
            # Answered here, or closed by the agent or a cancel: stop asking about it.
            before = len(self.pending)
            self.pending = [r for r in self.pending if next(iter(r.values()))["id"] != body["request_id"]]
            if before != len(self.pending):
                self._newline_after_question()
        elif name == "Diagnostic":
            self._newline()
            log(f"{body['level'].lower()}: {body['message']}")
        elif name == "TurnEnded":
            self._newline()
            stop = body["stop"]
            if isinstance(stop, dict) and "Failed" in stop:
                log(f"turn failed: {stop['Failed']['message']}")
                self.status = EXIT_FAILED
            elif stop == "Cancelled":
                log("turn cancelled")
            elif stop == "Refused":
                log("the agent refused")
            self.turn_running = False
            if self.pending:
                self.pending = []
                self.write("\n")
            if not self.interactive:
                # Not from inside the event: the session may be closing already (a close or
                # an error ends the turn), and closing it again from here would re-enter it.
                self.loop.call_soon(self._close)
            else:
                self._show_prompt()

    def session_error(self, session: Session, error: AgentError) -> None:
        self._newline()
        log(f"{error.kind}: {error.message}")
        self.status = EXIT_FAILED

    def session_closed(self, session: Session) -> None:
        self.session = None
        self.finished = True
        self.loop.stop()

    # -- terminal side
    def _newline(self) -> None:
        if self.in_text:
            self.write("\n")
            self.in_text = False

    def _newline_after_question(self) -> None:
        """A question was on screen unanswered: end its line, ask the next or prompt again."""
        self.write("\n")
        if self.pending:
            self._ask()
        elif not self.turn_running:
            self._show_prompt()

    def _show_prompt(self) -> None:
        if self.interactive and not self.pending:
            self.write(self.style("1", "> "))

    def _ask(self) -> None:
        if not self.pending:
            return
        request = self.pending[0]
        if "Permission" in request:
            tool = request["Permission"]["tool"]
            self.write(self.style("33", f"Allow {tool_kind(tool['kind'])}: {tool['title']}? [y/N] "))
            if not self.interactive:
                self.write("n (no terminal to ask)\n")
                # Not from inside the event: the agent is still between asking and waiting.
                self.loop.call_soon(lambda: self._answer_line("n"))
        elif "ToolCall" in request or "Hook" in request:
            self._ask_app(request)
        else:
            questions = request["Question"]["questions"]
            q = questions[0]
            choices = ", ".join(f"{i + 1}) {c['label']}" for i, c in enumerate(q["choices"]))
            self.write(self.style("33", f"{q['text']} {choices} ") )
            if not self.interactive:
                self.write("(no terminal to ask: cancelled)\n")
                self.loop.call_soon(lambda: self._answer_line(""))

    def _ask_app(self, request: dict[str, Any]) -> None:
        if "Hook" in request:
            self.write(self.style("36", f"[hook {request['Hook']['event']}] (neutral answer)") + "\n")
            self.loop.call_soon(lambda: self._answer_line(""))
            return
        call = request["ToolCall"]
        self.write(self.style("33", f"Tool {call['tool']}({json.dumps(call['arguments'])}): its result? "))
        if not self.interactive:
            self.write("(no terminal to ask: an error result)\n")
            self.loop.call_soon(lambda: self._answer_line(""))

    def _app_answer(self, request: dict[str, Any], line: str) -> Any:
        if "Hook" in request:
            return "Cancel"  # the neutral {}
        if not self.interactive:
            return {"Deny": {"message": "nobody at a terminal to answer this tool call"}}
        text = line.rstrip("\n")
        return {"ToolResult": {"content": [{"type": "text", "text": text}], "is_error": False}}

    def _answer_line(self, line: str) -> None:
        if not self.pending or self.session is None:
            return
        request = self.pending.pop(0)
        if "ToolCall" in request or "Hook" in request:
            request_id = next(iter(request.values()))["id"]
            answer: Any = self._app_answer(request, line)
        elif "Permission" in request:
            body = request["Permission"]
            yes = line.strip().lower() in ("y", "yes")
            answer = {"Permission": "AllowOnce" if yes else "DenyOnce"}
            if not yes and "DenyOnce" not in body["options"]:
                answer = "Cancel"
            request_id = body["id"]
        else:
            body = request["Question"]
            request_id = body["id"]
            entries: list[dict[str, Any]] = []
            for q in body["questions"]:
                pick = line.strip()
                if pick.isdigit() and 0 < int(pick) <= len(q["choices"]):
                    entries.append({"Choices": [q["choices"][int(pick) - 1]["id"]]})
                elif q["allows_free_text"] and pick:
                    entries.append({"Text": pick})
                else:
                    entries = []
                    break
            answer = {"Question": entries} if entries else "Cancel"
        self.session.answer(request_id, answer, self._report)
        self._ask()

    def _close(self) -> None:
        if self.session is not None and self.session.state == "open":
            self.session.close(lambda _v, _e: None)

    def _report(self, _value: Any, error: AgentError | None) -> None:
        if error is not None:
            log(f"{error.kind}: {error.message}")

    def _on_line(self, line: str) -> None:
        if self.session is None:
            return
        if self.pending:
            self._answer_line(line)
            return
        text = line.strip()
        if not text:
            self._show_prompt()
            return
        if text.startswith("/set "):
            parts = text.split(None, 2)
            if len(parts) == 3:
                option, value = parts[1], {"true": True, "false": False}.get(parts[2], parts[2])

                def configured(_value: Any, error: AgentError | None) -> None:
                    if error is None:
                        self.write(f"{option} = {json.dumps(value)}\n")
                    self._report(_value, error)
                    if not self.turn_running:
                        self._show_prompt()

                self.session.configure(option, value, configured)
            else:
                log("usage: /set OPTION VALUE")
                self._show_prompt()
            return
        if text in ("/quit", "/exit"):
            self.session.close(lambda _v, _e: None)
            return
        self.turn_running = True
        self.session.prompt(line, [], self._report)

    def _data(self, data: bytes) -> None:
        self.stdin_buffer += data
        if not self.interactive:
            return  # from a pipe, all of stdin is one prompt
        while b"\n" in self.stdin_buffer:
            raw, self.stdin_buffer = self.stdin_buffer.split(b"\n", 1)
            self._on_line(raw.decode("utf-8", "replace"))

    def _eof(self) -> None:
        if not self.interactive:
            self._start_one_turn(self.stdin_buffer.decode("utf-8", "replace").strip())
        elif self.session is not None:
            self.session.close(lambda _v, _e: None)

    def _start_one_turn(self, text: str) -> None:
        if self.session is None:
            return
        if not text:
            log("nothing to send: stdin was empty")
            self.status = EXIT_USAGE
            self.session.close(lambda _v, _e: None)
            return
        self.session.prompt(text, [], self._report)

    def _interrupt(self) -> None:
        if self.session is not None and self.turn_running:
            self._newline()
            self.session.cancel(False, None, self._report)
        elif self.session is not None:
            self.session.close(lambda _v, _e: None)

    def run(self) -> int:
        def opened(info: Any, error: AgentError | None) -> None:
            if error is not None:
                log(f"{error.kind}: {error.message}")
                for step in error.fields.get("login") or []:
                    log(f"  login: {json.dumps(step)}")
                self.status = EXIT_FAILED
                self.finished = True
                self.loop.stop()
                return
            if self.interactive:
                details = info["details"]
                name, version = info["agent"]["name"], details.get("version") or ""
                log(f"{name} {version} — session {info['id']}; /set OPTION VALUE, /quit, Ctrl-C cancels")
                self._show_prompt()
            Reader(self.loop, sys.stdin.fileno(), self._data, self._eof, 65536).start()

        # ``opened`` runs when the open completes: at once (the mock, a launch error) or later.
        options: dict[str, Any] = {"agent": self.agent, "dir": os.getcwd(), "permission_mode": "Ask"}
        if self.tools is not None:
            options["tools"] = self.tools
        self.runtime.execute("open", options, self, self.scope, opened)
        for session in self.scope.live.values():
            self.session = session
        if self.finished:
            self.loop.close()
            return self.status
        self.loop.add_signal_handler(signal.SIGINT, self._interrupt)
        self.loop.add_signal_handler(signal.SIGTERM, lambda: self.runtime.close_all())
        self.loop.run(until=lambda: self.finished)
        self.loop.close()
        return self.status


def tool_kind(kind: Any) -> str:
    if isinstance(kind, dict) and "Mcp" in kind:
        return f"mcp {kind['Mcp']['server']}/{kind['Mcp']['tool']}"
    return str(kind)

