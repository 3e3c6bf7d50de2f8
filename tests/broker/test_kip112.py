"""KIP-112 system tests: a JBOD broker survives the loss of one log dir, with real clients.

Every test runs three real brokers with two loop-mounted ext4 dirs each, a real Kafka producer
(confluent-kafka: idempotent, acks=all, RF 3, min.insync.replicas=2, a long delivery timeout so
failures are retried, not dropped) and a real Kafka consumer, and checks the produced and
consumed records with `History`: no acknowledged record lost or moved, none reordered, none
duplicated.

1. A dir that fails while its broker is down is discovered at bootstrap: the broker starts
   without it, leadership of its replicas stays elsewhere, production goes on.
2. / 3. A dir fails at runtime under a partition leader / under a follower only; then, with the
   two other brokers killed, the damaged broker still leads and serves from its healthy dir.
4. A seeded random run of faults (dir failures with replaced volumes, kill -9 of brokers and of
   the controller, SIGSTOP pauses) during production; `KIP112_SEED=<n>` replays a run.
5. The same run on a controller quorum (three controllers, a 3-member etcd, contract §3.8), with
   controller failovers among the faults: kill -9 and SIGSTOP of the active controller, kill -9 of
   an etcd member. Each failover is timed until the workload progressed again.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jbod_client.controller import ClientError
from jbod_client.history import History
from jbod_local.processes import LocalController
from tests.broker.conftest import Cluster, broker_ready, start_cluster, wait_for
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
        yield start_cluster(
            stack,
            tmp_path,
            controller_args=["--broker-session-timeout-ms", str(SESSION_TIMEOUT_MS)],
            admin_timeout=10,
        )


# -- helpers ---------------------------------------------------------------------------------


def start_three(cluster: Cluster, **settings: str) -> None:
    merged: dict[str, str] = {**BROKER_SETTINGS, **settings}
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
        cluster=cluster,
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
    report = check(cluster, work)
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
    report = check(cluster, work)
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
    report = check(cluster, work)
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
    report = check(cluster, work)
    assert report.ok, report.summary()
    assert work.failed == 0, work.describe()

    still_serves_its_healthy_dir(cluster, victim, 1 - index)


# -- 4. randomized faults --------------------------------------------------------------------

FAULT_SECONDS = 35.0
MIN_FAULTS = 4  # a slow machine that heals slowly still injects this many faults
MAX_DISK_FAILURES = 2
MAX_PAUSE_SECONDS = 2 * SESSION_TIMEOUT_MS / 1000  # long enough to be fenced


def ready(cluster: Cluster, broker: int) -> bool:
    """The broker process itself says it is registered and unfenced (`/readyz`): after a restart
    the controller may still show the previous incarnation's live session."""
    if not alive(cluster, broker):
        return False
    return broker_ready(cluster.brokers[broker].url)


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
            time.sleep(seconds)  # fixed wait: the fault is a pause of this random length
        finally:
            process.send_signal(signal.SIGCONT)
        return f"SIGSTOP {name} for {seconds:.1f} s"
    if kind == "kill":
        seconds = rng.uniform(0.2, 3.0)
        cluster.brokers[broker].kill()
        time.sleep(seconds)  # fixed wait: the broker stays down this random time
        cluster.brokers[broker].start()
        return f"kill -9 broker {broker}, restart after {seconds:.1f} s"
    if kind == "kill-controller":
        seconds = rng.uniform(0.2, 3.0)
        cluster.controller.kill()
        time.sleep(seconds)  # fixed wait: the controller stays down this random time
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
    time.sleep(seconds)  # fixed wait: the failed volume stays in place this random time
    replace_volume(cluster, broker, index)
    return f"EIO on dir {index} of broker {broker}, volume replaced after {seconds:.1f} s"


# -- 5. randomized faults with controller failovers (contract §3.8) ---------------------------

QUORUM_FAULTS = ("kill-active-controller", "pause-active-controller", "kill-etcd-member")
#: The module's short session timeout: a failover (~2-2.5 s) fences no broker, as the new active
#: controller gives every registered broker a fresh session (§3.8).
QUORUM_SESSION_TIMEOUT_MS = SESSION_TIMEOUT_MS
MAX_CONTROLLER_PAUSE_SECONDS = 4.0  # sometimes past the 2 s lease: a standby takes over


@dataclass
class Failover:
    """What one quorum fault did to the controllers and how long the workload took to go on.
    Times are seconds from the fault (the kill -9 or SIGSTOP)."""

    fault: str
    before: int  # node id of the active controller at the fault
    after: int  # node id of the one the controllers agreed on afterwards
    agreed_s: float  # until the running controllers agreed on an active one (a new one after a kill)
    progressed_s: float  # until then, every partition had 20 more records acknowledged
    stall_s: float  # the longest time in that window with no acknowledgement at all

    def __str__(self) -> str:
        change = (
            f"active {self.before} -> {self.after}"
            if self.after != self.before
            else f"active {self.before} kept"
        )
        return (
            f"{self.fault}: {change}, agreed after {self.agreed_s:.2f} s, every partition progressed "
            f"after {self.progressed_s:.2f} s, longest ack stall {self.stall_s:.2f} s"
        )


