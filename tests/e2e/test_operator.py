"""The operator end to end on kind: real kubelet, containerd, volumes and DNS; the project's own image.

One kind cluster for the module (`python -m e2e.kind up --offline`: node image and project image
built locally, chart installed with helm; the operator runs as the chart's Deployment). In order:
1. `kubectl apply` a `JbodCluster` of 3 brokers x 2 disks; brokers turn Ready only once the
   controller has unfenced them: at every sample, a Ready pod is a broker the controller lists
   unfenced with no queued placement.
   The Kafka client of `examples/kafka-client.yaml` produces through the bootstrap Service with
   the client Secret and reads everything back in a consumer group.
2. A producer pod in the cluster (confluent-kafka, idempotent, through the bootstrap Service with
   the client Secret) writes while a consumer group of two member pods reads along and a leader's
   volume is detached inside its pod (`python -m e2e.kind detach`, the commands of
   docs/operations.md): the dir goes Offline, leadership leaves it, the operator replaces the
   volume (new claim, new `directory.id`), the ISR fills again, the retired claim is deleted; the
   History check of what the group read finds every acknowledged record once and in order.
3. Scaling 3 -> 4 adds a Ready broker; a topic with a replica on it takes acks=all production;
   scaling 4 -> 3 drains it by itself (cordon, throttled reassignments), then the broker, its pod
   and its claims go, the cordon and throttles are lifted, and every acknowledged record is read
   back once.
4. Scaling 3 -> 2 while a topic has replication factor 3 is refused up front (condition
   `Draining=False, reason DrainRefused`, Event) and changes nothing.
5. Adding a disk rolls it out one broker at a time; growing a disk grows its claims; the
   operator's /metrics shows the log dirs by state. A VolumeAttributesClass given to a disk
   reaches its claims in place (no move, no restart) and the JbodBroker status reports it.
6. With the Manual policy a failed disk waits for the `jbod.dev/replace-disks` annotation.
7. Removing a disk that holds replicas drains it by itself (cordoned, its replicas moved to the
   broker's other disks), then it leaves every broker with its claims; in the same spec edit a
   disk's size is lowered, so it moves to a new volume (`d2-m1`) and its replicas into it before
   its old claims go; nothing acknowledged lost.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.kind.cluster import OPERATOR_NAMESPACE, KindCluster
from e2e.kind.images import PROJECT_IMAGE
from e2e.wait import wait_for
from jbod_client.controller import ControllerClient
from jbod_client.history import History, Report
from jbod_core.messages import AlterBrokerConfigsRequest, AlterConfigOp
from tests.e2e.conftest import ControllerTunnel, jbod_cluster, operator_restarts, tier_disk

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(2400)]

NS = "jbod-kind"
CLUSTER = "demo"
INPOD = Path(__file__).with_name("inpod.py")
EXAMPLE_CLIENT = Path(__file__).parents[2] / "examples" / "kafka-client.yaml"


def cluster_spec() -> dict[str, Any]:
    return jbod_cluster(
        CLUSTER,
        NS,
        disks=2,
        config={
            "heartbeatIntervalMs": 500,
            "sessionTimeoutMs": 4000,
            "logDirFailureTimeoutMs": 10000,
            "logDirProbeIntervalMs": 250,
            "minInsyncReplicas": 2,
            "defaultReplicationFactor": 2,  # so that 2 brokers is a valid spec (the refused drain)
            "replicaLagTimeMaxMs": 5000,
        },
        diskFailurePolicy="Automatic",
    )


class Env:
    """The running pieces shared by the module's tests."""

    def __init__(self, cluster: KindCluster, namespace: str = NS, name: str = CLUSTER) -> None:
        self.cluster = cluster
        self.ns = namespace
        self.name = name
        self.tunnel = ControllerTunnel(cluster, namespace, f"{name}-controller", 9093)
        # What pods in the cluster give clients as the controller URL (a list for a quorum).
        self.controller_url = f"http://{name}-controller.{namespace}.svc:9093"

    def get(self, *args: str) -> Any:
        return self.cluster.get(*args)

    def secret(self, key: str) -> str:
        data = self.get("secret", f"{self.name}-tokens", "-n", self.ns)["data"]
        return base64.b64decode(data[key]).decode()

    @property
    def token(self) -> str:
        return self.secret("admin-token")

    def controller(self) -> ControllerClient:
        return ControllerClient(self.tunnel.url, token=self.token, timeout=10)

    def call(self, what: str, fn: Any) -> Any:
        """fn(client), retried once through a fresh tunnel (the controller pod may have moved)."""
        try:
            with self.controller() as client:
                return fn(client)
        except Exception:
            self.tunnel.restart()
            with self.controller() as client:
                return fn(client)

    def brokers(self) -> dict[int, dict[str, Any]]:
        return {b["brokerId"]: b for b in self.call("brokers", lambda c: c.brokers())}

    def describe(self, topic: str) -> dict[str, Any]:
        result: dict[str, Any] = self.call("describe", lambda c: c.describe_topic(topic))
        return result

    def jbod_broker(self, broker_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self.get("jbodbroker", f"{self.name}-broker-{broker_id}", "-n", self.ns)
        return result

    def operator_metrics(self) -> str:
        """The operator's /metrics, through the API server's service proxy."""
        [service] = self.get(
            "service", "-n", OPERATOR_NAMESPACE, "-l", "app.kubernetes.io/component=operator"
        )["items"]
        port = service["spec"]["ports"][0]["port"]
        path = f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/services/{service['metadata']['name']}:{port}"
        proc = self.cluster.kubectl("get", "--raw", f"{path}/proxy/metrics", check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"the operator's metrics: {proc.stderr.strip()}; {self.operator_restarts()}")
        return proc.stdout

    def reconciles(self, kind: str) -> float:
        """How many reconciliations of `kind` the operator ran (`jbod_operator_reconciles_total`)."""
        sample = f'jbod_operator_reconciles_total{{kind="{kind}",'
        lines = self.operator_metrics().splitlines()
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(sample))

    def claims(self, broker_id: int, disk: str) -> list[str]:
        """The names of the PVCs of one disk of one broker (retired ones included)."""
        selector = f"jbod.dev/broker-id={broker_id},jbod.dev/disk={disk}"
        return sorted(c["metadata"]["name"] for c in self.get("pvc", "-n", self.ns, "-l", selector)["items"])

    def log_dir(self, broker_id: int, disk: str) -> dict[str, Any]:
        for entry in self.jbod_broker(broker_id).get("status", {}).get("logDirs") or []:
            if entry["name"] == disk:
                return dict(entry)
        return {}

    def pod(self, name: str) -> dict[str, Any] | None:
        proc = self.cluster.kubectl("get", "pod", name, "-n", self.ns, "-o", "json", check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def broker_pod(self, broker_id: int) -> dict[str, Any] | None:
        return self.pod(f"{self.name}-broker-{broker_id}")

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.get("events", "-n", self.ns)["items"] if e.get("reason") == reason]

    def apply(self, spec: dict[str, Any]) -> None:
        self.cluster.apply(spec)

    def operator_log(self) -> str:
        """The operator's last decisions: its recent log without the routine lines (HTTP requests,
        timers and handlers that succeeded, probes), which would push them out of a timeout's message."""
        proc = self.cluster.kubectl(
            "logs",
            "-n",
            OPERATOR_NAMESPACE,
            "-l",
            "app.kubernetes.io/component=operator",
            "--tail=4000",
            check=False,
        )
        kept = [line for line in proc.stdout.splitlines() if not any(n in line for n in _ROUTINE_LOG)]
        return f"{self.operator_restarts()}\n" + "\n".join(kept)[-6000:]

    def operator_restarts(self) -> str:
        """How often the operator's container restarted and why (`operator_restarts`)."""
        return operator_restarts(self.cluster)[1]

    def conditions(self) -> list[dict[str, Any]]:
        return self.get("jbodcluster", self.name, "-n", self.ns).get("status", {}).get("conditions") or []


