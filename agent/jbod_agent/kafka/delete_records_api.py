"""DeleteRecords (Kafka's API 21, `kafka-delete-records.sh`, `AdminClient.delete_records`): the
leader of each partition moves its log start offset up to the offset asked for.

Guarantees:
* Per partition, in Kafka's order: the topic must be allowed DELETE (else
  TOPIC_AUTHORIZATION_FAILED); unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION; not the
  leader here NOT_LEADER_OR_FOLLOWER; an offline log dir KAFKA_STORAGE_ERROR; the internal
  `__consumer_offsets` INVALID_TOPIC_EXCEPTION; a topic whose `cleanup.policy` lacks `delete`
  POLICY_VIOLATION; an offset that is neither -1 (the high watermark) nor within [0, high
  watermark] OFFSET_OUT_OF_RANGE. Each refused partition answers low watermark -1 and changes
  nothing.
* An accepted partition's log start moves up (never down) and is durable (`log-start-offset`)
  before the answer; its low watermark is the leader's new log start. Followers move theirs from
  the log start offset of their next Fetch response. Unlike Kafka, the answer does not wait for
  the followers' log starts (docs/decisions.md, "DeleteRecords").
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent.kafka.context import BrokerContext
from jbod_agent.kafka.listener import Connection
from jbod_agent.partitions.replica_manager import HostedPartition
from jbod_core import topic_configs
from jbod_core.acls import AclOperation
from jbod_core.group_records import OFFSETS_TOPIC
from jbod_kafka import protocol

HIGH_WATERMARK: Final = -1  # Kafka's DeleteRecordsRequest.HIGH_WATERMARK


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
    if topic_configs.DELETE not in topic_configs.cleanup_policy(configs):
        return None, KafkaError.policy_violation
    if offset != HIGH_WATERMARK and not 0 <= offset <= hosted.log.high_watermark:
        return None, KafkaError.offset_out_of_range
    return hosted, KafkaError.none


def _delete(ctx: BrokerContext, topic: str, partition: int, offset: int) -> dict[str, Any]:
    hosted, code = _refusal(ctx, topic, partition, offset)
    answer: dict[str, Any] = {"partition_index": partition, "low_watermark": -1, "error_code": code}
    if hosted is None:
        return answer
    target = hosted.log.high_watermark if offset == HIGH_WATERMARK else offset
    try:
        low_watermark = hosted.log.delete_records_before(target)
    except OSError as exc:
        ctx.manager.storage_error(hosted, exc, "deleting records")
        return {**answer, "error_code": KafkaError.kafka_storage_error}
    hosted.wake_data_waiters()  # the followers' sessions answer the new log start
    return {**answer, "low_watermark": low_watermark}


async def delete_records(ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
    topics = []
    for topic in request.body.topics:
        if not ctx.allows_topic(conn, AclOperation.DELETE, topic.name):
            partitions = [
                {
                    "partition_index": p.partition_index,
                    "low_watermark": -1,
                    "error_code": KafkaError.topic_authorization_failed,
                }
                for p in topic.partitions
            ]
        else:
            partitions = [
                _delete(ctx, topic.name, int(p.partition_index), int(p.offset)) for p in topic.partitions
            ]
        topics.append({"name": topic.name, "partitions": partitions})
    return protocol.build(
        protocol.response_type(request.header.api_key, request.header.api_version),
        throttle_time=0,
        topics=topics,
    )
