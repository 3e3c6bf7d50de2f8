"""`jbodctl local up --tls` as a user runs it: every process on TLS only (no port of the cluster
answers plaintext HTTP or a plaintext Kafka ApiVersions), `client-properties` gives SASL_SSL
with the PEM truststore that librdkafka and jbodctl use, `status` keeps working, and
`rotate-certs --ca` renews the CA and every certificate while a producer (acks=all,
idempotent) and a consumer group run: nothing acknowledged is lost, the clients see only
retriable errors, new connections present the new certificates, and the clients, which read
their truststore before the renewal, connect again to restarted brokers after the old CA
certificate is dropped (the CA kept its key). `--ca --new-key` is trusted only by clients that
re-read the bundle."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import AdminClient

from e2e.wait import wait_for
from jbod_client.kafka_config import parse_properties, security_from_properties
from jbod_local import certs, supervisor
from jbod_local.layout import STATE_FILE, read_layout
from jbod_local.processes import stop_processes
from jbod_runtime import certificates
from tests.client.local_commands import JBODCTL, ok, status
from tests.tls_pki import listening_ports, speaks_plaintext

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("local-tls") / "cluster"
    try:
        ok("up", "--tls", "--brokers", "2", "--disks", "1", "--dir", str(path))
        yield path
    finally:
        if (path / STATE_FILE).exists():
            supervisor.down(path, grace=2)


def client_config(root: Path, **extra: Any) -> dict[str, Any]:
    """librdkafka's configuration from `client-properties`, as a user would carry it over."""
    properties = parse_properties(ok("client-properties", "--dir", str(root)))
    security = security_from_properties(properties, source="client-properties")
    bootstrap = ",".join(b.kafka_address for b in read_layout(root).brokers)
    return {"bootstrap.servers": bootstrap, **security.librdkafka_config(), **extra}


def served_serial(address: str) -> int:
    host, port = address.rsplit(":", 1)
    return certificates.serial_of(ssl.get_server_certificate((host, int(port)), timeout=10).encode())


def wait_until_served(root: Path) -> None:
    """Until every broker's SASL_SSL listener and https API and every controller show new
    connections the certificate of their keystore (a process re-reads its files on a new
    connection, at most once a second)."""
    layout = read_layout(root)
    expected = [
        (address, certs.keystore(root, f"broker-{b.broker_id}"))
        for b in layout.brokers
        for address in (b.kafka_address, b.url.removeprefix("https://"))
    ] + [(c.url.removeprefix("https://"), certs.keystore(root, c.keystore_name)) for c in layout.controllers]
    wait_for(
        lambda: all(
            served_serial(address) == certs.served_serial(keystore) for address, keystore in expected
        ),
        timeout=30,
        what="every process to serve the certificate of its keystore",
    )


