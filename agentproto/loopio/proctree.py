"""The processes one child started, wherever they went: a subreaper, a mark, and /proc.

An agent leads its own process group, and a group kill ends it with its helpers. A process
it detaches with ``setsid`` has a session and a group of its own, out of reach of that
kill, and once its parent exits it is re-parented to the nearest subreaper (init, without
one): it would outlive the session. Three things keep track of it:

- ``become_subreaper`` (Linux, ``prctl(PR_SET_CHILD_SUBREAPER)``): the sidecar adopts every
  orphan of its descendants, so they stay its descendants (the loop reaps them: see
  ``Loop(adopt_orphans=True)``). The CLI's servers ask for it; a program that embeds the
  loop does not get it unless it asks (it would then have to let the loop reap its
  children).
- A mark in each child's environment (``MARK=<sidecar pid>.<n>``, ``mark_env``), which
  everything the child starts inherits unless it clears its environment: a pid list
  would be stale as soon as a process forks after the walk that found it; the mark is
  carried by every later process.
- ``Tree(leader, mark)``: one walk of /proc finds the tree's live processes: the leader's
  group, the descendants of the leader and of the group, and every descendant of this
  process that carries the mark, with theirs. A detached process that also clears its
  environment is not found by its tree: it is still a descendant of the sidecar, which
  kills all of them when its loop closes (``kill_descendants``).
- A tree remembers every process it signalled (``signalled``: pid and start time), and
  ``holds`` counts them as its own until they are reaped: once killed, a detached process
  is no longer among the members (a zombie is not alive, its environment cannot be read,
  and its parent may be gone), yet it still has to be reaped (``Loop.reap_trees``).
  ``kill_descendants`` answers what it found the same way, for the loop to reap.

Without /proc (not Linux) only the group is known, as before. agentproto creates no
cgroup: a sidecar has no business in the system's cgroup hierarchy (root-owned and
managed by systemd; a normal user can only use a delegated cgroup v2 subtree, and v2 lets
no cgroup that holds processes have children, so the sidecar would have to move itself).
On the machine these tests run on (root in a VM, cgroup v1) one could be made; for a
normal user, in most containers and CI runners, none can.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys

#: The environment variable that marks a child's tree.
MARK = "AGENTPROTO_PROCESS_TREE"
_PR_SET_CHILD_SUBREAPER = 36
_marks = itertools.count(1)


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants (Linux); whether it now is."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes  # only here: it is not free at start-up

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def mark_env(env: dict[str, str]) -> tuple[dict[str, str], str]:
    """``env`` with a new mark in it (a copy), and the mark."""
    mark = f"{os.getpid()}.{next(_marks)}"
    return {**env, MARK: mark}, mark


class Proc:
    """One process as ``scan`` found it."""

    __slots__ = ("ppid", "pgid", "alive", "start")

    def __init__(self, ppid: int, pgid: int, alive: bool, start: bytes) -> None:
        self.ppid = ppid
        self.pgid = pgid
        self.alive = alive  # a zombie is not: it only waits to be reaped
        self.start = start  # the start time: with the pid, names one process for good


def scan() -> dict[int, Proc] | None:
    """Every process, by pid; None without /proc."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    table: dict[int, Proc] = {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            table[int(entry)] = Proc(int(fields[1]), int(fields[2]), fields[0] not in (b"Z", b"X"), fields[19])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return table


def _closure(roots: set[int], children: dict[int, list[int]]) -> set[int]:
    found = set(roots)
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _children_of(table: dict[int, Proc]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for pid, proc in table.items():
        children.setdefault(proc.ppid, []).append(pid)
    return children


#: (pid, start time) -> the mark in its environment. A marked process keeps its mark (an
#: exec that drops it still leaves it a process of that tree), so each is read once; an
#: unmarked one is read again (it may be between a fork and the exec that marks it).
_marks_seen: dict[tuple[int, bytes], str] = {}
_NEEDLE = f"\0{MARK}=".encode()


def _mark_of(pid: int, proc: Proc) -> str | None:
    key = (pid, proc.start)
    known = _marks_seen.get(key)
    if known is not None:
        return known
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = b"\0" + f.read()
    except OSError:
        environ = b""  # not ours to read (another user's, a setuid program): no mark
    at = environ.find(_NEEDLE)
    mark = None
    if at >= 0:
        start = at + len(_NEEDLE)
        end = environ.find(b"\0", start)
        mark = environ[start : end if end >= 0 else len(environ)].decode("utf-8", "replace")
        _marks_seen[key] = mark
    return mark


def _descendants(table: dict[int, Proc], children: dict[int, list[int]]) -> set[int]:
    mine = os.getpid()
    found = _closure({mine}, children) - {mine}
    if len(_marks_seen) > len(table) + 64:  # forget the processes that are gone
        for key in [key for key in _marks_seen if key[0] not in table or table[key[0]].start != key[1]]:
            del _marks_seen[key]
    return found


class Tree:
    """The live processes of one child's tree (see the module's rules)."""

    def __init__(self, leader: int, mark: str | None = None) -> None:
        self.leader = leader
        self.mark = mark
        #: Every process ``signal`` reached: pid -> start time (the pair names one process).
        self.signalled: dict[int, bytes] = {}

    def members(self) -> set[int] | None:
        """Their pids (this process never among them); None without /proc."""
        table = scan()
        return None if table is None else self._members(table)

    def _members(self, table: dict[int, Proc]) -> set[int]:
        children = _children_of(table)
        # The group, by its id (never the leader's pid alone: once it is reaped, that pid
        # may be anyone's), and the descendants of this process that carry the mark.
        roots = {pid for pid, proc in table.items() if proc.pgid == self.leader}
        if self.mark is not None:
            roots |= {pid for pid in _descendants(table, children) if _mark_of(pid, table[pid]) == self.mark}
        tree = _closure(roots, children)
        tree.discard(os.getpid())
        return {pid for pid in tree if table[pid].alive}

    def holds(self, pid: int, proc: Proc) -> bool:
        """Whether process ``pid`` (as ``scan`` found it) is of this tree for its reaping: in
        its group, or one it signalled, alive or not."""
        return proc.pgid == self.leader or self.signalled.get(pid) == proc.start

    def alive(self) -> bool:
        """Whether any process of the tree is alive (zombies do not count)."""
        members = self.members()
        if members is not None:
            return bool(members)
        return send_signal(self.leader, 0, group=True)  # no /proc: the group is all we know

    def signal(self, signum: int) -> bool:
        """Send ``signum`` to the group and to every process of the tree (each remembered in
        ``signalled``); whether any was alive."""
        sent = send_signal(self.leader, signum, group=True)
        table = scan()
        if table is None:
            return sent
        members = self._members(table)
        for pid in members:
            self.signalled[pid] = table[pid].start
            send_signal(pid, signum)
        return bool(members)


def kill_descendants() -> dict[int, bytes]:
    """SIGKILL every live descendant of this process (the last resort as a server ends:
    what no tree claimed, a detached process that cleared its environment). Every
    descendant found, killed or already a zombie: pid -> start time (none without /proc)."""
    table = scan()
    if table is None:
        return {}
    found = {}
    for pid in _descendants(table, _children_of(table)):
        found[pid] = table[pid].start
        if table[pid].alive:
            send_signal(pid, signal.SIGKILL)
    return found


def send_signal(pid: int, signum: int, group: bool = False) -> bool:
    """Send ``signum`` to process ``pid`` (with ``group``, to process group ``pid``);
    whether it was there to take it (one that is gone, or not ours to signal, was not)."""
    try:
        if group:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True