_ROUTINE_LOG = ("httpx: HTTP Request", "aiohttp.access", "' succeeded.", "is processed: ")


def _pod_ready(pod: dict[str, Any] | None) -> bool:
    for condition in (pod or {}).get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


@pytest.fixture(scope="module")
def env(kind_cluster: KindCluster) -> Iterator[Env]:
    kind_cluster.kubectl("create", "namespace", NS)
    running = Env(kind_cluster)
    try:
        running.apply(cluster_spec())
        yield running
    finally:
        running.tunnel.close()
        print(running.operator_log())
        # Free the node for the next module (one kind cluster per session).
        kind_cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def test_brokers_turn_ready_only_once_unfenced(env: Env) -> None:
    violations: list[str] = []
    seen_fenced: set[int] = set()

    def all_ready() -> bool:
        try:
            registrations = env.brokers()
        except Exception:
            registrations = {}
        ready = 0
        for broker_id in range(3):
            registration = registrations.get(broker_id)
            if registration is None or registration["fenced"]:
                seen_fenced.add(broker_id)
            if _pod_ready(env.broker_pod(broker_id)):
                ready += 1
                if registration is None or registration["fenced"] or registration["unassignedReplicas"]:
                    violations.append(f"broker {broker_id} Ready while the controller shows {registration}")
        return ready == 3

    wait_for(
        all_ready,
        timeout=420,
        what=lambda: f"3 Ready brokers; operator log:\n{env.operator_log()}",
        interval=0.3,
    )
    assert not violations, violations
    assert seen_fenced == {0, 1, 2}, "every broker was seen fenced before it turned Ready"
    wait_for(
        lambda: env.get("jbodcluster", CLUSTER, "-n", NS)["status"].get("readyBrokers") == 3,
        timeout=60,
        what="JbodCluster status readyBrokers=3",
    )
    for broker_id in range(3):
        status = env.jbod_broker(broker_id)["status"]
        assert status["fenced"] is False and status["queuedPlacements"] == 0
        assert [d["state"] for d in status["logDirs"]] == ["Online", "Online"]
        assert all(d["directoryId"] and d["pvc"] and d["pv"] for d in status["logDirs"])
    pod = env.broker_pod(0)
    assert pod is not None
    gate = [c for c in pod["status"]["conditions"] if c["type"] == "jbod.dev/unfenced"]
    assert gate and gate[0]["status"] == "True"
    # Real kubelet, real image: the chart's security context holds in the running container.
    container = pod["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    uid = env.cluster.kubectl(
        "exec", "-n", NS, pod["metadata"]["name"], "-c", container["name"], "--", "id", "-u"
    )
    assert uid.stdout.strip() == "10001"