def test_client_properties_name_sasl_ssl_and_the_pem_truststore(root: Path) -> None:
    properties = parse_properties(ok("client-properties", "--dir", str(root)))
    assert properties["security.protocol"] == "SASL_SSL"
    assert properties["ssl.truststore.type"] == "PEM"
    assert Path(properties["ssl.truststore.location"]) == certs.truststore(root.resolve())
    layout = read_layout(root)
    assert layout.tls and all(c.url.startswith("https://") for c in layout.controllers)
    assert all(b.url.startswith("https://") for b in layout.brokers)
    data = status(root)
    assert len(data["brokers"]) == 2  # status reads the https APIs
    env = {
        **os.environ,
        "JBOD_CA_FILE": str(certs.truststore(root)),
        "JBOD_TOKEN_FILE": str(layout.admin_token_file),
    }
    for command, count in (
        (["brokers"], 2),
        (["log-dirs"], 2),
    ):  # log-dirs: Kafka DescribeLogDirs over SASL_SSL
        listed = subprocess.run(
            [JBODCTL, "--controller", layout.controller_url, "-o", "json", *command],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert listed.returncode == 0, listed.stderr
        assert len(json.loads(listed.stdout)) == count, listed.stdout
    # jbodctl's own Kafka clients: admin over SASL_SSL, verified with JBOD_CA_FILE.
    with layout.controller() as admin:
        assert admin.create_topic("cli-tls", partitions=1, replication_factor=2)["errorCode"] == 0

    def jbodctl(*args: str) -> str:
        done = subprocess.run(
            [JBODCTL, "--controller", layout.controller_url, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    jbodctl("produce", "cli-tls", "-v", "one", "-v", "two")
    assert jbodctl("consume", "cli-tls", "-n", "2").split() == ["one", "two"]


def test_no_port_of_the_cluster_speaks_plaintext(root: Path) -> None:
    layout = read_layout(root)
    pids = [c.pid for c in layout.controllers] + [b.pid for b in layout.brokers]
    ports: set[int] = set()
    for pid in pids:
        assert pid is not None
        ports |= listening_ports(pid)
    assert len(ports) == 1 + 2 * 2  # the controller's, and an https API and a SASL_SSL listener per broker
    assert [port for port in sorted(ports) if speaks_plaintext(port)] == []


def stop_broker(root: Path, broker_id: int) -> None:
    """Stop one broker (SIGTERM): every client connection to it is closed."""
    broker = next(b for b in read_layout(root).brokers if b.broker_id == broker_id)
    assert broker.pid is not None
    stop_processes([(broker.pid, broker.config_path)], grace=10)


def wait_in_sync(root: Path, topic: str, broker_id: int) -> None:
    """Until `broker_id` is in the ISR of every partition of `topic`."""
    admin = AdminClient(client_config(root))
    deadline = time.monotonic() + 60
    while True:
        described = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=20)
        if all(broker_id in {node.id for node in p.isr} for p in described.partitions):
            return
        assert time.monotonic() < deadline, f"broker {broker_id} did not rejoin the ISR of {topic}"
        time.sleep(0.5)


def wait_for_more(acked: set[bytes], than: int, timeout: float = 45) -> bool:
    deadline = time.monotonic() + timeout
    while len(acked) <= than and time.monotonic() < deadline:
        time.sleep(0.2)
    return len(acked) > than


def test_rotating_the_ca_under_load_loses_nothing(root: Path, tmp_path: Path) -> None:
    """`rotate-certs --ca` then `--drop-old-ca` under load; then each broker is restarted, so the
    running clients, which read the truststore before the renewal, must connect again: they
    verify the new certificates (the renewed CA kept its key), nothing acknowledged is lost."""
    topic = f"rot-{uuid.uuid4().hex[:8]}"
    layout = read_layout(root)
    with layout.controller() as admin:
        # min.insync.replicas 1: acks=all goes on while one of the two brokers restarts.
        created = admin.create_topic(
            topic, partitions=2, replication_factor=2, configs={"min.insync.replicas": "1"}
        )
        assert created["errorCode"] == 0
    before = {b.broker_id: served_serial(b.kafka_address) for b in layout.brokers}
    kept_bundle = tmp_path / "ca-before-rotation.pem"  # what a client read at its start
    kept_bundle.write_bytes(certs.truststore(root).read_bytes())

    acked: set[bytes] = set()
    fatal: list[Any] = []
    retriable: list[str] = []
    stop = threading.Event()
    flushed = threading.Event()  # the producer has every answer: `acked` is final

    def on_error(err: KafkaError) -> None:
        (fatal if err.fatal() else retriable).append(str(err))

    def produce() -> None:
        try:
            producer = Producer(
                client_config(root, acks="all", **{"enable.idempotence": True, "error_cb": on_error})
            )
            n = 0
            while not stop.is_set():
                producer.produce(
                    topic,
                    value=b"v%d" % n,
                    on_delivery=lambda err, msg: fatal.append(err) if err else acked.add(msg.value()),
                )
                n += 1
                producer.poll(0.005)
            if producer.flush(60) != 0:
                fatal.append("records left unacknowledged")
        except Exception as exc:  # reported by the assertions below
            fatal.append(exc)
        finally:
            flushed.set()

    consumed: set[bytes] = set()

    def consume() -> None:
        consumer = Consumer(
            client_config(
                root, **{"group.id": f"g-{topic}", "auto.offset.reset": "earliest", "error_cb": on_error}
            )
        )
        consumer.subscribe([topic])
        while not (flushed.is_set() and (acked <= consumed or time.monotonic() > deadline[0])):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                consumed.add(msg.value())
        consumer.close()

    deadline = [float("inf")]
    threads = [threading.Thread(target=produce, daemon=True), threading.Thread(target=consume, daemon=True)]
    for thread in threads:
        thread.start()
    try:
        assert wait_for_more(acked, 100) and wait_for_more(consumed, 0), "the load did not start"
        ok("rotate-certs", "--ca", "--dir", str(root))
        wait_until_served(root)
        after = {b.broker_id: served_serial(b.kafka_address) for b in layout.brokers}
        for broker in layout.brokers:
            keystore = certs.keystore(root, f"broker-{broker.broker_id}")
            assert after[broker.broker_id] == certs.served_serial(keystore) != before[broker.broker_id]
            assert served_serial(broker.url.removeprefix("https://")) == certs.served_serial(keystore)
        controller = layout.controllers[0]
        assert served_serial(controller.url.removeprefix("https://")) == certs.served_serial(
            certs.keystore(root, controller.keystore_name)
        )
        assert wait_for_more(acked, len(acked) + 100), "the load did not go on after the renewal"
        ok("rotate-certs", "--drop-old-ca", "--dir", str(root))
        assert certs.truststore(root).read_bytes() != kept_bundle.read_bytes()
        # Every connection the clients hold is closed in turn: the second broker restarts, then
        # the first stops, so the second's new process leads everything and the clients must
        # reach it.
        first, second = (b.broker_id for b in layout.brokers)
        stop_broker(root, second)
        ok("up", "--dir", str(root))
        wait_in_sync(root, topic, second)
        stop_broker(root, first)
        reached = wait_for_more(acked, len(acked) + 20)
        ok("up", "--dir", str(root))
        assert reached, "the producer did not get through to the restarted broker"
        wait_in_sync(root, topic, first)
        assert wait_for_more(acked, len(acked) + 20), "the load did not go on with both brokers back"
    finally:
        deadline[0] = time.monotonic() + 60
        stop.set()
        for thread in threads:
            thread.join(120)
    assert fatal == []
    assert [e for e in retriable if "SSL" in e or "certificate" in e] == []  # no handshake refused
    assert len(acked) > 100
    assert acked <= consumed  # nothing acknowledged is lost
    # A new client with the bundle read before the renewal gets in too: one CA key throughout.
    assert len(ok("status", "--dir", str(root))) > 0
    for bundle in (certs.truststore(root), kept_bundle):
        fresh = Consumer(
            client_config(
                root, **{"group.id": f"g2-{topic}", "ssl.ca.location": str(bundle), "error_cb": on_error}
            )
        )
        assert fresh.list_topics(topic, timeout=20).topics[topic].error is None
        fresh.close()


def test_a_new_ca_key_is_trusted_only_by_clients_that_read_the_new_bundle(root: Path, tmp_path: Path) -> None:
    """`rotate-certs --ca --new-key`: clients started with the new bundle get in; once the old CA
    is dropped, a client still holding the bundle from before is refused (why the docs say to
    restart clients between the two steps)."""
    kept_bundle = tmp_path / "ca-before-new-key.pem"
    kept_bundle.write_bytes(certs.truststore(root).read_bytes())
    key_before = certs.current_ca(root).key_pem
    ok("rotate-certs", "--ca", "--new-key", "--dir", str(root))
    assert certs.current_ca(root).key_pem != key_before
    ok("rotate-certs", "--drop-old-ca", "--dir", str(root))
    wait_until_served(root)
    layout = read_layout(root)
    broker = layout.brokers[0]
    host, port = broker.kafka_address.rsplit(":", 1)
    with pytest.raises(ssl.SSLCertVerificationError):
        ssl.create_default_context(cafile=str(kept_bundle)).wrap_socket(
            socket.create_connection((host, int(port)), timeout=10), server_hostname=host
        )
    errors: list[str] = []
    kept = Consumer(
        client_config(
            root,
            **{
                "group.id": "g-kept",
                "ssl.ca.location": str(kept_bundle),
                "error_cb": lambda e: errors.append(str(e)),
            },
        )
    )
    with pytest.raises(KafkaException):
        kept.list_topics(timeout=8)
    kept.close()
    assert any("certificate verify failed" in e for e in errors), errors
    fresh = Consumer(client_config(root, **{"group.id": "g-fresh"}))
    assert fresh.list_topics(timeout=20).brokers
    fresh.close()
    # The renewal and the drop are both visible to the admin's own clients.
    with layout.controller() as admin:
        assert (
            admin.create_topic(f"after-new-key-{uuid.uuid4().hex[:6]}", partitions=1, replication_factor=2)[
                "errorCode"
            ]
            == 0
        )


def _health_without_certificate(host: str, port: int, context: ssl.SSLContext) -> None:
    """GET /health with no client certificate; raises once the member closes or refuses."""
    with (
        socket.create_connection((host, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as conn,
    ):
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.recv(100) == b""  # closed (TLS 1.3 reports the refusal on read)
        raise ConnectionError("no certificate: the connection was closed")


def test_a_tls_quorum_runs_etcd_on_tls_with_client_certificates(tmp_path: Path) -> None:
    """`up --tls --controllers 3`: etcd members serve clients and peers on https only and require
    certificates; the controllers reach them with theirs; no port of any process speaks plaintext."""
    root = tmp_path / "quorum"
    try:
        ok(
            "up",
            "--tls",
            "--controllers",
            "3",
            "--brokers",
            "1",
            "--disks",
            "1",
            "--dir",
            str(root),
            "--timeout",
            "120",
        )
        layout = read_layout(root)
        assert all(e.url.startswith("https://") for e in layout.etcd)
        data = status(root)
        assert len(data["brokers"]) == 1
        pids = (
            [c.pid for c in layout.controllers]
            + [b.pid for b in layout.brokers]
            + [e.pid for e in layout.etcd]
        )
        ports: set[int] = set()
        for pid in pids:
            assert pid is not None
            ports |= listening_ports(pid)
        assert len(ports) == 3 + 2 + 3 * 2  # etcd: a client and a peer port per member
        assert [port for port in sorted(ports) if speaks_plaintext(port)] == []
        # etcd refuses a client without a certificate.
        member = layout.etcd[0]
        host, port = member.url.removeprefix("https://").rsplit(":", 1)
        context = ssl.create_default_context(cafile=str(certs.truststore(root)))
        with pytest.raises((ssl.SSLError, OSError)):
            _health_without_certificate(host, int(port), context)
        replaced = subprocess.run(
            [JBODCTL, "local", "rotate-certs", "--ca", "--new-key", "--dir", str(root)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert replaced.returncode != 0 and "etcd" in replaced.stderr
        assert len(replaced.stderr.strip().splitlines()) == 1
        # The CA renewed with its key: etcd, which loaded the old CA certificate at its start,
        # serves its new certificate and still accepts the controllers' new ones.
        address = member.url.removeprefix("https://")
        old = served_serial(address)
        ok("rotate-certs", "--ca", "--dir", str(root))
        keystore = certs.keystore(root, member.name)
        wait_for(
            lambda: served_serial(address) == certs.served_serial(keystore),
            timeout=30,
            what=f"etcd member {member.name} to serve its renewed certificate",
        )
        assert certs.served_serial(keystore) != old
        ok("rotate-certs", "--drop-old-ca", "--dir", str(root))
        with layout.controller() as admin:
            assert admin.create_topic("after-rotation", partitions=1, replication_factor=1)["errorCode"] == 0
    finally:
        if (root / STATE_FILE).exists():
            supervisor.down(root, grace=2)
