"""Leader and ISR changes shared by every decision (protocol §3.6).

Guarantees:
* `partition_change` returns the one `PartitionChangeRecord` that moves a partition to its target
  ISR / directories and elects a leader by the §3.6 rule, or `None` when nothing would change.
* A replica may lead iff its broker is registered, unfenced, not shutting down, not the broker
  being removed, and its replica's dir is online for it. A clean leader is one of those in the
  target ISR: the current leader stays if acceptable; else the first acceptable ISR member in
  replica order. With no clean leader and unclean leader election enabled for the topic
  (`unclean_election_enabled`: the topic's `unclean.leader.election.enable`, else the cluster
  default's, else false), the first replica in replica order that may lead is elected and the ISR
  becomes that leader alone (Kafka's unclean election; records only the old ISR had are lost).
  Else no leader (-1).
* An ISR never becomes empty: removing the last member keeps it listed and leaves no leader
  (unless an unclean election replaces the ISR by its new leader).
* Setting the leader bumps the leader epoch; every change bumps the partition epoch.
* An unclean election is tried whenever a partition's leader is decided: when ISR members are
  fenced, shut down or lose their dir (`fence_broker`, `remove_from_partitions`,
  `handle_offline_dirs`), when a broker unfences or re-registers (`elect_unfenced_broker`: its
  leaderless partitions, also those whose ISR it is not in), and when the config is turned on for
  a topic (`elect_unclean_leaders`: the topic's leaderless partitions).
* `is_unclean(before, record)` tells a change that elects a leader outside the ISR (only an
  unclean election does), for the controller's log.
* A replica in a dir its broker reports slow (`report_slow_dirs`, issue 35) leads only when no
  other clean replica may: the current leader stays unless slow, else the first acceptable ISR
  member not slow, else the slow ones as before. A newly slow dir's leaderships move at once.
* `fence_broker`, `elect_unfenced_broker` and `handle_offline_dirs` touch only the partitions the
  image's indexes name for that broker (or broker and dir), never the whole cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from jbod_core import records, topic_configs
from jbod_core.draft import Draft
from jbod_core.ids import MIGRATING_DIR, UNASSIGNED_DIR, Uuid
from jbod_core.image import ClusterImage, PartitionKey, PartitionRegistration

_ALWAYS_ONLINE = frozenset((UNASSIGNED_DIR, MIGRATING_DIR))
_CLUSTER_DEFAULT = ""  # the cluster-wide dynamic broker configs' resource name in the image


def unclean_election_enabled(image: ClusterImage, topic_id: Uuid) -> bool:
    """Whether a leader outside the ISR may be elected for the topic's partitions: its
    `unclean.leader.election.enable`, else the cluster-wide dynamic broker default, else false."""
    topic = image.topics.get(topic_id)
    return topic_configs.unclean_leader_election(
        {} if topic is None else topic.configs, image.broker_configs.get(_CLUSTER_DEFAULT, {})
    )


class Acceptor:
    """Which (broker, dir) may lead, cached per broker for one decision step.

    Brokers do not change while a step changes partitions, so the registration lookups are done
    once per broker instead of once per replica.
    """

    __slots__ = ("_draft", "_online", "_slow", "_unclean")

    def __init__(self, draft: Draft) -> None:
        self._draft = draft
        self._online: dict[int, frozenset[Uuid] | None] = {}
        self._slow: dict[int, frozenset[Uuid]] = {}
        self._unclean: dict[Uuid, bool] = {}

    def slow(self, broker_id: int, directory: Uuid) -> bool:
        """Does the broker report the replica's dir slow (issue 35)?"""
        try:
            dirs = self._slow[broker_id]
        except KeyError:
            reg = self._draft.broker(broker_id)
            dirs = frozenset(() if reg is None else reg.slow_log_dirs)
            self._slow[broker_id] = dirs
        return directory in dirs

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

    def unclean_allowed(self, topic_id: Uuid) -> bool:
        """`unclean_election_enabled` for the topic, looked up once per step (configs do not
        change within one)."""
        try:
            return self._unclean[topic_id]
        except KeyError:
            allowed = self._unclean[topic_id] = unclean_election_enabled(self._draft.image, topic_id)
            return allowed


def is_unclean(before: PartitionRegistration, record: records.PartitionChangeRecord) -> bool:
    """Whether `record` makes a replica outside `before`'s ISR leader (an unclean election)."""
    leader = record.leader
    return leader is not None and leader != records.NO_LEADER and leader not in before.isr


