"""The leader side of follower fetches (Kafka's Fetch with a replica id, decoded by the Kafka
listener's `replica_wire`) with incremental fetch sessions.

Guarantees:
* Follower fetches use incremental fetch sessions (`jbod_core.fetch_session`, KIP-227): a session's
  idle partitions cost nothing per request. A request looks only at the partitions it lists, the
  ones marked since (every event that can change a follower's answer marks the partition in each
  session holding it: `HostedPartition.fetch_sessions`, `wake_data_waiters`) and those whose
  follower is behind. Sessionless and full requests answer every listed partition; an unknown
  session or a wrong epoch answers the top-level error 70 / 71 and nothing else.
* A partition is answered by its leader only: 56 in an offline dir, 3 unknown, 6 not led here or
  not a replica of it, 74 for a follower's older leader epoch; a follower whose last fetched epoch
  disagrees with the leader's history gets `divergingEpoch` (`divergence.leader_check`) and no
  data. A partition answered with an error other than OFFSET_OUT_OF_RANGE leaves the session.
* Progress first: a fetch at offset N proves the follower holds everything below N, so it moves
  the follower's progress and the high watermark before anything is read; the follower's log
  start offset (its request's `log_start_offset`, sent again whenever it moves) is recorded with
  it, and the DeleteRecords waiting for it are answered (`complete_delayed_requests`); a
  caught-up idle partition counts as fetched at every request of its session for the ISR lag rule
  (`replication.SessionClock`). A follower that reached the high watermark while out of the ISR
  asks the ISR upkeep to look at once (`on_isr_expandable`).
* A request long-polls up to `max_wait_ms` of the injected clock until a partition has news (data,
  an error, a divergence); the reply stays within `max_bytes` and each partition's `max_bytes`
  (a session partition the request does not list keeps the follower's latest one).
* The answer is a typed `ReplicaFetchAnswer` (`jbod_core.replica_fetch`); the records are the
  stored batches as they are.
* Replication throttle (issue 24, `replication_quota`): a partition the leader-side quota throttles
  for this follower (named in `leader.replication.throttled.replicas`, the follower out of the
  ISR) is answered without data while the quota is exceeded; the bytes it is sent are recorded.
  In-sync followers and unthrottled partitions never wait for it.
* An I/O error while reading takes the dir offline (`ReplicaManager.storage_error`) and answers
  KAFKA_STORAGE_ERROR for that partition.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from jbod_agent.partitions.replica_manager import HostedPartition, ReplicaManager, Role
from jbod_agent.ports import Clock, monotonic_ms
from jbod_agent.replication import divergence
from jbod_agent.replication.replication_quota import ReplicationQuota
from jbod_agent.storage.local_log import OffsetOutOfRangeError
from jbod_core import fetch_session, replication
from jbod_core.errors import ErrorCode
from jbod_core.image import PartitionKey
from jbod_core.replica_fetch import ReplicaFetch, ReplicaFetchAnswer, ReplicaPartitionAnswer
from jbod_core.replication import FollowerProgress

log = logging.getLogger("jbod_agent.replicas")
DEFAULT_PARTITION_MAX_BYTES: Final = 1024 * 1024  # Kafka's replica.fetch.max.bytes


@dataclass(eq=False, slots=True)
class _FetchState:
    """One partition of a follower's fetch, checked once per request (again if marked meanwhile)."""

    key: PartitionKey
    position: fetch_session.FetchPosition
    hosted: HostedPartition | None  # None: answered with `code`
    code: ErrorCode
    diverging: replication.DivergingEpoch | None


@dataclass(eq=False, slots=True)
class _Answer:
    """What the reply would say of one partition now."""

    answer: ReplicaPartitionAnswer
    news: bool  # data, an error or a divergence: ends the long-poll


