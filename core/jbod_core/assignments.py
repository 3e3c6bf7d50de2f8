"""AssignReplicasToDirs (protocol §3.3): brokers tell the controller which dir holds each replica.

Guarantees:
* Stale or unknown broker epoch → top-level 77 and no per-partition results.
* Every requested (dir, topic, partition) is echoed with its own code: unknown topic id 100,
  unknown index 3, broker not a replica 6, else 0.
* A changed placement writes one `PartitionChangeRecord`; an unchanged one writes nothing.
* If the target dir is not online for the broker (LOST, or an id that is not one of its online
  dirs), the same record also takes the broker out of the ISR and moves leadership (§3.6); a
  leaderless partition whose replica becomes acceptable gets a leader.
"""

from __future__ import annotations

from jbod_core import election, records
from jbod_core.draft import Draft
from jbod_core.errors import ErrorCode
from jbod_core.ids import is_online
from jbod_core.image import ClusterImage
from jbod_core.messages import (
    AssignDirectoryResult,
    AssignPartitionResult,
    AssignReplicasToDirsReply,
    AssignReplicasToDirsRequest,
    AssignTopicResult,
)


def assign_replicas_to_dirs(
    image: ClusterImage, request: AssignReplicasToDirsRequest
) -> tuple[list[records.Record], AssignReplicasToDirsReply]:
    reg = image.brokers.get(request.broker_id)
    if reg is None or reg.broker_epoch != request.broker_epoch:
        message = (
            f"No broker registration found for broker id {request.broker_id}"
            if reg is None
            else f"Expected broker epoch {reg.broker_epoch}, but got broker epoch {request.broker_epoch}"
        )
        return [], AssignReplicasToDirsReply(error_code=ErrorCode.STALE_BROKER_EPOCH, error_message=message)
    broker_id = reg.broker_id
    draft = Draft(image)
    dir_results: list[AssignDirectoryResult] = []
    for directory in request.directories:
        online = is_online(directory.id, reg.log_dirs)
        topic_results: list[AssignTopicResult] = []
        for topic in directory.topics:
            known_topic = image.topics.get(topic.topic_id)
            partition_results: list[AssignPartitionResult] = []
            for entry in topic.partitions:
                index = entry.partition_index
                if known_topic is None:
                    code = ErrorCode.UNKNOWN_TOPIC_ID
                else:
                    key = (topic.topic_id, index)
                    part = draft.partition(key)
                    if part is None:
                        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    elif broker_id not in part.replicas:
                        code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    else:
                        code = ErrorCode.NONE
                        position = part.replicas.index(broker_id)
                        directories = list(part.directories)
                        directories[position] = directory.id
                        record = election.partition_change(
                            draft, key, part, directories=directories, remove=None if online else broker_id
                        )
                        if record is not None:
                            draft.append(record)
                partition_results.append(AssignPartitionResult(partition_index=index, error_code=code))
            topic_results.append(AssignTopicResult(topic_id=topic.topic_id, partitions=partition_results))
        dir_results.append(AssignDirectoryResult(id=directory.id, topics=topic_results))
    return draft.records, AssignReplicasToDirsReply(directories=dir_results)
