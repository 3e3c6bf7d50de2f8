"""A JbodCluster with TLS and its JbodUsers on kind (issue 25): the operator's CA, the brokers'
certificates, SASL_SSL and SSL with client certificates, ACLs from the JbodUser specs.

1. A 3-broker `JbodCluster` with `spec.tls.enabled` (issuer operator) turns Ready: its brokers
   listen only with TLS (but on the example's SCRAM `external` listener, plain TCP by choice),
   `status.tls` names the trust Secret with one CA.
2. Two JbodUsers: `writer` (SCRAM-SHA-512, may write and read topics `orders-*` and use groups
   `orders-*`) and `reader` (a client certificate, may read `orders-*`). Both turn ready and their
   Secrets hold what the docs say.
3. A client pod mounting `writer`'s Secret produces and reads back over SASL_SSL with the
   Secret's `librdkafka.properties` as they are; the same pod without the CA is refused (the
   brokers' certificates are not trusted), and a topic outside its ACLs is refused.
4. A client pod mounting `reader`'s Secret reads the records over SSL with its certificate; without
   the certificate it is refused (ANONYMOUS has no ACL).
5. Deleting `writer` removes its Secret (the finalizer ran).
6. Rotation: while a client pod runs an acks=all idempotent producer and a consumer group, the
   CA is renewed (`jbod.dev/force-renew` on the CA Secret: same key), every pod's certificate is
   signed again, and the old CA certificate leaves the bundle. Nothing acknowledged is lost, the
   clients see no fatal error and no refused handshake, and a TLS connection made at the end with
   the bundle the client read at its start is served each broker's new certificate.
7. Issue 34 from the host, a client outside Kubernetes (the cluster has the listeners and rack of
   `examples/jbodcluster-external.yaml`): the brokers run one per zone and report their zones as
   racks; `status.listeners` gives the nodeport bootstrap addresses (the nodes' addresses);
   librdkafka produces through the SCRAM listener and reads through the client-certificate TLS
   listener (the certificates name the nodes' addresses); a JbodTopic has a replica in each zone;
   a consumer with `client.rack` is served by its zone's follower (librdkafka's statistics); a
   JbodUser with `producerByteRate` is held to it within 20 %; `kubectl drain` of a broker's node
   under an idempotent acks=all producer, then `uncordon`, loses no acknowledged record.
8. Deleting the JbodCluster deletes its brokers' node-reader ClusterRoleBinding (cluster-scoped,
   so no owner reference does), with no finalizer holding the cluster back.
"""

from __future__ import annotations

import base64
import json
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from cryptography import x509

from e2e.kind.cluster import KindCluster
from e2e.kind.images import PROJECT_IMAGE
from e2e.wait import wait_for
from tests.e2e.conftest import jbod_cluster
from tests.e2e.outside import (
    SteadyProducer,
    produced_rate,
    read_partition,
    read_topic,
    scram_config,
    tls_config,
)
from tests.e2e.outside import racks as outside_racks
from tests.e2e.outside import replicas as outside_replicas

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(1800)]

NS = "jbod-tls"
CLUSTER = "sec"


EXAMPLE = Path(__file__).parents[2] / "examples" / "jbodcluster-external.yaml"


def cluster_spec() -> dict[str, Any]:
    """The tier's small cluster with TLS, and the listeners and rack of
    `examples/jbodcluster-external.yaml` as they are."""
    example = yaml.safe_load(EXAMPLE.read_text())["spec"]
    return jbod_cluster(
        CLUSTER,
        NS,
        disks=1,
        config={
            "heartbeatIntervalMs": 500,
            "sessionTimeoutMs": 4000,
            "minInsyncReplicas": 2,
            "defaultReplicationFactor": 3,
        },
        tls={"enabled": True},
        listeners=example["listeners"],
        rack=example["rack"],
    )


def user(name: str, authentication: str, acls: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "jbod.dev/v1alpha1",
        "kind": "JbodUser",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "cluster": CLUSTER,
            "authentication": {"type": authentication},
            "authorization": {"acls": acls},
        },
    }


