"""Followers pull from their leaders: one long-polling fetch loop per leader broker, as in Kafka.

Guarantees:
* A follower fetches from the end of its log and names the epoch of its last record, so the
  leader can report a divergence; the follower then truncates (`divergence.truncate_follower`)
  before it appends anything, and never keeps records the leader's history does not contain.
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
* Time is the injected clock's: the retry delays, the backoff after a failed request and the
  spacing of its warnings. Only the HTTP client's own timeout is real time.
* The wire format of `POST /v1/replica/fetch` replies: `u32 length | JSON header | frames`; each
  header partition entry (named by `topicId` and `partition`) says how many bytes of frames
  follow for it (`size`), in order.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from jbod_agent import divergence
from jbod_agent.ports import Clock
from jbod_agent.replica_manager import HostedPartition, ReplicaManager, Role
from jbod_agent.replication_quota import ReplicationQuota
from jbod_agent.state import AgentState
from jbod_core import fetch_session, replication
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid
from jbod_core.image import PartitionKey
from jbod_core.messages import MAX_PARTITIONS_PER_REQUEST
from jbod_runtime.tls import ClientTls

log = logging.getLogger("jbod_agent.fetcher")

_LENGTH = struct.Struct(">I")
RETRY_AFTER_ERROR_S = 0.2


def encode_reply(header: dict[str, Any], payload: list[bytes]) -> bytes:
    head = orjson.dumps(header)
    return b"".join([_LENGTH.pack(len(head)), head, *payload])


def decode_reply(body: bytes) -> tuple[dict[str, Any], memoryview]:
    if len(body) < 4:
        raise ValueError("replica fetch reply shorter than its length prefix")
    (length,) = _LENGTH.unpack_from(body, 0)
    if 4 + length > len(body):
        raise ValueError("replica fetch reply header is cut short")
    header: dict[str, Any] = orjson.loads(body[4 : 4 + length])
    return header, memoryview(body)[4 + length :]


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
        self._tls: ClientTls | None = None  # for https leaders: the broker's truststore and keystore
        self._topic_ids: dict[str, Uuid] = {}
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

    def _leader_url(self, leader: int) -> str | None:
        reg = self.broker.image.brokers.get(leader)
        if reg is None or not reg.listeners:
            return None
        listener = reg.listeners[0]
        scheme = "https" if listener.name == "https" else "http"
        return f"{scheme}://{listener.host}:{listener.port}"

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
        return fetch_session.FetchPosition(log_.end_offset, log_.latest_epoch, hosted.leader_epoch)

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
        # aiohttp's client: about twice as cheap per request as httpx on this hot path.
        async with aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=config.replica_fetch_wait_max_ms / 1000 + 10),
            connector=aiohttp.TCPConnector(limit=4, ssl=self._client_tls().context),
        ) as http:
            while not broker.stopping.is_set():
                url = self._leader_url(leader)
                plan = self._plan(leader, state) if url is not None else None
                if plan is None or (plan.empty and state.session.idle):
                    state.wake.clear()
                    await self.clock.wait(state.wake, RETRY_AFTER_ERROR_S)
                    if not self._follows(leader):
                        del self.loops[leader]
                        del self.state[leader]
                        return
                    continue
                body = {
                    "replicaId": broker.node_id,
                    "brokerEpoch": broker.epoch,
                    "maxWaitMs": config.replica_fetch_wait_max_ms,
                    "maxBytes": config.replica_fetch_response_max_bytes,
                    "partitionMaxBytes": config.replica_fetch_max_bytes,
                    "sessionId": plan.session_id,
                    "sessionEpoch": plan.epoch,
                    "partitions": [
                        {
                            "topicId": str(key[0]),
                            "partition": key[1],
                            "fetchOffset": position.fetch_offset,
                            "lastFetchedEpoch": position.last_fetched_epoch,
                            "currentLeaderEpoch": position.current_leader_epoch,
                        }
                        for key, position in plan.partitions
                    ],
                }
                if plan.forgotten:
                    body["forgotten"] = [{"topicId": str(k[0]), "partition": k[1]} for k in plan.forgotten]
                try:
                    self._client_tls().refresh()
                    async with http.post(f"{url}/v1/replica/fetch", data=orjson.dumps(body)) as response:
                        content = await response.read()
                        if response.status != 200:
                            raise ValueError(f"HTTP {response.status}: {content[:200]!r}")
                    header, payload = decode_reply(content)
                except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                    state.session.on_failure()
                    now = self.clock.monotonic()
                    if now - last_warning > 10:
                        log.warning("Fetching from broker %d failed: %s", leader, exc)
                        last_warning = now
                    await self.clock.sleep(backoff)
                    backoff = min(backoff * 2, 1.0)
                    continue
                backoff = 0.05
                code = int(header.get("errorCode", 0))
                session_id = int(header.get("sessionId", fetch_session.INVALID_SESSION_ID))
                if not state.session.on_reply(plan, session_id=session_id, error_code=code):
                    log.info(
                        "Fetch session with broker %d ended (errorCode %d); fetching in full", leader, code
                    )
                    continue
                self._apply(leader, state, plan, header, payload)

    def _key(self, entry: dict[str, Any]) -> PartitionKey:
        text = entry["topicId"]
        topic_id = self._topic_ids.get(text)
        if topic_id is None:
            topic_id = self._topic_ids[text] = Uuid.parse(text)
        return (topic_id, int(entry["partition"]))

    def _apply(
        self,
        leader: int,
        state: _LeaderLoop,
        plan: fetch_session.FetchPlan[PartitionKey],
        header: dict[str, Any],
        payload: memoryview,
    ) -> None:
        positions = state.session.answered_positions(plan)
        position = 0
        dropped: list[PartitionKey] = []
        for entry in header.get("partitions", []):
            size = int(entry.get("size", 0))
            data = payload[position : position + size]
            position += size
            key = self._key(entry)
            code = entry.get("errorCode", 0)
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
                    self._apply_data(hosted, offset, entry, data)
                    self._throttle(state, key, hosted, size)
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._out_of_range(hosted, offset, entry)
                else:
                    hosted.fetch_retry_at = self.clock.monotonic() + RETRY_AFTER_ERROR_S
                    state.retry[key] = hosted.fetch_retry_at
            except OSError as exc:
                self.manager.storage_error(hosted, exc, "replicating")
            if size or code != ErrorCode.NONE or "divergingEpoch" in entry or hosted.log.end_offset != offset:
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

    def _apply_data(
        self, hosted: HostedPartition, offset: int, entry: dict[str, Any], data: memoryview
    ) -> None:
        log_ = hosted.log
        diverging = entry.get("divergingEpoch")
        if diverging is not None:
            end = log_.end_offset
            target = divergence.truncate_follower(
                log_, replication.DivergingEpoch(diverging["epoch"], diverging["endOffset"])
            )
            if target < end:
                log.info(
                    "%s: truncated %d record(s) to offset %d (diverged from the leader at epoch %d)",
                    hosted.name,
                    end - target,
                    target,
                    diverging["epoch"],
                )
                self.on_source_truncated(hosted.key, target)
            return
        if len(data) and log_.end_offset == offset:
            log_.append_replicated(bytes(data))
            hosted.dirty = True
        hw = entry.get("highWatermark")
        if isinstance(hw, int):
            log_.high_watermark = min(hw, log_.end_offset)

    def _out_of_range(self, hosted: HostedPartition, offset: int, entry: dict[str, Any]) -> None:
        log_ = hosted.log
        start = int(entry.get("logStartOffset", 0))
        end = int(entry.get("endOffset", 0))
        if offset < start:
            log.warning("%s: the leader's log starts at %d; starting over there", hosted.name, start)
            log_.truncate_fully_and_start_at(start)
            self.on_source_truncated(hosted.key, start)
        elif offset > end:
            log.warning("%s: ahead of the leader's end offset %d; truncating", hosted.name, end)
            log_.truncate_to(max(end, log_.log_start_offset))
            self.on_source_truncated(hosted.key, max(end, log_.log_start_offset))
