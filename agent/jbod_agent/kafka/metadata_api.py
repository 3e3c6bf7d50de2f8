"""Metadata and DescribeCluster from the broker's replica of the metadata log: clients learn
brokers, topics, leaders and offline replicas here, never from the controller.

Guarantees:
* Brokers are the registered, unfenced brokers that have the listener the client connected
  through, at the address that listener advertises.
* A topic asked by id that the image does not know is UNKNOWN_TOPIC_ID. A topic asked by name
  gets Kafka's answer (`jbod_core.auto_create`, its table): the topic; TOPIC_AUTHORIZATION_FAILED
  without DESCRIBE, or without CREATE (on the cluster or the topic) when it is missing and the
  request may create it; INVALID_TOPIC_EXCEPTION for an illegal name; else
  UNKNOWN_TOPIC_OR_PARTITION, the request starting its creation (`TopicCreator`: in the
  background, with this broker's `num.partitions` and `default.replication.factor`) when
  `auto.create.topics.enable` and the request (v4+: `allow_auto_topic_creation`) allow it. No
  answer waits for the controller: clients retry until the topic exists, as with Kafka.
* A partition without a leader answers LEADER_NOT_AVAILABLE with leader -1; `offline_replicas`
  lists exactly the contract's offline replicas (§3.6: fenced or unregistered broker, or a dir
  not online), so a client sees which replicas a failed disk took away.
* The controller id a client sees is this broker's (KRaft brokers name an alive broker: admin
  requests sent there are forwarded to the active controller).
* Kafka's ACLs: a topic named (or asked by id) that the principal may not DESCRIBE is
  TOPIC_AUTHORIZATION_FAILED (29) whether or not it exists; a request for every topic lists only
  those it may DESCRIBE (and creates nothing). DescribeCluster needs no ACL (as Kafka's).
* Authorized operations, when asked (Metadata v8+ `include_topic_authorized_operations` and
  v8-10 `include_cluster_authorized_operations`, DescribeCluster's): the bit field of the
  resource type's operations the principal may do (`jbod_core.acls`), the cluster's 0 without
  DESCRIBE on it (as Kafka); not asked, Kafka's Integer.MIN_VALUE.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent.kafka.context import ZERO_UUID, BrokerContext
from jbod_agent.kafka.listener import Connection
from jbod_agent.kafka.topic_creator import TopicCreator
from jbod_core import auto_create
from jbod_core.acls import OPERATIONS_NOT_ASKED, AclOperation, Resource, ResourceType
from jbod_core.image import TopicImage
from jbod_kafka import protocol
from jbod_kafka.ids import jbod_uuid, kafka_uuid


def brokers(ctx: BrokerContext, conn: Connection) -> list[dict[str, Any]]:
    out = []
    for reg in sorted(ctx.state.image.brokers.values(), key=lambda r: r.broker_id):
        if reg.fenced:
            continue
        endpoint = ctx.endpoint(reg, conn.listener.name)
        if endpoint is None:
            continue
        out.append({"node_id": reg.broker_id, "host": endpoint.host, "port": endpoint.port, "rack": reg.rack})
    return out


def controller_id(ctx: BrokerContext, listed: list[dict[str, Any]]) -> int:
    """The controller id a client is given: this broker (it forwards controller requests) once
    the brokers it lists include it; until then (its image does not show it unfenced yet, just
    after it started) the first broker it lists, else -1. Never an id missing from the answer's
    brokers: librdkafka waits for such a broker until its next periodic metadata refresh."""
    ids = [int(b["node_id"]) for b in listed]
    if ctx.node_id in ids:
        return ctx.node_id
    return ids[0] if ids else -1


def _topic(ctx: BrokerContext, topic: TopicImage) -> dict[str, Any]:
    image = ctx.state.image
    partitions = []
    for index in sorted(topic.partitions):
        part = topic.partitions[index]
        partitions.append(
            {
                "error_code": KafkaError.none if part.leader >= 0 else KafkaError.leader_not_available,
                "partition_index": index,
                "leader_id": part.leader,
                "leader_epoch": part.leader_epoch,
                "replica_nodes": part.replicas,
                "isr_nodes": part.isr,
                "offline_replicas": image.offline_replicas(part),
            }
        )
    return {
        "error_code": KafkaError.none,
        "name": topic.name,
        "topic_id": kafka_uuid(topic.topic_id),
        "is_internal": topic.name in auto_create.INTERNAL_TOPICS,
        "partitions": partitions,
    }


def _unknown(
    name: str | None, topic_id: Any, code: KafkaError, *, version: int, is_internal: bool = False
) -> dict[str, Any]:
    """An unknown topic's entry; its name is nullable in responses from v12 only."""
    shown = name if name is not None or version >= 12 else ""
    return {
        "error_code": code,
        "name": shown,
        "topic_id": topic_id or ZERO_UUID,
        "is_internal": is_internal,
        "partitions": [],
    }