WRITER_ACLS = [
    {
        "resource": {"type": "topic", "name": "orders-", "patternType": "prefix"},
        "operations": ["Write", "Read", "Describe"],
    },
    {"resource": {"type": "group", "name": "orders-", "patternType": "prefix"}, "operations": ["Read"]},
    {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite"]},
]
READER_ACLS = [
    {
        "resource": {"type": "topic", "name": "orders-", "patternType": "prefix"},
        "operations": ["Read", "Describe"],
    },
    {"resource": {"type": "group", "name": "orders-", "patternType": "prefix"}, "operations": ["Read"]},
]

# Run in a client pod with a user's Secret at /etc/kafka-client. argv: produce|consume, topic,
# and "as-is" (the Secret's librdkafka.properties), "no-ca" (without ssl.ca.location) or
# "no-cert" (without the client certificate). Prints one line: "ok N" or "refused <error>".
CLIENT = textwrap.dedent(
    """
    import sys
    import uuid
    from confluent_kafka import Consumer, Producer
    mode, topic, variant = sys.argv[1:4]
    with open("/etc/kafka-client/librdkafka.properties") as f:
        conf = dict(line.split("=", 1) for line in f.read().splitlines() if line)
    if variant == "no-ca":
        conf.pop("ssl.ca.location")
    if variant == "no-cert":
        conf.pop("ssl.certificate.location"); conf.pop("ssl.key.location")
    errors = []
    conf["error_cb"] = lambda err: errors.append(err)
    try:
        if mode == "produce":
            acked, failed = [], []
            producer = Producer({**conf, "enable.idempotence": True, "acks": "all", "message.timeout.ms": 20000})
            for i in range(50):
                producer.produce(topic, f"order-{i}".encode(),
                                 on_delivery=lambda e, m: failed.append(e) if e else acked.append(m))
            producer.flush(40)
            print(f"ok {len(acked)}" if len(acked) == 50 else f"refused {(failed or errors or ['timeout'])[0]}", flush=True)
        else:
            group = f"orders-{uuid.uuid4().hex[:8]}"  # a new group: reads from the start
            consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
            consumer.subscribe([topic])
            seen, idle = set(), 0
            while len(seen) < 50 and idle < 25:
                msg = consumer.poll(1.0)
                if msg is None or msg.error():
                    if msg is not None:
                        errors.append(msg.error())
                    idle += 1
                    continue
                seen.add(msg.value())
            consumer.close()
            print(f"ok {len(seen)}" if len(seen) == 50 else f"refused {(errors or ['nothing read'])[0]}", flush=True)
    except Exception as exc:  # a fatal librdkafka error surfaces through its callbacks too
        print(f"refused {exc}", flush=True)
    """
)


# Run in a client pod with a user's Secret at /etc/kafka-client: an acks=all idempotent producer
# and a consumer group on argv[1] until /tmp/stop exists, then every acknowledged record read back
# (or 90 s), then a TLS handshake with each broker using the bundle as it was at the start. One
# JSON line: counts, errors, and the serial each broker served.
LOAD = textwrap.dedent(
    """
    import json, os, socket, ssl, threading, time
    from confluent_kafka import Consumer, Producer
    from cryptography import x509
    topic = os.sys.argv[1]
    with open("/etc/kafka-client/librdkafka.properties") as f:
        conf = dict(line.split("=", 1) for line in f.read().splitlines() if line)
    with open(conf["ssl.ca.location"]) as f:
        bundle_at_start = f.read()
    with open("/tmp/ca-at-start.pem", "w") as f:
        f.write(bundle_at_start)
    acked, consumed, fatal, retriable = set(), set(), [], []
    def on_error(err):
        (fatal if err.fatal() else retriable).append(str(err))
    producer = Producer({**conf, "acks": "all", "enable.idempotence": True, "error_cb": on_error})
    done = threading.Event()
    def consume():
        consumer = Consumer({**conf, "group.id": topic + "-g", "auto.offset.reset": "earliest",
                             "error_cb": on_error})
        consumer.subscribe([topic])
        deadline = None
        while True:
            if done.is_set():
                deadline = deadline or time.monotonic() + 90
                if acked <= consumed or time.monotonic() > deadline:
                    break
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                consumed.add(msg.value())
        consumer.close()
    reader = threading.Thread(target=consume)
    reader.start()
    n = 0
    reported = time.monotonic()
    while not os.path.exists("/tmp/stop"):
        def delivered(err, msg):
            if err:
                fatal.append(str(err))
            else:
                acked.add(msg.value())
        producer.produce(topic, b"r%d" % n, on_delivery=delivered)
        n += 1
        producer.poll(0.02)
        if time.monotonic() - reported >= 1:
            print("progress", len(acked), len(consumed), flush=True)
            reported = time.monotonic()
    left = producer.flush(60)
    done.set()
    reader.join()
    served, refused = {}, []
    for broker in producer.list_topics(timeout=20).brokers.values():
        context = ssl.create_default_context(cafile="/tmp/ca-at-start.pem")
        try:
            with socket.create_connection((broker.host, broker.port), timeout=10) as raw:
                with context.wrap_socket(raw, server_hostname=broker.host) as conn:
                    der = conn.getpeercert(binary_form=True)
            served[broker.id] = x509.load_der_x509_certificate(der).serial_number
        except Exception as exc:
            refused.append(f"{broker.host}: {exc}")
    print(json.dumps({"sent": n, "acked": len(acked), "unflushed": left, "missing": len(acked - consumed),
                      "fatal": fatal, "retriable": retriable, "served": served, "refused": refused}), flush=True)
    """
)


class Env:
    def __init__(self, cluster: KindCluster) -> None:
        self.cluster = cluster

    def get(self, *args: str) -> Any:
        return self.cluster.get(*args)

    def secret(self, name: str) -> dict[str, str] | None:
        proc = self.cluster.kubectl("get", "secret", name, "-n", NS, "-o", "json", check=False)
        if proc.returncode != 0:
            return None
        data = json.loads(proc.stdout).get("data") or {}
        return {k: base64.b64decode(v).decode() for k, v in data.items()}

    def phase(self, name: str) -> str | None:
        proc = self.cluster.kubectl(
            "get", "pod", name, "-n", NS, "-o", "jsonpath={.status.phase}", check=False
        )
        return proc.stdout if proc.stdout in ("Succeeded", "Failed") else None

    def run_admin(self, name: str, command: str) -> str:
        """A pod running `command` with the admin token and the trust bundle; its final phase."""
        self.cluster.apply(_admin_pod(name, command))
        phase: str = wait_for(lambda: self.phase(name), timeout=240, what=f"pod {name} finished", interval=2)
        return phase

    def run_client(self, name: str, secret: str, args: list[str]) -> str:
        """A pod of the project image with the Secret mounted whole; its outcome line."""
        self.cluster.apply(_client_pod(name, secret, [CLIENT, *args]))

        wait_for(lambda: self.phase(name), timeout=240, what=f"client pod {name} finished", interval=2)
        logs = self.cluster.kubectl("logs", "-n", NS, name, check=False).stdout
        # librdkafka's own log lines (stderr) interleave with the script's one line of outcome.
        outcomes = [line for line in logs.splitlines() if line.startswith(("ok ", "refused"))]
        return outcomes[-1] if outcomes else logs[-500:]


def _pod(name: str, command: list[str], secrets: Mapping[str, str]) -> dict[str, Any]:
    """A pod of the project image running `command` once, each Secret of `secrets` (mount path:
    Secret name) mounted whole."""
    volumes = list(secrets.items())
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": PROJECT_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": command,
                    "volumeMounts": [
                        {"name": f"v{i}", "mountPath": path, "readOnly": True}
                        for i, (path, _) in enumerate(volumes)
                    ],
                }
            ],
            "volumes": [
                {"name": f"v{i}", "secret": {"secretName": secret}} for i, (_, secret) in enumerate(volumes)
            ],
        },
    }


