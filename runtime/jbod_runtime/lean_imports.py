"""Long-running server processes (`jbod-agent`, `jbod-controller`) keep only what they use in
memory: two of their dependencies import optional libraries merely because they are installed.

* kio (Kafka's wire types) imports `hypothesis.strategies` when hypothesis is installed (a
  development or test environment) to offer generators for its types;
* httpx imports its command-line client (`httpx._main`: click, rich, pygments) whenever click is
  installed, which kopf brings into the project's image.

Neither is used by a server, and together they cost about 14 MB per process (1,464 against 767
modules in a development environment). Guarantee: after `skip_optional_imports()`, importing
them raises ImportError, which both libraries expect and handle; it must run before anything
imports kio or httpx, so this module imports nothing but `sys`, and the console scripts call it
first (`jbod_agent.entry`, `jbod_controller.entry`, and `jbod_cli.entry` for `jbodctl`, run
hundreds of times by the tests).
"""

from __future__ import annotations

import sys

OPTIONAL_IMPORTS = ("hypothesis", "httpx._main")


def skip_optional_imports() -> None:
    """Mark the optional imports absent (a `None` entry in `sys.modules` makes `import` raise
    ImportError); one already imported is left alone."""
    for name in OPTIONAL_IMPORTS:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
