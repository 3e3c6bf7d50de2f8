"""The cluster image: brokers, topics, partitions, dynamic broker configs, SCRAM credentials,
ACLs and the producer-id watermark as the metadata log describes them.

Guarantees:
* `ClusterImage.replay(record, offset)` is the only way the image changes; it is used alike for
  live writes, log recovery and snapshot loading. It raises `ReplayError` on an impossible record
  (unknown broker, wrong epoch, unknown partition, skipped partition epoch, dir owned twice, a
  config of an unknown topic or a delete of a config it does not have, a removal of a credential
  that does not exist, a producer-id watermark that does not move up).
* A topic's `configs` are its effective configs: the TopicRecord's, overlaid by every later
  ConfigRecord (a null value deletes the key). A change replaces the mapping, never mutates it.
* `broker_configs` holds the dynamic broker configs by resource name ("" = the cluster default,
  else a broker id in decimal): every BrokerConfigRecord folded in (a null value deletes the key,
  a resource left with no key disappears). A change replaces the resource's mapping, never
  mutates it. Deleting a key the resource does not have is a `ReplayError`.
* `acls` is the `jbod_core.acls.AclIndex` of every AccessControlEntryRecord not removed since (by
  id, resource type, literal name and prefix); adding an id or an ACL twice, removing an unknown
  id, or an enum code that is not Kafka's is a `ReplayError`.
* `client_quotas` holds the client quotas by entity (`jbod_core.quotas`): every ClientQuotaRecord
  folded in (a removal deletes the key, an entity left with no key disappears); each mapping is
  replaced, never mutated. Removing a key the entity does not have, or an entity that is not
  valid, is a `ReplayError`.
* Registrations and partitions are frozen values: a change replaces the value, so a reader holding
  an older value never sees it change, and a snapshot is a shallow copy of the dicts.
* The indexes (replicas per broker, per (broker, dir), unassigned replicas per broker, leaders per
  broker, leaderless partitions, partitions being reassigned, online-dir owner) are kept in step with every replay, so that
  handling a failed dir costs the number of replicas in it, not the size of the cluster.
  `check_indexes` rebuilds them from scratch and compares (used by tests).
* `apply_broker_change` and `apply_partition_change` are the pure value transitions that replay
  uses; decisions use the same functions to see the effect of records they have drafted.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, NamedTuple, TypeAlias

from jbod_core import acls, quotas, records
from jbod_core.ids import UNASSIGNED_DIR, Uuid, is_online

PartitionKey: TypeAlias = tuple[Uuid, int]


class ReplayError(RuntimeError):
    """A record that cannot apply to the image: the log and the image disagree."""


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    broker_epoch: int
    incarnation_id: Uuid
    log_dirs: tuple[Uuid, ...]  # online dirs, sorted in the contract's order
    offline_log_dirs: tuple[Uuid, ...]  # dirs of this registration reported offline, sorted
    has_offline_log_dirs: bool
    fenced: bool
    in_controlled_shutdown: bool
    listeners: tuple[records.Listener, ...]
    rack: str | None
    cordoned_log_dirs: tuple[Uuid, ...] = ()  # KIP-1066: dirs the broker reports cordoned, sorted
    slow_log_dirs: tuple[Uuid, ...] = ()  # issue 35: dirs the broker reports slow, sorted

    @property
    def is_multi_dir(self) -> bool:
        """True when the registration listed more than one dir (the JBOD fencing gate applies)."""
        return len(self.log_dirs) + len(self.offline_log_dirs) > 1

    @property
    def is_active(self) -> bool:
        """Registered, unfenced and not shutting down: may lead and receive new replicas."""
        return not self.fenced and not self.in_controlled_shutdown

    def has_online_dir(self, directory: Uuid) -> bool:
        return is_online(directory, self.log_dirs)

    @property
    def uncordoned_log_dirs(self) -> tuple[Uuid, ...]:
        """The online dirs that may receive new replicas (KIP-1066)."""
        cordoned = set(self.cordoned_log_dirs)
        return tuple(d for d in self.log_dirs if d not in cordoned)


def accepts_new_replicas(reg: BrokerRegistration) -> bool:
    """KIP-1066: the broker is active (unfenced, not shutting down) and, once it has cordoned a
    dir, at least one of its online dirs is not cordoned. (A broker that cordons nothing is
    judged as before cordoning existed.) Automatic placement and reassignment targets use it."""
    return reg.is_active and (not reg.cordoned_log_dirs or bool(reg.uncordoned_log_dirs))


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    directories: tuple[Uuid, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    # A reassignment in progress (KIP-455): replicas joining and leaving; both empty otherwise.
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    def directory_of(self, broker_id: int) -> Uuid:
        return self.directories[self.replicas.index(broker_id)]

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas once the reassignment completes (the replicas when none is in progress)."""
        if not self.removing_replicas:
            return self.replicas
        return tuple(b for b in self.replicas if b not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replicas before the reassignment began (what a cancel goes back to)."""
        if not self.adding_replicas:
            return self.replicas
        return tuple(b for b in self.replicas if b not in self.adding_replicas)


class ScramCredential(NamedTuple):
    """What a broker needs to check a SCRAM login (RFC 5802); never the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


# Kafka's ScramMechanism types: the only mechanisms a credential may have.
SCRAM_MECHANISMS: Final[Mapping[int, str]] = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


@dataclass(slots=True)
class TopicImage:
    name: str
    topic_id: Uuid
    configs: Mapping[str, str]
    partitions: dict[int, PartitionRegistration] = field(default_factory=dict)


def registration_from_record(record: records.RegisterBrokerRecord) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id=record.broker_id,
        broker_epoch=record.broker_epoch,
        incarnation_id=record.incarnation_id,
        log_dirs=tuple(sorted(record.log_dirs)),
        offline_log_dirs=tuple(sorted(record.offline_log_dirs)),
        has_offline_log_dirs=record.has_offline_log_dirs,
        fenced=record.fenced,
        in_controlled_shutdown=record.in_controlled_shutdown,
        listeners=record.listeners,
        rack=record.rack,
        cordoned_log_dirs=tuple(sorted(record.cordoned_log_dirs)),
        slow_log_dirs=tuple(sorted(record.slow_log_dirs)),
    )