def _client_pod(name: str, secret: str, script: list[str]) -> dict[str, Any]:
    """`python -c *script` with the user's Secret at /etc/kafka-client."""
    return _pod(name, ["python", "-c", *script], {"/etc/kafka-client": secret})


def _admin_pod(name: str, command: str) -> dict[str, Any]:
    """`sh -c command` with the admin token and the trust bundle."""
    return _pod(
        name,
        ["sh", "-c", command],
        {"/etc/jbod/tokens": f"{CLUSTER}-tokens", "/etc/jbod/ca": f"{CLUSTER}-cluster-ca-cert"},
    )


@pytest.fixture(scope="module")
def env(kind_cluster: KindCluster) -> Iterator[Env]:
    kind_cluster.kubectl("create", "namespace", NS)
    running = Env(kind_cluster)
    try:
        kind_cluster.apply(cluster_spec())
        yield running
    finally:
        kind_cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def test_a_tls_cluster_serves_its_users_over_tls_only(env: Env) -> None:
    def ready_brokers() -> int | None:
        status = env.get("jbodcluster", CLUSTER, "-n", NS).get("status") or {}
        return status.get("readyBrokers") if status.get("readyBrokers") == 3 else None

    wait_for(ready_brokers, timeout=600, what="3 Ready brokers with TLS", interval=3)

    def with_tls() -> dict[str, Any] | None:
        status: dict[str, Any] = env.get("jbodcluster", CLUSTER, "-n", NS)["status"]
        return status if status.get("tls") else None

    status = wait_for(with_tls, timeout=120, what="status.tls")
    assert status["tls"]["trustSecret"] == f"{CLUSTER}-cluster-ca-cert" and status["tls"]["caCount"] == 1
    assert status["kafka"]["securityProtocol"] == "SASL_SSL"
    properties = env.get("configmap", f"{CLUSTER}-broker-0", "-n", NS)["data"]["server.properties"]
    # Every listener but the example's `external` one (SCRAM over plain TCP, by choice) has TLS.
    [protocol_map] = [
        line for line in properties.splitlines() if line.startswith("listener.security.protocol.map=")
    ]
    protocols = dict(pair.split(":") for pair in protocol_map.split("=", 1)[1].split(","))
    assert protocols.pop("EXTERNAL") == "SASL_PLAINTEXT", protocols
    assert set(protocols.values()) <= {"SSL", "SASL_SSL"}, protocols
    assert "http://" not in properties

    env.cluster.apply([user("writer", "scram-sha-512", WRITER_ACLS), user("reader", "tls", READER_ACLS)])

    def users_ready() -> bool:
        return all(
            (env.get("jbodusers", name, "-n", NS).get("status") or {}).get("ready")
            for name in ("writer", "reader")
        )

    wait_for(users_ready, timeout=240, what="both JbodUsers ready", interval=3)
    writer = env.secret("writer") or {}
    reader = env.secret("reader") or {}
    assert writer["security.protocol"] == "SASL_SSL" and writer["ca.crt"].startswith(
        "-----BEGIN CERTIFICATE-----"
    )
    assert reader["security.protocol"] == "SSL" and "user.pem" in reader

    # The topic, created as the admin (the writer may not create topics).
    created = env.run_admin(
        "create-topic",
        f"jbodctl --ca-file /etc/jbod/ca/ca.crt --controller https://{CLUSTER}-controller:9093 "
        "--token-file /etc/jbod/tokens/admin-token topics create orders-1 --partitions 3 --replication-factor 3",
    )
    assert created == "Succeeded"
    assert env.run_client("writer-produce", "writer", ["produce", "orders-1", "as-is"]) == "ok 50"
    assert env.run_client("writer-consume", "writer", ["consume", "orders-1", "as-is"]) == "ok 50"
    assert env.run_client("writer-no-ca", "writer", ["produce", "orders-1", "no-ca"]).startswith("refused")
    assert env.run_client("writer-other", "writer", ["produce", "payments", "as-is"]).startswith("refused")

    assert env.run_client("reader-consume", "reader", ["consume", "orders-1", "as-is"]) == "ok 50"
    assert env.run_client("reader-no-cert", "reader", ["consume", "orders-1", "no-cert"]).startswith(
        "refused"
    )
    assert env.run_client("reader-produce", "reader", ["produce", "orders-1", "as-is"]).startswith("refused")

    env.cluster.kubectl("delete", "jbodusers", "writer", "-n", NS, "--wait=true", "--timeout=120s")
    assert env.secret("writer") is None


