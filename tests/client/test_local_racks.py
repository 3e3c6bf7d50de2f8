"""`jbodctl local up --racks` (issue 34): broker i gets rack racks[(i - 1) % n], kept in cluster.json
and written as `broker.rack`; the brokers answer it in DescribeCluster and the controller places a
topic's replicas on distinct racks; a bad list is a one-line error that creates nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from jbod_core.meta_properties import parse_properties
from jbod_core.replica_selector import RACK_AWARE_SELECTOR
from jbod_local import supervisor
from jbod_local.kafka_clients import librdkafka_config
from jbod_local.layout import STATE_FILE, read_layout
from tests.client.local_commands import ok, run


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "cluster"
    yield path
    if (path / STATE_FILE).exists():  # never leave processes behind
        supervisor.down(path, grace=2)


def test_a_bad_rack_list_is_one_line_and_creates_nothing(root: Path) -> None:
    result = run("up", "--dir", str(root), "--racks", "a,,b")
    assert result.returncode == 1, result
    assert result.stderr.strip().splitlines() == [
        "jbodctl: error: --racks: expected comma-separated rack names, got 'a,,b'"
    ], result.stderr
    assert not (root / STATE_FILE).exists()


@pytest.mark.integration
def test_racks_reach_the_brokers_and_the_placement(root: Path) -> None:
    selector = f"replica.selector.class={RACK_AWARE_SELECTOR}"
    ok(
        "up",
        "--dir",
        str(root),
        "--brokers",
        "3",
        "--disks",
        "1",
        "--racks",
        "a,b",
        "--broker-config",
        selector,
    )
    state = json.loads((root / STATE_FILE).read_text())
    assert [b.get("rack") for b in state["brokers"]] == ["a", "b", "a"]
    assert state["brokerConfig"]["replica.selector.class"] == RACK_AWARE_SELECTOR
    for broker, rack in ((1, "a"), (2, "b"), (3, "a")):
        written = parse_properties((root / f"broker-{broker}" / "server.properties").read_text())
        assert written["broker.rack"] == rack
    layout = read_layout(root)
    admin = AdminClient(
        librdkafka_config(",".join(b.kafka_address for b in layout.brokers), layout.admin_token())
    )
    nodes = admin.describe_cluster().result(timeout=60).nodes
    racks = {n.id: n.rack for n in nodes}
    assert racks == {1: "a", 2: "b", 3: "a"}
    admin.create_topics([NewTopic("spread", 8, 2)])["spread"].result(timeout=60)
    with layout.controller() as controller:
        partitions = controller.describe_topic("spread")["partitions"]
    assert len(partitions) == 8
    assert all({racks[b] for b in p["replicas"]} == {"a", "b"} for p in partitions)
