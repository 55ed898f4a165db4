"""``python3 -m agentproto``: the one entry point. It checks the interpreter first (3.10 or
newer, in words, before any import an older one would fail on), then runs cli.main.

Keep it importable by any Python 3 and free of imports beyond ``sys`` (and ``os`` when run
as a directory): every start passes through it.
"""

import sys

# Checked before anything else is imported: the package uses 3.10-only features (TypeGuard,
# `X | Y` types at run time), so an older interpreter would die in an ImportError traceback.
# This file and agentproto/__init__.py must stay importable by old Pythons for that reason.
if sys.version_info < (3, 10):
    sys.stderr.write("agentproto needs Python 3.10 or newer (this is %d.%d.%d)\n" % tuple(sys.version_info[:3]))
    sys.exit(1)

if not __package__:
    # Run as `python3 path/to/agentproto` (the directory, not -m): sys.path[0] is then this
    # directory, whose modules (inspect.py, record.py, …) would shadow the stdlib's, and the
    # package itself is not importable. Its parent directory takes that place.
    import os

    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from agentproto.cli import main  # noqa: E402

sys.exit(main())
