"""Client quotas through Kafka's own `kafka-configs.sh` on our brokers beside Apache Kafka 4.3.1's
(issue 34): users, client ids, user + client id, the default user, `--delete-config`, a refusal
of the controller (a fractional byte rate): the same output and exit status on both (eight tool
runs a side, each a JVM; the tool's own refusals, such as an unknown key, never reach a broker);
and an ip entity's `connection_creation_rate` (KIP-612) holding the same connections on both.

The order of an entity's keys in a describe line is not compared (Kafka's is its hash map's).
The only other difference allowed: Kafka's test node has a SCRAM credential for its admin user, which
`--describe --entity-type users` lists; our `admin` logs in with its token. Those lines are left
out, and so are the bootstrap address and properties path in the tool's error lines.
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from e2e import kafka_tools
from e2e.kafka_tools import KafkaCluster as RealKafka
from e2e.kafka_tools import KafkaInstall, ScramUser
from e2e.wait import wait_for
from jbod_local.kafka_clients import client_properties
from tests.kafka_api.conftest import start_kafka_cluster
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

U = "--entity-type users --entity-name u"
C = "--entity-type clients --entity-name c1"
UD = "--entity-type users --entity-default"
CD = "--entity-type clients --entity-default"
# Each line one `kafka-configs.sh` run, in order: the state each leaves is what the next sees.
COMMANDS = [
    f"--alter {U} --add-config producer_byte_rate=1024,request_percentage=1.5",
    f"--alter {U} --add-config producer_byte_rate=1.5",
    f"--alter {UD} --add-config consumer_byte_rate=2048",
    f"--alter {C} --add-config controller_mutation_rate=10",
    f"--alter {U} {C} --add-config producer_byte_rate=500",
    "--describe --entity-type users",
    f"--alter {U} --delete-config producer_byte_rate",
    f"--describe {U}",
]


class Side:
    def __init__(self, bootstrap: str, properties: Path) -> None:
        self.bootstrap = bootstrap
        self.properties = properties

    def run(self, args: str, tools: KafkaInstall) -> tuple[int, list[str]]:
        """Exit status and the lines that matter: stdout without SCRAM listings, and the cause of
        an error (its exception's message) without the stack trace."""
        proc = kafka_tools.run_tool(
            "kafka-configs.sh",
            args.split(),
            bootstrap=self.bootstrap,
            command_config=self.properties,
            install=tools,
        )
        lines = [
            line
            for line in (proc.stdout + proc.stderr).splitlines()
            if line.strip()
            and not line.startswith(
                ("SCRAM credential configs", "\tat ", "Error while executing config command")
            )
            and not line.startswith("java.util.concurrent.ExecutionException")
        ]
        return proc.returncode, [_sorted_values(re.sub(r"\s+", " ", line).strip()) for line in lines]


def _sorted_values(line: str) -> str:
    """A describe line with its `key=value` list sorted: Kafka lists an entity's keys in its hash
    map's order, which for keys of one bucket is the order they were first set."""
    head, sep, values = line.partition(" are ")
    if not sep or not head.startswith("Quota configs"):
        return line
    return head + sep + ", ".join(sorted(values.split(", ")))


@pytest.fixture(scope="module")
def kafka(install: KafkaInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:  # noqa: F811
    user = ScramUser()
    properties = tmp_path_factory.mktemp("kafka-quotas") / "admin.properties"
    properties.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user.name}" password="{user.password}";\n'
    )
    with RealKafka(install, scram=user) as real:
        yield Side(real.bootstrap, properties)


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    base = tmp_path_factory.mktemp("our-quotas")
    with contextlib.ExitStack() as stack:
        cluster = start_kafka_cluster(stack, base, brokers=1, dirs=1)
        properties = base / "admin.properties"
        properties.write_text(client_properties(cluster.admin_password))
        yield Side(cluster.cluster.brokers[1].kafka["SASL_PLAINTEXT"], properties)


def test_kafka_configs_quotas_answer_alike(kafka: Side, ours: Side, install: KafkaInstall) -> None:  # noqa: F811
    answers: dict[str, tuple[int, list[str]]] = {}
    with ThreadPoolExecutor(1) as both:  # the two sides at once: each tool run starts a JVM
        for args in COMMANDS:
            theirs_run = both.submit(kafka.run, args, install)
            mine = ours.run(args, install)
            theirs = theirs_run.result()
            assert mine == theirs, args
            answers[args] = theirs
    # Kafka's answers are what the commands mean: a refusal, the entities listed.
    assert answers[COMMANDS[1]][0] == 1 and "cannot be a fractional value" in answers[COMMANDS[1]][1][-1]
    assert (
        "Quota configs for the default user-principal are consumer_byte_rate=2048.0"
        in answers[COMMANDS[5]][1]
    )
    assert answers[COMMANDS[-1]] == (0, ["Quota configs for user-principal 'u' are request_percentage=1.5"])


CONNECTIONS = 24  # from one address at once
QUOTA = 2  # connection_creation_rate: a fresh rate spans 10 windows, so 20 connections at once


def _connect(bootstrap: str, source: str) -> socket.socket:
    host, port = bootstrap.split(",", maxsplit=1)[0].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))


def _answered(sock: socket.socket) -> bool:
    """Send ApiVersions v0: True if answered, False if the broker closes the connection unanswered
    (held over its address's connection_creation_rate)."""
    client_id = b"ip-quota"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        sock.sendall(struct.pack(">i", len(body)) + body)
        return len(sock.recv(4)) == 4
    except ConnectionResetError:  # closed with the request unread: a reset rather than a FIN
        return False
    finally:
        sock.close()


def _answered_at_once(bootstrap: str, source: str, count: int) -> list[bool]:
    """`count` connections from `source` opened together, then each asked ApiVersions."""
    return [_answered(sock) for sock in [_connect(bootstrap, source) for _ in range(count)]]


def test_an_ip_connection_creation_rate_holds_new_connections_as_kafka_does(
    kafka: Side,
    ours: Side,
    install: KafkaInstall,  # noqa: F811
) -> None:
    """KIP-612 through `kafka-configs.sh --entity-type ips`: of 24 connections opened together
    from 127.0.0.2 with `connection_creation_rate=2`, Kafka and ours answer the same 20 (a fresh
    rate spans 10 windows of 1 s) and close the others unanswered. The tests' own clients come
    from 127.0.0.1, which no quota names; 127.0.0.3's quota, set last, shows when a broker
    applies them (its connections are answered until then)."""
    for address, rate in (("127.0.0.2", QUOTA), ("127.0.0.3", 1)):
        args = (
            f"--alter --entity-type ips --entity-name {address} --add-config connection_creation_rate={rate}"
        )
        with ThreadPoolExecutor(1) as both:
            theirs_run = both.submit(kafka.run, args, install)
            mine = ours.run(args, install)
            assert mine == theirs_run.result() == (0, [f"Completed updating config for ip {address}."])
    answered: dict[str, int] = {}
    for side in (kafka, ours):
        wait_for(
            lambda side=side: not _answered(_connect(side.bootstrap, "127.0.0.3")),
            timeout=60,
            what=f"{side.bootstrap} applying the ip quotas",
        )
        outcomes = _answered_at_once(side.bootstrap, "127.0.0.2", CONNECTIONS)
        answered[side.bootstrap] = sum(outcomes)
    assert answered[ours.bootstrap] == answered[kafka.bootstrap] == QUOTA * 10
