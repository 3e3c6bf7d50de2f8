"""WriteTxnMarkers (Kafka's API 27, v1): the transaction coordinator asks each partition leader
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
  / NOT_ENOUGH_REPLICAS_AFTER_APPEND as a produce answers them).
* The markers are checked as transaction version 1 (we serve version 1 only: docs/decisions.md).
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

TRANSACTION_VERSION: Final = 1  # the finalized transaction.version we serve
MARKER_TIMEOUT_MS: Final = 30_000  # Kafka's request.timeout.ms default, its coordinator appends' bound


class TxnMarkersApi:
    """The WriteTxnMarkers handler; `group_coordinator` is told of markers on `__consumer_offsets`."""

    def __init__(self, ctx: BrokerContext, group_coordinator: object) -> None:
        self.ctx = ctx
        self.group_coordinator = group_coordinator

    def handlers(self) -> dict[int, Any]:
        return {27: self.write_txn_markers}

    async def write_txn_markers(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        allowed = ctx.allows(conn, AclOperation.CLUSTER_ACTION)
        markers = []
        for marker in body.markers:
            topics = []
            for topic in marker.topics:
                codes = await asyncio.gather(
                    *(
                        self._write(topic.name, int(index), marker, allowed=allowed)
                        for index in topic.partition_indexes
                    )
                )
                topics.append(
                    {
                        "name": topic.name,
                        "partitions": [
                            {"partition_index": index, "error_code": code}
                            for index, code in zip(topic.partition_indexes, codes, strict=True)
                        ],
                    }
                )
            markers.append({"producer_id": marker.producer_id, "topics": topics})
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
            transaction_version=TRANSACTION_VERSION,
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
