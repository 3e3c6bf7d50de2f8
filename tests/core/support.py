"""Test support for the pure domain: a cluster driven by decisions and replay, with fake time.

Decisions are called directly and return `(records, reply)`; tests compare the records to
constructed dataclasses, then `Cluster.apply` replays them at the image's end offset (exactly as
the controller's writer does), keeps the full log for from-scratch replays, and checks the
image's indexes after every record.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from jbod_core import brokers, records
from jbod_core.ids import Uuid
from jbod_core.image import ClusterImage, PartitionRegistration
from jbod_core.messages import (
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    RegisterBrokerReply,
    RegisterBrokerRequest,
)
from jbod_core.sessions import Session

CLUSTER_ID = "test-cluster"
SESSION_TIMEOUT = 9.0
TOPIC = Uuid(0x0123_4567_89AB_CDEF, 0x1111)
OTHER_TOPIC = Uuid(0x0123_4567_89AB_CDEF, 0x2222)


def d(n: int) -> Uuid:
    """A real (non-reserved) directory id; distinct for distinct `n`."""
    return Uuid(0x5000 + n, 0x77 + n)


def incarnation(broker_id: int, generation: int = 0) -> Uuid:
    return Uuid(0x7000 + broker_id, 0x100 + generation)


class Cluster:
    """An image, its full record log, soft-state sessions and a fake clock (plain floats)."""

    def __init__(self) -> None:
        self.image = ClusterImage()
        self.log: list[records.Record] = []
        self.sessions: dict[int, Session] = {}
        self.now = 0.0

    # -- replay --------------------------------------------------------------------------------

    def apply(self, produced: Iterable[records.Record]) -> None:
        for record in produced:
            self.image.replay(record, self.image.end_offset)
            self.log.append(record)
            self.image.check_indexes()

    def replayed_from_scratch(self) -> ClusterImage:
        fresh = ClusterImage()
        for offset, record in enumerate(self.log):
            fresh.replay(record, offset)
        return fresh

    # -- reads ---------------------------------------------------------------------------------

    def epoch(self, broker_id: int) -> int:
        return self.image.brokers[broker_id].broker_epoch

    def part(self, index: int = 0, topic_id: Uuid = TOPIC) -> PartitionRegistration:
        part = self.image.partition((topic_id, index))
        assert part is not None
        return part

    # -- decisions with the cluster's own clock and sessions ---------------------------------

    def register(
        self,
        broker_id: int,
        log_dirs: Sequence[Uuid],
        *,
        generation: int = 0,
        incarnation_id: Uuid | None = None,
        cluster_id: str = CLUSTER_ID,
        has_offline_log_dirs: bool = False,
        rack: str | None = None,
    ) -> tuple[list[records.Record], RegisterBrokerReply]:
        request = RegisterBrokerRequest(
            broker_id=broker_id,
            cluster_id=cluster_id,
            incarnation_id=incarnation_id or incarnation(broker_id, generation),
            log_dirs=list(log_dirs),
            has_offline_log_dirs=has_offline_log_dirs,
            rack=rack,
        )
        return brokers.register_broker(
            self.image,
            self.sessions,
            request,
            cluster_id=CLUSTER_ID,
            now=self.now,
            session_timeout=SESSION_TIMEOUT,
        )

    def heartbeat(
        self,
        broker_id: int,
        *,
        epoch: int | None = None,
        offset: int | None = None,
        want_fence: bool = False,
        want_shut_down: bool = False,
        offline: Sequence[Uuid] = (),
        cordoned: Sequence[Uuid] | None = None,
        slow: Sequence[Uuid] | None = None,
    ) -> tuple[list[records.Record], BrokerHeartbeatReply]:
        if epoch is None:
            epoch = self.epoch(broker_id)
        request = BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=epoch,
            current_metadata_offset=self.image.end_offset if offset is None else offset,
            want_fence=want_fence,
            want_shut_down=want_shut_down,
            offline_log_dirs=list(offline),
            cordoned_log_dirs=None if cordoned is None else list(cordoned),
            slow_log_dirs=None if slow is None else list(slow),
        )
        return brokers.broker_heartbeat(self.image, self.sessions, request)

    def touch(self, broker_id: int, *, metadata_offset: int | None = None) -> None:
        """What the controller service does after an accepted heartbeat or registration."""
        self.sessions[broker_id] = Session(
            last_contact=self.now,
            metadata_offset=self.image.end_offset if metadata_offset is None else metadata_offset,
        )

    # -- set-up shortcuts (each step is itself a checked decision) ------------------------------

    def add_broker(
        self, broker_id: int, log_dirs: Sequence[Uuid], *, unfence: bool = True, rack: str | None = None
    ) -> int:
        produced, reply = self.register(broker_id, log_dirs, rack=rack)
        assert reply.error_code == 0, reply
        self.apply(produced)
        self.touch(broker_id)
        if unfence:
            produced, beat = self.heartbeat(broker_id)
            assert beat.error_code == 0 and not beat.is_fenced, beat
            self.apply(produced)
            self.touch(broker_id)
        return reply.broker_epoch

    def add_topic(
        self,
        partitions: Sequence[tuple[Sequence[int], Sequence[int], int, Sequence[Uuid]]],
        *,
        topic_id: Uuid = TOPIC,
        name: str = "t",
    ) -> None:
        """Put a topic straight into the log: one (replicas, isr, leader, directories) per partition."""
        produced: list[records.Record] = [records.TopicRecord(name=name, topic_id=topic_id, configs={})]
        for index, (replicas, isr, leader, directories) in enumerate(partitions):
            produced.append(
                records.PartitionRecord(
                    topic_id=topic_id,
                    partition_id=index,
                    replicas=tuple(replicas),
                    isr=tuple(isr),
                    leader=leader,
                    leader_epoch=0,
                    partition_epoch=0,
                    directories=tuple(directories),
                )
            )
        self.apply(produced)


def change(
    index: int = 0,
    *,
    epoch: int,
    topic_id: Uuid = TOPIC,
    isr: Sequence[int] | None = None,
    leader: int | None = None,
    leader_epoch: int | None = None,
    directories: Sequence[Uuid] | None = None,
) -> records.PartitionChangeRecord:
    """A `PartitionChangeRecord` in a test's words (partition epoch is the record's new epoch)."""
    return records.PartitionChangeRecord(
        topic_id=topic_id,
        partition_id=index,
        partition_epoch=epoch,
        isr=None if isr is None else tuple(isr),
        leader=leader,
        leader_epoch=leader_epoch,
        directories=None if directories is None else tuple(directories),
    )
