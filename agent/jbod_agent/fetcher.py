"""Followers pull from their leaders: one long-polling fetch loop per leader broker, as in Kafka.

Guarantees:
* A follower fetches from the end of its log and names the epoch of its last record, so the
  leader can report a divergence; the follower then truncates (`replication.truncation_offset`)
  before it appends anything, and never keeps records the leader's history does not contain.
* Fetched frames are appended only when they continue the log exactly (base offset = end
  offset) and only while the partition still follows the same leader at the same epoch as when
  the request was sent; anything else is dropped and fetched again.
* An I/O error while appending or truncating takes the dir offline (through the manager).
* The wire format of `POST /v1/replica/fetch` replies: `u32 length | JSON header | frames`; each
  header partition entry says how many bytes of frames follow for it (`size`), in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from jbod_agent.replica_manager import HostedPartition, ReplicaManager, Role
from jbod_core import replication
from jbod_core.errors import ErrorCode

if TYPE_CHECKING:
    from jbod_agent.agent import Agent

log = logging.getLogger("jbod_agent.fetcher")

_LENGTH = struct.Struct(">I")


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


class Fetchers:
    """Starts and stops one fetch loop per leader this broker follows."""

    def __init__(self, agent: Agent, manager: ReplicaManager, token: str) -> None:
        self.agent = agent
        self.manager = manager
        self.token = token
        self.loops: dict[int, asyncio.Task[None]] = {}
        self.changed: dict[int, asyncio.Event] = {}
        manager.on_follow_change.append(self.replan)

    def replan(self) -> None:
        leaders = {
            h.leader_id
            for h in self.manager.partitions.values()
            if h.role is Role.FOLLOWER and h.leader_id >= 0
        }
        for leader in leaders - set(self.loops):
            self.changed[leader] = asyncio.Event()
            task = asyncio.create_task(self._loop(leader), name=f"fetch-from-{leader}")
            task.add_done_callback(_log_failure)
            self.loops[leader] = task
        for leader in leaders:
            self.changed[leader].set()

    async def close(self) -> None:
        for task in self.loops.values():
            task.cancel()
        await asyncio.gather(*self.loops.values(), return_exceptions=True)

    def _leader_url(self, leader: int) -> str | None:
        reg = self.agent.image.brokers.get(leader)
        if reg is None or not reg.listeners:
            return None
        listener = reg.listeners[0]
        return f"http://{listener.host}:{listener.port}"

    def _followed(self, leader: int) -> list[HostedPartition]:
        now = time.monotonic()
        return [
            h
            for h in self.manager.partitions.values()
            if h.role is Role.FOLLOWER and h.leader_id == leader and h.fetch_retry_at <= now
        ]

    async def _loop(self, leader: int) -> None:
        agent = self.agent
        config = agent.config
        backoff = 0.05
        last_warning = 0.0
        # aiohttp's client: about twice as cheap per request as httpx on this hot path.
        async with aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=config.replica_fetch_wait_max_ms / 1000 + 10),
            connector=aiohttp.TCPConnector(limit=4),
        ) as http:
            while not agent.stopping.is_set():
                parts = self._followed(leader)
                url = self._leader_url(leader)
                if not parts or url is None:
                    event = self.changed[leader]
                    event.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(event.wait(), 0.2)
                    if not any(
                        h.role is Role.FOLLOWER and h.leader_id == leader for h in self.manager.partitions.values()
                    ):
                        del self.loops[leader]
                        return
                    continue
                sent = [(h, h.leader_epoch, h.log.end_offset) for h in parts]
                body = {
                    "replicaId": agent.node_id,
                    "brokerEpoch": agent.epoch,
                    "maxWaitMs": config.replica_fetch_wait_max_ms,
                    "maxBytes": config.replica_fetch_response_max_bytes,
                    "partitionMaxBytes": config.replica_fetch_max_bytes,
                    "partitions": [
                        {
                            "topicId": str(h.key[0]),
                            "partition": h.key[1],
                            "fetchOffset": offset,
                            "lastFetchedEpoch": h.log.latest_epoch,
                            "currentLeaderEpoch": epoch,
                        }
                        for h, epoch, offset in sent
                    ],
                }
                try:
                    async with http.post(f"{url}/v1/replica/fetch", data=orjson.dumps(body)) as response:
                        content = await response.read()
                        if response.status != 200:
                            raise ValueError(f"HTTP {response.status}: {content[:200]!r}")
                    header, payload = decode_reply(content)
                except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                    now = time.monotonic()
                    if now - last_warning > 10:
                        log.warning("Fetching from broker %d failed: %s", leader, exc)
                        last_warning = now
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 1.0)
                    continue
                backoff = 0.05
                self._apply(sent, header, payload)

    def _apply(
        self,
        sent: list[tuple[HostedPartition, int, int]],
        header: dict[str, Any],
        payload: memoryview,
    ) -> None:
        position = 0
        entries = header.get("partitions", [])
        for (hosted, epoch, offset), entry in zip(sent, entries, strict=False):
            size = int(entry.get("size", 0))
            data = payload[position : position + size]
            position += size
            current = (
                self.manager.partitions.get(hosted.key) is hosted
                and hosted.role is Role.FOLLOWER
                and hosted.leader_epoch == epoch
            )
            if not current:
                continue
            code = entry.get("errorCode", 0)
            try:
                if code == ErrorCode.NONE:
                    self._apply_data(hosted, offset, entry, data)
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._out_of_range(hosted, offset, entry)
                else:
                    hosted.fetch_retry_at = time.monotonic() + 0.2
            except OSError as exc:
                self.manager.storage_error(hosted, exc, "replicating")

    def _apply_data(self, hosted: HostedPartition, offset: int, entry: dict[str, Any], data: memoryview) -> None:
        log_ = hosted.log
        diverging = entry.get("divergingEpoch")
        if diverging is not None:
            target = replication.truncation_offset(
                replication.DivergingEpoch(diverging["epoch"], diverging["endOffset"]),
                log_.epoch_end_offset,
                local_end_offset=log_.end_offset,
                high_watermark=log_.high_watermark,
            )
            target = min(max(target, log_.log_start_offset), log_.end_offset)
            if target < log_.end_offset:
                log.info(
                    "%s: truncating %d record(s) to offset %d (diverged from the leader at epoch %d)",
                    hosted.name,
                    log_.end_offset - target,
                    target,
                    diverging["epoch"],
                )
                self.agent.mover.source_truncated(hosted.key, target)
            # Even with nothing to cut, epochs that start at or after the target go (an epoch this
            # broker recorded as leader but never wrote in), or the next fetch would diverge again.
            log_.truncate_to(target)
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
            self.agent.mover.source_truncated(hosted.key, start)
        elif offset > end:
            log.warning("%s: ahead of the leader's end offset %d; truncating", hosted.name, end)
            log_.truncate_to(max(end, log_.log_start_offset))
            self.agent.mover.source_truncated(hosted.key, max(end, log_.log_start_offset))
