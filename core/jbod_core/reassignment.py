"""Partition reassignment between brokers (Kafka's KIP-455, as KRaft records it).

A reassignment moves a partition from its replicas (the *original* ones) to a *target* list.
While it runs, the partition's replicas are the target followed by the original replicas that
leave (`removing_replicas`); the target's new brokers are `adding_replicas`. Adding replicas
start with the dir UNASSIGNED: their broker creates them in a dir it chooses (or the one named
in advance with AlterReplicaLogDirs) and reports it with AssignReplicasToDirs, then fetches from
the leader like any follower. Everything is in the partition records, so a controller that takes
over mid reassignment carries on from the image.

Guarantees:
* `alter_reassignments` decides each partition alone, in request order, and a refused partition
  writes nothing: unknown topic or partition 3; an empty list, a broker listed twice, a negative
  or unregistered broker 39; a target of another length while `allow_replication_factor_change`
  is off 38; a cancel (no target) of a partition that is not being reassigned 85; a new replica
  on a broker whose online dirs are all cordoned (KIP-1066, as Kafka since KAFKA-20832) 39.
  Registered but fenced brokers may be targets (as in Kafka): their replicas join once the broker
  is back.
* A target equal to the replicas of a partition that is not being reassigned writes nothing; a
  target equal to the original replicas of a running reassignment cancels it.
* Starting (or replacing) a reassignment writes one record: replicas = target + leaving
  original replicas, dirs kept for every broker that stays a replica (UNASSIGNED for new ones),
  the ISR without brokers that are no longer replicas, and a new leader only if the leader is
  no longer a replica. It is refused with 39 if no ISR member would remain.
* `complete` finishes a reassignment once every adding replica is in the ISR: replicas = the
  target (in target order), ISR = the ISR members in the target, adding and removing emptied,
  dirs of the target kept; the leader stays if it is in the new ISR and may lead, else the first
  target replica in the new ISR that may lead (§3.6) becomes leader. It waits (writes nothing)
  while no target replica in the ISR may lead. AlterPartition calls it after every ISR change,
  and starting a reassignment calls it at once (a target within the ISR completes immediately).
* Cancelling writes one record back to the original replicas with their dirs, the ISR without
  the adding replicas, and a leader from them; it is refused with 39 if no original replica is
  in the ISR (that would be an unclean election, as Kafka refuses it).
* `list_reassignments` lists the partitions being reassigned (all of them, or those asked for
  that are), with replicas, adding and removing replicas, sorted by topic name and partition.
"""

from __future__ import annotations

from collections.abc import Sequence

from jbod_core import records
from jbod_core.draft import Draft
from jbod_core.election import Acceptor
from jbod_core.errors import ErrorCode
from jbod_core.ids import UNASSIGNED_DIR, Uuid
from jbod_core.image import ClusterImage, PartitionKey, PartitionRegistration
from jbod_core.messages import (
    AlterReassignmentsReply,
    AlterReassignmentsRequest,
    ListReassignmentsReply,
    OngoingReassignment,
    ReassignmentResult,
    ReassignmentTarget,
)


class _RefusedError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _leader_among(
    acceptor: Acceptor,
    part: PartitionRegistration,
    candidates: Sequence[int],
    isr: Sequence[int],
    dirs: dict[int, Uuid],
) -> int:
    """The leader once the replicas are `candidates` (in order): the current one if it stays in
    `isr` and may lead, else the first candidate in `isr` that may lead, else none."""
    if part.leader in isr and part.leader in candidates and acceptor.accepts(part.leader, dirs[part.leader]):
        return part.leader
    for broker_id in candidates:
        if broker_id in isr and acceptor.accepts(broker_id, dirs[broker_id]):
            return broker_id
    return records.NO_LEADER


def _change(  # noqa: PLR0913  the partition, then each field the change sets
    key: PartitionKey,
    part: PartitionRegistration,
    *,
    replicas: tuple[int, ...],
    dirs: dict[int, Uuid],
    isr: tuple[int, ...],
    leader: int,
    adding: tuple[int, ...],
    removing: tuple[int, ...],
) -> records.PartitionChangeRecord:
    leader_changed = leader != part.leader
    return records.PartitionChangeRecord(
        topic_id=key[0],
        partition_id=key[1],
        partition_epoch=part.partition_epoch + 1,
        replicas=replicas,
        isr=isr if isr != part.isr else None,
        leader=leader if leader_changed else None,
        leader_epoch=part.leader_epoch + 1 if leader_changed else None,
        directories=tuple(dirs[b] for b in replicas),
        adding_replicas=adding,
        removing_replicas=removing,
    )


def complete(
    draft: Draft, key: PartitionKey, part: PartitionRegistration, acceptor: Acceptor | None = None
) -> records.PartitionChangeRecord | None:
    """The record that completes `part`'s reassignment, or None (none running, or not ready)."""
    if not part.reassigning or any(b not in part.isr for b in part.adding_replicas):
        return None
    target = part.target_replicas
    isr = tuple(b for b in part.isr if b in target)
    dirs = dict(zip(part.replicas, part.directories, strict=True))
    leader = _leader_among(acceptor or Acceptor(draft), part, target, isr, dirs)
    if not isr or leader == records.NO_LEADER:
        return None
    return _change(key, part, replicas=target, dirs=dirs, isr=isr, leader=leader, adding=(), removing=())


