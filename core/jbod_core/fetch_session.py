"""Incremental follower fetch sessions (Kafka's KIP-227) for `POST /v1/replica/fetch`, both sides.

A follower's fetch names every partition it follows from that leader; with sessions the leader
keeps that list, and later requests carry only what changed. The request's `sessionId` and
`sessionEpoch` say which kind it is (Kafka's encoding):

* `sessionEpoch` -1 (`FINAL_EPOCH`, the default, what followers without sessions send): a
  sessionless full fetch; every partition is listed and answered, nothing is kept. A non-zero
  `sessionId` names a session to close.
* `sessionId` 0, `sessionEpoch` 0 (`INITIAL_EPOCH`): a full fetch that opens a session; the reply
  carries its id. Every other session of the same follower is closed.
* `sessionId` N, `sessionEpoch` E >= 1: an incremental fetch. `partitions` lists partitions added
  or whose position (fetch offset, last fetched epoch, current leader epoch, the follower's log
  start offset) changed,
  `forgotten` the partitions no longer followed; the session keeps the others unchanged.

Guarantees (no I/O, no clock, no randomness: callers pass time and a session-id source):

Follower side, `FetchSessionBuilder`:
* After a reply is committed (`on_reply`), `known` is exactly what the leader's session holds:
  every partition sent and neither forgotten nor `dropped` since, at the position last sent.
* An incremental plan lists a partition only when its wanted position differs from `known`, and
  forgets a partition only when `known` has it; at most `max_partitions` entries per request —
  the rest wait for the next plan, the latest wanted position winning.
* Anything unexpected (a transport failure, errorCode 70 or 71, a reply naming another session)
  resets the builder: the next request is full. A leader that answers a session-opening request
  without a session id does not have sessions; the builder then sends sessionless full requests
  until a failure (the leader may have been upgraded and restarted).

Leader side, `FetchSessionCache` and `LeaderSession`:
* At most `slots` sessions (Kafka's `max.incremental.fetch.session.cache.slots`, 1000); opening
  one when full evicts the least recently used. A session belongs to one follower (`replica_id`).
* An incremental request is refused with FETCH_SESSION_ID_NOT_FOUND (70) when the id is unknown or
  belongs to another follower, with INVALID_FETCH_SESSION_EPOCH (71) when its epoch is not the
  one expected; the session is left as it was. An accepted request moves the expected epoch on.
* `to_check` is what a request must look at: the partitions it changed, those marked since
  (`mark`: an append, a high watermark or log start change, a leadership change), and those
  whose follower is not caught up (`keep_checking`); every other session partition is idle.
* `SessionPartition.answer_needed`: an incremental reply lists a partition only with data, an
  error (OFFSET_OUT_OF_RANGE included), a divergence, or a high watermark / log start offset
  different from the one last sent; a full reply lists every partition.
* A partition answered with an error other than OFFSET_OUT_OF_RANGE leaves the session on both
  sides (`LeaderSession.drop`, `FetchSessionBuilder.dropped`); the follower adds it back when it
  retries, so an error is never answered again and again to a long-poll.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final, Generic, NamedTuple, TypeVar

from jbod_core.errors import ErrorCode
from jbod_core.replication import SessionClock

K = TypeVar("K", bound=Hashable)

INVALID_SESSION_ID: Final = 0
INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
DEFAULT_CACHE_SLOTS: Final = 1000
_INT32_MAX: Final = 2**31 - 1


class SessionError(IntEnum):
    """Reply-header codes of this extension (Kafka's numbers; not in the contract's §2 table)."""

    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`: 1 after the full request, wrapping to 1 after int32's maximum."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


def leaves_session(error_code: int) -> bool:
    """A partition answered with this code leaves the session (on both sides)."""
    return error_code not in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE)


class FetchPosition(NamedTuple):
    """Where a follower fetches one partition from (a tuple: cheap to build and compare), and
    where its own log starts (Kafka's FetchRequest `log_start_offset`; -1 from a consumer)."""

    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int
    log_start_offset: int = -1


# -- follower side -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchPlan(Generic[K]):
    """One request's session fields and partitions."""

    session_id: int
    epoch: int
    partitions: tuple[tuple[K, FetchPosition], ...]
    forgotten: tuple[K, ...] = ()

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    @property
    def empty(self) -> bool:
        return not self.partitions and not self.forgotten


class FetchSessionBuilder(Generic[K]):
    """A follower's view of its session with one leader (Kafka's FetchSessionHandler)."""

    def __init__(self, *, max_partitions: int) -> None:
        if max_partitions < 1:
            raise ValueError("max_partitions must be at least 1")
        self.max_partitions = max_partitions
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.sessions_supported = True
        self.known: dict[K, FetchPosition] = {}
        self.waiting: dict[K, FetchPosition | None] = {}

    @property
    def needs_full(self) -> bool:
        return self.session_id == INVALID_SESSION_ID

    @property
    def idle(self) -> bool:
        """Nothing in the session and nothing to send: no reason to ask the leader anything."""
        return not self.known and not self.waiting

    def full(self, wanted: Mapping[K, FetchPosition]) -> FetchPlan[K]:
        """A full request: every wanted partition (the first `max_partitions` when opening a session)."""
        self.waiting = {}
        if not self.sessions_supported:
            return FetchPlan(INVALID_SESSION_ID, FINAL_EPOCH, tuple(wanted.items()))
        items = list(wanted.items())
        self.waiting = dict(items[self.max_partitions :])
        return FetchPlan(INVALID_SESSION_ID, INITIAL_EPOCH, tuple(items[: self.max_partitions]))

    def incremental(self, changes: Mapping[K, FetchPosition | None]) -> FetchPlan[K]:
        """An incremental request; `changes` maps a partition to its wanted position (None: unwanted)."""
        if self.needs_full:
            raise ValueError("no session: the next request must be full")
        self.waiting.update(changes)
        send: list[tuple[K, FetchPosition]] = []
        forget: list[K] = []
        done: list[K] = []
        for key, position in self.waiting.items():
            if len(send) + len(forget) >= self.max_partitions:
                break
            done.append(key)
            if position is None:
                if key in self.known:
                    forget.append(key)
            elif self.known.get(key) != position:
                send.append((key, position))
        for key in done:
            del self.waiting[key]
        return FetchPlan(self.session_id, self.epoch, tuple(send), tuple(forget))

    def on_reply(self, plan: FetchPlan[K], *, session_id: int, error_code: int) -> bool:
        """Commit the reply to `plan`; False when the session is gone and the next request is full."""
        if error_code in (SessionError.FETCH_SESSION_ID_NOT_FOUND, SessionError.INVALID_FETCH_SESSION_EPOCH):
            self.reset()
            return False
        if plan.epoch == FINAL_EPOCH:
            return True
        if plan.epoch == INITIAL_EPOCH:
            if session_id == INVALID_SESSION_ID:  # a leader without sessions
                self.reset()
                self.sessions_supported = False
                return True
            self.session_id = session_id
            self.epoch = next_epoch(INITIAL_EPOCH)
            self.known = dict(plan.partitions)
            return True
        if session_id != self.session_id or plan.session_id != self.session_id or plan.epoch != self.epoch:
            self.reset()
            return False
        for key, position in plan.partitions:
            self.known[key] = position
        for key in plan.forgotten:
            self.known.pop(key, None)
        self.epoch = next_epoch(self.epoch)
        return True

    def answered_positions(self, plan: FetchPlan[K]) -> Mapping[K, FetchPosition]:
        """The positions the leader answered from (call after `on_reply`): the session's, else the plan's."""
        if self.needs_full:
            return dict(plan.partitions)
        return self.known

    def dropped(self, keys: Iterable[K]) -> None:
        """The leader answered these with an error: they left its session."""
        for key in keys:
            self.known.pop(key, None)

    def reset(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.known = {}
        self.waiting = {}

    def on_failure(self) -> None:
        """The request failed in transit: whatever the leader did with it, start over."""
        self.reset()
        self.sessions_supported = True


# -- leader side ---------------------------------------------------------------------------------


@dataclass(slots=True)
class SessionPartition:
    """One partition of a leader's session: the follower's position and what was last sent."""

    position: FetchPosition
    sent_high_watermark: int = -1
    sent_log_start_offset: int = -1

    def answer_needed(  # noqa: PLR0913  Kafka's rule (maybeUpdateResponseData): a keyword per field of the answer
        self,
        *,
        full: bool,
        has_data: bool,
        error_code: int,
        diverging: bool,
        high_watermark: int,
        log_start_offset: int,
    ) -> bool:
        return (
            full
            or has_data
            or error_code != ErrorCode.NONE
            or diverging
            or high_watermark != self.sent_high_watermark
            or log_start_offset != self.sent_log_start_offset
        )

    def sent(self, *, high_watermark: int, log_start_offset: int) -> None:
        self.sent_high_watermark = high_watermark
        self.sent_log_start_offset = log_start_offset


@dataclass(eq=False)
class LeaderSession(Generic[K]):
    """A follower's session on the leader. Identity-hashed: partitions hold it as an interest."""

    session_id: int
    replica_id: int
    epoch: int = INITIAL_EPOCH  # the epoch the next request must carry
    last_used_ms: float = 0.0
    partitions: dict[K, SessionPartition] = field(default_factory=dict)
    dirty: set[K] = field(default_factory=set)
    pending: set[K] = field(default_factory=set)
    clock: SessionClock = field(default_factory=SessionClock)
    on_dirty: Callable[[], None] | None = None  # wakes a long-poll waiting on this session
    closed: bool = False  # evicted or replaced: partitions must no longer hold it

    def update(
        self, positions: Iterable[tuple[K, FetchPosition]], forgotten: Iterable[K]
    ) -> tuple[list[K], list[K]]:
        """Apply a request: forgotten first, then added or changed partitions.

        Returns (the partitions listed in the request, in order; the forgotten ones the session had).
        """
        gone: list[K] = []
        for key in forgotten:
            if self.partitions.pop(key, None) is not None:
                gone.append(key)
                self.dirty.discard(key)
                self.pending.discard(key)
        listed: list[K] = []
        for key, position in positions:
            current = self.partitions.get(key)
            if current is None:
                self.partitions[key] = SessionPartition(position)
            else:
                current.position = position
            listed.append(key)
        return listed, gone

    def mark(self, key: K) -> None:
        """Something the follower may need to hear about `key` moved on the leader."""
        if key in self.partitions:
            self.dirty.add(key)
            if self.on_dirty is not None:
                self.on_dirty()

    def take_dirty(self) -> set[K]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    def to_check(self, listed: Iterable[K]) -> list[K]:
        """The partitions an incremental request looks at (see the module doc); clears the marks."""
        out = list(dict.fromkeys(listed))
        seen = set(out)
        for key in (*self.take_dirty(), *self.pending):
            if key not in seen and key in self.partitions:
                seen.add(key)
                out.append(key)
        self.pending = set()
        return out

    def keep_checking(self, key: K) -> None:
        """The follower is behind on `key`: look at it again at the next request."""
        if key in self.partitions:
            self.pending.add(key)

    def drop(self, key: K) -> bool:
        """`key` was answered with an error: it leaves the session."""
        self.dirty.discard(key)
        self.pending.discard(key)
        return self.partitions.pop(key, None) is not None


class FetchSessionCache(Generic[K]):
    """The leader's bounded set of sessions, least recently used first."""

    def __init__(self, *, new_id: Callable[[], int], slots: int = DEFAULT_CACHE_SLOTS) -> None:
        if slots < 0:
            raise ValueError("slots must not be negative")
        self.slots = slots
        self._new_id = new_id
        self.sessions: OrderedDict[int, LeaderSession[K]] = OrderedDict()

    def __len__(self) -> int:
        return len(self.sessions)

    def create(
        self, replica_id: int, now_ms: float
    ) -> tuple[LeaderSession[K] | None, list[LeaderSession[K]]]:
        """Open a session for a full request: (the session, or None with no slots; the sessions closed)."""
        closed = [s for s in self.sessions.values() if s.replica_id == replica_id]
        for old in closed:
            del self.sessions[old.session_id]
        if self.slots == 0:
            return None, closed
        while len(self.sessions) >= self.slots:
            _, evicted = self.sessions.popitem(last=False)
            closed.append(evicted)
        session_id = self._new_id()
        while session_id == INVALID_SESSION_ID or session_id in self.sessions:
            session_id = self._new_id()
        session: LeaderSession[K] = LeaderSession(
            session_id, replica_id, epoch=next_epoch(INITIAL_EPOCH), last_used_ms=now_ms
        )
        self.sessions[session_id] = session
        return session, closed

    def lookup(
        self, session_id: int, epoch: int, replica_id: int, now_ms: float
    ) -> LeaderSession[K] | SessionError:
        """The session an incremental request continues, its epoch moved on; or why not (70, 71)."""
        session = self.sessions.get(session_id)
        if session is None or session.replica_id != replica_id:
            return SessionError.FETCH_SESSION_ID_NOT_FOUND
        if epoch != session.epoch:
            return SessionError.INVALID_FETCH_SESSION_EPOCH
        session.epoch = next_epoch(epoch)
        session.last_used_ms = now_ms
        self.sessions.move_to_end(session_id)
        return session

    def close(self, session_id: int, replica_id: int) -> LeaderSession[K] | None:
        session = self.sessions.get(session_id)
        if session is None or session.replica_id != replica_id:
            return None
        del self.sessions[session_id]
        return session
