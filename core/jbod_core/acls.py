"""Kafka ACLs: the values, the index a broker authorizes every request with, and the decisions of
CreateAcls, DeleteAcls and DescribeAcls, as Kafka's StandardAuthorizer and KRaft's
AclControlManager make them (issue 25; docs/decisions.md, "ACLs").

Guarantees:
* The enums are Kafka's, with Kafka's codes (ResourceType, PatternType, AclOperation,
  AclPermissionType); `Acl` is one ACL binding; on the controller's HTTP API they are Kafka's enum
  names.
* `AclIndex` holds the ACLs by id and, per resource type, by literal name and by prefix, so that
  `authorize` costs the length of the resource name plus the ACLs that match, never the number of
  ACLs in the cluster. `AclIndex.add` / `remove` are the only changes (the image's replay).
* `Authorizer.authorize` (StandardAuthorizer): a super user may do everything; otherwise the ACLs matching
  the resource (LITERAL of the same name, LITERAL `*`, PREFIXED of a prefix of the name), the
  principal (the same, or `User:*`) and the host (the same, or `*`) decide: any DENY of the
  operation (or of ALL) denies; else any ALLOW of the operation, of ALL, or of an operation that
  implies it (READ, WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS)
  allows; else denied. When no ACL at all matches the resource, `allow_everyone_if_no_acl_found`
  decides. `authorized_operations` is the bit field of the resource type's supported operations
  (`SUPPORTED_OPERATIONS`, Kafka's) that a requester may do, as Metadata, DescribeCluster and
  DescribeGroups answer it when asked.
* CreateAcls: one result per creation, in order. A creation is INVALID_REQUEST (42), and nothing
  of it written, when its resource type is ANY or UNKNOWN, its pattern type is not LITERAL or
  PREFIXED, its operation is ANY or UNKNOWN, its permission type is not ALLOW or DENY, its
  resource name is empty, a CLUSTER resource is not named `kafka-cluster`, its principal is not
  `Type:name` (both non-empty), or its host is empty. An ACL that exists already (or twice in one
  request) is a success that writes nothing more.
* DeleteAcls: one result per filter, listing every ACL the filter matches; each matching ACL is
  removed once (a RemoveAccessControlEntryRecord) even when several filters match it. A filter
  with an UNKNOWN enum is INVALID_REQUEST and matches nothing.
* Filters (DeleteAcls, DescribeAcls) as Kafka's AclBindingFilter: None / ANY match everything;
  pattern type MATCH matches the ACLs that would apply to a resource of that name (LITERAL of the
  name, LITERAL `*`, PREFIXED of a prefix), or every pattern when the name is None.
* Pure: no I/O, no clock; new ACL ids come from the caller's random source.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from jbod_core import records
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid, random_uuid
from jbod_core.messages import (
    AclBindingModel,
    AclCreationResult,
    AclFilterModel,
    CreateAclsReply,
    CreateAclsRequest,
    DeleteAclsReply,
    DeleteAclsRequest,
    DeleteAclsResult,
    DescribeAclsReply,
)


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class PermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME: Final = "kafka-cluster"  # Kafka's one CLUSTER resource
WILDCARD: Final = "*"  # a LITERAL resource name, a host, or (as `User:*`) a principal name
WILDCARD_PRINCIPAL: Final = "User:*"
# The fields of a binding on the controller API, in Kafka's order (`Acl.to_json`, the filters).
BINDING_FIELDS: Final = (
    "resourceType",
    "resourceName",
    "patternType",
    "principal",
    "host",
    "operation",
    "permissionType",
)
# An ALLOW of one of these operations also allows DESCRIBE / DESCRIBE_CONFIGS (Kafka's
# AclEntry / StandardAuthorizerData implication rules).
_IMPLIED_BY: Final[Mapping[AclOperation, frozenset[AclOperation]]] = {
    AclOperation.DESCRIBE: frozenset(
        {
            AclOperation.DESCRIBE,
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.DELETE,
            AclOperation.ALTER,
        }
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True)
class Acl:
    """One ACL binding: a resource pattern and an access control entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: PermissionType

    def to_json(self) -> dict[str, str]:
        """The controller API's form: camelCase keys, Kafka's enum names."""
        return {
            "resourceType": self.resource_type.name,
            "resourceName": self.resource_name,
            "patternType": self.pattern_type.name,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.name,
            "permissionType": self.permission_type.name,
        }

    def to_record(self, acl_id: Uuid) -> records.AccessControlEntryRecord:
        return records.AccessControlEntryRecord(
            id=acl_id,
            resource_type=int(self.resource_type),
            resource_name=self.resource_name,
            pattern_type=int(self.pattern_type),
            principal=self.principal,
            host=self.host,
            operation=int(self.operation),
            permission_type=int(self.permission_type),
        )

    @classmethod
    def from_record(cls, record: records.AccessControlEntryRecord) -> Acl:
        """The ACL of a record; `ValueError` for a code that is not one of Kafka's."""
        return cls(
            resource_type=ResourceType(record.resource_type),
            resource_name=record.resource_name,
            pattern_type=PatternType(record.pattern_type),
            principal=record.principal,
            host=record.host,
            operation=AclOperation(record.operation),
            permission_type=PermissionType(record.permission_type),
        )


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: None (or ANY) matches any value of that field."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: PermissionType = PermissionType.ANY

    def unknown_field(self) -> str | None:
        """The first field holding an UNKNOWN enum (Kafka refuses such a filter), else None."""
        for name in ("resource_type", "pattern_type", "operation", "permission_type"):
            if getattr(self, name) == 0:
                return name
        return None

    def matches(self, acl: Acl) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if not self._pattern_matches(acl):
            return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation not in (AclOperation.ANY, acl.operation):
            return False
        return self.permission_type in (PermissionType.ANY, acl.permission_type)

    def _pattern_matches(self, acl: Acl) -> bool:
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is None:
                return True
            if acl.pattern_type == PatternType.LITERAL:
                return acl.resource_name in (self.resource_name, WILDCARD)
            return acl.pattern_type == PatternType.PREFIXED and self.resource_name.startswith(
                acl.resource_name
            )
        if self.pattern_type not in (PatternType.ANY, acl.pattern_type):
            return False
        return self.resource_name is None or self.resource_name == acl.resource_name


