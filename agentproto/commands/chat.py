"""``agentproto chat``: one session in a terminal, or one turn from a pipe.

Rules of this file:
- The chat is the ``EventSink`` of one session on its own loop; stdin is read through
  ``streams.Reader`` like every other descriptor. What goes where is chat_view's: the
  agent's answer (or, with ``--json``, the raw events) on stdout, the rest on stderr.
- Nothing is answered from inside an engine callback: a denial, a cancelled question or
  the closing of a one-turn session runs on the next tick.
- From a pipe, all of stdin is one prompt; permission requests are denied, questions
  cancelled, tool calls given an error result, and the session closes after its turn.
- A line starting with ``/`` is a chat command, answered here, never sent to the agent
  (``//`` sends a line that starts with ``/``). A prompt that nothing could answer (a mock
  script with no turn left) is refused here rather than left to hang.
- On a terminal, what is typed while a turn runs is read key by key (chat_screen's
  ``TypeAhead``): a line entered then is shown in the transcript (``» TEXT  (queued)``) and
  runs as it would at the prompt; the terminal's modes are put back at exit.
- The session works in ``--dir DIR`` (default: the current directory).
- Exit status: 0, or 1 once a turn failed, the session failed or stdout went away; 2 for
  an empty prompt from a pipe; 130 for Ctrl-C at the prompt, 128 + N for signal N.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any, Callable

from agentproto.commands.chat_input import Asking, TypeAhead
from agentproto.commands.chat_screen import (
    HELP,
    Screen,
    describe_option,
    event_note,
    login_steps,
    mock_banner,
    session_summary,
    stop_note,
    terminal_width,
    tool_line,
    usage_line,
    welcome,
)
from agentproto.core.errors import AgentError, log
from agentproto.core.wire import encode, event_kind_name
from agentproto.engine.runtime import Engine, Scope
from agentproto.engine.session import EngineSession
from agentproto.loopio.lifetime import abandon_when_stuck, stop_on_signals, when_drained
from agentproto.loopio.loop import Loop
from agentproto.loopio.streams import Reader

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class Chat(Asking):
    """``agentproto chat``: one session in a terminal, or one turn from a pipe."""

    def __init__(
        self,
        agent: Any,
        interactive: bool,
        mock_script: dict[str, Any] | None = None,
        tools: list[Any] | None = None,
        *,
        json_events: bool = False,
        color: str = "auto",
        directory: str | None = None,
        mock_path: str | None = None,
        policy: list[Any] | None = None,
    ) -> None:
        self.loop = Loop(adopt_orphans=True)  # nothing an agent detaches outlives the chat
        self.runtime = Engine(self.loop, mock_script=mock_script)
        self.scope = Scope(self.runtime)
        self.agent = agent
        self.tools, self.policy = tools, policy
        self.directory = os.path.abspath(directory) if directory else os.getcwd()
        self.mock = mock_banner(mock_script, mock_path) if agent == "mock" else None
        #: The keys typed while a turn runs (an interactive chat on a terminal only).
        self.keys: TypeAhead | None = None
        #: What was typed at the prompt before its turn ended: the start of the next line.
        self.carry = ""
        #: Prompts typed during a turn, shown once the engine says what became of them.
        self.typed: list[str] = []
        self.interactive = interactive
        self.json_events = json_events
        self.screen = Screen(self.loop, color, self._stdout_gone)
        self.session: EngineSession | None = None
        self.status = EXIT_OK
        self.signalled: int | None = None
        self.pending: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []  # a Question's answers so far, one per question
        self.stdin_buffer = b""
        self.turn_running = False
        self.turn_started = 0.0
        self.turn_cost: float | None = None
        self.tool: dict[str, Any] | None = None  # the running tool, for the status line
        self.tool_said: dict[str, str] = {}  # tool id -> the last line shown for it
        self.finished = False
        #: Prompts a mock script can still answer (None: no limit, e.g. the echo mock).
        self.turns_left: int | None = None
        #: Prompts sent whose turn has not started: queued ones will take a script turn each,
        #: a steered one (it joined the running turn) takes none.
        self.unstarted = 0
        if mock_script is not None and agent == "mock":
            self.turns_left = len(mock_script.get("turns") or [])
        self.drain_grace = abandon_when_stuck(self.loop, self.screen.out)

    # -- EventSink ---------------------------------------------------------------------
    def event(self, session: EngineSession, event: dict[str, Any]) -> None:
        session.delivered(1)
        self._event(event)
        self._sync_keys()

    def _event(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        name = event_kind_name(kind)
        body: Any = kind.get(name) if isinstance(kind, dict) else None
        if self.json_events:
            self.screen.answer(encode(event).decode("ascii"))
        elif name == "TextDelta":
            self.screen.answer(body["text"])
        elif name == "ReasoningDelta":
            self.screen.stream(body["text"], "2")
        if name == "TurnStarted":
            self.turn_started, self.turn_cost, self.tool_said = self.loop.time(), None, {}
            if self.unstarted:
                self.unstarted -= 1
                if self.turns_left is not None:
                    self.turns_left -= 1  # the mock played one of its turns for it
            self.turn_running = True  # a prompt typed during the last turn may start one now
        elif name in ("ToolUpdated", "ToolProgress", "ToolOutputDelta"):
            self._tool(name, body)
        elif name == "ContextUsage" and body.get("cost_usd") is not None:
            self.turn_cost = float(body["cost_usd"])
        elif name == "RequestOpened" and "answered_by" in (event.get("extensions") or {}).get("agentproto", {}):
            by = event["extensions"]["agentproto"]["answered_by"]  # the policy answered: nothing to ask
            title = next(iter(body.values())).get("tool", {}).get("title", "")
            self.screen.note(f"[policy rule {by['policy']}: {by['action']}] {title}", "2")
        elif name == "RequestOpened":
            self.pending.append(body)
            if len(self.pending) == 1:
                self._ask()
        elif name == "RequestClosed":
            # Answered here, or closed by the agent or a cancel: stop asking about it.
            before = len(self.pending)
            self.pending = [r for r in self.pending if next(iter(r.values()))["id"] != body["request_id"]]
            if before != len(self.pending):
                self.answers = []
                self.screen.fresh_line()
                if self.pending:
                    self._ask()
                elif not self.turn_running:
                    self._show_prompt()
        elif name == "TurnEnded":
            self._turn_ended(body)
        else:
            note = event_note(name, body, self.json_events)
            if note is not None:
                self.screen.note(*note)

    def _turn_ended(self, body: dict[str, Any]) -> None:
        if not self.json_events:
            self.screen.end_answer()
        stop = body["stop"]
        if isinstance(stop, dict) and "Failed" in stop:
            self.status = EXIT_FAILED
        note = stop_note(stop)
        if note is not None:
            self.screen.note(*note)
        summary = usage_line(body.get("usage"), self.turn_cost, self.loop.time() - self.turn_started)
        if summary is not None:
            self.screen.note(summary, "2")
        self.turn_running = False
        self.tool = None
        self.pending, self.answers = [], []
        if not self.interactive:
            # Not from inside the event: the session may be closing already (a close or
            # an error ends the turn), and closing it again from here would re-enter it.
            self.loop.call_soon(self._close)
        else:
            # Next tick: a queued prompt's turn starts right after this one ends.
            self.loop.call_soon(lambda: None if self.turn_running else self._show_prompt())

    def session_error(self, session: EngineSession, error: AgentError) -> None:
        self._failed(error)

    def session_closed(self, session: EngineSession) -> None:
        self.session = None
        self._finish()

    # -- what is shown -------------------------------------------------------------------
    def _tool(self, name: str, body: dict[str, Any]) -> None:
        if name == "ToolUpdated":
            line = tool_line(body)
            if body["status"] in ("Pending", "Running"):
                if self.tool is None or self.tool["id"] != body["id"]:
                    self.tool = {"id": body["id"], "since": self.loop.time()}
                self.tool["line"] = line
            elif self.tool is not None and self.tool["id"] == body["id"]:
                self.tool = None
            if self.json_events or (self.screen.live and body["status"] in ("Pending", "Running")):
                self._tick()  # the one updating line
            elif self.tool_said.get(body["id"]) != line:
                self.tool_said[body["id"]] = line
                self.screen.note(line, "36")
        elif self.tool is not None and body.get("tool_id") == self.tool["id"]:
            text = body.get("message") if name == "ToolProgress" else body.get("text")
            last = [part for part in str(text or "").splitlines() if part.strip()]
            if last:
                self.tool["detail"] = last[-1].strip()
            self._tick()

    def _tick(self) -> None:
        """Redraw the status line: what runs, and for how long (live terminals only)."""
        if not self.turn_running or self.pending:
            return
        keys = self.keys
        typed = keys.line if keys is not None and keys.on and keys.echo else None
        if self.tool is not None:
            detail = self.tool.get("detail")
            self.screen.status(self.tool["line"] + (f" · {detail}" if detail else ""), self.tool["since"], typed)
        else:
            self.screen.status("working…", self.turn_started, typed)

    def _spin(self) -> None:
        if self.finished:
            return
        self._tick()
        self.loop.call_later(0.1, self._spin)

    def _show_prompt(self) -> None:
        self._sync_keys()
        if self.interactive and not self.pending and not self.finished:
            self.screen.ask("> ", "1")
            self._carry_typing()

    def _failed(self, error: AgentError) -> None:
        """The session failed, or did not open: what went wrong (and how to log in, when
        that was it); the chat's exit status is 1."""
        self.screen.note(f"{error.kind}: {error.message}", "31")
        steps = login_steps(error.fields.get("login") or [])
        if steps:
            self.screen.note("to log in: " + "; or ".join(steps))
        self.status = EXIT_FAILED

    # -- input ---------------------------------------------------------------------------
    def _on_line(self, line: str, during_turn: bool = False) -> None:
        if self.session is None:
            return
        if not during_turn:
            self.screen.typed()
        if self.pending:
            self._answer_line(line)
            return
        text = line.strip()
        if not text:
            if not during_turn:
                self._show_prompt()
        elif text.startswith("/") and not text.startswith("//"):
            if during_turn:
                self.screen.note("» " + text, "2")
            self._command(text)
        else:
            if during_turn:
                self.typed.append(text)
            self._prompt(line[line.index("/") + 1 :] if text.startswith("//") else line)

    def _prompt(self, text: str) -> None:
        assert self.session is not None
        if self.turns_left is not None:
            if self.turns_left - self.unstarted <= 0:
                self.screen.note(
                    "the mock script has no turn left to play: nothing would answer this prompt"
                    + (" (/quit ends the chat)" if self.interactive else ""),
                    "31",
                )
                if not self.interactive:
                    self.status = EXIT_FAILED
                    self._close()
                else:
                    self._show_prompt()
                return
        if not self.turn_running:
            self.turn_started = self.loop.time()
        self.turn_running = True
        self.unstarted += 1
        self.session.prompt(text, [], self._prompted)
        self._sync_keys()

    def _prompted(self, value: Any, error: AgentError | None) -> None:
        kind = (value or {}).get("kind", {})
        if error is not None or "Steered" in kind:
            self.unstarted -= 1  # no turn of its own will start for it
        if self.typed:
            # A prompt typed during a turn, in the transcript, with what became of it.
            said = "queued" if "Queued" in kind else "sent to the running turn" if "Steered" in kind else None
            self.screen.note("» " + self.typed.pop(0) + (f"  ({said})" if said else ""), "2")
        self._report(value, error)

    def _command(self, text: str) -> None:
        assert self.session is not None
        name, _, rest = text.partition(" ")
        rest = rest.strip()
        if name == "/help":
            self.screen.note(HELP)
        elif name in ("/quit", "/exit"):
            self._close()
            return
        elif name == "/cancel":
            if self.turn_running:
                self.session.cancel(False, None, self._report)
                return  # the prompt comes back when the turn has ended
            self.screen.note("no turn is running", "2")
        elif name == "/info":
            self.screen.note(session_summary(self.session.info, self.directory))
        elif name in ("/model", "/mode"):
            self._option(name[1:], rest)
            return
        elif name == "/set":
            option, _, value = rest.partition(" ")
            if option and value.strip():
                self._configure(option, value.strip())
                return
            if option:
                self.screen.note(describe_option(self.session.info if self.session else None, option))
            else:
                self.screen.note("usage: /set OPTION VALUE (/info lists the options)", "31")
        else:
            self.screen.note(f"unknown command {name}; /help lists them (// sends a line starting with /)", "31")
        if not self.turn_running:
            self._show_prompt()

    def _option(self, option: str, value: str) -> None:
        if value:
            self._configure(option, value)
        else:
            self.screen.note(describe_option(self.session.info if self.session else None, option))
            self._show_prompt()

    def _configure(self, option: str, raw: str) -> None:
        assert self.session is not None
        value: Any = {"true": True, "false": False}.get(raw, raw)

        def configured(_value: Any, error: AgentError | None) -> None:
            if error is None:
                self.screen.note(f"{option} = {json.dumps(value)}")
            self._report(_value, error)
            if not self.turn_running:
                self._show_prompt()

        self.session.configure(option, value, configured)

    def _data(self, data: bytes) -> None:
        if self.keys is not None and self.keys.on:
            self._keys(data)
            return
        self.stdin_buffer += data
        if not self.interactive:
            return  # from a pipe, all of stdin is one prompt
        while b"\n" in self.stdin_buffer:
            raw, self.stdin_buffer = self.stdin_buffer.split(b"\n", 1)
            line, self.carry = self.carry + raw.decode("utf-8", "replace"), ""
            self._on_line(line)
            if self.keys is not None and self.keys.on and self.stdin_buffer:
                rest, self.stdin_buffer = self.stdin_buffer, b""
                self._keys(rest)  # typed ahead of a turn that has started meanwhile
                return

    def _keys(self, data: bytes) -> None:
        """Keys typed while a turn runs (``TypeAhead``)."""
        assert self.keys is not None
        for line in self.keys.feed(data):
            if line is None:
                self._eof()
                return
            self._on_line(self.carry + line, during_turn=True)
            self.carry = ""
        self._tick()

    def _eof(self) -> None:
        if not self.interactive:
            self._start_one_turn(self.stdin_buffer.decode("utf-8", "replace").strip())
        else:
            self.screen.fresh_line()
            self._close()

    def _start_one_turn(self, text: str) -> None:
        if self.session is None:
            return
        if not text:
            self.screen.note("nothing to send: stdin was empty")
            self.status = EXIT_USAGE
            self._close()
            return
        self._prompt(text)

    # -- ending --------------------------------------------------------------------------
    def _close(self) -> None:
        if self.session is not None and self.session.state == "open":
            self.session.close(lambda _v, _e: None)
        elif self.session is None:
            self._finish()

    def _finish(self) -> None:
        if not self.finished:
            self.finished = True
            self._sync_keys()
            self.screen.clear_status()
            when_drained(self.screen.out, self.loop.stop)

    def _interrupt(self) -> None:
        """Ctrl-C: cancel the running turn; at the prompt, end the chat (status 130)."""
        if self.session is not None and self.turn_running:
            self.screen.fresh_line()
            self.session.cancel(False, None, self._report)
        else:
            self._signal(signal.SIGINT)

    def _signal(self, signum: int) -> None:
        self.signalled = self.signalled or signum
        self.drain_grace()
        self.screen.fresh_line()
        if self.session is not None:
            self.runtime.close_all()
        else:
            self._finish()

    def _ender(self, signum: int) -> Callable[[], None]:
        return lambda: self._signal(signum)

    def _stdout_gone(self, exc: OSError) -> None:
        if not isinstance(exc, BrokenPipeError):
            log(f"stdout stopped accepting writes: {exc.strerror or exc}")
        self.screen.mute()  # the reader went away: end quietly, no "turn cancelled" after it
        self.status = EXIT_FAILED
        self._close()

    def run(self) -> int:
        def opened(info: Any, error: AgentError | None) -> None:
            if error is not None:
                self._failed(error)
                self._finish()
                return
            if self.interactive:
                self.screen.note(welcome(info, self.directory, terminal_width(), self.mock), "2")
                self._show_prompt()
            Reader(self.loop, 0, self._data, self._eof, 65536).start()

        if self.interactive and os.isatty(0):
            try:
                self.keys = TypeAhead(0)
            except Exception:  # termios.error: not a terminal after all; typing stays the terminal's
                self.keys = None
        # ``opened`` runs when the open completes: at once (the mock, a launch error) or later.
        options: dict[str, Any] = {"agent": self.agent, "dir": self.directory, "permission_mode": "Ask"}
        for field, value in (("tools", self.tools), ("policy", self.policy)):
            if value is not None:
                options[field] = value
        self.loop.add_signal_handler(signal.SIGINT, self._interrupt)
        for signum in (signal.SIGTERM, signal.SIGHUP):
            stop_on_signals(self.loop, self.screen.out, self._ender(signum), (signum,))
        self.runtime.execute("open", options, self, self.scope, opened)
        for session in self.scope.live.values():
            self.session = session
        if self.screen.live:
            self._spin()
        try:
            # Until the session is gone and stdout has taken the answer (or never will).
            self.loop.run(until=lambda: self.finished and (not self.screen.out.queue or self.screen.out.failed))
        finally:
            if self.keys is not None:
                self.keys.set(False)  # the terminal as it was, whatever happened
            self.screen.out.close()
            self.loop.close()
        if self.signalled is not None:
            return 128 + self.signalled
        return self.status

