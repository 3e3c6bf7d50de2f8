"""The event loop every long-running server of ours (`jbod-controller`, `jbod-agent`) runs on.

Guarantees: uvloop is used when it is installed, else asyncio's default loop; the coroutine's int
is returned as the exit code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


def run_event_loop(coro: Coroutine[Any, Any, int]) -> int:
    """Run `coro` on uvloop when it is installed, else on asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    result: int = uvloop.run(coro)
    return result