class AclIndex:
    """Every ACL by id, and by (resource type, literal name) and (resource type, prefix)."""

    def __init__(self) -> None:
        self.by_id: dict[Uuid, Acl] = {}
        self._ids: dict[Acl, Uuid] = {}
        self._literal: dict[tuple[ResourceType, str], set[Acl]] = {}
        self._prefixed: dict[tuple[ResourceType, str], set[Acl]] = {}

    def __len__(self) -> int:
        return len(self.by_id)

    def __iter__(self) -> Iterator[tuple[Uuid, Acl]]:
        return iter(self.by_id.items())

    def id_of(self, acl: Acl) -> Uuid | None:
        return self._ids.get(acl)

    def _bucket(self, acl: Acl) -> dict[tuple[ResourceType, str], set[Acl]]:
        return self._prefixed if acl.pattern_type == PatternType.PREFIXED else self._literal

    def add(self, acl_id: Uuid, acl: Acl) -> None:
        """Index `acl` under `acl_id`; `ValueError` if either is present already."""
        if acl_id in self.by_id:
            raise ValueError(f"ACL id {acl_id} exists already")
        if acl in self._ids:
            raise ValueError(f"ACL {acl.to_json()} exists already with id {self._ids[acl]}")
        self.by_id[acl_id] = acl
        self._ids[acl] = acl_id
        self._bucket(acl).setdefault((acl.resource_type, acl.resource_name), set()).add(acl)

    def remove(self, acl_id: Uuid) -> Acl:
        """Drop the ACL `acl_id` and return it; `KeyError` if there is none."""
        acl = self.by_id.pop(acl_id)
        del self._ids[acl]
        bucket = self._bucket(acl)
        key = (acl.resource_type, acl.resource_name)
        bucket[key].discard(acl)
        if not bucket[key]:
            del bucket[key]
        return acl

    def copy(self) -> AclIndex:
        fresh = AclIndex()
        fresh.by_id = dict(self.by_id)
        fresh._ids = dict(self._ids)
        fresh._literal = {k: set(v) for k, v in self._literal.items()}
        fresh._prefixed = {k: set(v) for k, v in self._prefixed.items()}
        return fresh

    def applying_to(self, resource_type: ResourceType, name: str) -> Iterator[Acl]:
        """Every ACL whose pattern matches the resource: LITERAL of `name`, LITERAL `*`, and
        PREFIXED of every prefix of `name` (the name itself included)."""
        yield from self._literal.get((resource_type, name), ())
        if name != WILDCARD:
            yield from self._literal.get((resource_type, WILDCARD), ())
        if self._prefixed:
            for end in range(len(name), 0, -1):
                yield from self._prefixed.get((resource_type, name[:end]), ())


class Requester(NamedTuple):
    """Who asks: the connection's principal (`User:alice`) and the client's address."""

    principal: str
    host: str


class Resource(NamedTuple):
    resource_type: ResourceType
    name: str


CLUSTER: Final = Resource(ResourceType.CLUSTER, CLUSTER_NAME)


