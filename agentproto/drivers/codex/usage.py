"""Codex's plan usage without a session: a short-lived ``codex app-server`` asked
``account/rateLimits/read`` (what the ChatGPT backend says of the login's rate limits).

Rules of this file:
- One process per read, started through the runtime's ``spawn`` (its transport factory:
  replay's starts nothing), with the session's environment and ``config_home``
  (``app_server_env``, which the session's open uses too) and no thread.
- After ``initialize``, ``account/read`` and ``account/rateLimits/read`` go together: the
  rate limits are the answer (``plan_usage_of``), and when Codex refuses them the login
  ``account/read`` reported types the error (``plan_usage_error``). Both mappings are pure
  functions (tested alone, with the shapes 0.171.0 answers); only what Codex gives is
  mapped, nothing is made up: ``reset_credits`` is filled from ``rateLimitResetCredits``
  only when Codex reports the login's banked resets (how many, and the first to expire), null
  otherwise.
- The read is bounded: past ``AGENTPROTO_CODEX_PLAN_USAGE_SECS`` (default
  ``PLAN_USAGE_TIMEOUT``) from the start, the process group is killed and the answer is
  HandshakeTimeout. Once the outcome is known Codex's input is closed (it exits; after
  ``CLOSE_GRACE`` seconds its group is killed).
- ``done`` is called exactly once, when the process (and its whole group) is gone: a
  caller that got its answer has nothing left running. Codex exiting before it answered
  is ProcessExited with its stderr's tail.
"""

from __future__ import annotations

import math
import os
import re
import time

from agentproto.core.errors import AgentError, Kind
from agentproto.core.jsonrpc import METHOD_NOT_FOUND, Peer, Request, RpcError
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.core.wire import decode_json_line
from agentproto.drivers.codex.mapping import LOGIN, auth_status
from agentproto.drivers.fields import number, obj, objects, opt_integer, opt_text
from agentproto.loopio import private

if TYPE_CHECKING:
    from typing import Any, Callable

    from agentproto.core.wire_types import PlanUsage, ResetCredits, SystemTime, UsageWindow
    from agentproto.drivers.base import Launch, PlanUsageDone
    from agentproto.drivers.codex.types import AccountReply
    from agentproto.loopio.loop import Loop, Timer
    from agentproto.loopio.transport import LineTransport, Spawner

CLIENT_INFO = {"name": "agentproto", "title": "agentproto", "version": "0.1"}
CAPABILITIES = {"experimentalApi": True, "requestAttestation": False}
#: How long one plan-usage read may take, in seconds (AGENTPROTO_CODEX_PLAN_USAGE_SECS
#: overrides it): below plan_usage_all's default agent_timeout, so Codex's own answer wins.
PLAN_USAGE_TIMEOUT = 20.0
CLOSE_GRACE = 3.0


# -- what Codex answers, mapped (pure) ----------------------------------------------

#: Codex's rate-limit windows by length in minutes, named as anyagent's UsageWindow labels
#: them; a window of another length is labelled by its length ("1h", "30 days").
WINDOW_LABELS = {300: "Session", 10080: "Week"}
#: The largest counts the PlanUsage fields take (``used_percent`` is a uint8, ``available``
#: a uint32): a larger figure from Codex is clamped, a negative one is 0.
MAX_PERCENT = 255
MAX_CREDITS = 2**32 - 1


def window_label(minutes: int | None, slot: str) -> str:
    """A window's label from its length in minutes; without one, its slot ("Primary")."""
    if minutes is None or minutes <= 0:
        return slot
    if minutes in WINDOW_LABELS:
        return WINDOW_LABELS[minutes]
    if minutes % 1440 == 0:
        return "Day" if minutes == 1440 else f"{minutes // 1440} days"
    if minutes % 60 == 0:
        return f"{minutes // 60}h"
    return f"{minutes} min"


def system_time(seconds: Any) -> SystemTime | None:
    """Unix seconds as a SystemTime; None when Codex gave none (or not a time)."""
    secs = opt_integer(seconds)
    return None if secs is None or secs < 0 else {"secs_since_epoch": secs, "nanos_since_epoch": 0}


def _windows(bucket: Any, name: str | None) -> list[UsageWindow]:
    windows: list[UsageWindow] = []
    for slot, fallback in (("primary", "Primary"), ("secondary", "Secondary")):
        window = bucket.get(slot)
        if not isinstance(window, dict):
            continue
        used = number(window.get("usedPercent"))
        if used is None or not math.isfinite(used):
            continue
        label = window_label(opt_integer(window.get("windowDurationMins")), fallback)
        windows.append(
            {
                "label": f"{name} {label}" if name else label,
                "used_percent": max(0, min(MAX_PERCENT, round(used))),
                "resets_at": system_time(window.get("resetsAt")),
            }
        )
    return windows


