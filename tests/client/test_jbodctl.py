"""`jbodctl` run as a real process against a real controller process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jbod_core.ids import Uuid
from tests.harness import ControllerProcess

JBODCTL = str(Path(sys.executable).parent / "jbodctl")


def run(
    controller: ControllerProcess, *args: str, token_file: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "JBOD_CONTROLLER_URL": controller.url,
        "JBOD_TOKEN_FILE": str(token_file or controller.data_dir / "admin.token"),
        "COLUMNS": "200",
    }
    return subprocess.run([JBODCTL, *args], capture_output=True, text=True, env=env, timeout=60)


def register(controller: ControllerProcess, broker_id: int, dirs: list[str]) -> int:
    with controller.broker() as broker:
        reply = broker.post(
            "/v1/brokers/register",
            json={
                "brokerId": broker_id,
                "clusterId": controller.cluster_id,
                "incarnationId": str(Uuid(1000 + broker_id, 7)),
                "logDirs": dirs,
            },
        ).json()
        assert reply["errorCode"] == 0, reply
        beat = broker.post(
            "/v1/brokers/heartbeat",
            json={"brokerId": broker_id, "brokerEpoch": reply["brokerEpoch"], "currentMetadataOffset": 10**6},
        ).json()
        assert beat["isFenced"] is False
        return int(reply["brokerEpoch"])


DIRS = {1: ["ERERERERERERERERERERQQ"], 2: ["IiIiIiIiIiIiIiIiIiIiIg", "MzMzMzMzMzMzMzMzMzMzMw"]}


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[ControllerProcess]:
    """The controller of these tests' brokers, which heartbeat once: a session that outlasts the
    test, so that no broker is fenced between two `jbodctl` runs on a loaded machine."""
    with ControllerProcess(data_dir=tmp_path / "controller", session_timeout_ms=600_000) as proc:
        yield proc


@pytest.fixture
def cluster(controller: ControllerProcess) -> ControllerProcess:
    for broker_id, dirs in DIRS.items():
        register(controller, broker_id, dirs)
    return controller


def test_topic_lifecycle_in_json(cluster: ControllerProcess) -> None:
    created = run(
        cluster,
        "--output",
        "json",
        "topics",
        "create",
        "orders",
        "-p",
        "3",
        "-r",
        "2",
        "-c",
        "min.insync.replicas=2",
    )
    assert created.returncode == 0, created.stderr
    reply = json.loads(created.stdout)
    assert reply["errorCode"] == 0 and reply["numPartitions"] == 3 and reply["replicationFactor"] == 2

    described = run(cluster, "topics", "describe", "orders", "-o", "json")
    topic = json.loads(described.stdout)
    assert topic["configs"] == {"min.insync.replicas": "2"}
    assert [p["partitionIndex"] for p in topic["partitions"]] == [0, 1, 2]
    for p in topic["partitions"]:
        assert sorted(p["replicas"]) == [1, 2]
        # broker 1 has one dir: the controller pre-selects it; broker 2 has two: UNASSIGNED
        assert p["directories"][p["replicas"].index(1)] == DIRS[1][0]
        assert p["directories"][p["replicas"].index(2)] == "AAAAAAAAAAAAAAAAAAAAAA"

    listed = json.loads(run(cluster, "-o", "json", "topics", "list").stdout)
    assert [t["name"] for t in listed] == ["orders"]

    deleted = run(cluster, "topics", "delete", "orders")
    assert deleted.returncode == 0 and "Deleted topic" in deleted.stdout
    assert json.loads(run(cluster, "-o", "json", "topics", "list").stdout) == []


def test_tables_show_brokers_and_dirs(cluster: ControllerProcess) -> None:
    shown = run(cluster, "brokers")
    assert shown.returncode == 0, shown.stderr
    wide = run(cluster, "brokers", "--wide")
    for dirs in DIRS.values():
        for d in dirs:
            assert d[:8] in shown.stdout and d not in shown.stdout  # short ids, unique in the table
            assert d in wide.stdout
    info = json.loads(run(cluster, "-o", "json", "cluster").stdout)
    assert info["brokers"] == 2 and info["fencedBrokers"] == 0
    one = json.loads(run(cluster, "brokers", "describe", "2", "-o", "json").stdout)
    assert one["logDirs"] == [str(u) for u in sorted(Uuid.parse(d) for d in DIRS[2])]


def test_metadata_export_writes_every_record(cluster: ControllerProcess, tmp_path: Path) -> None:
    assert run(cluster, "topics", "create", "t", "-p", "5", "-r", "1").returncode == 0
    out = tmp_path / "meta.jsonl"

    def end_offset() -> int:
        return int(json.loads(run(cluster, "-o", "json", "cluster").stdout)["metadataEndOffset"])

    # The brokers' heartbeats may add records (a fencing on a loaded machine) while the export runs.
    before = end_offset()
    exported = run(cluster, "metadata", "export", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    after = end_offset()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["offset"] for r in lines] == list(range(len(lines)))
    types = [r["type"] for r in lines]
    assert types.count("RegisterBrokerRecord") == 2
    assert types.count("PartitionRecord") == 5
    assert before <= len(lines) <= after


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("topics", "create", "bad/name", "-p", "1", "-r", "1"), "errorCode 17"),
        (("topics", "create", "x", "-p", "1", "-r", "9"), "errorCode 38"),
        (("topics", "create", "x", "-p", "0", "-r", "1"), "errorCode 37"),
        (("topics", "create", "x", "--assignment", "1,1"), "errorCode 39"),
        (("topics", "create", "x", "--assignment", "1,a"), "--assignment"),
        (("topics", "create", "x"), "--partitions"),
        (("topics", "describe", "missing"), "errorCode 3"),
        (("topics", "delete", "missing"), "errorCode 3"),
        (("brokers", "describe", "99"), "errorCode 102"),
        (("brokers", "describe", "abc"), "is not a valid integer"),
        (("topics", "frobnicate"), "No such command"),
        (("--output", "yaml", "cluster"), "yaml"),
    ],
)
def test_errors_are_one_line_and_non_zero(
    cluster: ControllerProcess, args: tuple[str, ...], needle: str
) -> None:
    result = run(cluster, *args)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("jbodctl: error:") and needle in lines[0]
    assert "Traceback" not in result.stderr


def test_wrong_token_and_unreachable_controller(cluster: ControllerProcess, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.token"
    wrong.write_text("not-the-token\n")
    result = run(cluster, "topics", "list", token_file=wrong)
    assert result.returncode == 1 and "errorCode 31" in result.stderr
    cluster_token = run(cluster, "topics", "list", token_file=cluster.data_dir / "cluster.token")
    assert cluster_token.returncode == 1 and "admin token" in cluster_token.stderr
    env = {**os.environ, "JBOD_TOKEN_FILE": str(cluster.data_dir / "admin.token")}
    refused = subprocess.run(
        [JBODCTL, "--controller", "http://127.0.0.1:1", "topics", "list"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert refused.returncode == 1 and refused.stderr.startswith(
        "jbodctl: error: cannot reach the controller"
    )


def test_walkthrough_runs_to_completion(tmp_path: Path) -> None:
    result = subprocess.run(
        [JBODCTL, "local", "walkthrough", "--data-dir", str(tmp_path / "walk")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Walk-through complete" in result.stdout
    assert "the JBOD gate" in result.stdout
    # The controller it started was stopped: its lock is free again.
    proc = ControllerProcess(data_dir=tmp_path / "walk", cluster_id="walkthrough").start()
    try:
        with proc.admin() as admin:
            topic = admin.get("/v1/topics/orders").json()
        assert any(p["offlineReplicas"] == [2] for p in topic["partitions"])
    finally:
        proc.kill()
