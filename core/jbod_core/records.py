"""Metadata log records (protocol §3.5) as frozen typed values, and their JSON codec.

Guarantees:
* Every record type of the contract (and of its extensions, below) is a frozen dataclass; `to_data` gives the contract's `data`
  object (camelCase, Uuids as text) and `decode(type, data)` gives the record back, so that
  `decode(r.TYPE, r.to_data()) == r` for every record.
* Change records carry only what changed: a field left as `None` is omitted from `data` and means
  "unchanged" on replay.
* `decode` raises `RecordError` for an unknown type or a malformed field; readers ignore fields
  they do not know (the contract allows records to carry more fields).
* Extensions beyond the contract's seven types (docs/api.md, "Record types"), as in KRaft:
  `ConfigRecord` (a topic config set or deleted), `UserScramCredentialRecord` and
  `RemoveUserScramCredentialRecord` (SCRAM credentials; bytes as standard base64 with padding),
  `ProducerIdsRecord` (the producer-id watermark) and `BrokerConfigRecord` (KRaft's ConfigRecord
  for a BROKER resource: a dynamic broker config set or deleted, issue 24), and KRaft's
  `AccessControlEntryRecord` / `RemoveAccessControlEntryRecord` (an ACL added or removed, issue
  25; its enums as Kafka's int8 codes, `jbod_core.acls`), and KRaft's `ClientQuotaRecord` (a
  client quota set or removed, issue 34; `jbod_core.quotas`).
* KRaft's `addingReplicas` / `removingReplicas` of a partition being reassigned (KIP-455) are
  extension fields of `PartitionRecord` (written only when non-empty) and
  `PartitionChangeRecord` (absent: unchanged).
* `cordonedLogDirs` (KIP-1066) on `RegisterBrokerRecord` and `BrokerRegistrationChangeRecord` is
  an extension field: a RegisterBrokerRecord without it has none cordoned; a change record
  without it leaves the cordoned dirs as they are.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from jbod_core.ids import Uuid

NO_LEADER: Final = -1


class RecordError(ValueError):
    """A record that cannot be decoded."""


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int

    def to_data(self) -> dict[str, Any]:
        return {"name": self.name, "host": self.host, "port": self.port}


def _uuids(values: Sequence[Uuid]) -> list[str]:
    return [str(v) for v in values]


def _base64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    TYPE: ClassVar[str] = "RegisterBrokerRecord"
    broker_id: int
    broker_epoch: int
    incarnation_id: Uuid
    log_dirs: tuple[Uuid, ...]
    has_offline_log_dirs: bool = False
    fenced: bool = True
    in_controlled_shutdown: bool = False
    listeners: tuple[Listener, ...] = ()
    rack: str | None = None
    # Extension (docs/decisions.md): dirs already known offline; non-empty only in snapshots and
    # same-incarnation re-registrations.
    offline_log_dirs: tuple[Uuid, ...] = ()
    # Extension (KIP-1066): the online dirs the broker reports cordoned (no new replica there).
    cordoned_log_dirs: tuple[Uuid, ...] = ()
    # Extension (issue 35): the online dirs the broker reports slow (no leadership while others may lead).
    slow_log_dirs: tuple[Uuid, ...] = ()

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "brokerId": self.broker_id,
            "brokerEpoch": self.broker_epoch,
            "incarnationId": str(self.incarnation_id),
            "logDirs": _uuids(self.log_dirs),
            "hasOfflineLogDirs": self.has_offline_log_dirs,
            "fenced": self.fenced,
            "inControlledShutdown": self.in_controlled_shutdown,
            "listeners": [listener.to_data() for listener in self.listeners],
            "rack": self.rack,
            "offlineLogDirs": _uuids(self.offline_log_dirs),
        }
        if self.cordoned_log_dirs:
            data["cordonedLogDirs"] = _uuids(self.cordoned_log_dirs)
        if self.slow_log_dirs:
            data["slowLogDirs"] = _uuids(self.slow_log_dirs)
        return data


@dataclass(frozen=True, slots=True)
class BrokerRegistrationChangeRecord:
    TYPE: ClassVar[str] = "BrokerRegistrationChangeRecord"
    broker_id: int
    broker_epoch: int
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None
    log_dirs: tuple[Uuid, ...] | None = None
    offline_log_dirs: tuple[Uuid, ...] | None = None
    cordoned_log_dirs: tuple[Uuid, ...] | None = None  # extension (KIP-1066)
    slow_log_dirs: tuple[Uuid, ...] | None = None  # extension (issue 35)

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"brokerId": self.broker_id, "brokerEpoch": self.broker_epoch}
        if self.fenced is not None:
            data["fenced"] = self.fenced
        if self.in_controlled_shutdown is not None:
            data["inControlledShutdown"] = self.in_controlled_shutdown
        if self.log_dirs is not None:
            data["logDirs"] = _uuids(self.log_dirs)
        if self.offline_log_dirs is not None:
            data["offlineLogDirs"] = _uuids(self.offline_log_dirs)
        if self.cordoned_log_dirs is not None:
            data["cordonedLogDirs"] = _uuids(self.cordoned_log_dirs)
        if self.slow_log_dirs is not None:
            data["slowLogDirs"] = _uuids(self.slow_log_dirs)
        return data


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRecord:
    TYPE: ClassVar[str] = "UnregisterBrokerRecord"
    broker_id: int
    broker_epoch: int

    def to_data(self) -> dict[str, Any]:
        return {"brokerId": self.broker_id, "brokerEpoch": self.broker_epoch}


@dataclass(frozen=True, slots=True)
class TopicRecord:
    TYPE: ClassVar[str] = "TopicRecord"
    name: str
    topic_id: Uuid
    configs: Mapping[str, str] = field(default_factory=dict)

    def to_data(self) -> dict[str, Any]:
        return {"name": self.name, "topicId": str(self.topic_id), "configs": dict(self.configs)}


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    TYPE: ClassVar[str] = "PartitionRecord"
    topic_id: Uuid
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    directories: tuple[Uuid, ...]
    # Extension (KRaft's fields, KIP-455): a reassignment in progress; written only when non-empty.
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "topicId": str(self.topic_id),
            "partitionId": self.partition_id,
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "leader": self.leader,
            "leaderEpoch": self.leader_epoch,
            "partitionEpoch": self.partition_epoch,
            "directories": _uuids(self.directories),
        }
        if self.adding_replicas:
            data["addingReplicas"] = list(self.adding_replicas)
        if self.removing_replicas:
            data["removingReplicas"] = list(self.removing_replicas)
        return data


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    TYPE: ClassVar[str] = "PartitionChangeRecord"
    topic_id: Uuid
    partition_id: int
    partition_epoch: int
    replicas: tuple[int, ...] | None = None
    isr: tuple[int, ...] | None = None
    leader: int | None = None
    leader_epoch: int | None = None
    directories: tuple[Uuid, ...] | None = None
    # Extension (KRaft's fields, KIP-455): None leaves them unchanged, () ends the reassignment.
    adding_replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "topicId": str(self.topic_id),
            "partitionId": self.partition_id,
            "partitionEpoch": self.partition_epoch,
        }
        if self.replicas is not None:
            data["replicas"] = list(self.replicas)
        if self.isr is not None:
            data["isr"] = list(self.isr)
        if self.leader is not None:
            data["leader"] = self.leader
        if self.leader_epoch is not None:
            data["leaderEpoch"] = self.leader_epoch
        if self.directories is not None:
            data["directories"] = _uuids(self.directories)
        if self.adding_replicas is not None:
            data["addingReplicas"] = list(self.adding_replicas)
        if self.removing_replicas is not None:
            data["removingReplicas"] = list(self.removing_replicas)
        return data


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    TYPE: ClassVar[str] = "RemoveTopicRecord"
    topic_id: Uuid

    def to_data(self) -> dict[str, Any]:
        return {"topicId": str(self.topic_id)}


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    """KRaft's ConfigRecord for a TOPIC resource: `name` (a topic config key) set to `value`, or
    deleted when `value` is None (the topic then falls back to the broker's default)."""

    TYPE: ClassVar[str] = "ConfigRecord"
    topic_id: Uuid
    name: str
    value: str | None

    def to_data(self) -> dict[str, Any]:
        return {"topicId": str(self.topic_id), "name": self.name, "value": self.value}


@dataclass(frozen=True, slots=True)
class BrokerConfigRecord:
    """KRaft's ConfigRecord for a BROKER resource: the dynamic broker config `name` set to `value`,
    or deleted when `value` is None. `broker` is the resource name: "" for the cluster-wide
    default (`kafka-configs.sh --entity-default`), else the broker id in decimal."""

    TYPE: ClassVar[str] = "BrokerConfigRecord"
    broker: str
    name: str
    value: str | None

    def to_data(self) -> dict[str, Any]:
        return {"broker": self.broker, "name": self.name, "value": self.value}


@dataclass(frozen=True, slots=True)
class UserScramCredentialRecord:
    """A user's SCRAM credential for one mechanism (RFC 5802: never the password, nor the salted
    password): added, or replacing the one of the same (name, mechanism)."""

    TYPE: ClassVar[str] = "UserScramCredentialRecord"
    name: str
    mechanism: int  # Kafka's ScramMechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_data(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mechanism": self.mechanism,
            "salt": _base64(self.salt),
            "storedKey": _base64(self.stored_key),
            "serverKey": _base64(self.server_key),
            "iterations": self.iterations,
        }