def _load_progress(env: Env, pod: str) -> tuple[int, int]:
    """(acknowledged, consumed) as the LOAD pod `pod` last reported them (once a second)."""
    logs = env.cluster.kubectl("logs", "-n", NS, pod, check=False).stdout
    reports = [line.split() for line in logs.splitlines() if line.startswith("progress ")]
    return (int(reports[-1][1]), int(reports[-1][2])) if reports else (0, 0)


def _serial(pem: str) -> int:
    return x509.load_pem_x509_certificate(pem.encode()).serial_number


def test_the_ca_and_the_pods_certificates_are_renewed_under_load(env: Env) -> None:
    def ready_brokers() -> bool:
        return (env.get("jbodcluster", CLUSTER, "-n", NS).get("status") or {}).get("readyBrokers") == 3

    wait_for(ready_brokers, timeout=600, what="3 Ready brokers with TLS", interval=3)
    env.cluster.apply(user("steady", "scram-sha-512", WRITER_ACLS))
    wait_for(
        lambda: (env.get("jbodusers", "steady", "-n", NS).get("status") or {}).get("ready"),
        timeout=240,
        what="JbodUser steady ready",
        interval=3,
    )
    created = env.run_admin(
        "create-rotation-topic",
        f"jbodctl --ca-file /etc/jbod/ca/ca.crt --controller https://{CLUSTER}-controller:9093 "
        "--token-file /etc/jbod/tokens/admin-token topics create orders-rotation --partitions 3 "
        "--replication-factor 3",
    )
    assert created == "Succeeded"
    ca_secret = f"{CLUSTER}-cluster-ca"
    before = env.secret(ca_secret) or {}
    leaves = [f"{CLUSTER}-broker-{i}-tls" for i in range(3)] + [f"{CLUSTER}-controller-tls"]
    leaf_serials = {name: _serial((env.secret(name) or {})["tls.crt"]) for name in leaves}

    env.cluster.apply(_client_pod("steady-load", "steady", [LOAD, "orders-rotation"]))
    wait_for(
        lambda: (
            env.cluster.kubectl(
                "get", "pod", "steady-load", "-n", NS, "-o", "jsonpath={.status.phase}", check=False
            ).stdout
            == "Running"
        ),
        timeout=120,
        what="the load pod running",
        interval=2,
    )

    def flowing() -> bool:
        acked, consumed = _load_progress(env, "steady-load")
        return acked >= 100 and consumed > 0

    wait_for(
        flowing,
        timeout=120,
        what="the load's clients producing and consuming under the old certificates",
        interval=2,
    )

    env.cluster.kubectl("annotate", "secret", ca_secret, "-n", NS, "jbod.dev/force-renew=true")

    def renewed() -> dict[str, str] | None:
        now = env.secret(ca_secret) or {}
        return now if now.get("ca.crt") not in (None, before["ca.crt"]) else None

    after = wait_for(renewed, timeout=180, what="the CA certificate renewed", interval=3)
    assert after["ca.key"] == before["ca.key"], "a renewal keeps the CA's key"
    annotations = env.get("secret", ca_secret, "-n", NS)["metadata"].get("annotations") or {}
    assert "jbod.dev/force-renew" not in annotations

    def leaves_signed_again() -> bool:
        return all(_serial((env.secret(name) or {})["tls.crt"]) != leaf_serials[name] for name in leaves)

    wait_for(leaves_signed_again, timeout=180, what="every pod's certificate signed again", interval=3)

    def bundle_of_one() -> bool:
        tls = (env.get("jbodcluster", CLUSTER, "-n", NS).get("status") or {}).get("tls") or {}
        return (
            tls.get("caCount") == 1
            and (env.secret(f"{CLUSTER}-cluster-ca-cert") or {}).get("ca.crt") == after["ca.crt"]
        )

    # The old CA certificate leaves the bundle once the new certificates had time to reach the
    # pods (--secret-propagation-seconds, 45 s on kind: e2e/kind/cluster.py) and a full pass ran (1 min).
    wait_for(bundle_of_one, timeout=420, what="the old CA certificate dropped", interval=5)
    acked = _load_progress(env, "steady-load")[0]
    wait_for(
        lambda: _load_progress(env, "steady-load")[0] >= acked + 100,
        timeout=120,
        what="the load going on after the drop",
        interval=2,
    )

    env.cluster.kubectl("exec", "-n", NS, "steady-load", "--", "touch", "/tmp/stop")
    wait_for(lambda: env.phase("steady-load"), timeout=300, what="the load pod finished", interval=3)
    logs = env.cluster.kubectl("logs", "-n", NS, "steady-load", check=False).stdout
    lines = [line for line in logs.splitlines() if line.startswith("{")]
    assert lines, logs[-2000:]
    result = json.loads(lines[-1])
    assert env.phase("steady-load") == "Succeeded", logs[-2000:]
    assert result["fatal"] == [] and result["unflushed"] == 0, result
    assert result["acked"] > 100 and result["missing"] == 0, result  # nothing acknowledged is lost
    assert [e for e in result["retriable"] if "SSL" in e or "certificate" in e] == [], result
    assert result["refused"] == [], result
    new_serials = {i: _serial((env.secret(f"{CLUSTER}-broker-{i}-tls") or {})["tls.crt"]) for i in range(3)}
    assert {int(k): v for k, v in result["served"].items()} == new_serials, result


