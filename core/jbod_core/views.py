"""Read views of the image in the contract's JSON shapes (protocol §3.5). Pure functions, served
by the controller and, from their own replicated image, by every broker (clients bootstrap from
brokers: `docs/api.md`, "Reads from brokers").

Guarantees: topics sorted by name, partitions by index, brokers by id, online dirs in the
contract's Uuid order; `offlineReplicas` lists exactly the §3.6 offline replicas in replica order.
"""

from __future__ import annotations

from typing import Any

from jbod_core.image import BrokerRegistration, ClusterImage, TopicImage, accepts_new_replicas
from jbod_core.messages import INT32_MAX


def describe_topic(image: ClusterImage, topic: TopicImage) -> dict[str, Any]:
    partitions = []
    for index in sorted(topic.partitions):
        part = topic.partitions[index]
        view: dict[str, Any] = {
            "partitionIndex": index,
            "leader": part.leader,
            "leaderEpoch": part.leader_epoch,
            "partitionEpoch": part.partition_epoch,
            "replicas": list(part.replicas),
            "isr": list(part.isr),
            "directories": [str(d) for d in part.directories],
            "offlineReplicas": image.offline_replicas(part),
        }
        if part.reassigning:  # extension (issue 24): only while a reassignment runs
            view["addingReplicas"] = list(part.adding_replicas)
            view["removingReplicas"] = list(part.removing_replicas)
        partitions.append(view)
    return {
        "name": topic.name,
        "topicId": str(topic.topic_id),
        "configs": dict(topic.configs),
        "partitions": partitions,
    }


def describe_topics(image: ClusterImage) -> list[dict[str, Any]]:
    return [
        describe_topic(image, image.topics[image.topic_ids_by_name[name]])
        for name in sorted(image.topic_ids_by_name)
    ]


def describe_broker(image: ClusterImage, reg: BrokerRegistration) -> dict[str, Any]:
    return {
        "brokerId": reg.broker_id,
        "brokerEpoch": reg.broker_epoch,
        "incarnationId": str(reg.incarnation_id),
        "fenced": reg.fenced,
        "inControlledShutdown": reg.in_controlled_shutdown,
        "logDirs": [str(d) for d in reg.log_dirs],
        "offlineLogDirs": [str(d) for d in reg.offline_log_dirs],
        "hasOfflineLogDirs": reg.has_offline_log_dirs,
        "cordonedLogDirs": [str(d) for d in reg.cordoned_log_dirs],
        "slowLogDirs": [str(d) for d in reg.slow_log_dirs],
        "acceptsNewReplicas": accepts_new_replicas(reg),
        "listeners": [listener.to_data() for listener in reg.listeners],
        "rack": reg.rack,
        "unassignedReplicas": image.unassigned_count(reg.broker_id),
    }


def describe_brokers(image: ClusterImage) -> list[dict[str, Any]]:
    return [describe_broker(image, image.brokers[b]) for b in sorted(image.brokers)]


def describe_cluster(image: ClusterImage, *, cluster_id: str, metadata_end_offset: int) -> dict[str, Any]:
    return {
        "clusterId": cluster_id,
        "metadataEndOffset": metadata_end_offset,
        "brokers": len(image.brokers),
        "fencedBrokers": sum(1 for b in image.brokers.values() if b.fenced),
        "offlinePartitions": len(image.leaderless),
    }


def parse_broker_id(raw: str) -> int:
    """The broker id in a `/v1/brokers/{id}` path; ValueError with the one-line 400/42 message."""
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"brokerId: must be an integer, got {raw!r}") from None
    if not 0 <= value <= INT32_MAX:
        raise ValueError(f"brokerId: out of range, got {value}")
    return value