def apply_broker_change(
    current: BrokerRegistration, record: records.BrokerRegistrationChangeRecord
) -> BrokerRegistration:
    """The registration after `record`; `ReplayError` if the epochs disagree."""
    if current.broker_epoch != record.broker_epoch:
        raise ReplayError(
            f"BrokerRegistrationChangeRecord for broker {record.broker_id} carries epoch "
            f"{record.broker_epoch}, registration has {current.broker_epoch}"
        )
    changes: dict[str, Any] = {}
    if record.fenced is not None:
        changes["fenced"] = record.fenced
    if record.in_controlled_shutdown is not None:
        changes["in_controlled_shutdown"] = record.in_controlled_shutdown
    if record.log_dirs is not None:
        changes["log_dirs"] = tuple(sorted(record.log_dirs))
    if record.offline_log_dirs is not None:
        changes["offline_log_dirs"] = tuple(sorted(record.offline_log_dirs))
    if record.cordoned_log_dirs is not None:
        changes["cordoned_log_dirs"] = tuple(sorted(record.cordoned_log_dirs))
    if record.slow_log_dirs is not None:
        changes["slow_log_dirs"] = tuple(sorted(record.slow_log_dirs))
    return replace(current, **changes) if changes else current


def partition_from_record(record: records.PartitionRecord) -> PartitionRegistration:
    if len(record.directories) != len(record.replicas):
        raise ReplayError(
            f"PartitionRecord {record.topic_id}-{record.partition_id} has {len(record.directories)} "
            f"directories for {len(record.replicas)} replicas"
        )
    part = PartitionRegistration(
        replicas=record.replicas,
        isr=record.isr,
        directories=record.directories,
        leader=record.leader,
        leader_epoch=record.leader_epoch,
        partition_epoch=record.partition_epoch,
        adding_replicas=record.adding_replicas,
        removing_replicas=record.removing_replicas,
    )
    _check_reassignment(part, f"PartitionRecord {record.topic_id}-{record.partition_id}")
    return part