OUTSIDE_ACLS = [
    {
        "resource": {"type": "topic", "name": "zones-", "patternType": "prefix"},
        "operations": ["Write", "Read", "Describe"],
    },
    {"resource": {"type": "group", "name": "outside-", "patternType": "prefix"}, "operations": ["Read"]},
    {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite", "Describe"]},
]
QUOTA = 102400  # the throttled user's producer_byte_rate, bytes per second per broker


def _listener(env: Env, name: str) -> str | None:
    """The bootstrap address of listener `name`, as a user reads it, once every broker advertises it."""
    jsonpath = f'{{.status.listeners[?(@.name=="{name}")]}}'
    out = env.cluster.kubectl("get", "jbodcluster", CLUSTER, "-n", NS, "-o", f"jsonpath={jsonpath}").stdout
    status = json.loads(out) if out else {}
    return str(status["bootstrapServers"]) if status.get("ready") else None


def _pods_nodes(env: Env, component: str) -> dict[str, str]:
    selector = f"jbod.dev/cluster={CLUSTER},app.kubernetes.io/component={component}"
    pods = env.get("pods", "-n", NS, "-l", selector)["items"]
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods}


def _ready_brokers(env: Env) -> int:
    return int((env.get("jbodcluster", CLUSTER, "-n", NS).get("status") or {}).get("readyBrokers") or 0)


