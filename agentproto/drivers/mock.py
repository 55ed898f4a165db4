"""The mock agent (id ``mock``): plays anyagent's mock-script format through the seam.

Without a script it is an echo agent: each prompt streams back word by word and the turn
ends. With ``serve --mock SCRIPT`` every session plays the script from its first turn
(see shared/specs/mock-script-format.md). The scripts in agentproto/mock_scripts/ ship with
the package (wheel, zipapp, vendored and installed copies; fixtures/mock-scripts links to
them): ``--mock NAME`` plays one by name (drivers/mock_shipped.py).

The mock runs inside the event loop instead of a child process, but it honours the same
seam as process drivers: it acknowledges turns, reports ends, and stops producing while
the engine has paused its output (flow control), resuming when the app catches up.

Beyond anyagent's format, a ``{"CallTool": {"tool", "arguments"}}`` step calls one of the
app's tools as a real agent does: over HTTP, through the session's listener (MCP
initialize, notifications/initialized, tools/call with the session id), on the loop; the
turn waits for the result, which comes back as the output of a ``ToolUpdated``. The
script's ``hook_events`` are the hook events the mock lets an app open it with (the
listener's hook endpoint delivers them), and a ``{"Hook": {"event", "input"}}`` step fires one
as an agent whose hooks are commands does: it POSTs ``input`` (default ``{}``) to the
session's hook URL for ``event`` (one of ``hook_events``) on the loop and the turn waits for
the answer (the app's ``HookResult``, or ``{}``); a session whose app did not ask for that
hook skips the step, as an agent runs only the hooks it was given.

A script's ``plan_usage`` (agentproto's field) is what ``plan_usage`` answers, and the mock
then lists the ``PlanUsage`` feature; without one it is UnsupportedFeature, as anyagent's.

A ``UsageReport`` step reports the turn's usage so far (``Host.spent``: budgets count it), a
``RateLimit`` step fails the turn as an API's 429 with its reset (drivers/ratelimits.py);
with ``end: false`` it only reports the limit, with ``exit: true`` the mock then dies (as
``Die``). With ``resumable`` (agentproto's field; anyagent's ``resume`` refuses every resume)
the mock reports the resume token ``mock-SESSION`` and can be opened by it: that mock goes
on with the script's turns where the session left them (HISTORY, in the sidecar's memory).
Scripts are loaded and checked in mock_script.py.

A ``Sleep`` step, an ``AwaitAnswer``, a tool call or a hook in flight belong to their turn:
a cancel (or the session's end) ends them at once, and the next turn starts at its first step.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any, Callable

from agentproto.core.errors import AgentError, Kind
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.drivers.base import APP_SERVER, Driver, Host, Launch, Lifecycle
from agentproto.drivers.mock_script import SCRIPT_FIELDS as SCRIPT_FIELDS
from agentproto.drivers.mock_script import ScriptError as ScriptError
from agentproto.drivers.mock_script import load_script as load_script
from agentproto.loopio.loop import Alarm, Loop, Soon

if TYPE_CHECKING:
    from agentproto.core.wire_types import AgentDetails, AgentRequest, JsonObject, ToolUpdate, TurnUsage
    from agentproto.drivers.base import PlanUsageDone
    from agentproto.loopio.transport import Spawner

STEPS_PER_TICK = 256
#: A resumable script's sessions (resume token -> how many of its turns were played), as a
#: real agent keeps its sessions on disk: a mock resumed by that token goes on from there.
#: The oldest are forgotten past MAX_HISTORY.
HISTORY: dict[str, int] = {}
MAX_HISTORY = 4096

#: The mock's lifecycle (``Lifecycle``): new -> open (``open``) -> gone (close, kill, or
#: the script's ``Die``, the agent's). A refused open stays new. A close or kill of a
#: gone mock changes nothing.
LIFECYCLE: dict[str, dict[str, str]] = {
    "new": {"open": "open", "close": "gone", "kill": "gone"},
    "open": {"close": "gone", "kill": "gone", "die": "gone"},
    "gone": {"close": "gone", "kill": "gone"},
}
AGENT_EVENTS = frozenset({"die"})


class MockDriver(Driver):
    #: The mock calls the app's tools through the listener (CallTool steps).
    app_tools = True

    def __init__(self, host: Host, launch: Launch) -> None:
        super().__init__(host, launch)
        base = launch.mock_script
        self.echo = base is None
        self.script: dict[str, Any] = json.loads(json.dumps(base)) if base is not None else dict(SCRIPT_FIELDS)
        self.turns: deque[list[Any]] = deque(self.script["turns"])
        self.steps: deque[Any] = deque()
        self.turn_open = False
        self.awaiting = False
        self.paused = False
        self.sleep = Alarm(host.loop, self._schedule)  # a Sleep step: armed while it lasts
        self.player = Soon(host.loop, self._play)
        self.usage: TurnUsage | None = None
        self.cost: float | None = None  # the turn's cost so far, when UsageReport steps give one
        #: Answers that arrived before the script reached its AwaitAnswer (the app, or the
        #: engine's auto-approval, can be quicker than the player between two ticks).
        self.early_answers = 0
        self.life = Lifecycle("mock", LIFECYCLE, AGENT_EVENTS, "new")
        self.turn_count = 0
        self.hook_events = frozenset(self.script["hook_events"])
        #: The MCP client of the app's tools (created by the first CallTool), the call in
        #: flight (the turn waits for it), and how many calls were made.
        self.mcp: Any = None
        self.calling: object | None = None
        self.calls = 0
        #: A resumable script's resume token (its session's key in HISTORY).
        self.token: str | None = None

    # -- facts --------------------------------------------------------------------------
    def details(self) -> AgentDetails:
        script = self.script
        features = ["Questions"]
        for flag, feature in (
            ("permissions", "Permissions"),
            ("steer", "Steer"),
            ("compact", "Compact"),
            ("resume", "Resume"),
            ("rollback", "Rollback"),
        ):
            if script[flag] or flag == "resume" and script["resumable"]:
                features.append(feature)
        if script.get("plan_usage") is not None:
            features.append("PlanUsage")
        return {
            "version": "mock",
            "auth": {"Authenticated": {"kind": "ApiKey", "account": None}},
            "capabilities": {"features": features, "mcp_transports": []},
            "config_options": json.loads(json.dumps(script["options"])),
            "commands": [],
        }

    @classmethod
    def plan_usage(cls, loop: Loop, launch: Launch, spawn: Spawner, done: PlanUsageDone) -> None:
        """The script's ``plan_usage`` (its ``fetched_at`` now when left out), answered on the
        next tick as an agent's would be; without one, UnsupportedFeature (anyagent's mock)."""
        usage = (launch.mock_script or {}).get("plan_usage")
        if usage is None:
            raise AgentError.detail(Kind.UNSUPPORTED_FEATURE, "plan usage")
        answer = json.loads(json.dumps(usage))
        if "fetched_at" not in answer:
            import time  # only a script with a plan_usage needs the wall clock

            nanos = time.time_ns()
            answer["fetched_at"] = {"secs_since_epoch": nanos // 10**9, "nanos_since_epoch": nanos % 10**9}
        loop.call_soon(lambda: done(answer, None))

    def deterministic(self, origin: Any) -> bool:
        return bool(self.script["deterministic_agent" if origin == "Agent" else "deterministic"])

    # -- lifecycle ------------------------------------------------------------------------
    def open(self) -> None:
        launch = self.launch
        if self.script["echo_options"]:
            facts = {
                "executable_path": launch.executable,
                "source": launch.installation.get("source"),
                "cwd": launch.dir,
                "throwaway": launch.throwaway,
                "instructions": launch.instructions,
                "env": launch.env,
                "args": launch.args,
                "config_home": launch.config_home,
                "record_wire": launch.record_wire,
            }
            raise AgentError(Kind.INVALID_REQUEST, json.dumps(facts), detail=json.dumps(facts))
        token = "mock-token" if self.script["resume"] else None
        if self.script["resumable"]:
            token = launch.resume or f"mock-{self.host.session_id}"
            if launch.resume:
                if token not in HISTORY:
                    raise AgentError.detail(Kind.RESUME_FAILED, f"the mock has no session {token}")
                for _ in range(min(HISTORY[token], len(self.turns))):
                    self.turns.popleft()  # what that session played already
            else:
                HISTORY[token] = 0
            self.token = token
        elif self.script["resume"] and launch.resume:
            raise AgentError.detail(Kind.RESUME_FAILED, "the mock keeps no history")
        self.life.move("open")
        self.host.opened(self.details(), resume_token=token)

    @property
    def gone(self) -> bool:
        return self.life.state == "gone"

    def close(self) -> None:
        if self.script["ignore_close"]:
            return
        self._stop("close")

    def kill(self) -> None:
        self._stop("kill")

    def _stop(self, event: str, failure: AgentError | None = None) -> None:
        """Gone: no step plays again; the failure (a Die step's) is reported before closed."""
        if self.life.move(event) == "gone":
            return
        self.steps.clear()
        self.sleep.cancel()
        if failure is not None:
            self.host.fail(failure)
        self.host.loop.call_soon(self.host.closed)

    # -- turns ----------------------------------------------------------------------------
    def start_turn(self, turn_id: str, text: str, attachments: list[str]) -> None:
        if self.gone:
            return
        stale = self.script["stale_before_ack"]
        if stale is not None:
            self.host.emit(stale)
        self.host.turn_acknowledged()
        self.turn_count += 1
        if self.echo:
            message = f"m{self.turn_count}"
            words = text.split(" ")
            steps: list[Any] = [
                {"Emit": {"TextDelta": {"message_id": message, "text": w if i == 0 else " " + w}}}
                for i, w in enumerate(words)
            ]
            steps.append({"End": {"Completed": {"source": "Protocol"}}})
        else:
            steps = list(self.turns.popleft()) if self.turns else []
            if self.token is not None:  # resumable: its history outlives this "process"
                HISTORY[self.token] = len(self.script["turns"]) - len(self.turns)
                while len(HISTORY) > MAX_HISTORY:
                    del HISTORY[next(iter(HISTORY))]
        if self.script["echo_input"]:
            echoed = json.dumps({"text": text, "attachments": attachments})
            steps.insert(0, {"Emit": {"TextDelta": {"message_id": "echo", "text": echoed}}})
        self.steps = deque(steps)
        self.usage = self.cost = None
        self.turn_open = True
        self.calling = None
        self.awaiting = False
        self.early_answers = 0
        self._schedule()

    def steer(self, text: str, attachments: list[str], done: Callable[[bool], None]) -> None:
        if not self.script["steer_ack"]:
            return
        done(not self.script["steer_rejects"])

    def answer(self, request: AgentRequest, answer: Any) -> None:
        if self.awaiting:
            self.awaiting = False
            self._schedule()
        elif self.turn_open:
            self.early_answers += 1

    def cancel(self) -> None:
        if not self.turn_open:
            return
        self.steps.clear()
        self.sleep.cancel()  # the next turn must not wait out this one's Sleep
        self.awaiting = False
        self.calling = None
        self.early_answers = 0
        self.turn_open = False
        self.usage = None
        self.host.end_turn("Cancelled")

    def configure(self, option: str, value: Any, done: Callable[[AgentError | None], None]) -> None:
        done(None)

    def rollback(self, turns: int, scope: str, done: Callable[[AgentError | None, str | None], None]) -> None:
        done(None, self.script["rollback_refusal"])

    def compact(self) -> None:
        self.host.emit("ContextCompacted")
        self.host.end_turn({"Completed": {"source": "Protocol"}})

    def pause_output(self) -> None:
        self.paused = True

    def resume_output(self) -> None:
        self.paused = False
        self._schedule()

    # -- playing --------------------------------------------------------------------------
    def _schedule(self) -> None:
        if not self.gone:
            self.player.request()

    def _play(self) -> None:
        host = self.host
        steps = self.steps
        budget = STEPS_PER_TICK
        while steps and not (self.paused or self.awaiting or self.sleep.armed or self.gone or self.calling):
            if budget == 0:
                self._schedule()
                return
            budget -= 1
            step = steps.popleft()
            if isinstance(step, str):
                if step == "AwaitAnswer":
                    if self.early_answers:
                        self.early_answers -= 1
                    else:
                        self.awaiting = True
                else:  # Die
                    self._stop("die", AgentError.process_exited("9", "mock died"))
                continue
            (tag, body), = step.items()
            if tag == "Emit":
                host.emit(body)
            elif tag == "End":
                self.turn_open = False
                usage, self.usage = self.usage, None
                host.end_turn(body, usage)
            elif tag == "Usage":
                usage_step: TurnUsage = body  # a Usage step's body (load_script checked it)
                self.usage = {**usage_step}
            elif tag == "UsageReport":
                self._report(body)
            elif tag == "RateLimit":  # the API's 429: the turn fails, saying when it resets
                from agentproto.drivers import ratelimits

                delay = body.get("retry_after_ms")
                message = body.get("message", "429 Too Many Requests")
                ratelimits.report(host, message, ratelimits.after(None if delay is None else delay / 1000))
                if body.get("end", True):
                    steps.clear()
                    self.turn_open = False
                    usage, self.usage = self.usage, None
                    host.end_turn({"Failed": {"message": f"rate limited: {message}"}}, usage)
                if body.get("exit", False):  # a CLI that exits on its rate limit
                    self._stop("die", AgentError.process_exited("9", "mock died"))
            elif tag == "Sleep":
                self.sleep.set(body / 1000.0)
            elif tag == "Repeat":
                times = body["times"]
                if times > 0:
                    steps.appendleft({"Repeat": {"times": times - 1, "steps": body["steps"]}})
                    steps.extendleft(reversed(body["steps"]))
            elif tag == "Nested":
                host.emit(body[1], parent_tool_id=body[0])
            elif tag == "CallTool":
                self._call_tool(body["tool"], body.get("arguments", {}))
            elif tag == "Hook":
                self._fire_hook(body["event"], body.get("input", {}))

    def _report(self, body: dict[str, Any]) -> None:
        """A running usage report: this one adds to the turn's (what the turn ends with too)."""
        usage = self.usage or {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}
        for key in ("input_tokens", "cached_input_tokens", "output_tokens"):
            usage[key] += body.get(key, 0)
        self.usage = usage
        self.cost = (self.cost or 0.0) + body["cost_usd"] if "cost_usd" in body else self.cost
        self.host.spent({**usage}, self.cost)

    # -- the app's tools: called as a real agent calls them, over HTTP --------------------
    def _call_tool(self, name: str, arguments: JsonObject) -> None:
        from agentproto.tools.mcp_client import McpHttpClient, result_text  # only scripts that call tools need it

        self.calls += 1
        tool: ToolUpdate = {
            "id": f"calltool-{self.calls}",
            "kind": {"Mcp": {"server": APP_SERVER, "tool": name}},
            "title": name,
            "status": "Running",
            "input": {"Text": json.dumps(arguments)},
            "output": None,
            "diffs": [],
            "locations": [],
            "raw": {"name": f"mcp__{APP_SERVER}__{name}", "input": arguments},
        }
        self.host.emit({"ToolUpdated": tool})
        url = self.host.tools_url
        if url is None:
            self.host.emit({"ToolUpdated": {**tool, "status": "Failed", "output": "the session has no tools"}})
            return
        if self.mcp is None:
            self.mcp = McpHttpClient(self.host.loop, url)
        self.calling = call = object()  # this call, until the turn ends or is cancelled

        def done(result: Any, why: str | None) -> None:
            if self.calling is not call or self.gone:
                return  # the turn it belonged to is over
            self.calling = None
            failed = why is not None or (isinstance(result, dict) and result.get("isError") is True)
            output = why if why is not None else result_text(result)
            self.host.emit({"ToolUpdated": {**tool, "status": "Failed" if failed else "Completed", "output": output}})
            self._schedule()

        self.mcp.call_tool(name, arguments, done)

    # -- the app's hooks: fired as an agent whose hooks are commands fires them, over HTTP ----
    def _fire_hook(self, event: str, hook_input: JsonObject) -> None:
        url = self.host.hook_url(event)
        if url is None:
            return  # the app did not ask for this hook: an agent runs only those it was given
        from agentproto.tools.mcp_client import McpHttpClient  # only scripts that fire hooks need it

        self.calling = call = object()  # the turn waits for the answer, as for a tool call

        def done(response: Any, why: str | None) -> None:
            if self.calling is not call or self.gone:
                return  # the turn it belonged to is over
            self.calling = None
            self._schedule()

        McpHttpClient(self.host.loop, url).post(json.dumps(hook_input).encode(), done)