@dataclass(frozen=True, slots=True)
class RemoveUserScramCredentialRecord:
    TYPE: ClassVar[str] = "RemoveUserScramCredentialRecord"
    name: str
    mechanism: int

    def to_data(self) -> dict[str, Any]:
        return {"name": self.name, "mechanism": self.mechanism}


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    """A block of producer ids handed to `broker_id`: every id below `next_producer_id` is taken."""

    TYPE: ClassVar[str] = "ProducerIdsRecord"
    broker_id: int
    broker_epoch: int
    next_producer_id: int

    def to_data(self) -> dict[str, Any]:
        return {
            "brokerId": self.broker_id,
            "brokerEpoch": self.broker_epoch,
            "nextProducerId": self.next_producer_id,
        }


@dataclass(frozen=True, slots=True)
class AccessControlEntryRecord:
    """KRaft's AccessControlEntryRecord: the ACL `id` added. The enums are Kafka's codes
    (ResourceType, PatternType, AclOperation, AclPermissionType; `jbod_core.acls`)."""

    TYPE: ClassVar[str] = "AccessControlEntryRecord"
    id: Uuid
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    def to_data(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "resourceType": self.resource_type,
            "resourceName": self.resource_name,
            "patternType": self.pattern_type,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation,
            "permissionType": self.permission_type,
        }


