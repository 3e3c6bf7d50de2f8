"""`spec.listeners` and `spec.rack` (issue 34): the model's checks and the pure decisions of
`jbod_operator.listeners` (Services, Ingresses, per-broker config, certificate names, status),
each listener type with and without overrides, before and after Kubernetes assigns addresses,
and across a scale-up; the broker's config is read back by the agent's own parser.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from jbod_agent.config import parse_config
from jbod_core.replica_selector import RACK_AWARE_SELECTOR
from jbod_operator import builders, listeners, model, names, rotation
from tests.operator.test_model_builders import OWNER, _mounts_resolve, example

ROOT = Path(__file__).resolve().parents[2]
TLS = {"enabled": True}


def spec_with(listener_specs: list[dict[str, Any]], *, brokers: int = 2, **extra: Any) -> model.ClusterSpec:
    data = copy.deepcopy(example()["spec"])
    data.update({"brokers": brokers, "listeners": listener_specs, **extra})
    data.setdefault("config", {}).pop("defaultReplicationFactor", None)
    return model.parse_cluster("demo", data)


def serving(
    spec: model.ClusterSpec, ids: list[int], assigned: listeners.Assigned, *, settled: bool = True
) -> dict[int, listeners.BrokerServes]:
    """What the brokers serve once each registered every listener at the address the operator
    computes and holds the certificate the operator issues for it (issued `propagation` ago
    unless not `settled`)."""
    advertised: dict[int, dict[str, tuple[str, int]]] = {b: {} for b in ids}
    for listener, entry in zip(
        spec.listeners, listeners.status(spec, "demo", "ns", ids, assigned, serving=None), strict=True
    ):
        for address in entry.addresses:
            advertised[address.broker][listener.kafka_name] = (address.host, address.port)
    issued = builders.tls_certificates(spec, "demo", "ns", ids, assigned)
    return {
        b: listeners.BrokerServes(
            advertised=advertised[b],
            certificate_names=frozenset(issued.get(names.broker_tls("demo", b), ("", ()))[1]),
            certificate_settled=settled,
        )
        for b in ids
    }


def node(
    name: str, *, external: str | None = None, internal: str = "10.0.0.1", zone: str | None = "a"
) -> dict[str, Any]:
    addresses = [{"type": "InternalIP", "address": internal}, {"type": "Hostname", "address": name}]
    if external:
        addresses.insert(0, {"type": "ExternalIP", "address": external})
    labels = {} if zone is None else {"topology.kubernetes.io/zone": zone}
    return {"metadata": {"name": name, "labels": labels}, "status": {"addresses": addresses}}


def test_without_listeners_and_rack_nothing_changes() -> None:
    spec = model.parse_cluster("demo", example()["spec"])
    added = listeners.broker_listeners(spec, "demo", "ns", 1, listeners.Assigned())
    assert added == listeners.BrokerListeners() and not added.node_info
    plain = builders.server_properties(spec, "demo", "ns", 1, spec.disks)
    assert builders.server_properties(spec, "demo", "ns", 1, spec.disks, added) == plain
    claims = {d.name: f"c-{d.name}" for d in spec.disks}
    pod = builders.broker_pod(spec, "demo", "ns", 1, disks=spec.disks, claims=claims, image="i", owner=OWNER)
    same = builders.broker_pod(
        spec, "demo", "ns", 1, disks=spec.disks, claims=claims, image="i", owner=OWNER, listeners=added
    )
    assert pod == same
    assert listeners.objects(spec, "demo", "ns", [0, 1], OWNER) == []
    assert listeners.status(spec, "demo", "ns", [0, 1], listeners.Assigned(), serving={}) == []


@pytest.mark.parametrize(
    ("listener_specs", "extra", "needle"),
    [
        ([{"name": "ext", "port": 9092, "type": "nodeport"}], {}, "spec.listeners.0.port: 9092 is reserved"),
        ([{"name": "ssl", "port": 9095, "type": "nodeport"}], {}, "'ssl' is reserved"),
        ([{"name": "Ext", "port": 9095, "type": "nodeport"}], {}, "spec.listeners.0.name"),
        (
            [
                {"name": "a", "port": 9095, "type": "nodeport"},
                {"name": "a", "port": 9096, "type": "nodeport"},
            ],
            {},
            "spec.listeners.1.name: 'a' is listed twice",
        ),
        (
            [
                {"name": "a", "port": 9095, "type": "nodeport"},
                {"name": "b", "port": 9095, "type": "nodeport"},
            ],
            {},
            "spec.listeners.1.port: 9095 is taken",
        ),
        ([{"name": "a", "port": 9095, "type": "nodeport", "tls": True}], {}, "needs spec.tls.enabled"),
        (
            [{"name": "a", "port": 9095, "type": "nodeport", "authentication": {"type": "tls"}}],
            {},
            "needs tls: true",
        ),
        ([{"name": "a", "port": 9095, "type": "ingress"}], {"tls": TLS}, "an ingress listener needs tls"),
        ([{"name": "a", "port": 9095, "type": "ingress", "tls": True}], {"tls": TLS}, "bootstrap.host"),
        (
            [
                {
                    "name": "a",
                    "port": 9095,
                    "type": "ingress",
                    "tls": True,
                    "configuration": {
                        "bootstrap": {"host": "b.example"},
                        "brokers": [{"broker": 0, "host": "h0"}],
                    },
                }
            ],
            {"tls": TLS},
            "brokers[].host for every broker",
        ),
        (
            [
                {
                    "name": "a",
                    "port": 9095,
                    "type": "cluster-ip",
                    "configuration": {"bootstrap": {"nodePort": 31000}},
                }
            ],
            {},
            "nodePort is for type nodeport",
        ),
        (
            [
                {
                    "name": "a",
                    "port": 9095,
                    "type": "nodeport",
                    "configuration": {
                        "bootstrap": {"nodePort": 31000},
                        "brokers": [{"broker": 0, "nodePort": 31000}],
                    },
                }
            ],
            {},
            "node port 31000 is used twice",
        ),
        (
            [
                {
                    "name": "a",
                    "port": 9095,
                    "type": "nodeport",
                    "configuration": {"bootstrap": {"nodePort": 80}},
                }
            ],
            {},
            "nodePort",
        ),
        ([{"name": "a", "port": 9095, "type": "udp"}], {}, "spec.listeners.0.type"),
    ],
)
def test_bad_listeners_name_the_field(
    listener_specs: list[dict[str, Any]], extra: dict[str, Any], needle: str
) -> None:
    with pytest.raises(model.SpecError) as raised:
        spec_with(listener_specs, **extra)
    assert needle in str(raised.value), str(raised.value)


def _config(
    spec: model.ClusterSpec, broker_id: int, assigned: listeners.Assigned, tmp: Path | None = None
) -> Any:
    added = listeners.broker_listeners(spec, "demo", "ns", broker_id, assigned)
    text = builders.server_properties(spec, "demo", "ns", broker_id, spec.disks, added)
    provided = {listeners.NODE_INFO_FILE: {"advertised.host.EXT": "203.0.113.7", "rack": "zone-a"}}
    return parse_config(text, None, provided), added


def test_nodeport_scram_listener_end_to_end_of_the_decisions() -> None:
    """A nodeport listener with SCRAM: Services (bootstrap + one per broker, node ports given or
    assigned), the broker's config as the agent reads it (the node's address through the
    node-info file), the node-info init container, the status before and after assignment."""
    spec = spec_with(
        [
            {
                "name": "ext",
                "port": 9095,
                "type": "nodeport",
                "authentication": {"type": "scram-sha-512"},
                "configuration": {
                    "bootstrap": {"nodePort": 32100},
                    "brokers": [{"broker": 1, "nodePort": 32101}],
                    "preferredNodePortAddressType": "InternalIP",
                },
            }
        ],
        rack={"topologyKey": "topology.kubernetes.io/zone"},
    )
    made = listeners.objects(spec, "demo", "ns", [0, 1], OWNER)
    assert [(m["kind"], m["metadata"]["name"], m["spec"]["type"]) for m in made] == [
        ("Service", "demo-ext-bootstrap", "NodePort"),
        ("Service", "demo-broker-0-ext", "NodePort"),
        ("Service", "demo-broker-1-ext", "NodePort"),
    ]
    assert made[0]["spec"]["ports"] == [
        {"name": "kafka", "port": 9095, "targetPort": 9095, "protocol": "TCP", "nodePort": 32100}
    ]
    assert "nodePort" not in made[1]["spec"]["ports"][0]  # Kubernetes assigns it
    assert made[1]["spec"]["selector"] == {**names.broker_selector("demo"), names.LABEL_BROKER: "0"}
    assert all(m["metadata"]["ownerReferences"][0]["uid"] == "u-1" for m in made)

    # Broker 0's Service has no node port yet: it does not advertise the listener.
    config0, added0 = _config(spec, 0, listeners.Assigned())
    assert added0.pending == ("ext",)
    assert [k.name for k in config0.kafka_listeners] == ["SASL_PLAINTEXT"]
    assert config0.rack == "zone-a"
    assert config0.replica_selector_class == RACK_AWARE_SELECTOR  # spec.rack.followerFetching's default
    # Broker 1's port is given; its host is its node's address, read from the node-info file.
    config1, _ = _config(spec, 1, listeners.Assigned())
    assert [(k.name, k.security_protocol, k.port) for k in config1.kafka_listeners] == [
        ("SASL_PLAINTEXT", "SASL_PLAINTEXT", names.KAFKA_PORT),
        ("EXT", "SASL_PLAINTEXT", 9095),
    ]
    assert [str(k) for k in config1.advertised_kafka_listeners] == [
        "SASL_PLAINTEXT://demo-broker-1.demo-brokers.ns.svc:9092",
        "EXT://203.0.113.7:32101",
    ]
    assert config1.inter_broker_listener.name == "SASL_PLAINTEXT"  # replication stays inside
    # Once assigned, broker 0 advertises it too.
    assigned = listeners.assigned_from(
        [
            {
                **made[1],
                "spec": {**made[1]["spec"], "ports": [{**made[1]["spec"]["ports"][0], "nodePort": 31555}]},
            }
        ],
        {0: node("n0", external="198.51.100.1", internal="10.0.0.1"), 1: node("n1", internal="10.0.0.2")},
    )
    config0, added0 = _config(spec, 0, assigned)
    assert [str(k) for k in config0.advertised_kafka_listeners][1] == "EXT://203.0.113.7:31555"
    assert added0.node_addresses == (("EXT", "InternalIP"),) and added0.pending == ()

    pod = builders.broker_pod(
        spec,
        "demo",
        "ns",
        0,
        disks=spec.disks,
        claims={d.name: "c" for d in spec.disks},
        image="i",
        owner=OWNER,
        listeners=added0,
    )["spec"]
    init = pod["initContainers"][0]
    assert init["name"] == "node-info" and pod["initContainers"][1]["name"] == "format"
    assert init["args"] == [
        f"--out={listeners.NODE_INFO_FILE}",
        "--node=$(NODE_NAME)",
        "--listener=EXT:InternalIP",
        "--rack-label=topology.kubernetes.io/zone",
    ]
    assert pod["serviceAccountName"] == "demo-broker" and pod["automountServiceAccountToken"] is False
    for container in pod["containers"]:  # only the init container holds the token
        assert not any("serviceaccount" in m["mountPath"] for m in container["volumeMounts"])
        assert {"name": "node-info", "mountPath": listeners.NODE_INFO_DIR, "readOnly": True} in container[
            "volumeMounts"
        ]
    _mounts_resolve(pod)  # every mount declared, read-only roots, /tmp everywhere
    account, binding = builders.broker_rbac("demo", "ns", OWNER)
    assert binding["roleRef"]["name"] == builders.BROKER_NODE_READER
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "ns"}
    ]

    # Status: the operator's view of the nodes (InternalIP preferred), the bootstrap over them.
    [entry] = listeners.status(spec, "demo", "ns", [0, 1], assigned, serving=serving(spec, [0, 1], assigned))
    assert entry.as_status() == {
        "name": "ext",
        "type": "nodeport",
        "ready": True,
        "bootstrapServers": "10.0.0.1:32100,10.0.0.2:32100",
        "addresses": [
            {"broker": 0, "host": "10.0.0.1", "port": 31555},
            {"broker": 1, "host": "10.0.0.2", "port": 32101},
        ],
    }
    [early] = listeners.status(spec, "demo", "ns", [0, 1], listeners.Assigned(), serving={})
    assert early.ready is False and early.bootstrap_servers is None and early.addresses == ()

    # The node-info container's own decision.
    assert listeners.node_properties(
        node("n0", external="198.51.100.1"), [("EXT", None)], "topology.kubernetes.io/zone"
    ) == {
        "advertised.host.EXT": "198.51.100.1",
        "rack": "a",
    }
    assert listeners.node_properties(node("n0", external="198.51.100.1"), [("EXT", "InternalIP")], None) == {
        "advertised.host.EXT": "10.0.0.1"
    }
    with pytest.raises(ValueError, match=r"no label topology\.kubernetes\.io/zone"):
        listeners.node_properties(node("n0", zone=None), [], "topology.kubernetes.io/zone")


def test_loadbalancer_tls_listener_waits_for_its_address_and_names_it_in_the_certificate() -> None:
    spec = spec_with(
        [
            {
                "name": "lb",
                "port": 9096,
                "type": "loadbalancer",
                "tls": True,
                "authentication": {"type": "tls"},
                "configuration": {
                    "bootstrap": {"annotations": {"cloud/lb": "internal"}, "loadBalancerIP": "192.0.2.10"},
                    "brokers": [
                        {
                            "broker": 1,
                            "advertisedHost": "kafka-1.example.com",
                            "annotations": {"cloud/lb": "x"},
                        }
                    ],
                },
            }
        ],
        tls=TLS,
    )
    made = listeners.objects(spec, "demo", "ns", [0, 1], OWNER)
    assert [(m["metadata"]["name"], m["spec"]["type"]) for m in made] == [
        ("demo-lb-bootstrap", "LoadBalancer"),
        ("demo-broker-0-lb", "LoadBalancer"),
        ("demo-broker-1-lb", "LoadBalancer"),
    ]
    assert made[0]["metadata"]["annotations"] == {"cloud/lb": "internal"}
    assert made[0]["spec"]["loadBalancerIP"] == "192.0.2.10"
    assert made[2]["metadata"]["annotations"] == {"cloud/lb": "x"}

    nothing = listeners.Assigned()
    assert listeners.broker_listeners(spec, "demo", "ns", 0, nothing).pending == ("lb",)
    config1, _ = _config(spec, 1, nothing)  # its advertised host is given: no wait
    external = next(k for k in config1.kafka_listeners if k.name == "LB")
    assert (external.security_protocol, config1.client_auth_of(external)) == ("SSL", "required")
    assert "LB://kafka-1.example.com:9096" in [str(k) for k in config1.advertised_kafka_listeners]

    services = [
        {**made[0], "status": {"loadBalancer": {"ingress": [{"hostname": "lb-boot.elb.example"}]}}},
        {**made[1], "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.20"}]}}},
        made[2],
    ]
    assigned = listeners.assigned_from(services, {})
    config0, _ = _config(spec, 0, assigned)
    assert "LB://192.0.2.20:9096" in [str(k) for k in config0.advertised_kafka_listeners]
    [entry] = listeners.status(spec, "demo", "ns", [0, 1], assigned, serving=serving(spec, [0, 1], assigned))
    assert (entry.bootstrap_servers, entry.ready) == ("lb-boot.elb.example:9096", True)
    assert listeners.bootstrap_servers(spec, "demo", "ns", [0, 1], assigned) == {
        "lb": "lb-boot.elb.example:9096"
    }

    wanted = builders.tls_certificates(spec, "demo", "ns", [0, 1], assigned)
    broker0 = wanted[names.broker_tls("demo", 0)][1]
    assert {
        "192.0.2.20",
        "lb-boot.elb.example",
        "demo-lb-bootstrap.ns.svc",
        "demo-broker-0-lb.ns.svc",
    } <= set(broker0)
    assert "kafka-1.example.com" in wanted[names.broker_tls("demo", 1)][1]
    # Without TLS on the listener the certificates do not change.
    plain = spec_with([{"name": "lb", "port": 9096, "type": "loadbalancer"}], tls=TLS)
    base = model.parse_cluster("demo", {**example()["spec"], "tls": TLS})
    assert builders.tls_certificates(plain, "demo", "ns", [0], assigned) == builders.tls_certificates(
        base, "demo", "ns", [0]
    )


def test_an_ip_address_among_the_names_is_a_certificate_ip_address() -> None:
    import datetime as dt

    from cryptography import x509

    from jbod_operator import certificates

    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    ca = certificates.make_ca("ca", days=30, now=now)
    pair = certificates.issue(ca, "b", ("b.ns.svc", "192.0.2.20"), days=10, now=now)
    san = (
        x509.load_pem_x509_certificate(pair.cert_pem.encode())
        .extensions.get_extension_for_class(x509.SubjectAlternativeName)
        .value
    )
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["192.0.2.20"]
    assert san.get_values_for_type(x509.DNSName) == ["b.ns.svc"]
    assert certificates.describe(pair.cert_pem).dns_names == frozenset({"b.ns.svc", "192.0.2.20"})


def test_ingress_cluster_ip_and_internal_listeners() -> None:
    spec = spec_with(
        [
            {
                "name": "ing",
                "port": 9097,
                "type": "ingress",
                "tls": True,
                "authentication": {"type": "scram-sha-512"},
                "configuration": {
                    "class": "nginx",
                    "bootstrap": {"host": "kafka.example.com"},
                    "brokers": [
                        {"broker": 0, "host": "b0.example.com"},
                        {"broker": 1, "host": "b1.example.com"},
                    ],
                },
            },
            {"name": "cip", "port": 9098, "type": "cluster-ip"},
            {"name": "inside", "port": 9099, "type": "internal", "tls": True},
        ],
        tls=TLS,
    )
    made = listeners.objects(spec, "demo", "ns", [0, 1], OWNER)
    assert [(m["kind"], m["metadata"]["name"]) for m in made] == [
        ("Service", "demo-ing-bootstrap"),
        ("Ingress", "demo-ing-bootstrap"),
        ("Service", "demo-broker-0-ing"),
        ("Ingress", "demo-broker-0-ing"),
        ("Service", "demo-broker-1-ing"),
        ("Ingress", "demo-broker-1-ing"),
        ("Service", "demo-cip-bootstrap"),
        ("Service", "demo-broker-0-cip"),
        ("Service", "demo-broker-1-cip"),
        ("Service", "demo-inside-bootstrap"),
    ]
    ingress = made[3]
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/ssl-passthrough"] == "true"
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["rules"][0]["host"] == "b0.example.com"
    assert ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"] == {
        "service": {"name": "demo-broker-0-ing", "port": {"number": 9097}}
    }
    assert {m["spec"]["type"] for m in made if m["kind"] == "Service"} == {"ClusterIP"}

    config, added = _config(spec, 0, listeners.Assigned())
    assert added.pending == () and not added.node_info
    assert [(k.name, k.security_protocol) for k in config.kafka_listeners] == [
        ("SASL_SSL", "SASL_SSL"),
        ("SSL", "SSL"),
        ("ING", "SASL_SSL"),
        ("CIP", "PLAINTEXT"),
        ("INSIDE", "SSL"),
    ]
    assert [str(k) for k in config.advertised_kafka_listeners][2:] == [
        "ING://b0.example.com:443",
        "CIP://demo-broker-0-cip.ns.svc:9098",
        "INSIDE://demo-broker-0.demo-brokers.ns.svc:9099",
    ]
    inside = config.kafka_listeners[4]
    assert config.client_auth_of(inside) == "none"  # no authentication: no certificate asked
    statuses = {
        s.name: s.as_status()
        for s in listeners.status(
            spec,
            "demo",
            "ns",
            [0, 1],
            listeners.Assigned(),
            serving=serving(spec, [0, 1], listeners.Assigned()),
        )
    }
    assert statuses["ing"]["bootstrapServers"] == "kafka.example.com:443"
    assert statuses["cip"]["bootstrapServers"] == "demo-cip-bootstrap.ns.svc:9098"
    assert statuses["inside"]["addresses"][1] == {
        "broker": 1,
        "host": "demo-broker-1.demo-brokers.ns.svc",
        "port": 9099,
    }
    assert all(s["ready"] for s in statuses.values())
    names0 = builders.tls_certificates(spec, "demo", "ns", [0])[names.broker_tls("demo", 0)][1]
    assert {"b0.example.com", "kafka.example.com", "demo-inside-bootstrap.ns.svc"} <= set(names0)
    assert "b1.example.com" not in names0


def test_scaling_adds_and_removes_each_brokers_objects_and_addresses() -> None:
    listener = {"name": "ext", "port": 9095, "type": "cluster-ip"}
    two = {
        m["metadata"]["name"] for m in listeners.objects(spec_with([listener]), "demo", "ns", [0, 1], OWNER)
    }
    three = {
        m["metadata"]["name"]
        for m in listeners.objects(spec_with([listener], brokers=3), "demo", "ns", [0, 1, 2], OWNER)
    }
    assert three - two == {"demo-broker-2-ext"} and two < three
    # Scaling back down, or removing the listener: its objects are stale; built-in Services never.
    made = listeners.objects(spec_with([listener], brokers=3), "demo", "ns", [0, 1, 2], OWNER)
    builtin = builders.kafka_bootstrap_service("demo", "ns", OWNER)
    now = listeners.objects(spec_with([listener]), "demo", "ns", [0, 1], OWNER)
    assert listeners.stale([*made, builtin], now) == [("Service", "demo-broker-2-ext")]
    assert sorted(listeners.stale([*made, builtin], [])) == sorted(
        ("Service", m["metadata"]["name"]) for m in made
    )
    [entry] = listeners.status(
        spec_with([listener], brokers=3), "demo", "ns", [0, 1, 2], listeners.Assigned(), serving=None
    )
    assert [a.broker for a in entry.addresses] == [0, 1, 2]


def test_the_external_example_parses() -> None:
    data = yaml.safe_load((ROOT / "examples" / "jbodcluster-external.yaml").read_text())
    spec = model.parse_cluster(data["metadata"]["name"], data["spec"])
    assert {listener.type for listener in spec.listeners} >= {"nodeport"}
    assert spec.rack is not None


@pytest.mark.parametrize(
    ("rack", "selector"),
    [
        (None, None),
        ({"topologyKey": "topology.kubernetes.io/zone"}, RACK_AWARE_SELECTOR),
        ({"topologyKey": "topology.kubernetes.io/zone", "followerFetching": False}, None),
    ],
)
def test_follower_fetching_comes_with_racks_unless_turned_off(
    rack: dict[str, Any] | None, selector: str | None
) -> None:
    spec = spec_with([], rack=rack)
    added = listeners.broker_listeners(spec, "demo", "ns", 0, listeners.Assigned())
    text = builders.server_properties(spec, "demo", "ns", 0, spec.disks, added)
    provided = {listeners.NODE_INFO_FILE: {"rack": "zone-a"}}
    assert parse_config(text, None, provided).replica_selector_class == selector


def test_a_tls_nodeport_certificate_names_every_node_of_the_bootstrap() -> None:
    """The bootstrap node port of any node may reach any broker, so every broker's certificate
    names every broker's node address (a client checks the name of the address it dialled)."""
    spec = spec_with(
        [
            {
                "name": "secure",
                "port": 9096,
                "type": "nodeport",
                "tls": True,
                "authentication": {"type": "tls"},
                "configuration": {"bootstrap": {"nodePort": 32200}},
            }
        ],
        tls=TLS,
    )
    nodes = {0: node("n0", internal="10.0.0.10"), 1: node("n1", internal="10.0.0.11", external="203.0.113.1")}
    assigned = listeners.assigned_from([], nodes)
    [entry] = listeners.status(spec, "demo", "ns", [0, 1], assigned, serving=None)
    assert entry.bootstrap_servers == "10.0.0.10:32200,203.0.113.1:32200"
    wanted = builders.tls_certificates(spec, "demo", "ns", [0, 1], assigned)
    for broker_id in (0, 1):
        assert {"10.0.0.10", "203.0.113.1"} <= set(wanted[names.broker_tls("demo", broker_id)][1])