def _check_reassignment(part: PartitionRegistration, what: str) -> None:
    adding, removing = set(part.adding_replicas), set(part.removing_replicas)
    if not (adding | removing) <= set(part.replicas) or adding & removing:
        raise ReplayError(
            f"{what} has adding replicas {list(part.adding_replicas)} and removing replicas "
            f"{list(part.removing_replicas)} that are not distinct replicas of {list(part.replicas)}"
        )


def apply_partition_change(
    current: PartitionRegistration, record: records.PartitionChangeRecord
) -> PartitionRegistration:
    """The partition after `record`; `ReplayError` if the record skips or repeats an epoch."""
    if record.partition_epoch != current.partition_epoch + 1:
        raise ReplayError(
            f"PartitionChangeRecord {record.topic_id}-{record.partition_id} has partition epoch "
            f"{record.partition_epoch}, expected {current.partition_epoch + 1}"
        )
    replicas = current.replicas if record.replicas is None else record.replicas
    directories = current.directories if record.directories is None else record.directories
    if record.replicas is None and record.directories is None:
        pass  # the common case: only the ISR and/or the leader change
    elif record.replicas is not None and record.directories is None:
        # Replicas kept keep their dir; new replicas start UNASSIGNED.
        old = dict(zip(current.replicas, current.directories, strict=True))
        directories = tuple(old.get(b, UNASSIGNED_DIR) for b in replicas)
    elif len(directories) != len(replicas):
        raise ReplayError(
            f"PartitionChangeRecord {record.topic_id}-{record.partition_id} leaves "
            f"{len(directories)} directories for {len(replicas)} replicas"
        )
    if record.leader is None:
        leader = current.leader
        leader_epoch = current.leader_epoch
    else:
        leader = record.leader
        leader_epoch = current.leader_epoch + 1 if record.leader_epoch is None else record.leader_epoch
    # Positional: this runs once per replayed change, the hottest path of recovery.
    part = PartitionRegistration(
        replicas,
        current.isr if record.isr is None else record.isr,
        directories,
        leader,
        leader_epoch,
        record.partition_epoch,
        current.adding_replicas if record.adding_replicas is None else record.adding_replicas,
        current.removing_replicas if record.removing_replicas is None else record.removing_replicas,
    )
    if (
        record.replicas is not None
        or record.adding_replicas is not None
        or record.removing_replicas is not None
    ):
        _check_reassignment(part, f"PartitionChangeRecord {record.topic_id}-{record.partition_id}")
    return part


