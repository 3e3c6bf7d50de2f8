"""Kafka consumers' incremental fetch sessions (KIP-227) on a broker, over the core's session
bookkeeping (`jbod_core.fetch_session`: the cache, the per-partition positions, what was sent).

Guarantees (Kafka's FetchSession rules, from the request's `session_id` and `session_epoch`):
* epoch -1: a sessionless full fetch (closing `session_id` when one is named); session id 0.
* epoch 0: a full fetch that opens a session holding every listed partition; the response names
  its id (0 when the cache has no slot: the client then keeps sending full fetches). A
  connection's earlier sessions are closed.
* epoch N >= 1: an incremental fetch of the session `session_id`: listed partitions are added or
  take their new position, `forgotten_topics_data` leave; the response lists a session partition
  only when it has records, an error, a divergence, a preferred read replica (KIP-392), or a high
  watermark or log start offset other than the one last sent. An unknown session, or one of another connection, is
  FETCH_SESSION_ID_NOT_FOUND (70); a wrong epoch INVALID_FETCH_SESSION_EPOCH (71); both leave the
  session as it was.
* Unlike the followers' sessions of the HTTP path, a partition answered with an error stays in
  the session: Kafka's clients do not drop it, they forget it when they move it elsewhere.
* At most `slots` sessions (Kafka's `max.incremental.fetch.session.cache.slots`, 1000); the least
  recently used is evicted first. Sessions belong to the connection that opened them.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Final, Protocol

from jbod_agent.kafka.listener import Connection
from jbod_core.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchPosition,
    FetchSessionCache,
    LeaderSession,
    SessionError,
)

SessionKey = tuple[Hashable, int]  # (the topic as the client names it: name or id, partition)
_OWNER: Final = "fetch_session_owner"


class PartitionAnswer(Protocol):
    """What the session needs of a partition's answer (`fetch_api.PartitionAnswer`)."""

    @property
    def error_code(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def has_data(self) -> bool: ...

    @property
    def diverges(self) -> bool: ...

    @property
    def preferred_read_replica(self) -> int: ...


@dataclass(slots=True)
class Wanted:
    """A partition to read: as the request listed it, or as the session remembers it."""

    key: SessionKey
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    max_bytes: int


@dataclass(slots=True)
class FetchPlan:
    """What one Fetch request reads and answers."""

    wanted: list[Wanted]
    session_id: int = 0
    session: LeaderSession[SessionKey] | None = None
    full: bool = True
    error: SessionError | None = None


@dataclass
class ConsumerSessions:
    slots: int = 1000
    _cache: FetchSessionCache[SessionKey] = field(init=False)
    _max_bytes: dict[int, dict[SessionKey, int]] = field(default_factory=dict)
    _owners: itertools.count[int] = field(default_factory=lambda: itertools.count(-2, -1))

    def __post_init__(self) -> None:
        self._cache = FetchSessionCache(new_id=lambda: secrets.randbelow(2**31 - 2) + 1, slots=self.slots)

    def _owner(self, conn: Connection) -> int:
        owner: int = conn.attributes.setdefault(_OWNER, next(self._owners))
        return owner

    def plan(  # noqa: PLR0913  the request's session fields, what it lists and forgets, and the time
        self,
        conn: Connection,
        *,
        session_id: int,
        epoch: int,
        listed: list[Wanted],
        forgotten: list[SessionKey],
        now_ms: float,
    ) -> FetchPlan:
        owner = self._owner(conn)
        if epoch == FINAL_EPOCH:
            if session_id:
                self._forget(self._cache.close(session_id, owner))
            return FetchPlan(listed)
        if epoch == INITIAL_EPOCH:
            session, closed = self._cache.create(owner, now_ms)
            for old in closed:
                self._forget(old)
            if session is None:
                return FetchPlan(listed)
            self._remember(session, listed, [])
            return FetchPlan(listed, session.session_id, session, full=True)
        found = self._cache.lookup(session_id, epoch, owner, now_ms)
        if isinstance(found, SessionError):
            return FetchPlan([], error=found)
        self._remember(found, listed, forgotten)
        limits = self._max_bytes.get(found.session_id, {})
        wanted = [
            Wanted(
                key,
                p.position.fetch_offset,
                p.position.current_leader_epoch,
                p.position.last_fetched_epoch,
                limits.get(key, 1 << 20),
            )
            for key, p in found.partitions.items()
        ]
        return FetchPlan(wanted, found.session_id, found, full=False)

    def _remember(
        self, session: LeaderSession[SessionKey], listed: list[Wanted], forgotten: list[SessionKey]
    ) -> None:
        session.update(
            (
                (w.key, FetchPosition(w.fetch_offset, w.last_fetched_epoch, w.current_leader_epoch))
                for w in listed
            ),
            forgotten,
        )
        limits = self._max_bytes.setdefault(session.session_id, {})
        for key in forgotten:
            limits.pop(key, None)
        for w in listed:
            limits[w.key] = w.max_bytes

    def _forget(self, session: LeaderSession[SessionKey] | None) -> None:
        if session is not None:
            session.closed = True
            self._max_bytes.pop(session.session_id, None)

    @staticmethod
    def answered(plan: FetchPlan, wanted: Wanted, answer: PartitionAnswer) -> bool:
        """Whether `answer` (the partition's) goes into the response; notes what was sent."""
        if plan.session is None:
            return True
        held = plan.session.partitions.get(wanted.key)
        if held is None:
            return True
        needed = answer.preferred_read_replica >= 0 or held.answer_needed(
            full=plan.full,
            has_data=answer.has_data,
            error_code=int(answer.error_code),
            diverging=answer.diverges,
            high_watermark=answer.high_watermark,
            log_start_offset=answer.log_start_offset,
        )
        if needed:
            held.sent(high_watermark=answer.high_watermark, log_start_offset=answer.log_start_offset)
        return needed
