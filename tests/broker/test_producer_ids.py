"""A broker's producer ids (`jbod_agent.kafka.forwarding.ProducerIds`, what InitProducerId hands
out) against a real controller: the broker never waits for the controller for one. With no id
left it answers None at once and asks for a block in the background; it asks for the next block
once 90% of the current one is handed out (as Kafka's `RPCProducerIdManager`), so while the
controller answers a busy broker goes from one block to the next without a miss."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from jbod_agent.kafka.forwarding import ProducerIds
from jbod_agent.state import AgentState, LogDirState
from jbod_client.controller import ControllerLink
from jbod_core.ids import Uuid
from tests.agent.test_config import parse
from tests.broker.conftest import Cluster, wait_for

pytestmark = pytest.mark.integration

BLOCK = 1000  # jbod_core.producer_ids.BLOCK_SIZE, Kafka's


def broker_state(node_id: int, epoch: int) -> AgentState:
    """What `ProducerIds` reads of a broker: its id and its epoch."""
    meta = LogDirState(path=Path("/data/meta"), directory_id=Uuid(9, 9), device=0)
    state = AgentState(
        config=parse(node_id=str(node_id)),
        cluster_id="c",
        incarnation=Uuid(5, 5),
        dirs={},
        startup_offline=[],
        metadata_dir=meta,
    )
    state.epoch = epoch
    return state


def blocks_allocated(cluster: Cluster, broker_id: int) -> list[dict[str, Any]]:
    """The `ProducerIdsRecord`s of `broker_id` in the controller's log."""
    return [
        r["data"]
        for r in cluster.admin.iter_metadata()
        if r["type"] == "ProducerIdsRecord" and r["data"]["brokerId"] == broker_id
    ]


def test_ids_come_from_blocks_asked_for_in_the_background_and_ahead_of_need(cluster: Cluster) -> None:
    cluster.add_broker(1, dirs=1, loop=False)
    wait_for(lambda: cluster.all_unfenced(1), timeout=60, what="broker 1 unfenced")
    state = broker_state(1, int(cluster.admin.broker(1)["brokerEpoch"]))

    async def blocks(count: int) -> None:
        """Wait, the event loop running, until the controller logged `count` blocks for broker 1."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if len(await asyncio.to_thread(blocks_allocated, cluster, 1)) >= count:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the controller did not log block {count} of broker 1")

    async def first_id(ids: ProducerIds) -> int:
        """The next id, asked for again (as a client retries) until the broker has one."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            produced = ids.next_id()
            if produced is not None:
                return produced
            await asyncio.sleep(0.05)
        raise AssertionError("no producer id")

    async def run() -> tuple[list[int | None], list[int | None], int]:
        ids = ProducerIds(state, ControllerLink(cluster.controller.url, token=cluster.cluster_token))
        try:
            assert ids.next_id() is None  # no block: answered at once, one asked for
            first = await first_id(ids)
            # 90% of the block handed out without a pause: the next block is asked for at the last.
            handed = [first] + [ids.next_id() for _ in range(BLOCK * 9 // 10 - 1)]
            await blocks(2)
            rest = [ids.next_id() for _ in range(BLOCK // 10)]
            return handed, rest, await first_id(ids)
        finally:
            await ids.aclose()

    handed, rest, after = asyncio.run(run())
    first = handed[0]
    assert first is not None
    assert handed + rest == list(range(first, first + BLOCK))  # the whole block, in order
    assert after == first + BLOCK  # the block asked for ahead, not a block asked for after a miss
    assert [b["nextProducerId"] for b in blocks_allocated(cluster, 1)] == [first + BLOCK, first + 2 * BLOCK]
