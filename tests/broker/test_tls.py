"""TLS on every connection (issue 25) with real processes: an https-only controller, brokers with
only `https://`, `SASL_SSL://` and `SSL://` listeners (broker 1 requires client certificates on
SASL_SSL, the inter-broker listener, so broker 2's replica fetches present one besides SCRAM),
librdkafka and httpx as clients.

Shows: produce (acks=all, replicated over SASL_SSL with mTLS) and consume over SASL_SSL; an SSL client
certificate's CN is the principal; refusals of a wrong CA, a missing client certificate, an
expired server certificate and a certificate for another host (Kafka listener and https APIs);
a renewed keystore is served to new connections without a restart; no port speaks plaintext."""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from jbod_client.controller import ClientError, ControllerClient, read_token
from jbod_local.processes import LocalBroker, LocalController
from jbod_runtime import certificates, tls
from tests.broker.conftest import Cluster, wait_for
from tests.controller.test_cli import assert_one_line_error, base_args, run_controller
from tests.tls_pki import Pki, listening_ports, speaks_plaintext

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TLS_LISTENERS = "https://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0"


@dataclass
class TlsCluster:
    cluster: Cluster
    pki: Pki
    admin_password: str

    def broker(self, node_id: int) -> LocalBroker:
        return self.cluster.brokers[node_id]

    def sasl_config(
        self, node_id: int | None = None, *, certificate: bool = True, **extra: Any
    ) -> dict[str, Any]:
        """SASL_SSL as admin; with a client certificate (CN=client) unless `certificate` is
        False (broker 1's SASL_SSL listener requires one: listener.name.sasl_ssl.ssl.client.auth)."""
        brokers = [self.broker(node_id)] if node_id else list(self.cluster.brokers.values())
        config = {
            "bootstrap.servers": ",".join(b.kafka["SASL_SSL"] for b in brokers),
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.pki.ca_file),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": self.admin_password,
            **extra,
        }
        if certificate:
            keystore = self.pki.dir / "client.pem"
            if not keystore.exists():
                self.pki.keystore("client")
            config["ssl.key.location"] = config["ssl.certificate.location"] = str(keystore)
        return config

    def ssl_config(self, node_id: int, keystore: Path | None, **extra: Any) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap.servers": self.broker(node_id).kafka["SSL"],
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.pki.ca_file),
            **extra,
        }
        if keystore is not None:
            config["ssl.key.location"] = str(keystore)
            config["ssl.certificate.location"] = str(keystore)
        return config


def broker_properties(
    pki: Pki, name: str, client_auth: Mapping[str, str], admin_token_file: Path
) -> dict[str, str]:
    return {
        "listeners": TLS_LISTENERS,
        "admin.token.file": str(admin_token_file),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.keystore(name)),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca_file),
        **client_auth,
    }


# Broker 1: certificates requested on SSL and https, required on SASL_SSL (its listener's own key);
# broker 2: required by ssl.client.auth, which, as in Kafka, does not reach SASL_SSL.
CLIENT_AUTH = {
    1: {"ssl.client.auth": "requested", "listener.name.sasl_ssl.ssl.client.auth": "required"},
    2: {"ssl.client.auth": "required"},
}


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCluster]:
    base = tmp_path_factory.mktemp("tls")
    pki = Pki.create(base / "pki")
    with contextlib.ExitStack() as stack:
        controller = LocalController(
            data_dir=base / "controller",
            cluster_id="tls",
            ca_file=pki.ca_file,
            extra_args=["--ssl-keystore-location", str(pki.keystore("controller"))],
        )
        stack.callback(controller.kill)
        controller.start()
        assert controller.url.startswith("https://")
        admin = ControllerClient(
            controller.url, token=read_token(controller.admin_token_file), ca_file=pki.ca_file
        )
        stack.callback(admin.close)
        cluster = Cluster(base=base, stack=stack, controller=controller, admin=admin)
        for node_id, client_auth in CLIENT_AUTH.items():
            cluster.add_broker(
                node_id,
                dirs=1,
                loop=False,
                properties=broker_properties(
                    pki, f"broker-{node_id}", client_auth, controller.admin_token_file
                ),
            )
        wait_for(lambda: cluster.all_unfenced(2), what="both brokers registered over https")
        yield TlsCluster(cluster, pki, read_token(controller.admin_token_file))


