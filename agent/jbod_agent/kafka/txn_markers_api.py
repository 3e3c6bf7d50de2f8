"""WriteTxnMarkers (Kafka's API 27, v1-v2 as Kafka 4.3.1) and DescribeProducers (API 61): the transaction coordinator asks each partition leader
to append a commit or abort marker of a producer's transaction.

Guarantees:
* The principal must be allowed CLUSTER_ACTION on the cluster (the brokers' own principal is):
  otherwise every partition answers CLUSTER_AUTHORIZATION_FAILED and nothing is appended.
* Per partition, as Kafka answers: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
  KAFKA_STORAGE_ERROR from the leader lookup; INVALID_PRODUCER_EPOCH (a marker of an older epoch)
  or TRANSACTION_COORDINATOR_FENCED (an older coordinator epoch) from the producer state, which
  then changes nothing; else the marker batch (`control_records.marker_batch`) is appended as the
  leader's append and recorded in the producer state and the `.txnindex` (`PartitionLog`), and
  the partition is answered once the ISR has it (acks=-1, `Produce.append_marker`; REQUEST_TIMED_OUT
  / NOT_ENOUGH_REPLICAS_AFTER_APPEND as a produce answers them). The partitions of all the
  request's markers are appended and waited for together (the answer comes after the slowest).
* A marker is checked with its `transaction_version` (v2), version 1 in v1 (we finalize
  `transaction.version` 1 only, so our coordinator sends version 1: docs/decisions.md).
* DescribeProducers answers, per partition this broker leads or follows, every producer of its state
  (`PartitionLog.producer_state`: id, epoch, last sequence, last timestamp, coordinator epoch,
  the ongoing transaction's first offset or -1), as Kafka's `activeProducers`; READ on the topic
  (else TOPIC_AUTHORIZATION_FAILED), UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
  KAFKA_STORAGE_ERROR as Kafka answers them.
* After a marker was appended to a partition of `__consumer_offsets`, the group coordinator is
  told (`on_transaction_marker(partition, producer_id, producer_epoch, committed)`: its pending
  transactional offsets become visible or are dropped), when it has that method.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent.kafka.context import BrokerContext
from jbod_agent.kafka.listener import Connection
from jbod_core.acls import AclOperation
from jbod_core.group_records import OFFSETS_TOPIC
from jbod_kafka import protocol

TRANSACTION_VERSION: Final = 1  # v1 markers carry none: checked as version 1
MARKER_TIMEOUT_MS: Final = 30_000  # Kafka's request.timeout.ms default, its coordinator appends' bound


def _refused(partition: int, code: KafkaError, message: str | None = None) -> dict[str, Any]:
    """A partition DescribeProducers answers with an error: no producers (the field is required)."""
    return {
        "partition_index": partition,
        "error_code": code,
        "error_message": message,
        "active_producers": [],
    }


class TxnMarkersApi:
    """The WriteTxnMarkers handler; `group_coordinator` is told of markers on `__consumer_offsets`."""

    def __init__(self, ctx: BrokerContext, group_coordinator: object) -> None:
        self.ctx = ctx
        self.group_coordinator = group_coordinator

    def handlers(self) -> dict[int, Any]:
        return {27: self.write_txn_markers, 61: self.describe_producers}

    async def describe_producers(
        self, ctx: BrokerContext, conn: Connection, request: protocol.Request
    ) -> Any:
        topics = []
        for topic in request.body.topics:
            readable = ctx.allows_topic(conn, AclOperation.READ, topic.name)
            partitions = [
                self._producers_of(topic.name, int(index))
                if readable
                else _refused(int(index), KafkaError.topic_authorization_failed)
                for index in topic.partition_indexes
            ]
            topics.append({"name": topic.name, "partitions": partitions})
        return protocol.build(
            protocol.response_type(request.header.api_key, request.header.api_version),
            throttle_time=0,
            topics=topics,
        )

    def _producers_of(self, topic: str, partition: int) -> dict[str, Any]:
        # Any replica answers, as Kafka's: the Admin client may ask a follower (KIP-664's brokerId).
        hosted, code, message = self.ctx.manager.lookup(topic, partition, any_replica=True)
        if hosted is None:
            return _refused(partition, KafkaError(int(code)), message or None)
        try:
            state = hosted.log.producer_state
        except OSError as exc:
            self.ctx.manager.storage_error(hosted, exc, "reading the producer state")
            return _refused(partition, KafkaError.kafka_storage_error)
        producers = [
            {
                "producer_id": producer_id,
                "producer_epoch": entry.producer_epoch,
                "last_sequence": entry.last_sequence,
                "last_timestamp": entry.batches[-1].max_timestamp_ms
                if entry.batches
                else entry.last_active_ms,
                "coordinator_epoch": entry.coordinator_epoch,
                "current_txn_start_offset": -1
                if entry.current_txn_first_offset is None
                else entry.current_txn_first_offset,
            }
            for producer_id, entry in sorted(state.producers.items())
        ]
        return {"partition_index": partition, "error_code": KafkaError.none, "active_producers": producers}

    async def write_txn_markers(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        allowed = ctx.allows(conn, AclOperation.CLUSTER_ACTION)
        # Every partition of every marker at once: each waits for its ISR, so the request takes
        # the longest of those waits, not their sum (a coordinator batches the markers of many
        # producers into one request).
        codes = iter(
            await asyncio.gather(
                *(
                    self._write(topic.name, int(index), marker, allowed=allowed)
                    for marker in body.markers
                    for topic in marker.topics
                    for index in topic.partition_indexes
                )
            )
        )
        markers = [
            {
                "producer_id": marker.producer_id,
                "topics": [
                    {
                        "name": topic.name,
                        "partitions": [
                            {"partition_index": index, "error_code": next(codes)}
                            for index in topic.partition_indexes
                        ],
                    }
                    for topic in marker.topics
                ],
            }
            for marker in body.markers
        ]
        return protocol.build(
            protocol.response_type(request.header.api_key, request.header.api_version), markers=markers
        )

    async def _write(self, topic: str, partition: int, marker: Any, *, allowed: bool) -> KafkaError:
        if not allowed:
            return KafkaError.cluster_authorization_failed
        result = await self.ctx.produce.append_marker(
            topic,
            partition,
            producer_id=int(marker.producer_id),
            producer_epoch=int(marker.producer_epoch),
            coordinator_epoch=int(marker.coordinator_epoch),
            committed=bool(marker.transaction_result),
            transaction_version=int(getattr(marker, "transaction_version", TRANSACTION_VERSION)),
            timeout_ms=MARKER_TIMEOUT_MS,
        )
        code = KafkaError(int(result.error))
        if code is KafkaError.none and topic == OFFSETS_TOPIC:
            on_marker = getattr(self.group_coordinator, "on_transaction_marker", None)
            if on_marker is not None:
                await on_marker(
                    partition,
                    int(marker.producer_id),
                    int(marker.producer_epoch),
                    bool(marker.transaction_result),
                )
        return code
