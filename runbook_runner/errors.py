"""The project's exception hierarchy.

Only transport and input failures are exceptions; a remote command that exits
non-zero is data (a result), never an exception.
"""

from __future__ import annotations


class RunbookRunnerError(Exception):
    """Base class of every error this package raises on purpose."""


class ParseError(RunbookRunnerError):
    """Command output could not be turned into typed state."""
