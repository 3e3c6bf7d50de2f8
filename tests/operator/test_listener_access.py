"""An external listener as the operator configures it, on real brokers (issue 34).

Two brokers run the listener entries `jbod_operator.listeners` decides for a `nodeport` listener
with SCRAM-SHA-512 (a named listener `EXT` in `listener.security.protocol.map`, advertised at the
node's address read through `${file:...}` from what the node-info init container writes, the
rack likewise) beside the built-in SASL_PLAINTEXT listener. librdkafka bootstrapped through the
external listener sees every broker at its external address and rack, and produces (acks=all,
replicated over the internal listener) and consumes through it; bootstrapped through the internal
listener it sees the internal addresses.
"""

from __future__ import annotations

import contextlib
import socket
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

ZONE = "topology.kubernetes.io/zone"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _broker_properties(spec: model.ClusterSpec, broker_id: int, node_file: Path) -> dict[str, str]:
    """The listener keys of the operator's `server.properties` for `broker_id`, moved to this
    machine: 127.0.0.1 for 0.0.0.0 and the pod's DNS name, the node-info file at `node_file`."""
    added = listeners.broker_listeners(spec, "demo", "ns", broker_id, listeners.Assigned())
    assert added.pending == () and added.node_info
    text = builders.server_properties(spec, "demo", "ns", broker_id, spec.disks, added)
    text = text.replace(listeners.NODE_INFO_FILE, str(node_file)).replace("0.0.0.0", "127.0.0.1")
    text = text.replace(f"demo-broker-{broker_id}.demo-brokers.ns.svc", "127.0.0.1")
    values = parse_properties(text)
    keys = (
        "listener.security.protocol.map",
        "config.providers",
        "config.providers.file.class",
        "broker.rack",
    )
    out = {key: values[key] for key in keys}
    # The built-in listeners on ports of their own choosing (0) here, the external one as decided.
    external = [e for e in values["listeners"].split(",") if e.startswith("EXT://")]
    advertised = [e for e in values["advertised.listeners"].split(",") if e.startswith("EXT://")]
    out["listeners"] = ",".join(["http://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0", *external])
    out["advertised.listeners"] = ",".join(
        ["http://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0", *advertised]
    )
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


def test_clients_reach_the_brokers_through_the_external_listener(tmp_path: Path) -> None:
    ports = {1: _free_port(), 2: _free_port()}
    data = example()["spec"]
    data.update(
        {
            "brokers": 3,
            "rack": {"topologyKey": ZONE},
            "listeners": [
                {
                    "name": "ext",
                    "port": 40000,  # the Services' port; each broker binds its own below
                    "type": "nodeport",
                    "authentication": {"type": "scram-sha-512"},
                    "configuration": {
                        "preferredNodePortAddressType": "Hostname",
                        "brokers": [{"broker": b, "advertisedPort": p} for b, p in ports.items()],
                    },
                }
            ],
        }
    )
    spec = model.parse_cluster("demo", data)
    with contextlib.ExitStack() as stack:
        cluster = start_cluster(stack, tmp_path / "cluster")
        for broker_id, port in ports.items():
            properties = _broker_properties(spec, broker_id, tmp_path / f"node-{broker_id}.properties")
            properties["listeners"] = properties["listeners"].replace(
                "EXT://127.0.0.1:40000", f"EXT://127.0.0.1:{port}"
            )
            cluster.add_broker(broker_id, dirs=1, loop=False, properties=properties)
            assert (
                f"EXT://${{file:{tmp_path}/node-{broker_id}.properties:advertised.host.EXT}}:{port}"
                in (properties["advertised.listeners"])
            )
        wait_for(
            lambda: (c := cluster.admin.cluster())["brokers"] == 2 and c["fencedBrokers"] == 0,
            what="both brokers registered and unfenced",
        )
        kafka = KafkaCluster(cluster, "")
        external: dict[str, Any] = kafka.client_config(**{"bootstrap.servers": f"localhost:{ports[1]}"})
        internal: dict[str, Any] = kafka.client_config()

        admin = AdminClient(external)  # kept: a future's client must outlive it
        described = admin.describe_cluster(request_timeout=15).result()
        assert sorted((n.id, n.host, n.port, n.rack) for n in described.nodes) == [
            (1, "localhost", ports[1], "zone-1"),
            (2, "localhost", ports[2], "zone-2"),
        ]
        inside = AdminClient(internal).list_topics(timeout=15).brokers
        assert {b.host for b in inside.values()} == {"127.0.0.1"}
        assert {b.port for b in inside.values()}.isdisjoint(ports.values())

        topic = f"external-{uuid.uuid4().hex[:6]}"
        [created] = admin.create_topics([NewTopic(topic, 1, 2)]).values()
        created.result(timeout=15)
        producer = Producer({**external, "acks": "all", "enable.idempotence": True})
        values = [f"v{i}".encode() for i in range(20)]
        for value in values:
            producer.produce(topic, value)
        assert producer.flush(30) == 0
        assert earliest_and_values(external, topic) == (0, values)