class ActiveWatch(threading.Thread):
    """Polls which controller the running ones agree is active, every 50 ms, and keeps every
    change (also one no fault asked for, such as a lease lost while an etcd member was down)."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(name="active-watch", daemon=True)
        self.cluster = cluster
        self.stopping = threading.Event()
        # (monotonic time agreed, node id before, node id after, seconds with no agreed active)
        self.changes: list[tuple[float, int, int, float]] = []

    def run(self) -> None:
        last: int | None = None
        lost: float | None = None
        while not self.stopping.wait(0.05):
            active, now = self.cluster.named_active(), time.monotonic()
            if active is None:
                lost = now if lost is None else lost
                continue
            if last is not None and active != last:
                self.changes.append((now, last + 1, active + 1, now - (now if lost is None else lost)))
            last, lost = active, None

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def restart_later(controller: LocalController, delay: float) -> tuple[threading.Thread, list[BaseException]]:
    """Restart a killed controller (same data dir, same port) after `delay` s, in a thread."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            time.sleep(delay)  # fixed wait: the controller stays down this random time
            controller.start()
        except BaseException as exc:  # surfaced by the caller after join()
            errors.append(exc)

    thread = threading.Thread(target=run, name=f"restart {controller.data_dir.name}", daemon=True)
    thread.start()
    return thread, errors


def inject_quorum_fault(
    cluster: Cluster, rng: random.Random, kind: str, work: Workload
) -> tuple[str, Failover]:
    """One fault of the controller quorum, healed before returning: which, and the `Failover` seen."""
    assert cluster.etcd is not None
    before = cluster.active_controller()
    started = time.monotonic()
    if kind == "kill-active-controller":
        seconds = rng.uniform(0.2, 3.0)
        cluster.controllers[before].kill()
        thread, errors = restart_later(cluster.controllers[before], seconds)
        # The restarted one comes back as a standby; only if it won the election itself may the
        # controllers name it again.
        after = wait_for(
            lambda: (
                (i := cluster.named_active()) is not None and (i != before or not thread.is_alive()) and [i]
            ),
            timeout=30,
            what=f"a new active controller after the kill of {before + 1}",
        )[0]
        agreed = time.monotonic() - started
        thread.join(90)
        assert not thread.is_alive() and not errors, f"restart of controller {before + 1}: {errors}"
        what = f"kill -9 the active controller {before + 1}, restart after {seconds:.1f} s"
    elif kind == "pause-active-controller":
        seconds = rng.uniform(0.5, MAX_CONTROLLER_PAUSE_SECONDS)
        process = cluster.controllers[before].process
        assert process is not None
        others = [i for i in range(len(cluster.controllers)) if i != before]
        taken_over: float | None = None
        process.send_signal(signal.SIGSTOP)
        try:
            while time.monotonic() < started + seconds:
                if taken_over is None and cluster.named_active(others) not in (None, before):
                    taken_over = time.monotonic() - started
                time.sleep(0.05)
        finally:
            process.send_signal(signal.SIGCONT)
        after = cluster.active_controller()
        agreed = time.monotonic() - started if taken_over is None else taken_over
        what = f"SIGSTOP the active controller {before + 1} for {seconds:.1f} s"
    else:
        assert kind == "kill-etcd-member", kind
        member = rng.randrange(cluster.etcd.size)
        seconds = rng.uniform(0.5, 3.0)
        cluster.etcd.kill_member(member)
        time.sleep(seconds)  # fixed wait: the etcd member stays down this random time
        cluster.etcd.start_member(member)
        after = cluster.active_controller()
        agreed = time.monotonic() - started
        what = f"kill -9 etcd member {member}, restart after {seconds:.1f} s"
    work.wait_every_partition_progress(20, timeout=60, what=f"after: {what}")
    progressed = time.monotonic() - started
    failover = Failover(
        fault=what,
        before=before + 1,
        after=after + 1,
        agreed_s=agreed,
        progressed_s=progressed,
        stall_s=work.longest_ack_gap(started, started + progressed),
    )
    return what, failover


# -- the randomized run (4. and 5.) -----------------------------------------------------------


