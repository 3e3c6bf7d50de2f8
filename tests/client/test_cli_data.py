"""`jbodctl produce / consume / log-dirs / move-replica` run as real processes against a real
controller process: every user mistake and every unreachable peer is one line and a non-zero exit.

The broker registered here advertises a listener on a loopback port that is bound but never
listens, so connections to it are refused at once: that is the "unreachable broker" case."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness import ControllerProcess

JBODCTL = str(Path(sys.executable).parent / "jbodctl")
DIR_1 = "ERERERERERERERERERERQQ"
DIR_2 = "IiIiIiIiIiIiIiIiIiIiIg"
SOME_DIR = "MzMzMzMzMzMzMzMzMzMzMw"


def run(
    controller_url: str,
    token_file: Path,
    *args: str,
    stdin: str = "",
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "JBOD_CONTROLLER_URL": controller_url,
        "JBOD_TOKEN_FILE": str(token_file),
        "COLUMNS": "200",
    }
    return subprocess.run(
        [JBODCTL, *args], input=stdin, capture_output=True, text=True, env=env, timeout=timeout
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], needle: str) -> None:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("jbodctl: error:"), lines[0]
    assert needle in lines[0], lines[0]


def register(controller: ControllerProcess, broker_id: int, dirs: list[str], port: int | None) -> None:
    """Register and unfence a broker; `port` None advertises no listener at all."""
    listeners = [] if port is None else [{"name": "http", "host": "127.0.0.1", "port": port}]
    with controller.broker() as client:
        reply = client.post(
            "/v1/brokers/register",
            json={
                "brokerId": broker_id,
                "clusterId": controller.cluster_id,
                "incarnationId": f"AAAAAAAAAAAAAAAAAAAB{chr(ord('A') + broker_id)}w",
                "logDirs": dirs,
                "listeners": listeners,
            },
        ).json()
        assert reply["errorCode"] == 0, reply
        beat = client.post(
            "/v1/brokers/heartbeat",
            json={"brokerId": broker_id, "brokerEpoch": reply["brokerEpoch"], "currentMetadataOffset": 10**6},
        ).json()
        assert beat["isFenced"] is False, beat


@dataclass
class Cluster:
    controller: ControllerProcess
    dead_port: int

    def run(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return run(self.controller.url, self.controller.data_dir / "admin.token", *args, stdin=stdin)


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A loopback port bound by this test and never listened on: connecting is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


@pytest.fixture
def cluster(controller: ControllerProcess, dead_port: int) -> Cluster:
    """Broker 1 (unreachable listener) leads both partitions of `orders`; broker 2 has no listener."""
    register(controller, 1, [DIR_1], dead_port)
    register(controller, 2, [DIR_2], None)
    with controller.admin() as admin:
        reply = admin.post("/v1/topics", json={"name": "orders", "replicaAssignment": [[1], [1]]}).json()
        assert reply["errorCode"] == 0, reply
    return Cluster(controller, dead_port)


def test_log_dirs_with_no_brokers_is_an_empty_result(controller: ControllerProcess) -> None:
    token = controller.data_dir / "admin.token"
    as_json = run(controller.url, token, "log-dirs", "--output", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == {}
    as_table = run(controller.url, token, "log-dirs")
    assert as_table.returncode == 0, as_table.stderr
    assert as_table.stdout.strip() == "No brokers registered"
    assert as_table.stderr == ""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("produce", "missing", "--value", "x"), "unknown topic missing"),
        (("consume", "missing"), "unknown topic missing"),
        (("consume", "orders", "--partition", "5"), "topic orders has no partition 5"),
        (("produce", "orders", "--partition", "9", "--value", "x"), "topic orders has no partition 9"),
        (("produce", "orders", "--acks", "2", "--value", "x"), "'2' is not one of"),
        (("produce", "orders", "--base64", "--value", "***"), "--value is not valid base64"),
        (("produce", "orders", "--base64", "--key", "@@", "--value", "eA=="), "--key is not valid base64"),
        (("produce", "orders"), "nothing to produce"),
        (("produce",), "Missing argument 'TOPIC'"),
        (("consume", "orders", "--offset", "3", "--latest"), "at most one of"),
        (("consume", "orders", "--max-messages", "0"), "--max-messages"),
        (("consume", "orders", "--timeout", "0"), "--timeout"),
        (("consume", "orders", "--partition", "-1"), "--partition"),
        (("move-replica", "orders", "0", "--broker", "99", "--to", SOME_DIR), "errorCode 102"),
        (
            ("move-replica", "orders", "0", "--broker", "1", "--to", "not/a/dir"),
            "--to 'not/a/dir': not a directory id",
        ),
        (("move-replica", "orders", "0", "--to", SOME_DIR), "Missing option '--broker'"),
        (("move-replica", "orders", "zero", "--broker", "1", "--to", SOME_DIR), "PARTITION"),
        (
            ("move-replica", "orders", "0", "--broker", "1", "--to", SOME_DIR, "--max-bytes-per-second", "0"),
            "0",
        ),
        (("log-dirs", "--broker", "99"), "broker 99 is not registered"),
        (("log-dirs", "--broker", "x"), "is not a valid integer"),
        (("log-dirs", "--broker", "2"), "broker 2 advertises no listener"),
    ],
)
def test_user_mistakes_are_one_line(cluster: Cluster, args: tuple[str, ...], needle: str) -> None:
    assert_one_line_error(cluster.run(*args), needle)


def test_unreachable_broker_is_one_line(cluster: Cluster) -> None:
    url = f"http://127.0.0.1:{cluster.dead_port}"
    listed = cluster.run("log-dirs", "--broker", "1")
    assert_one_line_error(listed, f"cannot reach the broker at {url}")
    moved = cluster.run("move-replica", "orders", "0", "--broker", "1", "--to", SOME_DIR)
    assert_one_line_error(moved, f"cannot reach the broker at {url}")
    # Every registered broker by default: each failure is named, still on one line.
    everyone = cluster.run("log-dirs", "--output", "json")
    assert_one_line_error(everyone, f"broker 1: cannot reach the broker at {url}")
    assert "broker 2: broker 2 advertises no listener" in everyone.stderr
    assert json.loads(everyone.stdout) == {}


def test_produce_to_an_unreachable_leader_fails_after_the_timeout(cluster: Cluster) -> None:
    result = cluster.run("produce", "orders", "--timeout", "1", stdin="a\nb\nc\n")
    assert_one_line_error(result, "3 of 3 records not produced to orders")
    assert "NETWORK_OR_TIMEOUT (errorCode -1)" in result.stderr
    assert f"127.0.0.1:{cluster.dead_port}" in result.stderr


def test_consume_from_an_unreachable_leader_reports_it(cluster: Cluster) -> None:
    result = cluster.run("consume", "orders", "--timeout", "1", "--partition", "0")
    assert_one_line_error(result, "consumed 0 records, but could not fetch orders-0")
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        ("produce", "orders", "--value", "x"),
        ("consume", "orders"),
        ("log-dirs",),
        ("move-replica", "orders", "0", "--broker", "1", "--to", SOME_DIR),
    ],
)
def test_unreachable_controller_is_one_line(tmp_path: Path, dead_port: int, args: tuple[str, ...]) -> None:
    token = tmp_path / "admin.token"
    token.write_text("anything\n")
    result = run(f"http://127.0.0.1:{dead_port}", token, *args)
    assert_one_line_error(result, f"cannot reach the controller at http://127.0.0.1:{dead_port}")


def test_wrong_token_is_one_line(cluster: Cluster, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.token"
    wrong.write_text("not-the-token\n")
    for args in (("produce", "orders", "--value", "x"), ("consume", "orders"), ("log-dirs",)):
        result = run(cluster.controller.url, wrong, *args)
        assert_one_line_error(result, "errorCode 31")
    missing = run(cluster.controller.url, tmp_path / "absent.token", "log-dirs")
    assert_one_line_error(missing, "cannot read token file")


def test_local_group_keeps_its_walkthrough(tmp_path: Path) -> None:
    result = subprocess.run([JBODCTL, "local", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "walkthrough" in result.stdout
