"""A standby whose watch stalls silently still takes over (§3.8, `jbod_controller.quorum`).

A standby learns that the leader key is gone from its watch, and also reads the leader key every
half lease, so a watch stream that stops delivering events without breaking (a half-open
connection, a stuck proxy) cannot keep it from campaigning. Here the stall is injected: the
standby's watch is replaced by one that never yields, the only thing that is not real. etcd,
the leases, the campaign transactions and the leader keys are real.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from jbod_controller.etcd_gateway import EtcdGateway, WatchBatch
from jbod_controller.etcd_log import EtcdRecordLog, Keys
from jbod_controller.quorum import Quorum, QuorumConfig
from jbod_local.etcd import EtcdCluster

pytestmark = pytest.mark.quorum

LEASE_MS = 1000


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with EtcdCluster(tmp_path_factory.mktemp("etcd"), 1) as cluster:
        yield cluster


class Standin:
    """The controller side of the election: it only records whether it was promoted."""

    def __init__(self) -> None:
        self.promoted = asyncio.Event()
        self._active = False

    async def apply_committed(self, first_offset: int, payloads: list[bytes], revision: int) -> None:
        return None

    async def resync(self) -> None:
        return None

    async def promote(self, fence: int) -> None:
        self._active = True
        self.promoted.set()

    async def step_down(self, why: str) -> None:
        self._active = False

    @property
    def active(self) -> bool:
        return self._active


def member(etcd: EtcdCluster, prefix: str, node_id: int) -> tuple[Quorum, Standin, EtcdGateway]:
    gateway = EtcdGateway(etcd.client_urls)
    config = QuorumConfig(
        node_id=node_id,
        url=f"http://127.0.0.1:{9000 + node_id}",
        endpoints=tuple(etcd.client_urls),
        prefix=prefix,
        lease_ms=LEASE_MS,
    )
    role = Standin()
    return Quorum(config, EtcdRecordLog(gateway, Keys.under(prefix)), role), role, gateway


async def stalled_watch(key: bytes, range_end: bytes, *, start_revision: int) -> AsyncIterator[WatchBatch]:
    """A watch stream that stays open and never delivers anything."""
    await asyncio.Event().wait()
    yield WatchBatch(revision=0, events=[])  # pragma: no cover - never reached


@pytest.mark.asyncio
async def test_a_standby_with_a_stalled_watch_takes_over_when_the_leader_resigns(
    etcd: EtcdCluster,
) -> None:
    prefix = f"/stall/{time.monotonic_ns()}"
    first, first_role, first_gateway = member(etcd, prefix, 1)
    second, second_role, second_gateway = member(etcd, prefix, 2)
    second.gateway.watch = stalled_watch  # type: ignore[method-assign]
    running = [first]
    try:
        await first.start()
        await asyncio.wait_for(first_role.promoted.wait(), 30)
        running.append(second)
        await second.start()
        assert second.active_controller == first.me and not second_role.active

        # The leader resigns (deletes its key): the watch would say so, but it is stalled.
        running.remove(first)
        await first.stop()
        await asyncio.wait_for(second_role.promoted.wait(), 30)
        assert second.active_controller == second.me and second.elections == 1
        leader = second_gateway.range(Keys.under(prefix).leader)
        assert leader.kvs and b'"nodeId":2' in leader.kvs[0].value.replace(b" ", b"")
    finally:
        for quorum in running:
            await quorum.stop()
        first_gateway.close()
        second_gateway.close()
