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
from jbod_core.ids import MIGRATING_DIR, UNASSIGNED_DIR, Uuid
from jbod_core.image import PartitionKey, PartitionRegistration

_ALWAYS_ONLINE = frozenset((UNASSIGNED_DIR, MIGRATING_DIR))


class Acceptor:
    """Which (broker, dir) may lead, cached per broker for one decision step.

    Brokers do not change while a step changes partitions, so the registration lookups are done
    once per broker instead of once per replica.
    """

    __slots__ = ("_draft", "_online")

    def __init__(self, draft: Draft) -> None:
        self._draft = draft
        self._online: dict[int, frozenset[Uuid] | None] = {}

    def online_dirs(self, broker_id: int) -> frozenset[Uuid] | None:
        """The broker's online dirs if it may lead at all (registered, unfenced, not shutting down)."""
        try:
            return self._online[broker_id]
        except KeyError:
            reg = self._draft.broker(broker_id)
            dirs = (
                None if reg is None or reg.fenced or reg.in_controlled_shutdown else frozenset(reg.log_dirs)
            )
            self._online[broker_id] = dirs
            return dirs

    def accepts(self, broker_id: int, directory: Uuid) -> bool:
        dirs = self.online_dirs(broker_id)
        if dirs is None:
            return False
        return directory in dirs or directory in _ALWAYS_ONLINE


def elect_leader(
    acceptor: Acceptor,
    part: PartitionRegistration,
    *,
    isr: Sequence[int],
    directories: Sequence[Uuid],
    remove: int | None,
) -> int:
    leader = part.leader
    # The ISR is a subset of the replicas, so a leader in the target ISR is a replica.
    if (
        leader not in (records.NO_LEADER, remove)
        and leader in isr
        and acceptor.accepts(leader, directories[part.replicas.index(leader)])
    ):
        return leader
    for broker_id, directory in zip(part.replicas, directories, strict=True):
        if broker_id != remove and broker_id in isr and acceptor.accepts(broker_id, directory):
            return broker_id
    return records.NO_LEADER


def partition_change(  # noqa: PLR0913  the partition, then its optional targets (ISR, dirs, broker to remove) and the acceptor
    draft: Draft,
    key: PartitionKey,
    part: PartitionRegistration,
    *,
    isr: Sequence[int] | None = None,
    directories: Sequence[Uuid] | None = None,
    remove: int | None = None,
    acceptor: Acceptor | None = None,
) -> records.PartitionChangeRecord | None:
    """The change to `part` (target ISR, target dirs, broker to remove), or None if a no-op.

    Pass one `acceptor` for a loop over many partitions within one step (no broker changes in
    between); by default a fresh one is used.
    """
    target_isr = part.isr if isr is None else tuple(isr)
    if remove is not None and remove in target_isr and len(target_isr) > 1:
        target_isr = tuple(b for b in target_isr if b != remove)
    target_dirs = part.directories if directories is None else tuple(directories)
    leader = elect_leader(
        acceptor or Acceptor(draft), part, isr=target_isr, directories=target_dirs, remove=remove
    )
    isr_changed = target_isr is not part.isr and target_isr != part.isr
    dirs_changed = target_dirs is not part.directories and target_dirs != part.directories
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


def _without(
    draft: Draft, key: PartitionKey, part: PartitionRegistration, remove: int, acceptor: Acceptor
) -> None:
    """`partition_change(..., remove=remove)` specialised for the hot loops (dir failure, fencing,
    controlled shutdown): same result, positional construction, no keyword plumbing."""
    isr = part.isr
    if remove in isr and len(isr) > 1:
        isr = tuple([b for b in isr if b != remove])
    leader = elect_leader(acceptor, part, isr=isr, directories=part.directories, remove=remove)
    isr_changed = isr is not part.isr
    leader_changed = leader != part.leader
    if isr_changed or leader_changed:
        draft.append(
            records.PartitionChangeRecord(
                key[0],
                key[1],
                part.partition_epoch + 1,
                None,
                isr if isr_changed else None,
                leader if leader_changed else None,
                part.leader_epoch + 1 if leader_changed else None,
                None,
            )
        )


def _change_all(draft: Draft, keys: Iterable[PartitionKey], *, remove: int) -> None:
    acceptor = Acceptor(draft)
    for key in sorted(keys):
        part = draft.partition(key)
        if part is not None:
            _without(draft, key, part, remove, acceptor)


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
    acceptor = Acceptor(draft)
    for key in sorted(candidates):
        part = draft.partition(key)
        if part is None or broker_id not in part.isr:
            continue
        record = partition_change(draft, key, part, acceptor=acceptor)
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