def test_a_tls_nodeport_listener_is_ready_once_every_broker_serves_a_certificate_naming_its_node() -> None:
    """`ready` needs more than the addresses: every broker registered the listener at its
    address, and its certificate names its node's address and the bootstrap's, issued long
    enough ago for the pod's files to hold it. A re-issue at the same addresses keeps `ready`;
    a move to another node does not."""
    secure = {"name": "secure", "port": 9096, "type": "nodeport", "tls": True}
    spec = spec_with([{**secure, "configuration": {"bootstrap": {"nodePort": 32200}}}], tls=TLS)
    [listener] = spec.listeners
    ports = {listeners.broker_service("demo", b, listener): 31000 + b for b in (0, 1)}
    assigned = listeners.assigned_from(
        [
            {"metadata": {"name": name}, "spec": {"ports": [{"nodePort": port}]}}
            for name, port in ports.items()
        ],
        {0: node("n0", internal="10.0.0.10"), 1: node("n1", internal="10.0.0.11")},
    )

    def ready(served: dict[int, listeners.BrokerServes] | None, previous: list[Any] | None = None) -> bool:
        [entry] = listeners.status(
            spec, "demo", "ns", [0, 1], assigned, serving=served, previous=previous or []
        )
        return entry.ready

    settled = serving(spec, [0, 1], assigned)
    assert settled[0].advertised == {"SECURE": ("10.0.0.10", 31000)}
    assert {"10.0.0.10", "10.0.0.11"} <= settled[1].certificate_names  # its own node and the bootstrap's
    assert ready(settled)
    assert not ready({})  # no broker registered yet
    assert not ready({0: settled[0]})  # broker 1 has not
    # Broker 1 still advertises its previous node's address.
    moved = dataclasses.replace(settled[1], advertised={"SECURE": ("10.0.0.99", 31001)})
    assert not ready({0: settled[0], 1: moved})
    # The certificates issued before the nodes were known name no node address.
    before_nodes = builders.tls_certificates(spec, "demo", "ns", [0, 1])
    unnamed = {
        b: dataclasses.replace(
            settled[b], certificate_names=frozenset(before_nodes[names.broker_tls("demo", b)][1])
        )
        for b in (0, 1)
    }
    assert not ready(unnamed)
    # Re-issued with the nodes' addresses, but too recently for the pods' files to hold it.
    fresh = serving(spec, [0, 1], assigned, settled=False)
    assert not ready(fresh)

    # Ready before at the same addresses: a re-issue naming them too keeps it ready (whichever
    # file a pod has names them); at other addresses it does not; a re-issue naming less does not.
    [was] = listeners.status(spec, "demo", "ns", [0, 1], assigned, serving=settled)
    assert ready(fresh, [was.as_status()])
    elsewhere = {**was.as_status(), "bootstrapServers": "10.0.0.99:32200,10.0.0.11:32200"}
    assert not ready(fresh, [elsewhere])
    assert not ready(
        {b: dataclasses.replace(unnamed[b], certificate_settled=False) for b in (0, 1)}, [was.as_status()]
    )
    # Without the controller's view: ready only if it was, at the same addresses.
    assert ready(None, [was.as_status()]) and not ready(None) and not ready(None, [elsewhere])


def test_broker_serves_reads_the_registration_and_the_certificates_age() -> None:
    registration = {
        "brokerId": 0,
        "listeners": [
            {"name": "http", "host": "demo-broker-0.demo-brokers.ns.svc", "port": 8080},
            {"name": "SECURE", "host": "10.0.0.10", "port": 31000},
        ],
    }
    issued = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    leaf = rotation.Certificate(
        fingerprint="f",
        issuer="ca",
        not_before=issued,
        not_after=issued + dt.timedelta(days=365),
        dns_names=frozenset({"10.0.0.10"}),
        issued_at=issued,
    )
    wait = dt.timedelta(minutes=1)
    early = listeners.broker_serves(registration, leaf, now=issued + wait / 2, propagation=wait)
    assert early.advertised["SECURE"] == ("10.0.0.10", 31000)
    assert early.certificate_names == {"10.0.0.10"} and not early.certificate_settled
    assert listeners.broker_serves(
        registration, leaf, now=issued + wait, propagation=wait
    ).certificate_settled
    assert listeners.broker_serves(None, None, now=issued, propagation=wait) == listeners.BrokerServes()