@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntryRecord:
    """KRaft's RemoveAccessControlEntryRecord: the ACL `id` removed."""

    TYPE: ClassVar[str] = "RemoveAccessControlEntryRecord"
    id: Uuid

    def to_data(self) -> dict[str, Any]:
        return {"id": str(self.id)}


@dataclass(frozen=True, slots=True)
class ClientQuotaRecord:
    """KRaft's ClientQuotaRecord: the quota `key` of `entity` set to `value`, or removed (`remove`,
    `value` then 0). `entity` is (entity type, name) pairs sorted by type, a None name being the
    default entity (`jbod_core.quotas`)."""

    TYPE: ClassVar[str] = "ClientQuotaRecord"
    entity: tuple[tuple[str, str | None], ...]
    key: str
    value: float
    remove: bool = False

    def to_data(self) -> dict[str, Any]:
        return {
            "entity": [{"entityType": kind, "entityName": name} for kind, name in self.entity],
            "key": self.key,
            "value": self.value,
            "remove": self.remove,
        }


Record = (
    RegisterBrokerRecord
    | BrokerRegistrationChangeRecord
    | UnregisterBrokerRecord
    | TopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | RemoveTopicRecord
    | ConfigRecord
    | UserScramCredentialRecord
    | RemoveUserScramCredentialRecord
    | ProducerIdsRecord
    | BrokerConfigRecord
    | AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
    | ClientQuotaRecord
)


# ---------------------------------------------------------------------------------------------
# Decoding


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data[key]
    if type(value) is not int:
        raise RecordError(f"{key} must be an integer")
    return value


def _bool(data: Mapping[str, Any], key: str) -> bool:
    value = data[key]
    if type(value) is not bool:
        raise RecordError(f"{key} must be a boolean")
    return value


def _uuid(data: Mapping[str, Any], key: str) -> Uuid:
    try:
        return Uuid.parse(data[key])
    except ValueError as exc:
        raise RecordError(f"{key}: {exc}") from exc


def _uuid_list(data: Mapping[str, Any], key: str) -> tuple[Uuid, ...]:
    try:
        return tuple(Uuid.parse(v) for v in data[key])
    except (ValueError, TypeError) as exc:
        raise RecordError(f"{key}: {exc}") from exc


def _int_list(data: Mapping[str, Any], key: str) -> tuple[int, ...]:
    values = data[key]
    if not isinstance(values, list) or any(type(v) is not int for v in values):
        raise RecordError(f"{key} must be a list of integers")
    return tuple(values)


def _str(data: Mapping[str, Any], key: str) -> str:
    value = data[key]
    if type(value) is not str:
        raise RecordError(f"{key} must be a string")
    return value


