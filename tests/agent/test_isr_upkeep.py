"""A leader's ISR change in flight (`jbod_agent.replication.isr_upkeep`): the maximal ISR (old
plus new) keeps holding the high watermark until this broker knows what the controller committed.

The regression: a reassignment's last ISR expansion, asked by the leaving leader, completes the
reassignment and moves the leadership in the same controller step. The leader dropped its pending
ISR on that answer and, until its image caught up, counted only its old followers: it
acknowledged acks=all records the new leader never had (they were lost, and librdkafka's
idempotent producer then failed with a fatal OUT_OF_ORDER_SEQUENCE_NUMBER; found by a kind run of
the operator's scale-down drain). Here one leader (broker 3, replicas 2, 0, 1, 3 while broker 2
joins) and a controller port that answers as the controller would; the real partition log and
replica bookkeeping.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from jbod_agent.partitions.replica_manager import AckWaiter, HostedPartition, ReplicaManager, Role
from jbod_agent.ports import ControllerCallError
from jbod_agent.replication.isr_upkeep import IsrUpkeep
from jbod_agent.storage.partition_log import PartitionLog
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid
from jbod_core.image import PartitionRegistration
from jbod_core.messages import (
    AlterPartitionReply,
    AlterPartitionRequest,
    AlterPartitionResult,
    AlterPartitionTopicResult,
)
from jbod_core.replication import FollowerProgress
from tests.agent.runtime_support import FakeClock
from tests.agent.support import append_records

TOPIC = Uuid(7, 1)
ME = 3


@dataclass
class ControllerPort:
    """Answers AlterPartition with `reply` (or raises it), recording the requests."""

    reply: AlterPartitionReply | ControllerCallError
    requests: list[AlterPartitionRequest] = field(default_factory=list)

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionReply:
        self.requests.append(request)
        if isinstance(self.reply, ControllerCallError):
            raise self.reply
        return self.reply


def answer(
    error: ErrorCode = ErrorCode.NONE, *, leader: int, leader_epoch: int, isr: list[int]
) -> AlterPartitionReply:
    result = AlterPartitionResult(
        partition_index=0,
        error_code=int(error),
        leader=leader,
        leader_epoch=leader_epoch,
        partition_epoch=7,
        isr=isr,
    )
    return AlterPartitionReply(topics=[AlterPartitionTopicResult(topic_id=TOPIC, partitions=[result])])


def leading(tmp_path: Path) -> tuple[HostedPartition, ReplicaManager]:
    """Broker 3 leads at epoch 4 with ISR 3, 0, 1 and 20 records; followers 0 and 1 have all of
    them, broker 2 (joining) has the first 10, and the high watermark is 10."""
    path = tmp_path / "moving-0"
    path.mkdir(parents=True)
    log = PartitionLog.open(path)
    for _ in range(4):
        append_records(log, [(None, b"x")] * 5, leader_epoch=4, timestamp_ms=1000)
    hosted = HostedPartition((TOPIC, 0), "moving", Uuid(9, 1), log)
    hosted.role, hosted.leader_id, hosted.leader_epoch, hosted.partition_epoch = Role.LEADER, ME, 4, 6
    hosted.replicas, hosted.isr = (2, 0, 1, 3), (3, 0, 1)
    hosted.followers = {0: FollowerProgress(end_offset=20), 1: FollowerProgress(end_offset=20)}
    hosted.followers[2] = FollowerProgress(end_offset=10)
    log.high_watermark = 10
    state = SimpleNamespace(node_id=ME, epoch=11, config=SimpleNamespace(replica_lag_time_max_ms=5000))
    manager = ReplicaManager(state, failures=None, clock=FakeClock())  # type: ignore[arg-type]
    manager.partitions[hosted.key] = hosted
    return hosted, manager


def expand(hosted: HostedPartition, manager: ReplicaManager, port: ControllerPort) -> AckWaiter:
    """Ask for ISR 2, 0, 1, 3 with an acks=all produce of offset 20 waiting."""
    waiter = AckWaiter(20)
    hosted.ack_waiters.append(waiter)
    upkeep = IsrUpkeep(manager, link=port, clock=FakeClock())
    asyncio.run(upkeep._alter([(hosted, (2, 0, 1, 3))]))
    return waiter


def test_an_answer_that_moved_the_leadership_keeps_the_maximal_isr(tmp_path: Path) -> None:
    hosted, manager = leading(tmp_path)
    port = ControllerPort(answer(leader=2, leader_epoch=5, isr=[2, 0, 1]))
    waiter = expand(hosted, manager, port)
    assert hosted.pending_isr == (2, 0, 1, 3)
    hosted.complete_delayed_requests()  # followers 0 and 1 fetch again from the old leader
    assert hosted.log.high_watermark == 10 and not waiter.done.is_set()
    # The image catches up: broker 2 leads. The waiting produce is refused, never acknowledged.
    directories = (Uuid(9, 1),) * 3
    part = PartitionRegistration(
        (2, 0, 1), (2, 0, 1), directories, leader=2, leader_epoch=5, partition_epoch=7
    )
    manager._apply(hosted, part)  # what the next metadata page does
    assert waiter.done.is_set() and waiter.outcome is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert hosted.pending_isr is None


def test_an_error_saying_the_image_is_behind_keeps_it_and_a_failed_call_is_asked_again(
    tmp_path: Path,
) -> None:
    hosted, manager = leading(tmp_path)
    waiter = expand(
        hosted,
        manager,
        ControllerPort(answer(ErrorCode.FENCED_LEADER_EPOCH, leader=-1, leader_epoch=-1, isr=[])),
    )
    hosted.complete_delayed_requests()
    assert hosted.pending_isr == (2, 0, 1, 3) and hosted.log.high_watermark == 10 and not waiter.done.is_set()

    hosted, manager = leading(tmp_path / "again")
    port = ControllerPort(ControllerCallError("no controller reachable"))
    expand(hosted, manager, port)
    assert hosted.pending_isr == (2, 0, 1, 3)
    upkeep = IsrUpkeep(manager, link=port, clock=FakeClock())
    assert upkeep.changes() == [(hosted, (2, 0, 1, 3))]  # the same change, asked again
    assert upkeep.changes() == []  # once


def test_a_committed_expansion_of_the_same_leader_is_applied(tmp_path: Path) -> None:
    hosted, manager = leading(tmp_path)
    waiter = expand(hosted, manager, ControllerPort(answer(leader=ME, leader_epoch=4, isr=[2, 0, 1, 3])))
    assert hosted.pending_isr is None and hosted.isr == (2, 0, 1, 3) and hosted.partition_epoch == 7
    assert hosted.log.high_watermark == 10 and not waiter.done.is_set()  # broker 2 has 10 of 20
    hosted.followers[2] = FollowerProgress(end_offset=20)
    hosted.complete_delayed_requests()
    assert hosted.log.high_watermark == 20 and waiter.outcome is ErrorCode.NONE


def test_a_refused_change_falls_back_to_the_committed_isr(tmp_path: Path) -> None:
    hosted, manager = leading(tmp_path)
    expand(
        hosted,
        manager,
        ControllerPort(answer(ErrorCode.INELIGIBLE_REPLICA, leader=-1, leader_epoch=-1, isr=[])),
    )
    assert hosted.pending_isr is None and hosted.isr == (3, 0, 1)
    assert hosted.log.high_watermark == 20  # ISR 3, 0, 1 all have the 20 records
