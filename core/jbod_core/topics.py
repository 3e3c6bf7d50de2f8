"""Topic creation, deletion and partitions added to a topic (protocol §3.5; CreatePartitions is
an extension, docs/api.md).

Guarantees:
* Checks run in this order and a rejection writes nothing: name 17, existing name 36, a name
  that differs from an existing one only in '.' and '_' 17 (Kafka's collision rule: the two
  would share metric names), partition count 37, replication factor 38, manual assignment 39,
  configs 40 (`jbod_core.topic_configs`: unknown key, bad or out-of-range value,
  `min.insync.replicas` above the replication factor).
* CreatePartitions (Kafka's rules and codes): unknown topic 3; a total not above the current
  count 37 (more than 10,000 added: 37 too); with an assignment, one entry per new partition of
  the topic's replication factor (that of partition 0, as Kafka) naming registered brokers once
  each with an active one, else 39; without one, that factor above the active brokers 38. The new
  partitions are numbered on from the current count and placed by the same code as a create's
  (below). `validate_only` decides alike and writes nothing.
* The controller's default `min.insync.replicas` (when the create sets none) is written into the
  TopicRecord, capped at the topic's replication factor so that acks=-1 writes can succeed.
* Automatic placement stripes replicas over the active brokers (registered, unfenced, not
  shutting down) that accept new replicas (not every online dir cordoned, KIP-1066) in Kafka's rack-unaware pattern from a random start, so replicas of a partition
  are on distinct brokers and leaders are spread evenly. Randomness is a parameter.
* Rack-aware placement (KIP-36, as Kafka's KRaft controller): when those brokers span two or more
  racks (`broker.rack`; the brokers without one count as one rack of their own, as KRaft does,
  never an error), every partition's replicas are on min(replication factor, racks) distinct
  racks, leaders rotate over the racks (counts differ by at most one) and within a rack over its
  brokers (at most one apart). One rack (or none) is the rack-unaware pattern above, unchanged.
* A new replica's dir is the broker's only online dir if it has exactly one, else UNASSIGNED.
  ISR = the active replicas; leader = the first ISR member in replica order; epochs 0.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Final

from jbod_core import records, topic_configs
from jbod_core.errors import ErrorCode
from jbod_core.ids import UNASSIGNED_DIR, Uuid, random_uuid
from jbod_core.image import ClusterImage, accepts_new_replicas
from jbod_core.messages import (
    MAX_PARTITIONS_PER_REQUEST,
    CreatePartitionsReply,
    CreatePartitionsRequest,
    CreateTopicReply,
    CreateTopicRequest,
    DeleteTopicReply,
)

MAX_TOPIC_NAME_LENGTH: Final = 249
_LEGAL_NAME: Final = re.compile(r"[a-zA-Z0-9._-]+")


def topic_name_error(name: str) -> str | None:
    """Why `name` is not a legal topic name, or None."""
    if not name:
        return "Topic name is empty"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters"
    if name in (".", ".."):
        return "Topic name cannot be '.' or '..'"
    if not _LEGAL_NAME.fullmatch(name):
        return f"Topic name '{name}' contains characters other than ASCII letters, digits, '.', '_' and '-'"
    return None


def colliding_topic(image: ClusterImage, name: str) -> str | None:
    """An existing topic whose name differs from `name` only in '.' versus '_' (Kafka's
    `Topic.hasCollision`), or None. Only a name holding either character can collide."""
    if "." not in name and "_" not in name:
        return None
    unified = name.replace(".", "_")
    for existing in image.topic_ids_by_name:
        if existing != name and existing.replace(".", "_") == unified:
            return existing
    return None


def active_brokers(image: ClusterImage) -> list[int]:
    return sorted(b.broker_id for b in image.brokers.values() if b.is_active)


def placement_brokers(image: ClusterImage) -> list[int]:
    """The brokers automatic placement stripes over: active, and not every online dir cordoned
    (KIP-1066, `image.accepts_new_replicas`)."""
    return sorted(b.broker_id for b in image.brokers.values() if accepts_new_replicas(b))


def default_directory(image: ClusterImage, broker_id: int) -> Uuid:
    reg = image.brokers.get(broker_id)
    if reg is not None and len(reg.log_dirs) == 1:
        return reg.log_dirs[0]
    return UNASSIGNED_DIR


def stripe_replicas(
    brokers: Sequence[int], *, partitions: int, replication_factor: int, rng: random.Random
) -> list[list[int]]:
    """Kafka's rack-unaware assignment: distinct brokers per partition, leaders round-robin."""
    count = len(brokers)
    start = rng.randrange(count)
    shift = rng.randrange(count)
    assignment: list[list[int]] = []
    for p in range(partitions):
        if p > 0 and p % count == 0:
            shift += 1
        first = (start + p) % count
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (count - 1)) % count])
        assignment.append(replicas)
    return assignment