def randomized_faults(
    cluster: Cluster, kinds: Sequence[str], *, required: Sequence[str] = ()
) -> list[Failover]:
    """A seeded random run of `kinds` (weighted by repetition; at most `MAX_DISK_FAILURES` "disk")
    during production for `FAULT_SECONDS` (and at least `MIN_FAULTS` of them), and then until each
    of `required` happened once; each fault healed and every partition writable again before the
    next. Checks that nothing acknowledged was lost; returns the `Failover` of every quorum fault."""
    seed = int(os.environ.get("KIP112_SEED") or random.SystemRandom().randrange(2**32))
    print(f"\nKIP-112 randomized run: seed {seed} (replay with KIP112_SEED={seed})")
    rng = random.Random(seed)
    start_three(cluster)
    create_topic(cluster, "chaos")
    history = History()
    work = workload(cluster, "chaos", f"chaos{seed}", history)
    work.wait_acked(500)

    faults: list[str] = []
    failovers: list[Failover] = []
    windows: list[tuple[float, float, str]] = []  # (start, healed, what) of every fault
    watch = ActiveWatch(cluster) if cluster.etcd is not None else None
    if watch is not None:
        watch.start()
        cluster.stack.callback(watch.stop)
    done: set[str] = set()
    disk_failures = 0
    ends = time.monotonic() + FAULT_SECONDS
    while True:
        overtime = time.monotonic() >= ends  # then only the required kinds not seen yet
        if overtime and done.issuperset(required):
            break
        time.sleep(rng.uniform(0.5, 2.0))  # fixed wait: production runs a random time between faults
        if overtime:
            choices = [k for k in required if k not in done]
        else:
            choices = [k for k in kinds if k != "disk" or disk_failures < MAX_DISK_FAILURES]
        kind = rng.choice(choices)
        done.add(kind)
        disk_failures += kind == "disk"
        started, acked = time.monotonic(), work.acked
        try:
            if kind in QUORUM_FAULTS:
                what, failover = inject_quorum_fault(cluster, rng, kind, work)
                failovers.append(failover)
                print(f"  failover: {failover}")
            else:
                what = inject(cluster, rng, kind, rng.choice(sorted(cluster.brokers)))
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}\n{cluster_state(cluster, 'chaos')}") from exc
        try:
            wait_for(tolerant(lambda: healthy(cluster, "chaos")), timeout=60, what=f"recovery from: {what}")
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}\n{cluster_state(cluster, 'chaos')}") from exc
        # Every partition takes acks=-1 writes again before the next fault.
        work.wait_every_partition_progress(20, timeout=60, what=f"after: {what}")
        windows.append((started, time.monotonic(), what))
        faults.append(
            f"{what}: healed in {time.monotonic() - started:.1f} s, +{work.acked - acked} acknowledged"
        )
        print(f"  {faults[-1]}")

    work.stop()
    if watch is not None:
        watch.stop()
        print("active controller changes seen by the controllers:")
        for when, before, after, gap in watch.changes:
            during = [f"{w} (+{when - a:.2f} s)" for a, b, w in windows if a <= when <= b + 0.5]
            print(f"  {before} -> {after} after {gap:.2f} s without one, during: {during or 'no fault'}")
    report = check(cluster, work)
    summary = f"seed {seed}: {report.summary()}; {work.describe()}; faults: {faults}"
    assert report.ok, summary
    assert work.acked >= 5000, summary
    return failovers


def test_randomized_faults(cluster: Cluster) -> None:
    randomized_faults(
        cluster, ["pause", "pause", "kill", "kill", "kill-controller", "pause-controller", "disk", "disk"]
    )


@pytest.fixture
def quorum_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Three controllers on a 3-member etcd (§3.8), fencing silent brokers after
    `QUORUM_SESSION_TIMEOUT_MS`."""
    with contextlib.ExitStack() as stack:
        yield start_cluster(
            stack,
            tmp_path,
            controller_args=["--broker-session-timeout-ms", str(QUORUM_SESSION_TIMEOUT_MS)],
            quorum=True,
            admin_timeout=10,
        )


def test_randomized_faults_with_controller_failovers(quorum_cluster: Cluster) -> None:
    """Test 4's run on a controller quorum, with kill -9 and SIGSTOP of the active controller and
    kill -9 of etcd members among the faults (each at least once): nothing acknowledged is lost,
    and every failover is timed until the workload progressed again."""
    failovers = randomized_faults(
        quorum_cluster,
        [
            "pause",
            "pause",
            "kill",
            "kill",
            "disk",
            "disk",
            "kill-active-controller",
            "kill-active-controller",
            "pause-active-controller",
            "pause-active-controller",
            "kill-etcd-member",
        ],
        required=QUORUM_FAULTS,
    )
    print("controller failovers:")
    for failover in failovers:
        print(f"  {failover}")
    kills = [f for f in failovers if f.fault.startswith("kill -9 the active")]
    # Another controller takes over, unless the killed one was restarted before the others saw its
    # lease run out: the new process then deletes its dead predecessor's leader key and may win the
    # election itself (`inject_quorum_fault` only accepts that once the restart is done).
    assert kills, [str(f) for f in failovers]
