"""What only mypy reads, at no start-up cost.

Importing ``typing`` costs start-up time (see cli.py), so no module on a start path imports it
at run time. Each module imports ``TYPE_CHECKING`` from here and puts its ``typing`` imports
under ``if TYPE_CHECKING:``; mypy reads that block, the interpreter never runs it. ``Protocol``
is ``typing.Protocol`` for mypy and ``object`` at run time: the Protocol classes of the package
are interfaces for mypy only (nothing checks them with ``isinstance``).
"""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol as Protocol
else:
    Protocol = object

__all__ = ["TYPE_CHECKING", "Protocol"]
