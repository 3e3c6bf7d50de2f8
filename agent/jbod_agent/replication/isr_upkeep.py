"""A leader's ISR upkeep: shrink and expand through AlterPartition (§3.4), as Kafka's leaders do.

Guarantees:
* Followers that have not caught up within `replica.lag.time.max.ms` of the injected clock are
  removed, followers that reached the high watermark (and are registered, unfenced, not shutting
  down, with their replica in an online dir) are added; the decisions are
  `jbod_core.replication`'s. The leader itself is never removed.
* At most one change per partition is in flight (`HostedPartition.pending_isr`); while it is, the
  maximal ISR (old plus new) holds the high watermark and the low watermark (DeleteRecords). An
  answer is applied only to a partition still hosted as it was and only when it is newer (same
  leader epoch, higher partition epoch); a failed call or an error code leaves the ISR as the
  image says.
* The scan runs every `replica.lag.time.max.ms / 2` (Kafka's isr-expiration period) and at once
  when a follower's fetch may allow an expansion (`check_now`), only while registered; requests
  carry at most `MAX_PARTITIONS_PER_REQUEST` partitions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from jbod_agent.partitions.replica_manager import HostedPartition, ReplicaManager, Role
from jbod_agent.ports import Clock, ControllerCallError, PartitionAlterations, monotonic_ms
from jbod_core import replication
from jbod_core.ids import Uuid, is_online
from jbod_core.image import PartitionKey
from jbod_core.messages import (
    MAX_PARTITIONS_PER_REQUEST,
    AlterPartitionData,
    AlterPartitionRequest,
    AlterPartitionResult,
    AlterPartitionTopic,
)

log = logging.getLogger("jbod_agent.replicas")


class IsrUpkeep:
    """Asks the controller for ISR changes of the partitions this broker leads."""

    def __init__(self, manager: ReplicaManager, *, link: PartitionAlterations, clock: Clock) -> None:
        self.manager = manager
        self.link = link
        self.clock = clock
        self.alter_now = asyncio.Event()

    def _eligible(self, hosted: HostedPartition) -> Callable[[int], bool]:
        """Whether a broker may join `hosted`'s ISR: registered, unfenced, not shutting down, and
        its replica in one of its online dirs."""
        image = self.manager.state.image

        def check(broker_id: int) -> bool:
            reg = image.brokers.get(broker_id)
            part = image.partition(hosted.key)
            if reg is None or reg.fenced or reg.in_controlled_shutdown or part is None:
                return False
            return is_online(part.directory_of(broker_id), reg.log_dirs)

        return check

    def changes(self) -> list[tuple[HostedPartition, tuple[int, ...]]]:
        """Partitions whose leader should ask for a new ISR now (none with a change in flight)."""
        state = self.manager.state
        now = monotonic_ms(self.clock)
        lag = state.config.replica_lag_time_max_ms
        out: list[tuple[HostedPartition, tuple[int, ...]]] = []
        for hosted in self.manager.partitions.values():
            if hosted.role is not Role.LEADER or hosted.pending_isr is not None:
                continue
            shrink = replication.isr_to_shrink(
                hosted.isr, state.node_id, hosted.followers, now_ms=now, lag_time_max_ms=lag
            )
            expand = replication.isr_to_expand(
                hosted.replicas,
                hosted.isr,
                hosted.followers,
                high_watermark=hosted.log.high_watermark,
                leader_epoch_start_offset=hosted.epoch_start_offset,
                eligible=self._eligible(hosted),
            )
            if not shrink and not expand:
                continue
            new_isr = tuple(
                r for r in hosted.replicas if (r in hosted.isr and r not in shrink) or r in expand
            )
            if state.node_id not in new_isr:
                continue
            out.append((hosted, new_isr))
        return out

    def check_now(self) -> None:
        """A follower's fetch may allow an ISR expansion: scan at once rather than at the period."""
        self.alter_now.set()

    async def run_forever(self) -> None:
        state = self.manager.state
        # Kafka's isr-expiration period (lag / 2): a full scan; expansions are also triggered at
        # once by a follower's fetch (`check_now`).
        period = state.config.replica_lag_time_max_ms / 2000
        while not state.stopping.is_set():
            self.alter_now.clear()
            await self.clock.wait(self.alter_now, period)
            if not state.registered:
                continue
            changes = self.changes()
            for start in range(0, len(changes), MAX_PARTITIONS_PER_REQUEST):
                await self._alter(changes[start : start + MAX_PARTITIONS_PER_REQUEST])

    async def _alter(self, changes: list[tuple[HostedPartition, tuple[int, ...]]]) -> None:
        """One AlterPartition for `changes`; the answers applied to partitions still hosted as
        they were (the maximal ISR holds the high watermark while the request is out)."""
        state = self.manager.state
        by_topic: dict[Uuid, list[AlterPartitionData]] = {}
        for hosted, new_isr in changes:
            hosted.pending_isr = new_isr
            by_topic.setdefault(hosted.key[0], []).append(
                AlterPartitionData(
                    partition_index=hosted.key[1],
                    leader_epoch=hosted.leader_epoch,
                    partition_epoch=hosted.partition_epoch,
                    new_isr=list(new_isr),
                )
            )
            log.info("%s: asking for ISR %s (was %s)", hosted.name, list(new_isr), list(hosted.isr))
        request = AlterPartitionRequest(
            broker_id=state.node_id,
            broker_epoch=state.epoch,
            topics=[AlterPartitionTopic(topic_id=t, partitions=ps) for t, ps in by_topic.items()],
        )
        results: dict[PartitionKey, AlterPartitionResult] = {}
        try:
            reply = await self.link.alter_partition(request)
        except ControllerCallError as exc:
            log.warning("AlterPartition failed: %s", exc)
        else:
            if reply.error_code == 0:
                for topic in reply.topics:
                    for p in topic.partitions:
                        results[(topic.topic_id, p.partition_index)] = p
        for hosted, _new_isr in changes:
            hosted.pending_isr = None
            result = results.get(hosted.key)
            if result is None or self.manager.partitions.get(hosted.key) is not hosted:
                continue
            if result.error_code != 0:
                log.info("%s: AlterPartition answered errorCode %s", hosted.name, result.error_code)
                continue
            if result.leader_epoch == hosted.leader_epoch and result.partition_epoch > hosted.partition_epoch:
                hosted.isr = tuple(result.isr)
                hosted.partition_epoch = result.partition_epoch
            hosted.complete_delayed_requests()
