"""Imported first by every benchmark: the sidecars a benchmark starts keep their observations
database in a temp directory of the run (XDG_STATE_HOME), not in the user's ~/.local/state,
whose cost figures they would otherwise fill with benchmark turns. The database stays on, as
a user has it, so its cost is measured; AGENTPROTO_DB, when set, still decides."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if "AGENTPROTO_DB" not in os.environ:
    _state = tempfile.mkdtemp(prefix="agentproto-bench-state-")
    os.environ["XDG_STATE_HOME"] = _state
    atexit.register(shutil.rmtree, _state, True)
