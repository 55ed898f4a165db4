"""The suite's own helpers: what the tests rely on them for."""

from __future__ import annotations

import sys

from ops_support import Proc

FLOOD = "import sys; sys.stderr.write(('x' * 49 + '\\n') * 20000 + 'the last line\\n'); sys.exit(2)"


def test_proc_wait_returns_once_stderr_is_read_to_its_end() -> None:
    """Proc.wait returned at the child's exit while its thread could still be reading
    stderr, so a test checking a usage error's one line found none on a loaded machine
    (test_unusable_tokens_and_open_binds_are_refused_at_start, in a CI run). A child that
    exits after a megabyte of lines on stderr leaves the pipe's last 64 KiB (1,300 lines
    for the thread to take one by one) unread at its exit."""
    proc = Proc([], command=[sys.executable, "-c", FLOOD])
    assert proc.wait() == 2
    assert proc.stderr.endswith("the last line\n")