def _errors_of(config: dict[str, Any]) -> tuple[bool, list[str]]:
    """Whether a metadata request through `config` succeeds, and the errors librdkafka reported."""
    errors: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            errors.append(record.getMessage())

    logger = logging.getLogger(f"rdkafka-{uuid.uuid4().hex[:6]}")
    logger.addHandler(Collect())
    logger.propagate = False
    admin = AdminClient({**config, "error_cb": lambda e: errors.append(str(e)), "logger": logger})
    try:
        admin.list_topics(timeout=4)
    except KafkaException:
        admin.poll(0.5)  # the queued log lines and errors
        return False, errors
    return True, errors


def _handshake(address: str, context: ssl.SSLContext) -> None:
    host, port = address.rsplit(":", 1)
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host),
    ):
        pass


def _served_serial(address: str) -> int:
    """The serial of the certificate a new TLS connection to `address` is shown (not verified)."""
    host, port = address.rsplit(":", 1)
    return certificates.serial_of(ssl.get_server_certificate((host, int(port)), timeout=10).encode())


def _wait_until_served(broker: LocalBroker, keystore: Path) -> None:
    """Until the https API and the SASL_SSL listener show new connections `keystore`'s certificate
    (a listener re-reads its files on a new connection, at most once a second)."""
    wanted = certificates.serial_of(keystore.read_bytes())
    addresses = (urlsplit(broker.url).netloc, broker.kafka["SASL_SSL"])
    wait_for(
        lambda: all(_served_serial(address) == wanted for address in addresses),
        what=f"broker {broker.node_id} to serve {keystore.name}",
    )


