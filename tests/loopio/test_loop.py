"""The event loop on its own: descriptors, timers, children, signals, and its guard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

from agentproto.loopio.loop import Alarm, Loop, Soon


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


def test_an_alarm_fires_once_at_its_last_time_and_never_when_cancelled() -> None:
    loop = Loop()
    fired: list[float] = []
    start = loop.time()
    alarm = Alarm(loop, lambda: fired.append(loop.time() - start))
    alarm.set(5.0)
    alarm.set(0.02)  # set again: the earlier time is gone
    assert alarm.armed
    loop.call_later(0.2, loop.stop)
    loop.run()
    assert len(fired) == 1 and fired[0] < 1.0 and not alarm.armed

    alarm.set(0.01)
    alarm.cancel()
    assert not alarm.armed
    loop.call_later(0.1, loop.stop)
    loop.run()
    assert len(fired) == 1
    loop.close()


def test_an_alarm_is_disarmed_before_its_callback_which_may_set_it_again() -> None:
    loop = Loop()
    seen: list[bool] = []

    def again() -> None:
        seen.append(alarm.armed)
        if len(seen) < 3:
            alarm.set(0.0)
        else:
            loop.stop()

    alarm = Alarm(loop, again)
    alarm.set(0.0)
    loop.run()
    assert seen == [False, False, False] and not alarm.armed
    loop.close()


def test_soon_runs_once_per_pass_however_often_requested_and_not_after_cancel() -> None:
    loop = Loop()
    runs: list[int] = []
    soon = Soon(loop, lambda: runs.append(len(runs)))
    soon.request()
    soon.request()
    assert soon.pending
    loop.call_later(0.05, loop.stop)
    loop.run()
    assert runs == [0] and not soon.pending

    soon.request()
    soon.cancel()
    soon.request()  # asked for again after the cancel: one run, not two
    loop.call_later(0.05, loop.stop)
    loop.run()
    assert runs == [0, 1]

    soon.request()
    soon.cancel()
    loop.call_later(0.05, loop.stop)
    loop.run()
    assert runs == [0, 1]
    loop.close()
