"""Kafka's ElectLeaders on a broker (`kafka-leader-election.sh`, the admin clients'
`electLeaders`): forwarded to the active controller, which elects as KRaft's does
(`jbod_core.leader_election`).

Guarantees:
* It needs ALTER on the cluster (Kafka's ACL): anyone else gets CLUSTER_AUTHORIZATION_FAILED at
  the top (v1+) and for every partition asked, and nothing changes.
* No controller answering is NOT_CONTROLLER at the top and for every partition (retriable, as a
  controller failover is to Kafka's clients); a request the controller's schema refuses (an
  election type other than 0 or 1) is INVALID_REQUEST.
* v0 elects preferred leaders (it has no election type); each partition gets the controller's
  code and message. Every elected partition is answered once this broker's image shows its new
  leader, bounded by the request's timeout, so a Metadata request to this broker right after
  sees it.
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
from jbod_core import records
from jbod_core.acls import AclOperation
from jbod_core.leader_election import ElectionType
from jbod_core.messages import ElectionTopic, ElectLeadersReply, ElectLeadersRequest
from jbod_kafka import protocol

ELECT_LEADERS_KEY: Final = 43


class ElectionApis:
    def __init__(self, ctx: BrokerContext, forwarder: Forwarder) -> None:
        self.ctx = ctx
        self.forwarder = forwarder

    def handlers(self) -> dict[int, Any]:
        return {ELECT_LEADERS_KEY: self.elect_leaders}

    def _elected(self, election: ElectionType, topic: str, partition: int) -> Callable[[], bool]:
        """Whether this broker's image shows the partition's elected leader."""

        def check() -> bool:
            image = self.ctx.state.image
            topic_id = image.topic_ids_by_name.get(topic)
            part = None if topic_id is None else image.partition((topic_id, partition))
            if part is None:
                return True  # deleted meanwhile: nothing left to wait for
            if election is ElectionType.PREFERRED:
                return part.leader == part.replicas[0]
            return part.leader != records.NO_LEADER

        return check

    async def elect_leaders(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        asked = (
            None
            if body.topic_partitions is None
            else [(t.topic, [int(p) for p in t.partitions]) for t in body.topic_partitions]
        )

        def refused(code: KafkaError, message: str) -> Any:
            return kafka_response(
                request,
                error_code=code,
                replica_election_results=[
                    {
                        "topic": topic,
                        "partition_result": [
                            {"partition_id": p, "error_code": code, "error_message": message}
                            for p in partitions
                        ],
                    }
                    for topic, partitions in asked or []
                ],
            )

        if not ctx.allows(conn, AclOperation.ALTER):
            return refused(
                KafkaError.cluster_authorization_failed, "Electing leaders needs ALTER on the cluster"
            )
        election_type = int(getattr(body, "election_type", ElectionType.PREFERRED))
        try:
            forwarded = ElectLeadersRequest(
                election_type=election_type,
                partitions=None
                if asked is None
                else [ElectionTopic(topic=t, partitions=p) for t, p in asked],
            )
            reply = await self.forwarder.elect_leaders(forwarded)
        except ControllerCallError as exc:
            return refused(KafkaError.not_controller, str(exc))
        except ValueError as exc:
            return refused(KafkaError.invalid_request, str(exc).splitlines()[0])
        await self._until_elected(ElectionType(election_type), reply, body.timeout.total_seconds())
        return kafka_response(
            request,
            error_code=KafkaError.none,
            replica_election_results=[
                {
                    "topic": topic.topic,
                    "partition_result": [
                        {
                            "partition_id": p.partition,
                            "error_code": p.error_code,
                            "error_message": p.error_message,
                        }
                        for p in topic.partitions
                    ],
                }
                for topic in reply.results
            ],
        )

    async def _until_elected(
        self, election: ElectionType, reply: ElectLeadersReply, timeout_s: float
    ) -> None:
        checks = [
            self._elected(election, topic.topic, p.partition)
            for topic in reply.results
            for p in topic.partitions
            if p.error_code == KafkaError.none
        ]
        await until_image_shows(self.ctx.clock, lambda: all(check() for check in checks), timeout_s)