def test_the_kafka_client_example_produces_and_reads_back_in_a_group(env: Env) -> None:
    """examples/kafka-client.yaml as docs/install.md runs it: a pod of the project image mounts the
    Secret `status.kafka` names, produces idempotently through the bootstrap Service as the user
    `client` the operator registered, and reads everything back in a consumer group."""

    def kafka_status() -> dict[str, Any] | None:
        status = env.get("jbodcluster", CLUSTER, "-n", NS).get("status", {}).get("kafka") or {}
        return status if status.get("userRegistered") else None

    status = wait_for(kafka_status, timeout=120, what="status.kafka.userRegistered")
    assert status["bootstrapServers"] == f"{CLUSTER}-kafka-bootstrap.{NS}.svc:9092"
    assert status["clientSecret"] == f"{CLUSTER}-kafka-client"
    pod = yaml.safe_load(EXAMPLE_CLIENT.read_text())
    pod["metadata"]["namespace"] = NS
    for container in pod["spec"]["initContainers"] + pod["spec"]["containers"]:
        assert container["image"] == PROJECT_IMAGE  # the example names the image README builds
        container["imagePullPolicy"] = "IfNotPresent"
    env.apply(pod)

    def finished() -> str | None:
        phase = (env.pod("kafka-client") or {}).get("status", {}).get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(finished, timeout=300, what="the example's client pod finished", interval=2)
    logs = env.cluster.kubectl("logs", "-n", NS, "kafka-client", check=False).stdout
    assert phase == "Succeeded", logs[-2000:]
    assert "acked 1000 of 1000" in logs, logs[-2000:]
    assert "read back 1000 of 1000 in consumer group example" in logs, logs[-2000:]


class InPodWorkload:
    """The producer or a consumer-group member of tests/e2e/inpod.py, run as a pod of the project's
    image with the cluster's Kafka client Secret mounted, as an application runs."""

    def __init__(
        self, env: Env, name: str, topic: str, mode: str, rate: int = 200, group: str = "kind-readers"
    ) -> None:
        self.env, self.name, self.topic = env, name, topic
        env.cluster.kubectl(
            "create", "configmap", "inpod", "-n", env.ns, f"--from-file=inpod.py={INPOD}", check=False
        )
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": env.ns},
            "spec": {
                "restartPolicy": "Never",
                "securityContext": {"runAsUser": 10001, "runAsNonRoot": True},
                "containers": [
                    {
                        "name": "workload",
                        "image": PROJECT_IMAGE,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["python", "/workload/inpod.py", mode],
                        "env": [
                            {"name": "TOPIC", "value": topic},
                            {"name": "PARTITIONS", "value": "6"},
                            {"name": "RUN", "value": "kind"},
                            {"name": "RATE", "value": str(rate)},
                            {"name": "GROUP", "value": group},
                        ],
                        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
                        "volumeMounts": [
                            {"name": "workload", "mountPath": "/workload"},
                            {"name": "kafka-client", "mountPath": "/etc/kafka-client", "readOnly": True},
                        ],
                    }
                ],
                "volumes": [
                    {"name": "workload", "configMap": {"name": "inpod"}},
                    {"name": "kafka-client", "secret": {"secretName": f"{env.name}-kafka-client"}},
                ],
            },
        }
        env.apply(pod)

    def events(self) -> list[dict[str, Any]]:
        proc = self.env.cluster.kubectl("logs", "-n", self.env.ns, self.name, check=False, timeout=120)
        out = []
        for line in proc.stdout.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def acked(self) -> int:
        return sum(1 for e in self.events() if e.get("e") == "ack")

    def read(self) -> int:
        return sum(1 for e in self.events() if e.get("e") == "rec")

    def assigned(self) -> list[int]:
        """The partitions the member held after its last rebalance."""
        latest = [e["p"] for e in self.events() if e.get("e") == "assigned"]
        return latest[-1] if latest else []

    def _running(self) -> None:
        pod = self.env.pod(self.name)
        phase = (pod or {}).get("status", {}).get("phase")
        if phase in ("Failed", "Succeeded"):
            errors = [e for e in self.events() if e.get("e") == "error"]
            raise AssertionError(f"{self.name} ended ({phase}): {self.tail()}; client errors: {errors}")

    def wait_acked(self, count: int, *, timeout: float, what: str) -> int:
        def enough() -> int | None:
            self._running()
            acked = self.acked()
            return acked if acked >= count else None

        acked: int = wait_for(
            enough, timeout=timeout, what=f"{count} acknowledged records {what}", interval=2
        )
        return acked

    def wait_read(self, count: int, *, timeout: float, what: str) -> int:
        def enough() -> int | None:
            self._running()
            read = self.read()
            return read if read >= count else None

        read: int = wait_for(
            enough, timeout=timeout, what=f"{self.name}: {count} records read {what}", interval=2
        )
        return read

    def tail(self) -> str:
        return self.env.cluster.kubectl("logs", "-n", self.env.ns, self.name, "--tail=5", check=False).stdout

    def stop(self) -> None:
        """Ask it to finish (/tmp/stop); a consumer then reads on to the high watermarks of now."""

        def running() -> bool:
            return (self.env.pod(self.name) or {}).get("status", {}).get("phase") == "Running"

        wait_for(running, timeout=120, what=f"{self.name} running", interval=1)
        self.env.cluster.kubectl("exec", "-n", self.env.ns, self.name, "--", "touch", "/tmp/stop")

    def finish(self, *, stop: bool, timeout: float = 180) -> list[dict[str, Any]]:
        if stop:
            self.stop()

        def done() -> bool:
            pod = self.env.pod(self.name)
            return (pod or {}).get("status", {}).get("phase") in ("Succeeded", "Failed")

        wait_for(done, timeout=timeout, what=f"{self.name} finished", interval=1)
        events = self.events()
        assert events and events[-1] == {"e": "done"}, f"{self.name} did not finish cleanly: {self.tail()}"
        return events


