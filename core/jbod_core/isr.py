"""AlterPartition (protocol §3.4): ISR changes requested by partition leaders.

Guarantees:
* Stale or unknown broker epoch → top-level 77. Per partition, checks run in the contract's order:
  unknown topic id 100, unknown index 3, requester not the leader 6, stale leader epoch 74, stale
  partition epoch 108, `newIsr` not a subset of the replicas or without the leader 42 (also for
  duplicates), an added member that is fenced, unregistered, shutting down or whose replica dir is
  offline 107.
* An accepted change writes one record that sets the ISR and bumps only the partition epoch (the
  leader stays); an ISR equal to the current one writes nothing. The reply carries the
  partition's resulting leader, epochs and ISR.
* An ISR change that brings every adding replica of a reassignment into the ISR completes it
  in a second record (`jbod_core.reassignment.complete`); the reply shows the result.
"""

from __future__ import annotations

from jbod_core import reassignment, records
from jbod_core.draft import Draft
from jbod_core.errors import ErrorCode
from jbod_core.ids import is_online
from jbod_core.image import ClusterImage, PartitionRegistration
from jbod_core.messages import (
    AlterPartitionData,
    AlterPartitionReply,
    AlterPartitionRequest,
    AlterPartitionResult,
    AlterPartitionTopicResult,
)


def _error(index: int, code: ErrorCode) -> AlterPartitionResult:
    return AlterPartitionResult(partition_index=index, error_code=code)


def _result(index: int, part: PartitionRegistration) -> AlterPartitionResult:
    return AlterPartitionResult(
        partition_index=index,
        error_code=ErrorCode.NONE,
        leader=part.leader,
        leader_epoch=part.leader_epoch,
        partition_epoch=part.partition_epoch,
        isr=list(part.isr),
    )


def _validate(
    draft: Draft, broker_id: int, part: PartitionRegistration, data: AlterPartitionData
) -> ErrorCode:
    if part.leader != broker_id:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if data.leader_epoch != part.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if data.partition_epoch != part.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION
    new_isr = data.new_isr
    if (
        len(set(new_isr)) != len(new_isr)
        or broker_id not in new_isr
        or any(b not in part.replicas for b in new_isr)
    ):
        return ErrorCode.INVALID_REQUEST
    for member in new_isr:
        if member in part.isr:
            continue
        reg = draft.broker(member)
        if (
            reg is None
            or reg.fenced
            or reg.in_controlled_shutdown
            or not is_online(part.directory_of(member), reg.log_dirs)
        ):
            return ErrorCode.INELIGIBLE_REPLICA
    return ErrorCode.NONE


def alter_partition(
    image: ClusterImage, request: AlterPartitionRequest
) -> tuple[list[records.Record], AlterPartitionReply]:
    reg = image.brokers.get(request.broker_id)
    if reg is None or reg.broker_epoch != request.broker_epoch:
        return [], AlterPartitionReply(
            error_code=ErrorCode.STALE_BROKER_EPOCH,
            error_message=f"Stale or unknown broker epoch {request.broker_epoch} for broker {request.broker_id}",
        )
    draft = Draft(image)
    topic_results: list[AlterPartitionTopicResult] = []
    for topic in request.topics:
        known = image.topics.get(topic.topic_id)
        results: list[AlterPartitionResult] = []
        for data in topic.partitions:
            index = data.partition_index
            if known is None:
                results.append(_error(index, ErrorCode.UNKNOWN_TOPIC_ID))
                continue
            key = (topic.topic_id, index)
            part = draft.partition(key)
            if part is None:
                results.append(_error(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            code = _validate(draft, reg.broker_id, part, data)
            if code is not ErrorCode.NONE:
                results.append(_error(index, code))
                continue
            new_isr = tuple(data.new_isr)
            if new_isr != part.isr:
                draft.append(
                    records.PartitionChangeRecord(
                        topic_id=topic.topic_id,
                        partition_id=index,
                        partition_epoch=part.partition_epoch + 1,
                        isr=new_isr,
                    )
                )
                part = draft.partition(key) or part
                done = reassignment.complete(draft, key, part)
                if done is not None:
                    draft.append(done)
                    part = draft.partition(key) or part
            results.append(_result(index, part))
        topic_results.append(AlterPartitionTopicResult(topic_id=topic.topic_id, partitions=results))
    return draft.records, AlterPartitionReply(topics=topic_results)
