"""KIP-112 system tests: a JBOD broker survives the loss of one log dir, with real clients.

Every test runs three real brokers with two loop-mounted ext4 dirs each, a real `Producer`
(acks=-1, RF 3, min.insync.replicas=2, a long delivery timeout so failures are retried, not
dropped) and a real `Consumer`, and checks the produced and consumed records with `History`:
no acknowledged record lost or moved, none reordered, no duplicate of a never-retried record.

1. A dir that fails while its broker is down is discovered at bootstrap: the broker starts
   without it, leadership of its replicas stays elsewhere, production goes on.
2. / 3. A dir fails at runtime under a partition leader / under a follower only; then, with the
   two other brokers killed, the damaged broker still leads and serves from its healthy dir.
4. A seeded random run of faults (dir failures with replaced volumes, kill -9 of brokers and of
   the controller, SIGSTOP pauses) during production; `KIP112_SEED=<n>` replays a run.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jbod_client.controller import ClientError, ControllerClient, read_token
from jbod_client.history import History
from jbod_local.processes import LocalController
from tests.broker.conftest import Cluster, wait_for
from tests.broker.workload import Workload, check
from tests.fs import loop_ext4, requires_root

pytestmark = requires_root

#: The controller fences a broker after this long without a heartbeat (its default is 9 s).
SESSION_TIMEOUT_MS = 3000
BROKER_SETTINGS = {
    "broker_session_timeout_ms": str(SESSION_TIMEOUT_MS),
    "replica_lag_time_max_ms": "3000",
    "log_dir_failure_timeout_ms": "5000",
}
PARTITIONS = 6


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """The shared `cluster` fixture, but with a controller that fences silent brokers after 3 s
    (the broker session timeout is the controller's setting, not the brokers')."""
    with contextlib.ExitStack() as stack:
        controller = LocalController(
            data_dir=tmp_path / "controller",
            cluster_id="it",
            extra_args=["--broker-session-timeout-ms", str(SESSION_TIMEOUT_MS)],
        ).start()
        stack.callback(controller.kill)
        admin = ControllerClient(controller.url, token=read_token(controller.admin_token_file), timeout=10)
        stack.callback(admin.close)
        yield Cluster(base=tmp_path, stack=stack, controller=controller, admin=admin)


# -- helpers ---------------------------------------------------------------------------------


def client_token(cluster: Cluster) -> str:
    """What the data-plane clients present. Their `ClusterMetadata` reads `GET /v1/topics/{name}`
    and `GET /v1/brokers`, which need the admin token (protocol §2: the cluster token gets 401
    there); brokers accept the admin token only when given `admin.token.file` (see start_three)."""
    return read_token(cluster.controller.admin_token_file)


def start_three(cluster: Cluster, **settings: str) -> None:
    merged: dict[str, str] = {
        **BROKER_SETTINGS,
        "admin_token_file": str(cluster.controller.admin_token_file),
        **settings,
    }
    for node in (1, 2, 3):
        # Only settings (str) are passed: mypy cannot tell them from `dirs` / `start`.
        cluster.add_broker(node, **merged)  # type: ignore[arg-type]
    wait_for(lambda: cluster.all_unfenced(3), what="three unfenced brokers")


def create_topic(
    cluster: Cluster,
    name: str,
    *,
    min_isr: int = 2,
    assignment: list[list[int]] | None = None,
) -> dict[str, Any]:
    if assignment is None:
        reply = cluster.admin.create_topic(
            name, partitions=PARTITIONS, replication_factor=3, configs={"min.insync.replicas": str(min_isr)}
        )
    else:
        reply = cluster.admin.create_topic(
            name, replica_assignment=assignment, configs={"min.insync.replicas": str(min_isr)}
        )
    assert reply["errorCode"] == 0, reply
    wait_for(lambda: cluster.placed(name), what=f"placements of {name}")
    return cluster.admin.describe_topic(name)


def workload(cluster: Cluster, topic: str, run: str, history: History, **kwargs: Any) -> Workload:
    partitions = len(cluster.admin.describe_topic(topic)["partitions"])
    return Workload(
        controller_url=cluster.controller.url,
        token=client_token(cluster),
        topic=topic,
        partitions=partitions,
        run=run,
        history=history,
        **kwargs,
    ).start()


def dir_index(cluster: Cluster, broker: int, directory: str) -> int:
    found = [i for i in (0, 1) if cluster.dir_id(broker, i) == directory]
    assert found, f"directory {directory} is not one of broker {broker}'s"
    return found[0]


def replica_dir(partition: dict[str, Any], broker: int) -> str:
    directory: str = partition["directories"][partition["replicas"].index(broker)]
    return directory


def hosted_in(topic: dict[str, Any], broker: int, directory: str) -> list[int]:
    return [
        p["partitionIndex"]
        for p in topic["partitions"]
        if broker in p["replicas"] and replica_dir(p, broker) == directory
    ]


def alive(cluster: Cluster, broker: int) -> bool:
    process = cluster.brokers[broker].process
    return process is not None and process.poll() is None


def tolerant(condition: Callable[[], Any]) -> Callable[[], Any]:
    """A `wait_for` condition that counts an unreachable controller as "not yet"."""

    def attempt() -> Any:
        try:
            return condition()
        except ClientError:
            return False

    return attempt


def wait_for_failed_dir_to_be_left(
    cluster: Cluster,
    topic: str,
    broker: int,
    directory: str,
    hosted: list[int],
    *,
    reported: bool = True,
    timeout: float = 20,
) -> None:
    """Wait until no ISR or leadership of a replica in the failed dir is left on `broker` and the
    controller counts those replicas offline (and, if `reported`, lists the dir as offline: a dir
    unreadable at startup has no known id, so the broker can only say it has offline dirs)."""
    seen: list[Any] = []

    def left() -> bool:
        partitions = cluster.admin.describe_topic(topic)["partitions"]
        registration = cluster.admin.broker(broker)
        seen[:] = [registration, [partitions[i] for i in hosted]]
        return (not reported or directory in registration["offlineLogDirs"]) and all(
            partitions[i]["leader"] not in (broker, -1)
            and broker not in partitions[i]["isr"]
            and broker in partitions[i]["offlineReplicas"]
            for i in hosted
        )

    try:
        wait_for(left, timeout=timeout, what=f"broker {broker}'s replicas in {directory} to be left")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {seen}") from exc


def still_serves_its_healthy_dir(cluster: Cluster, survivor: int, healthy_index: int) -> None:
    """The follow-up of tests 2 and 3: a new topic (RF 3, min.insync.replicas=1) gets the
    survivor's replicas in its healthy dir; with the two other brokers killed it leads every
    partition, and a real producer and consumer work against it alone."""
    healthy = cluster.dir_id(survivor, healthy_index)
    topic = create_topic(cluster, "after", min_isr=1)
    assert hosted_in(topic, survivor, healthy) == list(range(PARTITIONS)), topic
    history = History()
    work = workload(cluster, "after", "after", history)
    work.wait_acked(400, what="with all brokers up")
    wait_for(
        lambda: all(len(p["isr"]) == 3 for p in cluster.admin.describe_topic("after")["partitions"]),
        what="full ISRs of after",
    )
    others = [b for b in cluster.brokers if b != survivor]
    for other in others:
        cluster.brokers[other].kill()
    wait_for(
        lambda: all(
            p["leader"] == survivor and p["isr"] == [survivor]
            for p in cluster.admin.describe_topic("after")["partitions"]
        ),
        timeout=20,
        what=f"broker {survivor} to lead every partition of after alone",
    )
    work.wait_progress(800, timeout=30, what=f"with broker {survivor} alone")
    work.stop()
    report = check(cluster, client_token(cluster), work)
    assert report.ok, report.summary()
    assert work.failed == 0, work.describe()
    assert alive(cluster, survivor)
    sizes = {
        (d["directoryId"], r["partition"]): r["sizeBytes"]
        for d in cluster.log_dirs(survivor)
        for r in d["replicas"]
        if r["topic"] == "after"
    }
    assert {key[0] for key in sizes} == {healthy} and len(sizes) == PARTITIONS, sizes
    assert all(size > 0 for size in sizes.values()), sizes


# -- 1. discovered at bootstrap --------------------------------------------------------------


def test_dir_failure_discovered_at_bootstrap(cluster: Cluster) -> None:
    start_three(cluster)
    create_topic(cluster, "boot")
    history = History()
    work = workload(cluster, "boot", "boot", history)
    work.wait_acked(800)

    before = cluster.admin.describe_topic("boot")
    victim = before["partitions"][0]["leader"]
    failed = replica_dir(before["partitions"][0], victim)
    index = dir_index(cluster, victim, failed)
    healthy = cluster.dir_id(victim, 1 - index)
    hosted = hosted_in(before, victim, failed)
    elsewhere = [i for i in range(PARTITIONS) if i not in hosted]

    assert cluster.brokers[victim].stop() == 0  # SIGTERM: a controlled shutdown
    cluster.mounts[(victim, index)].shutdown()  # from now on every I/O on that volume fails
    work.wait_progress(500, what=f"while broker {victim} is down")
    cluster.brokers[victim].start()

    wait_for(
        lambda: (
            cluster.admin.broker(victim)["hasOfflineLogDirs"] and not cluster.admin.broker(victim)["fenced"]
        ),
        what=f"broker {victim} registered with an offline dir and unfenced",
    )
    registration = cluster.admin.broker(victim)
    assert registration["logDirs"] == [healthy], registration
    view = {d["path"]: d for d in cluster.log_dirs(victim)}
    assert view[str(cluster.mounts[(victim, index)].path)]["state"] == "offline"
    wait_for_failed_dir_to_be_left(cluster, "boot", victim, failed, hosted, reported=False)
    # Its healthy dir's replicas catch up and rejoin their ISRs.
    wait_for(
        lambda: all(
            victim in cluster.admin.describe_topic("boot")["partitions"][i]["isr"] for i in elsewhere
        ),
        what=f"broker {victim} back in the ISRs of its healthy dir",
    )
    work.wait_progress(500, what=f"after broker {victim} restarted")
    work.stop()
    report = check(cluster, client_token(cluster), work)
    assert report.ok, report.summary()
    assert work.failed == 0, work.describe()
    after = cluster.admin.describe_topic("boot")
    for i in hosted:
        assert after["partitions"][i]["leader"] != victim and victim not in after["partitions"][i]["isr"]


# -- 2. and 3. at runtime --------------------------------------------------------------------


def test_leader_dir_failure_at_runtime(cluster: Cluster) -> None:
    start_three(cluster)
    create_topic(cluster, "lead")
    history = History()
    work = workload(cluster, "lead", "lead", history)
    work.wait_acked(800)

    before = cluster.admin.describe_topic("lead")
    victim = before["partitions"][0]["leader"]
    failed = replica_dir(before["partitions"][0], victim)
    index = dir_index(cluster, victim, failed)
    hosted = hosted_in(before, victim, failed)
    led = [i for i in hosted if before["partitions"][i]["leader"] == victim]
    assert 0 in led

    cluster.mounts[(victim, index)].shutdown()
    wait_for_failed_dir_to_be_left(cluster, "lead", victim, failed, hosted)
    work.wait_progress(800, what="after the leader's dir failed")
    work.stop()
    report = check(cluster, client_token(cluster), work)
    assert report.ok, report.summary()
    assert work.failed == 0, work.describe()
    assert alive(cluster, victim) and not cluster.admin.broker(victim)["fenced"]

    still_serves_its_healthy_dir(cluster, victim, 1 - index)


def test_follower_dir_failure_at_runtime(cluster: Cluster) -> None:
    start_three(cluster)
    # Broker 3 is never first in replica order: it leads nothing, it only follows.
    create_topic(cluster, "follow", assignment=[[1, 2, 3], [2, 1, 3]] * (PARTITIONS // 2))
    history = History()
    work = workload(cluster, "follow", "follow", history)
    work.wait_acked(800)

    victim = 3
    before = cluster.admin.describe_topic("follow")
    by_dir = {cluster.dir_id(victim, i): i for i in (0, 1)}
    failed = max(by_dir, key=lambda d: len(hosted_in(before, victim, d)))
    index = by_dir[failed]
    hosted = hosted_in(before, victim, failed)
    assert hosted and all(before["partitions"][i]["leader"] != victim for i in hosted)
    leaders = {i: before["partitions"][i]["leader"] for i in range(PARTITIONS)}

    cluster.mounts[(victim, index)].shutdown()
    wait_for_failed_dir_to_be_left(cluster, "follow", victim, failed, hosted)
    work.wait_progress(800, what="after the follower's dir failed")
    after = cluster.admin.describe_topic("follow")
    # Losing a follower moves no leadership; its healthy dir's replicas stay in their ISRs.
    assert {i: after["partitions"][i]["leader"] for i in range(PARTITIONS)} == leaders
    for i in range(PARTITIONS):
        if i not in hosted:
            assert victim in after["partitions"][i]["isr"], after["partitions"][i]
    work.stop()
    report = check(cluster, client_token(cluster), work)
    assert report.ok, report.summary()
    assert work.failed == 0, work.describe()

    still_serves_its_healthy_dir(cluster, victim, 1 - index)


# -- 4. randomized faults --------------------------------------------------------------------

FAULT_SECONDS = 35.0
MAX_DISK_FAILURES = 2
MAX_PAUSE_SECONDS = 2 * SESSION_TIMEOUT_MS / 1000  # long enough to be fenced


def ready(cluster: Cluster, broker: int) -> bool:
    """The broker process itself says it is registered and unfenced (`/readyz`): after a restart
    the controller may still show the previous incarnation's live session."""
    if not alive(cluster, broker):
        return False
    try:
        return httpx.get(f"{cluster.brokers[broker].url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def cluster_state(cluster: Cluster, topic: str) -> str:
    """What a failed recovery wait shows: processes, registrations, partitions."""
    lines = []
    for b, broker in sorted(cluster.brokers.items()):
        code = None if broker.process is None else broker.process.poll()
        lines.append(f"broker {b}: exit code {code}, ready {ready(cluster, b)}")
    try:
        for registration in cluster.admin.brokers():
            lines.append(f"registration {registration}")
        for p in cluster.admin.describe_topic(topic)["partitions"]:
            lines.append(f"{topic}-{p['partitionIndex']}: leader {p['leader']} isr {p['isr']}")
    except ClientError as exc:
        lines.append(f"controller: {exc}")
    return "\n".join(lines)


def healthy(cluster: Cluster, topic: str) -> bool:
    """Every broker up and unfenced with no offline dir, every partition led with a full ISR."""
    if not all(ready(cluster, b) for b in cluster.brokers):
        return False
    brokers = cluster.admin.brokers()
    if len(brokers) != 3 or any(b["fenced"] or b["offlineLogDirs"] for b in brokers):
        return False
    return all(
        p["leader"] >= 0 and len(p["isr"]) == 3 for p in cluster.admin.describe_topic(topic)["partitions"]
    )


def replace_volume(cluster: Cluster, broker: int, index: int) -> None:
    """Stop the broker, swap the failed volume for a new empty one, format it, start again."""
    cluster.brokers[broker].stop()
    mount = cluster.mounts[(broker, index)]
    mount.detach()
    cluster.mounts[(broker, index)] = cluster.stack.enter_context(loop_ext4(mount.path))
    cluster.brokers[broker].format()  # --ignore-formatted: only the new volume gets an id
    cluster.brokers[broker].start()


def inject(cluster: Cluster, rng: random.Random, kind: str, broker: int) -> str:
    """One fault, healed before returning (except what the cluster must heal itself); says what."""
    if kind in ("pause", "pause-controller"):
        process = (
            cluster.controller.process if kind == "pause-controller" else cluster.brokers[broker].process
        )
        name = "the controller" if kind == "pause-controller" else f"broker {broker}"
        assert process is not None
        seconds = rng.uniform(0.5, MAX_PAUSE_SECONDS)
        process.send_signal(signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            process.send_signal(signal.SIGCONT)
        return f"SIGSTOP {name} for {seconds:.1f} s"
    if kind == "kill":
        seconds = rng.uniform(0.2, 3.0)
        cluster.brokers[broker].kill()
        time.sleep(seconds)
        cluster.brokers[broker].start()
        return f"kill -9 broker {broker}, restart after {seconds:.1f} s"
    if kind == "kill-controller":
        seconds = rng.uniform(0.2, 3.0)
        cluster.controller.kill()
        time.sleep(seconds)
        cluster.controller.start()  # same data dir, same port (kept from the first start)
        return f"kill -9 the controller, restart after {seconds:.1f} s"
    assert kind == "disk", kind
    index = rng.randrange(2)
    directory = cluster.dir_id(broker, index)
    cluster.mounts[(broker, index)].shutdown()
    wait_for(
        tolerant(lambda: directory in cluster.admin.broker(broker)["offlineLogDirs"]),
        what=f"dir {index} of broker {broker} reported offline",
    )
    seconds = rng.uniform(1.0, 4.0)
    time.sleep(seconds)
    replace_volume(cluster, broker, index)
    return f"EIO on dir {index} of broker {broker}, volume replaced after {seconds:.1f} s"


def test_randomized_faults(cluster: Cluster) -> None:
    seed = int(os.environ.get("KIP112_SEED") or random.SystemRandom().randrange(2**32))
    print(f"\nKIP-112 randomized run: seed {seed} (replay with KIP112_SEED={seed})")
    rng = random.Random(seed)
    start_three(cluster)
    create_topic(cluster, "chaos")
    history = History()
    work = workload(cluster, "chaos", f"chaos{seed}", history)
    work.wait_acked(500)

    faults: list[str] = []
    disk_failures = 0
    ends = time.monotonic() + FAULT_SECONDS
    while time.monotonic() < ends:
        time.sleep(rng.uniform(0.5, 2.0))
        kinds = ["pause", "pause", "kill", "kill", "kill-controller", "pause-controller"]
        if disk_failures < MAX_DISK_FAILURES:
            kinds += ["disk", "disk"]
        kind = rng.choice(kinds)
        disk_failures += kind == "disk"
        started, acked = time.monotonic(), work.acked
        what = inject(cluster, rng, kind, rng.choice(sorted(cluster.brokers)))
        try:
            wait_for(tolerant(lambda: healthy(cluster, "chaos")), timeout=60, what=f"recovery from: {what}")
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}\n{cluster_state(cluster, 'chaos')}") from exc
        # Every partition takes acks=-1 writes again before the next fault.
        work.wait_every_partition_progress(20, timeout=60, what=f"after: {what}")
        faults.append(
            f"{what}: healed in {time.monotonic() - started:.1f} s, +{work.acked - acked} acknowledged"
        )
        print(f"  {faults[-1]}")

    work.stop()
    report = check(cluster, client_token(cluster), work)
    summary = f"seed {seed}: {report.summary()}; {work.describe()}; faults: {faults}"
    assert report.ok, summary
    assert len(faults) >= 4, summary
    assert work.acked >= 5000, summary
