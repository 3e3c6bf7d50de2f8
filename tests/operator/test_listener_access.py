"""External listeners as the operator configures them, on real brokers (issue 34).

Two brokers run the listener entries `jbod_operator.listeners` decides for two `nodeport`
listeners beside the built-in SASL_PLAINTEXT one: `EXT` with SCRAM-SHA-512 and `SECURE` with TLS
and required client certificates (named listeners in `listener.security.protocol.map`, with
`listener.name.secure.ssl.client.auth`), each advertised at the node's address read through
`${file:...}` from what the node-info init container writes, the rack likewise. librdkafka
bootstrapped through either sees every broker at that listener's external address and its rack,
produces (acks=all, replicated over the internal listener) and consumes through it; without a
certificate the SSL listener refuses it; bootstrapped inside it sees the internal addresses.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from jbod_core.meta_properties import parse_properties
from jbod_operator import builders, listeners, model, node_info
from tests.broker.conftest import start_cluster, wait_for
from tests.kafka_api.conftest import KafkaCluster, earliest_and_values
from tests.operator.test_model_builders import example
from tests.tls_pki import Pki

ZONE = "topology.kubernetes.io/zone"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _refused_without_certificate(port: int, pki: Pki) -> bool:
    """A TLS client trusting the CA but without a certificate is refused (an alert or a close
    right after the handshake; TLS 1.3 reports it on the first read)."""
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    try:
        with (
            socket.create_connection(("localhost", port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="localhost") as conn,
        ):
            return conn.recv(1) == b""
    except (ssl.SSLError, ConnectionError):
        return True


def _broker_properties(spec: model.ClusterSpec, broker_id: int, node_file: Path, pki: Pki) -> dict[str, str]:
    """The listener and TLS keys of the operator's `server.properties` for `broker_id`, moved to
    this machine: the built-in listener is SASL_PLAINTEXT on a free port, 127.0.0.1 for 0.0.0.0,
    the node-info file at `node_file`, the keystore and CA from `pki`."""
    added = listeners.broker_listeners(spec, "demo", "ns", broker_id, listeners.Assigned())
    assert added.pending == () and added.node_info
    text = builders.server_properties(spec, "demo", "ns", broker_id, spec.disks, added)
    text = text.replace(listeners.NODE_INFO_FILE, str(node_file)).replace("0.0.0.0", "127.0.0.1")
    values = parse_properties(text)
    keys = ("config.providers", "config.providers.file.class", "broker.rack", "ssl.principal.mapping.rules")
    out = {key: values[key] for key in keys}
    out["listener.name.secure.ssl.client.auth"] = values["listener.name.secure.ssl.client.auth"]
    builtin = ("http", "SASL_PLAINTEXT", "SASL_SSL", "SSL")
    added_entries = [e for e in values["listeners"].split(",") if not e.startswith(builtin)]
    advertised = [e for e in values["advertised.listeners"].split(",") if not e.startswith(builtin)]
    mapped = [e for e in values["listener.security.protocol.map"].split(",") if not e.startswith(builtin)]
    out["listeners"] = ",".join(["http://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0", *added_entries])
    out["advertised.listeners"] = ",".join(
        ["http://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0", *advertised]
    )
    out["listener.security.protocol.map"] = ",".join(["SASL_PLAINTEXT:SASL_PLAINTEXT", *mapped])
    out["inter.broker.listener.name"] = "SASL_PLAINTEXT"
    out |= {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.keystore(f"broker-{broker_id}")),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca_file),
    }
    # What the node-info init container writes for a node whose preferred address is its name.
    node = {
        "metadata": {"name": f"node-{broker_id}", "labels": {ZONE: f"zone-{broker_id}"}},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "10.9.9.9"},
                {"type": "Hostname", "address": "localhost"},
            ]
        },
    }
    node_info.write(node_file, listeners.node_properties(node, added.node_addresses, added.rack_label))
    return out


def test_clients_reach_the_brokers_through_the_external_listeners(tmp_path: Path) -> None:
    ports = {b: {"ext": _free_port(), "secure": _free_port()} for b in (1, 2)}
    data = example()["spec"]
    configuration = {"preferredNodePortAddressType": "Hostname"}
    data.update(
        {
            "brokers": 3,
            "tls": {"enabled": True},
            "rack": {"topologyKey": ZONE},
            "listeners": [
                {
                    "name": name,
                    "port": port,  # the Services' port; each broker binds its own below
                    "type": "nodeport",
                    "tls": name == "secure",
                    "authentication": {"type": "tls" if name == "secure" else "scram-sha-512"},
                    "configuration": {
                        **configuration,
                        "brokers": [{"broker": b, "advertisedPort": p[name]} for b, p in ports.items()],
                    },
                }
                for name, port in (("ext", 40000), ("secure", 40001))
            ],
        }
    )
    spec = model.parse_cluster("demo", data)
    pki = Pki.create(tmp_path / "pki")
    with contextlib.ExitStack() as stack:
        cluster = start_cluster(stack, tmp_path / "cluster")
        for broker_id, bound in ports.items():
            node_file = tmp_path / f"node-{broker_id}.properties"
            properties = _broker_properties(spec, broker_id, node_file, pki)
            properties["listeners"] = (
                properties["listeners"]
                .replace("EXT://127.0.0.1:40000", f"EXT://127.0.0.1:{bound['ext']}")
                .replace("SECURE://127.0.0.1:40001", f"SECURE://127.0.0.1:{bound['secure']}")
            )
            reference = f"${{file:{node_file}:advertised.host.EXT}}:{bound['ext']}"
            assert f"EXT://{reference}" in properties["advertised.listeners"]
            cluster.add_broker(broker_id, dirs=1, loop=False, properties=properties)
        wait_for(
            lambda: (c := cluster.admin.cluster())["brokers"] == 2 and c["fencedBrokers"] == 0,
            what="both brokers registered and unfenced",
        )
        kafka = KafkaCluster(cluster, "")
        scram: dict[str, Any] = kafka.client_config(**{"bootstrap.servers": f"localhost:{ports[1]['ext']}"})
        admin_certificate = str(pki.keystore("admin"))  # CN=admin: the super user User:admin
        mtls: dict[str, Any] = {
            "bootstrap.servers": f"localhost:{ports[2]['secure']}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca_file),
            "ssl.certificate.location": admin_certificate,
            "ssl.key.location": admin_certificate,
        }

        for name, config in (("ext", scram), ("secure", mtls)):
            admin = AdminClient(config)  # kept: a future's client must outlive it
            described = admin.describe_cluster(request_timeout=15).result()
            assert sorted((n.id, n.host, n.port, n.rack) for n in described.nodes) == [
                (1, "localhost", ports[1][name], "zone-1"),
                (2, "localhost", ports[2][name], "zone-2"),
            ]
        inside = AdminClient(kafka.client_config()).list_topics(timeout=15).brokers
        assert {b.host for b in inside.values()} == {"127.0.0.1"}
        assert {b.port for b in inside.values()}.isdisjoint(p for b in ports.values() for p in b.values())

        topic = f"external-{uuid.uuid4().hex[:6]}"
        [created] = admin.create_topics([NewTopic(topic, 1, 2)]).values()
        created.result(timeout=15)
        values = [f"v{i}".encode() for i in range(20)]
        for config in (scram, mtls):  # produced through each listener, replicated inside
            producer = Producer({**config, "acks": "all", "enable.idempotence": True})
            for value in values[:10] if config is scram else values[10:]:
                producer.produce(topic, value)
            assert producer.flush(30) == 0
        assert earliest_and_values(scram, topic) == (0, values)
        assert earliest_and_values(mtls, topic) == (0, values)
        # The SSL listener requires a client certificate (listener.name.secure.ssl.client.auth).
        assert _refused_without_certificate(ports[1]["secure"], pki)