class MetadataApis:
    """Metadata over this broker's image, starting topic creations through `creator`."""

    def __init__(self, ctx: BrokerContext, creator: TopicCreator) -> None:
        self.ctx = ctx
        self.creator = creator

    def handlers(self) -> dict[int, Any]:
        return {3: self.metadata}

    async def metadata(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        response = protocol.response_type(request.header.api_key, request.header.api_version)
        listed = brokers(ctx, conn)
        return protocol.build(
            response,
            throttle_time=0,
            brokers=listed,
            cluster_id=ctx.state.cluster_id,
            controller_id=controller_id(ctx, listed),
            topics=self._with_operations(conn, request, self._requested_topics(conn, request)),
            cluster_authorized_operations=_cluster_operations(
                ctx, conn, asked=bool(getattr(request.body, "include_cluster_authorized_operations", False))
            ),
            error_code=KafkaError.none,
        )

    def _with_operations(
        self, conn: Connection, request: protocol.Request, topics: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """`topics` with each named topic's authorized operations when the request asks (v8+),
        as Kafka fills them: for every topic answered, with an error too."""
        if not getattr(request.body, "include_topic_authorized_operations", False):
            return topics
        return [
            topic
            if topic.get("name") is None
            else {
                **topic,
                "topic_authorized_operations": self.ctx.authorized_operations(
                    conn, Resource(ResourceType.TOPIC, topic["name"])
                ),
            }
            for topic in topics
        ]

    def _requested_topics(self, conn: Connection, request: protocol.Request) -> list[dict[str, Any]]:
        ctx = self.ctx
        image = ctx.state.image
        wanted = request.body.topics
        version = request.header.api_version
        if wanted is None or (version == 0 and not wanted):
            return [
                _topic(ctx, image.topics[t])
                for t in sorted(image.topics, key=lambda t: image.topics[t].name)
                if ctx.allows_topic(conn, AclOperation.DESCRIBE, image.topics[t].name)
            ]
        out = []
        named: list[str] = []
        for item in wanted:
            name = getattr(item, "name", None)
            topic_id = getattr(item, "topic_id", None)
            if name is not None:
                named.append(name)
            elif topic_id is not None and topic_id != ZERO_UUID:
                out.append(self._by_id(conn, topic_id, version=version))
            else:
                out.append(_unknown(None, topic_id, KafkaError.unknown_topic_or_partition, version=version))
        out += self._by_name(conn, named, request)
        return out

    def _by_id(self, conn: Connection, topic_id: Any, *, version: int) -> dict[str, Any]:
        topic = self.ctx.state.image.topics.get(jbod_uuid(topic_id))
        if topic is None:
            return _unknown(None, topic_id, KafkaError.unknown_topic_id, version=version)
        if not self.ctx.allows_topic(conn, AclOperation.DESCRIBE, topic.name):
            return _unknown(None, topic_id, KafkaError.topic_authorization_failed, version=version)
        return _topic(self.ctx, topic)

    def _by_name(self, conn: Connection, names: list[str], request: protocol.Request) -> list[dict[str, Any]]:
        """Kafka's answer to each named topic (`jbod_core.auto_create`), starting the creations it
        decides."""
        ctx = self.ctx
        version = request.header.api_version
        creation_allowed = ctx.state.config.auto_create_settings.allows(
            version=version,
            allow_auto_topic_creation=bool(getattr(request.body, "allow_auto_topic_creation", True)),
        )
        missing = any(ctx.topic_id(name) is None for name in names)
        may_create_any = creation_allowed and missing and ctx.allows(conn, AclOperation.CREATE)
        asked = []
        for name in names:
            exists = ctx.topic_id(name) is not None
            asked.append(
                auto_create.AskedTopic(
                    name=name,
                    exists=exists,
                    may_describe=ctx.allows_topic(conn, AclOperation.DESCRIBE, name),
                    may_create=not exists
                    and creation_allowed
                    and (may_create_any or ctx.allows_topic(conn, AclOperation.CREATE, name)),
                    being_created=self.creator.being_created(name),
                )
            )
        out = []
        for answer in auto_create.answers(asked, creation_allowed=creation_allowed):
            found = ctx.topic_id(answer.name)
            if answer.error == auto_create.MetadataError.NONE and found is not None:
                out.append(_topic(ctx, ctx.state.image.topics[found]))
                continue
            if answer.create:
                self.creator.start(answer.name)
            out.append(
                _unknown(
                    answer.name,
                    None,
                    KafkaError(answer.error),
                    version=version,
                    is_internal=answer.is_internal,
                )
            )
        return out


def _cluster_operations(ctx: BrokerContext, conn: Connection, *, asked: bool) -> int:
    """The cluster's authorized operations for the connection, or Kafka's "not asked" value; as
    Kafka, none (0) for a principal that may not DESCRIBE the cluster."""
    if not asked:
        return OPERATIONS_NOT_ASKED
    return ctx.authorized_operations(conn) if ctx.allows(conn, AclOperation.DESCRIBE) else 0


BROKER_ENDPOINTS, CONTROLLER_ENDPOINTS = 1, 2  # DescribeCluster's endpoint types (KIP-919)


async def describe_cluster(ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
    response = protocol.response_type(request.header.api_key, request.header.api_version)
    endpoint_type = getattr(request.body, "endpoint_type", BROKER_ENDPOINTS)
    if endpoint_type != BROKER_ENDPOINTS:
        # As Kafka's broker: an error and nothing else (the other fields keep their defaults).
        mismatched = endpoint_type == CONTROLLER_ENDPOINTS
        return protocol.build(
            response,
            throttle_time=0,
            error_code=KafkaError.mismatched_endpoint_type
            if mismatched
            else KafkaError.unsupported_endpoint_type,
            error_message="A broker answers for brokers; controllers are not reached through the Kafka protocol"
            if mismatched
            else f"Unknown endpoint type {endpoint_type}",
            cluster_id="",
            brokers=[],
        )
    listed = brokers(ctx, conn)
    return protocol.build(
        response,
        throttle_time=0,
        error_code=KafkaError.none,
        error_message=None,
        endpoint_type=endpoint_type,
        cluster_id=ctx.state.cluster_id,
        controller_id=controller_id(ctx, listed),
        brokers=[{**b, "broker_id": b["node_id"], "is_fenced": False} for b in listed],
        cluster_authorized_operations=_cluster_operations(
            ctx, conn, asked=bool(getattr(request.body, "include_cluster_authorized_operations", False))
        ),
    )
