"""The errors a `jbod-pipeline` run reports as one line `jbod-pipeline: error: ...` (no traceback).

This module imports nothing beyond the standard library, so the command can report them even
when PySpark is not installed.
"""

from __future__ import annotations


class PipelineError(Exception):
    """A run that cannot go on for a reason the user can fix; `str()` is one line."""


class MissingRuntimeError(PipelineError):
    """The jobs need something that is not installed here: the `pipeline` extra or Java."""
