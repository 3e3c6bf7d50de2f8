"""Kafka's admin APIs through any broker (forwarded to the controller), SCRAM users, and the
idempotent producer, driven by librdkafka's AdminClient/Producer and by raw requests where a
client library would not send what the test needs (a retried batch)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from jbod_kafka import protocol
from tests.broker.conftest import wait_for
from tests.kafka_api.conftest import KafkaCluster
from tests.kafka_api.raw_client import RawConnection
from tests.kafka_api.test_librdkafka import consume_all, produce, wait_for_leaders

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def admin(kafka: KafkaCluster, **config: object) -> AdminClient:
    return AdminClient(kafka.client_config(**config))


def name() -> str:
    return f"a-{uuid.uuid4().hex[:8]}"


def test_topic_lifecycle_through_the_admin_client(kafka_cluster: KafkaCluster) -> None:
    client = admin(kafka_cluster)
    topic = name()
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=2, replication_factor=3, config={"retention.ms": "3600000"})]
    )
    futures[topic].result(30)
    described = kafka_cluster.cluster.admin.describe_topic(topic)  # the controller has it
    assert len(described["partitions"]) == 2 and described["configs"]["retention.ms"] == "3600000"
    assert topic in client.list_topics(timeout=10).topics  # and the broker answering knows it at once
    with pytest.raises(KafkaException) as again:
        client.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    assert again.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    client.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    assert len(kafka_cluster.cluster.admin.describe_topic(topic)["partitions"]) == 4

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    client.incremental_alter_configs(
        [
            ConfigResource(
                ConfigResource.Type.TOPIC,
                topic,
                incremental_configs=[
                    ConfigEntry("min.insync.replicas", "2", incremental_operation=AlterConfigOpType.SET),
                    ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
                ],
            )
        ]
    )[resource].result(30)
    configs = client.describe_configs([resource])[resource].result(30)
    assert configs["min.insync.replicas"].value == "2" and not configs["min.insync.replicas"].is_default
    assert configs["retention.ms"].is_default

    client.delete_topics([topic])[topic].result(30)
    assert topic not in client.list_topics(timeout=10).topics
    with pytest.raises(KafkaException) as gone:
        client.delete_topics([topic])[topic].result(30)
    assert gone.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_a_bad_config_changes_nothing(kafka_cluster: KafkaCluster) -> None:
    client = admin(kafka_cluster)
    topic = name()
    with pytest.raises(KafkaException) as refused:
        client.create_topics([NewTopic(topic, 1, 1, config={"no.such.config": "1"})])[topic].result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert topic not in client.list_topics(timeout=10).topics


def test_a_scram_user_logs_in_produces_and_cannot_administer(kafka_cluster: KafkaCluster) -> None:
    client = admin(kafka_cluster)
    user = f"user-{uuid.uuid4().hex[:6]}"
    client.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"s3cret"
            )
        ]
    )[user].result(30)
    described = client.describe_user_scram_credentials([user])[user].result(30)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)
    ]
    topic = name()
    client.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    # The authorizer is always on: the user may write the topic once an ACL says so.
    write = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        f"User:{user}",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    assert client.create_acls([write])[write].result(30) is None
    as_user = {"sasl.username": user, "sasl.password": "s3cret"}
    for mechanism in ("SCRAM-SHA-512", "PLAIN"):
        acked = produce(
            kafka_cluster, topic, [(b"k", mechanism.encode())], **as_user, **{"sasl.mechanism": mechanism}
        )
        assert len(acked) == 1
    other = name()
    user_admin = admin(kafka_cluster, **as_user)  # kept: a destroyed client fails its futures
    with pytest.raises(KafkaException) as refused:
        user_admin.create_topics([NewTopic(other, 1, 1)])[other].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException):
        admin(kafka_cluster, **{"sasl.username": user, "sasl.password": "wrong"}).list_topics(timeout=5)


def test_the_idempotent_producer_writes_every_record_once(kafka_cluster: KafkaCluster) -> None:
    client = admin(kafka_cluster)
    topic = name()
    client.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    wait_for_leaders(kafka_cluster, topic, 3)
    records = [(b"k%d" % (i % 7), b"v-%05d" % i) for i in range(5000)]
    acked = produce(kafka_cluster, topic, records, **{"enable.idempotence": True, "linger.ms": 2})
    assert len(acked) == len(records)
    consumed = consume_all(kafka_cluster, topic, 3, len(records))
    values = [value for got in consumed.values() for _o, _k, value, _t in got]
    assert sorted(values) == sorted(v for _k, v in records)  # every record, none twice


def _idempotent_batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    for i, value in enumerate(values):
        builder.append(offset=i, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return bytes(builder.build())


def _produce_raw(conn: RawConnection, topic: str, batch: bytes) -> tuple[int, int]:
    body = protocol.build(
        protocol.request_type(0, 9),
        transactional_id=None,
        acks=-1,
        timeout=10_000,
        topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    )
    response = conn.request(0, 9, body)
    answer = response.responses[0].partition_responses[0]
    return int(answer.error_code), int(answer.base_offset)


#: InitProducerId's answer while the broker asks the controller for a block of producer ids.
COORDINATOR_LOAD_IN_PROGRESS = 14


def _init_producer_id(conn: RawConnection) -> Any:
    """InitProducerId, asked again while the broker has no producer id yet (as clients do)."""
    body = protocol.build(
        protocol.request_type(22, 4),
        transactional_id=None,
        transaction_timeout=60_000,
        producer_id=-1,
        producer_epoch=-1,
    )

    def answered() -> Any:
        init = conn.request(22, 4, body)
        return None if int(init.error_code) == COORDINATOR_LOAD_IN_PROGRESS else init

    return wait_for(answered, timeout=30, what="a producer id")


def test_a_retried_batch_is_answered_with_its_first_offset_and_written_once(
    kafka_cluster: KafkaCluster,
) -> None:
    client = admin(kafka_cluster)
    topic = name()
    client.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    leader = client.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    address = kafka_cluster.cluster.brokers[leader].kafka["SASL_PLAINTEXT"]
    with RawConnection(address) as conn:
        assert int(conn.authenticate("admin", kafka_cluster.admin_password).error_code) == 0
        init = _init_producer_id(conn)
        assert int(init.error_code) == 0 and int(init.producer_id) >= 0 and int(init.producer_epoch) == 0
        pid = int(init.producer_id)
        first = _idempotent_batch(pid, 0, 0, [b"a", b"b"])
        second = _idempotent_batch(pid, 0, 2, [b"c"])
        assert _produce_raw(conn, topic, first) == (0, 0)
        assert _produce_raw(conn, topic, second) == (0, 2)
        assert _produce_raw(conn, topic, first) == (0, 0)  # a retry: its first offset, not appended
        gap = _idempotent_batch(pid, 0, 7, [b"d"])
        assert _produce_raw(conn, topic, gap)[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        fenced = _idempotent_batch(pid, -1, 3, [b"e"])  # below the current epoch 0
        assert _produce_raw(conn, topic, fenced)[0] == 47  # INVALID_PRODUCER_EPOCH
    consumed = consume_all(kafka_cluster, topic, 1, 3)
    assert [(o, v) for o, _k, v, _t in consumed[0]] == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_init_producer_ids_are_unique_across_brokers(kafka_cluster: KafkaCluster) -> None:
    seen = set()
    for broker in kafka_cluster.cluster.brokers.values():
        with RawConnection(broker.kafka["SASL_PLAINTEXT"]) as conn:
            assert int(conn.authenticate("admin", kafka_cluster.admin_password).error_code) == 0
            for _ in range(3):
                init = _init_producer_id(conn)
                assert int(init.error_code) == 0, init
                seen.add(int(init.producer_id))
    assert len(seen) == 3 * len(kafka_cluster.cluster.brokers)


def test_watermarks_after_idempotent_production(kafka_cluster: KafkaCluster) -> None:
    topic = name()
    client = admin(kafka_cluster)
    client.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    produce(kafka_cluster, topic, [(b"k", b"v%d" % i) for i in range(10)], **{"enable.idempotence": True})
    consumer = Consumer(kafka_cluster.client_config(**{"group.id": "unused"}))
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 10)
    finally:
        consumer.close()


def _fetch(
    conn: RawConnection,
    *,
    session_id: int,
    epoch: int,
    partitions: list[tuple[str, int, int]],
    forgotten: list[tuple[str, int]] | None = None,
) -> Any:
    """Fetch v12 (topic names, sessions): `partitions` as (topic, partition, fetch offset)."""
    topics: dict[str, list[dict[str, int]]] = {}
    for topic, partition, offset in partitions:
        topics.setdefault(topic, []).append(
            {
                "partition": partition,
                "current_leader_epoch": -1,
                "fetch_offset": offset,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": 1 << 20,
            }
        )
    dropped: dict[str, list[int]] = {}
    for topic, partition in forgotten or []:
        dropped.setdefault(topic, []).append(partition)
    body = protocol.build(
        protocol.request_type(1, 12),
        cluster_id=None,
        replica_id=-1,
        max_wait=50,
        min_bytes=1,
        max_bytes=1 << 22,
        isolation_level=0,
        session_id=session_id,
        session_epoch=epoch,
        topics=[{"topic": t, "partitions": ps} for t, ps in topics.items()],
        forgotten_topics_data=[{"topic": t, "partitions": ps} for t, ps in dropped.items()],
        rack_id="",
    )
    return conn.request(1, 12, body)


def _answered(response: Any) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (bytes of records, high watermark) of every partition listed."""
    return {
        (t.topic, int(p.partition_index)): (len(p.records or b""), int(p.high_watermark))
        for t in response.responses
        for p in t.partitions
    }


