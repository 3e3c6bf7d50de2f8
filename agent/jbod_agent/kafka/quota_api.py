"""Kafka's client quota APIs on a broker (KIP-546): DescribeClientQuotas answered from this
broker's metadata image, AlterClientQuotas forwarded to the active controller (KIP-590).

Guarantees:
* ACLs as Kafka's KafkaApis: DescribeClientQuotas needs DESCRIBE_CONFIGS on the cluster, else
  CLUSTER_AUTHORIZATION_FAILED with no entries (null); AlterClientQuotas ALTER_CONFIGS on the
  cluster, else CLUSTER_AUTHORIZATION_FAILED for every entry; nothing changes.
* A filter `jbod_core.quotas.filter_problem` refuses is INVALID_REQUEST with its message and no
  entries; otherwise the entries are the entities of this broker's image the filter matches,
  each with every key it sets.
* AlterClientQuotas answers the controller's result per entry (INVALID_REQUEST for an entity or
  op Kafka refuses, nothing of that entry written; `validate_only` writes nothing). No controller
  answering is NOT_CONTROLLER for every entry (retriable). A change is answered once this
  broker's image shows it (bounded), so a describe on the same broker that follows sees it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent.kafka.admin_api import kafka_response, until_image_shows
from jbod_agent.kafka.context import BrokerContext, refusal
from jbod_agent.kafka.forwarding import Forwarder
from jbod_agent.kafka.listener import Connection
from jbod_agent.ports import ControllerCallError
from jbod_core import quotas
from jbod_core.acls import AclOperation
from jbod_core.quota_messages import (
    AlterClientQuotasRequest,
    ClientQuotaAlteration,
    ClientQuotaOp,
    QuotaEntityComponent,
)
from jbod_kafka import protocol

DESCRIBE_CLIENT_QUOTAS_KEY: Final = 48
ALTER_CLIENT_QUOTAS_KEY: Final = 49
_SHOWN_WAIT_S: Final = 30.0


def _entity_data(entity: Sequence[tuple[str, str | None]]) -> list[dict[str, Any]]:
    return [{"entity_type": kind, "entity_name": name} for kind, name in entity]


class QuotaApis:
    def __init__(self, ctx: BrokerContext, forwarder: Forwarder) -> None:
        self.ctx = ctx
        self.forwarder = forwarder

    def handlers(self) -> dict[int, Any]:
        return {
            DESCRIBE_CLIENT_QUOTAS_KEY: self.describe_client_quotas,
            ALTER_CLIENT_QUOTAS_KEY: self.alter_client_quotas,
        }

    async def describe_client_quotas(
        self, ctx: BrokerContext, conn: Connection, request: protocol.Request
    ) -> Any:
        if not ctx.allows(conn, AclOperation.DESCRIBE_CONFIGS):
            return kafka_response(  # as Kafka's: no message, no entries (null)
                request, error_code=KafkaError.cluster_authorization_failed, error_message=None, entries=None
            )
        components = [
            quotas.FilterComponent(c.entity_type, int(c.match_type), c.match) for c in request.body.components
        ]
        problem = quotas.filter_problem(components)
        if problem is not None:
            return kafka_response(
                request, error_code=KafkaError(int(problem[0])), error_message=problem[1], entries=None
            )
        found = quotas.describe(ctx.state.image.client_quotas, components, strict=request.body.strict)
        return kafka_response(
            request,
            error_code=KafkaError.none,
            error_message="",
            entries=[
                {
                    "entity": _entity_data(entity),
                    "values": [{"key": key, "value": value} for key, value in sorted(values.items())],
                }
                for entity, values in found
            ],
        )

    async def alter_client_quotas(
        self, ctx: BrokerContext, conn: Connection, request: protocol.Request
    ) -> Any:
        body = request.body
        entities = [[(e.entity_type, e.entity_name) for e in entry.entity] for entry in body.entries]
        if not ctx.allows(conn, AclOperation.ALTER_CONFIGS):
            denial = refusal(conn, AclOperation.ALTER_CONFIGS, "the cluster")
            return kafka_response(
                request,
                entries=[
                    {
                        "error_code": KafkaError.cluster_authorization_failed,
                        "error_message": denial,
                        "entity": _entity_data(entity),
                    }
                    for entity in entities
                ],
            )
        forwarded = AlterClientQuotasRequest(
            entries=[
                ClientQuotaAlteration(
                    entity=[QuotaEntityComponent(entity_type=k, entity_name=n) for k, n in entity],
                    ops=[
                        ClientQuotaOp(key=op.key, value=float(op.value), remove=op.remove) for op in entry.ops
                    ],
                )
                for entity, entry in zip(entities, body.entries, strict=True)
            ],
            validate_only=body.validate_only,
        )
        try:
            reply = await self.forwarder.alter_client_quotas(forwarded)
        except ControllerCallError as exc:
            return kafka_response(
                request,
                entries=[
                    {
                        "error_code": KafkaError.not_controller,
                        "error_message": str(exc),
                        "entity": _entity_data(e),
                    }
                    for e in entities
                ],
            )
        if not body.validate_only:
            await until_image_shows(ctx.clock, lambda: self._shows(forwarded, reply), _SHOWN_WAIT_S)
        return kafka_response(
            request,
            entries=[
                {
                    "error_code": KafkaError(r.error_code),
                    "error_message": r.error_message,
                    "entity": [
                        {"entity_type": c.entity_type, "entity_name": c.entity_name} for c in r.entity
                    ],
                }
                for r in reply.entries
            ],
        )

    def _shows(self, forwarded: AlterClientQuotasRequest, reply: Any) -> bool:
        """Does this broker's image show every entry the controller accepted?"""
        image_quotas = self.ctx.state.image.client_quotas
        for entry, result in zip(forwarded.entries, reply.entries, strict=False):
            if result.error_code != 0:
                continue
            values = image_quotas.get(quotas.entity((c.entity_type, c.entity_name) for c in entry.entity), {})
            for op in entry.ops:
                if (op.key in values) if op.remove else (values.get(op.key) != op.value):
                    return False
        return True
