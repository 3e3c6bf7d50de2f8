"""Polling with a deadline, for the e2e tier's waits on a real cluster."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T | None],
    *,
    timeout: float,
    what: str | Callable[[], str],
    interval: float = 0.2,
) -> T:
    """Poll `predicate` until it returns something truthy (returned); raise TimeoutError naming `what`.

    An exception from `predicate` counts as "not yet" (objects appear while being polled); the last
    one is named in the TimeoutError. A callable `what` is called only on timeout (a log read then).
    """
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:
            last_exc = exc
        if time.monotonic() >= deadline:
            described = what() if callable(what) else what
            raise TimeoutError(
                f"timed out after {timeout:.0f}s waiting for {described}"
                + (f" ({last_exc})" if last_exc else "")
            )
        time.sleep(interval)