def _bytes(data: Mapping[str, Any], key: str) -> bytes:
    value = data[key]
    if type(value) is not str:
        raise RecordError(f"{key} must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise RecordError(f"{key} is not base64: {exc}") from exc


def _opt(data: Mapping[str, Any], key: str, read: Callable[[Mapping[str, Any], str], Any]) -> Any:
    return read(data, key) if key in data else None


def _decode_register(d: Mapping[str, Any]) -> RegisterBrokerRecord:
    listeners = tuple(
        Listener(name=str(x["name"]), host=str(x["host"]), port=int(x["port"]))
        for x in d.get("listeners", [])
    )
    return RegisterBrokerRecord(
        broker_id=_int(d, "brokerId"),
        broker_epoch=_int(d, "brokerEpoch"),
        incarnation_id=_uuid(d, "incarnationId"),
        log_dirs=_uuid_list(d, "logDirs"),
        has_offline_log_dirs=bool(d.get("hasOfflineLogDirs", False)),
        fenced=bool(d.get("fenced", True)),
        in_controlled_shutdown=bool(d.get("inControlledShutdown", False)),
        listeners=listeners,
        rack=d.get("rack"),
        offline_log_dirs=_uuid_list(d, "offlineLogDirs") if "offlineLogDirs" in d else (),
        cordoned_log_dirs=_uuid_list(d, "cordonedLogDirs") if "cordonedLogDirs" in d else (),
        slow_log_dirs=_uuid_list(d, "slowLogDirs") if "slowLogDirs" in d else (),
    )


def _decode_change(d: Mapping[str, Any]) -> BrokerRegistrationChangeRecord:
    return BrokerRegistrationChangeRecord(
        broker_id=_int(d, "brokerId"),
        broker_epoch=_int(d, "brokerEpoch"),
        fenced=_opt(d, "fenced", _bool),
        in_controlled_shutdown=_opt(d, "inControlledShutdown", _bool),
        log_dirs=_opt(d, "logDirs", _uuid_list),
        offline_log_dirs=_opt(d, "offlineLogDirs", _uuid_list),
        cordoned_log_dirs=_opt(d, "cordonedLogDirs", _uuid_list),
        slow_log_dirs=_opt(d, "slowLogDirs", _uuid_list),
    )


def _decode_unregister(d: Mapping[str, Any]) -> UnregisterBrokerRecord:
    return UnregisterBrokerRecord(broker_id=_int(d, "brokerId"), broker_epoch=_int(d, "brokerEpoch"))


def _decode_topic(d: Mapping[str, Any]) -> TopicRecord:
    configs = d.get("configs") or {}
    if not isinstance(configs, dict):
        raise RecordError("configs must be an object")
    return TopicRecord(
        name=str(d["name"]),
        topic_id=_uuid(d, "topicId"),
        configs={str(k): str(v) for k, v in configs.items()},
    )


def _decode_partition(d: Mapping[str, Any]) -> PartitionRecord:
    return PartitionRecord(
        topic_id=_uuid(d, "topicId"),
        partition_id=_int(d, "partitionId"),
        replicas=_int_list(d, "replicas"),
        isr=_int_list(d, "isr"),
        leader=_int(d, "leader"),
        leader_epoch=_int(d, "leaderEpoch"),
        partition_epoch=_int(d, "partitionEpoch"),
        directories=_uuid_list(d, "directories"),
        adding_replicas=_opt(d, "addingReplicas", _int_list) or (),
        removing_replicas=_opt(d, "removingReplicas", _int_list) or (),
    )


def _decode_partition_change(d: Mapping[str, Any]) -> PartitionChangeRecord:
    return PartitionChangeRecord(
        topic_id=_uuid(d, "topicId"),
        partition_id=_int(d, "partitionId"),
        partition_epoch=_int(d, "partitionEpoch"),
        replicas=_opt(d, "replicas", _int_list),
        isr=_opt(d, "isr", _int_list),
        leader=_opt(d, "leader", _int),
        leader_epoch=_opt(d, "leaderEpoch", _int),
        directories=_opt(d, "directories", _uuid_list),
        adding_replicas=_opt(d, "addingReplicas", _int_list),
        removing_replicas=_opt(d, "removingReplicas", _int_list),
    )


def _decode_remove_topic(d: Mapping[str, Any]) -> RemoveTopicRecord:
    return RemoveTopicRecord(topic_id=_uuid(d, "topicId"))


def _decode_config(d: Mapping[str, Any]) -> ConfigRecord:
    # An absent `value` is a null one (a typed Parquet export cannot tell them apart).
    value = d.get("value")
    if value is not None and type(value) is not str:
        raise RecordError("value must be a string or null")
    return ConfigRecord(topic_id=_uuid(d, "topicId"), name=_str(d, "name"), value=value)


def _decode_broker_config(d: Mapping[str, Any]) -> BrokerConfigRecord:
    value = d.get("value")
    if value is not None and type(value) is not str:
        raise RecordError("value must be a string or null")
    return BrokerConfigRecord(broker=_str(d, "broker"), name=_str(d, "name"), value=value)


def _decode_scram(d: Mapping[str, Any]) -> UserScramCredentialRecord:
    return UserScramCredentialRecord(
        name=_str(d, "name"),
        mechanism=_int(d, "mechanism"),
        salt=_bytes(d, "salt"),
        stored_key=_bytes(d, "storedKey"),
        server_key=_bytes(d, "serverKey"),
        iterations=_int(d, "iterations"),
    )


def _decode_remove_scram(d: Mapping[str, Any]) -> RemoveUserScramCredentialRecord:
    return RemoveUserScramCredentialRecord(name=_str(d, "name"), mechanism=_int(d, "mechanism"))


def _decode_producer_ids(d: Mapping[str, Any]) -> ProducerIdsRecord:
    return ProducerIdsRecord(
        broker_id=_int(d, "brokerId"),
        broker_epoch=_int(d, "brokerEpoch"),
        next_producer_id=_int(d, "nextProducerId"),
    )


def _decode_acl(d: Mapping[str, Any]) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=_uuid(d, "id"),
        resource_type=_int(d, "resourceType"),
        resource_name=_str(d, "resourceName"),
        pattern_type=_int(d, "patternType"),
        principal=_str(d, "principal"),
        host=_str(d, "host"),
        operation=_int(d, "operation"),
        permission_type=_int(d, "permissionType"),
    )


