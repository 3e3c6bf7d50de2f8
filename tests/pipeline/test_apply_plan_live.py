"""`jbodctl apply-plan` (the installed console script) against a real local cluster: a real
controller and two real agents with two loop-mounted log dirs each (tests/broker/conftest.py).
A plan moves replicas between the dirs of their broker; the brokers' `GET /v1/log-dirs` and the
controller's `GET /v1/topics/{name}` must then agree on the new dirs, a re-run must be a no-op,
and a plan naming a dir the broker does not have must fail with one line and move nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.broker import conftest as broker_conftest
from tests.broker.conftest import Cluster, wait_for
from tests.broker.data import fetch_all, produce
from tests.fs import requires_root

pytestmark = requires_root

cluster = broker_conftest.cluster  # the real-cluster fixture, shared with tests/broker

JBODCTL = Path(sys.executable).with_name("jbodctl")
TOPIC = "plan-live"
NOT_A_DIR = "ZmFrZS1kaXItbm90LWhlcg"  # a canonical Uuid that no broker has


def _jbodctl(cluster: Cluster, plan: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(JBODCTL),
            "--controller",
            cluster.controller.url,
            "--token-file",
            str(cluster.controller.admin_token_file),
            "apply-plan",
            str(plan),
            "--poll-interval",
            "0.1",
            "--timeout",
            "60",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _placement(cluster: Cluster) -> dict[tuple[int, int], tuple[str, bool]]:
    """(broker, partition) → (directoryId, any future replica) of every replica of TOPIC, per the brokers."""
    out: dict[tuple[int, int], tuple[str, bool]] = {}
    futures: set[tuple[int, int]] = set()
    for broker in cluster.brokers:
        for d in cluster.log_dirs(broker):
            for r in d["replicas"]:
                if r["topic"] != TOPIC:
                    continue
                if r["future"]:
                    futures.add((broker, r["partition"]))
                else:
                    out[(broker, r["partition"])] = (d["directoryId"], False)
    return {key: (directory, key in futures) for key, (directory, _) in out.items()}


def _assigned(cluster: Cluster) -> dict[tuple[int, int], str]:
    """(broker, partition) → directoryId of every replica of TOPIC, per the controller."""
    return {
        (broker, p["partitionIndex"]): directory
        for p in cluster.admin.describe_topic(TOPIC)["partitions"]
        for broker, directory in zip(p["replicas"], p["directories"], strict=True)
    }


def _setup(cluster: Cluster) -> dict[int, list[bytes]]:
    """Two brokers with two dirs each, TOPIC with 4 single-replica partitions holding data."""
    for node_id in (1, 2):  # brokers take the admin token jbodctl uses, as the operator configures them
        cluster.add_broker(node_id, dirs=2, admin_token_file=str(cluster.controller.admin_token_file))
    wait_for(lambda: cluster.all_unfenced(2), what="both brokers")
    cluster.create_placed_topic(TOPIC, partitions=4, rf=1)
    values: dict[int, list[bytes]] = {}
    for p in cluster.admin.describe_topic(TOPIC)["partitions"]:
        index = p["partitionIndex"]
        values[index] = [os.urandom(500) for _ in range(300)]
        assert produce(cluster, p["leader"], TOPIC, index, values[index])["errorCode"] == 0
    return values


def _plan(cluster: Cluster, tmp_path: Path, partitions: list[int], *, to: str | None = None) -> Path:
    """A plan (the `jbod-pipeline plan` format) moving each partition to the other dir of its broker."""
    sizes = {
        (broker, r["partition"]): r["sizeBytes"]
        for broker in cluster.brokers
        for d in cluster.log_dirs(broker)
        for r in d["replicas"]
        if r["topic"] == TOPIC and not r["future"]
    }
    moves: list[dict[str, Any]] = []
    for (broker, partition), source in sorted(_assigned(cluster).items()):
        if partition not in partitions:
            continue
        other = next(d["directoryId"] for d in cluster.log_dirs(broker) if d["directoryId"] != source)
        moves.append(
            {
                "topic": TOPIC,
                "partition": partition,
                "brokerId": broker,
                "fromDirectoryId": source,
                "toDirectoryId": to or other,
                "bytes": sizes[(broker, partition)],
            }
        )
    path = tmp_path / f"plan-{len(list(tmp_path.glob('plan-*.json')))}.json"
    path.write_text(
        json.dumps({"version": 1, "threshold": 0.8, "balanceMargin": 0.05, "drain": [], "moves": moves})
    )
    return path


def test_apply_plan_moves_replicas_on_a_live_cluster_and_a_rerun_is_a_no_op(
    cluster: Cluster, tmp_path: Path
) -> None:
    values = _setup(cluster)
    before = _placement(cluster)
    plan = _plan(cluster, tmp_path, [0, 1, 2])
    moves = json.loads(plan.read_text())["moves"]
    assert len(moves) == 3

    run = _jbodctl(cluster, plan, "--max-in-flight", "2", "--max-bytes-per-second", "50000000", "-o", "json")
    assert run.returncode == 0, run.stderr
    assert [o["status"] for o in json.loads(run.stdout)] == ["done"] * 3
    assert "3 done" in run.stderr and "0 failed" in run.stderr

    targets = {(m["brokerId"], m["partition"]): m["toDirectoryId"] for m in moves}
    after = _placement(cluster)
    assert {key: after[key] for key in targets} == {key: (d, False) for key, d in targets.items()}
    assert {k: v for k, v in after.items() if k not in targets} == {
        k: v for k, v in before.items() if k not in targets
    }, "a replica outside the plan moved"
    wait_for(
        lambda: all(_assigned(cluster)[key] == d for key, d in targets.items()),
        timeout=10,
        what="the controller to record the new dirs",
    )
    for (broker, partition), _ in targets.items():
        assert [v for _, v in fetch_all(cluster, broker, TOPIC, partition)] == values[partition]

    again = _jbodctl(cluster, plan)
    assert again.returncode == 0, again.stderr
    lines = again.stdout.splitlines()
    assert len(lines) == 3 and all(line.split()[0] == "already-done" for line in lines), again.stdout
    assert "3 already-done" in again.stderr
    assert _placement(cluster) == after


def test_a_plan_naming_a_dir_the_broker_lacks_fails_in_one_line_and_moves_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    _setup(cluster)
    before, assigned = _placement(cluster), _assigned(cluster)
    plan = _plan(cluster, tmp_path, [0], to=NOT_A_DIR)

    run = _jbodctl(cluster, plan)
    assert run.returncode != 0
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("jbodctl: error: "), run.stderr
    assert "LOG_DIR_NOT_FOUND" in run.stderr
    assert _placement(cluster) == before
    assert _assigned(cluster) == assigned
