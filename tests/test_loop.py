"""The event loop on its own: descriptors, timers, children, signals, and its guard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

from agentproto.loop import Loop


def test_timers_fire_in_order_and_cancelled_ones_never() -> None:
    loop = Loop()
    fired: list[str] = []
    loop.call_later(0.03, lambda: fired.append("late"))
    loop.call_later(0.01, lambda: fired.append("early"))
    cancelled = loop.call_later(0.02, lambda: fired.append("cancelled"))
    cancelled.cancel()
    loop.call_soon(lambda: fired.append("soon"))
    loop.call_later(0.05, loop.stop)
    loop.run()
    loop.close()
    assert fired == ["soon", "early", "late"]


def test_a_pipe_reader_gets_data_then_eof() -> None:
    loop = Loop()
    r, w = os.pipe()
    got: list[bytes] = []

    def readable() -> None:
        data = os.read(r, 100)
        got.append(data)
        if not data:
            loop.remove_reader(r)
            loop.stop()

    loop.add_reader(r, readable)
    os.write(w, b"abc")
    os.close(w)
    loop.run()
    loop.close()
    os.close(r)
    assert b"".join(got) == b"abc" and got[-1] == b""


def test_a_regular_file_is_always_ready() -> None:
    """``serve < file``: epoll cannot watch a regular file, the loop treats it as ready."""
    loop = Loop()
    with tempfile.TemporaryFile() as f:
        f.write(b"x" * 10)
        f.seek(0)
        got: list[bytes] = []

        def readable() -> None:
            data = os.read(f.fileno(), 4)
            got.append(data)
            if not data:
                loop.remove_reader(f)
                loop.stop()

        loop.add_reader(f, readable)
        loop.run()
    loop.close()
    assert b"".join(got) == b"x" * 10


def test_children_are_reaped_with_their_status() -> None:
    loop = Loop()
    statuses: list[int] = []
    for code in (0, 3):
        proc = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
        loop.watch_child(proc, statuses.append)
    loop.run(until=lambda: len(statuses) == 2)
    loop.close()
    assert sorted(statuses) == [0, 3]


def test_a_signal_runs_its_handler_on_the_loop() -> None:
    loop = Loop()
    seen: list[str] = []
    loop.add_signal_handler(signal.SIGUSR1, lambda: (seen.append("usr1"), loop.stop()))
    loop.call_soon(lambda: os.kill(os.getpid(), signal.SIGUSR1))
    loop.run()
    loop.close()
    assert seen == ["usr1"]
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # restored by close()


def test_a_callback_that_raises_costs_only_itself(capsys) -> None:  # type: ignore[no-untyped-def]
    loop = Loop()
    after: list[str] = []

    def broken() -> None:
        raise RuntimeError("a driver bug")

    loop.call_soon(broken)
    loop.call_later(0.01, broken)
    loop.call_later(0.02, lambda: after.append("still running"))
    loop.call_later(0.03, loop.stop)
    loop.run()
    loop.close()
    assert after == ["still running"]
    err = capsys.readouterr().err
    assert err.count("internal error in an event-loop callback") == 2 and "a driver bug" in err