def _history(events: list[dict[str, Any]], topic: str = "orders") -> History:
    history = History()
    for event in events:
        kind = event["e"]
        if kind == "send":
            history.on_send(("kind", event["s"]), topic, event["p"])
        elif kind == "ack":
            history.on_ack(("kind", event["s"]), event["o"])
        elif kind == "fail":
            history.on_failure(("kind", event["s"]), 0)
    return history  # an idempotent producer reports no retries: every duplicate is a problem


def _leader_dir(env: Env, topic: str) -> tuple[int, str]:
    """A (broker, disk) leading at least one partition of `topic`."""
    description = env.describe(topic)
    for partition in description["partitions"]:
        leader = partition["leader"]
        directory = partition["directories"][partition["replicas"].index(leader)]
        for entry in env.jbod_broker(leader)["status"]["logDirs"]:
            if entry.get("directoryId") == directory:
                return leader, entry["name"]
    raise AssertionError(f"no leader dir found in {description}")


def test_detached_volume_is_replaced_without_loss(env: Env) -> None:
    """An idempotent Kafka producer writes through the bootstrap Service and a consumer group of
    two members reads along while a leader's volume is detached and replaced: every acknowledged
    record is read back, once, in order."""
    topic = "orders"
    created = env.call("create", lambda c: c.create_topic(topic, partitions=6, replication_factor=3))
    assert created["errorCode"] == 0, created
    producer = InPodWorkload(env, "producer", topic, "produce")
    readers = [InPodWorkload(env, f"reader-{n}", topic, "consume") for n in (1, 2)]
    producer.wait_acked(500, timeout=240, what="before the detach")

    def group_formed() -> list[list[int]] | None:
        held = [reader.assigned() for reader in readers]
        return held if all(held) and sorted(p for h in held for p in h) == list(range(6)) else None

    held = wait_for(group_formed, timeout=120, what="the 6 partitions shared by both group members")
    print(f"group kind-readers: {held}")
    for reader in readers:
        reader.wait_read(1, timeout=60, what="before the detach")

    broker_id, disk = _leader_dir(env, topic)
    before = env.log_dir(broker_id, disk)
    old_claim, old_dir = before["pvc"], before["directoryId"]
    env.cluster.detach_volume(NS, f"{CLUSTER}-broker-{broker_id}", disk)

    wait_for(
        lambda: (
            env.log_dir(broker_id, disk).get("state") in ("Detached", "Offline")
            or env.log_dir(broker_id, disk).get("pvc") != old_claim
        ),
        timeout=60,
        what=f"log dir {disk} of broker {broker_id} Offline",
    )
    wait_for(
        lambda: env.events("LogDirOffline") or env.events("VolumeDetached"),
        timeout=60,
        what="an Offline event",
    )

    def leadership_moved() -> bool:
        for partition in env.describe(topic)["partitions"]:
            index = partition["replicas"].index(broker_id)
            if partition["leader"] == broker_id and partition["directories"][index] == old_dir:
                return False
        return True

    wait_for(leadership_moved, timeout=60, what="leadership off the detached dir")
    acked = producer.acked()
    producer.wait_acked(acked + 300, timeout=180, what="after the detach")
    for reader in readers:
        reader.wait_read(reader.read() + 1, timeout=120, what="after the detach")

    def replaced() -> dict[str, Any] | None:
        entry = env.log_dir(broker_id, disk)
        ok = (
            entry.get("state") == "Online"
            and entry.get("pvc") != old_claim
            and entry.get("directoryId") not in (None, old_dir)
        )
        return entry if ok else None

    after = wait_for(
        replaced,
        timeout=300,
        what=lambda: f"a replaced, online volume for {disk}; log:\n{env.operator_log()}",
    )
    assert after["pvc"].endswith("-g1")
    assert env.events("ReplacingVolume")
    wait_for(
        lambda: all(len(p["isr"]) == 3 for p in env.describe(topic)["partitions"]),
        timeout=240,
        what="every partition back to a full ISR",
    )
    wait_for(
        lambda: all(
            c["metadata"]["name"] != old_claim
            for c in env.get("pvc", "-n", NS, "-l", f"jbod.dev/disk={disk}")["items"]
        ),
        timeout=120,
        what=f"retired claim {old_claim} deleted",
    )
    acked = producer.acked()
    producer.wait_acked(acked + 300, timeout=180, what="after the replacement")
    history = _history(producer.finish(stop=True))

    consumed = [
        ("orders", e["p"], e["o"], e["v"].encode("latin-1") if e["v"] is not None else None)
        for reader in readers
        for e in reader.finish(stop=True, timeout=300)
        if e["e"] == "rec"
    ]
    report: Report = history.check(consumed)
    print(report.summary())
    assert report.ok, report.problems()[:20]
    assert report.duplicates == 0
    assert len(history.acked) > 1000


