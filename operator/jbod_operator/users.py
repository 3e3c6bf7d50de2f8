"""`JbodUser`: a Kafka user of a cluster, its credential and its ACLs (pure: spec → wire shapes).

The spec is Strimzi's KafkaUser shape: `cluster`, `authentication.type` (`scram-sha-512` or
`tls`), `authorization.acls` of `{resource: {type, name, patternType}, operations, type, host}`.

Guarantees:
* `parse_user` accepts what the CRD describes and refuses, with one line naming the field, what
  it cannot express (a cluster resource with a name other than `kafka-cluster`, an operation
  Kafka does not have).
* `acl_bindings` gives the controller's ACL creations (docs/api.md, `POST /v1/acls`), one per
  operation, with Kafka's enum names and the principal `User:<name>`; the same input gives the
  same bindings, in order, without duplicates.
* `acl_changes` turns "replace the user's ACLs by these" into what to create and what to delete,
  leaving the bindings both sets hold alone (no moment without them).
* `quota_values` maps `spec.quotas` (Strimzi's `producerByteRate`, `consumerByteRate`,
  `requestPercentage`, `controllerMutationRate`) to Kafka's quota keys; `quota_changes` turns
  "make the user's quotas these" into the controller's ops (docs/api.md, `POST /v1/client-quotas`):
  a key set to a new value, every key no longer given removed, nothing for a key already right.
* `client_user_bindings` are the default client user's: every topic (READ, WRITE, DESCRIBE,
  DESCRIBE_CONFIGS), every group (READ, DESCRIBE), IDEMPOTENT_WRITE on the cluster.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from jbod_core import acls, quotas
from jbod_operator.model import SpecError

OPERATIONS: Final = (
    "All",
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
    "ClusterAction",
    "DescribeConfigs",
    "AlterConfigs",
    "IdempotentWrite",
)
Binding = tuple[str, str, str, str, str, str, str]  # the wire fields, in `_FIELDS` order
_FIELDS: Final = acls.BINDING_FIELDS


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")


class AclResource(_Frozen):
    type: Literal["topic", "group", "cluster", "transactionalId"]
    name: str = Field(default="*", min_length=1, max_length=249)
    pattern_type: Literal["literal", "prefix"] = Field(default="literal", alias="patternType")

    @model_validator(mode="after")
    def _cluster_name(self) -> AclResource:
        if self.type == "cluster" and self.name not in (acls.WILDCARD, acls.CLUSTER_NAME):
            raise ValueError(f"a cluster resource is named {acls.CLUSTER_NAME}")
        return self


class AclRule(_Frozen):
    resource: AclResource
    operations: tuple[str, ...] = Field(min_length=1)
    type: Literal["allow", "deny"] = "allow"
    host: str = Field(default="*", min_length=1, max_length=253)

    @field_validator("operations")
    @classmethod
    def _known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for operation in value:
            if operation not in OPERATIONS:
                raise ValueError(f"'{operation}' is not one of {', '.join(OPERATIONS)}")
        return value


class Authentication(_Frozen):
    type: Literal["scram-sha-512", "tls"]


class Authorization(_Frozen):
    type: Literal["simple"] = "simple"
    acls: tuple[AclRule, ...] = ()


class Quotas(_Frozen):
    producer_byte_rate: int | None = Field(default=None, ge=1, alias="producerByteRate")
    consumer_byte_rate: int | None = Field(default=None, ge=1, alias="consumerByteRate")
    request_percentage: int | None = Field(default=None, ge=1, alias="requestPercentage")
    controller_mutation_rate: float | None = Field(default=None, gt=0, alias="controllerMutationRate")


class UserSpec(_Frozen):
    cluster: str = Field(min_length=1, max_length=40)
    authentication: Authentication
    authorization: Authorization = Authorization()
    quotas: Quotas = Quotas()


# Strimzi's field → Kafka's quota key (jbod_core.quotas).
QUOTA_KEYS: Final = {
    "producer_byte_rate": quotas.PRODUCER_BYTE_RATE,
    "consumer_byte_rate": quotas.CONSUMER_BYTE_RATE,
    "request_percentage": quotas.REQUEST_PERCENTAGE,
    "controller_mutation_rate": quotas.CONTROLLER_MUTATION_RATE,
}


def quota_values(spec: Quotas) -> dict[str, float]:
    """The user's quotas by Kafka's key (the keys set only)."""
    return {
        key: float(value) for field, key in QUOTA_KEYS.items() if (value := getattr(spec, field)) is not None
    }


def quota_changes(wanted: dict[str, float], existing: dict[str, float]) -> list[tuple[str, float | None]]:
    """(key, value) to set and (key, None) to remove so that exactly `wanted` remains."""
    changes: list[tuple[str, float | None]] = [
        (key, value) for key, value in sorted(wanted.items()) if existing.get(key) != value
    ]
    changes.extend((key, None) for key in sorted(existing) if key not in wanted)
    return changes


def parse_user(name: str, spec: dict[str, Any]) -> UserSpec:
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) or len(name) > 64:
        raise SpecError(f"metadata.name: '{name}' is not a user name (lower-case DNS name, at most 64)")
    try:
        return UserSpec.model_validate(spec)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "spec"
        message = str(error.get("ctx", {}).get("error") or error["msg"])
        raise SpecError(f"spec.{where}: {message}") from None


def principal(user: str) -> str:
    return f"User:{user}"


def _enum(operation: str) -> str:
    """`DescribeConfigs` → `DESCRIBE_CONFIGS` (Kafka's AclOperation names)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).upper()


def _resource_type(kind: str) -> str:
    return {"transactionalId": "TRANSACTIONAL_ID"}.get(kind, kind.upper())


def acl_bindings(user: str, rules: Iterable[AclRule]) -> list[Binding]:
    out: list[Binding] = []
    for rule in rules:
        name = acls.CLUSTER_NAME if rule.resource.type == "cluster" else rule.resource.name
        pattern = "PREFIXED" if rule.resource.pattern_type == "prefix" else "LITERAL"
        for operation in rule.operations:
            binding = (
                _resource_type(rule.resource.type),
                name,
                pattern,
                principal(user),
                rule.host,
                _enum(operation),
                rule.type.upper(),
            )
            if binding not in out:
                out.append(binding)
    return out


def client_user_bindings(user: str) -> list[Binding]:
    rules = [
        AclRule(
            resource=AclResource(type="topic", name="*"),
            operations=("Read", "Write", "Describe", "DescribeConfigs"),
        ),
        AclRule(resource=AclResource(type="group", name="*"), operations=("Read", "Describe")),
        AclRule(resource=AclResource(type="cluster"), operations=("IdempotentWrite",)),
    ]
    return acl_bindings(user, rules)


def to_wire(binding: Binding) -> dict[str, str]:
    return dict(zip(_FIELDS, binding, strict=True))


def from_wire(acl: dict[str, Any]) -> Binding:
    values = tuple(str(acl.get(f)) for f in _FIELDS)
    return (values[0], values[1], values[2], values[3], values[4], values[5], values[6])


def every_acl_of(user: str) -> dict[str, str | None]:
    """A delete filter matching every ACL of the user (Kafka's AclBindingFilter: ANY for the
    enums, null for the names, which would otherwise be taken literally)."""
    return {
        "resourceType": "ANY",
        "resourceName": None,
        "patternType": "ANY",
        "principal": principal(user),
        "host": None,
        "operation": "ANY",
        "permissionType": "ANY",
    }


def acl_changes(
    wanted: Iterable[Binding], existing: Iterable[Binding]
) -> tuple[list[Binding], list[Binding]]:
    """(to create, to delete) so that exactly `wanted` remains."""
    wanted_list, existing_set = list(dict.fromkeys(wanted)), set(existing)
    create = [b for b in wanted_list if b not in existing_set]
    delete = sorted(existing_set - set(wanted_list))
    return create, delete
