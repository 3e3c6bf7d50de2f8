"""`jbodctl produce / consume / log-dirs / move-replica` run as real processes: Kafka clients on
the brokers' Kafka listeners (confluent-kafka for produce and consume, the protocol client of
`jbod_client.kafka_admin` for log dirs), every user mistake and every unreachable peer one line
and a non-zero exit.

Two kinds of cluster:
* a controller alone with registered brokers whose listeners are a loopback port that is bound
  but never listens (connections refused at once): the unreachable cases, cheap;
* a real cluster of two brokers with SASL_PLAINTEXT listeners (tests.kafka_api): records produced
  and read back, the invocations of before issue 23 (no KAFKA_BOOTSTRAP_SERVERS) and the Kafka
  ones (--bootstrap-server, --command-config), a SCRAM user who may produce but not move replicas.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from jbod_cli import data_cli
from jbod_local import kafka_clients
from tests.broker.conftest import wait_for
from tests.harness import ControllerProcess
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster

JBODCTL = str(Path(sys.executable).parent / "jbodctl")
DIR_1 = "ERERERERERERERERERERQQ"
DIR_2 = "IiIiIiIiIiIiIiIiIiIiIg"
SOME_DIR = "MzMzMzMzMzMzMzMzMzMzMw"


def run(
    controller_url: str,
    token_file: Path,
    *args: str,
    stdin: str = "",
    timeout: float = 60,
    kafka: str | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JBOD_", "KAFKA_"))}
    env |= {"JBOD_CONTROLLER_URL": controller_url, "JBOD_TOKEN_FILE": str(token_file), "COLUMNS": "200"}
    if kafka is not None:
        env["KAFKA_BOOTSTRAP_SERVERS"] = kafka
    return subprocess.run(
        [JBODCTL, *args], input=stdin, capture_output=True, text=True, env=env, timeout=timeout
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], needle: str) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("jbodctl: error:"), lines[0]
    assert needle in lines[0], lines[0]
    return lines[0]


# -- a controller with unreachable brokers --------------------------------------------------------


def register(controller: ControllerProcess, broker_id: int, dirs: list[str], port: int | None) -> None:
    """Register and unfence a broker whose HTTP API and Kafka listener are both at `port`; `port`
    None advertises no listener at all."""
    listeners = (
        []
        if port is None
        else [
            {"name": "http", "host": "127.0.0.1", "port": port},
            {"name": "SASL_PLAINTEXT", "host": "127.0.0.1", "port": port},
        ]
    )
    with controller.broker() as client:
        reply = client.post(
            "/v1/brokers/register",
            json={
                "brokerId": broker_id,
                "clusterId": controller.cluster_id,
                "incarnationId": f"AAAAAAAAAAAAAAAAAAAB{chr(ord('A') + broker_id)}w",
                "logDirs": dirs,
                "listeners": listeners,
            },
        ).json()
        assert reply["errorCode"] == 0, reply
        beat = client.post(
            "/v1/brokers/heartbeat",
            json={"brokerId": broker_id, "brokerEpoch": reply["brokerEpoch"], "currentMetadataOffset": 10**6},
        ).json()
        assert beat["isFenced"] is False, beat


@dataclass
class Unreachable:
    controller: ControllerProcess
    dead_port: int

    @property
    def dead_address(self) -> str:
        return f"127.0.0.1:{self.dead_port}"

    def run(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return run(self.controller.url, self.controller.data_dir / "admin.token", *args, stdin=stdin)


@contextlib.contextmanager
def _dead_port() -> Iterator[int]:
    """A loopback port bound here and never listened on: connecting is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


@pytest.fixture
def dead_port() -> Iterator[int]:
    with _dead_port() as port:
        yield port


@pytest.fixture(scope="module")
def unreachable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Unreachable]:
    """Broker 1 (unreachable listeners) leads both partitions of `orders`; broker 2 has no listener.
    One controller for the module: its tests only read, or are refused before anything changes."""
    with (
        _dead_port() as port,
        # The brokers heartbeat once: a session as long as the module keeps them unfenced.
        ControllerProcess(
            data_dir=tmp_path_factory.mktemp("unreachable") / "controller", session_timeout_ms=3_600_000
        ) as controller,
    ):
        register(controller, 1, [DIR_1], port)
        register(controller, 2, [DIR_2], None)
        with controller.admin() as admin:
            reply = admin.post("/v1/topics", json={"name": "orders", "replicaAssignment": [[1], [1]]}).json()
            assert reply["errorCode"] == 0, reply
        yield Unreachable(controller, port)


