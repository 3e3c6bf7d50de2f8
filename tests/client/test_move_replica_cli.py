"""`jbodctl move-replica` to the dir the replica is already in: nothing is copied, one line says
there is nothing to move, exit status 0 (the requested placement holds). The move is Kafka's
AlterReplicaLogDirs to the dir's path, which starts no future replica there; DescribeLogDirs just
before it says which case it was. Real `jbod-controller`, `jbod-agent` (with a SASL_PLAINTEXT
listener) and `jbodctl` processes on plain directories."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from jbod_cli import commands, log_dirs_cli
from jbod_client.controller import ControllerClient, read_token
from jbod_local.processes import LocalBroker, LocalController
from tests.broker.conftest import start_cluster, wait_for
from tests.kafka_api.conftest import KAFKA_LISTENERS

JBODCTL = str(Path(sys.executable).parent / "jbodctl")


@dataclass
class Cluster:
    controller: LocalController
    broker: LocalBroker
    admin: ControllerClient

    def jbodctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "JBOD_CONTROLLER_URL": self.controller.url,
            "JBOD_TOKEN_FILE": str(self.controller.admin_token_file),
            "COLUMNS": "200",
        }
        return subprocess.run([JBODCTL, *args], capture_output=True, text=True, env=env, timeout=60)

    def log_dirs(self) -> list[dict[str, Any]]:
        token = read_token(self.controller.cluster_token_file)
        reply = httpx.get(
            f"{self.broker.url}/v1/log-dirs", headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        assert reply.status_code == 200, reply.text
        dirs: list[dict[str, Any]] = reply.json()
        return dirs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One broker with two dirs and `t` (one partition), shared by the module's tests: each starts
    from wherever the replica is and leaves no move running."""
    with contextlib.ExitStack() as stack:
        running = start_cluster(stack, tmp_path_factory.mktemp("move-replica"))
        properties = {
            "admin.token.file": str(running.controller.admin_token_file),
            "listeners": KAFKA_LISTENERS,
        }
        broker = running.add_broker(1, dirs=2, loop=False, properties=properties)
        wait_for(lambda: running.all_unfenced(1), what="the broker unfenced")
        running.create_placed_topic("t", partitions=1, rf=1)
        yield Cluster(running.controller, broker, running.admin)


def _replicas(dirs: list[dict[str, Any]]) -> dict[str, list[tuple[str, int, bool]]]:
    return {
        d["directoryId"]: [(r["topic"], r["partition"], r["future"]) for r in d["replicas"]]
        for d in dirs
        if d["replicas"]
    }


def test_move_to_the_current_dir_says_there_is_nothing_to_move(cluster: Cluster) -> None:
    [current] = cluster.admin.describe_topic("t")["partitions"][0]["directories"]
    before = cluster.log_dirs()

    moved = cluster.jbodctl("move-replica", "t", "0", "--broker", "1", "--to", current)
    assert moved.returncode == 0, moved.stderr
    assert moved.stderr == ""
    assert moved.stdout.strip().splitlines() == [
        f"Nothing to move: t-0 on broker 1 is already in dir {current}"
    ], moved.stdout

    as_json = cluster.jbodctl("move-replica", "t", "0", "--broker", "1", "--to", current, "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    path = next(d["path"] for d in before if d["directoryId"] == current)
    assert json.loads(as_json.stdout) == {
        "errorCode": 0,
        "outcome": "already-there",
        "directoryId": current,
        "path": path,
    }

    # No copy was started: no future replica anywhere, the placement is unchanged.
    assert _replicas(cluster.log_dirs()) == _replicas(before) == {current: [("t", 0, False)]}
    assert cluster.admin.describe_topic("t")["partitions"][0]["directories"] == [current]


def test_move_to_the_other_dir_still_moves(cluster: Cluster) -> None:
    [current] = cluster.admin.describe_topic("t")["partitions"][0]["directories"]
    other = next(str(d["directoryId"]) for d in cluster.log_dirs() if d["directoryId"] != current)
    moved = cluster.jbodctl("move-replica", "t", "0", "--broker", "1", "--to", other)
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.startswith(f"Moving t-0 on broker 1 to dir {other}"), moved.stdout
    wait_for(
        lambda: cluster.admin.describe_topic("t")["partitions"][0]["directories"] == [other],
        what="the move confirmed",
    )
    wait_for(
        lambda: _replicas(cluster.log_dirs()) == {other: [("t", 0, False)]},
        what="the broker done with the move (no future replica left)",
    )


def test_move_takes_a_unique_prefix_of_the_dir_id(cluster: Cluster) -> None:
    """The tables print short ids; `--to` accepts them and names the whole id it resolved."""
    [current] = cluster.admin.describe_topic("t")["partitions"][0]["directories"]
    moved = cluster.jbodctl("move-replica", "t", "0", "--broker", "1", "--to", current[:8])
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.strip() == f"Nothing to move: t-0 on broker 1 is already in dir {current}"
    unknown = cluster.jbodctl("move-replica", "t", "0", "--broker", "1", "--to", "zzzzzzzz")
    assert unknown.returncode == 1
    assert unknown.stderr.strip().splitlines() == [
        "jbodctl: error: --to zzzzzzzz: no log dir of that broker has this id (see jbodctl log-dirs --wide)"
    ]


def test_resolve_directory_names_the_whole_id_or_refuses() -> None:
    ids = ["AAAAbbbbCCCCddddEEEEff", "AAAAbbbbZZZZddddEEEEff", "QQQQbbbbCCCCddddEEEEff"]
    assert log_dirs_cli.resolve_directory("QQ", ids) == ids[2]
    assert log_dirs_cli.resolve_directory(ids[0], ids) == ids[0]
    with pytest.raises(commands.CommandError, match="ambiguous, it starts 2 dir ids"):
        log_dirs_cli.resolve_directory("AAAAbbbb", ids)
    with pytest.raises(commands.CommandError, match="no log dir"):
        log_dirs_cli.resolve_directory("X", ids)