def _cancel(draft: Draft, key: PartitionKey, part: PartitionRegistration, acceptor: Acceptor) -> None:
    original = part.original_replicas
    isr = tuple(b for b in part.isr if b in original)
    if not isr:
        raise _RefusedError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Unable to revert the reassignment of partition {key[1]}: no original replica "
            f"{list(original)} is in the ISR {list(part.isr)} (that would need an unclean leader election)",
        )
    dirs = dict(zip(part.replicas, part.directories, strict=True))
    leader = _leader_among(acceptor, part, original, isr, dirs)
    draft.append(
        _change(key, part, replicas=original, dirs=dirs, isr=isr, leader=leader, adding=(), removing=())
    )


def _check_target(draft: Draft, index: int, target: Sequence[int]) -> None:
    if not target:
        raise _RefusedError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Partition {index}: the target replica list is empty"
        )
    if len(set(target)) != len(target):
        raise _RefusedError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Partition {index}: the target lists a broker more than once",
        )
    for broker_id in target:
        if broker_id < 0 or draft.broker(broker_id) is None:
            raise _RefusedError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Partition {index}: the target includes broker {broker_id}, but no such broker is registered",
            )


def _start(  # noqa: PLR0913  the partition, its target, then the decision's tools
    draft: Draft,
    key: PartitionKey,
    part: PartitionRegistration,
    target: tuple[int, ...],
    acceptor: Acceptor,
    *,
    allow_replication_factor_change: bool,
) -> None:
    _check_target(draft, key[1], target)
    original = part.original_replicas
    if not allow_replication_factor_change and len(target) != len(original):
        raise _RefusedError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Partition {key[1]}: the replication factor would change from {len(original)} to {len(target)}",
        )
    if target == original:
        if part.reassigning:
            _cancel(draft, key, part, acceptor)
        return
    adding = tuple(b for b in target if b not in original)
    for broker_id in adding:
        reg = draft.broker(broker_id)
        if reg is not None and reg.cordoned_log_dirs and not reg.uncordoned_log_dirs:
            raise _RefusedError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Partition {key[1]}: broker {broker_id} is cordoned (every online log dir in "
                "cordoned.log.dirs): it takes no new replica",
            )
    removing = tuple(b for b in original if b not in target)
    replicas = target + removing
    isr = tuple(b for b in part.isr if b in replicas)
    if not isr:
        raise _RefusedError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Partition {key[1]}: no ISR member {list(part.isr)} would remain a replica",
        )
    dirs = dict.fromkeys(replicas, UNASSIGNED_DIR) | {
        b: d for b, d in zip(part.replicas, part.directories, strict=True) if b in replicas
    }
    leader = _leader_among(acceptor, part, replicas, isr, dirs)
    draft.append(
        _change(
            key, part, replicas=replicas, dirs=dirs, isr=isr, leader=leader, adding=adding, removing=removing
        )
    )
    started = draft.partition(key)
    assert started is not None
    done = complete(draft, key, started, acceptor)
    if done is not None:
        draft.append(done)


def _alter_one(draft: Draft, item: ReassignmentTarget, acceptor: Acceptor, *, allow_rf_change: bool) -> None:
    topic_id = draft.image.topic_ids_by_name.get(item.topic)
    part = None if topic_id is None else draft.partition((topic_id, item.partition))
    if topic_id is None or part is None:
        raise _RefusedError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unknown topic or partition {item.topic}-{item.partition}"
        )
    key = (topic_id, item.partition)
    if item.replicas is None:
        if not part.reassigning:
            raise _RefusedError(
                ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                f"No ongoing reassignment for partition {item.topic}-{item.partition}",
            )
        _cancel(draft, key, part, acceptor)
        return
    _start(draft, key, part, tuple(item.replicas), acceptor, allow_replication_factor_change=allow_rf_change)


def alter_reassignments(
    image: ClusterImage, request: AlterReassignmentsRequest
) -> tuple[list[records.Record], AlterReassignmentsReply]:
    draft = Draft(image)
    acceptor = Acceptor(draft)
    results: list[ReassignmentResult] = []
    for item in request.partitions:
        written = len(draft.records)
        try:
            _alter_one(draft, item, acceptor, allow_rf_change=request.allow_replication_factor_change)
        except _RefusedError as refused:
            assert len(draft.records) == written  # every refusal comes before the first append
            results.append(
                ReassignmentResult(
                    topic=item.topic,
                    partition=item.partition,
                    error_code=refused.code,
                    error_message=refused.message,
                )
            )
            continue
        results.append(ReassignmentResult(topic=item.topic, partition=item.partition))
    return draft.records, AlterReassignmentsReply(results=results)


def list_reassignments(
    image: ClusterImage, wanted: Sequence[tuple[str, Sequence[int] | None]] | None = None
) -> ListReassignmentsReply:
    """The partitions being reassigned: every one (`wanted` None), or those of `wanted` (topic
    name, partitions or None for all of the topic's) that are."""
    keys: set[PartitionKey] = set()
    if wanted is None:
        keys = set(image.reassigning)
    else:
        for name, partitions in wanted:
            topic_id = image.topic_ids_by_name.get(name)
            if topic_id is None:
                continue
            if partitions is None:
                keys.update(k for k in image.reassigning if k[0] == topic_id)
            else:
                keys.update((topic_id, p) for p in partitions if (topic_id, p) in image.reassigning)
    ongoing: list[OngoingReassignment] = []
    for key in keys:
        part = image.partition(key)
        assert part is not None  # the index follows the partitions
        ongoing.append(
            OngoingReassignment(
                topic=image.topics[key[0]].name,
                topic_id=key[0],
                partition=key[1],
                replicas=list(part.replicas),
                adding_replicas=list(part.adding_replicas),
                removing_replicas=list(part.removing_replicas),
            )
        )
    ongoing.sort(key=lambda o: (o.topic, o.partition))
    return ListReassignmentsReply(reassignments=ongoing)
