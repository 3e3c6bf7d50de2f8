"""Produce on a partition leader: admission, the idempotent producers' verdict, the append, the ack.

Both listeners produce here: the HTTP API with records the leader builds into one batch
(`append_records`), the Kafka listener with the client's own batch (`append_batch`). The reply is
the HTTP produce's shape (`errorCode`, `baseOffset`, `errorMessage` on an error).

Guarantees:
* Only the leader appends (`ReplicaManager.lookup`: 3 / 6 / 56 otherwise). acks=-1 is refused
  with 19 before anything is appended when the ISR is smaller than `min.insync.replicas`.
* A client batch is checked as Kafka checks it (`record_batch.check_produced`, raising
  `CorruptBatchError` before anything is written). An idempotent producer's batch is first decided
  against the partition's producer state (`jbod_core.producer_state`): a duplicate of one of its
  last five batches is answered with the original offset and not written again; a sequence gap
  or a fenced epoch is refused with Kafka's code. The verdict and the append happen with no await
  in between, so two batches of one producer cannot both pass as next.
* acks=0 is answered at once, acks=1 once written, acks=-1 once the high watermark covers the
  records (`HostedPartition.advance_high_watermark` answers it), else 7 after `timeoutMs` of the
  injected clock; 19 when the ISR shrank below `min.insync.replicas` meanwhile, 6 / 56 when
  leadership or the dir was lost first. `await_high_watermark` is that wait on its own, for
  callers that answer from records already appended (the group coordinator).
* Batch timestamps (records the leader builds) and producer activity are the clock's wall time.
* An I/O error while appending takes the dir offline (`ReplicaManager.storage_error`) and answers
  KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from jbod_agent import producers
from jbod_agent.partition_log import PartitionLog
from jbod_agent.ports import Clock, wall_ms
from jbod_agent.replica_manager import AckWaiter, HostedPartition, ReplicaManager, Role
from jbod_core import producer_state, replication
from jbod_core.broker_messages import ProduceCall
from jbod_core.errors import ErrorCode
from jbod_kafka import record_batch


def _produce_error(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"errorCode": int(code), "errorMessage": message, "baseOffset": -1}


class Produce:
    """Appends on the leaders of the manager's partitions, and their acknowledgements."""

    def __init__(self, manager: ReplicaManager, *, clock: Clock) -> None:
        self.manager = manager
        self.clock = clock

    async def append_records(self, request: ProduceCall) -> dict[str, Any]:
        """The HTTP API's produce: `request.records` appended as one batch the leader builds."""
        hosted, code, message = self._admit(request.topic, request.partition, request.acks)
        if hosted is None:
            return _produce_error(code, message)
        if not request.records:
            return {"errorCode": 0, "baseOffset": hosted.log.end_offset}
        records, epoch, now_ms = request.records, hosted.leader_epoch, wall_ms(self.clock)
        return await self._append_and_ack(
            hosted,
            lambda log_: log_.append_as_leader(records, leader_epoch=epoch, timestamp_ms=now_ms),
            acks=request.acks,
            timeout_ms=request.timeout_ms,
        )

    async def append_batch(
        self, topic: str, partition: int, batch: bytes, *, acks: int, timeout_ms: int
    ) -> dict[str, Any]:
        """The Kafka listener's produce: one client batch appended as it came, stamped with its
        offset and the leader epoch (the module docstring says what is checked first)."""
        header = record_batch.check_produced(batch)
        hosted, code, message = self._admit(topic, partition, acks)
        if hosted is None:
            return _produce_error(code, message)
        if header.producer_id >= 0:
            verdict = self._producer_verdict(hosted, header)
            if isinstance(verdict, producer_state.Refused):  # Kafka's codes 45, 47, 87: not ErrorCode's
                return {"errorCode": int(verdict.error), "errorMessage": verdict.message, "baseOffset": -1}
            if isinstance(verdict, producer_state.Duplicate):
                return await self._acknowledge(
                    hosted,
                    base=verdict.first_offset,
                    required=verdict.last_offset + 1,
                    acks=acks,
                    timeout_ms=timeout_ms,
                )
        epoch = hosted.leader_epoch

        def append(log_: PartitionLog) -> int:
            base = log_.append_as_leader_frame(batch, leader_epoch=epoch)
            if header.producer_id >= 0 and hosted.producers is not None:
                hosted.producers = producer_state.record(
                    hosted.producers, header, first_offset=base, now_ms=wall_ms(self.clock)
                )
                hosted.producers_changed = True
            return base

        return await self._append_and_ack(hosted, append, acks=acks, timeout_ms=timeout_ms)

    def _producer_verdict(
        self, hosted: HostedPartition, header: record_batch.BatchHeader
    ) -> producer_state.Verdict:
        """The producer state's decision on `header` (the state loaded from the log first if needed)."""
        if hosted.producers is None:
            hosted.producers = producers.load(hosted.log)
        return producer_state.check(hosted.producers, header)

    def _admit(self, topic: str, partition: int, acks: int) -> tuple[HostedPartition | None, ErrorCode, str]:
        """`lookup`, then the acks admission against the ISR and `min.insync.replicas`."""
        hosted, code, message = self.manager.lookup(topic, partition)
        if hosted is None:
            return None, code, message
        admission = replication.produce_admission(acks, len(hosted.isr), hosted.min_isr)
        if admission is not ErrorCode.NONE:
            return (
                None,
                admission,
                f"{hosted.name}: ISR {list(hosted.isr)} is smaller than min.insync.replicas={hosted.min_isr}",
            )
        return hosted, ErrorCode.NONE, ""

    async def _append_and_ack(
        self,
        hosted: HostedPartition,
        append: Callable[[PartitionLog], int],
        *,
        acks: int,
        timeout_ms: int,
    ) -> dict[str, Any]:
        """`append` to the leader's log, then answer as `acks` asks (0: at once, 1: once
        written, -1: once the ISR has it)."""
        try:
            base = append(hosted.log)
        except OSError as exc:
            self.manager.storage_error(hosted, exc, "appending")
            return _produce_error(
                ErrorCode.KAFKA_STORAGE_ERROR, f"{hosted.name}: the log dir failed while appending"
            )
        required = hosted.log.end_offset
        hosted.dirty = True
        hosted.wake_data_waiters()
        hosted.advance_high_watermark()
        return await self._acknowledge(hosted, base=base, required=required, acks=acks, timeout_ms=timeout_ms)

    async def _acknowledge(
        self, hosted: HostedPartition, *, base: int, required: int, acks: int, timeout_ms: int
    ) -> dict[str, Any]:
        """The reply to records at [`base`, `required`) once `acks` is satisfied."""
        if acks == 0:
            return {"errorCode": 0, "baseOffset": -1}
        if acks == 1 or hosted.log.high_watermark >= required:  # acks=1, or the leader is the whole ISR
            return {"errorCode": 0, "baseOffset": base}
        return await self._await_isr(hosted, base=base, required=required, timeout_ms=timeout_ms)

    async def await_high_watermark(
        self, hosted: HostedPartition, *, required: int, timeout_ms: int
    ) -> ErrorCode:
        """NONE once the leader's high watermark covers `required` (at once if it does already);
        NOT_ENOUGH_REPLICAS if it came to cover it while the ISR was below `min.insync.replicas`;
        REQUEST_TIMED_OUT after `timeout_ms`; NOT_LEADER_OR_FOLLOWER or KAFKA_STORAGE_ERROR when
        leadership or the dir was lost first. For the group coordinator's answers that write
        nothing, which rest on what its partition's log already holds."""
        if hosted.log.high_watermark >= required:
            return ErrorCode.NONE
        if hosted.role is not Role.LEADER or self.manager.partitions.get(hosted.key) is not hosted:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        waiter = AckWaiter(required)
        hosted.ack_waiters.append(waiter)
        if not await self.clock.wait(waiter.done, timeout_ms / 1000):
            with contextlib.suppress(ValueError):
                hosted.ack_waiters.remove(waiter)
            return ErrorCode.REQUEST_TIMED_OUT
        return waiter.outcome

    async def _await_isr(
        self, hosted: HostedPartition, *, base: int, required: int, timeout_ms: int
    ) -> dict[str, Any]:
        """The reply to an acks=-1 produce once the high watermark reaches `required` (or not)."""
        outcome = await self.await_high_watermark(hosted, required=required, timeout_ms=timeout_ms)
        if outcome is ErrorCode.REQUEST_TIMED_OUT:
            return _produce_error(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{hosted.name}: not replicated to the ISR within {timeout_ms} ms",
            )
        if outcome is ErrorCode.NOT_ENOUGH_REPLICAS:
            return _produce_error(
                outcome,
                f"{hosted.name}: the ISR shrank below min.insync.replicas={hosted.min_isr} "
                "after the records were appended",
            )
        if outcome is not ErrorCode.NONE:
            return _produce_error(
                outcome, f"{hosted.name}: leadership or the log dir was lost before replication"
            )
        return {"errorCode": 0, "baseOffset": base}
