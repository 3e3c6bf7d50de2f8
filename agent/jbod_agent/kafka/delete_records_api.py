"""DeleteRecords (Kafka's API 21, `kafka-delete-records.sh`, `AdminClient.delete_records`): the
leader of each partition moves its log start offset up to the offset asked for, and answers once
every in-sync replica has moved its own (Kafka's DelayedDeleteRecords).

Guarantees:
* Per partition, in Kafka's order: the topic must be allowed DELETE (else
  TOPIC_AUTHORIZATION_FAILED); unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION; not the
  leader here NOT_LEADER_OR_FOLLOWER; an offline log dir KAFKA_STORAGE_ERROR; the internal
  `__consumer_offsets` INVALID_TOPIC_EXCEPTION; a topic whose `cleanup.policy` lacks `delete`
  POLICY_VIOLATION; an offset that is neither -1 (the high watermark) nor within [0, high
  watermark] OFFSET_OUT_OF_RANGE. Each refused partition answers low watermark -1 and changes
  nothing.
* An accepted partition's log start moves up (never down) and is durable (`log-start-offset`)
  before anything is answered. Followers move theirs from the log start offset of their next Fetch
  response and report it in their next Fetch request.
* The partition is answered once its low watermark (the smallest log start of the leader and the
  maximal ISR, `HostedPartition.low_watermark`) reaches the offset asked for, with that low
  watermark: at once when the leader is the whole ISR, else when a follower's fetch or an ISR
  change brings it there (`HostedPartition.complete_delayed_requests`), without blocking the
  event loop. After the request's `timeout_ms` (of the agent's clock) it answers
  REQUEST_TIMED_OUT with the low watermark of the moment the log start moved, as Kafka's does;
  losing leadership or the log dir meanwhile answers NOT_LEADER_OR_FOLLOWER / KAFKA_STORAGE_ERROR
  with low watermark -1. All partitions of one request share the one timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent import dynamic_configs
from jbod_agent.kafka.context import BrokerContext
from jbod_agent.kafka.listener import Connection
from jbod_agent.partitions.replica_manager import AckWaiter, HostedPartition
from jbod_core import topic_configs
from jbod_core.acls import AclOperation
from jbod_core.errors import ErrorCode
from jbod_core.group_records import OFFSETS_TOPIC
from jbod_kafka import protocol

HIGH_WATERMARK: Final = -1  # Kafka's DeleteRecordsRequest.HIGH_WATERMARK


@dataclass(slots=True)
class _Deletion:
    """One partition of the request: its answer, or (`waiter`) the ISR's log starts it waits for."""

    partition: int
    error: KafkaError
    low_watermark: int = -1
    hosted: HostedPartition | None = None
    waiter: AckWaiter | None = None

    def to_kafka(self) -> dict[str, Any]:
        return {
            "partition_index": self.partition,
            "low_watermark": self.low_watermark,
            "error_code": self.error,
        }


def _refusal(
    ctx: BrokerContext, topic: str, partition: int, offset: int
) -> tuple[HostedPartition | None, KafkaError]:
    """The leader's replica of the partition, or why the partition is refused."""
    hosted, code, _message = ctx.manager.lookup(topic, partition)
    if hosted is None:
        return None, KafkaError(int(code))
    if topic == OFFSETS_TOPIC:
        return None, KafkaError.invalid_topic_exception
    image_topic = ctx.state.image.topics.get(hosted.key[0])
    configs = image_topic.configs if image_topic is not None else {}
    default = dynamic_configs.topic_defaults(ctx.state.config, ctx.state.image)[topic_configs.CLEANUP_POLICY]
    if topic_configs.DELETE not in topic_configs.cleanup_policy(configs, default):
        return None, KafkaError.policy_violation
    if offset != HIGH_WATERMARK and not 0 <= offset <= hosted.log.high_watermark:
        return None, KafkaError.offset_out_of_range
    return hosted, KafkaError.none


def _delete(ctx: BrokerContext, topic: str, partition: int, offset: int) -> _Deletion:
    """Move the leader's log start; the deletion answered, or waiting for the ISR's log starts."""
    hosted, code = _refusal(ctx, topic, partition, offset)
    if hosted is None:
        return _Deletion(partition, code)
    target = hosted.log.high_watermark if offset == HIGH_WATERMARK else offset
    try:
        hosted.log.delete_records_before(target)
    except OSError as exc:
        ctx.manager.storage_error(hosted, exc, "deleting records")
        return _Deletion(partition, KafkaError.kafka_storage_error)
    hosted.wake_data_waiters()  # the followers' sessions answer the new log start
    low_watermark = hosted.low_watermark()
    if low_watermark >= target:
        return _Deletion(partition, KafkaError.none, low_watermark)
    waiter = AckWaiter(target)
    hosted.delete_waiters.append(waiter)
    return _Deletion(partition, KafkaError.none, low_watermark, hosted, waiter)


async def _settle(ctx: BrokerContext, deletion: _Deletion, deadline: float) -> None:
    """Wait (until `deadline` of the agent's clock) for the ISR's log starts to reach the offset."""
    waiter, hosted = deletion.waiter, deletion.hosted
    if waiter is None or hosted is None:
        return
    try:
        settled = await ctx.clock.wait(waiter.done, max(deadline - ctx.clock.monotonic(), 0.0))
    finally:
        if not waiter.done.is_set():  # timed out, or the connection went away
            with contextlib.suppress(ValueError):
                hosted.delete_waiters.remove(waiter)
    if not settled:
        deletion.error = KafkaError.request_timed_out  # with the low watermark first seen, as Kafka
        return
    if waiter.outcome is ErrorCode.NONE:
        deletion.low_watermark = waiter.reached
    else:
        deletion.error, deletion.low_watermark = KafkaError(int(waiter.outcome)), -1


def _refused_topic(topic: Any) -> list[_Deletion]:
    return [
        _Deletion(int(p.partition_index), KafkaError.topic_authorization_failed) for p in topic.partitions
    ]


async def delete_records(ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
    deadline = ctx.clock.monotonic() + request.body.timeout.total_seconds()
    topics: list[tuple[str, list[_Deletion]]] = []
    for topic in request.body.topics:
        if not ctx.allows_topic(conn, AclOperation.DELETE, topic.name):
            topics.append((topic.name, _refused_topic(topic)))
            continue
        deletions = [
            _delete(ctx, topic.name, int(p.partition_index), int(p.offset)) for p in topic.partitions
        ]
        topics.append((topic.name, deletions))
    waiting = [d for _name, deletions in topics for d in deletions if d.waiter is not None]
    if waiting:
        await asyncio.gather(*(_settle(ctx, d, deadline) for d in waiting))
    return protocol.build(
        protocol.response_type(request.header.api_key, request.header.api_version),
        throttle_time=0,
        topics=[{"name": name, "partitions": [d.to_kafka() for d in ds]} for name, ds in topics],
    )
