"""ACP fs/* and terminal/* end to end: nothing an agent asks for can block the loop.

``serve`` frames against the SDK-built test agent (tests/fakes/acp_test_agent.py), as in
test_acp.py, whose helpers these tests share.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sidecar import Sidecar, check_line, kind_name
from tests.drivers.acp.test_acp import agent_ref, close, of_kind, open_session, texts, turn
from tests.frontends.test_serve import RawServe


@pytest.fixture
def sidecar():
    with Sidecar() as sc:
        yield sc


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


def test_a_fifo_read_is_refused_while_another_session_streams(workdir: Path) -> None:
    """A FIFO opened for reading blocks until a writer comes: it must cost nobody anything."""
    # Lines checked against agentproto's schema only: the reference schema's check of ~3,000
    # flood lines took this test past 60 s on a loaded machine (the other tests check it).
    with Sidecar(reference=False) as sidecar:
        _fifo_refused_while_another_streams(sidecar, workdir)


def _fifo_refused_while_another_streams(sidecar: Sidecar, workdir: Path) -> None:
    os.mkfifo(workdir / "fifo")
    streaming = open_session(sidecar, workdir)["id"]
    reading = open_session(sidecar, workdir)["id"]
    sidecar.ok({"cmd": "prompt", "session": streaming, "text": "flood 3000"})
    # The bound is the flood's: this test's reader validates every line of both sessions
    # against two JSON schemas (~900 flood lines come first: 1.7 s here, over 20 s under load).
    report = texts(turn(sidecar, reading, "fs fifo", timeout=60)).splitlines()
    assert report[0].startswith("read-error=") and "not a regular file" in report[0], report[0]
    assert report[1] == "write=ok"  # fifo.out, a regular file
    flood = sidecar.events(streaming, "TurnEnded", 60)
    assert texts(flood) == "".join(f"{i} " for i in range(3000))

    def ended(session: str) -> int:
        return next(
            i for i, line in enumerate(sidecar.seen)
            if "event" in line and line["event"]["session_id"] == session
            and kind_name(line["event"]["kind"]) == "TurnEnded"
        )

    assert ended(reading) < ended(streaming), "the other session should still be streaming after the FIFO was refused"
    close(sidecar, reading)
    close(sidecar, streaming)


def test_a_terminal_nobody_reads_is_throttled_and_loses_nothing(workdir: Path) -> None:
    """96 MiB from a terminal while the app reads nothing: the engine pauses the session at
    1024 unwritten events (64 KiB at most each), and the terminal's pipe with it, so the
    command blocks; once the app reads, every byte arrives, in order."""
    total = 1536
    sc = RawServe([])
    try:
        sc.read_until(lambda l: "hello" in l)
        s = sc.reply(sc.send({"cmd": "open", "agent": agent_ref(), "dir": str(workdir)}))["ok"]["id"]
        sc.send({"cmd": "prompt", "session": s, "text": f"bigterm {total}"})
        progress = workdir / "progress"
        written, still_since = 0, time.monotonic()
        deadline = still_since + 90
        while written < total and time.monotonic() < deadline:
            time.sleep(0.1)
            now = int(progress.read_text() or 0) if progress.exists() else 0
            if now != written:
                written, still_since = now, time.monotonic()
            elif written and time.monotonic() - still_since > 1.5:
                break  # blocked on its pipe
        print(f"the terminal wrote {written} of {total} lines while nobody read")
        assert 0 < written < total - 256, f"the terminal wrote {written} of {total} lines while nobody read"
        end = sc.read_until(
            lambda l: "event" in l and l["event"]["session_id"] == s and kind_name(l["event"]["kind"]) == "TurnEnded",
            timeout=120,
        )
        assert end["event"]["kind"]["TurnEnded"]["stop"] == {"Completed": {"source": "Protocol"}}
        events = [l["event"] for l in sc.lines if "event" in l and l["event"]["session_id"] == s]
        assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
        streamed = "".join(d["text"] for d in of_kind(events, "ToolOutputDelta") if d["tool_id"] == "call-big")
        assert len(streamed) == total * 65536 and streamed.count("\n") == total and streamed.count("x") == total * 65535
        assert texts(events).endswith("exit=0")
        assert not any("error" in l or "closed" in l for l in sc.lines)
        for line in sc.lines[::64]:
            check_line(line)
        sc.proc.stdin.close()  # type: ignore[union-attr]
        assert sc.proc.wait(20) == 0
    finally:
        if sc.proc.poll() is None:
            sc.proc.kill()
            sc.proc.wait()