def elect_leader(  # noqa: PLR0913  the acceptor and partition, then one keyword per target
    acceptor: Acceptor,
    part: PartitionRegistration,
    *,
    topic_id: Uuid,
    isr: Sequence[int],
    directories: Sequence[Uuid],
    remove: int | None,
    unclean: bool | None = None,
) -> int:
    """The leader by the §3.6 rule: a clean one (in `isr`), else, if `unclean` (by default: if
    the topic allows it), the first replica that may lead, else -1. A returned leader outside
    `isr` was elected uncleanly: the caller makes it the ISR alone."""
    leader = part.leader
    # The ISR is a subset of the replicas, so a leader in the target ISR is a replica. A replica
    # in a dir its broker reports slow leads only when no other clean replica may (issue 35).
    for avoid_slow in (True, False):
        if (
            leader not in (records.NO_LEADER, remove)
            and leader in isr
            and acceptor.accepts(leader, directories[part.replicas.index(leader)])
            and not (avoid_slow and acceptor.slow(leader, directories[part.replicas.index(leader)]))
        ):
            return leader
        for broker_id, directory in zip(part.replicas, directories, strict=True):
            if (
                broker_id != remove
                and broker_id in isr
                and acceptor.accepts(broker_id, directory)
                and not (avoid_slow and acceptor.slow(broker_id, directory))
            ):
                return broker_id
    if acceptor.unclean_allowed(topic_id) if unclean is None else unclean:
        for broker_id, directory in zip(part.replicas, directories, strict=True):
            if broker_id != remove and acceptor.accepts(broker_id, directory):
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
    unclean: bool | None = None,
) -> records.PartitionChangeRecord | None:
    """The change to `part` (target ISR, target dirs, broker to remove), or None if a no-op.

    Pass one `acceptor` for a loop over many partitions within one step (no broker changes in
    between); by default a fresh one is used. `unclean` overrides the topic's setting (a step
    that changes the setting itself decides with the new value).
    """
    target_isr = part.isr if isr is None else tuple(isr)
    if remove is not None and remove in target_isr and len(target_isr) > 1:
        target_isr = tuple(b for b in target_isr if b != remove)
    target_dirs = part.directories if directories is None else tuple(directories)
    leader = elect_leader(
        acceptor or Acceptor(draft),
        part,
        topic_id=key[0],
        isr=target_isr,
        directories=target_dirs,
        remove=remove,
        unclean=unclean,
    )
    if leader != records.NO_LEADER and leader not in target_isr:
        target_isr = (leader,)  # an unclean election: the ISR is the new leader alone
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
    leader = elect_leader(
        acceptor, part, topic_id=key[0], isr=isr, directories=part.directories, remove=remove
    )
    if leader != records.NO_LEADER and leader not in isr:
        isr = (leader,)  # an unclean election: the ISR is the new leader alone
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
    """After unfencing: give leaderless partitions whose ISR holds the broker a leader, and those
    whose topic allows an unclean election one outside the ISR."""
    image = draft.image
    hosted = image.replicas_by_broker.get(broker_id, set())
    candidates = (
        hosted & image.leaderless if len(hosted) < len(image.leaderless) else image.leaderless & hosted
    )
    acceptor = Acceptor(draft)
    for key in sorted(candidates):
        part = draft.partition(key)
        if part is None or (broker_id not in part.isr and not acceptor.unclean_allowed(key[0])):
            continue
        record = partition_change(draft, key, part, acceptor=acceptor)
        if record is not None:
            draft.append(record)


def elect_unclean_leaders(draft: Draft, topic_id: Uuid) -> None:
    """Unclean leader election was just enabled for the topic: give each of its leaderless
    partitions the first replica that may lead (the ISR becomes that leader alone)."""
    acceptor = Acceptor(draft)
    for key in sorted(k for k in draft.image.leaderless if k[0] == topic_id):
        part = draft.partition(key)
        if part is None:
            continue
        record = partition_change(draft, key, part, acceptor=acceptor, unclean=True)
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


def report_slow_dirs(draft: Draft, broker_id: int, slow_dirs: Sequence[Uuid]) -> None:
    """Record the dirs a broker reports slow now (issue 35), then move the leadership of the
    replicas it leads from a newly slow dir to another ISR member that may lead and is not in a
    slow dir (the broker stays in the ISR: a slow dir still follows). A partition with no such
    member keeps its leader."""
    reg = draft.broker(broker_id)
    if reg is None:
        raise ValueError(f"cannot record slow dirs of unregistered broker {broker_id}")
    newly = set(slow_dirs) - set(reg.slow_log_dirs)
    draft.append(
        records.BrokerRegistrationChangeRecord(
            broker_id=broker_id, broker_epoch=reg.broker_epoch, slow_log_dirs=tuple(sorted(slow_dirs))
        )
    )
    acceptor = Acceptor(draft)
    for directory in sorted(newly):
        for key in sorted(draft.image.replicas_by_dir.get((broker_id, directory), ())):
            part = draft.partition(key)
            if part is None or part.leader != broker_id:
                continue
            record = partition_change(draft, key, part, acceptor=acceptor)
            if record is not None:
                draft.append(record)