def stripe_replicas_by_rack(
    racks: Mapping[int, str | None], *, partitions: int, replication_factor: int, rng: random.Random
) -> list[list[int]]:
    """Rack-aware assignment over the brokers `racks` maps to their rack (None: no rack; those
    brokers form one rack, as in KRaft). The racks are taken round-robin from a random start that
    advances one rack per partition: the leader comes from the first rack, the other replicas from
    the next racks in turn (wrapping round when the factor exceeds the racks, skipping a rack
    whose brokers are all used). Each rack hands out leaders round-robin from a random broker and
    followers from another rotation that shifts by one every round, so replica sets vary. With
    fewer than two racks this is `stripe_replicas`. `replication_factor` <= the brokers."""
    groups: dict[str | None, list[int]] = {}
    for broker_id in sorted(racks):
        groups.setdefault(racks[broker_id], []).append(broker_id)
    if len(groups) < 2:
        return stripe_replicas(
            sorted(racks), partitions=partitions, replication_factor=replication_factor, rng=rng
        )
    names = sorted(groups, key=lambda rack: (rack is not None, rack or ""))
    members = [groups[name] for name in names]
    leader_next = [rng.randrange(len(m)) for m in members]
    follower_start = [rng.randrange(len(m)) for m in members]
    follower_next = [0] * len(members)
    start = rng.randrange(len(names))
    assignment: list[list[int]] = []
    for p in range(partitions):
        first = (start + p) % len(names)
        brokers = members[first]
        replicas = [brokers[leader_next[first] % len(brokers)]]
        leader_next[first] += 1
        step = 1
        while len(replicas) < replication_factor:
            rack = (first + step) % len(names)
            step += 1
            brokers = members[rack]
            for _ in range(len(brokers)):
                turn = follower_next[rack]
                follower_next[rack] += 1
                candidate = brokers[(follower_start[rack] + turn + turn // len(brokers)) % len(brokers)]
                if candidate not in replicas:
                    replicas.append(candidate)
                    break
        assignment.append(replicas)
    return assignment


def distinct_racks(replicas: Sequence[int], racks: Mapping[int, str | None]) -> int:
    """How many racks `replicas` span (brokers without a rack count as one rack, as KRaft)."""
    return len({racks.get(b) for b in replicas})


def broker_racks(image: ClusterImage, brokers: Sequence[int]) -> dict[int, str | None]:
    """Each of `brokers`' rack from its registration (None: no rack or not registered)."""
    return {b: (image.brokers[b].rack if b in image.brokers else None) for b in brokers}


def _error(code: ErrorCode, message: str) -> tuple[list[records.Record], CreateTopicReply]:
    return [], CreateTopicReply(error_code=code, error_message=message)


def _manual_assignment_error(
    image: ClusterImage, assignment: Sequence[Sequence[int]], request: CreateTopicRequest
) -> str | None:
    factor = len(assignment[0])
    if request.num_partitions is not None and request.num_partitions != len(assignment):
        return f"numPartitions {request.num_partitions} does not match the {len(assignment)} partitions of replicaAssignment"
    if request.replication_factor is not None and request.replication_factor != factor:
        return f"replicationFactor {request.replication_factor} does not match replicaAssignment"
    for index, replicas in enumerate(assignment):
        problem = _partition_replicas_error(image, index, replicas, factor=factor)
        if problem is not None:
            return problem
    return None


def _partition_replicas_error(
    image: ClusterImage, index: int, replicas: Sequence[int], *, factor: int
) -> str | None:
    if not replicas:
        return f"Partition {index} has no replicas"
    if len(replicas) != factor:
        return "All partitions must have the same number of replicas"
    if len(set(replicas)) != len(replicas):
        return f"Partition {index} lists a broker more than once"
    unknown = [b for b in replicas if b not in image.brokers]
    if unknown:
        return f"Partition {index} names unregistered broker(s) {unknown}"
    if not any(image.brokers[b].is_active for b in replicas):
        return f"Partition {index} has no active replica"
    return None


def _manual_assignment(
    image: ClusterImage, request: CreateTopicRequest
) -> tuple[list[list[int]], ErrorCode, str]:
    """The request's `replicaAssignment`, or the error refusing it."""
    assignment: list[list[int]] = [list(r) for r in request.replica_assignment or ()]
    if not assignment or len(assignment) > MAX_PARTITIONS_PER_REQUEST:
        return (
            [],
            ErrorCode.INVALID_PARTITIONS,
            f"A topic needs 1 to {MAX_PARTITIONS_PER_REQUEST} partitions",
        )
    problem = _manual_assignment_error(image, assignment, request)
    if problem is not None:
        return [], ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem
    return assignment, ErrorCode.NONE, ""


def _striped_assignment(
    image: ClusterImage, request: CreateTopicRequest, *, rng: random.Random
) -> tuple[list[list[int]], ErrorCode, str]:
    """Replicas striped over the active brokers (`stripe_replicas`), or the error refusing the counts."""
    partitions = request.num_partitions or 0
    if partitions < 1 or partitions > MAX_PARTITIONS_PER_REQUEST:
        return (
            [],
            ErrorCode.INVALID_PARTITIONS,
            f"numPartitions must be 1 to {MAX_PARTITIONS_PER_REQUEST}, got {partitions}",
        )
    return _striped(image, partitions=partitions, factor=request.replication_factor or 0, rng=rng)


def _striped(
    image: ClusterImage, *, partitions: int, factor: int, rng: random.Random
) -> tuple[list[list[int]], ErrorCode, str]:
    """`partitions` new partitions of `factor` replicas striped over the active brokers (rack-aware
    when they span racks), or 38."""
    brokers = placement_brokers(image)
    if factor < 1 or factor > len(brokers):
        return (
            [],
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor {factor} is not between 1 and the {len(brokers)} active broker(s) "
            "accepting new replicas (a broker whose online dirs are all cordoned takes none)",
        )
    return (
        stripe_replicas_by_rack(
            broker_racks(image, brokers), partitions=partitions, replication_factor=factor, rng=rng
        ),
        ErrorCode.NONE,
        "",
    )


def create_topic(
    image: ClusterImage,
    request: CreateTopicRequest,
    *,
    rng: random.Random,
    default_min_insync_replicas: int | None = None,
) -> tuple[list[records.Record], CreateTopicReply]:
    name_error = topic_name_error(request.name)
    if name_error is not None:
        return _error(ErrorCode.INVALID_TOPIC_EXCEPTION, name_error)
    if request.name in image.topic_ids_by_name:
        return _error(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{request.name}' already exists")
    colliding = colliding_topic(image, request.name)
    if colliding is not None:
        return _error(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic '{request.name}' collides with existing topic: {colliding}",
        )
    if request.replica_assignment is not None:
        assignment, code, problem = _manual_assignment(image, request)
    else:
        assignment, code, problem = _striped_assignment(image, request, rng=rng)
    if code is not ErrorCode.NONE:
        return _error(code, problem)

    factor = len(assignment[0])
    config_problem = topic_configs.create_error(request.configs, replication_factor=factor)
    if config_problem is not None:
        return _error(ErrorCode.INVALID_CONFIG, config_problem.message)
    configs = dict(request.configs)
    if default_min_insync_replicas is not None and topic_configs.MIN_INSYNC_REPLICAS not in configs:
        configs[topic_configs.MIN_INSYNC_REPLICAS] = str(min(default_min_insync_replicas, factor))

    topic_id = random_uuid(rng, avoid=image.topics.keys())
    out: list[records.Record] = [records.TopicRecord(name=request.name, topic_id=topic_id, configs=configs)]
    out.extend(new_partitions(image, topic_id, assignment, first_index=0))
    return out, CreateTopicReply(
        topic_id=topic_id, num_partitions=len(assignment), replication_factor=len(assignment[0])
    )


def new_partitions(
    image: ClusterImage, topic_id: Uuid, assignment: Sequence[Sequence[int]], *, first_index: int
) -> list[records.Record]:
    """The PartitionRecords of new partitions `first_index`, `first_index + 1`, ... with these
    replicas (each naming at least one active broker): a broker's only online dir or UNASSIGNED,
    ISR = the active replicas, leader = the first of them, epochs 0."""
    out: list[records.Record] = []
    defaults: dict[int, Uuid] = {}
    for offset, replicas in enumerate(assignment):
        isr = tuple(b for b in replicas if image.brokers[b].is_active)
        directories = tuple(defaults.setdefault(b, default_directory(image, b)) for b in replicas)
        out.append(
            records.PartitionRecord(
                topic_id=topic_id,
                partition_id=first_index + offset,
                replicas=tuple(replicas),
                isr=isr,
                leader=isr[0],
                leader_epoch=0,
                partition_epoch=0,
                directories=directories,
            )
        )
    return out


def delete_topic(image: ClusterImage, name: str) -> tuple[list[records.Record], DeleteTopicReply]:
    topic_id = image.topic_ids_by_name.get(name)
    if topic_id is None:
        return [], DeleteTopicReply(
            error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=f"Unknown topic '{name}'"
        )
    return [records.RemoveTopicRecord(topic_id=topic_id)], DeleteTopicReply(topic_id=topic_id)


def _partitions_error(code: ErrorCode, message: str) -> tuple[list[records.Record], CreatePartitionsReply]:
    return [], CreatePartitionsReply(error_code=code, error_message=message)


def _added_assignment(
    image: ClusterImage, request: CreatePartitionsRequest, *, current: int, factor: int, rng: random.Random
) -> tuple[list[list[int]], ErrorCode, str]:
    """The replicas of the partitions added after the `current` ones: the request's assignment
    checked like a create's (39), or striped over the active brokers (38)."""
    added = request.total_count - current
    if request.assignment is None:
        return _striped(image, partitions=added, factor=factor, rng=rng)
    if len(request.assignment) != added:
        return (
            [],
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Attempted to add {added} additional partition(s), but only "
            f"{len(request.assignment)} assignment(s) were specified",
        )
    for offset, replicas in enumerate(request.assignment):
        problem = _partition_replicas_error(image, current + offset, replicas, factor=factor)
        if problem is not None:
            return [], ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem
    return [list(r) for r in request.assignment], ErrorCode.NONE, ""


def create_partitions(
    image: ClusterImage, name: str, request: CreatePartitionsRequest, *, rng: random.Random
) -> tuple[list[records.Record], CreatePartitionsReply]:
    """Kafka's CreatePartitions for one topic: partitions added up to `request.total_count`."""
    topic_id = image.topic_ids_by_name.get(name)
    if topic_id is None:
        return _partitions_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unknown topic '{name}'")
    topic = image.topics[topic_id]
    current = len(topic.partitions)
    added = request.total_count - current
    if added < 0:
        return _partitions_error(
            ErrorCode.INVALID_PARTITIONS,
            f"Topic '{name}' currently has {current} partition(s); {request.total_count} would not be an increase",
        )
    if added == 0:
        return _partitions_error(
            ErrorCode.INVALID_PARTITIONS, f"Topic '{name}' already has {current} partition(s)"
        )
    if added > MAX_PARTITIONS_PER_REQUEST:
        return _partitions_error(
            ErrorCode.INVALID_PARTITIONS,
            f"At most {MAX_PARTITIONS_PER_REQUEST} partitions may be added at once, not {added}",
        )
    factor = len(topic.partitions[0].target_replicas)
    assignment, code, problem = _added_assignment(image, request, current=current, factor=factor, rng=rng)
    if code is not ErrorCode.NONE:
        return _partitions_error(code, problem)
    produced = new_partitions(image, topic_id, assignment, first_index=current)
    reply = CreatePartitionsReply(topic_id=topic_id, total_count=request.total_count)
    return ([] if request.validate_only else produced), reply
