"""A command sent while its session is still opening (issue 13) is held and answered once the
open is answered, in the order sent: never a false SessionClosed. A session holds at most
runtime.OPENING_QUEUE such commands (one more is SessionBusy, at once); if the open fails,
what it held is SessionClosed, which the session then is.

The slow handshake is the ACP test agent's: ACP_TEST_INIT_GATE makes it answer
``initialize`` only once the test creates the gate file. That the sidecar has read and held
the commands is shown by the reply to a later ``discover`` (one loop reads them in order).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sidecar import ROOT, Sidecar

from agentproto.engine.runtime import OPENING_QUEUE

AGENT = {"acp": {"name": "acp-test", "path": str(ROOT / "tests" / "fakes" / "acp_test_agent.py"), "args": []}}


def open_gated(sc: Sidecar, gate: Path, workdir: Path) -> str:
    """Send an open whose handshake waits for ``gate``; its session id (ids are issued in order)."""
    sc.send({"id": 1, "cmd": "open", "agent": AGENT, "dir": str(workdir), "env": {"ACP_TEST_INIT_GATE": str(gate)}})
    return "s1"


def release(gate: Path, content: str = "") -> None:
    partial = gate.with_suffix(".tmp")
    partial.write_text(content)
    os.replace(partial, gate)  # the agent sees the file whole


def replied(sc: Sidecar) -> list[Any]:
    return [line["id"] for line in sc.seen if "id" in line and ("ok" in line or "error" in line)]


def test_commands_sent_while_opening_run_once_it_is_open_in_order(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with Sidecar() as sc:
        sid = open_gated(sc, gate, tmp_path)
        sc.send({"id": 2, "cmd": "prompt", "session": sid, "text": "chunks"})
        sc.send({"id": 3, "cmd": "info", "session": sid})
        sc.send({"id": 4, "cmd": "discover"})
        assert "ok" in sc.reply(4, timeout=30)
        assert replied(sc) == [4], "the commands on the opening session were answered early"
        release(gate)
        opened = sc.reply(1, timeout=30)
        assert opened["ok"]["id"] == sid
        prompt = sc.reply(2, timeout=30)
        assert prompt["ok"]["kind"] == {"Started": {"turn_id": "t1"}}, prompt
        info = sc.reply(3, timeout=30)
        assert info["ok"]["id"] == sid, info
        assert replied(sc) == [4, 1, 2, 3]
        events = sc.events(sid, timeout=30)
        assert any("TextDelta" in event["kind"] for event in events if isinstance(event["kind"], dict))
        assert sc.ok({"cmd": "close", "session": sid}, timeout=30) is None


def test_a_close_sent_while_opening_closes_it_once_open(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with Sidecar() as sc:
        sid = open_gated(sc, gate, tmp_path)
        sc.send({"id": 2, "cmd": "close", "session": sid})
        sc.send({"id": 3, "cmd": "prompt", "session": sid, "text": "chunks"})
        assert "ok" in sc.reply(sc.send({"cmd": "discover"}), timeout=30)
        release(gate)
        assert "ok" in sc.reply(1, timeout=30)
        assert sc.reply(2, timeout=30) == {"id": 2, "ok": None}
        assert sc.reply(3, timeout=30)["error"]["kind"] == "SessionClosed"
        assert sc.wait_for(lambda line: line.get("closed") == sid, timeout=30)


def test_an_opening_session_holds_a_bounded_number_of_commands(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with Sidecar() as sc:
        sid = open_gated(sc, gate, tmp_path)
        for frame in range(2, OPENING_QUEUE + 3):
            sc.send({"id": frame, "cmd": "info", "session": sid})
        busy = sc.reply(OPENING_QUEUE + 2, timeout=30)
        assert busy["error"]["kind"] == "SessionBusy", busy
        assert replied(sc) == [OPENING_QUEUE + 2]
        release(gate)
        assert "ok" in sc.reply(1, timeout=30)
        for frame in range(2, OPENING_QUEUE + 2):
            assert sc.reply(frame, timeout=30)["ok"]["id"] == sid
        sc.ok({"cmd": "close", "session": sid}, timeout=30)


def test_what_a_failed_open_held_is_session_closed(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with Sidecar() as sc:
        sid = open_gated(sc, gate, tmp_path)
        sc.send({"id": 2, "cmd": "prompt", "session": sid, "text": "chunks"})
        assert "ok" in sc.reply(sc.send({"cmd": "discover"}), timeout=30)
        release(gate, "exit")
        failed = sc.reply(1, timeout=30)
        assert "error" in failed, failed
        held = sc.reply(2, timeout=30)
        assert held["error"]["kind"] == "SessionClosed" and held["error"]["detail"] == sid, held
        assert replied(sc)[-2:] == [1, 2]
