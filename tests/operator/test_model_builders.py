"""Spec parsing and manifest builders of the operator (pure functions, no API server).

Covers: the example cluster parses; invalid specs name the field; the broker pod carries the
readiness gate, the format init container, a mount per disk and a config pointing at them; the
spec hash changes with a disk and not with nothing; data claims have no owner; the CRD files
describe the fields the models read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from jbod_agent.config import parse_config
from jbod_operator import builders, model, names

ROOT = Path(__file__).resolve().parents[2]
OWNER = {"apiVersion": "jbod.dev/v1alpha1", "kind": "JbodCluster", "metadata": {"name": "demo", "uid": "u-1"}}


def example() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "jbodcluster.yaml").read_text())
    return data


def test_kind_example_parses_and_fits_one_small_node() -> None:
    """examples/jbodcluster-kind.yaml (README "On Kubernetes") is valid and small: 3 brokers whose
    CPU requests leave a 2-core kind node room for its control plane."""
    data = yaml.safe_load((ROOT / "examples" / "jbodcluster-kind.yaml").read_text())
    spec = model.parse_cluster("demo", data["spec"])
    assert spec.brokers == 3 and [d.name for d in spec.disks] == ["d0", "d1"]
    cpu = data["spec"]["resources"]["requests"]["cpu"]
    assert cpu.endswith("m") and 3 * int(cpu[:-1]) <= 500


def test_example_parses() -> None:
    spec = model.parse_cluster("demo", example()["spec"])
    assert [d.name for d in spec.disks] == ["d0", "d1", "d2"]
    assert spec.disk_failure_policy == "Automatic"
    assert spec.replication_factor() == 3
    assert spec.disks[0].size_bytes == 100 * 2**30


@pytest.mark.parametrize(
    ("name", "patch", "needle"),
    [
        ("demo", {"brokers": 0}, "spec.brokers"),
        ("demo", {"disks": []}, "spec.disks"),
        ("demo", {"disks": [{"name": "D0", "size": "1Gi"}]}, "spec.disks.0.name"),
        ("demo", {"disks": [{"name": "metadata", "size": "1Gi"}]}, "reserved"),
        ("demo", {"disks": [{"name": "d0", "size": "lots"}]}, "spec.disks.0.size"),
        ("demo", {"disks": [{"name": "d0", "size": "1Gi"}, {"name": "d0", "size": "2Gi"}]}, "listed twice"),
        ("demo", {"brokers": 2, "config": {"defaultReplicationFactor": 3}}, "defaultReplicationFactor"),
        ("demo", {"config": {"heartbeatIntervalMs": 9000}}, "heartbeatIntervalMs"),
        ("demo", {"diskFailurePolicy": "Sometimes"}, "diskFailurePolicy"),
        ("x" * 41, {}, "metadata.name"),
    ],
)
def test_invalid_specs_name_the_field(name: str, patch: dict[str, Any], needle: str) -> None:
    spec = {**example()["spec"], **patch}
    with pytest.raises(model.SpecError) as raised:
        model.parse_cluster(name, spec)
    assert needle in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("text", "expected"), [("1Gi", 2**30), ("1.5Ki", 1536), ("2G", 2 * 10**9), ("10", 10)]
)
def test_quantities(text: str, expected: int) -> None:
    assert model.quantity_bytes(text) == expected


def _pod(spec: model.ClusterSpec, disks: tuple[model.Disk, ...]) -> dict[str, Any]:
    claims = {d.name: names.claim("demo", 1, d.name, 0) for d in disks}
    return builders.broker_pod(spec, "demo", "ns", 1, disks=disks, claims=claims, image="img:1", owner=OWNER)


def test_broker_pod_shape() -> None:
    spec = model.parse_cluster("demo", example()["spec"])
    pod = _pod(spec, spec.disks)
    pod_spec = pod["spec"]
    assert pod_spec["readinessGates"] == [{"conditionType": "jbod.dev/unfenced"}]
    assert pod_spec["hostname"] == "demo-broker-1" and pod_spec["subdomain"] == "demo-brokers"
    [init] = pod_spec["initContainers"]
    assert init["command"] == ["jbod-storage"] and "--ignore-formatted" in init["args"]
    [agent] = pod_spec["containers"]
    assert agent["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in agent["volumeMounts"]}
    for disk in ("d0", "d1", "d2"):
        assert mounts[f"/var/lib/jbod/disks/{disk}"] == f"disk-{disk}"
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod_spec["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert claims["disk-d1"] == "demo-1-d1-g0" and claims["metadata"] == "demo-1-metadata"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    config = builders.server_properties(spec, "demo", "ns", 1, spec.disks)
    assert (
        "log.dirs=/var/lib/jbod/disks/d0/log,/var/lib/jbod/disks/d1/log,/var/lib/jbod/disks/d2/log\n"
        in config
    )
    assert (
        "advertised.listeners=SASL_PLAINTEXT://demo-broker-1.demo-brokers.ns.svc:9092,"
        "http://demo-broker-1.demo-brokers.ns.svc:9192\n"
    ) in config
    assert "controller.url=http://demo-controller.ns.svc:9093\n" in config
    assert "inter.broker.listener.name=SASL_PLAINTEXT\n" in config  # replication: Kafka's Fetch
    assert "min.insync.replicas=2\n" in config


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({}, (True, 1, 3)),  # Kafka's defaults, and the controller's default replication factor
        ({"autoCreateTopicsEnable": False, "numPartitions": 6, "defaultReplicationFactor": 2}, (False, 6, 2)),
    ],
)
def test_brokers_get_the_topic_auto_creation_keys_of_the_spec(
    config: dict[str, Any], expected: tuple[bool, int, int]
) -> None:
    spec = model.parse_cluster("demo", {**example()["spec"], "config": config})
    parsed = parse_config(builders.server_properties(spec, "demo", "ns", 1, spec.disks))
    settings = parsed.auto_create_settings
    assert (settings.enabled, settings.num_partitions, settings.replication_factor) == expected
    assert {"auto.create.topics.enable", "num.partitions", "default.replication.factor"} <= parsed.given_keys


@pytest.mark.parametrize("partitions", [0, 10_001])
def test_a_num_partitions_no_create_could_take_is_refused(partitions: int) -> None:
    with pytest.raises(model.SpecError, match=r"spec\.config\.numPartitions"):
        model.parse_cluster("demo", {**example()["spec"], "config": {"numPartitions": partitions}})


def test_spec_hash_follows_disks_and_config() -> None:
    spec = model.parse_cluster("demo", example()["spec"])
    same = _pod(spec, spec.disks)["metadata"]["annotations"][names.ANNOTATION_SPEC_HASH]
    assert same == _pod(spec, spec.disks)["metadata"]["annotations"][names.ANNOTATION_SPEC_HASH]
    fewer = _pod(spec, spec.disks[:2])["metadata"]["annotations"][names.ANNOTATION_SPEC_HASH]
    other = model.parse_cluster("demo", {**example()["spec"], "config": {"minInsyncReplicas": 1}})
    changed = _pod(other, other.disks)["metadata"]["annotations"][names.ANNOTATION_SPEC_HASH]
    assert len({same, fewer, changed}) == 3


def test_claims_are_never_owned() -> None:
    spec = model.parse_cluster("demo", example()["spec"])
    claim = builders.volume_claim("demo", "ns", 2, disk="d1", volume=spec.disks[1], generation=3)
    assert claim["metadata"]["name"] == "demo-2-d1-g3"
    assert "ownerReferences" not in claim["metadata"]
    assert claim["metadata"]["labels"][names.LABEL_GENERATION] == "3"
    assert claim["spec"]["resources"]["requests"]["storage"] == "100Gi"


def test_controller_statefulset_passes_topic_defaults() -> None:
    spec = model.parse_cluster("demo", example()["spec"])
    sts = builders.controller_statefulset(spec, "demo", "ns", image="img:1", owner=OWNER)
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--default-replication-factor=3" in args and "--default-min-insync-replicas=2" in args
    assert "--cluster-id=$(JBOD_CLUSTER_ID)" in args


def _quorum_spec(**etcd: Any) -> model.ClusterSpec:
    data = example()["spec"]
    data["controller"] = {**data["controller"], "replicas": 3, "etcd": etcd}
    return model.parse_cluster("demo", data)


def test_a_controller_quorum_runs_three_controllers_on_the_operators_etcd() -> None:
    spec = _quorum_spec()
    assert spec.controller.quorum and spec.controller.runs_etcd
    sts = builders.controller_statefulset(spec, "demo", "ns", image="img:1", owner=OWNER)
    assert sts["spec"]["replicas"] == 3
    container = sts["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    endpoints = ",".join(f"http://demo-etcd-{n}.demo-etcd.ns.svc:2379" for n in range(3))
    assert f"--etcd-endpoints={endpoints}" in args
    assert "--node-id=$(POD_NAME)" in args
    assert "--advertised-url=http://$(POD_NAME).demo-controller.ns.svc:9093" in args
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    etcd = builders.etcd_statefulset(spec, "demo", "ns", owner=OWNER)
    assert etcd["spec"]["replicas"] == 3 and etcd["spec"]["podManagementPolicy"] == "Parallel"
    etcd_container = etcd["spec"]["template"]["spec"]["containers"][0]
    assert etcd_container["image"] == names.ETCD_IMAGE == "registry.k8s.io/etcd:3.6.8-0"
    assert etcd_container["imagePullPolicy"] == "IfNotPresent"
    etcd_args = etcd_container["args"]
    assert (
        "--initial-cluster="
        + ",".join(f"demo-etcd-{n}=http://demo-etcd-{n}.demo-etcd.ns.svc:2380" for n in range(3))
    ) in etcd_args
    service = builders.etcd_service("demo", "ns", OWNER)
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    props = builders.server_properties(spec, "demo", "ns", 0, spec.disks)
    urls = ",".join(f"http://demo-controller-{n}.demo-controller.ns.svc:9093" for n in range(3))
    assert f"controller.url={urls}" in props.splitlines()


def test_the_etcd_image_can_be_chosen() -> None:
    spec = _quorum_spec(image="mirror.example/etcd:3.6.9")
    etcd = builders.etcd_statefulset(spec, "demo", "ns", owner=OWNER)
    assert etcd["spec"]["template"]["spec"]["containers"][0]["image"] == "mirror.example/etcd:3.6.9"


def test_a_controller_quorum_on_an_existing_etcd_runs_none() -> None:
    spec = _quorum_spec(endpoints=["http://etcd-a:2379", "http://etcd-b:2379"])
    assert spec.controller.quorum and not spec.controller.runs_etcd
    sts = builders.controller_statefulset(spec, "demo", "ns", image="img:1", owner=OWNER)
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--etcd-endpoints=http://etcd-a:2379,http://etcd-b:2379" in args


def test_a_quorum_on_an_etcd_with_tls_mounts_the_secret_and_passes_the_files() -> None:
    spec = _quorum_spec(endpoints=["https://etcd-a:2379"], tlsSecret="etcd-client")
    sts = builders.controller_statefulset(spec, "demo", "ns", image="img:1", owner=OWNER)
    pod = sts["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    for flag, name in (("--etcd-cacert", "ca.crt"), ("--etcd-cert", "tls.crt"), ("--etcd-key", "tls.key")):
        assert f"{flag}={names.ETCD_TLS_DIR}/{name}" in args
    assert {"name": "etcd-tls", "secret": {"secretName": "etcd-client", "defaultMode": 0o440}} in pod[
        "volumes"
    ]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "etcd-tls", "mountPath": names.ETCD_TLS_DIR, "readOnly": True} in mounts


def test_one_controller_stays_as_it_was() -> None:
    spec = model.parse_cluster("demo", example()["spec"])
    assert not spec.controller.quorum and not spec.controller.runs_etcd
    sts = builders.controller_statefulset(spec, "demo", "ns", image="img:1", owner=OWNER)
    assert sts["spec"]["replicas"] == 1
    assert not any(
        a.startswith(("--etcd", "--node-id"))
        for a in sts["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    props = builders.server_properties(spec, "demo", "ns", 0, spec.disks)
    assert "controller.url=http://demo-controller.ns.svc:9093" in props.splitlines()


@pytest.mark.parametrize(
    ("controller", "needle"),
    [
        ({"replicas": 2}, "spec.controller.replicas"),
        ({"replicas": 3, "etcd": {"endpoints": ["etcd:2379"]}}, "http(s)://"),
        ({"replicas": 3, "etcd": {"tlsSecret": "s"}}, "give endpoints"),
        ({"replicas": 3, "etcd": {"endpoints": ["http://etcd:2379"], "tlsSecret": "s"}}, "needs https://"),
        (
            {"replicas": 3, "etcd": {"endpoints": ["http://etcd:2379"], "image": "etcd:1"}},
            "not used with endpoints",
        ),
    ],
)
def test_bad_quorum_specs_name_the_field(controller: dict[str, Any], needle: str) -> None:
    data = example()["spec"]
    data["controller"] = {**data["controller"], **controller}
    with pytest.raises(model.SpecError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        model.parse_cluster("demo", data)


def _schema(path: str) -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "crds" / path).read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_crds_describe_what_the_models_read() -> None:
    cluster = _schema("jbod.dev_jbodclusters.yaml")["properties"]["spec"]["properties"]
    aliases = {f.alias or n for n, f in model.ClusterSpec.model_fields.items()}
    assert aliases == set(cluster), aliases ^ set(cluster)
    settings = {f.alias for f in model.BrokerSettings.model_fields.values()}
    assert settings == set(cluster["config"]["properties"])
    broker = _schema("jbod.dev_jbodbrokers.yaml")["properties"]
    assert {f.alias or n for n, f in model.BrokerSpec.model_fields.items()} == set(
        broker["spec"]["properties"]
    )
    states = set(broker["status"]["properties"]["logDirs"]["items"]["properties"]["state"]["enum"])
    assert {"Online", "Offline", "Detached", "Full", "Draining"} <= states


def _mounts_resolve(pod_spec: dict[str, Any]) -> None:
    declared = {v["name"] for v in pod_spec["volumes"]}
    for container in [*pod_spec.get("initContainers", []), *pod_spec["containers"]]:
        for mount in container["volumeMounts"]:
            assert mount["name"] in declared, f"{container['name']} mounts undeclared volume {mount['name']}"
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"]), "a read-only root needs /tmp"


def test_every_mount_names_a_declared_volume() -> None:
    spec = model.parse_cluster("demo", example()["spec"])
    _mounts_resolve(_pod(spec, spec.disks)["spec"])
    sts = builders.controller_statefulset(spec, "demo", "ns", image="img:1", owner=OWNER)
    template = sts["spec"]["template"]["spec"]
    claim_templates = [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]]
    _mounts_resolve({**template, "volumes": [*template["volumes"], *({"name": n} for n in claim_templates)]})
    assert template["automountServiceAccountToken"] is False


# ---------------------------------------------------------------------------------------------
# spec.tls


def _tls_spec(**tls: Any) -> model.ClusterSpec:
    data = example()["spec"]
    data["tls"] = {"enabled": True, **tls}
    data["controller"] = {"replicas": 3}
    return model.parse_cluster("demo", data)


@pytest.mark.parametrize(
    ("tls", "needle"),
    [
        ({"issuer": "secret"}, "needs caSecret"),
        ({"caSecret": "mine"}, "only read with issuer: secret"),
        ({"validityDays": 30, "renewBeforeDays": 30}, "renewBeforeDays"),
        ({"validityDays": 1700}, "validityDays must fit"),
        ({"issuer": "vault"}, "spec.tls.issuer"),
    ],
)
def test_bad_tls_specs_name_the_field(tls: dict[str, Any], needle: str) -> None:
    with pytest.raises(model.SpecError, match=needle):
        _tls_spec(**tls)


def test_tls_defaults_and_no_tls_by_default() -> None:
    assert model.parse_cluster("demo", example()["spec"]).tls.enabled is False
    tls = _tls_spec().tls
    assert (tls.issuer, tls.validity_days, tls.renew_before_days, tls.ca_validity_days) == (
        "operator",
        365,
        30,
        1825,
    )


def test_with_tls_every_listener_is_tls_and_files_are_mounted_without_sub_path() -> None:
    spec = _tls_spec()
    text = builders.server_properties(spec, "demo", "ns", 1, spec.disks)
    props = dict(line.split("=", 1) for line in text.splitlines())
    host = "demo-broker-1.demo-brokers.ns.svc"
    assert props["listeners"] == "SASL_SSL://0.0.0.0:9092,SSL://0.0.0.0:9094,https://0.0.0.0:9192"
    assert props["advertised.listeners"] == f"SASL_SSL://{host}:9092,SSL://{host}:9094,https://{host}:9192"
    assert props["ssl.keystore.location"] == "/etc/jbod/tls/tls-combined.pem"
    assert props["ssl.truststore.location"] == "/etc/jbod/tls/ca.crt"
    assert props["ssl.keystore.type"] == props["ssl.truststore.type"] == "PEM"
    assert props["super.users"] == "User:admin"
    assert props["ssl.principal.mapping.rules"] == "RULE:^CN=(.*?)(,.*)?$/$1/"
    assert all(url.startswith("https://") for url in props["controller.url"].split(","))
    assert "http://" not in text and "PLAINTEXT" not in text

    pod = _pod(spec, spec.disks)
    [agent] = pod["spec"]["containers"]
    assert agent["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert {p["containerPort"] for p in agent["ports"]} == {9092, 9094, 9192}
    [tls_volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "tls"]
    sources = [s["secret"]["name"] for s in tls_volume["projected"]["sources"]]
    assert sources == ["demo-broker-1-tls", "demo-cluster-ca-cert"]
    for container in [*pod["spec"]["initContainers"], agent]:
        assert all("subPath" not in m for m in container["volumeMounts"])
    _mounts_resolve(pod["spec"])
    plain = _pod(model.parse_cluster("demo", example()["spec"]), spec.disks)
    assert plain["metadata"]["annotations"] != pod["metadata"]["annotations"]  # turning TLS on restarts


def test_with_tls_controllers_and_etcd_speak_tls_to_each_other() -> None:
    spec = _tls_spec()
    sts = builders.controller_statefulset(spec, "demo", "ns", image="img:1", owner=OWNER)
    [container] = sts["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert "--ssl-keystore-location=/etc/jbod/tls/tls-combined.pem" in args
    assert "--etcd-cacert=/etc/jbod/tls/ca.crt" in args and "--etcd-cert=/etc/jbod/tls/tls.crt" in args
    assert any(a.startswith("--advertised-url=https://") for a in args)
    [endpoints] = [a for a in args if a.startswith("--etcd-endpoints=")]
    assert endpoints.count("https://") == 3
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"

    etcd = builders.etcd_statefulset(spec, "demo", "ns", owner=OWNER)
    [member] = etcd["spec"]["template"]["spec"]["containers"]
    flags = set(member["args"])
    assert {
        "--client-cert-auth",
        "--peer-client-cert-auth",
        "--trusted-ca-file=/etc/jbod/tls/ca.crt",
    } <= flags
    assert all("http://" not in a for a in member["args"] if "-urls=" in a and "metrics" not in a)
    assert member["readinessProbe"]["httpGet"]["port"] == names.ETCD_METRICS_PORT

    wanted = builders.tls_certificates(spec, "demo", "ns", [0, 1, 2])
    assert set(wanted) == {
        "demo-broker-0-tls",
        "demo-broker-1-tls",
        "demo-broker-2-tls",
        "demo-controller-tls",
        "demo-etcd-tls",
    }
    assert "demo-controller-2.demo-controller.ns.svc" in wanted["demo-controller-tls"][1]
    assert "demo-kafka-bootstrap.ns.svc" in wanted["demo-broker-0-tls"][1]
    assert builders.tls_certificates(model.parse_cluster("demo", example()["spec"]), "demo", "ns", [0]) == {}


def test_cert_manager_pods_trust_the_bundle_of_their_own_secret() -> None:
    spec = _tls_spec(issuer="cert-manager")
    [tls_volume] = [v for v in _pod(spec, spec.disks)["spec"]["volumes"] if v["name"] == "tls"]
    [source] = tls_volume["projected"]["sources"]
    assert {i["key"] for i in source["secret"]["items"]} == {
        "tls-combined.pem",
        "tls.crt",
        "tls.key",
        "ca.crt",
    }


def test_the_client_secret_with_tls_holds_the_ca_and_sasl_ssl_properties() -> None:
    secret = builders.kafka_client_secret("demo", "ns", password="pw", owner=OWNER, ca_bundle="CA-PEM")
    data = secret["stringData"]
    assert data["ca.crt"] == "CA-PEM" and data["security.protocol"] == "SASL_SSL"
    assert "ssl.truststore.location=/etc/kafka-client/ca.crt" in data["client.properties"]
    assert "ssl.ca.location=/etc/kafka-client/ca.crt" in data["librdkafka.properties"]
    plain = builders.kafka_client_secret("demo", "ns", password="pw", owner=OWNER)["stringData"]
    assert "ca.crt" not in plain and plain["security.protocol"] == "SASL_PLAINTEXT"


def test_tls_example_parses_and_the_client_pod_mounts_the_users_secret_whole() -> None:
    data = yaml.safe_load((ROOT / "examples" / "jbodcluster-tls.yaml").read_text())
    spec = model.parse_cluster(data["metadata"]["name"], data["spec"])
    assert spec.tls.enabled and spec.tls.issuer == "operator"
    pod = yaml.safe_load((ROOT / "examples" / "kafka-client-tls.yaml").read_text())
    [client] = pod["spec"]["containers"]
    [mount] = [m for m in client["volumeMounts"] if m["name"] == "user"]
    assert mount["mountPath"] == names.CLIENT_SECRET_MOUNT and "subPath" not in mount


def test_applied_secrets_carry_data_that_decodes_to_what_was_given() -> None:
    import base64

    secret = builders.tls_secret(
        "demo-broker-0-tls", "demo", "ns", key_pem="KEY\n", cert_pem="CERT\n", chain="CA\n", owner=OWNER
    )
    assert secret["type"] == "kubernetes.io/tls" and "stringData" not in secret
    decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert decoded == {"tls.key": "KEY\n", "tls.crt": "CERT\nCA\n", "tls-combined.pem": "KEY\nCERT\nCA\n"}
    user = builders.user_secret("alice", "ns", "demo", {"password": "pw"}, owner=OWNER)
    assert base64.b64decode(user["data"]["password"]) == b"pw"


def test_pods_of_the_namespace_may_dial_the_services_short_names_over_tls() -> None:
    wanted = builders.tls_certificates(_tls_spec(), "demo", "ns", [0])
    assert {"demo-controller", "demo-controller.ns", "demo-controller.ns.svc"} <= set(
        wanted["demo-controller-tls"][1]
    )
    assert {"demo-kafka-bootstrap", "demo-kafka-bootstrap.ns"} <= set(wanted["demo-broker-0-tls"][1])
