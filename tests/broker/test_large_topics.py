"""A running agent places every replica of a topic larger than one metadata page (regression:
changes were once forgotten when a fetch stopped short of the end offset)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from jbod_client.controller import ControllerClient, read_token
from jbod_local.processes import LocalBroker, LocalController
from tests.broker.conftest import wait_for


def test_running_broker_places_a_topic_spanning_several_metadata_pages(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        controller = LocalController(data_dir=tmp_path / "controller", cluster_id="big").start()
        stack.callback(controller.kill)
        admin = stack.enter_context(
            ControllerClient(controller.url, token=read_token(controller.admin_token_file))
        )
        broker = LocalBroker(
            node_id=1,
            work_dir=tmp_path / "b1",
            log_dirs=[tmp_path / "b1" / "d0", tmp_path / "b1" / "d1"],
            controller_url=controller.url,
            cluster_token_file=controller.cluster_token_file,
            cluster_id="big",
        )
        stack.callback(broker.kill)
        broker.start()
        wait_for(lambda: admin.brokers() and not admin.broker(1)["fenced"], what="broker 1 unfenced")
        reply = admin.create_topic("big", partitions=10_000, replication_factor=1)
        assert reply["errorCode"] == 0
        wait_for(
            lambda: admin.broker(1)["unassignedReplicas"] == 0, timeout=120, what="every placement confirmed"
        )
        on_disk = sum(1 for d in ("d0", "d1") for _ in (tmp_path / "b1" / d).glob("big-*"))
        assert on_disk == 10_000
        # Spread over both dirs by free space and load, not all in one.
        assert all(len(list((tmp_path / "b1" / d).glob("big-*"))) > 2_000 for d in ("d0", "d1"))
        assert not admin.broker(1)["fenced"]
