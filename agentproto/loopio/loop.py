"""The one blocking event loop: file descriptors, timers, child processes and signals.

Rules of this file:
- Everything runs on the main thread. Callbacks must not block; slow work is split into
  callbacks that run when their descriptor is ready or their timer fires.
- A descriptor that epoll/kqueue cannot watch (a regular file redirected to stdin) is
  treated as always ready, so ``serve < file`` works like a pipe.
- Children are reaped here: SIGCHLD wakes the loop through a self-pipe (set_wakeup_fd) and
  every watched child is polled; a slow periodic poll covers platforms where the signal is
  not delivered.
- ``Loop(adopt_orphans=True)`` (the CLI's servers): before its first child starts, the
  process becomes the subreaper of its descendants (proctree.py), so what an agent
  detaches stays ours to kill; the orphans re-parented to us are reaped here too, without
  taking a watched child's status from its ``Popen`` (``waitid(WNOWAIT)`` looks first).
  When the loop closes, every descendant still alive is killed, and reaped (blocking, at
  most ``CLOSE_REAP_GRACE`` seconds): none is left a zombie for init.
- ``reap_trees`` is for a process about to exit, once its loop has stopped: it blocks
  (bounded) until no process of the given trees (their groups, and every process they
  signalled, however detached) is left unreaped, and runs no callback (nobody is left to
  hear an exit).
- ``loop.io`` is the one place descriptors are read and written (see streams.py), and
  ``loop.time()`` the one clock timers and the engine read; a test replaces either.
"""

from __future__ import annotations

import heapq
import itertools
import os
import selectors
import signal
import time

from agentproto.core.errors import log
from agentproto.core.typecheck import TYPE_CHECKING
from agentproto.loopio import proctree

if TYPE_CHECKING:
    import subprocess
    from typing import Any, Callable

    Callback = Callable[[], Any]


class Timer:
    __slots__ = ("when", "callback", "cancelled")

    def __init__(self, when: float, callback: Callback) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        # A cancelled timer stays in the heap until its time comes: what its callback holds
        # (a closed session, whole) must not stay with it.
        self.callback = _nothing


def _nothing() -> None:
    pass


#: What an unarmed ``Alarm`` holds: a timer already done with.
_SPENT = Timer(0.0, _nothing)
_SPENT.cancel()


class Alarm:
    """One callback due at one time at most, owned by one object (a handshake's deadline, a
    stall check): ``set`` arms it (again, replacing the time it had), ``cancel`` disarms it,
    and it is disarmed once it has fired, before its callback runs (which may set it again).
    """

    __slots__ = ("loop", "callback", "_timer")

    def __init__(self, loop: Loop, callback: Callback) -> None:
        self.loop = loop
        self.callback = callback
        self._timer = _SPENT

    # The loop marks a timer cancelled before it runs the timer's callback: a timer that has
    # fired and one that was cancelled are both done with, and cancelling either is harmless.
    @property
    def armed(self) -> bool:
        return not self._timer.cancelled

    def set(self, delay: float) -> None:
        self._timer.cancel()
        self._timer = self.loop.call_later(delay, self.callback)

    def cancel(self) -> None:
        self._timer.cancel()


class Soon:
    """A callback run once on the loop's next pass, however often it is asked for before that
    (a flush, a delivery): ``request`` asks, ``pending`` says whether it is asked for."""

    __slots__ = ("loop", "callback", "pending")

    def __init__(self, loop: Loop, callback: Callback) -> None:
        self.loop = loop
        self.callback = callback
        self.pending = False

    def request(self) -> None:
        if not self.pending:
            self.pending = True
            self.loop.call_soon(self._run)

    def _run(self) -> None:
        if self.pending:  # a ``cancel`` since the request leaves nothing to run
            self.pending = False
            self.callback()

    def cancel(self) -> None:
        self.pending = False


class _Watch:
    """What the loop knows about one descriptor: a reader and/or a writer callback."""

    __slots__ = ("fileobj", "reader", "writer", "always")

    def __init__(self, fileobj: Any) -> None:
        self.fileobj = fileobj
        self.reader: Callback | None = None
        self.writer: Callback | None = None
        self.always = False  # not pollable: call the callbacks every tick