def _read_back(env: Env, producer: InPodWorkload, topic: str, group: str) -> Report:
    """Stop the producer, read the topic from the start in a new group, check every ack is there once."""
    for partition in env.describe(topic)["partitions"]:
        print({k: partition.get(k) for k in ("partitionIndex", "leader", "replicas", "isr", "directories")})
    history = _history(producer.finish(stop=True, timeout=400), topic)
    reader = InPodWorkload(env, f"{group}-reader", topic, "consume", group=group)
    reader.wait_read(1, timeout=180, what="from the start")
    consumed = [
        (topic, e["p"], e["o"], e["v"].encode("latin-1") if e["v"] is not None else None)
        for e in reader.finish(stop=True, timeout=300)
        if e["e"] == "rec"
    ]
    report: Report = history.check(consumed)
    print(report.summary())
    assert report.ok, report.problems()[:20]
    assert report.duplicates == 0
    return report


def _condition(env: Env, type_: str) -> dict[str, Any]:
    return next((c for c in env.conditions() if c["type"] == type_), {})


def _no_cordon_or_throttle(env: Env, topic: str) -> None:
    for broker_id, registration in env.brokers().items():
        assert not registration.get("cordonedLogDirs"), (broker_id, registration)
        assert registration.get("acceptsNewReplicas") is True, (broker_id, registration)
    configs = env.describe(topic)["configs"]
    assert "leader.replication.throttled.replicas" not in configs, configs
    assert "follower.replication.throttled.replicas" not in configs, configs


def test_scale_down_drains_the_broker_by_itself(env: Env) -> None:
    """4 -> 3 brokers while acks=all production runs on a topic with a replica of every partition on
    broker 3: the operator reassigns them (throttled), then removes the broker with its claims."""
    started = time.monotonic()
    spec = cluster_spec()
    spec["spec"]["brokers"] = 4
    env.apply(spec)
    wait_for(
        lambda: _pod_ready(env.broker_pod(3)),
        timeout=300,
        what=lambda: f"broker 3 Ready; log:\n{env.operator_log()}",
    )
    topic = "drained"
    assignment = [[3, 0, 1], [1, 3, 2], [2, 0, 3], [3, 1, 2], [0, 3, 1], [2, 3, 0]]
    reply = env.call("create", lambda c: c.create_topic(topic, replica_assignment=assignment))
    assert reply["errorCode"] == 0, reply
    producer = InPodWorkload(env, "drain-producer", topic, "produce")
    producer.wait_acked(300, timeout=240, what="before the scale-down")
    scaled_at = time.monotonic()
    env.apply(cluster_spec())  # back to 3 brokers: broker 3 drains by itself
    wait_for(lambda: env.events("DrainStarted"), timeout=60, what="a DrainStarted event")

    def gone() -> bool:
        brokers = env.get("jbodbrokers", "-n", NS)["items"]
        claims = env.get("pvc", "-n", NS, "-l", "jbod.dev/broker-id=3")["items"]
        return len(brokers) == 3 and not claims and env.broker_pod(3) is None and 3 not in env.brokers()

    wait_for(gone, timeout=300, what=lambda: f"broker 3 drained and removed; log:\n{env.operator_log()}")
    drained_in = time.monotonic() - scaled_at
    for partition in env.describe(topic)["partitions"]:
        assert 3 not in partition["replicas"] and len(set(partition["replicas"])) == 3, partition
    acked = producer.acked()
    producer.wait_acked(acked + 200, timeout=180, what="after the scale-down")
    wait_for(
        lambda: _condition(env, "Draining").get("reason") == "Idle", timeout=60, what="Draining=False, Idle"
    )
    _no_cordon_or_throttle(env, topic)
    assert env.events("DrainCompleted")
    _read_back(env, producer, topic, "drain-check")
    print(
        f"scale-down drain: {drained_in:.0f} s to drain and remove broker 3; scenario {time.monotonic() - started:.0f} s"
    )


def test_a_drain_that_cannot_finish_is_refused_and_changes_nothing(env: Env) -> None:
    """3 -> 2 brokers while topics have replication factor 3: refused up front, nothing changes."""
    spec = cluster_spec()
    spec["spec"]["brokers"] = 2
    env.apply(spec)

    def refused() -> dict[str, Any] | None:
        condition = _condition(env, "Draining")
        return condition if condition.get("reason") == "DrainRefused" else None

    condition = wait_for(refused, timeout=90, what="Draining=False, reason DrainRefused")
    assert condition["status"] == "False"
    assert "has 3 replicas but only 2" in condition["message"], condition
    assert env.events("DrainRefused")
    # Two more reconciles of the cluster (the refresh runs every 5 s), so one began after the
    # refusal was shown: still nothing changed.
    reconciled = env.reconciles("JbodCluster")
    wait_for(
        lambda: env.reconciles("JbodCluster") >= reconciled + 2,
        timeout=60,
        what="two more reconciles of the cluster",
        interval=1,
    )
    assert len(env.get("jbodbrokers", "-n", NS)["items"]) == 3
    assert _pod_ready(env.broker_pod(2))
    assert env.call("reassignments", lambda c: c.list_reassignments()).reassignments == []
    _no_cordon_or_throttle(env, "drained")
    env.apply(cluster_spec())  # the user reverts the spec
    wait_for(
        lambda: _condition(env, "Draining").get("reason") == "Idle", timeout=60, what="Draining=False, Idle"
    )


