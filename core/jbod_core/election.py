"""Leader and ISR changes shared by every decision (protocol §3.6).

Guarantees:
* `partition_change` returns the one `PartitionChangeRecord` that moves a partition to its target
  ISR / directories and elects a leader by the §3.6 rule, or `None` when nothing would change.
* A broker is an acceptable leader iff it is in the target ISR, registered, unfenced, not shutting
  down, not the broker being removed, and its replica's dir is online for it. The current leader
  stays if acceptable; else the first acceptable replica in replica order; else no leader (-1).
* An ISR never becomes empty: removing the last member keeps it listed and leaves no leader.
* Setting the leader bumps the leader epoch; every change bumps the partition epoch.
* `fence_broker`, `elect_unfenced_broker` and `handle_offline_dirs` touch only the partitions the
  image's indexes name for that broker (or broker and dir), never the whole cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from jbod_core import records
from jbod_core.draft import Draft
from jbod_core.ids import Uuid, is_online
from jbod_core.image import PartitionKey, PartitionRegistration


def _acceptable(
    draft: Draft, broker_id: int, directory: Uuid, isr: Sequence[int], remove: int | None
) -> bool:
    if broker_id == remove or broker_id not in isr:
        return False
    reg = draft.broker(broker_id)
    return (
        reg is not None
        and not reg.fenced
        and not reg.in_controlled_shutdown
        and is_online(directory, reg.log_dirs)
    )


def elect_leader(
    draft: Draft,
    part: PartitionRegistration,
    *,
    isr: Sequence[int],
    directories: Sequence[Uuid],
    remove: int | None,
) -> int:
    if part.leader != records.NO_LEADER and part.leader in part.replicas:
        index = part.replicas.index(part.leader)
        if _acceptable(draft, part.leader, directories[index], isr, remove):
            return part.leader
    for broker_id, directory in zip(part.replicas, directories, strict=True):
        if _acceptable(draft, broker_id, directory, isr, remove):
            return broker_id
    return records.NO_LEADER


def partition_change(
    draft: Draft,
    key: PartitionKey,
    part: PartitionRegistration,
    *,
    isr: Sequence[int] | None = None,
    directories: Sequence[Uuid] | None = None,
    remove: int | None = None,
) -> records.PartitionChangeRecord | None:
    """The change to `part` (target ISR, target dirs, broker to remove), or None if a no-op."""
    target_isr = tuple(part.isr if isr is None else isr)
    if remove is not None and remove in target_isr:
        shrunk = tuple(b for b in target_isr if b != remove)
        if shrunk:
            target_isr = shrunk
    target_dirs = tuple(part.directories if directories is None else directories)
    leader = elect_leader(draft, part, isr=target_isr, directories=target_dirs, remove=remove)
    isr_changed = target_isr != part.isr
    dirs_changed = target_dirs != part.directories
    leader_changed = leader != part.leader
    if not (isr_changed or dirs_changed or leader_changed):
        return None
    return records.PartitionChangeRecord(
        topic_id=key[0],
        partition_id=key[1],
        partition_epoch=part.partition_epoch + 1,
        isr=target_isr if isr_changed else None,
        directories=target_dirs if dirs_changed else None,
        leader=leader if leader_changed else None,
        leader_epoch=part.leader_epoch + 1 if leader_changed else None,
    )


def partition_order(key: PartitionKey) -> tuple[int, int, int]:
    """Deterministic order of partitions in a decision (topic id in the contract's order, index)."""
    return (key[0].msb, key[0].lsb, key[1])


def _change_all(draft: Draft, keys: Iterable[PartitionKey], *, remove: int) -> None:
    for key in sorted(keys, key=partition_order):
        part = draft.partition(key)
        if part is None:
            continue
        record = partition_change(draft, key, part, remove=remove)
        if record is not None:
            draft.append(record)


def remove_from_partitions(draft: Draft, broker_id: int) -> None:
    """Take `broker_id` out of every ISR it is in (never emptying one) and move its leaderships."""
    _change_all(draft, draft.image.replicas_by_broker.get(broker_id, ()), remove=broker_id)


def fence_broker(draft: Draft, broker_id: int) -> None:
    """Fence a registered broker: ISR and leader changes first, then the fencing record."""
    reg = draft.broker(broker_id)
    if reg is None:
        raise ValueError(f"cannot fence unregistered broker {broker_id}")
    remove_from_partitions(draft, broker_id)
    draft.append(
        records.BrokerRegistrationChangeRecord(
            broker_id=broker_id,
            broker_epoch=reg.broker_epoch,
            fenced=True,
            in_controlled_shutdown=False if reg.in_controlled_shutdown else None,
        )
    )


def elect_unfenced_broker(draft: Draft, broker_id: int) -> None:
    """After unfencing: give leaderless partitions whose ISR holds the broker a leader."""
    image = draft.image
    hosted = image.replicas_by_broker.get(broker_id, set())
    candidates = (
        hosted & image.leaderless if len(hosted) < len(image.leaderless) else image.leaderless & hosted
    )
    for key in sorted(candidates, key=partition_order):
        part = draft.partition(key)
        if part is None or broker_id not in part.isr:
            continue
        record = partition_change(draft, key, part)
        if record is not None:
            draft.append(record)


def handle_offline_dirs(draft: Draft, broker_id: int, offline_dirs: Sequence[Uuid]) -> None:
    """Record newly offline dirs of a broker, then move the ISR and leadership of their replicas.

    `offline_dirs` must be dirs that are online in the broker's registration.
    """
    reg = draft.broker(broker_id)
    if reg is None:
        raise ValueError(f"cannot take dirs offline for unregistered broker {broker_id}")
    newly = set(offline_dirs)
    draft.append(
        records.BrokerRegistrationChangeRecord(
            broker_id=broker_id,
            broker_epoch=reg.broker_epoch,
            log_dirs=tuple(d for d in reg.log_dirs if d not in newly),
            offline_log_dirs=tuple(sorted(set(reg.offline_log_dirs) | newly)),
        )
    )
    for directory in sorted(newly):
        _change_all(draft, draft.image.replicas_by_dir.get((broker_id, directory), ()), remove=broker_id)
