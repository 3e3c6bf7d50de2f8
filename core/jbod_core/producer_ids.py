"""Producer id blocks: Kafka's AllocateProducerIds, as KRaft's ProducerIdControlManager decides it
(an extension of the contract, docs/api.md). Brokers hand the ids out to idempotent producers
(InitProducerId).

Guarantees:
* Unknown broker 102 (BROKER_ID_NOT_REGISTERED), wrong broker epoch 77 (STALE_BROKER_EPOCH); a
  rejection writes nothing.
* Otherwise the broker gets the next `BLOCK_SIZE` ids from the image's watermark, and one
  `ProducerIdsRecord` moves the watermark past them. The controller replies only once that record
  is durable (its writer's rule), and replay never lets the watermark go down, so no id is handed
  out twice, across restarts and failovers alike.
* A block that would pass the largest int64 is refused with -1 (UNKNOWN_SERVER_ERROR), as Kafka.
"""

from __future__ import annotations

from typing import Final

from jbod_core import records
from jbod_core.errors import ErrorCode
from jbod_core.image import ClusterImage
from jbod_core.messages import INT64_MAX, AllocateProducerIdsReply, AllocateProducerIdsRequest

BLOCK_SIZE: Final = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


def allocate_producer_ids(
    image: ClusterImage, request: AllocateProducerIdsRequest
) -> tuple[list[records.Record], AllocateProducerIdsReply]:
    reg = image.brokers.get(request.broker_id)
    if reg is None:
        return [], AllocateProducerIdsReply(
            error_code=ErrorCode.BROKER_ID_NOT_REGISTERED,
            error_message=f"Broker {request.broker_id} is not registered",
        )
    if reg.broker_epoch != request.broker_epoch:
        return [], AllocateProducerIdsReply(
            error_code=ErrorCode.STALE_BROKER_EPOCH,
            error_message=f"Broker {request.broker_id} has epoch {reg.broker_epoch}, not {request.broker_epoch}",
        )
    start = image.next_producer_id
    if start > INT64_MAX - BLOCK_SIZE:
        return [], AllocateProducerIdsReply(
            error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
            error_message="Exhausted all producer ids: the next block would pass the int64 limit",
        )
    record = records.ProducerIdsRecord(
        broker_id=request.broker_id, broker_epoch=request.broker_epoch, next_producer_id=start + BLOCK_SIZE
    )
    return [record], AllocateProducerIdsReply(producer_id_start=start, producer_id_len=BLOCK_SIZE)
