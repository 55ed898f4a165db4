"""ACP fs/* and terminal/* end to end: nothing an agent asks for can block the loop.

``serve`` frames against the SDK-built test agent (tests/acp_test_agent.py), as in
test_acp.py, whose helpers these tests share.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sidecar import Sidecar, kind_name
from test_acp import close, open_session, texts, turn


@pytest.fixture
def sidecar():
    with Sidecar() as sc:
        yield sc


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


def test_a_fifo_read_is_refused_while_another_session_streams(sidecar: Sidecar, workdir: Path) -> None:
    """A FIFO opened for reading blocks until a writer comes: it must cost nobody anything."""
    os.mkfifo(workdir / "fifo")
    streaming = open_session(sidecar, workdir)["id"]
    reading = open_session(sidecar, workdir)["id"]
    sidecar.ok({"cmd": "prompt", "session": streaming, "text": "flood 3000"})
    report = texts(turn(sidecar, reading, "fs fifo")).splitlines()
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