def test_add_and_grow_disks(env: Env) -> None:
    """A new disk reaches every broker through a rolling restart (one broker at a time); a bigger
    size reaches the claims. A disk its broker cordons for its space grows within its maxSize
    (the tier's class allows expansion), and one without maxSize is reported (issue 35)."""
    spec = cluster_spec()
    spec["spec"]["disks"][0]["size"] = "128Mi"
    spec["spec"]["disks"].append({**tier_disk("d2"), "maxSize": "256Mi"})
    env.apply(spec)
    max_unready = 0

    def rolled() -> bool:
        nonlocal max_unready
        unready = sum(1 for b in range(3) if not _pod_ready(env.broker_pod(b)))
        max_unready = max(max_unready, unready)
        return all(env.log_dir(b, "d2").get("state") == "Online" for b in range(3)) and unready == 0

    wait_for(
        rolled, timeout=900, what=lambda: f"d2 online on every broker; log:\n{env.operator_log()}", interval=1
    )
    assert max_unready <= 1, "brokers were restarted one at a time"
    for broker_id in range(3):
        [claim] = env.get("pvc", "-n", NS, "-l", f"jbod.dev/broker-id={broker_id},jbod.dev/disk=d0")["items"]
        assert claim["spec"]["resources"]["requests"]["storage"] == "128Mi"
    metrics = env.operator_metrics()
    assert (
        f'jbod_operator_log_dirs{{broker="0",cluster="demo",namespace="{NS}",state="Online"}} 3.0' in metrics
    )

    # Broker 0's threshold below what its volumes' file system already uses: every dir of it is
    # cordoned for its space. The operator grows d2's claim one step (96Mi -> 144Mi; kind's
    # local-path volumes never report the new capacity, so it stops there, as it does for d0's
    # growth to 128Mi above), and says d1 has no maxSize. The threshold removed, the dirs take
    # replicas again.
    _set_cordon_threshold(env, "0.01")
    try:
        wait_for(
            lambda: _requested(env, 0, "d2") == ["144Mi"],
            timeout=120,
            what=lambda: f"d2's claim grown; log:\n{env.operator_log()}",
        )
        # The reconcile that grows d2's claim writes the status after it: the claim can be read
        # grown before the status shows the cordons.
        wait_for(
            lambda: all(env.log_dir(0, d).get("spaceCordoned") for d in ("d0", "d1", "d2")),
            timeout=60,
            what=lambda: f"every dir of broker 0 cordoned: {[env.log_dir(0, d) for d in ('d0', 'd1', 'd2')]}",
        )
        growing = [e["message"] for e in env.events("GrowingVolume")]
        assert any("log dir d2 of broker 0 from 96Mi to 144Mi" in m for m in growing), growing
        wait_for(
            lambda: any("disk d1 has no maxSize" in e["message"] for e in env.events("VolumeNotGrown")),
            timeout=60,
            what="a VolumeNotGrown event for d1",
        )
        assert _requested(env, 1, "d2") == ["96Mi"]
        # d1 cannot grow: the operator would move replicas off it to broker 0's other dirs, but
        # every one of them is full too (or d1 holds no data), and the Draining condition says so.
        wait_for(
            lambda: "full dir /var/lib/jbod/disks/d1/log of broker 0: no" in _draining(env),
            timeout=60,
            what=lambda: f"the relief waiting in the Draining condition: {_draining(env)}",
        )
    finally:
        _set_cordon_threshold(env, None)
    wait_for(
        lambda: not any(env.log_dir(0, d).get("spaceCordoned") for d in ("d0", "d1", "d2")),
        timeout=120,
        what="broker 0's dirs released",
    )