def test_log_dirs_with_no_brokers_is_an_empty_result(controller: ControllerProcess) -> None:
    token = controller.data_dir / "admin.token"
    as_json = run(controller.url, token, "log-dirs", "--output", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == {}
    as_table = run(controller.url, token, "log-dirs")
    assert as_table.returncode == 0, as_table.stderr
    assert as_table.stdout.strip() == "No brokers registered"
    assert as_table.stderr == ""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("produce", "orders", "--acks", "2", "--value", "x"), "'2' is not one of"),
        (("produce", "orders", "--base64", "--value", "***"), "--value is not valid base64"),
        (("produce", "orders", "--base64", "--key", "@@", "--value", "eA=="), "--key is not valid base64"),
        (("produce", "orders"), "nothing to produce"),
        (("produce",), "Missing argument 'TOPIC'"),
        (("consume", "orders", "--offset", "3", "--latest"), "at most one of"),
        (("consume", "orders", "--max-messages", "0"), "--max-messages"),
        (("consume", "orders", "--timeout", "0"), "--timeout"),
        (("consume", "orders", "--partition", "-1"), "--partition"),
        (("move-replica", "orders", "0", "--broker", "99", "--to", SOME_DIR), "errorCode 102"),
        (
            ("move-replica", "orders", "0", "--broker", "1", "--to", "not/a/dir"),
            "--to 'not/a/dir': not a directory id",
        ),
        (("move-replica", "orders", "0", "--to", SOME_DIR), "Missing option '--broker'"),
        (("move-replica", "orders", "zero", "--broker", "1", "--to", SOME_DIR), "PARTITION"),
        (
            ("move-replica", "orders", "0", "--broker", "1", "--to", SOME_DIR, "--max-bytes-per-second", "0"),
            "0",
        ),
        (("log-dirs", "--broker", "99"), "broker 99 is not registered"),
        (("log-dirs", "--broker", "x"), "is not a valid integer"),
        (("log-dirs", "--broker", "2"), "broker 2 advertises no SASL_PLAINTEXT listener"),
        # Where Kafka clients connect, and as whom.
        (("--bootstrap-server", "http://127.0.0.1:1", "log-dirs"), "is a URL: Kafka listeners are host:port"),
        (("produce", "orders", "-v", "x", "--bootstrap-server", "nohost"), "'nohost' is not host:port"),
        (
            ("--bootstrap", "127.0.0.1:9092", "log-dirs"),
            "Kafka listeners, host:port, go to --bootstrap-server",
        ),
        (
            ("consume", "orders", "--command-config", "/nonexistent/admin.properties"),
            "cannot read --command-config",
        ),
    ],
)
def test_user_mistakes_are_one_line(unreachable: Unreachable, args: tuple[str, ...], needle: str) -> None:
    assert_one_line_error(unreachable.run(*args), needle)


def test_client_properties_that_cannot_work_are_one_line(unreachable: Unreachable, tmp_path: Path) -> None:
    tls = tmp_path / "tls.properties"
    tls.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nssl.truststore.type=JKS\n"
        "ssl.truststore.location=/etc/kafka/truststore.jks\n"
    )
    line = assert_one_line_error(
        unreachable.run("produce", "orders", "-v", "x", "--command-config", str(tls)),
        "ssl.truststore.type JKS is not supported: only PEM is",
    )
    assert str(tls) in line


def test_a_record_too_large_is_one_line_and_nothing_is_sent(unreachable: Unreachable) -> None:
    """Checked before connecting: no broker answers here, and none needs to."""
    too_large = "small\n" + "x" * (data_cli.RECORD_MAX_BYTES + 1) + "\n"
    result = unreachable.run("produce", "orders", "-k", "", stdin=too_large)
    assert_one_line_error(
        result, f"record 2 holds {data_cli.RECORD_MAX_BYTES + 1:,} bytes (key and value), more than the"
    )
    assert "nothing was produced" in result.stderr


