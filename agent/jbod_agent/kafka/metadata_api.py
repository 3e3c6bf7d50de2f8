"""Metadata and DescribeCluster from the broker's replica of the metadata log: clients learn
brokers, topics, leaders and offline replicas here, never from the controller.

Guarantees:
* Brokers are the registered, unfenced brokers that have the listener the client connected
  through, at the address that listener advertises.
* A topic the image does not know is UNKNOWN_TOPIC_OR_PARTITION (by name) or UNKNOWN_TOPIC_ID
  (by id); topics are not created by a Metadata request (auto.create.topics.enable is off).
* A partition without a leader answers LEADER_NOT_AVAILABLE with leader -1; `offline_replicas`
  lists exactly the contract's offline replicas (§3.6: fenced or unregistered broker, or a dir
  not online), so a client sees which replicas a failed disk took away.
* The controller id a client sees is this broker's (KRaft brokers name an alive broker: admin
  requests sent there are forwarded to the active controller).
* Kafka's ACLs: a topic named (or asked by id) that the principal may not DESCRIBE is
  TOPIC_AUTHORIZATION_FAILED (29) whether or not it exists; a request for every topic lists only
  those it may DESCRIBE. DescribeCluster needs no ACL (as Kafka's).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent.kafka.context import ZERO_UUID, BrokerContext, jbod_uuid, kafka_uuid
from jbod_agent.kafka.listener import Connection
from jbod_core.acls import AclOperation
from jbod_core.group_records import OFFSETS_TOPIC
from jbod_core.image import TopicImage
from jbod_kafka import protocol


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
        "is_internal": topic.name == OFFSETS_TOPIC,
        "partitions": partitions,
    }


def _unknown(name: str | None, topic_id: Any, code: KafkaError, *, version: int) -> dict[str, Any]:
    """An unknown topic's entry; its name is nullable in responses from v12 only."""
    shown = name if name is not None or version >= 12 else ""
    return {"error_code": code, "name": shown, "topic_id": topic_id or ZERO_UUID, "partitions": []}


def _requested_topics(
    ctx: BrokerContext, conn: Connection, request: protocol.Request
) -> list[dict[str, Any]]:
    image = ctx.state.image
    body = request.body
    wanted = body.topics
    version = request.header.api_version
    if wanted is None or (version == 0 and not wanted):
        return [
            _topic(ctx, image.topics[t])
            for t in sorted(image.topics, key=lambda t: image.topics[t].name)
            if ctx.allows_topic(conn, AclOperation.DESCRIBE, image.topics[t].name)
        ]
    out = []
    for item in wanted:
        name = getattr(item, "name", None)
        topic_id = getattr(item, "topic_id", None)
        if name is None and topic_id is not None and topic_id != ZERO_UUID:
            topic = image.topics.get(jbod_uuid(topic_id))
            if topic is None:
                out.append(_unknown(None, topic_id, KafkaError.unknown_topic_id, version=version))
            elif not ctx.allows_topic(conn, AclOperation.DESCRIBE, topic.name):
                out.append(_unknown(None, topic_id, KafkaError.topic_authorization_failed, version=version))
            else:
                out.append(_topic(ctx, topic))
            continue
        if name is not None and not ctx.allows_topic(conn, AclOperation.DESCRIBE, name):
            out.append(_unknown(name, None, KafkaError.topic_authorization_failed, version=version))
            continue
        found = ctx.topic_id(name) if name is not None else None
        if found is None:
            out.append(
                _unknown(
                    name, None, KafkaError.unknown_topic_or_partition, version=request.header.api_version
                )
            )
        else:
            out.append(_topic(ctx, image.topics[found]))
    return out


async def metadata(ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
    response = protocol.response_type(request.header.api_key, request.header.api_version)
    return protocol.build(
        response,
        throttle_time=0,
        brokers=brokers(ctx, conn),
        cluster_id=ctx.state.cluster_id,
        controller_id=ctx.node_id,
        topics=_requested_topics(ctx, conn, request),
        cluster_authorized_operations=-2147483648,
        error_code=KafkaError.none,
    )


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
    return protocol.build(
        response,
        throttle_time=0,
        error_code=KafkaError.none,
        error_message=None,
        endpoint_type=endpoint_type,
        cluster_id=ctx.state.cluster_id,
        controller_id=ctx.node_id,
        brokers=[{**b, "broker_id": b["node_id"], "is_fenced": False} for b in brokers(ctx, conn)],
        cluster_authorized_operations=-2147483648,
    )
