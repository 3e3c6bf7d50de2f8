"""Broker sessions: soft state of the controller, never logged (protocol §3.2).

Guarantees:
* A session is alive iff the broker was heard from within the session timeout; time is a
  parameter (seconds on a monotonic clock), never read here.
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
