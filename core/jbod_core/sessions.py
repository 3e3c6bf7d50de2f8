"""Broker sessions: soft state of the controller, never logged (protocol §3.2).

Guarantees:
* A session is alive iff the broker was heard from within the session timeout; time is a
  parameter (seconds on a monotonic clock), never read here.
* Session time (`StallClock`) stands still while the controller's own event loop is stalled, so
  a backlog the controller caused never expires a session.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(slots=True)
class Session:
    last_contact: float
    metadata_offset: int = -1


def session_alive(sessions: Mapping[int, Session], broker_id: int, *, now: float, timeout: float) -> bool:
    session = sessions.get(broker_id)
    return session is not None and now - session.last_contact <= timeout


@dataclass(slots=True)
class StallClock:
    """Session time: the controller's clock minus the time its event loop was stalled.

    While the loop is blocked (a large request parsed on it, a GC or VM pause, SIGSTOP) the
    controller hears from no broker; that backlog is the controller's doing, so it must not count
    against the brokers' sessions. A watcher calls `tick(now)` every `interval` seconds; lateness
    beyond `interval + tolerance` is a stall, and session time stands still for it — including a
    stall still in progress (a tick overdue), so an expiry check that runs first after the stall
    sees no extra time. Session time never goes backwards and never runs faster than `now`.
    """

    interval: float
    tolerance: float
    last_tick: float
    stalled: float = 0.0

    def _overdue(self, now: float) -> float:
        return max(0.0, now - self.last_tick - self.interval - self.tolerance)

    def tick(self, now: float) -> float:
        """Record a watcher tick at `now`; returns the stall it ended (0.0 if none)."""
        stall = self._overdue(now)
        self.stalled += stall
        self.last_tick = now
        return stall

    def session_time(self, now: float) -> float:
        return now - self.stalled - self._overdue(now)