class ReplicaFetchServer:
    """Answers the followers' fetches of the manager's partitions and keeps their sessions."""

    def __init__(
        self,
        manager: ReplicaManager,
        *,
        clock: Clock,
        on_isr_expandable: Callable[[], None],
        quota: ReplicationQuota | None = None,
    ) -> None:
        self.manager = manager
        self.quota = quota  # the leader side's replication throttle (issue 24)
        self.clock = clock
        self.on_isr_expandable = on_isr_expandable
        self.sessions: fetch_session.FetchSessionCache[PartitionKey] = fetch_session.FetchSessionCache(
            new_id=lambda: 1 + secrets.randbelow(2**31 - 1)
        )
        # Served follower fetches by kind (sessionless, full, incremental, rejected: 70 / 71) and
        # the partitions they listed: the metrics of `http_api`.
        self.requests = dict.fromkeys(("sessionless", "full", "incremental", "rejected"), 0)
        self.request_partitions = dict.fromkeys(("sessionless", "full", "incremental"), 0)
        self._partition_max_bytes: dict[int, int] = {}  # by follower: the latest it asked for

    async def serve(self, request: ReplicaFetch) -> ReplicaFetchAnswer:
        """Answer a follower: an answer per partition answered, records as stored.

        Sessionless and full requests answer every listed partition; an incremental one looks at
        `LeaderSession.to_check` only and answers what changed (`jbod_core.fetch_session`). An
        unknown session or a wrong epoch answers the top-level error 70 / 71 and nothing else.
        """
        now = monotonic_ms(self.clock)
        replica = request.replica_id
        cache = self.sessions
        kind = {fetch_session.FINAL_EPOCH: "sessionless", fetch_session.INITIAL_EPOCH: "full"}.get(
            request.session_epoch, "incremental"
        )
        self.requests[kind] += 1
        self.request_partitions[kind] += len(request.partitions)
        if request.partitions:
            self._partition_max_bytes[replica] = request.partitions[0].max_bytes
        session: fetch_session.LeaderSession[PartitionKey] | None
        if request.session_epoch == fetch_session.FINAL_EPOCH:
            if request.session_id:
                self._close_session(cache.close(request.session_id, replica))
            session = None
        elif request.session_epoch == fetch_session.INITIAL_EPOCH:
            session, closed = cache.create(replica, now)
            for old in closed:
                self._close_session(old)
            if session is not None:
                log.debug("Opened fetch session %d for broker %d", session.session_id, replica)
        else:
            found = cache.lookup(request.session_id, request.session_epoch, replica, now)
            if isinstance(found, fetch_session.SessionError):
                self.requests["rejected"] += 1
                return ReplicaFetchAnswer(int(found), 0)
            session = found
        if session is not None:
            return await self._serve_session(session, request, full=request.session_epoch <= 0, now=now)
        # Sessionless (a follower without sessions, or no slots): a session for this request only.
        once: fetch_session.LeaderSession[PartitionKey] = fetch_session.LeaderSession(
            fetch_session.INVALID_SESSION_ID, replica
        )
        try:
            return await self._serve_session(once, request, full=True, now=now, cached=False)
        finally:
            self._close_session(once)

    async def _serve_session(
        self,
        session: fetch_session.LeaderSession[PartitionKey],
        request: ReplicaFetch,
        *,
        full: bool,
        now: float,
        cached: bool = True,
    ) -> ReplicaFetchAnswer:
        replica = request.replica_id
        listed, gone = session.update(((p.key, p.position) for p in request.partitions), request.forgotten)
        for key in gone:
            self._leave_session(session, key)
        keys = listed if full else session.to_check(listed)
        states = {key: self._check(session, key) for key in keys}
        self._record_progress(session, states.values(), replica, now=now, cached=cached)
        deadline = self.clock.monotonic() + request.max_wait_ms / 1000
        answers: dict[PartitionKey, _Answer] = {}
        budget = request.max_bytes
        fresh = list(states)
        while True:
            news = False
            for key in fresh:
                answer = self._answer(request, states[key], budget)
                answers[key] = answer
                budget -= len(answer.answer.records)
                news = news or answer.news
            remaining = deadline - self.clock.monotonic()
            if news or remaining <= 0 or not session.partitions:
                break
            await self._wait_for_session(session, remaining)
            # Partitions marked while waiting (data, leadership, ...) are checked again.
            fresh = [key for key in session.take_dirty() if key in session.partitions]
            for key in fresh:
                states[key] = self._check(session, key)
        return self._reply(session, states, answers, full=full)

    def _record_progress(
        self,
        session: fetch_session.LeaderSession[PartitionKey],
        states: Iterable[_FetchState],
        replica: int,
        *,
        now: float,
        cached: bool,
    ) -> None:
        """Progress first: a fetch at offset N proves the follower holds everything below N."""
        clock = session.clock if cached else None
        expand = False
        for state in states:
            hosted = state.hosted
            if hosted is None:
                continue
            offset = state.position.fetch_offset
            if offset <= hosted.log.end_offset and state.diverging is None:
                progress = hosted.followers.setdefault(replica, FollowerProgress(last_caught_up_ms=now))
                progress.on_fetch(
                    offset,
                    hosted.log.end_offset,
                    now,
                    log_start_offset=state.position.log_start_offset,
                    session=clock,
                )
                hosted.complete_delayed_requests()
                if replica not in hosted.maximal_isr() and offset >= hosted.log.high_watermark:
                    expand = True
            else:
                behind = hosted.followers.get(replica)
                if behind is not None:
                    behind.detach()
        if clock is not None:
            # Every partition whose state moved was looked at above: the idle rest, attached to
            # the clock, were caught up at this request too.
            clock.last_fetch_ms = now
        session.take_dirty()  # marks from the progress above concern partitions answered below
        if expand:
            self.on_isr_expandable()

    def _check(self, session: fetch_session.LeaderSession[PartitionKey], key: PartitionKey) -> _FetchState:
        position = session.partitions[key].position
        replica = session.replica_id
        hosted = self.manager.partitions.get(key)
        code = ErrorCode.NONE
        if key in self.manager.state.offline_local:
            code = ErrorCode.KAFKA_STORAGE_ERROR
        elif self.manager.state.image.partition(key) is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif hosted is None or hosted.role is not Role.LEADER:
            code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        elif position.current_leader_epoch < hosted.leader_epoch:
            code = ErrorCode.FENCED_LEADER_EPOCH
        elif position.current_leader_epoch > hosted.leader_epoch or replica not in hosted.replicas:
            code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        if code is not ErrorCode.NONE or hosted is None:
            return _FetchState(key, position, None, code, None)
        if not session.closed:
            if hosted.fetch_sessions is None:
                hosted.fetch_sessions = set()
            hosted.fetch_sessions.add(session)
        diverging = divergence.leader_check(
            hosted.log, fetch_offset=position.fetch_offset, last_fetched_epoch=position.last_fetched_epoch
        )
        return _FetchState(key, position, hosted, code, diverging)

    def _answer(self, request: ReplicaFetch, state: _FetchState, budget: int) -> _Answer:
        p, hosted, code = state.position, state.hosted, state.code
        key = state.key
        if hosted is None:
            return _Answer(ReplicaPartitionAnswer(key, code), code is not ErrorCode.NONE)
        log_ = hosted.log
        answer = functools.partial(
            ReplicaPartitionAnswer,
            key,
            high_watermark=log_.high_watermark,
            log_start_offset=log_.log_start_offset,
        )
        diverging = state.diverging
        if diverging is not None:
            return _Answer(answer(diverging=diverging), True)
        if p.fetch_offset < log_.log_start_offset or p.fetch_offset > log_.end_offset:
            return _Answer(answer(ErrorCode.OFFSET_OUT_OF_RANGE), True)
        if p.fetch_offset == log_.end_offset or budget <= 0:
            return _Answer(answer(), False)
        return self._answer_data(request, state, answer, budget)

    def _answer_data(
        self,
        request: ReplicaFetch,
        state: _FetchState,
        answer: Callable[..., ReplicaPartitionAnswer],
        budget: int,
    ) -> _Answer:
        """The answer of a partition the follower is behind in: its next batches (none while the
        leader-side throttle holds it back)."""
        hosted = state.hosted
        assert hosted is not None
        quota = self.quota
        throttled = quota is not None and quota.throttled(state.key, request.replica_id)
        if throttled and quota is not None and quota.exceeded():
            quota.skipped += 1
            return _Answer(answer(), False)  # Kafka's leader: left out while the quota is exceeded
        limit = self._partition_max_bytes.get(request.replica_id, DEFAULT_PARTITION_MAX_BYTES)
        data, error = self._read_for_follower(hosted, state.position.fetch_offset, min(limit, budget))
        if error is not ErrorCode.NONE:
            return _Answer(answer(error), True)
        if throttled and quota is not None:
            quota.record(len(data))
        return _Answer(answer(records=data), bool(data))

    def _read_for_follower(
        self, hosted: HostedPartition, offset: int, max_bytes: int
    ) -> tuple[bytes, ErrorCode]:
        """(the batches from `offset`, NONE), or (nothing, the error): out of range or a failed dir."""
        try:
            return hosted.log.read(offset, max_bytes), ErrorCode.NONE
        except OffsetOutOfRangeError:
            return b"", ErrorCode.OFFSET_OUT_OF_RANGE
        except OSError as exc:
            self.manager.storage_error(hosted, exc, "reading for a follower")
            return b"", ErrorCode.KAFKA_STORAGE_ERROR

    def _reply(
        self,
        session: fetch_session.LeaderSession[PartitionKey],
        states: dict[PartitionKey, _FetchState],
        answers: dict[PartitionKey, _Answer],
        *,
        full: bool,
    ) -> ReplicaFetchAnswer:
        parts: list[ReplicaPartitionAnswer] = []
        for key, pending in answers.items():
            state = states[key]
            part = session.partitions.get(key)
            if part is None:
                continue
            answer = pending.answer
            code = answer.error
            hosted = state.hosted
            if (
                code == ErrorCode.NONE
                and hosted is not None
                and state.diverging is None
                and state.position.fetch_offset < hosted.log.end_offset
            ):
                session.keep_checking(key)  # behind (or past the byte budget): look again next time
            if not part.answer_needed(
                full=full,
                has_data=bool(answer.records),
                error_code=code,
                diverging=state.diverging is not None,
                high_watermark=answer.high_watermark,
                log_start_offset=answer.log_start_offset,
            ):
                continue
            parts.append(answer)
            part.sent(high_watermark=answer.high_watermark, log_start_offset=answer.log_start_offset)
            if fetch_session.leaves_session(code):
                session.drop(key)
                self._leave_session(session, key)
        return ReplicaFetchAnswer(int(ErrorCode.NONE), session.session_id, tuple(parts))

    async def _wait_for_session(
        self, session: fetch_session.LeaderSession[PartitionKey], timeout: float
    ) -> None:
        if session.dirty:
            return
        waiter = asyncio.Event()
        wake = session.on_dirty = waiter.set
        try:
            await self.clock.wait(waiter, timeout)
        finally:
            if session.on_dirty is wake:
                session.on_dirty = None

    def _leave_session(self, session: fetch_session.LeaderSession[PartitionKey], key: PartitionKey) -> None:
        """`key` left `session`: the partition stops marking it and stops counting its requests."""
        hosted = self.manager.partitions.get(key)
        if hosted is None:
            return
        if hosted.fetch_sessions is not None:
            hosted.fetch_sessions.discard(session)
        progress = hosted.followers.get(session.replica_id)
        if progress is not None and progress.idle_in is session.clock:
            progress.detach()

    def _close_session(self, session: fetch_session.LeaderSession[PartitionKey] | None) -> None:
        if session is None:
            return
        session.closed = True
        for key in session.partitions:
            self._leave_session(session, key)
        if session.session_id != fetch_session.INVALID_SESSION_ID:
            log.debug("Closed fetch session %d of broker %d", session.session_id, session.replica_id)
