"""Followers pull from their leaders: one long-polling fetch loop per leader broker, as in Kafka,
with Kafka's Fetch (a replica id) over the leaders' inter-broker listener (issue 31).

Guarantees:
* A follower fetches from the end of its log and names the epoch of its last record, so the
  leader can report a divergence; the follower then truncates (`divergence.truncate_follower`)
  before it appends anything, and never keeps records the leader's history does not contain.
  It also names its log start offset, so the leader knows when a DeleteRecords reached it; a
  log start moved by the leader's answer is sent in the next incremental request.
* Fetched frames are appended only when they continue the log exactly (base offset = end
  offset) and only while the partition still follows the same leader at the same epoch as when
  the request was sent; anything else is dropped and fetched again.
* An I/O error while appending or truncating takes the dir offline (through the manager).
* Each loop keeps an incremental fetch session with its leader (`jbod_core.fetch_session`,
  KIP-227): after one full request, a request carries only the partitions whose position
  changed or that were added (at most `MAX_PARTITIONS_PER_REQUEST`, the rest in the next one)
  and `forgotten` for those no longer followed. What changed is learned from the replica
  manager's `on_partition_change` hook and from the loop's own appends and truncations, never by
  scanning every partition; a full request (after a start, a failed request, or the leader's
  70 / 71) does scan them. A partition answered with an error leaves the session and is added
  back after 0.2 s. A leader without sessions gets sessionless full requests, as before.
* Replication throttle (issue 24, `replication_quota`): the bytes fetched for a partition the
  follower-side quota throttles (named in `follower.replication.throttled.replicas`, this broker
  out of the ISR) are recorded; once the quota is exceeded the partition leaves the fetches
  until the quota allows bytes again (its retry time). Other partitions are fetched as before.
* A loop keeps one connection to its leader (`peer_link`: `inter.broker.listener.name`, TLS with
  the broker's own certificate, SASL as `jbod-broker` with the cluster token), opened again
  after a failure; a leader that registered no such listener is not fetched from until it does.
* A partition answered OFFSET_OUT_OF_RANGE starts over at the leader's log start when it is
  behind it, else (ahead of the leader's end) truncates to the leader's high watermark, below
  which the leader holds everything, and fetches the rest again.
* Time is the injected clock's: the retry delays, the backoff after a failed request and the
  spacing of its warnings. Only the connection's own timeout is real time.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

from jbod_agent.partitions.replica_manager import HostedPartition, ReplicaManager, Role
from jbod_agent.ports import Clock, wall_ms
from jbod_agent.replication import divergence, replica_wire
from jbod_agent.replication.peer_link import INTER_BROKER_USER, PeerConnection, PeerError, PeerLogin
from jbod_agent.replication.replication_quota import ReplicationQuota
from jbod_agent.state import AgentState
from jbod_core import fetch_session
from jbod_core.errors import ErrorCode
from jbod_core.image import PartitionKey
from jbod_core.messages import MAX_PARTITIONS_PER_REQUEST
from jbod_core.replica_fetch import ReplicaFetch, ReplicaFetchAnswer, ReplicaPartitionAnswer, WantedPartition
from jbod_kafka import fetch_response
from jbod_runtime.tls import ClientTls

log = logging.getLogger("jbod_agent.fetcher")

RETRY_AFTER_ERROR_S = 0.2
#: How long a follower waits for its leader beyond the long-poll itself.
ANSWER_GRACE_S = 10.0


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("Fetcher %s failed", task.get_name(), exc_info=task.exception())


class _LeaderLoop:
    """What one fetch loop keeps between requests."""

    def __init__(self) -> None:
        self.session: fetch_session.FetchSessionBuilder[PartitionKey] = fetch_session.FetchSessionBuilder(
            max_partitions=MAX_PARTITIONS_PER_REQUEST
        )
        self.changed: set[PartitionKey] = set()  # partitions whose position may have moved
        self.retry: dict[PartitionKey, float] = {}  # answered with an error: back in the session then
        self.wake = asyncio.Event()


class Fetchers:
    """Starts and stops one fetch loop per leader this broker follows."""

    def __init__(  # noqa: PLR0913  the broker, its replicas and token, then keyword collaborators
        self,
        broker: AgentState,
        manager: ReplicaManager,
        token: str,
        *,
        clock: Clock,
        on_source_truncated: Callable[[PartitionKey, int], None],
        quota: ReplicationQuota | None = None,
    ) -> None:
        self.broker = broker
        self.quota = quota  # the follower side's replication throttle (issue 24)
        self.clock = clock
        self.on_source_truncated = on_source_truncated
        self.manager = manager
        self.token = token
        self.loops: dict[int, asyncio.Task[None]] = {}
        self.state: dict[int, _LeaderLoop] = {}
        self._tls: ClientTls | None = None  # for TLS leaders: the broker's truststore and keystore
        manager.on_follow_change.append(self.replan)
        manager.on_partition_change.append(self.touch)

    def replan(self) -> None:
        leaders = {
            h.leader_id
            for h in self.manager.partitions.values()
            if h.role is Role.FOLLOWER and h.leader_id >= 0
        }
        for leader in leaders - set(self.loops):
            self.state[leader] = _LeaderLoop()
            task = asyncio.create_task(self._loop(leader), name=f"fetch-from-{leader}")
            task.add_done_callback(_log_failure)
            self.loops[leader] = task
        for leader in leaders:
            self.state[leader].wake.set()

    def touch(self, key: PartitionKey) -> None:
        """`key`'s role, leader, epoch or log may have changed: every loop re-reads its position."""
        for state in self.state.values():
            if not state.changed:  # the first change since the loop last planned wakes it
                state.wake.set()
            state.changed.add(key)

    async def close(self) -> None:
        for task in self.loops.values():
            task.cancel()
        await asyncio.gather(*self.loops.values(), return_exceptions=True)

    def _leader_endpoint(self, leader: int) -> tuple[str, int] | None:
        """The leader's inter-broker listener, as it registered it (None: it has none)."""
        reg = self.broker.image.brokers.get(leader)
        name = self.broker.config.inter_broker_listener_name
        for listener in () if reg is None else reg.listeners:
            if listener.name == name:
                return listener.host, listener.port
        return None

    async def _connect(self, endpoint: tuple[str, int]) -> PeerConnection:
        config = self.broker.config
        listener = config.inter_broker_listener
        tls = None
        if listener.tls:
            client_tls = self._client_tls()
            client_tls.refresh()
            tls = client_tls.context
        return await PeerConnection.open(
            *endpoint,
            tls=tls,
            login=PeerLogin(
                config.sasl_mechanism_inter_broker_protocol if listener.authenticates else None,
                INTER_BROKER_USER,
                self.token,
            ),
            client_id=f"broker-{self.broker.node_id}-fetcher",
            timeout=ANSWER_GRACE_S,
        )

    def _client_tls(self) -> ClientTls:
        """The TLS of the fetch loops (made once; refreshed before each request)."""
        if self._tls is None:
            self._tls = self.broker.config.client_tls()
        return self._tls

    def _position(
        self, hosted: HostedPartition | None, leader: int, now: float
    ) -> fetch_session.FetchPosition | None:
        """Where to fetch `hosted` from `leader` now; None when it is not fetched from there now."""
        if (
            hosted is None
            or hosted.role is not Role.FOLLOWER
            or hosted.leader_id != leader
            or hosted.fetch_retry_at > now
        ):
            return None
        log_ = hosted.log
        return fetch_session.FetchPosition(
            log_.end_offset, log_.latest_epoch, hosted.leader_epoch, log_.log_start_offset
        )

    def _plan(self, leader: int, state: _LeaderLoop) -> fetch_session.FetchPlan[PartitionKey]:
        now = self.clock.monotonic()
        for key, at in list(state.retry.items()):
            if at <= now:
                del state.retry[key]
                state.changed.add(key)
        session = state.session
        partitions = self.manager.partitions
        if session.needs_full:
            state.changed.clear()
            wanted: dict[PartitionKey, fetch_session.FetchPosition] = {}
            for key, hosted in partitions.items():
                position = self._position(hosted, leader, now)
                if position is not None:
                    wanted[key] = position
            return session.full(wanted)
        changes = {key: self._position(partitions.get(key), leader, now) for key in state.changed}
        state.changed.clear()
        return session.incremental(changes)

    def _follows(self, leader: int) -> bool:
        state = self.state[leader]
        if state.retry or not state.session.idle:
            return True
        hosted = self.manager.partitions.values()
        return any(h.role is Role.FOLLOWER and h.leader_id == leader for h in hosted)

    async def _loop(self, leader: int) -> None:
        broker = self.broker
        config = broker.config
        state = self.state[leader]
        backoff = 0.05
        last_warning = 0.0
        connection: PeerConnection | None = None
        connected_to: tuple[str, int] | None = None
        try:
            while not broker.stopping.is_set():
                endpoint = self._leader_endpoint(leader)
                plan = self._plan(leader, state) if endpoint is not None else None
                if endpoint is None or plan is None or (plan.empty and state.session.idle):
                    state.wake.clear()
                    await self.clock.wait(state.wake, RETRY_AFTER_ERROR_S)
                    if not self._follows(leader):
                        del self.loops[leader]
                        del self.state[leader]
                        return
                    continue
                fetch = ReplicaFetch(
                    replica_id=broker.node_id,
                    broker_epoch=broker.epoch,
                    max_wait_ms=config.replica_fetch_wait_max_ms,
                    min_bytes=1,
                    max_bytes=config.replica_fetch_response_max_bytes,
                    session_id=plan.session_id,
                    session_epoch=plan.epoch,
                    partitions=tuple(
                        WantedPartition(key, position, config.replica_fetch_max_bytes)
                        for key, position in plan.partitions
                    ),
                    forgotten=plan.forgotten,
                )
                try:
                    if connection is None or connection.closed or connected_to != endpoint:
                        if connection is not None:
                            connection.close()
                        connection, connected_to = None, endpoint
                        connection = await self._connect(endpoint)
                    frame = await connection.exchange(
                        functools.partial(self._fetch_frame, fetch, client_id=connection.client_id),
                        what="a Fetch",
                        timeout=config.replica_fetch_wait_max_ms / 1000 + ANSWER_GRACE_S,
                    )
                    answer = replica_wire.answer_of(frame)
                except (PeerError, fetch_response.MalformedFetchResponseError) as exc:
                    if connection is not None:
                        connection.close()  # a connection that failed once is not used again
                    state.session.on_failure()
                    now = self.clock.monotonic()
                    if now - last_warning > 10:
                        log.warning("Fetching from broker %d failed: %s", leader, exc)
                        last_warning = now
                    await self.clock.sleep(backoff)
                    backoff = min(backoff * 2, 1.0)
                    continue
                backoff = 0.05
                if not state.session.on_reply(plan, session_id=answer.session_id, error_code=answer.error):
                    log.info(
                        "Fetch session with broker %d ended (errorCode %d); fetching in full",
                        leader,
                        answer.error,
                    )
                    continue
                self._apply(leader, state, plan, answer)
                await self._forced_flushes(state)
        finally:
            if connection is not None:
                connection.close()

    async def _forced_flushes(self, state: _LeaderLoop) -> None:
        """fsync the logs that reached their `flush.messages` with this answer, before the next
        fetch reports their new end offsets (as a Kafka follower flushes on append)."""
        for key in list(state.changed):
            hosted = self.manager.partitions.get(key)
            if hosted is not None and hosted.log.flush_due:
                await self.manager.forced_flush(hosted, now_ms=wall_ms(self.clock))

    def _fetch_frame(self, fetch: ReplicaFetch, correlation_id: int, *, client_id: str) -> bytes:
        return replica_wire.fetch_frame(fetch, correlation_id=correlation_id, client_id=client_id)

    def _apply(
        self,
        leader: int,
        state: _LeaderLoop,
        plan: fetch_session.FetchPlan[PartitionKey],
        answer: ReplicaFetchAnswer,
    ) -> None:
        positions = state.session.answered_positions(plan)
        dropped: list[PartitionKey] = []
        for part in answer.partitions:
            key = part.key
            code = part.error
            if fetch_session.leaves_session(code):
                dropped.append(key)
            sent = positions.get(key)
            hosted = self.manager.partitions.get(key)
            current = (
                sent is not None
                and hosted is not None
                and hosted.role is Role.FOLLOWER
                and hosted.leader_id == leader
                and hosted.leader_epoch == sent.current_leader_epoch
            )
            if not current or hosted is None or sent is None:
                state.changed.add(key)  # the session's view is stale: say where it stands now
                continue
            offset = sent.fetch_offset
            try:
                if code == ErrorCode.NONE:
                    self._apply_data(hosted, offset, part)
                    self._throttle(state, key, hosted, len(part.records))
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._out_of_range(hosted, offset, part)
                else:
                    if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                        log.warning(
                            "%s: broker %d refuses this broker's replica fetches (not authorized)",
                            hosted.name,
                            leader,
                        )
                    hosted.fetch_retry_at = self.clock.monotonic() + RETRY_AFTER_ERROR_S
                    state.retry[key] = hosted.fetch_retry_at
            except OSError as exc:
                self.manager.storage_error(hosted, exc, "replicating")
            if (
                part.records
                or code != ErrorCode.NONE
                or part.diverging is not None
                or hosted.log.end_offset != offset
                or hosted.log.log_start_offset != sent.log_start_offset
            ):
                state.changed.add(key)
        state.session.dropped(dropped)

    def _throttle(self, state: _LeaderLoop, key: PartitionKey, hosted: HostedPartition, size: int) -> None:
        """Record a throttled partition's fetched bytes; once the quota is exceeded, leave the
        partition out of the fetches (as its retry) until the quota allows bytes again."""
        quota = self.quota
        if quota is None or not quota.throttled(key, self.broker.node_id):
            return
        quota.record(size)
        if quota.exceeded():
            quota.skipped += 1
            hosted.fetch_retry_at = self.clock.monotonic() + quota.wait_s()
            state.retry[key] = hosted.fetch_retry_at

    def _apply_data(self, hosted: HostedPartition, offset: int, part: ReplicaPartitionAnswer) -> None:
        log_ = hosted.log
        diverging = part.diverging
        if diverging is not None:
            end = log_.end_offset
            target = divergence.truncate_follower(log_, diverging)
            if target < end:
                log.info(
                    "%s: truncated %d record(s) to offset %d (diverged from the leader at epoch %d)",
                    hosted.name,
                    end - target,
                    target,
                    diverging.epoch,
                )
                self.on_source_truncated(hosted.key, target)
            return
        if part.records and log_.end_offset == offset:
            log_.append_replicated(part.records, now_ms=wall_ms(self.clock))
            hosted.dirty = True
        if part.log_start_offset > log_.log_start_offset:
            log_.delete_records_before(part.log_start_offset)  # the leader's DeleteRecords
        if part.high_watermark >= 0:
            before = log_.high_watermark
            log_.high_watermark = min(part.high_watermark, log_.end_offset)
            if log_.high_watermark != before:
                hosted.wake_data_waiters()  # consumers reading from this follower (KIP-392)

    def _out_of_range(self, hosted: HostedPartition, offset: int, part: ReplicaPartitionAnswer) -> None:
        log_ = hosted.log
        start = part.log_start_offset
        if start < 0 or part.high_watermark < 0:
            return  # a leader that gave no bounds: fetched again after the retry
        if offset < start:
            log.warning("%s: the leader's log starts at %d; starting over there", hosted.name, start)
            log_.truncate_fully_and_start_at(start)
            self.on_source_truncated(hosted.key, start)
        else:
            target = max(min(part.high_watermark, log_.end_offset), log_.log_start_offset)
            log.warning(
                "%s: ahead of the leader's end offset; truncating to its high watermark %d",
                hosted.name,
                target,
            )
            log_.truncate_to(target)
            self.on_source_truncated(hosted.key, target)
