"""DescribeLogDirs and AlterReplicaLogDirs: the JBOD side of the Kafka protocol (KIP-113), over
the broker's own dirs and its intra-broker mover.

Guarantees:
* DescribeLogDirs lists every log dir of this broker by path, with total and usable bytes (v4+),
  each replica's size being its log segments' bytes (as Kafka's; no index or checkpoint),
  each replica once in the dir it lives in, and a move's future replica in its destination with
  `is_future_key` and its lag behind the current replica; an offline dir answers
  KAFKA_STORAGE_ERROR with no topics. A request naming topics gets only those.
* AlterReplicaLogDirs moves each named replica to the dir at `path` through the same mover as
  jbodctl's move-replica (copy, report the new dir, switch once the controller confirms), with
  Kafka's codes: LOG_DIR_NOT_FOUND for a path that is not a log dir here, KAFKA_STORAGE_ERROR for
  an offline or full dir, REPLICA_NOT_AVAILABLE for a replica not hosted here; the principal
  needs ALTER on the cluster (Kafka's ACL; CLUSTER_AUTHORIZATION_FAILED otherwise), and nothing
  moves then. DescribeLogDirs needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED
  and no dirs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent.kafka.context import BrokerContext
from jbod_agent.kafka.listener import Connection
from jbod_agent.placement import DirHealth
from jbod_core.acls import AclOperation
from jbod_core.broker_messages import MoveReplicaRequest
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid
from jbod_kafka import protocol

_MOVE_ERRORS = {
    ErrorCode.LOG_DIR_NOT_FOUND: KafkaError.log_dir_not_found,
    ErrorCode.KAFKA_STORAGE_ERROR: KafkaError.kafka_storage_error,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: KafkaError.replica_not_available,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: KafkaError.replica_not_available,
    ErrorCode.REPLICA_NOT_AVAILABLE: KafkaError.replica_not_available,
}


def _segment_bytes(path: Path) -> int:
    """The bytes of a replica's log segments (not its indexes, checkpoint or snapshot), as Kafka
    reports a partition's size; 0 when the dir cannot be read."""
    try:
        return sum(entry.stat().st_size for entry in path.iterdir() if entry.name.endswith(".log"))
    except OSError:
        return 0


def _wanted_topics(request: protocol.Request) -> dict[str, set[int]] | None:
    topics = request.body.topics
    if topics is None:
        return None
    return {t.topic: {int(p) for p in t.partitions or ()} for t in topics}


def _dir_entry(ctx: BrokerContext, directory: Uuid, wanted: dict[str, set[int]] | None) -> dict[str, Any]:
    state = ctx.state
    dir_state = state.dirs[directory]
    entry: dict[str, Any] = {
        "error_code": KafkaError.none,
        "log_dir": str(dir_state.path),
        "total_bytes": dir_state.total_bytes,
        "usable_bytes": dir_state.usable_bytes,
        "topics": [],
    }
    if dir_state.health is DirHealth.OFFLINE:
        entry["error_code"] = KafkaError.kafka_storage_error
        return entry
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for key, local in state.local.items():
        if local.directory_id != directory or (
            wanted is not None and key[1] not in wanted.get(local.topic, ())
        ):
            continue
        hosted = ctx.manager.partitions.get(key)
        by_topic.setdefault(local.topic, []).append(
            {
                "partition_index": key[1],
                "partition_size": hosted.log.size_bytes if hosted is not None else _segment_bytes(local.path),
                "offset_lag": 0,
                "is_future_key": False,
            }
        )
    for move in ctx.mover.future_replicas():
        if move.destination != directory or (
            wanted is not None and move.key[1] not in wanted.get(move.topic, ())
        ):
            continue
        hosted = ctx.manager.partitions.get(move.key)
        future_end = move.future_log.end_offset if move.future_log is not None else 0
        lag = max((hosted.log.end_offset if hosted is not None else future_end) - future_end, 0)
        by_topic.setdefault(move.topic, []).append(
            {
                "partition_index": move.key[1],
                "partition_size": move.future_log.size_bytes
                if move.future_log is not None
                else _segment_bytes(move.future_path),
                "offset_lag": lag,
                "is_future_key": True,
            }
        )
    entry["topics"] = [
        {"name": name, "partitions": sorted(parts, key=lambda p: (p["partition_index"], p["is_future_key"]))}
        for name, parts in sorted(by_topic.items())
    ]
    return entry


async def describe_log_dirs(ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
    wanted = _wanted_topics(request)
    dirs = sorted(ctx.state.dirs, key=lambda d: str(ctx.state.dirs[d].path))
    if not ctx.allows(conn, AclOperation.DESCRIBE):
        return protocol.build(
            protocol.response_type(request.header.api_key, request.header.api_version),
            throttle_time=0,
            error_code=KafkaError.cluster_authorization_failed,
            results=[],
        )
    return protocol.build(
        protocol.response_type(request.header.api_key, request.header.api_version),
        throttle_time=0,
        error_code=KafkaError.none,
        results=[_dir_entry(ctx, d, wanted) for d in dirs],
    )


def _move(ctx: BrokerContext, directory: Uuid | None, topic: str, partition: int) -> KafkaError:
    if directory is None:
        return KafkaError.log_dir_not_found
    if ctx.topic_id(topic) is None:
        return KafkaError.unknown_topic_or_partition
    reply = ctx.mover.request_move(
        MoveReplicaRequest(topic=topic, partition=partition, directory_id=directory)
    )
    code = ErrorCode(int(reply["errorCode"]))
    if code is ErrorCode.NONE:
        return KafkaError.none
    return _MOVE_ERRORS.get(code, KafkaError(int(code)))


async def alter_replica_log_dirs(ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
    by_path = {str(state.path): directory for directory, state in ctx.state.dirs.items()}
    results: dict[str, list[dict[str, Any]]] = {}
    allowed = ctx.allows(conn, AclOperation.ALTER)
    for target in request.body.dirs:
        directory = by_path.get(str(target.path).rstrip("/") or "/")
        for topic in target.topics:
            for partition in topic.partitions:
                code = (
                    _move(ctx, directory, topic.name, int(partition))
                    if allowed
                    else KafkaError.cluster_authorization_failed
                )
                results.setdefault(topic.name, []).append({"partition_index": partition, "error_code": code})
    return protocol.build(
        protocol.response_type(request.header.api_key, request.header.api_version),
        throttle_time=0,
        results=[{"topic_name": name, "partitions": parts} for name, parts in results.items()],
    )