def _decode_remove_acl(d: Mapping[str, Any]) -> RemoveAccessControlEntryRecord:
    return RemoveAccessControlEntryRecord(id=_uuid(d, "id"))


def _decode_client_quota(d: Mapping[str, Any]) -> ClientQuotaRecord:
    components = d["entity"]
    if not isinstance(components, list) or not components:
        raise RecordError("entity must be a non-empty list")
    entity = []
    for component in components:
        if not isinstance(component, Mapping):
            raise RecordError("an entity component must be an object")
        name = component.get("entityName")
        if name is not None and type(name) is not str:
            raise RecordError("entityName must be a string or null")
        entity.append((_str(component, "entityType"), name))
    value = d["value"]
    if type(value) not in (int, float):
        raise RecordError("value must be a number")
    return ClientQuotaRecord(
        entity=tuple(sorted(entity, key=lambda c: c[0])),
        key=_str(d, "key"),
        value=float(value),
        remove=_bool(d, "remove"),
    )


_DECODERS: Final[dict[str, Callable[[Mapping[str, Any]], Record]]] = {
    RegisterBrokerRecord.TYPE: _decode_register,
    BrokerRegistrationChangeRecord.TYPE: _decode_change,
    UnregisterBrokerRecord.TYPE: _decode_unregister,
    TopicRecord.TYPE: _decode_topic,
    PartitionRecord.TYPE: _decode_partition,
    PartitionChangeRecord.TYPE: _decode_partition_change,
    RemoveTopicRecord.TYPE: _decode_remove_topic,
    ConfigRecord.TYPE: _decode_config,
    UserScramCredentialRecord.TYPE: _decode_scram,
    RemoveUserScramCredentialRecord.TYPE: _decode_remove_scram,
    ProducerIdsRecord.TYPE: _decode_producer_ids,
    BrokerConfigRecord.TYPE: _decode_broker_config,
    AccessControlEntryRecord.TYPE: _decode_acl,
    RemoveAccessControlEntryRecord.TYPE: _decode_remove_acl,
    ClientQuotaRecord.TYPE: _decode_client_quota,
}

RECORD_TYPES: Final = tuple(_DECODERS)


def decode(record_type: str, data: Mapping[str, Any]) -> Record:
    """The record of `record_type` described by `data`; `RecordError` if it does not fit."""
    decoder = _DECODERS.get(record_type)
    if decoder is None:
        raise RecordError(f"unknown record type {record_type!r}")
    try:
        return decoder(data)
    except KeyError as exc:
        raise RecordError(f"{record_type} is missing field {exc.args[0]}") from exc
    except (TypeError, ValueError) as exc:
        if isinstance(exc, RecordError):
            raise
        raise RecordError(f"{record_type}: {exc}") from exc