class SystemIO:
    """Reads and writes of descriptors, as the operating system does them.

    Every reader and writer of the loop's descriptors calls these, so a fault-injecting
    subclass (EAGAIN, short writes, EPIPE, ENOSPC, a read error) can stand in for it.
    """

    def read(self, fd: int, size: int) -> bytes:
        return os.read(fd, size)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return os.write(fd, data)


class Loop:
    CHILD_POLL_INTERVAL = 0.5
    #: ``close``: how long the descendants it kills get to be reaped, in seconds (a
    #: SIGKILL'd process is normally gone in milliseconds).
    CLOSE_REAP_GRACE = 1.0

    def __init__(self, io: SystemIO | None = None, *, adopt_orphans: bool = False) -> None:
        self.io = io if io is not None else SystemIO()
        self._adopt = adopt_orphans
        self._adopted = False  # this process is the subreaper of its descendants
        self._selector = selectors.DefaultSelector()
        self._watches: dict[int, _Watch] = {}
        self._always: dict[int, _Watch] = {}
        self._timers: list[tuple[float, int, Timer]] = []
        self._counter = itertools.count()
        self._soon: list[Callback] = []
        self._children: dict[int, tuple[subprocess.Popen[bytes], Callable[[int], Any]]] = {}
        self._signal_handlers: dict[int, Callback] = {}
        self._pending_signals: list[int] = []
        self._stopping = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._old_wakeup: int | None = None
        self._old_handlers: dict[int, Any] = {}

    # -- descriptors -------------------------------------------------------------------

    @staticmethod
    def _fd(fileobj: Any) -> int:
        return fileobj if isinstance(fileobj, int) else fileobj.fileno()

    def _update(self, fd: int) -> None:
        watch = self._watches.get(fd)
        if watch is None:
            return
        mask = (selectors.EVENT_READ if watch.reader else 0) | (
            selectors.EVENT_WRITE if watch.writer else 0
        )
        if watch.always:
            if mask:
                self._always[fd] = watch
            else:
                self._always.pop(fd, None)
                del self._watches[fd]
            return
        try:
            registered = self._selector.get_key(fd)
        except KeyError:
            registered = None
        if not mask:
            if registered is not None:
                self._selector.unregister(fd)
            del self._watches[fd]
        elif registered is None:
            try:
                self._selector.register(fd, mask, watch)
            except PermissionError:
                # Regular files cannot be polled; they are always ready.
                watch.always = True
                self._always[fd] = watch
        elif registered.events != mask:
            self._selector.modify(fd, mask, watch)

    def add_reader(self, fileobj: Any, callback: Callback) -> None:
        self._set(fileobj, callback, reading=True)

    def remove_reader(self, fileobj: Any) -> None:
        self._set(fileobj, None, reading=True)

    def add_writer(self, fileobj: Any, callback: Callback) -> None:
        self._set(fileobj, callback, reading=False)

    def remove_writer(self, fileobj: Any) -> None:
        self._set(fileobj, None, reading=False)

    def _set(self, fileobj: Any, callback: Callback | None, reading: bool) -> None:
        fd = self._fd(fileobj)
        watch = self._watches.get(fd)
        if watch is None:
            if callback is None:
                return
            watch = self._watches[fd] = _Watch(fileobj)
        if reading:
            watch.reader = callback
        else:
            watch.writer = callback
        self._update(fd)

    def forget(self, fileobj: Any) -> None:
        """Drop every callback on a descriptor (before closing it)."""
        fd = self._fd(fileobj)
        watch = self._watches.get(fd)
        if watch is not None:
            watch.reader = watch.writer = None
            self._update(fd)

    # -- timers ------------------------------------------------------------------------

    #: The loop's clock (monotonic seconds): timers fire by it and the engine reads it. The
    #: C function itself, not a method around it: the engine reads it for every event.
    time = staticmethod(time.monotonic)

    def call_later(self, delay: float, callback: Callback) -> Timer:
        timer = Timer(self.time() + max(0.0, delay), callback)
        heapq.heappush(self._timers, (timer.when, next(self._counter), timer))
        return timer

    def call_soon(self, callback: Callback) -> None:
        self._soon.append(callback)

    # -- children and signals ----------------------------------------------------------

    def watch_child(self, proc: subprocess.Popen[bytes], on_exit: Callable[[int], Any]) -> None:
        """Call ``on_exit(returncode)`` once the child has exited and been reaped."""
        self._children[proc.pid] = (proc, on_exit)
        if signal.SIGCHLD not in self._signal_handlers:
            self._reap_on_sigchld()
        self.call_soon(self._poll_children)

    def unwatch_child(self, proc: subprocess.Popen[bytes]) -> None:
        self._children.pop(proc.pid, None)

    def spawning(self) -> None:
        """Called before a child process starts: with ``adopt_orphans``, the first time,
        make this process the subreaper of whatever the child will detach."""
        if not self._adopt or self._adopted:
            return
        self._adopt = False
        if proctree.become_subreaper() and hasattr(os, "waitid"):
            self._adopted = True
            self._reap_on_sigchld()

    def _reap_on_sigchld(self) -> None:
        try:
            self.add_signal_handler(signal.SIGCHLD, self._poll_children)
        except ValueError:
            pass  # not the main thread: the periodic poll reaps instead

    def _poll_children(self) -> None:
        for pid, (proc, on_exit) in list(self._children.items()):
            if proc.poll() is not None:
                del self._children[pid]
                self._guard(on_exit, proc.returncode)
        if self._adopted:
            self._reap_orphans()

    def _reap_orphans(self) -> None:
        """Reap the exited children nobody watches (orphans re-parented to us). Each is
        looked at first without reaping it: a watched child's status is its Popen's."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None:
                return
            entry = self._children.pop(info.si_pid, None)
            if entry is not None:
                proc, on_exit = entry
                if proc.poll() is None:  # cannot be (it has exited): never spin on it
                    self._children[info.si_pid] = entry
                    return
                self._guard(on_exit, proc.returncode)
                continue
            try:
                os.waitpid(info.si_pid, os.WNOHANG)
            except ChildProcessError:
                pass

    def add_signal_handler(self, signum: int, callback: Callback) -> None:
        """Run ``callback`` on the loop (not inside the signal handler) when signum arrives."""
        if self._old_wakeup is None:
            self._old_wakeup = signal.set_wakeup_fd(self._wake_w)
        self._signal_handlers[signum] = callback
        if signum not in self._old_handlers:
            self._old_handlers[signum] = signal.getsignal(signum)
        signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._pending_signals.append(signum)

    def wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):
            pass

    # -- running -----------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping = True
        self.wake()

    def run(self, until: Callable[[], bool] | None = None) -> None:
        """Run until stop() is called (or ``until()`` turns true)."""
        self._stopping = False
        next_child_poll = self.time() + self.CHILD_POLL_INTERVAL
        while not self._stopping and not (until is not None and until()):
            self._run_soon()
            if self._stopping or (until is not None and until()):
                break
            now = self.time()
            if self._soon or self._always:
                timeout: float | None = 0.0
            else:
                timeout = next_child_poll - now if self._children else None
                while self._timers and self._timers[0][2].cancelled:
                    heapq.heappop(self._timers)
                if self._timers:
                    until_timer = max(0.0, self._timers[0][0] - now)
                    timeout = until_timer if timeout is None else min(timeout, until_timer)
                if timeout is not None:
                    timeout = max(0.0, timeout)
            events = self._selector.select(timeout)
            for key, mask in events:
                watch = key.data
                if watch is None:
                    self._drain_wakeup()
                    continue
                if mask & selectors.EVENT_READ and watch.reader is not None:
                    self._guard(watch.reader)
                if mask & selectors.EVENT_WRITE and watch.writer is not None:
                    self._guard(watch.writer)
            for watch in list(self._always.values()):
                if watch.reader is not None:
                    self._guard(watch.reader)
                if watch.writer is not None:
                    self._guard(watch.writer)
            now = self.time()
            while self._timers and (self._timers[0][2].cancelled or self._timers[0][0] <= now):
                _, _, timer = heapq.heappop(self._timers)
                if not timer.cancelled:
                    timer.cancelled = True  # before its callback runs (Alarm counts on it)
                    self._guard(timer.callback)
            if self._children and now >= next_child_poll:
                self._poll_children()
                next_child_poll = now + self.CHILD_POLL_INTERVAL

    @staticmethod
    def _guard(callback: Callable[..., Any], *args: Any) -> None:
        """Run one callback; a bug in it is logged and costs that callback, not the loop
        and every session on it."""
        try:
            callback(*args)
        except Exception:
            import traceback  # only on this path: it is not free at start-up

            log("internal error in an event-loop callback:\n" + traceback.format_exc().rstrip())

    def _run_soon(self) -> None:
        while self._soon:
            batch, self._soon = self._soon, []
            for callback in batch:
                self._guard(callback)

    def _drain_wakeup(self) -> None:
        try:
            data = os.read(self._wake_r, 4096)
        except BlockingIOError:
            data = b""
        signals = self._pending_signals
        self._pending_signals = []
        if data or signals:
            self._poll_children()
        for signum in signals:
            handler = self._signal_handlers.get(signum)
            if handler is not None:
                self._guard(handler)

    def reap_trees(self, trees: list[proctree.Tree], timeout: float) -> None:
        """Block until no process of ``trees`` (``Tree.holds``: its group, and every process
        it signalled) is left alive or a zombie of ours (each reaped: a watched child through
        its ``Popen``, an adopted orphan by its pid), at most ``timeout`` seconds. Only once
        the loop has stopped (the process is ending): it blocks, and the exits it reaps call
        no ``on_exit``."""
        if trees:
            leaders = {tree.leader for tree in trees}
            self._reap(lambda pid, proc: any(tree.holds(pid, proc) for tree in trees), leaders, timeout)

    def _reap(self, holds: Callable[[int, proctree.Proc], bool], leaders: set[int], timeout: float) -> None:
        """``reap_trees``'s wait, for the processes ``holds`` names (``leaders``: the
        watched children that are all that is known without /proc)."""
        deadline = time.monotonic() + timeout
        mine = os.getpid()
        while True:
            table = proctree.scan()
            if table is None:  # no /proc: the watched leaders are all that is known
                for pid in leaders:
                    watched = self._children.get(pid)
                    if watched is not None and watched[0].poll() is not None:
                        del self._children[pid]
                if not any(pid in leaders for pid in self._children):
                    return
            else:
                left = False
                for pid, entry in table.items():
                    if pid == mine or not holds(pid, entry):
                        continue
                    watched = self._children.get(pid)
                    if watched is not None:
                        if watched[0].poll() is None:
                            left = True
                        else:
                            del self._children[pid]
                    elif entry.alive:
                        left = True
                    elif entry.ppid == mine:
                        # An adopted orphan: ours to reap. A zombie whose other threads are
                        # still exiting cannot be reaped yet (waitpid says 0).
                        try:
                            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                                left = True
                        except ChildProcessError:
                            pass
                    else:
                        # Another's zombie: its parent reaps it, or dies (being held too) and
                        # hands it to us, or did already (this read of it is older than the
                        # parent's). Only a parent that lives on, and is not ours to wait
                        # for (init, without a subreaper), is left to it.
                        parent = table.get(entry.ppid)
                        if parent is None or not parent.alive or holds(entry.ppid, parent):
                            left = True
                if not left:
                    return
            if time.monotonic() >= deadline:
                return
            time.sleep(0.005)

    def close(self) -> None:
        if self._adopted:
            # The last resort: nothing this process started, or adopted, outlives it, not
            # even as a zombie left to init.
            killed = proctree.kill_descendants()
            if killed:
                self._reap(lambda pid, proc: killed.get(pid) == proc.start, set(), self.CLOSE_REAP_GRACE)
        for signum, old in self._old_handlers.items():
            try:
                signal.signal(signum, old)
            except (ValueError, OSError):
                pass
        if self._old_wakeup is not None:
            try:
                signal.set_wakeup_fd(self._old_wakeup)
            except ValueError:
                pass
        self._selector.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