def test_fetch_sessions_answer_only_what_changed(kafka_cluster: KafkaCluster) -> None:
    client = admin(kafka_cluster)
    busy, idle = name(), name()
    for topic in (busy, idle):
        client.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    leaders = {t: client.list_topics(t, timeout=10).topics[t].partitions[0].leader for t in (busy, idle)}
    if leaders[busy] != leaders[idle]:  # one session holds partitions of one leader
        client.delete_topics([idle])[idle].result(30)
        idle = busy
    produce(kafka_cluster, busy, [(b"k", b"old")])
    with RawConnection(kafka_cluster.cluster.brokers[leaders[busy]].kafka["SASL_PLAINTEXT"]) as conn:
        assert int(conn.authenticate("admin", kafka_cluster.admin_password).error_code) == 0
        wanted = sorted({(busy, 0, 0), (idle, 0, 0)})
        full = _fetch(conn, session_id=0, epoch=0, partitions=wanted)
        session_id = int(full.session_id)
        assert session_id != 0 and set(_answered(full)) == {(t, p) for t, p, _o in wanted}
        end = _answered(full)[(busy, 0)][1]
        caught_up = _fetch(conn, session_id=session_id, epoch=1, partitions=[(busy, 0, end)])
        assert int(caught_up.error_code) == 0 and int(caught_up.session_id) == session_id
        assert _answered(_fetch(conn, session_id=session_id, epoch=2, partitions=[])) == {}  # nothing new
        produce(kafka_cluster, busy, [(b"k", b"new")])
        grown = _answered(_fetch(conn, session_id=session_id, epoch=3, partitions=[]))
        assert list(grown) == [(busy, 0)] and grown[(busy, 0)][0] > 0  # only the partition that grew
        stale = _fetch(conn, session_id=session_id, epoch=3, partitions=[])
        assert int(stale.error_code) == 71  # INVALID_FETCH_SESSION_EPOCH
        unknown = _fetch(conn, session_id=session_id + 1, epoch=1, partitions=[])
        assert int(unknown.error_code) == 70  # FETCH_SESSION_ID_NOT_FOUND
