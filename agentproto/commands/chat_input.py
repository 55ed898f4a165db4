"""``agentproto chat``'s input: the agent's requests asked and answered at the terminal, and
the keys typed while a turn runs. Split off chat.py for size: ``Asking`` is part of its
``Chat`` and follows its rules.

Rules of this file:
- What is typed while a turn runs (``TypeAhead``) is read key by key with the terminal's
  echo and line editing off (ISIG kept: Ctrl-C still interrupts), so it neither lands on
  the status line nor glues onto the answer: it shows at the end of the status line (when
  the terminal echoed), and the line, once entered, in the transcript. The terminal's own
  modes come back when the turn ends, a question is asked, and always at exit (``Chat.run``).
- From a pipe nobody can answer: a permission is denied, a question cancelled, a tool call
  given an error result, each said on stderr; a hook always gets the neutral answer.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agentproto.commands.chat_screen import (
    app_answer,
    choices_named,
    permission_answer,
    permission_keys,
    permission_words,
    question_words,
)

if TYPE_CHECKING:
    from agentproto.commands.chat_screen import Screen
    from agentproto.core.errors import AgentError
    from agentproto.engine.session import EngineSession
    from agentproto.loopio.loop import Loop


class TypeAhead:
    """The keys typed while a turn runs, on a terminal (stdin's descriptor ``fd``): ``set(True)``
    turns the terminal's line editing and echo off (signals stay: Ctrl-C is SIGINT), ``feed``
    edits the line as the terminal would (Backspace, Ctrl-U, Ctrl-W; escape sequences such
    as the arrows are dropped) and returns the lines entered, ``set(False)`` puts back the
    terminal's own modes, which ``run`` also does at exit, whatever happens."""

    def __init__(self, fd: int) -> None:
        import codecs
        import termios  # only an interactive chat on a terminal needs it

        self.fd = fd
        self.saved = termios.tcgetattr(fd)
        #: Whether the terminal echoed what was typed (the typing is shown then).
        self.echo = bool(self.saved[3] & termios.ECHO)
        self.on = False
        self.line = ""
        self._escape = False
        self._after_cr = False
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def set(self, on: bool) -> None:
        if on == self.on:
            return
        import termios

        attrs = [*self.saved]
        if on:
            attrs[3] = self.saved[3] & ~(termios.ICANON | termios.ECHO)
            cc = list(self.saved[6])
            cc[termios.VMIN], cc[termios.VTIME] = 1, 0
            attrs[6] = cc
        try:
            termios.tcsetattr(self.fd, termios.TCSANOW, attrs)
        except (termios.error, OSError):
            return  # the terminal is gone: nothing to set, or to put back
        self.on = on

    def take(self) -> str:
        """The line typed so far (not entered), taken out."""
        line, self.line = self.line, ""
        return line

    def feed(self, data: bytes) -> list[str | None]:
        """Keys in; the lines they entered (None: Ctrl-D on an empty line, the end of input)."""
        entered: list[str | None] = []
        for char in self._decoder.decode(data):
            after_cr, self._after_cr = self._after_cr, char == "\r"
            if self._escape:
                self._escape = not (char.isalpha() or char == "~")
            elif char == "\x1b":
                self._escape = True
            elif char == "\n" and after_cr:
                continue  # CR LF: one Enter
            elif char in "\r\n":
                entered.append(self.take())
            elif char in "\x7f\x08":
                self.line = self.line[:-1]
            elif char == "\x15":  # Ctrl-U
                self.line = ""
            elif char == "\x17":  # Ctrl-W
                kept = self.line.rstrip()
                self.line = kept[: len(kept) - len(kept.split(" ")[-1])]
            elif char == "\x04":  # Ctrl-D
                if not self.line:
                    entered.append(None)
            elif char == "\t" or char >= " ":
                self.line += char
        return entered


class Asking:
    """The ``Chat``'s requests and typed-ahead keys (chat.py sets what is declared here)."""

    loop: Loop
    screen: Screen
    session: EngineSession | None
    interactive: bool
    turn_running: bool
    finished: bool
    pending: list[dict[str, Any]]
    answers: list[dict[str, Any]]
    keys: TypeAhead | None
    carry: str

    def _sync_keys(self) -> None:
        """Key by key while a turn runs and asks nothing; the terminal's own modes otherwise."""
        if self.keys is not None:
            self.keys.set(self.turn_running and not self.pending and not self.finished)

    def _carry_typing(self) -> None:
        """A line begun while the turn ran, not entered yet: shown after the prompt (or the
        question) now asked, and the start of the line typed next."""
        if self.keys is not None and self.keys.line:
            self.carry += self.keys.take()
            if self.keys.echo:
                self.screen.stream(self.carry)

    # -- requests ------------------------------------------------------------------------
    def _ask(self) -> None:
        if not self.pending:
            return
        request = self.pending[0]
        if "ToolCall" in request or "Hook" in request:
            self._ask_app(request)
            return
        if "Permission" in request:
            words, nobody = permission_words(request["Permission"]), ("n (no terminal to ask)", "n")
        else:
            words = question_words(request["Question"]["questions"][len(self.answers)])
            nobody = ("(no terminal to ask: cancelled)", "")
        question, details, how = words  # details: what would run, or a question's choices
        self.screen.note(question, "33")
        if details is not None:
            self.screen.note(details)
        self._sync_keys()
        self.screen.ask(how)
        self._carry_typing()
        if not self.interactive:
            self._nobody(*nobody)

    def _nobody(self, said: str, line: str) -> None:
        """From a pipe nobody can answer: say what was answered, then answer it (next tick:
        the agent is still between asking and waiting)."""
        self.screen.stream(said + "\n")
        self.loop.call_soon(lambda: self._answer_line(line))

    def _ask_app(self, request: dict[str, Any]) -> None:
        if "Hook" in request:
            self.screen.note(f"[hook {request['Hook']['event']}] (neutral answer)", "36")
            self.loop.call_soon(lambda: self._answer_line(""))
            return
        call = request["ToolCall"]
        self._sync_keys()
        self.screen.ask(f"Tool {call['tool']}({json.dumps(call['arguments'])}): its result? ")
        self._carry_typing()
        if not self.interactive:
            self._nobody("(no terminal to ask: an error result)", "")

    def _answer_line(self, line: str) -> None:
        if not self.pending or self.session is None:
            return
        request = self.pending[0]
        request_id = next(iter(request.values()))["id"]
        if "ToolCall" in request or "Hook" in request:
            answer: Any = app_answer(request, line, self.interactive)
        elif "Permission" in request:
            answer = permission_answer(request["Permission"]["options"], line)
            if answer is None:
                self.screen.ask(f"answer {permission_keys(request['Permission']['options'])}: ")
                return
        else:
            answer = self._question_answer(request["Question"], line)
            if answer is None:
                return  # asked the next question, or asked again
        self.pending.pop(0)
        self.answers = []
        self.session.answer(request_id, answer, self._report)
        self._ask()

    def _question_answer(self, body: dict[str, Any], line: str) -> Any:
        """The Question answer once every question has one; None while asking on."""
        text = line.strip()
        if not text:
            return "Cancel"
        q = body["questions"][len(self.answers)]
        picked = choices_named(q, text)
        if picked:
            self.answers.append({"Choices": picked})
        elif q["allows_free_text"]:
            self.answers.append({"Text": text})
        else:
            self.screen.note(f"not one of the choices: {text}", "31")
            self._ask()
            return None
        if len(self.answers) < len(body["questions"]):
            self._ask()
            return None
        return {"Question": self.answers}

    def _report(self, _value: Any, error: AgentError | None) -> None:
        if error is not None:
            self.screen.note(f"{error.kind}: {error.message}", "31")
