"""What every long-running command of ours shares: running its event loop.

Guarantees: uvloop is used when installed, else asyncio's default loop; the coroutine's int is
returned as the exit code.
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