class ClusterImage:
    """The replayed state of the metadata log, with the indexes the decisions need."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics: dict[Uuid, TopicImage] = {}
        self.topic_ids_by_name: dict[str, Uuid] = {}
        self.end_offset = 0  # the offset the next record will get
        # Indexes, maintained by replay.
        self.replicas_by_broker: dict[int, set[PartitionKey]] = {}
        self.replicas_by_dir: dict[tuple[int, Uuid], set[PartitionKey]] = {}
        self.unassigned_by_broker: dict[int, set[PartitionKey]] = {}
        self.leaders_by_broker: dict[int, set[PartitionKey]] = {}
        self.leaderless: set[PartitionKey] = set()
        self.reassigning: set[PartitionKey] = set()  # partitions with a reassignment in progress
        self.dir_owner: dict[Uuid, int] = {}
        self.partition_count = 0
        # Dynamic broker configs by resource name ("" = cluster default): each mapping replaced,
        # never mutated.
        self.broker_configs: dict[str, Mapping[str, str]] = {}
        # SCRAM credentials by (user name, mechanism).
        self.scram_credentials: dict[tuple[str, int], ScramCredential] = {}
        # ACLs by id, indexed for authorization (jbod_core.acls).
        self.acls = acls.AclIndex()
        # Client quotas by entity (jbod_core.quotas): each mapping replaced, never mutated.
        self.client_quotas: dict[tuple[tuple[str, str | None], ...], Mapping[str, float]] = {}
        # The last producer-id block handed out (None: none yet); ids below its watermark are taken.
        self.producer_ids: records.ProducerIdsRecord | None = None
        # Offset of the record that put a broker into controlled shutdown (derived, not compared).
        self.controlled_shutdown_offsets: dict[int, int] = {}

    # -- reads -------------------------------------------------------------------------------

    def partition(self, key: PartitionKey) -> PartitionRegistration | None:
        topic = self.topics.get(key[0])
        return None if topic is None else topic.partitions.get(key[1])

    def iter_partitions(self) -> Iterator[tuple[PartitionKey, PartitionRegistration]]:
        for topic_id, topic in self.topics.items():
            for index, part in topic.partitions.items():
                yield (topic_id, index), part

    def unassigned_count(self, broker_id: int) -> int:
        return len(self.unassigned_by_broker.get(broker_id, ()))

    def leader_count(self, broker_id: int) -> int:
        return len(self.leaders_by_broker.get(broker_id, ()))

    def scram_credential(self, name: str, mechanism: int) -> ScramCredential | None:
        """The user's credential for `mechanism` (1 SCRAM-SHA-256, 2 SCRAM-SHA-512), or None."""
        return self.scram_credentials.get((name, mechanism))

    @property
    def next_producer_id(self) -> int:
        """The first producer id not yet handed out."""
        return 0 if self.producer_ids is None else self.producer_ids.next_producer_id

    def offline_replicas(self, part: PartitionRegistration) -> list[int]:
        """Protocol §3.6: replicas whose broker is unregistered or fenced, or whose dir is not online."""
        offline = []
        for broker_id, directory in zip(part.replicas, part.directories, strict=True):
            reg = self.brokers.get(broker_id)
            if reg is None or reg.fenced or not reg.has_online_dir(directory):
                offline.append(broker_id)
        return offline

    # -- replay ------------------------------------------------------------------------------

    def replay(self, record: records.Record, offset: int) -> None:
        """Apply one record written at `offset` (the only mutation path)."""
        if offset + 1 < self.end_offset:
            # Snapshot records all carry the snapshot's last offset; anything older is a bug.
            raise ReplayError(f"record at offset {offset} is behind the image end offset {self.end_offset}")
        if isinstance(record, records.PartitionChangeRecord):
            self._replay_partition_change(record)
        elif isinstance(record, records.BrokerRegistrationChangeRecord):
            self._replay_broker_change(record, offset)
        elif isinstance(record, records.PartitionRecord):
            self._replay_partition(record)
        elif isinstance(record, records.RegisterBrokerRecord):
            self._replay_register(record, offset)
        elif isinstance(record, records.TopicRecord):
            self._replay_topic(record)
        elif isinstance(record, records.RemoveTopicRecord):
            self._replay_remove_topic(record)
        elif isinstance(record, records.UnregisterBrokerRecord):
            self._replay_unregister(record)
        else:
            self._replay_admin(record)
        self.end_offset = offset + 1

    def _replay_admin(self, record: records.Record) -> None:
        """The records of the admin extensions: configs, SCRAM credentials, producer ids."""
        if isinstance(record, records.ConfigRecord):
            self._replay_config(record)
        elif isinstance(record, records.BrokerConfigRecord):
            self._replay_broker_config(record)
        elif isinstance(record, records.UserScramCredentialRecord):
            self._replay_scram(record)
        elif isinstance(record, records.RemoveUserScramCredentialRecord):
            self._replay_remove_scram(record)
        elif isinstance(record, records.ProducerIdsRecord):
            self._replay_producer_ids(record)
        elif isinstance(record, records.AccessControlEntryRecord):
            try:
                self.acls.add(record.id, acls.Acl.from_record(record))
            except ValueError as exc:
                raise ReplayError(f"AccessControlEntryRecord {record.id}: {exc}") from exc
        elif isinstance(record, records.RemoveAccessControlEntryRecord):
            try:
                self.acls.remove(record.id)
            except KeyError:
                raise ReplayError(f"RemoveAccessControlEntryRecord for unknown ACL id {record.id}") from None
        elif isinstance(record, records.ClientQuotaRecord):
            self._replay_client_quota(record)
        else:  # pragma: no cover - the union is closed
            raise ReplayError(f"unknown record {record!r}")

    def _set_dir_owner(self, broker_id: int, dirs: tuple[Uuid, ...], previous: tuple[Uuid, ...]) -> None:
        for d in previous:
            if self.dir_owner.get(d) == broker_id:
                del self.dir_owner[d]
        for d in dirs:
            owner = self.dir_owner.get(d)
            if owner is not None and owner != broker_id:
                raise ReplayError(f"directory {d} of broker {broker_id} is already online in broker {owner}")
        for d in dirs:
            self.dir_owner[d] = broker_id

    def _track_controlled_shutdown(self, reg: BrokerRegistration, offset: int) -> None:
        if reg.in_controlled_shutdown and not reg.fenced:
            self.controlled_shutdown_offsets.setdefault(reg.broker_id, offset)
        else:
            self.controlled_shutdown_offsets.pop(reg.broker_id, None)

    def _replay_register(self, record: records.RegisterBrokerRecord, offset: int) -> None:
        new = registration_from_record(record)
        old = self.brokers.get(record.broker_id)
        self._set_dir_owner(record.broker_id, new.log_dirs, old.log_dirs if old else ())
        self.brokers[record.broker_id] = new
        self._track_controlled_shutdown(new, offset)

    def _replay_broker_change(self, record: records.BrokerRegistrationChangeRecord, offset: int) -> None:
        old = self.brokers.get(record.broker_id)
        if old is None:
            raise ReplayError(f"BrokerRegistrationChangeRecord for unregistered broker {record.broker_id}")
        new = apply_broker_change(old, record)
        if new.log_dirs != old.log_dirs:
            self._set_dir_owner(record.broker_id, new.log_dirs, old.log_dirs)
        self.brokers[record.broker_id] = new
        self._track_controlled_shutdown(new, offset)

    def _replay_unregister(self, record: records.UnregisterBrokerRecord) -> None:
        old = self.brokers.get(record.broker_id)
        if old is None or old.broker_epoch != record.broker_epoch:
            raise ReplayError(
                f"UnregisterBrokerRecord for broker {record.broker_id} epoch {record.broker_epoch}"
            )
        self._set_dir_owner(record.broker_id, (), old.log_dirs)
        del self.brokers[record.broker_id]
        self.controlled_shutdown_offsets.pop(record.broker_id, None)

    def _replay_topic(self, record: records.TopicRecord) -> None:
        if record.topic_id in self.topics:
            raise ReplayError(f"topic id {record.topic_id} exists already")
        if record.name in self.topic_ids_by_name:
            raise ReplayError(f"topic name {record.name} exists already")
        self.topics[record.topic_id] = TopicImage(
            name=record.name, topic_id=record.topic_id, configs=dict(record.configs)
        )
        self.topic_ids_by_name[record.name] = record.topic_id

    def _replay_remove_topic(self, record: records.RemoveTopicRecord) -> None:
        topic = self.topics.get(record.topic_id)
        if topic is None:
            raise ReplayError(f"RemoveTopicRecord for unknown topic id {record.topic_id}")
        for index, part in topic.partitions.items():
            self._unindex((record.topic_id, index), part)
        self.partition_count -= len(topic.partitions)
        del self.topics[record.topic_id]
        del self.topic_ids_by_name[topic.name]

    def _replay_config(self, record: records.ConfigRecord) -> None:
        topic = self.topics.get(record.topic_id)
        if topic is None:
            raise ReplayError(f"ConfigRecord {record.name} for unknown topic id {record.topic_id}")
        configs = dict(topic.configs)  # replaced, never mutated: snapshot copies share the old one
        if record.value is not None:
            configs[record.name] = record.value
        elif configs.pop(record.name, None) is None:
            raise ReplayError(
                f"ConfigRecord deletes config {record.name} that topic {topic.name} does not have"
            )
        topic.configs = configs

    def _replay_broker_config(self, record: records.BrokerConfigRecord) -> None:
        configs = dict(self.broker_configs.get(record.broker, {}))
        if record.value is not None:
            configs[record.name] = record.value
        elif configs.pop(record.name, None) is None:
            shown = "the cluster default" if record.broker == "" else f"broker {record.broker}"
            raise ReplayError(f"BrokerConfigRecord deletes config {record.name} that {shown} does not have")
        if configs:
            self.broker_configs[record.broker] = configs
        else:
            self.broker_configs.pop(record.broker, None)

    def _replay_scram(self, record: records.UserScramCredentialRecord) -> None:
        if record.mechanism not in SCRAM_MECHANISMS:
            raise ReplayError(
                f"UserScramCredentialRecord for {record.name} has unknown mechanism {record.mechanism}"
            )
        self.scram_credentials[(record.name, record.mechanism)] = ScramCredential(
            salt=record.salt,
            stored_key=record.stored_key,
            server_key=record.server_key,
            iterations=record.iterations,
        )

    def _replay_client_quota(self, record: records.ClientQuotaRecord) -> None:
        if quotas.entity_problem(record.entity) is not None or record.entity != quotas.entity(record.entity):
            raise ReplayError(f"ClientQuotaRecord for an invalid entity {record.entity}")
        values = dict(self.client_quotas.get(record.entity, {}))
        if record.remove:
            if values.pop(record.key, None) is None:
                raise ReplayError(
                    f"ClientQuotaRecord removes {record.key} of {quotas.describe_entity(record.entity)}: not set"
                )
        else:
            values[record.key] = record.value
        if values:
            self.client_quotas[record.entity] = values
        else:
            self.client_quotas.pop(record.entity, None)

    def _replay_remove_scram(self, record: records.RemoveUserScramCredentialRecord) -> None:
        if self.scram_credentials.pop((record.name, record.mechanism), None) is None:
            raise ReplayError(
                f"RemoveUserScramCredentialRecord for {record.name} mechanism {record.mechanism}: no such credential"
            )

    def _replay_producer_ids(self, record: records.ProducerIdsRecord) -> None:
        if record.next_producer_id <= self.next_producer_id:
            raise ReplayError(
                f"ProducerIdsRecord moves the next producer id to {record.next_producer_id}, "
                f"not above the current {self.next_producer_id}"
            )
        self.producer_ids = record

    def _replay_partition(self, record: records.PartitionRecord) -> None:
        topic = self.topics.get(record.topic_id)
        if topic is None:
            raise ReplayError(f"PartitionRecord for unknown topic id {record.topic_id}")
        if record.partition_id in topic.partitions:
            raise ReplayError(f"PartitionRecord {record.topic_id}-{record.partition_id} exists already")
        part = partition_from_record(record)
        topic.partitions[record.partition_id] = part
        self.partition_count += 1
        self._index((record.topic_id, record.partition_id), part)

    def _replay_partition_change(self, record: records.PartitionChangeRecord) -> None:
        topic = self.topics.get(record.topic_id)
        old = None if topic is None else topic.partitions.get(record.partition_id)
        if topic is None or old is None:
            raise ReplayError(
                f"PartitionChangeRecord for unknown partition {record.topic_id}-{record.partition_id}"
            )
        new = apply_partition_change(old, record)
        topic.partitions[record.partition_id] = new
        key = (record.topic_id, record.partition_id)
        if new.replicas is not old.replicas and new.replicas != old.replicas:
            self._unindex_placement(key, old)
            self._index_placement(key, new)
        elif new.directories is not old.directories:
            for broker_id, before, after in zip(new.replicas, old.directories, new.directories, strict=True):
                if before != after:
                    self._unindex_dir(key, broker_id, before)
                    self._index_dir(key, broker_id, after)
        if new.leader != old.leader:
            self._unindex_leader(key, old)
            self._index_leader(key, new)
        if new.reassigning:
            self.reassigning.add(key)
        elif old.reassigning:
            self.reassigning.discard(key)

    # -- index maintenance -------------------------------------------------------------------

    def _index(self, key: PartitionKey, part: PartitionRegistration) -> None:
        self._index_placement(key, part)
        self._index_leader(key, part)
        if part.reassigning:
            self.reassigning.add(key)

    def _unindex(self, key: PartitionKey, part: PartitionRegistration) -> None:
        self._unindex_placement(key, part)
        self._unindex_leader(key, part)
        self.reassigning.discard(key)

    def _index_dir(self, key: PartitionKey, broker_id: int, directory: Uuid) -> None:
        if directory == UNASSIGNED_DIR:
            self.unassigned_by_broker.setdefault(broker_id, set()).add(key)
        elif not directory.is_reserved:
            self.replicas_by_dir.setdefault((broker_id, directory), set()).add(key)

    def _unindex_dir(self, key: PartitionKey, broker_id: int, directory: Uuid) -> None:
        if directory == UNASSIGNED_DIR:
            _discard(self.unassigned_by_broker, broker_id, key)
        elif not directory.is_reserved:
            _discard(self.replicas_by_dir, (broker_id, directory), key)

    def _index_placement(self, key: PartitionKey, part: PartitionRegistration) -> None:
        for broker_id, directory in zip(part.replicas, part.directories, strict=True):
            self.replicas_by_broker.setdefault(broker_id, set()).add(key)
            if directory == UNASSIGNED_DIR:
                self.unassigned_by_broker.setdefault(broker_id, set()).add(key)
            elif not directory.is_reserved:
                self.replicas_by_dir.setdefault((broker_id, directory), set()).add(key)

    def _unindex_placement(self, key: PartitionKey, part: PartitionRegistration) -> None:
        for broker_id, directory in zip(part.replicas, part.directories, strict=True):
            _discard(self.replicas_by_broker, broker_id, key)
            if directory == UNASSIGNED_DIR:
                _discard(self.unassigned_by_broker, broker_id, key)
            elif not directory.is_reserved:
                _discard(self.replicas_by_dir, (broker_id, directory), key)

    def _index_leader(self, key: PartitionKey, part: PartitionRegistration) -> None:
        if part.leader == records.NO_LEADER:
            self.leaderless.add(key)
        else:
            self.leaders_by_broker.setdefault(part.leader, set()).add(key)

    def _unindex_leader(self, key: PartitionKey, part: PartitionRegistration) -> None:
        if part.leader == records.NO_LEADER:
            self.leaderless.discard(key)
        else:
            _discard(self.leaders_by_broker, part.leader, key)

    # -- snapshots and checks ----------------------------------------------------------------

    def to_records(self) -> list[records.Record]:
        """The image as records: replaying them into an empty image gives an equal image. A
        TopicRecord carries the topic's effective configs (its ConfigRecords folded in); every
        SCRAM credential is a UserScramCredentialRecord; the producer-id watermark is the last
        ProducerIdsRecord."""
        return list(self.iter_records())

    def record_count(self) -> int:
        """How many records `iter_records` yields."""
        return (
            len(self.brokers)
            + len(self.topics)
            + sum(len(t.partitions) for t in self.topics.values())
            + len(self.scram_credentials)
            + sum(len(c) for c in self.broker_configs.values())
            + len(self.acls)
            + sum(len(q) for q in self.client_quotas.values())
            + (self.producer_ids is not None)
        )

    def iter_records(self) -> Iterator[records.Record]:
        """`to_records` one at a time (for streaming a snapshot of a large image)."""
        for reg in sorted(self.brokers.values(), key=lambda r: r.broker_id):
            yield (
                records.RegisterBrokerRecord(
                    broker_id=reg.broker_id,
                    broker_epoch=reg.broker_epoch,
                    incarnation_id=reg.incarnation_id,
                    log_dirs=reg.log_dirs,
                    has_offline_log_dirs=reg.has_offline_log_dirs,
                    fenced=reg.fenced,
                    in_controlled_shutdown=reg.in_controlled_shutdown,
                    listeners=reg.listeners,
                    rack=reg.rack,
                    offline_log_dirs=reg.offline_log_dirs,
                    cordoned_log_dirs=reg.cordoned_log_dirs,
                    slow_log_dirs=reg.slow_log_dirs,
                )
            )
        for topic in self.topics.values():
            yield records.TopicRecord(name=topic.name, topic_id=topic.topic_id, configs=dict(topic.configs))
            for index in sorted(topic.partitions):
                part = topic.partitions[index]
                yield (
                    records.PartitionRecord(
                        topic_id=topic.topic_id,
                        partition_id=index,
                        replicas=part.replicas,
                        isr=part.isr,
                        leader=part.leader,
                        leader_epoch=part.leader_epoch,
                        partition_epoch=part.partition_epoch,
                        directories=part.directories,
                        adding_replicas=part.adding_replicas,
                        removing_replicas=part.removing_replicas,
                    )
                )
        for broker in sorted(self.broker_configs):
            for name, value in sorted(self.broker_configs[broker].items()):
                yield records.BrokerConfigRecord(broker=broker, name=name, value=value)
        for (name, mechanism), credential in sorted(self.scram_credentials.items()):
            yield records.UserScramCredentialRecord(
                name=name,
                mechanism=mechanism,
                salt=credential.salt,
                stored_key=credential.stored_key,
                server_key=credential.server_key,
                iterations=credential.iterations,
            )
        for acl_id, acl in sorted(self.acls, key=lambda item: item[0]):
            yield acl.to_record(acl_id)
        for entity in sorted(self.client_quotas, key=lambda e: [(k, n is not None, n or "") for k, n in e]):
            for key, number in sorted(self.client_quotas[entity].items()):
                yield records.ClientQuotaRecord(entity=entity, key=key, value=number)
        if self.producer_ids is not None:
            yield self.producer_ids

    def copy_for_snapshot(self) -> ClusterImage:
        """A copy sharing the frozen registrations and partitions (cheap), without indexes."""
        copy = ClusterImage()
        copy.brokers = dict(self.brokers)
        copy.topics = {
            topic_id: TopicImage(
                name=t.name, topic_id=t.topic_id, configs=t.configs, partitions=dict(t.partitions)
            )
            for topic_id, t in self.topics.items()
        }
        copy.scram_credentials = dict(self.scram_credentials)
        copy.broker_configs = dict(self.broker_configs)
        copy.acls = self.acls.copy()
        copy.client_quotas = dict(self.client_quotas)
        copy.producer_ids = self.producer_ids
        copy.end_offset = self.end_offset
        return copy

    def canonical(self) -> tuple[Any, ...]:
        """A comparable value of everything the log determines (excluding the end offset)."""
        topics = sorted(
            (t.name, t.topic_id, tuple(sorted(t.configs.items())), tuple(sorted(t.partitions.items())))
            for t in self.topics.values()
        )
        return (
            tuple(sorted(self.brokers.items())),
            tuple(topics),
            tuple(sorted(self.scram_credentials.items())),
            self.producer_ids,
            tuple(sorted((b, tuple(sorted(c.items()))) for b, c in self.broker_configs.items())),
            tuple(sorted(self.acls.by_id.items())),
            tuple(sorted(((repr(e), tuple(sorted(q.items()))) for e, q in self.client_quotas.items()))),
        )

    def check_indexes(self) -> None:
        """Rebuild every index from scratch and raise `AssertionError` if any differs."""
        fresh = ClusterImage()
        fresh.brokers = dict(self.brokers)
        for topic_id, topic in self.topics.items():
            for index, part in topic.partitions.items():
                fresh._index((topic_id, index), part)
        for reg in self.brokers.values():
            for d in reg.log_dirs:
                fresh.dir_owner[d] = reg.broker_id

        def nonempty(index: Mapping[Any, set[PartitionKey]]) -> dict[Any, set[PartitionKey]]:
            return {k: v for k, v in index.items() if v}

        for name in ("replicas_by_broker", "replicas_by_dir", "unassigned_by_broker", "leaders_by_broker"):
            ours, theirs = nonempty(getattr(self, name)), nonempty(getattr(fresh, name))
            if ours != theirs:
                raise AssertionError(f"index {name} is out of step with the partitions")
        if self.leaderless != fresh.leaderless:
            raise AssertionError("index leaderless is out of step with the partitions")
        if self.reassigning != fresh.reassigning:
            raise AssertionError("index reassigning is out of step with the partitions")
        if self.dir_owner != fresh.dir_owner:
            raise AssertionError("index dir_owner is out of step with the registrations")
        if self.partition_count != sum(len(t.partitions) for t in self.topics.values()):
            raise AssertionError("partition_count is out of step")


def _discard(index: dict[Any, set[PartitionKey]], key: Any, value: PartitionKey) -> None:
    bucket = index.get(key)
    if bucket is not None:
        bucket.discard(value)
        if not bucket:
            del index[key]
