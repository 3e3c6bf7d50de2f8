"""Apache Kafka 4.3.1's own tools over SASL_SSL (issue 25), as a user runs them: a `jbodctl local
up --tls` cluster, `--command-config` the file `jbodctl local client-properties` prints
(security.protocol=SASL_SSL, ssl.truststore.type=PEM, the cluster's CA bundle). kafka-topics.sh
creates and lists, the console producer writes and the console consumer reads back (in a group);
a properties file trusting another CA is refused."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e import kafka_tools
from e2e.kafka_tools import KafkaInstall
from jbod_local import supervisor
from jbod_local.layout import STATE_FILE, read_layout
from jbod_runtime import certificates
from tests.client.local_commands import ok
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(scope="module")
def tls_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("tools-tls") / "cluster"
    try:
        ok("up", "--tls", "--brokers", "2", "--disks", "1", "--dir", str(path))
        yield path
    finally:
        if (path / STATE_FILE).exists():
            supervisor.down(path, grace=2)


def _run(
    root: Path, kafka: KafkaInstall, script: str, args: list[str], *, config: Path, stdin: str | None = None
) -> str:
    bootstrap = ",".join(b.kafka_address for b in read_layout(root).brokers)
    proc = kafka_tools.run_tool(
        script, args, bootstrap=bootstrap, command_config=config, input=stdin, install=kafka
    )
    assert proc.returncode == 0, (
        f"{script} {args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def test_topics_and_console_clients_over_sasl_ssl(
    tls_root: Path,
    install: KafkaInstall,  # noqa: F811  the fixture imported above
    tmp_path: Path,
) -> None:
    config = tmp_path / "admin.properties"
    config.write_text(ok("client-properties", "--dir", str(tls_root)))
    assert "security.protocol=SASL_SSL" in config.read_text()
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    created = _run(
        tls_root,
        install,
        "kafka-topics.sh",
        ["--create", "--topic", topic, "--partitions", "2", "--replication-factor", "2"],
        config=config,
    )
    assert created.strip() == f"Created topic {topic}."
    assert topic in _run(tls_root, install, "kafka-topics.sh", ["--list"], config=config).split()

    records = [f"r{n}" for n in range(20)]
    producer_args = ["--topic", topic]
    _run(
        tls_root,
        install,
        "kafka-console-producer.sh",
        producer_args,
        config=config,
        stdin="\n".join(records) + "\n",
    )
    consumer_args = ["--topic", topic, "--group", f"g-{topic}", "--from-beginning", "--max-messages", "20",
                     "--timeout-ms", "60000"]  # fmt: skip
    consumed = _run(tls_root, install, "kafka-console-consumer.sh", consumer_args, config=config).split()
    assert sorted(consumed) == sorted(records)

    # A truststore holding another CA: the tool cannot connect.
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_bytes(certificates.make_ca("another CA").cert_pem)
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(
        config.read_text().replace(
            f"ssl.truststore.location={read_layout(tls_root).ca_file}", f"ssl.truststore.location={other_ca}"
        )
        + "default.api.timeout.ms=8000\nrequest.timeout.ms=4000\n"
    )
    assert str(other_ca) in wrong.read_text()
    bootstrap = ",".join(b.kafka_address for b in read_layout(tls_root).brokers)
    refused = kafka_tools.run_tool(
        "kafka-topics.sh",
        ["--list"],
        bootstrap=bootstrap,
        command_config=wrong,
        install=install,
    )
    assert refused.returncode != 0
    assert (
        "SSL handshake failed" in refused.stdout + refused.stderr or "PKIX" in refused.stdout + refused.stderr
    )