def test_clients_outside_the_cluster_racks_topics_quotas_and_a_node_drain(env: Env, tmp_path: Path) -> None:
    """Issue 34 on the zoned kind cluster, from the host (kind's network, as a client outside
    Kubernetes): the example's nodeport listeners with SCRAM and with client certificates, brokers
    in three zones, a JbodTopic with a replica in each zone, a `client.rack` consumer served by its
    zone's follower, a JbodUser throttled to its produce quota, and `kubectl drain` of a broker's
    node under an idempotent acks=all producer that loses nothing."""
    wait_for(lambda: _ready_brokers(env) == 3, timeout=600, what="3 Ready brokers", interval=3)
    workers = {n.name: n for n in env.cluster.workers()}
    assert sorted(n.zone or "" for n in workers.values()) == ["zone-a", "zone-b", "zone-c"]
    zone_of_broker = {
        int(pod.rsplit("-", 1)[1]): workers[node].zone for pod, node in _pods_nodes(env, "broker").items()
    }
    assert sorted(z or "" for z in zone_of_broker.values()) == ["zone-a", "zone-b", "zone-c"], zone_of_broker

    external = wait_for(lambda: _listener(env, "external"), timeout=300, what="listener external ready")
    # A TLS listener is ready once every broker's certificate names its node's address and was
    # issued --secret-propagation-seconds (60 s) ago: a minute or two after the brokers.
    secure = wait_for(lambda: _listener(env, "secure"), timeout=420, what="listener secure ready")
    print(f"\nkubectl get jbodcluster {CLUSTER} -o jsonpath=...external...bootstrapServers: {external}")
    print(f"kubectl get jbodcluster {CLUSTER} -o jsonpath=...secure...bootstrapServers: {secure}")
    node_addresses = {n.address for n in workers.values()}
    assert {hp.rsplit(":", 1)[0] for hp in external.split(",")} <= node_addresses, external
    assert all(hp.endswith(":32100") for hp in external.split(",")), external

    throttled = user("throttled", "scram-sha-512", OUTSIDE_ACLS)
    throttled["spec"]["quotas"] = {"producerByteRate": QUOTA}
    env.cluster.apply(
        [
            user("outside", "scram-sha-512", OUTSIDE_ACLS),
            user("outside-tls", "tls", OUTSIDE_ACLS),
            throttled,
            {
                "apiVersion": "jbod.dev/v1alpha1",
                "kind": "JbodTopic",
                "metadata": {
                    "name": "zones-orders",
                    "namespace": NS,
                    "labels": {"jbod.dev/cluster": CLUSTER},
                },
                "spec": {"partitions": 3, "replicas": 3, "config": {"min.insync.replicas": 2}},
            },
        ]
    )
    for name in ("outside", "outside-tls", "throttled"):
        wait_for(
            lambda name=name: (env.get("jbodusers", name, "-n", NS).get("status") or {}).get("ready"),
            timeout=240,
            what=f"JbodUser {name} ready",
            interval=3,
        )

    def topic_ready() -> str | None:
        status = env.get("jbodtopics", "zones-orders", "-n", NS).get("status") or {}
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
        return status.get("topicId") if ready else None

    topic_id = wait_for(topic_ready, timeout=180, what="JbodTopic zones-orders Ready", interval=3)
    scram = scram_config(external, env.secret("outside") or {})
    tls = tls_config(secure, env.secret("outside-tls") or {}, tmp_path / "outside-tls")

    # The racks the brokers report are their nodes' zones; every partition has a replica per zone.
    assert outside_racks(scram) == zone_of_broker
    placement = outside_replicas(scram, "zones-orders")
    print(f"zones-orders ({topic_id}), partition: leader, replicas and their zones")
    for partition, (leader, members) in sorted(placement.items()):
        print(f"  {partition}: leader {leader}, " + ", ".join(f"{b} ({zone_of_broker[b]})" for b in members))
        assert sorted(zone_of_broker[b] or "" for b in members) == ["zone-a", "zone-b", "zone-c"]

    # A producer on the host through the SCRAM listener; a consumer through the TLS listener in
    # the zone of a follower of partition 0 reads everything from that follower.
    sent = [f"outside-{i}".encode() for i in range(300)]
    producer = Producer({**scram, "acks": "all", "enable.idempotence": True})
    for value in sent:
        producer.produce("zones-orders", value, partition=0)
    assert producer.flush(60) == 0
    leader, members = placement[0]
    follower = next(b for b in members if b != leader)
    values, served = read_partition({**tls, "client.rack": zone_of_broker[follower]}, "zones-orders", 0, 300)
    print(
        f"client.rack={zone_of_broker[follower]}: partition 0 (leader {leader}) fetched from brokers {served}"
    )
    assert values == sent
    assert served and served[-1] == follower, served

    # The throttled user gets its quota, within 20 % (one partition: one broker's quota).
    rate = produced_rate(scram_config(external, env.secret("throttled") or {}), "zones-orders", 1, seconds=10)
    print(f"throttled user: {rate / 1024:.1f} KiB/s acknowledged for a quota of {QUOTA / 1024:.0f} KiB/s")
    assert 0.8 * QUOTA <= rate <= 1.2 * QUOTA, rate

    # kubectl drain of a broker's node (not the controller's: its volume is bound to its node too)
    # under an idempotent acks=all producer. The local-path volumes cannot follow the broker to
    # another node, so the pod waits for its node (docs/decisions.md, "kind with zones").
    for phase in ("Succeeded", "Failed"):  # the earlier tests' client pods, owned by nothing
        env.cluster.kubectl("delete", "pods", "-n", NS, f"--field-selector=status.phase=={phase}")
    controller_nodes = set(_pods_nodes(env, "controller").values())
    broker_nodes = _pods_nodes(env, "broker")
    drained_pod, drained = next((p, n) for p, n in sorted(broker_nodes.items()) if n not in controller_nodes)
    steady = SteadyProducer(scram, "zones-orders").start()
    try:
        wait_for(lambda: len(steady.acked) >= 200, timeout=60, what="the steady producer acknowledged")
        env.cluster.drain(drained, timeout=240)
        wait_for(lambda: _ready_brokers(env) == 2, timeout=120, what=f"{drained_pod} evicted", interval=2)
        during = len(steady.acked)
        wait_for(lambda: len(steady.acked) >= during + 200, timeout=120, what="acks=all writes on 2 brokers")
        env.cluster.uncordon(drained)
        wait_for(lambda: _ready_brokers(env) == 3, timeout=300, what=f"{drained_pod} back", interval=3)
        back = len(steady.acked)
        wait_for(lambda: len(steady.acked) >= back + 200, timeout=120, what="writes after the drain")
    finally:
        unflushed = steady.stop()
        for node in env.get("nodes")["items"]:
            if node["spec"].get("unschedulable"):
                env.cluster.uncordon(node["metadata"]["name"])
    assert steady.fatal == [] and unflushed == 0, (steady.fatal[:5], unflushed)
    assert _pods_nodes(env, "broker")[drained_pod] == drained  # its volumes' node
    read = read_topic(scram, "zones-orders", steady.acked)
    missing = steady.acked - read
    print(f"drain of {drained} ({drained_pod}): {len(steady.acked)} acknowledged, {len(missing)} missing")
    assert not missing, sorted(missing)[:10]


def _node_reader_binding(env: Env) -> str | None:
    """The cluster's node-reader ClusterRoleBinding's name, None once it is gone."""
    name = f"jbod-{NS}-{CLUSTER}-broker"
    proc = env.cluster.kubectl("get", "clusterrolebinding", name, "-o", "name", check=False)
    return name if proc.returncode == 0 else None


def test_deleting_the_cluster_deletes_its_node_reader_binding(env: Env) -> None:
    """The last step: the cluster has a rack and nodeport listeners, so its brokers' node-reader
    binding exists; deleting the JbodCluster deletes it (the operator's DELETED event handler)."""
    binding = wait_for(lambda: _node_reader_binding(env), timeout=300, what="the node-reader binding")
    labels = env.get("clusterrolebinding", binding)["metadata"]["labels"]
    assert labels["jbod.dev/namespace"] == NS and labels["jbod.dev/cluster"] == CLUSTER, labels
    env.cluster.kubectl("delete", "jbodcluster", CLUSTER, "-n", NS, "--wait=true", "--timeout=120s")
    wait_for(
        lambda: _node_reader_binding(env) is None,
        timeout=60,
        what=f"ClusterRoleBinding {binding} deleted with its cluster",
        interval=1,
    )
