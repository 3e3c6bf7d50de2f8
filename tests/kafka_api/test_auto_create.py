"""Topic auto-creation (issue 30): `auto.create.topics.enable`, `num.partitions` and
`default.replication.factor` on real brokers, with real clients, answered as Apache Kafka 4.3.1
answers (each expectation below was measured on a real Kafka 4.3.1 first).

Two clusters: `on` (two brokers, auto-creation on with 3 partitions and replication factor 2;
broker 2 sets `auto.create.topics.enable=true` explicitly, broker 1 leaves Kafka's default) and
`off` (broker 1 has `auto.create.topics.enable=false`; broker 2 keeps it on with a
`default.replication.factor` of 3, more than the two brokers). Raw Metadata requests go to one
chosen broker; librdkafka (confluent-kafka) and Kafka's console producer are used as applications
use them.

"Nothing was created" is checked after a barrier: a topic created afterwards through the same
broker (whose creation started later) exists, so a creation the refused request had started would
have been seen by then.
"""

from __future__ import annotations

import contextlib
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from e2e import kafka_tools
from jbod_client.controller import read_token
from jbod_core.messages import AlterScramCredentialsRequest, ScramCredentialUpsertion
from jbod_core.scram import salted_password
from jbod_kafka import protocol
from tests.broker.conftest import start_cluster, wait_for
from tests.kafka_api.conftest import KAFKA_LISTENERS, KafkaCluster
from tests.kafka_api.raw_client import RawConnection

pytestmark = [pytest.mark.integration, pytest.mark.slow]

UNKNOWN, INVALID_TOPIC, DENIED = 3, 17, 29
ZERO = uuid.UUID(int=0)


def _start(stack: contextlib.ExitStack, base: Path, brokers: dict[int, dict[str, str]]) -> KafkaCluster:
    """A cluster whose broker `id` has the `server.properties` keys `brokers[id]`."""
    cluster = start_cluster(stack, base)
    for node_id, properties in brokers.items():
        cluster.add_broker(
            node_id,
            loop=False,
            properties={
                "listeners": KAFKA_LISTENERS,
                "admin.token.file": str(cluster.controller.admin_token_file),
                **properties,
            },
        )
    wait_for(lambda: cluster.all_unfenced(len(brokers)), what="every broker unfenced")
    return KafkaCluster(cluster, read_token(cluster.controller.admin_token_file))


