"""Kafka's ACL APIs on a broker: DescribeAcls (29) answered from this broker's replica of the
metadata log, CreateAcls (30) and DeleteAcls (31) forwarded to the active controller (KIP-590),
each from Kafka 4's floor (v1) to v3.

Guarantees:
* DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls ALTER (Kafka's ACLs):
  anyone else gets CLUSTER_AUTHORIZATION_FAILED (31) — at the top for DescribeAcls, for every
  creation or filter otherwise — and nothing changes.
* As Kafka 4.3.1: a request naming UNKNOWN (0) in an enum of a creation or filter closes the
  connection unanswered (Kafka cannot parse it); a DescribeAcls filter with a code Kafka does not
  know matches nothing; a creation or DeleteAcls filter with one is INVALID_REQUEST (42) here,
  not forwarded; everything else is decided by the controller (`jbod_core.acls`: ANY in a
  creation, a bad principal, a CLUSTER resource not named `kafka-cluster` are 42 there).
* A change is answered once the controller committed it and this broker's image shows it (every
  ACL created present, every ACL a filter matched gone; bounded by 30 s, Kafka's admin default),
  so the next request to this broker is authorized under the new ACLs.
* No controller answering is NOT_CONTROLLER for each item (retriable).
* DescribeAcls groups the matching ACLs by resource pattern, in `jbod_core.acls`' order.
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent.kafka.admin_api import kafka_response, until_image_shows
from jbod_agent.kafka.context import BrokerContext, refusal
from jbod_agent.kafka.forwarding import Forwarder
from jbod_agent.kafka.listener import CloseConnectionError, Connection
from jbod_agent.ports import ControllerCallError
from jbod_core import acls
from jbod_core.acls import Acl, AclOperation, PatternType, PermissionType, ResourceType
from jbod_core.messages import AclBindingModel, AclFilterModel, CreateAclsRequest, DeleteAclsRequest
from jbod_kafka import protocol

_WAIT_S: Final = 30.0


class InvalidCodeError(ValueError):
    """A code that is not one of Kafka's ACL enums (or UNKNOWN)."""


def _name(
    enum: type[acls.ResourceType | PatternType | AclOperation | PermissionType], code: int, field: str
) -> str:
    try:
        member = enum(int(code))
    except ValueError:
        raise InvalidCodeError(f"Unknown {field} code {code}") from None
    if member.value == 0:
        raise InvalidCodeError(f"Unknown {field}")
    return member.name


_CODE_FIELDS: Final = {
    "creation": ("resource_type", "resource_pattern_type", "operation", "permission_type"),
    "filter": ("resource_type_filter", "pattern_type_filter", "operation", "permission_type"),
}


def _refuse_unknown(items: list[Any], kind: str) -> None:
    """Close the connection when an item names UNKNOWN (0) in any of its enums, as Kafka's request
    validation does (it cannot even parse such a request; a code it does not know is another
    matter: that is answered)."""
    for item in items:
        if any(int(getattr(item, name)) == 0 for name in _CODE_FIELDS[kind]):
            raise CloseConnectionError(f"an ACL {kind} holding UNKNOWN elements")


def _creation(c: Any) -> AclBindingModel:
    return AclBindingModel(
        resource_type=_name(ResourceType, c.resource_type, "resourceType"),  # type: ignore[arg-type]
        resource_name=c.resource_name,
        pattern_type=_name(PatternType, c.resource_pattern_type, "patternType"),  # type: ignore[arg-type]
        principal=c.principal,
        host=c.host,
        operation=_name(AclOperation, c.operation, "operation"),  # type: ignore[arg-type]
        permission_type=_name(PermissionType, c.permission_type, "permissionType"),  # type: ignore[arg-type]
    )


def _filter(f: Any) -> AclFilterModel:
    return AclFilterModel(
        resource_type=_name(ResourceType, f.resource_type_filter, "resourceType"),  # type: ignore[arg-type]
        resource_name=f.resource_name_filter,
        pattern_type=_name(PatternType, f.pattern_type_filter, "patternType"),  # type: ignore[arg-type]
        principal=f.principal_filter,
        host=f.host_filter,
        operation=_name(AclOperation, f.operation, "operation"),  # type: ignore[arg-type]
        permission_type=_name(PermissionType, f.permission_type, "permissionType"),  # type: ignore[arg-type]
    )


def _error(code: KafkaError, message: str | None) -> dict[str, Any]:
    return {"error_code": code, "error_message": message}


def _matching_acl(acl: Acl) -> dict[str, Any]:
    return {
        "error_code": KafkaError.none,
        "error_message": None,
        "resource_type": int(acl.resource_type),
        "resource_name": acl.resource_name,
        "pattern_type": int(acl.pattern_type),
        "principal": acl.principal,
        "host": acl.host,
        "operation": int(acl.operation),
        "permission_type": int(acl.permission_type),
    }


