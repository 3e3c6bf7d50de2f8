"""A leader's ISR upkeep: shrink and expand through AlterPartition (§3.4), as Kafka's leaders do.

Guarantees:
* Followers that have not caught up within `replica.lag.time.max.ms` of the injected clock are
  removed, followers that reached the high watermark (and are registered, unfenced, not shutting
  down, with their replica in an online dir) are added; the decisions are
  `jbod_core.replication`'s. The leader itself is never removed.
* At most one change per partition is in flight (`HostedPartition.pending_isr`); while it is, the
  maximal ISR (old plus new) holds the high watermark and the low watermark (DeleteRecords). An
  answer is applied only to a partition still hosted as it was and only when it is newer (same
  leader epoch, higher partition epoch). The maximal ISR is kept (Kafka's pending ISR state)
  until this broker knows what the controller committed: an answer of another leader epoch (the
  change completed a reassignment that moved the leadership), or an error saying the
  controller's partition moved on (6, 74, 108, 3, 100), keeps it until the image shows a newer
  partition epoch or another role (`ReplicaManager._apply`); a failed call keeps it and asks the
  same change again at the next scan. Dropping it earlier let a leader that had just lost the
  partition count only its old ISR and acknowledge records the new leader never had.
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
from jbod_core.errors import ErrorCode
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

#: Answers meaning the controller's partition is ahead of this broker's image (leadership or epochs
#: moved): the maximal ISR is kept until the image catches up.
_IMAGE_BEHIND = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.INVALID_UPDATE_VERSION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
    }
)


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
            if hosted.role is not Role.LEADER:
                continue
            if hosted.pending_isr is not None:
                if hosted.isr_resend and not hosted.isr_in_flight:
                    hosted.isr_resend = False
                    out.append((hosted, hosted.pending_isr))  # the call failed: the same change again
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
        sent_epochs: dict[PartitionKey, int] = {}
        for hosted, new_isr in changes:
            hosted.pending_isr = new_isr
            hosted.isr_in_flight = True
            sent_epochs[hosted.key] = hosted.partition_epoch
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
        for hosted, new_isr in changes:
            hosted.isr_in_flight = False
            if self.manager.partitions.get(hosted.key) is not hosted or hosted.pending_isr != new_isr:
                continue  # removed, or the image already settled it (a new role or partition epoch)
            _settle(hosted, results.get(hosted.key), sent_partition_epoch=sent_epochs[hosted.key])


def _settle(
    hosted: HostedPartition, result: AlterPartitionResult | None, *, sent_partition_epoch: int
) -> None:
    """The answer to `hosted`'s pending ISR change (None: the call got no answer)."""
    if result is None:
        hosted.isr_resend = True  # the controller may have applied it: keep the maximal ISR
        return
    if result.error_code != 0:
        log.info("%s: AlterPartition answered errorCode %s", hosted.name, result.error_code)
        image_moved_on = hosted.partition_epoch > sent_partition_epoch
        if result.error_code in _IMAGE_BEHIND and not image_moved_on:
            return  # the maximal ISR holds until the image shows what was committed
    elif result.leader_epoch != hosted.leader_epoch:
        # The change moved the leadership (it completed a reassignment): until the image says so
        # this broker still leads, and only the maximal ISR may move its high watermark (the new
        # leader is in it and no longer fetches from here).
        return
    elif result.partition_epoch > hosted.partition_epoch:
        hosted.isr = tuple(result.isr)
        hosted.partition_epoch = result.partition_epoch
    hosted.pending_isr = None
    hosted.complete_delayed_requests()
