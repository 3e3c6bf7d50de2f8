"""The agent's runtime in-process: real `Agent`, fake clock, fake disks, the controller's decisions.

No root, no sockets: each scenario runs in well under a second of real time. The root tiers
(tests/broker) repeat the disk failures on real failing filesystems.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jbod_agent.lifecycle.decide import (
    EXIT_CONTROLLER_SAID_SHUTDOWN,
    EXIT_DIR_FAILURE_UNREPORTED,
    EXIT_REGISTRATION_REFUSED,
    EXIT_STORAGE_LOST,
)
from jbod_core import records
from jbod_core.ids import UNASSIGNED_DIR, Uuid
from jbod_core.image import PartitionKey
from tests.agent.runtime_support import FakeClock, Harness, InProcessController, make_harness
from tests.agent.support import NODE

pytestmark = pytest.mark.asyncio

TOPIC = Uuid(0x0123_4567_89AB_CDEF, 0x1111)


def add_topic(
    controller: InProcessController, partitions: int, *, directory: Uuid = UNASSIGNED_DIR
) -> list[PartitionKey]:
    """A topic whose partitions all live on this broker (sole replica, leader), placed in `directory`."""
    produced: list[records.Record] = [records.TopicRecord(name="t", topic_id=TOPIC, configs={})]
    for index in range(partitions):
        produced.append(
            records.PartitionRecord(
                topic_id=TOPIC,
                partition_id=index,
                replicas=(NODE,),
                isr=(NODE,),
                leader=NODE,
                leader_epoch=0,
                partition_epoch=0,
                directories=(directory,),
            )
        )
    controller.apply(produced)
    return [(TOPIC, i) for i in range(partitions)]


def registered_fenced(h: Harness) -> bool:
    reg = h.controller.image.brokers.get(NODE)
    return reg is not None and not reg.fenced


async def unfenced(h: Harness) -> None:
    h.start()
    await h.until(lambda: registered_fenced(h) and h.agent.state.fenced is False, within=10.0)


async def test_registers_catches_up_and_is_unfenced(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await unfenced(h)
    [registration] = h.controller.registrations
    assert set(registration.log_dirs) == {h.ids[p] for p in h.data_dirs}
    assert not h.controller.heartbeats[-1].want_fence
    await h.stop()
    assert h.task is not None and h.task.result() == 0


async def test_fenced_until_every_placement_is_confirmed(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    h.controller.assignment_delay = 1.0  # heartbeats go out while placements await their answer
    keys = add_topic(h.controller, 40)
    await unfenced(h)
    assert h.controller.confirmed == set(keys)
    # No heartbeat asked to be unfenced before the controller had confirmed every placement.
    early_asks = [
        len(set(keys) - confirmed)
        for request, confirmed in h.controller.heartbeats_with_confirmed
        if not request.want_fence and not set(keys) <= confirmed
    ]
    assert early_asks == [], f"asked to be unfenced with this many placements unconfirmed: {early_asks}"
    # The window this guards was there: the broker heartbeated while placements were unconfirmed.
    assert any(not set(keys) <= confirmed for _, confirmed in h.controller.heartbeats_with_confirmed)
    placed = {h.controller.image.partition(k).directory_of(NODE) for k in keys}  # type: ignore[union-attr]
    assert placed <= {h.ids[p] for p in h.data_dirs}
    for key in keys:
        local = h.agent.state.local[key]
        assert local.path.is_dir() and local.directory_id == h.controller.image.partition(key).directory_of(
            NODE
        )  # type: ignore[union-attr]
    await h.stop()


async def test_stays_fenced_while_its_placements_cannot_reach_the_controller(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    keys = add_topic(h.controller, 4)
    h.controller.assignment_delay = 0.5  # the outage starts before any placement is answered
    h.start()
    await h.until(lambda: h.agent.state.registered and bool(h.agent.state.local), within=10.0)
    h.controller.reachable = False  # placements cannot be confirmed now
    await h.run_for(5.0)
    assert h.controller.confirmed == set()
    # The broker went on heartbeating through the outage, and every heartbeat (answered before
    # it, refused during it) asked to stay fenced.
    refused_beats = [request for name, request in h.controller.refused if name == "heartbeat"]
    assert len(refused_beats) >= 10
    assert all(b.want_fence for b in [*h.controller.heartbeats, *refused_beats])
    assert not h.agent.state.ready_to_unfence
    assert any(name == "assignments" for name, _ in h.controller.refused)
    h.controller.reachable = True
    await h.until(lambda: h.agent.state.fenced is False, within=20.0)  # the queue backs off ≤ 10 s
    assert h.controller.confirmed == set(keys)
    await h.stop()


async def test_a_dir_failure_is_heartbeated_at_once_and_acknowledged(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    keys = add_topic(h.controller, 6)
    await unfenced(h)
    failing = h.data_dirs[0]
    failing_id = h.ids[failing]
    on_failing = [k for k in keys if h.agent.state.local[k].directory_id == failing_id]
    assert on_failing, "the placement spreads replicas over both disks"
    beats = len(h.controller.heartbeats)
    h.disks.fail(failing)
    # Within one probe interval (1 s) and well before the next 2 s heartbeat is due.
    took = await h.until(
        lambda: any(failing_id in b.offline_log_dirs for b in h.controller.heartbeats[beats:]), within=1.5
    )
    assert took <= 1.1
    await h.until(lambda: h.agent.state.failed[failing_id].acknowledged, within=1.0)
    # The controller moved the replicas off the failed dir: leadership is gone (sole replica: -1).
    for key in on_failing:
        part = h.controller.image.partition(key)
        assert part is not None and part.leader != NODE
        assert key in h.agent.state.offline_local
    await h.run_for(40.0, step=0.25)  # past log.dir.failure.timeout.ms: acknowledged, so no shutdown
    assert h.task is not None and not h.task.done()
    await h.stop()


async def test_no_controller_for_the_failure_timeout_shuts_down_a_leader(tmp_path: Path) -> None:
    h = make_harness(tmp_path, extra="log.dir.failure.timeout.ms=5000\n")
    add_topic(h.controller, 6)
    await unfenced(h)
    h.controller.reachable = False
    h.disks.fail(h.data_dirs[0])
    await h.run_for(4.5)
    assert h.task is not None and not h.task.done()  # not yet: 5 s from the failure
    assert await h.exit_code(within=2.0) == EXIT_DIR_FAILURE_UNREPORTED


async def test_no_controller_but_no_leadership_in_the_failed_dir_keeps_running(tmp_path: Path) -> None:
    h = make_harness(tmp_path, extra="log.dir.failure.timeout.ms=5000\n")
    await unfenced(h)  # hosts no replica at all
    h.controller.reachable = False
    h.disks.fail(h.data_dirs[0])
    await h.run_for(8.0)
    assert h.task is not None and not h.task.done()
    await h.stop()


async def test_losing_the_last_dir_exits(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await unfenced(h)
    h.disks.fail(h.data_dirs[0])
    await h.run_for(2.0)
    assert h.task is not None and not h.task.done()  # one dir left
    h.disks.fail(h.data_dirs[1])
    assert await h.exit_code(within=3.0) == EXIT_STORAGE_LOST


async def test_losing_the_metadata_dir_exits(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    await unfenced(h)
    h.disks.fail(h.metadata_dir)
    assert await h.exit_code(within=3.0) == EXIT_STORAGE_LOST


async def test_a_refused_registration_exits(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    h.controller.cluster_id = "another-cluster"
    h.start()
    assert await h.exit_code(within=3.0) == EXIT_REGISTRATION_REFUSED


async def test_registration_retries_with_backoff_while_the_controller_is_away(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    h.controller.reachable = False
    h.start()
    await h.run_for(3.0)
    assert not h.agent.state.registered
    h.controller.reachable = True
    await h.until(lambda: h.agent.state.fenced is False, within=12.0)
    await h.stop()


async def test_a_signal_hands_leadership_over_before_exiting(tmp_path: Path) -> None:
    h = make_harness(tmp_path)
    keys = add_topic(h.controller, 3)
    await unfenced(h)
    assert all(h.controller.image.partition(k).leader == NODE for k in keys)  # type: ignore[union-attr]
    h.agent.request_stop()
    assert await h.exit_code(within=6.0) == EXIT_CONTROLLER_SAID_SHUTDOWN
    assert h.controller.heartbeats[-1].want_shut_down and h.controller.replies[-1].should_shut_down
    reg = h.controller.image.brokers[NODE]
    assert reg.fenced or reg.in_controlled_shutdown


class SlowRegistrationReply(InProcessController):
    """Commits the registration at once but answers it 300 ms later: the broker's metadata
    follower reads its own registration record before the broker knows its epoch."""

    async def register(self, request):  # type: ignore[no-untyped-def]
        reply = await super().register(request)
        await self.clock.sleep(0.3)
        return reply


async def test_registration_answered_after_its_record_was_read_does_not_wait_for_the_long_poll(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    h = make_harness(tmp_path, controller=SlowRegistrationReply(clock), clock=clock)
    h.start()
    took = await h.until(lambda: h.agent.state.fenced is False, within=10.0)
    # Not one 5 s metadata long poll later: the registration itself triggers the first reconcile.
    assert took < 2.0
    await h.stop()