def test_unreachable_broker_is_one_line(unreachable: Unreachable) -> None:
    address = unreachable.dead_address
    listed = unreachable.run("log-dirs", "--broker", "1")
    assert_one_line_error(listed, f"cannot reach the Kafka listener at {address}")
    moved = unreachable.run("move-replica", "orders", "0", "--broker", "1", "--to", SOME_DIR)
    assert_one_line_error(moved, f"cannot reach the broker at http://{address}")
    # Every registered broker by default: each failure is named, still on one line.
    everyone = unreachable.run("log-dirs", "--output", "json")
    assert_one_line_error(everyone, f"broker 1: cannot reach the Kafka listener at {address}")
    assert "broker 2: broker 2 advertises no SASL_PLAINTEXT listener" in everyone.stderr
    assert json.loads(everyone.stdout) == {}


def test_produce_and_consume_with_every_listener_refusing_fail_at_once(unreachable: Unreachable) -> None:
    """The Kafka listeners the brokers registered are where an invocation without
    --bootstrap-server connects: here each refuses the connection, which ends the wait for them
    (the default --timeout of produce is 30 s)."""
    address = unreachable.dead_address
    produced = unreachable.run("produce", "orders", stdin="a\nb\nc\n")
    line = assert_one_line_error(
        produced, f"no Kafka listener of {address} answered: it refused the connection"
    )
    assert "Connection refused" in line
    consumed = unreachable.run("consume", "orders", "--partition", "0")
    assert_one_line_error(consumed, f"no Kafka listener of {address} answered: it refused the connection")
    assert consumed.stdout == ""