def test_produce_and_consume_over_sasl_ssl(tls_cluster: TlsCluster) -> None:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    assert tls_cluster.cluster.admin.create_topic(topic, partitions=2, replication_factor=2)["errorCode"] == 0
    wait_for(lambda: tls_cluster.cluster.placed(topic), what="placements")
    brokers = {b["listeners"][0]["name"] for b in tls_cluster.cluster.admin.brokers()}
    assert brokers == {"https"}  # registered with their https API

    acked: list[bytes] = []
    errors: list[KafkaError] = []
    producer = Producer(tls_cluster.sasl_config(acks="all", **{"message.timeout.ms": 30000}))
    for n in range(200):
        producer.produce(
            topic,
            value=b"v%d" % n,
            on_delivery=lambda err, msg: errors.append(err) if err else acked.append(msg.value()),
        )
    assert producer.flush(60) == 0
    assert errors == []
    # acks=all: both replicas have them. Broker 2 fetched from broker 1 over its SASL_SSL listener
    # (the inter-broker one: the first Kafka listener) with its certificate, which broker 1 requires,
    # and SCRAM as jbod-broker; broker 1 from broker 2 over SASL_SSL without one.
    assert len(acked) == 200

    consumer = Consumer(
        tls_cluster.sasl_config(**{"group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    )
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    while len(seen) < 200 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            seen.add(msg.value())
    consumer.close()
    assert seen == set(acked)


def test_client_certificate_cn_is_the_principal(tls_cluster: TlsCluster) -> None:
    pki = tls_cluster.pki
    topic = f"ssl-{uuid.uuid4().hex[:8]}"
    as_admin = AdminClient(tls_cluster.ssl_config(1, pki.keystore("admin")))
    as_admin.create_topics([NewTopic(topic, 1, 2)])[topic].result(timeout=30)  # User:admin may
    as_alice = AdminClient(tls_cluster.ssl_config(1, pki.keystore("alice")))
    with pytest.raises(KafkaException, match="AUTHORIZATION_FAILED"):
        as_alice.create_topics([NewTopic(f"{topic}-alice", 1, 2)])[f"{topic}-alice"].result(timeout=30)
    # Without a certificate (ssl.client.auth=requested on broker 1) the client is ANONYMOUS.
    anonymous = AdminClient(tls_cluster.ssl_config(1, None))
    with pytest.raises(KafkaException, match="AUTHORIZATION_FAILED"):
        anonymous.create_topics([NewTopic(f"{topic}-anon", 1, 2)])[f"{topic}-anon"].result(timeout=30)

    # The ACLs of User:alice apply to the certificate with CN=alice: refused, then let in.
    def produce_as_alice() -> KafkaError | None:
        outcome: list[KafkaError | None] = []
        producer = Producer(
            tls_cluster.ssl_config(1, pki.keystore("alice"), acks="all", **{"message.timeout.ms": 20000})
        )
        producer.produce(topic, value=b"from alice", on_delivery=lambda err, msg: outcome.append(err))
        producer.flush(30)
        return outcome[0] if outcome else KafkaError(KafkaError._MSG_TIMED_OUT)

    refused = produce_as_alice()
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant = {"resourceType": "TOPIC", "resourceName": topic, "patternType": "LITERAL"}
    grant |= {"principal": "User:alice", "host": "*", "permissionType": "ALLOW"}
    results = tls_cluster.cluster.admin.create_acls([{**grant, "operation": "WRITE"}])
    assert [r["errorCode"] for r in results] == [0]
    wait_for(lambda: produce_as_alice() is None, what="alice's WRITE ACL on the broker")


def test_kafka_listeners_refuse_a_wrong_ca_and_a_missing_client_certificate(
    tls_cluster: TlsCluster, tmp_path: Path
) -> None:
    other = Pki.create(tmp_path / "other", "another CA")
    ok, errors = _errors_of(tls_cluster.sasl_config(1, **{"ssl.ca.location": str(other.ca_file)}))
    assert not ok
    assert any("certificate verify failed" in e for e in errors), errors

    # Broker 2 requires a client certificate: one from our CA is accepted, none is refused, one
    # from another CA is refused.
    assert _errors_of(tls_cluster.ssl_config(2, tls_cluster.pki.keystore("admin")))[0]
    ok, errors = _errors_of(tls_cluster.ssl_config(2, None))
    assert not ok
    assert errors, "the refusal is reported"
    assert not _errors_of(tls_cluster.ssl_config(2, other.keystore("admin")))[0]
    # Broker 2's SASL_SSL takes SCRAM alone (KIP-684); broker 1's requires a certificate too.
    assert _errors_of(tls_cluster.sasl_config(2, certificate=False))[0]
    ok, errors = _errors_of(tls_cluster.sasl_config(1, certificate=False))
    assert not ok
    assert _errors_of(tls_cluster.sasl_config(1))[0]


def test_https_apis_refuse_a_wrong_ca_and_a_missing_client_certificate(
    tls_cluster: TlsCluster, tmp_path: Path
) -> None:
    pki = tls_cluster.pki
    other = Pki.create(tmp_path / "other", "another CA")
    controller = tls_cluster.cluster.controller.url
    broker_1, broker_2 = tls_cluster.broker(1).url, tls_cluster.broker(2).url
    assert broker_1.startswith("https://")
    assert httpx.get(f"{controller}/readyz", verify=tls.client_context(pki.ca_file)).status_code == 200
    assert httpx.get(f"{broker_1}/healthz", verify=tls.client_context(pki.ca_file)).status_code == 200
    for url in (controller, broker_1):
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{url}/healthz", verify=tls.client_context(other.ca_file))
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{url}/healthz")  # the system's CAs do not know ours
    with_cert = tls.client_context(pki.ca_file, keystore=pki.keystore("alice"))
    assert httpx.get(f"{broker_2}/healthz", verify=with_cert).status_code == 200
    with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
        httpx.get(f"{broker_2}/healthz", verify=tls.client_context(pki.ca_file))


def test_no_port_speaks_plaintext(tls_cluster: TlsCluster) -> None:
    processes = [
        tls_cluster.cluster.controller.process,
        *(b.process for b in tls_cluster.cluster.brokers.values()),
    ]
    ports: set[int] = set()
    for process in processes:
        assert process is not None
        ports |= listening_ports(process.pid)
    assert len(ports) >= 1 + 3 * 2  # the controller's, and three listeners per broker
    assert [port for port in sorted(ports) if speaks_plaintext(port)] == []


def test_expired_and_wrong_host_certificates_are_refused_and_renewal_is_picked_up(
    tls_cluster: TlsCluster,
) -> None:
    """Broker 3 starts with an expired certificate; then its keystore is overwritten with one
    for another host, then with a good one: each is served to new connections, no restart."""
    pki, cluster = tls_cluster.pki, tls_cluster.cluster
    properties = broker_properties(
        pki, "broker-3", {"ssl.client.auth": "none"}, cluster.controller.admin_token_file
    )
    keystore = Path(properties["ssl.keystore.location"])
    keystore.write_bytes(pki.keystore("broker-3-expired", expired=True).read_bytes())
    broker = cluster.add_broker(3, dirs=1, loop=False, properties=properties)
    verify = tls.client_context(pki.ca_file)

    ok, errors = _errors_of(tls_cluster.sasl_config(3))
    assert not ok
    assert any("certificate verify failed" in e for e in errors), errors  # librdkafka says no more
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate has expired"):
        _handshake(broker.kafka["SASL_SSL"], verify)
    with pytest.raises(httpx.ConnectError, match="certificate has expired"):
        httpx.get(f"{broker.url}/healthz", verify=verify)

    keystore.write_bytes(pki.keystore("broker-3-other", dns=("other.example",), ips=()).read_bytes())
    _wait_until_served(broker, keystore)
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{broker.url}/healthz", verify=verify)
    with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
        _handshake(broker.kafka["SASL_SSL"], verify)
    ok, errors = _errors_of(tls_cluster.sasl_config(3))
    assert not ok
    assert any("certificate verify failed" in e for e in errors), errors

    renewed = pki.keystore("broker-3-renewed")
    keystore.write_bytes(renewed.read_bytes())
    _wait_until_served(broker, keystore)
    assert httpx.get(f"{broker.url}/healthz", verify=verify).status_code == 200
    assert _errors_of(tls_cluster.sasl_config(3))[0]
    host, port = broker.kafka["SASL_SSL"].rsplit(":", 1)
    served = ssl.get_server_certificate((host, int(port)))
    assert certificates.serial_of(served.encode()) == certificates.serial_of(renewed.read_bytes())


def test_tls_files_that_do_not_load_are_one_line_start_errors(tmp_path: Path) -> None:
    """The controller and the agent refuse a missing or broken keystore in one line naming it,
    before serving (the controller: before it writes anything)."""
    data = tmp_path / "controller"
    missing = run_controller(*base_args(data), "--ssl-keystore-location", str(tmp_path / "none.pem"))
    assert_one_line_error(missing, "--ssl-keystore-location", "none.pem", "no such file")
    assert not data.exists()
    broken = tmp_path / "broken.pem"
    broken.write_text("not a key\n")
    assert_one_line_error(
        run_controller(*base_args(data), "--ssl-keystore-location", str(broken)), "broken.pem"
    )
    assert_one_line_error(
        run_controller(
            *base_args(data), "--ssl-keystore-location", str(broken), "--advertised-url", "http://x:1"
        ),
        "--advertised-url must be https://",
    )

    token = tmp_path / "cluster.token"
    token.write_text("t\n")
    config = tmp_path / "server.properties"
    config.write_text(
        f"node.id=1\nlog.dirs={tmp_path / 'd0'}\nmetadata.log.dir={tmp_path / 'meta'}\n"
        "controller.url=https://127.0.0.1:1\n"
        f"cluster.token.file={token}\nlog.dirs.format.on.start=true\ncluster.id=c1\n"
        f"listeners=SASL_SSL://127.0.0.1:0\nssl.keystore.location={broken}\n"
    )
    agent = subprocess.run(
        [str(Path(sys.executable).parent / "jbod-agent"), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert agent.returncode != 0
    lines = agent.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jbod-agent: error: ") and "broken.pem" in lines[0], (
        agent.stderr
    )


def test_a_controller_that_requires_client_certificates(tmp_path: Path) -> None:
    """`--ssl-client-auth required`: a client without a certificate from the truststore's CA is
    refused in the handshake; one with it (as a broker's `ClientTls` presents its keystore) gets in."""
    pki = Pki.create(tmp_path / "pki")
    data = tmp_path / "controller"
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "jbod-controller"),
            *base_args(data, "mtls"),
            "--ssl-keystore-location",
            str(pki.keystore("controller")),
            "--ssl-truststore-location",
            str(pki.ca_file),
            "--ssl-client-auth",
            "required",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = (
            next(line for line in process.stdout if "Listening on" in line).split("Listening on ")[1].strip()
        )
        assert url.startswith("https://")
        client_tls = tls.ClientTls(pki.ca_file, keystore=pki.keystore("broker-9"))
        with ControllerClient(url, token=read_token(data / "admin.token"), tls=client_tls) as admin:
            assert wait_for(lambda: _cluster_or_none(admin), what="the controller over mutual TLS")
        with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
            httpx.get(f"{url}/healthz", verify=tls.client_context(pki.ca_file))
        other = Pki.create(tmp_path / "other", "another CA")
        with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
            httpx.get(
                f"{url}/healthz", verify=tls.client_context(pki.ca_file, keystore=other.keystore("intruder"))
            )
    finally:
        process.kill()
        process.wait()


def _cluster_or_none(admin: ControllerClient) -> dict[str, Any] | None:
    try:
        return admin.cluster()
    except ClientError:
        return None
