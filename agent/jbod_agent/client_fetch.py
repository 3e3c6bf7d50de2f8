"""Consumers' fetches from partition leaders: records below the high watermark, long-polled.

Guarantees:
* Only the leader serves a consumer (`ReplicaManager.lookup`: 3 / 6 / 56 otherwise), and only
  records below the high watermark: a consumer never sees a record the ISR may lose.
* An offset outside [log start, end offset] answers OFFSET_OUT_OF_RANGE (1) with the bounds; a
  read that retention overtakes is answered again from the new start. An I/O error takes the dir
  offline (`ReplicaManager.storage_error`) and answers KAFKA_STORAGE_ERROR.
* With nothing to return, a fetch waits up to `maxWaitMs` of the injected clock and wakes as soon
  as the partition has news (an append, a high watermark or log start move, a leadership change:
  `HostedPartition.wake_data_waiters`). `wait_for_data` is the same wait for the Kafka listener's
  fetch over several partitions.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterable
from typing import Any

from jbod_agent.partition_log import OffsetOutOfRangeError
from jbod_agent.ports import Clock
from jbod_agent.replica_manager import HostedPartition, ReplicaManager
from jbod_core.errors import ErrorCode
from jbod_kafka import record_batch


class ClientFetch:
    """The HTTP API's consumer fetch, and the wait for data both listeners' fetches share."""

    def __init__(self, manager: ReplicaManager, *, clock: Clock) -> None:
        self.manager = manager
        self.clock = clock

    async def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int
    ) -> dict[str, Any]:
        """`GET /v1/fetch`: the records from `offset` below the high watermark (at most
        `max_bytes` of values, at least one record when one is ready)."""
        deadline = self.clock.monotonic() + max_wait_ms / 1000
        while True:
            hosted, code, message = self.manager.lookup(topic, partition)
            if hosted is None:
                return {"errorCode": int(code), "errorMessage": message, "highWatermark": -1, "records": []}
            log_ = hosted.log
            hw = log_.high_watermark
            if offset < log_.log_start_offset or offset > log_.end_offset:
                return {
                    "errorCode": int(ErrorCode.OFFSET_OUT_OF_RANGE),
                    "errorMessage": f"offset {offset} is outside [{log_.log_start_offset}, {log_.end_offset}]",
                    "highWatermark": hw,
                    "logStartOffset": log_.log_start_offset,
                    "records": [],
                }
            out: list[dict[str, Any]] = []
            if offset < hw:
                try:
                    data = log_.read(offset, max_bytes, max_offset=hw)
                except OffsetOutOfRangeError:
                    continue  # retention moved the start: answer again
                except OSError as exc:
                    self.manager.storage_error(hosted, exc, "reading")
                    return {
                        "errorCode": int(ErrorCode.KAFKA_STORAGE_ERROR),
                        "errorMessage": f"{hosted.name}: reading failed: {exc.strerror or exc}",
                        "highWatermark": -1,
                        "records": [],
                    }
                out = _client_records(data, offset, hw, max_bytes)
            remaining = deadline - self.clock.monotonic()
            if out or remaining <= 0:
                return {
                    "errorCode": 0,
                    "highWatermark": hw,
                    "logStartOffset": log_.log_start_offset,
                    "records": out,
                }
            await self.wait_for_data([hosted], remaining)

    async def wait_for_data(self, hosted: Iterable[HostedPartition], timeout: float) -> None:
        """Return when any of `hosted` has new data (or a moved log start), or after `timeout` s."""
        waiter = asyncio.Event()
        parts = list(hosted)
        for h in parts:
            h.data_waiters.add(waiter)
        try:
            await self.clock.wait(waiter, timeout)
        finally:
            for h in parts:
                h.data_waiters.discard(waiter)


def _client_records(data: bytes, offset: int, high_watermark: int, max_bytes: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    size = 0
    for header in record_batch.iter_headers(data, verify_crc=False):
        frame = memoryview(data)[header.position : header.position + header.size]
        for record in record_batch.decode_records(frame, verify_crc=False):
            if record.offset < offset or record.offset >= high_watermark:
                continue
            key, value = record.key, record.value or b""
            if out and size + len(value) > max_bytes:
                return out
            size += len(value) + (len(key) if key else 0)
            out.append(
                {
                    "offset": record.offset,
                    "key": None if key is None else base64.b64encode(key).decode("ascii"),
                    "value": base64.b64encode(value).decode("ascii"),
                }
            )
    return out
