"""The controller API of client quotas (docs/api.md, "Client quotas"): Kafka's AlterClientQuotas
as `POST /v1/client-quotas` and every quota set as `GET /v1/client-quotas`, strict frozen
pydantic models as `jbod_core.messages` (camelCase on the wire).

Guarantees:
* An entity component without `entityName` (or with null) names the default entity.
* `to_entries` / `from_results` convert to and from `jbod_core.quotas`' typed values, keeping the
  request's entity as given (unsorted) so each result names the entity as it was asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from jbod_core import quotas
from jbod_core.messages import Message


class QuotaEntityComponent(Message):
    entity_type: str
    entity_name: str | None = None  # None: the default entity


class ClientQuotaOp(Message):
    key: str
    value: float = 0.0
    remove: bool = False


class ClientQuotaAlteration(Message):
    entity: list[QuotaEntityComponent]
    ops: list[ClientQuotaOp] = []


class AlterClientQuotasRequest(Message):
    entries: list[ClientQuotaAlteration] = []
    validate_only: bool = False


class ClientQuotaAlterResult(Message):
    entity: list[QuotaEntityComponent]
    error_code: int = 0
    error_message: str | None = None


class AlterClientQuotasReply(Message):
    error_code: int = 0
    error_message: str | None = None
    entries: list[ClientQuotaAlterResult] = []


class ClientQuotaEntry(Message):
    entity: list[QuotaEntityComponent]
    values: dict[str, float]


class DescribeClientQuotasReply(Message):
    entries: list[ClientQuotaEntry] = []


def components(entity: Sequence[tuple[str, str | None]]) -> list[QuotaEntityComponent]:
    return [QuotaEntityComponent(entity_type=kind, entity_name=name) for kind, name in entity]


def to_entries(request: AlterClientQuotasRequest) -> list[quotas.AlterEntry]:
    return [
        quotas.AlterEntry(
            entity=tuple((c.entity_type, c.entity_name) for c in entry.entity),
            ops=tuple(
                quotas.QuotaOp(key=op.key, value=None if op.remove else op.value, remove=op.remove)
                for op in entry.ops
            ),
        )
        for entry in request.entries
    ]


def from_results(results: Sequence[quotas.AlterResult]) -> AlterClientQuotasReply:
    return AlterClientQuotasReply(
        entries=[
            ClientQuotaAlterResult(
                entity=components(r.entity), error_code=int(r.error_code), error_message=r.error_message
            )
            for r in results
        ]
    )


def describe_all(client_quotas: Mapping[quotas.Entity, Mapping[str, float]]) -> DescribeClientQuotasReply:
    """Every entity with a quota, sorted (defaults first)."""
    return DescribeClientQuotasReply(
        entries=[
            ClientQuotaEntry(entity=components(entity), values=values)
            for entity, values in quotas.describe(client_quotas, (), strict=False)
        ]
    )
