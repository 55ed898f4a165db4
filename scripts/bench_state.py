"""Imported first by every benchmark: the sidecars a benchmark starts keep their observations
database in a temp directory of the run (XDG_STATE_HOME), not in the user's ~/.local/state,
whose cost figures they would otherwise fill with benchmark turns. The database stays on, as
a user has it, so its cost is measured; AGENTPROTO_DB, when set, still decides. Their control
sockets go to a temp directory of the run too (AGENTPROTO_CONTROL_DIR): they stay on, as a user
has them, but a running `inspect` never lists a benchmark's sidecars."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if "AGENTPROTO_DB" not in os.environ:
    _state = tempfile.mkdtemp(prefix="agentproto-bench-state-")
    os.environ["XDG_STATE_HOME"] = _state
    atexit.register(shutil.rmtree, _state, True)

if "AGENTPROTO_CONTROL_DIR" not in os.environ:
    _control = tempfile.mkdtemp(prefix="agentproto-bench-control-")
    os.environ["AGENTPROTO_CONTROL_DIR"] = os.path.join(_control, "agentproto")
    atexit.register(shutil.rmtree, _control, True)
