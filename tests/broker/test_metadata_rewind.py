"""Brokers notice that the controller's metadata log went backwards and resync (issue 12, item 2).

Real processes: one `jbod-controller`, two `jbod-agent`s on plain directories. The controller's
`metadata/` dir is copied, more topics are created and placed, then the copy is restored (as
after a restore from a backup) and the controller restarted on the same port:
* `behind` — the brokers' next fetch asks past the restored end offset;
* `reused` — the brokers are paused (SIGSTOP) while the restored log grows past what they had
  applied with *other* records, so their next fetch lands on reused offsets; only the checksum
  of the record at their last applied offset can tell.
Either way each broker logs a WARNING naming both offsets, rebuilds its image from the start of
the log, and places the replicas of a topic created after the restore.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jbod_client.controller import ControllerClient, read_token
from jbod_local.processes import LocalBroker, LocalController
from tests.broker.conftest import wait_for

UNASSIGNED = "AAAAAAAAAAAAAAAAAAAAAA"


@dataclass
class Plain:
    base: Path
    controller: LocalController
    admin: ControllerClient
    brokers: dict[int, LocalBroker]

    def placed(self, name: str) -> bool:
        parts = self.admin.describe_topic(name)["partitions"]
        return all(d != UNASSIGNED for p in parts for d in p["directories"])

    def hosted(self, node_id: int, name: str) -> set[str]:
        return {p.name for d in ("d0", "d1") for p in (self.base / f"b{node_id}" / d).glob(f"{name}-*")}

    def create(self, name: str, *, partitions: int, rf: int = 2) -> dict[str, Any]:
        reply = self.admin.create_topic(name, partitions=partitions, replication_factor=rf)
        assert reply["errorCode"] == 0, reply
        return reply


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[Plain]:
    with contextlib.ExitStack() as stack:
        # A long session timeout: paused brokers must not be fenced while the test writes.
        controller = LocalController(
            data_dir=tmp_path / "controller",
            cluster_id="rewind",
            extra_args=["--broker-session-timeout-ms", "120000"],
        ).start()
        stack.callback(controller.kill)
        admin = stack.enter_context(
            ControllerClient(controller.url, token=read_token(controller.admin_token_file))
        )
        brokers = {}
        for node_id in (1, 2):
            broker = LocalBroker(
                node_id=node_id,
                work_dir=tmp_path / f"b{node_id}",
                log_dirs=[tmp_path / f"b{node_id}" / "d0", tmp_path / f"b{node_id}" / "d1"],
                controller_url=controller.url,
                cluster_token_file=controller.cluster_token_file,
                cluster_id="rewind",
            )
            stack.callback(broker.kill)
            brokers[node_id] = broker.start()
        yield Plain(tmp_path, controller, admin, brokers)


def _restart_with(plain: Plain, backup: Path) -> None:
    plain.controller.stop()
    metadata = plain.controller.data_dir / "metadata"
    shutil.rmtree(metadata)
    shutil.copytree(backup, metadata)
    plain.controller.start()


def _wait_until_the_log_settles(plain: Plain, *, quiet: float = 0.5) -> None:
    """Until the committed end offset has not moved for `quiet` seconds."""
    last = plain.admin.cluster()["metadataEndOffset"]
    since = time.monotonic()
    deadline = since + 30
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, "the controller's log never settled"
        time.sleep(0.05)
        end = plain.admin.cluster()["metadataEndOffset"]
        if end != last:
            last, since = end, time.monotonic()


@pytest.mark.parametrize("how", ["behind", "reused"])
def test_brokers_resync_after_the_controller_log_went_backwards(plain: Plain, how: str) -> None:
    admin = plain.admin
    wait_for(lambda: len(admin.brokers()) == 2 and not any(b["fenced"] for b in admin.brokers()))
    plain.create("kept", partitions=3)
    wait_for(lambda: plain.placed("kept"), what="placements of kept")

    plain.controller.stop()
    backup = plain.base / "backup"
    shutil.copytree(plain.controller.data_dir / "metadata", backup)
    plain.controller.start()
    for n in range(2):
        plain.create(f"lost-{n}", partitions=20)
        wait_for(lambda n=n: plain.placed(f"lost-{n}"), what=f"placements of lost-{n}")
    # Reads show a change as soon as the controller decided it; the log holds it once the group
    # commit's fsync is done. Wait for that, or a paused broker could still receive records
    # committed after `ahead_of` below in a long-poll answer already in its socket.
    _wait_until_the_log_settles(plain)

    processes = [b.process for b in plain.brokers.values()]
    assert all(p is not None for p in processes)
    if how == "reused":
        for p in processes:
            assert p is not None
            p.send_signal(signal.SIGSTOP)
    try:
        # Paused brokers have applied less than this; running ones at least the placements.
        ahead_of = admin.cluster()["metadataEndOffset"]
        _restart_with(plain, backup)
        restored_end = admin.cluster()["metadataEndOffset"]
        assert restored_end + 40 < ahead_of
        plain.create("after", partitions=3)
        if how == "reused":
            n = 0
            while admin.cluster()["metadataEndOffset"] <= ahead_of + 5:
                plain.create(f"filler-{n}", partitions=10)
                n += 1
    finally:
        for p in processes:
            assert p is not None
            p.send_signal(signal.SIGCONT)

    wait_for(lambda: plain.placed("after"), timeout=60, what="placements of after")
    topic = admin.describe_topic("after")
    for node_id in (1, 2):
        expected = {f"after-{p['partitionIndex']}" for p in topic["partitions"] if node_id in p["replicas"]}
        wait_for(lambda node_id=node_id, expected=expected: plain.hosted(node_id, "after") == expected)
        log = plain.brokers[node_id].log_path.read_text()
        warnings = [line for line in log.splitlines() if " WARNING " in line and "went backwards" in line]
        assert len(warnings) == 1, log[-3000:]
        found = re.search(
            r"applied up to offset (\d+), the controller's log ends at offset (\d+)", warnings[0]
        )
        assert found is not None, warnings[0]
        applied, end = int(found[1]), int(found[2])
        assert restored_end <= applied < ahead_of, warnings[0]
        if how == "behind":
            assert restored_end <= end <= applied, warnings[0]
            assert f"fromOffset {applied + 1} is past the end offset {end}" in warnings[0]
        else:
            assert end > applied, warnings[0]
            assert f"the record at offset {applied} is not the one the reader applied" in warnings[0]
    wait_for(lambda: all(not b["fenced"] for b in admin.brokers()), what="brokers unfenced")
    for name in [t["name"] for t in admin.list_topics()]:
        wait_for(lambda name=name: plain.placed(name), what=f"placements of {name}")
