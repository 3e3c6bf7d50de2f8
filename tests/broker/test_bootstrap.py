"""Clients bootstrap from brokers (issue 15, first part): every broker serves the topic and broker
reads from its own replicated image (HTTP for jbodctl's admin side, Metadata on its Kafka
listener), so Kafka producers and consumers (confluent-kafka) keep working while the controller
does not answer at all (SIGSTOP). Real processes, plain directories (no root)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode as KafkaError

from jbod_client.controller import ControllerUnreachableError, read_token
from jbod_client.metadata import ClusterMetadata
from jbod_kafka import protocol
from tests.broker.conftest import Cluster, start_cluster, wait_for
from tests.kafka_api.conftest import start_kafka_cluster
from tests.kafka_api.raw_client import RawConnection

pytestmark = pytest.mark.integration


def get(url: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(url, headers=headers, timeout=10, trust_env=False)


def with_three_brokers(cluster: Cluster) -> Cluster:
    for node in (1, 2, 3):
        cluster.add_broker(node, dirs=2, loop=False)
    wait_for(lambda: cluster.all_unfenced(3), timeout=60, what="three brokers unfenced")
    cluster.create_placed_topic("t", partitions=6, rf=3)
    return cluster


@pytest.fixture
def three(cluster: Cluster) -> Iterator[Cluster]:
    yield with_three_brokers(cluster)


@pytest.fixture
def three_on_a_quorum(tmp_path: Path) -> Iterator[Cluster]:
    """Three brokers, three controllers on a 3-member etcd (§3.8)."""
    with contextlib.ExitStack() as stack:
        yield with_three_brokers(start_cluster(stack, tmp_path, quorum=True))


def test_broker_reads_are_the_controllers_and_refuse_bad_input(three: Cluster) -> None:
    token = three.cluster_token
    admin = three.admin
    reference = {
        "/v1/topics/t": lambda: admin.describe_topic("t"),
        "/v1/topics": admin.list_topics,
        "/v1/brokers": admin.brokers,
        "/v1/brokers/2": lambda: admin.broker(2),
    }
    for broker in three.brokers.values():
        for path, controllers in reference.items():
            wait_for(
                lambda b=broker, p=path, c=controllers: get(b.url + p, token).json() == c(),
                what=f"broker {broker.node_id} serving {path} as the controller does",
            )
    one = three.brokers[1].url
    unknown = get(f"{one}/v1/topics/nope", token)
    assert unknown.status_code == 404 and unknown.json()["errorCode"] == 3
    missing = get(f"{one}/v1/brokers/99", token)
    assert missing.status_code == 404 and missing.json()["errorCode"] == 102
    for bad in ("x", "-1", "2147483648"):
        refused = get(f"{one}/v1/brokers/{bad}", token)
        assert refused.status_code == 400 and refused.json()["errorCode"] == 42, refused.text
    assert get(f"{one}/v1/topics", None).status_code == 401
    assert get(f"{one}/v1/topics", "wrong").status_code == 401


def stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


@contextlib.contextmanager
def controller_stopped(cluster: Cluster) -> Iterator[int]:
    """Every controller paused (SIGSTOP, waited for: delivery is asynchronous) inside the block;
    yields the pid of the first."""
    pids = [c.process.pid for c in cluster.controllers if c.process is not None]
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        for pid in pids:
            wait_for(lambda p=pid: stopped(p), what=f"controller pid {pid} stopped")
        yield pids[0]
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


#: A producer that needs no producer id (an idempotent one takes it from the controller, by way of
#: a broker's block of them: these brokers have none yet), acks=all.
PRODUCER = {"acks": "all", "enable.idempotence": False, "message.timeout.ms": 30_000, "linger.ms": 5}
PARTITIONS = 6


class Traffic:
    """A confluent-kafka producer and consumer of topic `t` (every partition assigned from its
    beginning, no group: nothing asks a group coordinator), on the brokers' Kafka listeners."""

    def __init__(self, cluster: Cluster) -> None:
        self.producer = Producer(cluster.kafka_config(**PRODUCER))
        self.consumer = Consumer(
            cluster.kafka_config(
                **{"group.id": "bootstrap", "enable.auto.commit": False, "fetch.wait.max.ms": 100}
            )
        )
        self.consumer.assign([TopicPartition("t", p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        self.acked: list[tuple[int, int]] = []  # (partition, offset) of every acknowledged record
        self.errors: list[str] = []
        self.consumed: list[bytes] = []

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.append((msg.partition(), msg.offset()))

    def send(self, values: list[bytes]) -> None:
        """Produce `values` (keyless) and wait until every one is acknowledged."""
        for value in values:
            self.producer.produce("t", value, on_delivery=self._delivered)
        assert self.producer.flush(60) == 0, "records still unacknowledged after 60 s"
        assert not self.errors, self.errors[:3]

    def poll(self, timeout: float) -> None:
        for message in self.consumer.consume(1000, timeout):
            assert message.error() is None, message.error()
            self.consumed.append(message.value())

    def drain(self, count: int, *, timeout: float = 60.0) -> None:
        """Consume until `count` records were read in all (or `timeout`)."""
        deadline = time.monotonic() + timeout
        while len(self.consumed) < count and time.monotonic() < deadline:
            self.poll(0.5)

    def close(self) -> None:
        self.consumer.close()


def test_produce_and_consume_through_brokers_while_the_controller_is_stopped(three: Cluster) -> None:
    token = three.cluster_token
    traffic = Traffic(three)
    try:
        with controller_stopped(three) as pid:
            traffic.send([f"r{i}".encode() for i in range(300)])
            traffic.drain(300)
            # Every record acknowledged (acks=all) at an offset of its own.
            assert len(set(traffic.acked)) == 300
            assert sorted(traffic.consumed) == sorted(f"r{i}".encode() for i in range(300))
            assert stopped(pid)  # all of it while the controller answered nothing

            async def controller_only() -> None:
                async with ClusterMetadata(three.controller.url, token=token, timeout=1.0) as metadata:
                    await metadata.describe_topic("t")

            with pytest.raises(ControllerUnreachableError, match="did not answer"):
                asyncio.run(controller_only())  # without bootstrap brokers: the controller is the source
    finally:
        traffic.close()


def test_metadata_falls_through_to_the_next_source_and_names_them_all_when_none_answers(
    three: Cluster, unused_url: str
) -> None:
    token = three.cluster_token

    async def run() -> tuple[list[int], str]:
        async with ClusterMetadata(
            three.controller.url, token=token, bootstrap=[unused_url, three.brokers[2].url]
        ) as metadata:
            indices = [p["partitionIndex"] for p in (await metadata.describe_topic("t"))["partitions"]]
        async with ClusterMetadata(None, token=token, bootstrap=[unused_url, unused_url + "/"]) as dead:
            try:
                await dead.describe_topic("t")
            except ControllerUnreachableError as exc:
                return indices, str(exc)
        raise AssertionError("no source answered, yet no error")

    indices, message = asyncio.run(run())
    assert sorted(indices) == list(range(6))
    assert message.startswith("no metadata source answered GET /v1/topics/t: cannot reach the broker at ")
    assert message.count("cannot reach the broker at") == 2


@pytest.fixture
def unused_url() -> Iterator[str]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


JBODCTL = str(Path(sys.executable).parent / "jbodctl")


def jbodctl(*args: str, token_file: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JBOD_", "KAFKA_"))}
    env["JBOD_TOKEN_FILE"] = str(token_file)
    return subprocess.run([JBODCTL, *args], input=stdin, capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def three_kafka(tmp_path: Path) -> Iterator[Cluster]:
    """Three brokers with SASL_PLAINTEXT listeners too (jbodctl's produce and consume are Kafka
    clients), `t` of 6 partitions on all three."""
    with contextlib.ExitStack() as stack:
        cluster = start_kafka_cluster(stack, tmp_path, brokers=3).cluster
        cluster.create_placed_topic("t", partitions=6, rf=3)
        yield cluster


def test_jbodctl_produces_and_consumes_with_bootstrap_while_the_controller_is_stopped(
    three_kafka: Cluster,
) -> None:
    """The invocation of before jbodctl's Kafka clients: `--bootstrap` broker URLs, no Kafka
    listener named. The brokers' registrations (served by the brokers themselves) name their Kafka
    listeners, and the records go through those.

    An idempotent producer (the default, acks=all) needs a producer id, which brokers take from
    the controller in blocks, as Kafka's do: these brokers have none yet, so that fails, on one
    line that says why and what produces without one (--acks 1)."""
    three = three_kafka
    token_file = three.controller.admin_token_file
    common = [
        "--controller",
        three.controller.url,
        "--bootstrap",
        ",".join(b.url for b in three.brokers.values()),
    ]
    values = "\n".join(map(str, range(50))) + "\n"
    with controller_stopped(three) as pid:
        idempotent = jbodctl(*common, "produce", "t", "--timeout", "2", token_file=token_file, stdin=values)
        assert idempotent.returncode == 1, idempotent.stderr
        assert idempotent.stderr.count("\n") == 1, idempotent.stderr
        assert "50 of 50 records not produced to t" in idempotent.stderr
        assert "the idempotent producer got no producer id in time" in idempotent.stderr
        assert "(--acks 1 produces without one)" in idempotent.stderr
        produced = jbodctl(*common, "produce", "t", "--acks", "1", token_file=token_file, stdin=values)
        assert produced.returncode == 0, produced.stderr

        # acks=1 answers once the leader has the records; consumers read up to the high watermark,
        # which moves once the followers have them too. So read until all 50 are there.
        def consumed_all() -> list[str] | None:
            consumed = jbodctl(*common, "consume", "t", "--max-messages", "50", token_file=token_file)
            assert consumed.returncode == 0, consumed.stderr
            values = sorted(consumed.stdout.split())
            return values if len(values) == 50 else None

        read = wait_for(consumed_all, timeout=120, what="the 50 records readable (high watermark)")
        assert read == sorted(map(str, range(50)))
        assert stopped(pid)
    # With the controller back, the default (idempotent) producer works again.
    again = jbodctl(*common, "produce", "t", "-v", "after", token_file=token_file)
    assert again.returncode == 0, again.stderr


#: How soon a broker answers a request whose work waits for the stopped controller. A broker that
#: held the connection instead would answer after its wait for the controller
#: (`broker.session.timeout.ms`, 9 s): Kafka answers at once with a retriable error and asks the
#: controller in the background.
ANSWERED_WITHIN_S = 5.0


def test_no_kafka_request_holds_its_connection_while_the_controller_is_stopped(
    three_kafka: Cluster,
) -> None:
    """What needs the controller (a group's coordinator when `__consumer_offsets` does not exist
    yet, a producer id when the broker has no block of them) is answered at once with Kafka's
    retriable error, COORDINATOR_NOT_AVAILABLE and COORDINATOR_LOAD_IN_PROGRESS, and the broker
    asks the controller in the background. A request pipelined behind one on the same connection
    (librdkafka sends its Metadata and Fetch requests on the connection its FindCoordinator went
    on) is answered as well. Once the controller is back, the group gets its coordinator and the
    producer its id."""
    broker = three_kafka.brokers[1]
    password = read_token(three_kafka.controller.admin_token_file)
    find = protocol.build(protocol.request_type(10, 3), key="g", key_type=0)
    metadata = protocol.build(
        protocol.request_type(3, 12),
        topics=[{"name": "t", "topic_id": None}],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    init = protocol.build(
        protocol.request_type(22, 4),
        transactional_id=None,
        transaction_timeout=60_000,
        producer_id=-1,
        producer_epoch=-1,
    )
    asked = [(10, 3, find), (3, 12, metadata), (22, 4, init), (10, 3, find), (22, 4, init), (3, 12, metadata)]
    answers: list[Any] = []
    with controller_stopped(three_kafka) as pid:
        with RawConnection(broker.kafka["SASL_PLAINTEXT"], timeout=ANSWERED_WITHIN_S) as conn:
            assert int(conn.authenticate("admin", password).error_code) == 0
            started = time.monotonic()
            sent = [conn.send(key, version, body) for key, version, body in asked]
            for correlation_id, (key, version, body) in zip(sent, asked, strict=True):
                try:
                    answer = conn.receive(correlation_id, key, version, body)
                    assert answer is not None, (
                        f"the broker closed the connection on {protocol.APIS[key].name}"
                    )
                    answers.append(answer)
                except TimeoutError:
                    raise AssertionError(
                        f"request {len(answers) + 1} of {len(asked)} ({protocol.APIS[key].name}) was not "
                        f"answered within {ANSWERED_WITHIN_S:g} s; answered before it: {answers}"
                    ) from None
            elapsed = time.monotonic() - started
        assert stopped(pid)
    assert elapsed < ANSWERED_WITHIN_S, elapsed
    found, described, initialised, found_again, initialised_again, described_again = answers
    for answer in (found, found_again):
        assert answer.error_code == KafkaError.coordinator_not_available and answer.node_id == -1, answer
    for answer in (initialised, initialised_again):
        assert answer.error_code == KafkaError.coordinator_load_in_progress and answer.producer_id == -1, (
            answer
        )
    for answer in (described, described_again):
        [topic] = answer.topics
        assert topic.error_code == KafkaError.none and len(topic.partitions) == 6, answer

    def coordinator_and_producer_id() -> bool:
        with RawConnection(broker.kafka["SASL_PLAINTEXT"]) as conn:
            assert int(conn.authenticate("admin", password).error_code) == 0
            coordinator = conn.request(10, 3, find)
            producer = conn.request(22, 4, init)
        return (
            coordinator.error_code == KafkaError.none
            and coordinator.node_id in three_kafka.brokers
            and producer.error_code == KafkaError.none
            and producer.producer_id >= 0
        )

    wait_for(
        coordinator_and_producer_id, timeout=60, what="a coordinator and a producer id, the controller back"
    )


def test_jbodctl_refuses_a_bootstrap_that_is_not_a_url(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t\n")
    result = jbodctl("--bootstrap", "127.0.0.1:9092", "produce", "t", "--value", "x", token_file=token)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--bootstrap" in lines[0] and "not an http:// URL" in lines[0], result.stderr


def sixty_seconds_stopped(cluster: Cluster) -> None:
    """Produce (acks=all) 20 records at a time and consume through the brokers for 60 s with every
    controller stopped, then drain."""
    traffic = Traffic(cluster)
    sent: list[bytes] = []
    try:
        with controller_stopped(cluster):
            start = time.monotonic()
            batch = 0
            while time.monotonic() - start < 60.0:
                values = [f"s{batch}-{j}".encode() for j in range(20)]
                traffic.send(values)
                sent.extend(values)
                traffic.poll(0.5)
                batch += 1
            traffic.drain(len(sent))
            for controller in cluster.controllers:  # the whole minute and the drain without a controller
                assert controller.process is not None and stopped(controller.process.pid)
    finally:
        traffic.close()
    assert len(sent) >= 200, len(sent)  # traffic flowed the whole time
    assert sorted(traffic.consumed) == sorted(sent)  # every acknowledged record, once


@pytest.mark.slow
def test_sixty_seconds_without_a_controller_stop_no_produce_or_consume(three: Cluster) -> None:
    """Issue 15: with the controller stopped for 60 s, clients bootstrapped from brokers work."""
    sixty_seconds_stopped(three)


@pytest.mark.slow
def test_sixty_seconds_with_every_controller_of_a_quorum_stopped(three_on_a_quorum: Cluster) -> None:
    """Issue 15's "Done when": every controller of a quorum stopped for 60 s; then they go on."""
    sixty_seconds_stopped(three_on_a_quorum)
    # Resumed, the quorum agrees on an active controller again and takes writes.
    reply = three_on_a_quorum.admin.create_topic("after", partitions=1, replication_factor=3)
    assert reply["errorCode"] == 0, reply