def _reset_credits(summary: Any) -> ResetCredits | None:
    """``rateLimitResetCredits``: how many are available, and when the first available
    one to expire does (only when Codex listed them: it fetches the list separately)."""
    if not isinstance(summary, dict):
        return None
    available = opt_integer(summary.get("availableCount"))
    if available is None:
        return None
    expiries = [
        c["expiresAt"]
        for c in objects(summary.get("credits"))
        if c.get("status") == "available" and opt_integer(c.get("expiresAt")) is not None
    ]
    return {
        "available": max(0, min(MAX_CREDITS, available)),
        "next_expires_at": system_time(min(expiries)) if expiries else None,
    }


def plan_usage_of(result: Any, fetched_ns: int) -> PlanUsage:
    """PlanUsage from ``account/rateLimits/read``'s result, fetched at ``fetched_ns`` (the
    wall clock, in nanoseconds). The main bucket (``rateLimits``) gives the plan and its
    windows ("Session", "Week"); every other bucket of ``rateLimitsByLimitId`` (a model's
    own limit) adds its windows, labelled with its name, in the order of their ids."""
    main = obj(result.get("rateLimits"))
    windows = _windows(main, None)
    main_id = opt_text(main.get("limitId")) or "codex"
    buckets = obj(result.get("rateLimitsByLimitId"))
    for limit_id in sorted(buckets):
        bucket = buckets[limit_id]
        if limit_id != main_id and isinstance(bucket, dict):
            windows += _windows(bucket, opt_text(bucket.get("limitName")) or limit_id)
    plan = opt_text(main.get("planType"))
    return {
        "plan": None if plan == "unknown" else plan,
        "windows": windows,
        "reset_credits": _reset_credits(result.get("rateLimitResetCredits")),
        "fetched_at": {"secs_since_epoch": fetched_ns // 10**9, "nanos_since_epoch": fetched_ns % 10**9},
    }


def plan_usage_error(message: str, account_reply: AccountReply | None, env: dict[str, str]) -> AgentError:
    """Why ``account/rateLimits/read`` failed (its error ``message``).

    Codex refuses before asking its backend when the login has no ChatGPT token
    ("... authentication required to read rate limits"): then the login ``account/read`` reported
    types it (None when that failed too: Codex's words do). No login at all is
    AuthRequired; an API key, a cloud provider or a custom model provider is
    UnsupportedFeature (only a ChatGPT plan has rate limits to read). Otherwise the backend
    failed a ChatGPT login: a 401 is AuthRequired (log in again), anything else
    ProtocolFailed with Codex's message."""
    if "authentication required" in message.lower():
        if account_reply is not None:
            status = auth_status(account_reply, env)
            signed_out = isinstance(status, dict) and "Unauthenticated" in status
        else:
            signed_out = "chatgpt authentication" not in message.lower()
        if signed_out:
            return AgentError.auth_required(
                "Codex is not logged in: plan usage needs a ChatGPT login (`codex login`)", LOGIN
            )
        return AgentError.detail(
            Kind.UNSUPPORTED_FEATURE, "plan usage needs a ChatGPT login (Codex is not signed in with ChatGPT)"
        )
    if re.search(r"\b401\b", message):
        return AgentError.auth_required(f"Codex's ChatGPT login was refused: {message}", LOGIN)
    return AgentError.protocol_failed(f"account/rateLimits/read: {message}")


# -- the read -----------------------------------------------------------------------


def app_server_env(launch: Launch) -> dict[str, str]:
    """``codex app-server``'s environment: the session's, with ``CODEX_HOME`` set to its
    ``config_home`` (made 0700: it will hold auth.json). SpawnFailed if it cannot be made."""
    env = launch.child_env()
    if launch.config_home:
        home = os.path.abspath(os.path.expanduser(launch.config_home))
        try:
            private.check_confined(home, "config_home")  # replay makes nothing outside its own
            os.makedirs(home, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise AgentError.detail(Kind.SPAWN_FAILED, f"cannot create config_home {home}: {exc}") from None
        env["CODEX_HOME"] = home
    return env


def timeout_of(env: dict[str, str]) -> float:
    try:
        seconds = float(env.get("AGENTPROTO_CODEX_PLAN_USAGE_SECS") or PLAN_USAGE_TIMEOUT)
    except ValueError:
        return PLAN_USAGE_TIMEOUT
    return seconds if seconds > 0 else PLAN_USAGE_TIMEOUT


class PlanUsageRead:
    """One read of the login's plan usage (see the rules above)."""

    def __init__(self, loop: Loop, launch: Launch, spawn: Spawner, done: PlanUsageDone) -> None:
        self.loop = loop
        self.launch = launch
        self._spawn = spawn
        self._done = done
        self.rpc = Peer(version_member=False)
        self.transport: LineTransport | None = None
        self._timer: Timer | None = None
        self._env: dict[str, str] = {}
        #: account/read's result (None: not answered, or failed), and whether it answered.
        self._account: AccountReply | None = None
        self._account_answered = False
        #: account/rateLimits/read's answer, once it came.
        self._limits: tuple[Any, RpcError | None] | None = None
        #: The answer, once known; given to ``done`` when the process is gone.
        self._outcome: tuple[Any, AgentError | None] | None = None
        self._answered = False

    def start(self) -> None:
        """Start Codex and ask; raises SpawnFailed when it cannot start."""
        from agentproto.loopio.transport import Spawn

        launch = self.launch
        self._env = app_server_env(launch)
        argv = [launch.executable, "app-server", *launch.args]
        spawn = Spawn(
            argv=argv, cwd=launch.dir, env=self._env, on_line=self._line, on_exit=self._exited, wait_group=True
        )
        try:
            self.transport = self._spawn(spawn)
        except OSError as exc:
            raise AgentError.detail(Kind.SPAWN_FAILED, f"{argv[0]}: {exc.strerror or exc}") from None
        seconds = timeout_of(self._env)
        self._timer = self.loop.call_later(seconds, lambda: self._expired(seconds))
        self._request("initialize", {"clientInfo": CLIENT_INFO, "capabilities": CAPABILITIES}, self._initialized)

    # -- the conversation -------------------------------------------------------------

    def _request(self, method: str, params: Any, callback: Callable[[Any, RpcError | None], None]) -> None:
        if self.transport is not None and self._outcome is None:
            self.transport.write_json(self.rpc.request(method, params, callback))

    def _initialized(self, result: Any, error: RpcError | None) -> None:
        if error is not None:
            self._settle(None, AgentError.protocol_failed(f"initialize: {error.message}"))
            return
        if self.transport is not None:
            self.transport.write_json(self.rpc.notification("initialized"))
        self._request("account/read", {"refreshToken": False}, self._account_read)
        self._request("account/rateLimits/read", None, self._limits_read)

    def _account_read(self, result: AccountReply | None, error: RpcError | None) -> None:
        self._account = result if error is None and isinstance(result, dict) else None
        self._account_answered = True
        self._decide()

    def _limits_read(self, result: Any, error: RpcError | None) -> None:
        self._limits = (result, error)
        self._decide()

    def _decide(self) -> None:
        if self._limits is None:
            return
        result, error = self._limits
        if error is None:
            if isinstance(result, dict):
                self._settle(plan_usage_of(result, time.time_ns()), None)
            else:
                self._settle(None, AgentError.protocol_failed("account/rateLimits/read: its result is not an object"))
        elif self._account_answered or "authentication required" not in error.message.lower():
            # A refusal before the backend was asked is typed by the login account/read saw.
            self._settle(None, plan_usage_error(error.message, self._account, self._env))

    def _line(self, line: bytes) -> None:
        try:
            message = decode_json_line(line)
        except ValueError:
            return  # not JSON: nothing to answer (a warning Codex printed on stdout)
        try:
            kind = self.rpc.receive(message)  # a response runs its callback here
            if isinstance(kind, Request) and self.transport is not None:
                # Codex asks nothing of a client that starts no thread: say so, never hang it.
                why = RpcError(METHOD_NOT_FOUND, f"{kind.method}: agentproto only reads the plan usage here")
                self.transport.write_json(self.rpc.error(kind.id, why))
        except Exception:  # a bug of ours costs this read only, answered as such
            self._settle(None, AgentError.internal("codex plan usage"))

    # -- the end ----------------------------------------------------------------------

    def _settle(self, value: Any, error: AgentError | None) -> None:
        """The answer is known: keep it, and end Codex (its exit gives the answer)."""
        if self._outcome is not None:
            return
        self._outcome = (value, error)
        if self._timer is not None:
            self._timer.cancel()
        if self.transport is not None:
            self.transport.shutdown(CLOSE_GRACE)

    def _expired(self, seconds: float) -> None:
        if self._outcome is None:
            why = f"codex app-server did not answer account/rateLimits/read within {seconds:g} s"
            self._outcome = (None, AgentError.detail(Kind.HANDSHAKE_TIMEOUT, why))
        if self.transport is not None:
            self.transport.kill()

    def _exited(self, status: str | None, stderr: str) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._answered:
            return
        self._answered = True
        value, error = self._outcome or (None, AgentError.process_exited(status, stderr))
        self._done(value, error)
