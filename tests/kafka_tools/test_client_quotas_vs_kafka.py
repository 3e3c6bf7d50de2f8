"""Client quotas through Kafka's own `kafka-configs.sh` on our brokers beside Apache Kafka 4.3.1's
(issue 34): users, client ids, user + client id, the default user, `--delete-config`, a refusal
of the controller (a fractional byte rate): the same output and exit status on both (eight tool
runs a side, each a JVM; the tool's own refusals, such as an unknown key, never reach a broker).

The order of an entity's keys in a describe line is not compared (Kafka's is its hash map's).
The only other difference allowed: Kafka's test node has a SCRAM credential for its admin user, which
`--describe --entity-type users` lists; our `admin` logs in with its token. Those lines are left
out, and so are the bootstrap address and properties path in the tool's error lines.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from e2e import kafka_tools
from e2e.kafka_tools import KafkaCluster as RealKafka
from e2e.kafka_tools import KafkaInstall, ScramUser
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