def test_a_volume_attributes_class_changes_the_claims_in_place(env: Env) -> None:
    """Issue 35: `volumeAttributesClassName` on d1 reaches every broker's claim of d1 in place: no
    new volume (`d1-m1`), no pod restarted, an Event; the JbodBroker status reports the class
    asked for and how its modification goes. kind's local-path provisioner is not a CSI driver,
    so no external-resizer takes the change up: the class never takes effect, and the status
    stays NotStarted (or Pending, should something report it so)."""
    env.apply(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "VolumeAttributesClass",
            "metadata": {"name": "jbod-fast"},
            "driverName": "rancher.io/local-path",
            "parameters": {"iops": "3000"},
        }
    )
    pods = {b: (env.broker_pod(b) or {}).get("metadata", {}).get("uid") for b in range(3)}
    assert all(pods.values()), pods
    claims_before = {b: env.claims(b, "d1") for b in range(3)}
    spec = cluster_spec()
    spec["spec"]["disks"][0]["size"] = "128Mi"  # as test_add_and_grow_disks left them
    spec["spec"]["disks"][1]["volumeAttributesClassName"] = "jbod-fast"
    spec["spec"]["disks"].append({**tier_disk("d2"), "maxSize": "256Mi"})
    env.apply(spec)

    def d1_claims() -> list[dict[str, Any]]:
        return list(env.get("pvc", "-n", NS, "-l", "jbod.dev/disk=d1")["items"])

    def reported() -> bool:
        claims = d1_claims()
        asked = len(claims) == sum(map(len, claims_before.values())) and all(
            c["spec"].get("volumeAttributesClassName") == "jbod-fast" for c in claims
        )
        return asked and all(
            env.log_dir(b, "d1").get("targetVolumeAttributesClass") == "jbod-fast" for b in range(3)
        )

    wait_for(
        reported,
        timeout=120,
        what=lambda: f"every d1 claim asking for jbod-fast, and reported; log:\n{env.operator_log()}",
    )
    for broker_id in range(3):
        entry = env.log_dir(broker_id, "d1")
        print(f"broker {broker_id} d1: {entry}")
        assert entry.get("modifyVolumeStatus") in ("NotStarted", "Pending"), entry
        assert "volumeAttributesClass" not in entry, entry  # never took effect
        assert entry.get("state") == "Online", entry
        disks = [d["name"] for d in env.jbod_broker(broker_id)["spec"]["disks"]]
        assert disks == ["d0", "d1", "d2"], disks  # no d1-m1: not a move
        assert env.claims(broker_id, "d1") == claims_before[broker_id]  # the same claims, patched
    changed = [e["message"] for e in env.events("VolumeAttributesClassChanged")]
    assert any(
        "disk d1 on brokers 0, 1, 2 VolumeAttributesClass jbod-fast (was none)" in m for m in changed
    ), changed
    # Several reconciles of every broker later (a timer every 2 s each), still no restart.
    reconciled = env.reconciles("JbodBroker")
    wait_for(
        lambda: env.reconciles("JbodBroker") >= reconciled + 9, timeout=60, what="9 more broker reconciles"
    )
    after = {b: (env.broker_pod(b) or {}).get("metadata", {}).get("uid") for b in range(3)}
    assert after == pods, "no broker pod was restarted"


def _draining(env: Env) -> str:
    """The message of the JbodCluster's Draining condition."""
    conditions = env.get("jbodcluster", CLUSTER, "-n", NS).get("status", {}).get("conditions") or []
    return next((str(c.get("message")) for c in conditions if c.get("type") == "Draining"), "")


def _requested(env: Env, broker_id: int, disk: str) -> list[str]:
    """The storage requests of the claims of one disk of one broker."""
    selector = f"jbod.dev/broker-id={broker_id},jbod.dev/disk={disk}"
    return [
        c["spec"]["resources"]["requests"]["storage"]
        for c in env.get("pvc", "-n", NS, "-l", selector)["items"]
    ]


def _set_cordon_threshold(env: Env, value: str | None) -> None:
    """Broker 0's `log.dir.cordon.threshold` (None: back to the default)."""
    name = "log.dir.cordon.threshold"
    op = AlterConfigOp(name=name, op="SET", value=value) if value else AlterConfigOp(name=name, op="DELETE")
    reply = env.call("alter", lambda c: c.alter_broker_configs("0", AlterBrokerConfigsRequest(configs=[op])))
    assert reply.error_code == 0, reply


def test_manual_policy_waits_for_the_annotation(env: Env) -> None:
    spec = cluster_spec()
    spec["spec"]["diskFailurePolicy"] = "Manual"
    spec["spec"]["disks"][0]["size"] = "128Mi"
    spec["spec"]["disks"].append(tier_disk("d2"))
    env.apply(spec)
    broker_id, disk = 2, "d2"

    def settled() -> bool:  # the operator has seen the Manual spec, and d2 is in use
        cluster = env.get("jbodcluster", CLUSTER, "-n", NS)
        seen = cluster.get("status", {}).get("observedGeneration") == cluster["metadata"]["generation"]
        return (
            seen
            and env.log_dir(broker_id, disk).get("state") == "Online"
            and _pod_ready(env.broker_pod(broker_id))
        )

    wait_for(
        settled, timeout=600, what=lambda: f"the Manual spec observed, d2 Online; log:\n{env.operator_log()}"
    )
    before = env.log_dir(broker_id, disk)
    claims = env.claims(broker_id, disk)
    env.cluster.detach_volume(NS, f"{CLUSTER}-broker-{broker_id}", disk)
    wait_for(lambda: env.log_dir(broker_id, disk).get("state") == "Offline", timeout=60, what="d2 Offline")
    wait_for(lambda: env.events("VolumeNeedsReplacement"), timeout=60, what="a VolumeNeedsReplacement event")

    # Automatic would replace the volume in the first reconcile that finds it Offline and leading
    # nothing (its leaderships moved), creating the new claim before that reconcile writes the
    # status. Manual: nothing is replaced without the annotation.
    def offline_leading_nothing() -> bool:
        entry = env.log_dir(broker_id, disk)
        return entry.get("state") == "Offline" and entry.get("leaders") == 0

    wait_for(offline_leading_nothing, timeout=120, what="d2 Offline and leading nothing")
    assert env.claims(broker_id, disk) == claims
    assert env.log_dir(broker_id, disk)["pvc"] == before["pvc"]
    env.cluster.kubectl(
        "annotate", "jbodbroker", f"{CLUSTER}-broker-{broker_id}", "-n", NS, f"jbod.dev/replace-disks={disk}"
    )

    def replaced() -> bool:
        entry = env.log_dir(broker_id, disk)
        return entry.get("state") == "Online" and entry.get("pvc") != before["pvc"]

    wait_for(
        replaced, timeout=300, what=lambda: f"d2 replaced after the annotation; log:\n{env.operator_log()}"
    )
    annotations = env.jbod_broker(broker_id)["metadata"].get("annotations") or {}
    assert "jbod.dev/replace-disks" not in annotations, "the request is consumed"