@pytest.fixture
def silent_address() -> Iterator[str]:
    """A loopback listener that accepts connections (the kernel's backlog) and never answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_produce_and_consume_with_a_listener_that_never_answers_fail_after_the_timeout(
    unreachable: Unreachable, silent_address: str
) -> None:
    for args in (("produce", "orders", "-v", "x"), ("consume", "orders")):
        result = unreachable.run(*args, "--timeout", "1", "--bootstrap-server", silent_address)
        assert_one_line_error(result, f"no Kafka listener of {silent_address} answered within 1 s")
        assert (
            "no answer to Metadata for orders (as admin over SASL_PLAINTEXT/SCRAM-SHA-512)" in result.stderr
        )


@pytest.mark.parametrize(
    "args",
    [
        ("produce", "orders", "--value", "x"),
        ("consume", "orders"),
        ("log-dirs",),
        ("move-replica", "orders", "0", "--broker", "1", "--to", SOME_DIR),
    ],
)
def test_unreachable_controller_is_one_line(tmp_path: Path, dead_port: int, args: tuple[str, ...]) -> None:
    token = tmp_path / "admin.token"
    token.write_text("anything\n")
    result = run(f"http://127.0.0.1:{dead_port}", token, *args)
    assert_one_line_error(result, f"cannot reach the controller at http://127.0.0.1:{dead_port}")


def test_local_group_keeps_its_walkthrough(tmp_path: Path) -> None:
    result = subprocess.run([JBODCTL, "local", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "walkthrough" in result.stdout


# -- a real cluster with Kafka listeners ----------------------------------------------------------


@dataclass
class Kafka:
    cluster: KafkaCluster
    tmp: Path

    @property
    def token_file(self) -> Path:
        return self.cluster.cluster.controller.admin_token_file

    def run(
        self, *args: str, stdin: str = "", kafka: bool = False, token_file: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run(
            self.cluster.cluster.controller.url,
            token_file or self.token_file,
            *args,
            stdin=stdin,
            kafka=self.cluster.bootstrap if kafka else None,
        )

    def ok(self, *args: str, stdin: str = "", kafka: bool = False) -> subprocess.CompletedProcess[str]:
        result = self.run(*args, stdin=stdin, kafka=kafka)
        assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
        return result


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kafka]:
    """Two brokers with SASL_PLAINTEXT listeners; `orders` has 2 partitions on both. Topic
    auto-creation is off: `jbodctl produce` is a librdkafka producer, which asks the brokers to
    create a missing topic (as kcat does on Kafka), and the unknown-topic errors are tested here."""
    tmp = tmp_path_factory.mktemp("cli-data")
    with contextlib.ExitStack() as stack:
        cluster = start_kafka_cluster(stack, tmp, brokers=2, auto_create_topics_enable="false")
        cluster.cluster.create_placed_topic("orders", partitions=2, rf=2)
        yield Kafka(cluster, tmp)


@pytest.mark.integration
def test_produce_and_consume_through_kafka_bootstrap_servers(kafka: Kafka) -> None:
    """KAFKA_BOOTSTRAP_SERVERS named: the clients bootstrap there (the round trip below finds the
    registered listeners instead)."""
    kafka.cluster.cluster.create_placed_topic("rt-servers", partitions=2, rf=2)
    produced = kafka.ok("produce", "rt-servers", stdin="a\nb\n", kafka=True)
    assert produced.stdout.startswith("Produced 2 records to rt-servers: partition "), produced.stdout
    consumed = kafka.ok("consume", "rt-servers", "--max-messages", "2", kafka=True)
    assert sorted(consumed.stdout.split()) == ["a", "b"]


@pytest.mark.integration
def test_produce_and_consume_round_trip(kafka: Kafka) -> None:
    """Without KAFKA_BOOTSTRAP_SERVERS: the Kafka listeners the brokers registered."""
    topic = "rt"
    kafka.cluster.cluster.create_placed_topic(topic, partitions=2, rf=2)
    produced = kafka.ok("produce", topic, stdin="a\nb\r\nc\n")
    assert produced.stdout.startswith("Produced 3 records to " + topic + ": partition "), produced.stdout
    keyed = json.loads(kafka.ok("-o", "json", "produce", topic, "-k", "k", "-v", "d", "-v", "e").stdout)
    assert keyed["count"] == 2 and len({r["partition"] for r in keyed["records"]}) == 1
    one = json.loads(kafka.ok("produce", topic, "-p", "1", "-v", "f", "--acks", "1", "-o", "json").stdout)
    assert one["partitions"] == [
        {
            "partition": 1,
            "count": 1,
            "firstOffset": one["records"][0]["offset"],
            "lastOffset": one["records"][0]["offset"],
        }
    ]
    no_wait = kafka.ok("produce", topic, "-p", "0", "-v", "g", "--acks", "0")
    assert "offsets unknown with acks=0" in no_wait.stdout

    consumed = kafka.ok("consume", topic, "--timeout", "2")
    assert sorted(consumed.stdout.split()) == ["a", "b", "c", "d", "e", "f", "g"]
    assert consumed.stderr == f"Consumed 7 records from {topic}\n"
    lines = [
        json.loads(line)
        for line in kafka.ok("-o", "json", "consume", topic, "-p", "1", "--timeout", "2").stdout.splitlines()
    ]
    assert {"partition": 1, "offset": one["records"][0]["offset"], "key": None, "value": "f"} in lines
    assert {(r["key"], r["value"]) for r in lines if r["key"]} <= {("k", "d"), ("k", "e")}
    first = kafka.ok("consume", topic, "-p", "0", "--print-offsets", "-n", "1").stdout
    assert first.startswith("0:0\t")
    later = kafka.ok("consume", topic, "-p", "1", "--offset", "1000", "--timeout", "2")
    assert later.stdout == "" and "Consumed 0 records" in later.stderr
    latest = kafka.ok("consume", topic, "--latest", "--timeout", "2")
    assert latest.stdout == ""
    kafka.ok("produce", topic, "-p", "1", "--base64", "-k", "a2V5", "-v", "aGk=")
    encoded = [
        json.loads(line)
        for line in kafka.ok(
            "consume", topic, "-p", "1", "--base64", "-o", "json", "--timeout", "2"
        ).stdout.splitlines()
    ]
    assert {"key": None, "value": "Zg=="}.items() <= next(r for r in encoded if r["value"] == "Zg==").items()
    assert any(r["key"] == "a2V5" and r["value"] == "aGk=" for r in encoded)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("produce", "missing", "--value", "x"), "unknown topic missing"),
        (("consume", "missing"), "unknown topic missing"),
        (("consume", "orders", "--partition", "5"), "topic orders has no partition 5 (it has 2)"),
        (("produce", "orders", "--partition", "9", "--value", "x"), "topic orders has no partition 9"),
    ],
)
def test_unknown_topics_and_partitions_are_one_line(kafka: Kafka, args: tuple[str, ...], needle: str) -> None:
    assert_one_line_error(kafka.run(*args, kafka=True), needle)


@pytest.mark.integration
def test_a_wrong_token_is_one_line(kafka: Kafka, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.token"
    wrong.write_text("not-the-token\n")
    for args in (("produce", "orders", "--value", "x"), ("consume", "orders")):
        # Straight to the Kafka listeners: the login is refused.
        refused = kafka.run(*args, kafka=True, token_file=wrong)
        line = assert_one_line_error(refused, "refused admin over SASL_PLAINTEXT/SCRAM-SHA-512")
        assert "Authentication failed" in line
        # Finding the listeners first: the controller refuses the token.
        assert_one_line_error(kafka.run(*args, token_file=wrong), "errorCode 31")
    assert_one_line_error(kafka.run("log-dirs", token_file=wrong), "errorCode 31")
    missing = kafka.run("log-dirs", token_file=tmp_path / "absent.token")
    assert_one_line_error(missing, "cannot read token file")


@pytest.mark.integration
def test_a_scram_user_from_command_config_produces_but_may_not_move_replicas(kafka: Kafka) -> None:
    admin = AdminClient(kafka.cluster.client_config())
    admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"alice-pw"
            )
        ]
    )["alice"].result(30)
    # The authorizer is always on: alice writes and reads `orders` and describes the cluster's
    # log dirs once ACLs say so (not ALTER on the cluster: no replica moves).
    granted = [
        AclBinding(
            kind, name, ResourcePatternType.LITERAL, "User:alice", "*", operation, AclPermissionType.ALLOW
        )
        for kind, name, operation in (
            (ResourceType.TOPIC, "orders", AclOperation.WRITE),
            (ResourceType.TOPIC, "orders", AclOperation.READ),
            (ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
        )
    ]
    for future in admin.create_acls(granted).values():
        assert future.result(30) is None
    properties = kafka.tmp / "alice.properties"
    properties.write_text(kafka_clients.client_properties("alice-pw", user="alice"))
    as_alice = ("--command-config", str(properties), "--bootstrap-server", kafka.cluster.bootstrap)
    produced = kafka.ok("produce", "orders", "-p", "0", "-v", "from-alice", *as_alice)
    assert "Produced 1 records to orders" in produced.stdout
    read = kafka.ok("consume", "orders", "-p", "0", *as_alice, "--timeout", "2")
    assert "from-alice" in read.stdout.split()
    described = json.loads(kafka.ok("log-dirs", "-b", "1", "-o", "json", *as_alice).stdout)
    dirs = [d["directoryId"] for d in described["1"]]
    current = next(
        d["directoryId"] for d in described["1"] if any(r["partition"] == 0 for r in d["replicas"])
    )
    other = next(d for d in dirs if d != current)
    refused = kafka.run("move-replica", "orders", "0", "-b", "1", "--to", other, *as_alice)
    assert_one_line_error(
        refused,
        "CLUSTER_AUTHORIZATION_FAILED (errorCode 31): alice may not move replicas (it needs ALTER on the cluster)",
    )
    wrong = kafka.tmp / "wrong.properties"
    wrong.write_text(kafka_clients.client_properties("not-her-password", user="alice"))
    line = assert_one_line_error(
        kafka.run("log-dirs", "--command-config", str(wrong), "--bootstrap-server", kafka.cluster.bootstrap),
        "refused alice over SASL_PLAINTEXT/SCRAM-SHA-512",
    )
    assert "SASL_AUTHENTICATION_FAILED (errorCode 58)" in line


@pytest.mark.integration
def test_log_dirs_show_directory_ids_from_the_broker_and_replicas_from_kafka(kafka: Kafka) -> None:
    described = json.loads(kafka.ok("log-dirs", "-o", "json", kafka=True).stdout)
    assert sorted(described) == ["1", "2"]
    brokers = {b["brokerId"]: b for b in kafka.cluster.cluster.admin.brokers()}
    for broker_id, dirs in described.items():
        assert sorted(d["directoryId"] for d in dirs) == sorted(brokers[int(broker_id)]["logDirs"])
        assert all(d["state"] == "online" and d["totalBytes"] > 0 for d in dirs)
    topic = kafka.cluster.cluster.admin.describe_topic("orders")
    for p in topic["partitions"]:
        for broker_id, directory in zip(p["replicas"], p["directories"], strict=True):
            holding = next(d for d in described[str(broker_id)] if d["directoryId"] == directory)
            assert ("orders", p["partitionIndex"]) in {
                (r["topic"], r["partition"]) for r in holding["replicas"]
            }
    table = kafka.ok("log-dirs", "--broker", "2").stdout
    assert table.startswith("Broker 2 log dirs in ") and described["2"][0]["directoryId"][:8] in table


@pytest.mark.integration
def test_move_replica_over_kafka_and_with_a_throttle(kafka: Kafka) -> None:
    kafka.cluster.cluster.create_placed_topic("moving", partitions=1, rf=2)
    admin = kafka.cluster.cluster.admin

    def current() -> str:
        partition = admin.describe_topic("moving")["partitions"][0]
        return str(partition["directories"][partition["replicas"].index(1)])

    start = current()
    dirs = [d["directoryId"] for d in json.loads(kafka.ok("log-dirs", "-b", "1", "-o", "json").stdout)["1"]]
    other = next(d for d in dirs if d != start)
    moved = json.loads(
        kafka.ok("move-replica", "moving", "0", "-b", "1", "--to", other[:8], "-o", "json").stdout
    )
    assert moved["outcome"] == "started" and moved["directoryId"] == other
    assert moved["path"].endswith("/d0") or moved["path"].endswith("/d1")
    wait_for(lambda: current() == other, what="the move over Kafka confirmed")
    back = kafka.ok(
        "move-replica", "moving", "0", "-b", "1", "--to", start, "--max-bytes-per-second", "1000000"
    )
    assert back.stdout.startswith(f"Moving moving-0 on broker 1 to dir {start}"), back.stdout
    wait_for(lambda: current() == start, what="the throttled move confirmed")
    again = kafka.ok("move-replica", "moving", "0", "-b", "1", "--to", start)
    assert again.stdout.strip() == f"Nothing to move: moving-0 on broker 1 is already in dir {start}"
    not_here = kafka.run("move-replica", "orders", "0", "-b", "1", "--to", "zzzzzzzz")
    assert_one_line_error(not_here, "--to zzzzzzzz: no log dir of that broker has this id")


@pytest.mark.integration
def test_a_partition_without_its_leader_fails_produce_and_consume_on_one_line(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        cluster = start_kafka_cluster(stack, tmp_path, brokers=2)
        reply = cluster.cluster.admin.create_topic("lonely", replica_assignment=[[2]])
        assert reply["errorCode"] == 0, reply
        wait_for(lambda: cluster.cluster.placed("lonely"), what="lonely placed")
        kafka = Kafka(cluster, tmp_path)
        kafka.ok("produce", "lonely", "-v", "before", kafka=True)
        cluster.cluster.brokers[2].stop()
        bootstrap = cluster.cluster.brokers[1].kafka["SASL_PLAINTEXT"]
        produced = run(
            cluster.cluster.controller.url,
            kafka.token_file,
            "produce",
            "lonely",
            "-v",
            "x",
            "--timeout",
            "2",
            kafka=bootstrap,
        )
        line = assert_one_line_error(produced, "1 of 1 records not produced to lonely: _MSG_TIMED_OUT")
        assert "errorCode -192" in line
        consumed = run(
            cluster.cluster.controller.url,
            kafka.token_file,
            "consume",
            "lonely",
            "--timeout",
            "2",
            kafka=bootstrap,
        )
        assert_one_line_error(consumed, "consumed 0 records, but could not fetch lonely-0: ")