@dataclass(frozen=True, slots=True)
class Authorizer:
    """The broker's authorizer settings: Kafka's `super.users` and
    `allow.everyone.if.no.acl.found`."""

    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False

    def authorize(
        self, index: AclIndex, requester: Requester, operation: AclOperation, resource: Resource
    ) -> bool:
        """May `requester` do `operation` on `resource`? (The module's rules.)"""
        if requester.principal in self.super_users:
            return True
        principals = (requester.principal, WILDCARD_PRINCIPAL)
        hosts = (requester.host, WILDCARD)
        implied = _IMPLIED_BY.get(operation, frozenset({operation}))
        found = allowed = False
        for acl in index.applying_to(resource.resource_type, resource.name):
            found = True
            if acl.principal not in principals or acl.host not in hosts:
                continue
            if acl.permission_type == PermissionType.DENY:
                if acl.operation in (operation, AclOperation.ALL):
                    return False
            elif acl.operation == AclOperation.ALL or acl.operation in implied:
                allowed = True
        return allowed if found else self.allow_everyone_if_no_acl_found

    def authorize_any(
        self, index: AclIndex, requester: Requester, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Kafka's `authorizeByResourceType` (KIP-679's idempotent producers): may `requester` do
        `operation` on at least one resource of the type? True when an ALLOW of it (literal or
        prefixed) is not covered by a DENY (a DENY of `*`, of the same literal name, or of a prefix
        of the allowed name)."""
        if requester.principal in self.super_users:
            return True
        principals = (requester.principal, WILDCARD_PRINCIPAL)
        hosts = (requester.host, WILDCARD)
        implied = _IMPLIED_BY.get(operation, frozenset({operation}))
        denied_literals: set[str] = set()
        denied_prefixes: set[str] = set()
        allowed: list[Acl] = []
        for acl in index.by_id.values():
            if acl.resource_type != resource_type or acl.principal not in principals or acl.host not in hosts:
                continue
            if acl.permission_type == PermissionType.DENY:
                if acl.operation in (operation, AclOperation.ALL):
                    literal = acl.pattern_type == PatternType.LITERAL
                    (denied_literals if literal else denied_prefixes).add(acl.resource_name)
            elif acl.operation == AclOperation.ALL or acl.operation in implied:
                allowed.append(acl)
        if WILDCARD in denied_literals:
            return False
        for acl in allowed:
            name = acl.resource_name
            if any(name.startswith(prefix) for prefix in denied_prefixes):
                continue
            if acl.pattern_type == PatternType.LITERAL and name in denied_literals:
                continue
            return True
        return False

    def authorized_operations(self, index: AclIndex, requester: Requester, resource: Resource) -> int:
        """Kafka's `authorizedOperations` bit field: bit `code` set for each operation the
        resource type supports (`SUPPORTED_OPERATIONS`) that `requester` may do on `resource`."""
        allowed = (
            operation
            for operation in SUPPORTED_OPERATIONS.get(resource.resource_type, ())
            if self.authorize(index, requester, operation, resource)
        )
        return operations_field(allowed)


#: The operations each resource type supports, as Kafka's `AclEntry.supportedOperations`: what an
#: authorized-operations bit field (Metadata, DescribeCluster, DescribeGroups) may name.
SUPPORTED_OPERATIONS: Final[Mapping[ResourceType, tuple[AclOperation, ...]]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.TWO_PHASE_COMMIT),
}
#: An authorized-operations field not asked for (Kafka's Integer.MIN_VALUE).
OPERATIONS_NOT_ASKED: Final = -(2**31)


def operations_field(operations: Iterable[AclOperation]) -> int:
    """The 32-bit field with bit `code` set for each operation (Kafka's `Utils.to32BitField`)."""
    field_ = 0
    for operation in operations:
        field_ |= 1 << int(operation)
    return field_


# ---------------------------------------------------------------------------------------------
# Decisions of the controller


@dataclass(frozen=True, slots=True)
class AclResult:
    """One CreateAcls result (`matching` is DeleteAcls')."""

    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    matching: tuple[Acl, ...] = ()


def creation_error(acl: Acl) -> str | None:  # noqa: PLR0911  a return per Kafka's check
    """Why Kafka refuses to create `acl` (INVALID_REQUEST), or None."""
    if acl.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        return f"Invalid resourceType {acl.resource_type.name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {acl.pattern_type.name}"
    if acl.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return f"Invalid operation {acl.operation.name}"
    if acl.permission_type not in (PermissionType.ALLOW, PermissionType.DENY):
        return f"Invalid permissionType {acl.permission_type.name}"
    if not acl.resource_name:
        return "Resource name should not be empty"
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    kind, colon, name = acl.principal.partition(":")
    if not colon:
        return (
            f"Could not parse principal from `{acl.principal}` "
            "(no colon is present separating the principal type from the principal name)"
        )
    if not kind or not name:
        return f"Invalid principal `{acl.principal}`: both a type and a name are needed (e.g. User:alice)"
    if not acl.host:
        return "Host should not be empty (`*` is every host)"
    return None


def create_acls(
    index: AclIndex, creations: Sequence[Acl], *, rng: random.Random
) -> tuple[list[records.Record], list[AclResult]]:
    """CreateAcls: the records of the new, valid ACLs and one result per creation."""
    produced: list[records.Record] = []
    results: list[AclResult] = []
    added: set[Acl] = set()
    taken = set(index.by_id)
    for acl in creations:
        problem = creation_error(acl)
        if problem is not None:
            results.append(AclResult(ErrorCode.INVALID_REQUEST, problem))
            continue
        if index.id_of(acl) is None and acl not in added:
            acl_id = random_uuid(rng, avoid=taken)
            taken.add(acl_id)
            added.add(acl)
            produced.append(acl.to_record(acl_id))
        results.append(AclResult())
    return produced, results


def delete_acls(
    index: AclIndex, filters: Sequence[AclFilter]
) -> tuple[list[records.Record], list[AclResult]]:
    """DeleteAcls: a removal per matching ACL (once) and one result per filter."""
    produced: list[records.Record] = []
    results: list[AclResult] = []
    removed: set[Uuid] = set()
    for acl_filter in filters:
        unknown = acl_filter.unknown_field()
        if unknown is not None:
            results.append(AclResult(ErrorCode.INVALID_REQUEST, f"Unknown {unknown} in the filter"))
            continue
        matching = []
        for acl_id, acl in sorted(index, key=lambda item: _order(item[1])):
            if acl_filter.matches(acl):
                matching.append(acl)
                if acl_id not in removed:
                    removed.add(acl_id)
                    produced.append(records.RemoveAccessControlEntryRecord(id=acl_id))
        results.append(AclResult(matching=tuple(matching)))
    return produced, results


def describe_acls(index: AclIndex, acl_filter: AclFilter) -> list[Acl]:
    """DescribeAcls: every ACL the filter matches, in a stable order (by resource, then entry)."""
    return sorted((acl for _id, acl in index if acl_filter.matches(acl)), key=_order)


def _order(acl: Acl) -> tuple[Any, ...]:
    return (
        int(acl.resource_type),
        acl.resource_name,
        int(acl.pattern_type),
        acl.principal,
        acl.host,
        int(acl.operation),
        int(acl.permission_type),
    )


def by_resource(acls: Iterable[Acl]) -> dict[tuple[ResourceType, str, PatternType], list[Acl]]:
    """ACLs grouped by resource pattern (DescribeAcls' response shape), in first-seen order."""
    grouped: dict[tuple[ResourceType, str, PatternType], list[Acl]] = {}
    for acl in acls:
        grouped.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    return grouped


# ---------------------------------------------------------------------------------------------
# The controller API's form (Kafka's enum names)


def acl_of(model: AclBindingModel) -> Acl:
    return Acl(
        resource_type=ResourceType[model.resource_type],
        resource_name=model.resource_name,
        pattern_type=PatternType[model.pattern_type],
        principal=model.principal,
        host=model.host,
        operation=AclOperation[model.operation],
        permission_type=PermissionType[model.permission_type],
    )


def model_of(acl: Acl) -> AclBindingModel:
    return AclBindingModel.model_validate(acl.to_json())


def filter_of(model: AclFilterModel) -> AclFilter:
    return AclFilter(
        resource_type=ResourceType[model.resource_type or "ANY"],
        resource_name=model.resource_name,
        pattern_type=PatternType[model.pattern_type or "ANY"],
        principal=model.principal,
        host=model.host,
        operation=AclOperation[model.operation or "ANY"],
        permission_type=PermissionType[model.permission_type or "ANY"],
    )


def create_acls_reply(
    index: AclIndex, request: CreateAclsRequest, *, rng: random.Random
) -> tuple[list[records.Record], CreateAclsReply]:
    produced, results = create_acls(index, [acl_of(c) for c in request.creations], rng=rng)
    return produced, CreateAclsReply(
        results=[AclCreationResult(error_code=r.error_code, error_message=r.error_message) for r in results]
    )


def delete_acls_reply(
    index: AclIndex, request: DeleteAclsRequest
) -> tuple[list[records.Record], DeleteAclsReply]:
    produced, results = delete_acls(index, [filter_of(f) for f in request.filters])
    return produced, DeleteAclsReply(
        results=[
            DeleteAclsResult(
                error_code=r.error_code,
                error_message=r.error_message,
                matching_acls=[model_of(a) for a in r.matching],
            )
            for r in results
        ]
    )


def describe_acls_reply(index: AclIndex, acl_filter: AclFilterModel) -> DescribeAclsReply:
    return DescribeAclsReply(acls=[model_of(a) for a in describe_acls(index, filter_of(acl_filter))])


def parse_super_users(value: str) -> frozenset[str]:
    """Kafka's `super.users`: principals separated by `;` (blanks around them ignored)."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())