def test_removing_a_disk_and_moving_one_to_a_smaller_volume_under_load(env: Env) -> None:
    """One spec edit while acks=all production runs: d1 leaves spec.disks (its replicas move to the
    brokers' other disks), and d2's size is lowered (96Mi -> 64Mi: a claim cannot shrink, so d2
    moves to a new volume d2-m1 and its replicas into it, issue 35); then d1 and d2's old volume
    leave every broker (one pod restart at a time) with their claims, and nothing acked is lost.
    The topic's replicas are on d2, the emptiest disk when it was created (test_add_and_grow_disks
    added it)."""
    started = time.monotonic()
    topic = "disk-drained"
    created = env.call("create", lambda c: c.create_topic(topic, partitions=6, replication_factor=3))
    assert created["errorCode"] == 0, created
    producer = InPodWorkload(env, "disk-producer", topic, "produce")
    producer.wait_acked(300, timeout=240, what="before the disk removal")
    held = [env.log_dir(b, "d1").get("replicas", 0) for b in range(3)]
    on_d2 = [env.log_dir(b, "d2").get("replicas", 0) for b in range(3)]
    print(f"replicas per broker before: on d1 {held}, on d2 {on_d2}")
    assert any(on_d2), "d2 holds replicas to move"
    spec = cluster_spec()
    spec["spec"]["diskFailurePolicy"] = "Manual"
    spec["spec"]["disks"][0]["size"] = "128Mi"  # as test_add_and_grow_disks left it
    spec["spec"]["disks"].append({**tier_disk("d2"), "size": "64Mi"})  # was 96Mi
    spec["spec"]["disks"] = [d for d in spec["spec"]["disks"] if d["name"] != "d1"]
    env.apply(spec)
    wait_for(lambda: env.events("MovingDisk"), timeout=60, what="a MovingDisk event")
    moving = [e["message"] for e in env.events("MovingDisk")]
    assert any("disk d2 of broker 0 moves to a new volume d2-m1: size 96Mi → 64Mi" in m for m in moving), (
        moving
    )
    wait_for(
        lambda: any("/var/lib/jbod/disks/d2/log" in e["message"] for e in env.events("DrainStarted")),
        timeout=300,
        what=lambda: (
            f"a DrainStarted event for d2's old volume; pods ready "
            f"{[_pod_ready(env.broker_pod(b)) for b in range(3)]}; Draining: {_draining(env)}; "
            f"log:\n{env.operator_log()}"
        ),
    )

    def done() -> bool:
        for broker_id in range(3):
            disks = {d["name"]: d for d in env.jbod_broker(broker_id)["spec"]["disks"]}
            if set(disks) != {"d0", "d2-m1"} or disks["d2-m1"].get("specName") != "d2":
                return False
            if not _pod_ready(env.broker_pod(broker_id)):
                return False
            # The JbodBroker's status follows the pod by a reconcile (a timer every 2 s).
            if env.log_dir(broker_id, "d2-m1").get("state") != "Online":
                return False
        return not any(
            env.get("pvc", "-n", NS, "-l", f"jbod.dev/disk={disk}")["items"] for disk in ("d1", "d2")
        )

    wait_for(
        done,
        timeout=1200,
        what=lambda: f"d1 removed and d2 moved on every broker; log:\n{env.operator_log()}",
        interval=2,
    )
    drained_in = time.monotonic() - started
    for broker_id in range(3):
        assert _requested(env, broker_id, "d2-m1") == ["64Mi"]
        moved_in = env.log_dir(broker_id, "d2-m1")
        assert moved_in.get("state") == "Online"
        # Every replica d2 held is now in its new volume (d1's may have gone there too).
        assert moved_in.get("replicas", 0) >= on_d2[broker_id], (broker_id, moved_in, on_d2)
    moved = [e["message"] for e in env.events("DiskMoved")]
    assert all(any(f"disk d2 of broker {b} left its old volume d2" in m for m in moved) for b in range(3)), (
        moved
    )
    acked = producer.acked()
    producer.wait_acked(acked + 200, timeout=180, what="after the disk removal and move")
    wait_for(
        lambda: _condition(env, "Draining").get("reason") == "Idle", timeout=90, what="Draining=False, Idle"
    )
    _no_cordon_or_throttle(env, topic)
    _read_back(env, producer, topic, "disk-check")
    print(f"disk drain: {drained_in:.0f} s to remove d1 and move d2 to a new volume on 3 brokers")
