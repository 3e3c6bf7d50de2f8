"""A topic config the broker cannot use is a warning, never a storage error (issue 12).

The controller rejects bad topic configs at create (errorCode 40), but a metadata log written
before that check may still hold one. Here such a TopicRecord (every defined key with a value
that does not parse or is out of range) is written straight into the stopped controller's log,
as an old log would hold it; the broker hosting the new replica must keep its dir online, serve
the partition with its own defaults, and log one WARNING per bad key naming topic, key and value.
Real `jbod-controller` and `jbod-agent` processes on plain directories (no root needed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from jbod_client.controller import read_token
from jbod_core import frames
from jbod_core.ids import Uuid
from tests.broker.conftest import UNASSIGNED, start_cluster, wait_for
from tests.broker.data import produce

BAD_CONFIGS = {
    "min.insync.replicas": "many",
    "retention.bytes": "1.5",
    "retention.ms": "banana",
    "segment.bytes": "1",
}
TOPIC_ID = str(Uuid(858, 112))


def _frame(entry: dict[str, Any]) -> bytes:
    return frames.frame(orjson.dumps(entry))


@pytest.fixture
def stack() -> Iterator[contextlib.ExitStack]:
    """Everything started is killed at the end, even after a failure."""
    with contextlib.ExitStack() as stack:
        yield stack


def test_a_bad_config_in_an_old_log_leaves_the_dir_online(
    tmp_path: Path, stack: contextlib.ExitStack
) -> None:
    cluster = start_cluster(stack, tmp_path)
    controller, admin = cluster.controller, cluster.admin
    broker = cluster.add_broker(1, dirs=2, loop=False)
    wait_for(lambda: cluster.all_unfenced(1), what="the broker unfenced")
    cluster.create_placed_topic("good", partitions=1, rf=1)
    end = admin.cluster()["metadataEndOffset"]

    # The old log: a topic with bad configs, one partition on broker 1 (placement unknown).
    controller.stop()
    [segment] = sorted((controller.data_dir / "metadata").glob("*.log"))
    with segment.open("ab") as handle:
        handle.write(
            _frame(
                {
                    "offset": end,
                    "type": "TopicRecord",
                    "data": {"name": "ok4", "topicId": TOPIC_ID, "configs": BAD_CONFIGS},
                }
            )
        )
        handle.write(
            _frame(
                {
                    "offset": end + 1,
                    "type": "PartitionRecord",
                    "data": {
                        "topicId": TOPIC_ID,
                        "partitionId": 0,
                        "replicas": [1],
                        "isr": [1],
                        "leader": 1,
                        "leaderEpoch": 0,
                        "partitionEpoch": 0,
                        "directories": [UNASSIGNED],
                    },
                }
            )
        )
    controller.start()
    assert admin.describe_topic("ok4")["configs"] == BAD_CONFIGS

    # The broker hosts and places the replica, every dir stays online, and it takes writes
    # (acks=-1: the broker's min.insync.replicas default of 1 applies, not "many").
    wait_for(
        lambda: admin.describe_topic("ok4")["partitions"][0]["directories"] != [UNASSIGNED],
        what="placement of ok4",
    )
    headers = {"Authorization": f"Bearer {read_token(controller.cluster_token_file)}"}
    reply = produce(cluster, 1, "ok4", 0, [b"kept"], acks=-1)
    assert reply == {"errorCode": 0, "baseOffset": 0}, reply
    dirs = httpx.get(f"{broker.url}/v1/log-dirs", headers=headers, timeout=10).json()
    assert [d["state"] for d in dirs] == ["online", "online"], dirs
    registration = admin.brokers()[0]
    assert registration["offlineLogDirs"] == [] and len(registration["logDirs"]) == 2, registration
    log = broker.log_path.read_text()
    assert "Took log dir" not in log, log[-3000:]
    warnings = [line for line in log.splitlines() if "WARNING" in line and "ok4" in line]
    for key, value in BAD_CONFIGS.items():
        assert [line for line in warnings if f"{key}={value!r}" in line], (key, warnings)
