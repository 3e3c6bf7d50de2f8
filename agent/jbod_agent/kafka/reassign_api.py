"""Kafka's partition reassignment APIs on a broker (KIP-455): AlterPartitionReassignments is
forwarded to the active controller, ListPartitionReassignments is answered from this broker's
replica of the metadata log.

Guarantees:
* Alter needs ALTER on the cluster, List DESCRIBE (Kafka's ACLs): anyone else gets
  CLUSTER_AUTHORIZATION_FAILED, at the top and for every partition, and nothing changes.
* No controller answering is NOT_CONTROLLER at the top (retriable, as a controller failover is
  to Kafka's clients); a request the controller's schema refuses is INVALID_REQUEST.
* Each partition gets the controller's own code and message (`jbod_core.reassignment`). An
  accepted partition is answered once this broker's image shows it (its target replicas, or
  the reassignment gone after a cancel), bounded by the request's timeout, so a
  ListPartitionReassignments or a Metadata request to this broker right after sees it.
* ListPartitionReassignments lists every partition being reassigned, or those of the topics
  and partitions asked for that are (unknown ones are left out, as Kafka does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent.kafka.admin_api import kafka_response, until_image_shows
from jbod_agent.kafka.context import BrokerContext
from jbod_agent.kafka.forwarding import Forwarder
from jbod_agent.kafka.listener import Connection
from jbod_agent.ports import ControllerCallError
from jbod_core import reassignment
from jbod_core.acls import AclOperation
from jbod_core.messages import AlterReassignmentsRequest, ReassignmentTarget
from jbod_kafka import protocol

ALTER_KEY: Final = 45
LIST_KEY: Final = 46


class ReassignApis:
    def __init__(self, ctx: BrokerContext, forwarder: Forwarder) -> None:
        self.ctx = ctx
        self.forwarder = forwarder

    def handlers(self) -> dict[int, Any]:
        return {ALTER_KEY: self.alter_partition_reassignments, LIST_KEY: self.list_partition_reassignments}

    def _settled(self, item: ReassignmentTarget) -> Callable[[], bool]:
        """Whether this broker's image shows `item`'s accepted change."""

        def check() -> bool:
            image = self.ctx.state.image
            topic_id = image.topic_ids_by_name.get(item.topic)
            part = None if topic_id is None else image.partition((topic_id, item.partition))
            if part is None:
                return True  # deleted meanwhile: nothing left to wait for
            if item.replicas is None:
                return not part.reassigning
            return part.target_replicas == tuple(item.replicas) or (
                not part.reassigning and set(part.replicas) == set(item.replicas)
            )

        return check

    async def _until_settled(self, items: list[ReassignmentTarget], timeout_s: float) -> None:
        checks = [self._settled(item) for item in items]
        await until_image_shows(self.ctx.clock, lambda: all(check() for check in checks), timeout_s)

    async def alter_partition_reassignments(
        self, ctx: BrokerContext, conn: Connection, request: protocol.Request
    ) -> Any:
        body = request.body
        items = [
            (topic.name, int(p.partition_index), None if p.replicas is None else [int(b) for b in p.replicas])
            for topic in body.topics
            for p in topic.partitions
        ]

        def answer(
            code: KafkaError,
            message: str | None,
            per_partition: dict[tuple[str, int], tuple[KafkaError, str | None]],
        ) -> Any:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for name, index, _ in items:
                part_code, part_message = per_partition.get((name, index), (code, message))
                by_topic.setdefault(name, []).append(
                    {"partition_index": index, "error_code": part_code, "error_message": part_message}
                )
            return kafka_response(
                request,
                error_code=code,
                error_message=message,
                allow_replication_factor_change=getattr(body, "allow_replication_factor_change", True),
                responses=[{"name": name, "partitions": parts} for name, parts in by_topic.items()],
            )

        if not ctx.allows(conn, AclOperation.ALTER):
            return answer(
                KafkaError.cluster_authorization_failed,
                "Reassigning partitions needs ALTER on the cluster",
                {},
            )
        try:
            forwarded = AlterReassignmentsRequest(
                partitions=[ReassignmentTarget(topic=n, partition=i, replicas=r) for n, i, r in items],
                allow_replication_factor_change=getattr(body, "allow_replication_factor_change", True),
            )
            reply = await self.forwarder.alter_reassignments(forwarded)
        except ControllerCallError as exc:
            return answer(KafkaError.not_controller, str(exc), {})
        except ValueError as exc:
            return answer(KafkaError.invalid_request, str(exc).splitlines()[0], {})
        results = {(r.topic, r.partition): (KafkaError(r.error_code), r.error_message) for r in reply.results}
        accepted = [
            item
            for item in forwarded.partitions
            if results.get((item.topic, item.partition), (KafkaError.none, None))[0] == KafkaError.none
        ]
        await self._until_settled(accepted, body.timeout.total_seconds())
        none: tuple[KafkaError, str | None] = (KafkaError.none, None)
        return answer(
            KafkaError.none, None, {k: v if v[0] != KafkaError.none else none for k, v in results.items()}
        )

    async def list_partition_reassignments(
        self, ctx: BrokerContext, conn: Connection, request: protocol.Request
    ) -> Any:
        if not ctx.allows(conn, AclOperation.DESCRIBE):
            return kafka_response(
                request,
                error_code=KafkaError.cluster_authorization_failed,
                error_message="Listing reassignments needs DESCRIBE on the cluster",
                topics=[],
            )
        topics = request.body.topics
        wanted = None if topics is None else [(t.name, [int(i) for i in t.partition_indexes]) for t in topics]
        listed = reassignment.list_reassignments(self.ctx.state.image, wanted)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for ongoing in listed.reassignments:
            by_topic.setdefault(ongoing.topic, []).append(
                {
                    "partition_index": ongoing.partition,
                    "replicas": ongoing.replicas,
                    "adding_replicas": ongoing.adding_replicas,
                    "removing_replicas": ongoing.removing_replicas,
                }
            )
        return kafka_response(
            request,
            error_code=KafkaError.none,
            error_message=None,
            topics=[{"name": name, "partitions": parts} for name, parts in by_topic.items()],
        )