@pytest.fixture(scope="module")
def on(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    defaults = {"num.partitions": "3", "default.replication.factor": "2"}
    with contextlib.ExitStack() as stack:
        yield _start(
            stack,
            tmp_path_factory.mktemp("auto-on"),
            {1: defaults, 2: {**defaults, "auto.create.topics.enable": "true"}},
        )


@pytest.fixture(scope="module")
def off(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield _start(
            stack,
            tmp_path_factory.mktemp("auto-off"),
            {1: {"auto.create.topics.enable": "false"}, 2: {"default.replication.factor": "3"}},
        )


def _address(kafka: KafkaCluster, node_id: int) -> str:
    listeners = kafka.cluster.brokers[node_id].kafka
    assert listeners is not None
    return listeners["SASL_PLAINTEXT"]


def _name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _metadata(conn: RawConnection, names: list[str], *, allow: bool = True, version: int = 12) -> list[Any]:
    """The topics of one Metadata request naming `names`."""
    fields: dict[str, Any] = {
        "topics": [{"name": n, "topic_id": ZERO} for n in names],
        "allow_auto_topic_creation": allow,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    response = conn.request(3, version, protocol.build(protocol.request_type(3, version), **fields))
    return list(response.topics)


def _answers(conn: RawConnection, names: list[str], **options: Any) -> dict[str, int]:
    return {t.name: int(t.error_code) for t in _metadata(conn, names, **options)}


@contextlib.contextmanager
def _connection(
    kafka: KafkaCluster, node_id: int, user: str = "admin", password: str | None = None
) -> Iterator[RawConnection]:
    with RawConnection(_address(kafka, node_id)) as conn:
        assert int(conn.authenticate(user, password or kafka.admin_password).error_code) == 0
        yield conn


def _exists(kafka: KafkaCluster, name: str) -> bool:
    return any(t["name"] == name for t in kafka.cluster.admin.list_topics())


def _until_served(conn: RawConnection, name: str, **options: Any) -> Any:
    """Ask for `name` (allowing creation) until the broker serves it with a leader per partition."""

    def served() -> Any:
        [topic] = _metadata(conn, [name], **options)
        if (
            int(topic.error_code) == 0
            and topic.partitions
            and all(p.leader_id >= 0 for p in topic.partitions)
        ):
            return topic
        return None

    return wait_for(served, timeout=30, what=f"{name} created and served")


def _barrier(kafka: KafkaCluster, conn: RawConnection, node_id: int) -> None:
    """A topic created through broker `node_id` after the requests before it exists; creations
    those requests started would have reached the controller first."""
    if kafka.cluster.brokers[node_id].settings.get("auto.create.topics.enable") == "false":
        admin = AdminClient(kafka.client_config(**{"bootstrap.servers": _address(kafka, node_id)}))
        sentinel = _name("barrier")
        admin.create_topics([NewTopic(sentinel, 1, 1)])[sentinel].result(30)
        return
    _until_served(conn, _name("barrier"))


def _user(kafka: KafkaCluster, user: str, password: str) -> None:
    salt = b"auto-create-test"
    reply = kafka.cluster.admin.alter_scram_credentials(
        AlterScramCredentialsRequest(
            upsertions=[
                ScramCredentialUpsertion(
                    name=user,
                    mechanism=2,
                    iterations=4096,
                    salt=salt,
                    salted_password=salted_password(password.encode(), salt, 4096, mechanism=2),
                )
            ]
        )
    )
    assert reply.results[0].error_code == 0
    kafka.cluster.wait_until_applied()  # the brokers learn of it from the metadata log


def _allow(user: str, kind: str, name: str, operation: str, pattern: str = "LITERAL") -> dict[str, str]:
    return {
        "resourceType": kind,
        "resourceName": name,
        "patternType": pattern,
        "principal": f"User:{user}",
        "operation": operation,
        "permissionType": "ALLOW",
    }


def _consume(kafka: KafkaCluster, topic: str, partitions: int, expected: int) -> list[bytes]:
    consumer = Consumer(kafka.client_config(**{"group.id": _name("g"), "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                values.append(msg.value())
    finally:
        consumer.close()
    return values


# -- a producer's first produce ---------------------------------------------------------------------


def test_a_librdkafka_producer_creates_its_topic_with_the_brokers_defaults(on: KafkaCluster) -> None:
    topic = _name("produced")
    producer = Producer(on.client_config(acks="all"))
    acked: list[tuple[int, int]] = []
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        (errors.append(err) if err is not None else acked.append((msg.partition(), msg.offset())))

    values = [f"v{i}".encode() for i in range(60)]
    for i, value in enumerate(values):
        producer.produce(topic, key=str(i).encode(), value=value, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    assert len(acked) == len(values)

    described = on.cluster.admin.describe_topic(topic)
    assert len(described["partitions"]) == 3  # num.partitions
    assert {len(p["replicas"]) for p in described["partitions"]} == {2}  # default.replication.factor
    assert sorted(_consume(on, topic, 3, len(values))) == sorted(values)


def test_kafkas_console_producer_creates_its_topic(on: KafkaCluster) -> None:
    topic = _name("console")
    done = kafka_tools.run_tool(
        "kafka-console-producer.sh",
        ["--topic", topic],
        bootstrap=on.bootstrap,
        command_config={
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="admin" password="{on.admin_password}";',
        },
        input="one\ntwo\nthree\n",
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert len(on.cluster.admin.describe_topic(topic)["partitions"]) == 3
    assert sorted(_consume(on, topic, 3, 3)) == [b"one", b"three", b"two"]


def test_create_topics_with_minus_one_takes_the_brokers_defaults(on: KafkaCluster) -> None:
    """KIP-464: CreateTopics with -1 partitions and replication factor gets `num.partitions` and
    `default.replication.factor` (on Kafka, the controller's; here the broker's, docs/decisions.md)."""
    topic = _name("defaults")
    admin = AdminClient(on.client_config())
    admin.create_topics([NewTopic(topic, num_partitions=-1, replication_factor=-1)])[topic].result(30)
    partitions = on.cluster.admin.describe_topic(topic)["partitions"]
    assert len(partitions) == 3
    assert {len(p["replicas"]) for p in partitions} == {2}


# -- what Metadata answers ---------------------------------------------------------------------------


def test_the_creating_request_answers_unknown_topic_then_the_topic_is_served(on: KafkaCluster) -> None:
    topic = _name("raw")
    with _connection(on, 1) as conn:
        [first] = _metadata(conn, [topic, topic])  # a name asked twice is answered once
        assert (first.name, int(first.error_code), list(first.partitions), first.is_internal) == (
            topic,
            UNKNOWN,
            [],
            False,
        )
        served = _until_served(conn, topic)
    assert len(served.partitions) == 3
    assert all(len(p.replica_nodes) == 2 for p in served.partitions)


def test_metadata_v0_to_v3_always_allow_creation_and_v4_asks(on: KafkaCluster) -> None:
    v3, v4_refused, v4_allowed = _name("v3"), _name("v4-no"), _name("v4-yes")
    with _connection(on, 2) as conn:
        assert _answers(conn, [v3], allow=False, version=3) == {v3: UNKNOWN}
        assert _answers(conn, [v4_refused], allow=False, version=4) == {v4_refused: UNKNOWN}
        assert _answers(conn, [v4_allowed], allow=True, version=4) == {v4_allowed: UNKNOWN}
        _until_served(conn, v3, version=3)
        _until_served(conn, v4_allowed, version=4)
        assert _answers(conn, [v4_refused], allow=False, version=4) == {v4_refused: UNKNOWN}
    assert not _exists(on, v4_refused)


@pytest.mark.parametrize("allow", [True, False])
def test_an_illegal_name_is_invalid_topic_and_nothing_is_created(on: KafkaCluster, allow: bool) -> None:
    illegal = ["a/b", "..", ".", "x" * 250, f"{_name()}!"]
    longest = "y" * 240 + uuid.uuid4().hex[:9]  # 249 characters: legal
    with _connection(on, 1) as conn:
        assert _answers(conn, [*illegal, longest], allow=allow) == {
            **dict.fromkeys(illegal, INVALID_TOPIC),
            longest: UNKNOWN,
        }
        if allow:
            _until_served(conn, longest)
        _barrier(on, conn, 1)
    listed = {t["name"] for t in on.cluster.admin.list_topics()}
    assert not listed & set(illegal)
    assert (longest in listed) is allow


def test_a_name_colliding_in_dot_and_underscore_is_never_created(on: KafkaCluster) -> None:
    stem = uuid.uuid4().hex[:8]
    dotted, underscored = f"c.{stem}", f"c_{stem}"
    with _connection(on, 2) as conn:
        _until_served(conn, dotted)
        assert _answers(conn, [underscored]) == {underscored: UNKNOWN}
        _barrier(on, conn, 2)
        assert _answers(conn, [underscored]) == {underscored: UNKNOWN}
    assert not _exists(on, underscored)


def test_internal_topic_names_are_not_created_by_metadata(on: KafkaCluster) -> None:
    with _connection(on, 1) as conn:
        answered = {
            t.name: (int(t.error_code), t.is_internal) for t in _metadata(conn, ["__transaction_state"])
        }
        assert answered == {"__transaction_state": (UNKNOWN, True)}
        _barrier(on, conn, 1)
    assert not _exists(on, "__transaction_state")


# -- authorization -----------------------------------------------------------------------------------


def test_only_a_principal_allowed_to_create_gets_its_topic_created(on: KafkaCluster) -> None:
    suffix = uuid.uuid4().hex[:6]
    user = f"creator-{suffix}"
    _user(on, user, "pw")
    described, creatable, hidden = f"d-{suffix}-", f"dc-{suffix}-", f"c-{suffix}-"
    granted = [
        _allow(user, "TOPIC", described, "DESCRIBE", "PREFIXED"),
        _allow(user, "TOPIC", creatable, "DESCRIBE", "PREFIXED"),
        _allow(user, "TOPIC", creatable, "CREATE", "PREFIXED"),
        _allow(user, "TOPIC", hidden, "CREATE", "PREFIXED"),
    ]
    assert [r["errorCode"] for r in on.cluster.admin.create_acls(granted)] == [0] * len(granted)
    no_acl, describe_only, create_only, both = (
        f"none-{suffix}",
        f"{described}1",
        f"{hidden}1",
        f"{creatable}1",
    )
    with _connection(on, 1, user, "pw") as conn:
        wait_for(  # the broker follows the ACLs from its metadata log
            lambda: _answers(conn, [both], allow=False) == {both: UNKNOWN}, what="the ACLs on broker 1"
        )
        asked = [no_acl, describe_only, create_only, both, f"{described}a/b", f"{creatable}a/b"]
        assert _answers(conn, asked, allow=True) == {
            no_acl: DENIED,  # no DESCRIBE
            describe_only: DENIED,  # DESCRIBE, not CREATE: creation refused
            create_only: DENIED,  # CREATE, not DESCRIBE
            both: UNKNOWN,  # being created
            f"{described}a/b": DENIED,  # the CREATE check comes before the name's
            f"{creatable}a/b": INVALID_TOPIC,
        }
        # Without creation allowed, DESCRIBE alone sees a missing topic as missing.
        assert _answers(conn, [describe_only, f"{described}a/b"], allow=False) == {
            describe_only: UNKNOWN,
            f"{described}a/b": INVALID_TOPIC,
        }
        _until_served(conn, both)
    assert not {no_acl, describe_only, create_only} & {t["name"] for t in on.cluster.admin.list_topics()}

    # CREATE on the cluster is CREATE on every topic.
    on.cluster.admin.create_acls([_allow(user, "CLUSTER", "kafka-cluster", "CREATE")])
    with _connection(on, 2, user, "pw") as conn:
        _until_served(conn, f"{described}2")


def test_a_producer_without_create_gets_the_authorization_error_and_nothing_is_created(
    on: KafkaCluster,
) -> None:
    suffix = uuid.uuid4().hex[:6]
    user = f"writer-{suffix}"
    _user(on, user, "pw")
    prefix = f"w-{suffix}-"
    granted = [_allow(user, "TOPIC", prefix, "WRITE", "PREFIXED")]  # WRITE implies DESCRIBE
    assert [r["errorCode"] for r in on.cluster.admin.create_acls(granted)] == [0]
    on.cluster.wait_until_applied()
    topic = f"{prefix}new"
    producer = Producer(
        on.client_config(
            **{"sasl.username": user, "sasl.password": "pw", "acks": "all", "message.timeout.ms": 20000}
        )
    )
    errors: list[KafkaError | None] = []
    producer.produce(topic, value=b"x", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(40) == 0
    [error] = errors
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    with _connection(on, 1) as conn:
        _barrier(on, conn, 1)
    assert not _exists(on, topic)


# -- consumers ---------------------------------------------------------------------------------------


def _first_consumer_error(consumer: Consumer) -> KafkaError | None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is not None:
            return msg.error()
    return None


def test_a_librdkafka_consumer_creates_only_with_allow_auto_create_topics(on: KafkaCluster) -> None:
    """librdkafka's consumer asks with `allow_auto_topic_creation` only when
    `allow.auto.create.topics=true` (its default is false), and then only for `assign()`ed or
    listed topics: a subscription's metadata never allows it (the same on Kafka 4.3.1)."""
    subscribed, plain, allowing = _name("sub"), _name("assigned-plain"), _name("assigned-allow")
    consumer = Consumer(on.client_config(**{"group.id": _name("g")}))
    try:
        consumer.subscribe([subscribed])
        error = _first_consumer_error(consumer)  # as on Kafka: the subscribed topic is unknown
        assert error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, error
        consumer.unsubscribe()
        consumer.assign([TopicPartition(plain, 0, 0)])
        consumer.poll(1.0)
    finally:
        consumer.close()
    consumer = Consumer(on.client_config(**{"group.id": _name("g"), "allow.auto.create.topics": True}))
    try:
        consumer.assign([TopicPartition(allowing, 0, 0)])
        wait_for(
            lambda: consumer.poll(0.1) is None and _exists(on, allowing),
            timeout=30,
            what=f"{allowing} created for the assignment",
        )
    finally:
        consumer.close()
    with _connection(on, 1) as conn:
        _barrier(on, conn, 1)
    assert not _exists(on, subscribed)
    assert not _exists(on, plain)


# -- auto-creation off, or a replication factor the brokers cannot meet --------------------------------


def test_with_auto_creation_off_a_missing_topic_stays_unknown(off: KafkaCluster) -> None:
    topic = _name("off")
    with _connection(off, 1) as conn:
        for version in (3, 4, 12):  # v0-v3 carry no flag: the broker's key still decides
            assert _answers(conn, [topic, "a/b"], version=version) == {topic: UNKNOWN, "a/b": INVALID_TOPIC}
        _barrier(off, conn, 1)
    assert not _exists(off, topic)

    # librdkafka sees what it sees on Kafka: the topic does not exist.
    producer = Producer(
        off.client_config(
            **{
                "bootstrap.servers": _address(off, 1),
                "acks": "all",
                "topic.metadata.propagation.max.ms": 1000,
            }
        )
    )
    errors: list[KafkaError | None] = []
    producer.produce(topic, value=b"x", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(40) == 0
    [error] = errors
    assert error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, error
    assert not _exists(off, topic)


def test_a_replication_factor_above_the_brokers_is_never_capped(off: KafkaCluster) -> None:
    topic = _name("rf3")
    log = off.cluster.brokers[2].log_path
    with _connection(off, 2) as conn:
        assert _answers(conn, [topic]) == {topic: UNKNOWN}
        # The controller refused the creation (INVALID_REPLICATION_FACTOR 38, Kafka's code) ...
        wait_for(
            lambda: f"Could not auto-create topic {topic}: errorCode 38" in log.read_text(),
            timeout=30,
            what="the refused creation logged",
        )
        # ... and the topic stays unknown, as on Kafka.
        assert _answers(conn, [topic]) == {topic: UNKNOWN}
    assert not _exists(off, topic)


# -- the controller down, configs -----------------------------------------------------------------------


def test_with_the_controller_paused_metadata_answers_at_once_and_creates_after(on: KafkaCluster) -> None:
    existing, topic = _name("before"), _name("paused")
    controller = on.cluster.controller.process
    assert controller is not None
    with _connection(on, 1) as conn:
        _until_served(conn, existing)
        controller.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            answered = _metadata(conn, [existing, topic])
            took = time.monotonic() - started
            again = _answers(conn, [topic])  # the creation is pending: answered alike
        finally:
            controller.send_signal(signal.SIGCONT)
        assert took < 2.0, f"Metadata took {took:.1f} s with the controller paused"
        assert {t.name: int(t.error_code) for t in answered} == {existing: 0, topic: UNKNOWN}
        assert again == {topic: UNKNOWN}
        _until_served(conn, topic)


def test_describe_configs_shows_the_keys_read_only_as_kafka(on: KafkaCluster) -> None:
    admin = AdminClient(on.client_config())
    keys = ("auto.create.topics.enable", "num.partitions", "default.replication.factor")
    shown = {}
    for broker in ("1", "2"):
        resource = ConfigResource(ConfigResource.Type.BROKER, broker)
        entries = admin.describe_configs([resource])[resource].result(30)
        shown[broker] = {
            k: (entries[k].value, ConfigSource(entries[k].source), entries[k].is_read_only) for k in keys
        }
    static, default = ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG
    assert shown["1"] == {
        "auto.create.topics.enable": ("true", default, True),  # Kafka's default, not in server.properties
        "num.partitions": ("3", static, True),
        "default.replication.factor": ("2", static, True),
    }
    assert shown["2"]["auto.create.topics.enable"] == ("true", static, True)
    # Static, as in Kafka: a change is INVALID_REQUEST ("Cannot update these configs dynamically").
    change = ConfigResource(
        ConfigResource.Type.BROKER,
        "1",
        incremental_configs=[ConfigEntry("num.partitions", "6", incremental_operation=AlterConfigOpType.SET)],
    )
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([change])[change].result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically" in refused.value.args[0].str()