class AclApis:
    def __init__(self, ctx: BrokerContext, forwarder: Forwarder) -> None:
        self.ctx = ctx
        self.forwarder = forwarder

    def handlers(self) -> dict[int, Any]:
        return {29: self.describe_acls, 30: self.create_acls, 31: self.delete_acls}

    async def describe_acls(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        if not ctx.allows(conn, AclOperation.DESCRIBE):
            message = refusal(conn, AclOperation.DESCRIBE, "the cluster")
            return kafka_response(
                request,
                error_code=KafkaError.cluster_authorization_failed,
                error_message=message,
                resources=[],
            )
        _refuse_unknown([request.body], "filter")
        try:
            acl_filter = acls.filter_of(_filter(request.body))
        except InvalidCodeError:  # a code Kafka does not know matches nothing, as in Kafka
            return kafka_response(request, error_code=KafkaError.none, error_message="", resources=[])
        except ValueError as exc:
            return kafka_response(
                request, error_code=KafkaError.invalid_request, error_message=str(exc), resources=[]
            )
        found = acls.describe_acls(ctx.state.image.acls, acl_filter)
        resources = [
            {
                "resource_type": int(kind),
                "resource_name": name,
                "pattern_type": int(pattern),
                "acls": [
                    {
                        "principal": a.principal,
                        "host": a.host,
                        "operation": int(a.operation),
                        "permission_type": int(a.permission_type),
                    }
                    for a in group
                ],
            }
            for (kind, name, pattern), group in acls.by_resource(found).items()
        ]
        # Kafka's default: an empty message, not a null one.
        return kafka_response(request, error_code=KafkaError.none, error_message="", resources=resources)

    async def create_acls(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        creations = list(request.body.creations)
        if not ctx.allows(conn, AclOperation.ALTER):
            denied = _error(
                KafkaError.cluster_authorization_failed, refusal(conn, AclOperation.ALTER, "the cluster")
            )
            return kafka_response(request, results=[denied] * len(creations))
        _refuse_unknown(creations, "creation")
        results: list[dict[str, Any] | None] = [None] * len(creations)
        forwarded: list[tuple[int, AclBindingModel]] = []
        for position, creation in enumerate(creations):
            try:
                forwarded.append((position, _creation(creation)))
            except ValueError as exc:
                results[position] = _error(KafkaError.invalid_request, str(exc).splitlines()[0])
        if forwarded:
            try:
                reply = await self.forwarder.create_acls(
                    CreateAclsRequest(creations=[m for _p, m in forwarded])
                )
            except ControllerCallError as exc:
                for position, _model in forwarded:
                    results[position] = _error(KafkaError.not_controller, str(exc))
            else:
                created = []
                for (position, model), result in zip(forwarded, reply.results, strict=True):
                    results[position] = _error(KafkaError(result.error_code), result.error_message)
                    if result.error_code == 0:
                        created.append(acls.acl_of(model))
                await until_image_shows(
                    ctx.clock,
                    lambda: all(ctx.state.image.acls.id_of(a) is not None for a in created),
                    _WAIT_S,
                )
        return kafka_response(request, results=results)

    async def delete_acls(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        filters = list(request.body.filters)
        if not ctx.allows(conn, AclOperation.ALTER):
            message = refusal(conn, AclOperation.ALTER, "the cluster")
            denied = {**_error(KafkaError.cluster_authorization_failed, message), "matching_acls": []}
            return kafka_response(request, filter_results=[denied] * len(filters))
        _refuse_unknown(filters, "filter")
        results: list[dict[str, Any] | None] = [None] * len(filters)
        forwarded: list[tuple[int, AclFilterModel]] = []
        for position, item in enumerate(filters):
            try:
                forwarded.append((position, _filter(item)))
            except ValueError as exc:
                results[position] = {
                    **_error(KafkaError.invalid_request, str(exc).splitlines()[0]),
                    "matching_acls": [],
                }
        if forwarded:
            try:
                reply = await self.forwarder.delete_acls(
                    DeleteAclsRequest(filters=[m for _p, m in forwarded])
                )
            except ControllerCallError as exc:
                for position, _model in forwarded:
                    results[position] = {**_error(KafkaError.not_controller, str(exc)), "matching_acls": []}
            else:
                removed: list[Acl] = []
                for (position, _model), result in zip(forwarded, reply.results, strict=True):
                    matching = [acls.acl_of(m) for m in result.matching_acls]
                    removed.extend(matching)
                    results[position] = {
                        **_error(KafkaError(result.error_code), result.error_message),
                        "matching_acls": [_matching_acl(a) for a in matching],
                    }
                await until_image_shows(
                    ctx.clock, lambda: all(ctx.state.image.acls.id_of(a) is None for a in removed), _WAIT_S
                )
        return kafka_response(request, filter_results=results)
