"""Produce on a partition leader: admission, the idempotent producers' verdict, the append, the ack.

The Kafka listener (`kafka.produce_api`) and the group coordinator produce here, each with a
batch of its own encoding (`append_batch`); the answer is a `ProduceResult`, which each caller
turns into its own wire or group error at its edge.

Guarantees:
* Only the leader appends (`ReplicaManager.lookup`: 3 / 6 / 56 otherwise). acks=-1 is refused
  with NOT_ENOUGH_REPLICAS (19) before anything is appended when the ISR is smaller than
  `min.insync.replicas`.
* Each batch is checked as Kafka checks it once, here, first (`record_batch.check_produced`,
  raising `CorruptBatchError` before anything is decided or written); the log takes only the
  `record_batch.CheckedBatch` that check returns and does not check it again. An idempotent
  producer's batch is then decided against the partition's producer state
  (`jbod_core.producer_state`): a duplicate of one of its last five batches is answered with the
  original offset and not written again; a sequence gap or a fenced epoch is refused with Kafka's
  code. The verdict and the append happen with no await in between, so two batches of one
  producer cannot both pass as next.
* An idempotent or transactional batch, or a marker, to a partition whose producer state is not
  loaded yet waits for it to load off the event loop (`PartitionLog.load_transactions_off_loop`),
  then is admitted again.
* A transactional batch given a `PartitionVerifier` (the Kafka listener's, KIP-890 part 1) whose
  producer has no ongoing transaction of its epoch here is verified with the coordinator before
  the producer state's verdict; after the yes it is appended only while the producer's guard
  holds (`jbod_core.txn_verification`: no marker or transactional batch of the producer
  appended meanwhile; else INVALID_TXN_STATE), and a batch above the lowest sequence verified
  since the producer's last append is OUT_OF_ORDER_SEQUENCE_NUMBER (Kafka's). The group
  coordinator's batches are not verified.
* acks=0 is answered at once, acks=1 once written, acks=-1 once the high watermark covers the
  records (`HostedPartition.advance_high_watermark` answers it), else REQUEST_TIMED_OUT (7) after
  `timeout_ms` of the injected clock; NOT_ENOUGH_REPLICAS_AFTER_APPEND (20) when the ISR shrank
  below `min.insync.replicas` meanwhile, 6 / 56 when leadership or the dir was lost first.
  `ProduceResult.appended_unacknowledged` tells the two outcomes whose records are in the
  leader's log without the ISR's acknowledgement (7, 20) from the refusals that wrote nothing.
  `await_high_watermark` is that wait on its own, for callers that answer from records already
  appended (the group coordinator).
* Before the producer state's verdict (Kafka's order), the leader applies its topic's
  `compression.type` and CreateTime window (`_validated`, `jbod_core.log_validator`): a batch
  whose codec is not the topic's is compressed again (`record_batch.recompressed`: offsets,
  timestamps, producer id, epoch, sequence and headers kept) and must still fit
  `max.message.bytes` (MESSAGE_TOO_LARGE); `producer` (the default) and a batch already of the
  topic's codec are kept as sent, not decoded for it. A record outside the window refuses the
  batch with INVALID_TIMESTAMP (32), Kafka's message and each refused record
  (`ProduceResult.record_errors`); nothing is appended.
* Producer activity is stamped with the clock's wall time.
* An I/O error while appending takes the dir offline (`ReplicaManager.storage_error`) and answers
  KAFKA_STORAGE_ERROR.
* A topic's `flush.messages`: once that many records were appended since the log's last flush,
  the log is fsynced (off the event loop) before the answer (`ReplicaManager.forced_flush`; its
  followers flush the same way before their next fetch, so acks=-1 then means on disk on every
  in-sync replica, as on Kafka).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol, TypeAlias

from jbod_agent.partitions.replica_manager import AckWaiter, HostedPartition, ReplicaManager, Role
from jbod_agent.ports import Clock, wall_ms
from jbod_agent.storage.partition_log import PartitionLog
from jbod_core import log_validator, producer_state, replication, txn_offsets, txn_verification
from jbod_core.errors import ErrorCode
from jbod_kafka import control_records, record_batch
from jbod_kafka.control_records import ControlRecordType

#: Every code a produce answers: the contract's, and the producer state's refusals (45, 47, 87).
ProduceError: TypeAlias = ErrorCode | producer_state.ProduceErrorCode

#: The outcomes whose records are in the leader's log although the ISR was not seen to hold them.
_APPENDED_UNACKNOWLEDGED: Final = frozenset(
    {ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
)


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """What a produce to one partition came to: `error` NONE with the records' `base_offset`
    (-1 for acks=0, which is answered before there is one), else the error and `message`, why."""

    error: ProduceError
    base_offset: int = -1
    message: str | None = None
    log_append_time_ms: int = -1  # the records' timestamp on a LogAppendTime topic, else -1
    record_errors: tuple[log_validator.RefusedRecord, ...] = ()  # the refused records (INVALID_TIMESTAMP)

    @property
    def appended_unacknowledged(self) -> bool:
        """The records are in the leader's log, but acks=-1 was not satisfied (7 or 20)."""
        return self.error in _APPENDED_UNACKNOWLEDGED


def _failed(error: ProduceError, message: str) -> ProduceResult:
    return ProduceResult(error, message=message)


class PartitionVerifier(Protocol):
    """Asks a transactional producer's coordinator whether a partition is in its ongoing
    transaction (KIP-890 part 1; `jbod_agent.coordinators.txn_verifier` is one, bound to the
    request's transactional id)."""

    async def verify(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int
    ) -> txn_verification.Unverified | None:
        """None when the partition is in the producer's ongoing transaction, else the partition's
        answer (`txn_verification.produce_answer`)."""


def _validated(
    hosted: HostedPartition, produced: record_batch.CheckedBatch, now_ms: int
) -> record_batch.CheckedBatch | ProduceResult:
    """Kafka's LogValidator on the leader, in its order: the batch compressed again when its
    codec is not the topic's `compression.type`, every record's timestamp against the topic's
    CreateTime window (INVALID_TIMESTAMP), then a recompressed batch's size against
    `max.message.bytes` (MESSAGE_TOO_LARGE). `CorruptBatchError` for records that cannot be read."""
    codec = hosted.stored_codec
    recompressed = codec is not None and codec.recompresses(produced.header.compression)
    if codec is not None and recompressed:
        produced = record_batch.recompressed(produced, codec.codec, level=codec.level)
    bounds = hosted.timestamp_bounds
    if bounds is not None and not (
        produced.timestamps is None
        and log_validator.header_suffices(
            bounds, max_timestamp_ms=produced.header.max_timestamp_ms, now_ms=now_ms
        )
    ):
        errors = log_validator.timestamp_errors(
            record_batch.record_timestamps(produced),
            base_offset=produced.header.base_offset,
            now_ms=now_ms,
            bounds=bounds,
        )
        if errors:
            return ProduceResult(
                ErrorCode.INVALID_TIMESTAMP,
                message=log_validator.INVALID_TIMESTAMP_MESSAGE,
                record_errors=errors,
            )
    if recompressed and produced.header.size > hosted.max_message_bytes:
        return _failed(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"The batch compressed again is {produced.header.size} bytes, larger than the topic's "
            f"max.message.bytes {hosted.max_message_bytes}",
        )
    return produced


class Produce:
    """Appends on the leaders of the manager's partitions, and their acknowledgements."""

    def __init__(self, manager: ReplicaManager, *, clock: Clock) -> None:
        self.manager = manager
        self.clock = clock

    async def append_batch(  # noqa: PLR0913  the batch and where, then how it is acknowledged
        self,
        topic: str,
        partition: int,
        batch: bytes,
        *,
        acks: int,
        timeout_ms: int,
        coordinator: bool = False,
        verifier: PartitionVerifier | None = None,
    ) -> ProduceResult:
        """One batch appended as it came, stamped with its offset and the leader epoch (the
        module docstring says what is checked first). `CorruptBatchError` for a batch Kafka would
        refuse, before anything is written; `ValueError` for one the log refuses. `coordinator`:
        a batch of this broker's group coordinator (Kafka's COORDINATOR origin): of a producer,
        only its epoch is checked (`txn_offsets.coordinator_epoch_refusal`), not its sequence.
        `verifier`: a transactional batch that would start a transaction here is verified with
        it first (KIP-890 part 1, `_verified`)."""
        produced = record_batch.check_produced(batch)
        hosted, code, message = self._admit(topic, partition, acks)
        if hosted is not None and produced.header.producer_id >= 0 and not hosted.log.transactions_loaded:
            hosted, code, message = await self._loaded(hosted, topic, partition, acks)
        if hosted is None:
            return _failed(code, message)
        now_ms = wall_ms(self.clock)
        validated = _validated(hosted, produced, now_ms)
        if verifier is not None and not coordinator and not isinstance(validated, ProduceResult):
            validated = await self._verified(hosted, validated, verifier)
        if isinstance(validated, ProduceResult):
            return validated
        produced = validated
        header = produced.header
        if header.producer_id >= 0:
            verdict = self._producer_verdict(hosted, header, coordinator=coordinator)
            if isinstance(verdict, producer_state.Refused):
                return _failed(verdict.error, verdict.message)
            if isinstance(verdict, producer_state.Duplicate):
                return await self._acknowledge(
                    hosted,
                    base=verdict.first_offset,
                    required=verdict.last_offset + 1,
                    acks=acks,
                    timeout_ms=timeout_ms,
                )
        epoch = hosted.leader_epoch
        append_time = now_ms if hosted.log_append_time else None

        def append(log_: PartitionLog) -> int:
            return log_.append_as_leader(
                produced, leader_epoch=epoch, log_append_time_ms=append_time, now_ms=now_ms
            )

        result = await self._append_and_ack(hosted, append, acks=acks, timeout_ms=timeout_ms)
        if append_time is not None and result.error == ErrorCode.NONE:
            return dataclasses.replace(result, log_append_time_ms=append_time)
        return result

    async def append_marker(  # noqa: PLR0913  one keyword per field of the marker
        self,
        topic: str,
        partition: int,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        transaction_version: int,
        timeout_ms: int,
    ) -> ProduceResult:
        """An end-transaction marker appended as the leader's append (WriteTxnMarkers), checked
        against the producer state first (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED),
        answered with acks=-1 (Kafka's coordinator append)."""
        hosted, code, message = self._admit(topic, partition, -1)
        if hosted is not None and not hosted.log.transactions_loaded:
            hosted, code, message = await self._loaded(hosted, topic, partition, -1)
        if hosted is None:
            return _failed(code, message)
        now_ms = wall_ms(self.clock)
        try:
            batch = control_records.marker_batch(
                control_type=ControlRecordType.COMMIT if committed else ControlRecordType.ABORT,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch,
                timestamp_ms=now_ms,
            )
        except ValueError as exc:
            return _failed(producer_state.ProduceErrorCode.INVALID_PRODUCER_EPOCH, str(exc))
        marker = control_records.read_marker(batch)
        verdict = producer_state.check(
            hosted.log.producer_state, marker, transaction_version=transaction_version
        )
        if isinstance(verdict, producer_state.Refused):
            return _failed(verdict.error, verdict.message)
        epoch = hosted.leader_epoch

        def append(log_: PartitionLog) -> int:
            return log_.append_marker_as_leader(batch, leader_epoch=epoch, now_ms=now_ms)

        return await self._append_and_ack(hosted, append, acks=-1, timeout_ms=timeout_ms)

    async def _verified(
        self, hosted: HostedPartition, batch: record_batch.CheckedBatch, verifier: PartitionVerifier
    ) -> record_batch.CheckedBatch | ProduceResult:
        """`batch` when it may go on to the producer state's verdict: it is not transactional, or
        its producer has an ongoing transaction of its epoch here, or the coordinator said the
        partition is in its ongoing transaction and no marker or transactional batch of the
        producer was appended meanwhile (`txn_verification`); else the partition's answer."""
        header = batch.header
        producer_id, epoch = header.producer_id, header.producer_epoch
        if not header.is_transactional or producer_id < 0:
            return batch
        guard = hosted.log.start_verification(header)
        if guard is None:
            return batch
        unverified = await verifier.verify(hosted.topic, hosted.key[1], producer_id, epoch)
        if unverified is not None:
            return _failed(unverified.error, unverified.message)
        if hosted.role is not Role.LEADER or self.manager.partitions.get(hosted.key) is not hosted:
            return _failed(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{hosted.name}: leadership moved while verifying"
            )
        if not hosted.log.verification_holds(producer_id, epoch, guard):
            return _failed(
                producer_state.ProduceErrorCode.INVALID_TXN_STATE,
                f"The transaction of producer {producer_id} ended on {hosted.name} while the partition was "
                "verified with its coordinator",
            )
        return batch

    def _producer_verdict(
        self, hosted: HostedPartition, header: record_batch.BatchHeader, *, coordinator: bool
    ) -> producer_state.Verdict:
        """The producer state's decision on `header` (the state loaded from the log first if
        needed); a coordinator's batch is checked for its epoch only."""
        state = hosted.log.producer_state
        if coordinator:
            refusal = txn_offsets.coordinator_epoch_refusal(state, header)
            return (
                refusal
                if refusal is not None
                else producer_state.Append(producer_state.AppendReason.COORDINATOR)
            )
        verdict = producer_state.check(state, header)
        if isinstance(verdict, producer_state.Append):
            return txn_verification.sequence_refusal(hosted.log.verifications, header) or verdict
        return verdict

    async def _loaded(
        self, hosted: HostedPartition, topic: str, partition: int, acks: int
    ) -> tuple[HostedPartition | None, ErrorCode, str]:
        """`_admit` again once `hosted`'s producer state is loaded off the event loop
        (`PartitionLog.load_transactions_off_loop`): leadership may have moved meanwhile."""
        await hosted.log.load_transactions_off_loop()
        return self._admit(topic, partition, acks)

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
    ) -> ProduceResult:
        """`append` to the leader's log, then answer as `acks` asks (0: at once, 1: once
        written, -1: once the ISR has it)."""
        try:
            base = append(hosted.log)
        except OSError as exc:
            self.manager.storage_error(hosted, exc, "appending")
            return _failed(
                ErrorCode.KAFKA_STORAGE_ERROR, f"{hosted.name}: the log dir failed while appending"
            )
        required = hosted.log.end_offset
        hosted.dirty = True
        hosted.wake_data_waiters()
        hosted.advance_high_watermark()
        if hosted.log.flush_due and not await self.manager.forced_flush(hosted, now_ms=wall_ms(self.clock)):
            return _failed(ErrorCode.KAFKA_STORAGE_ERROR, f"{hosted.name}: the log dir failed while flushing")
        return await self._acknowledge(hosted, base=base, required=required, acks=acks, timeout_ms=timeout_ms)

    async def _acknowledge(
        self, hosted: HostedPartition, *, base: int, required: int, acks: int, timeout_ms: int
    ) -> ProduceResult:
        """The answer to records at [`base`, `required`) once `acks` is satisfied."""
        if acks == 0:
            return ProduceResult(ErrorCode.NONE)
        if acks == 1 or hosted.log.high_watermark >= required:  # acks=1, or the leader is the whole ISR
            return ProduceResult(ErrorCode.NONE, base)
        return await self._await_isr(hosted, base=base, required=required, timeout_ms=timeout_ms)

    async def await_high_watermark(
        self, hosted: HostedPartition, *, required: int, timeout_ms: int
    ) -> ErrorCode:
        """NONE once the leader's high watermark covers `required` (at once if it does already);
        NOT_ENOUGH_REPLICAS_AFTER_APPEND if it came to cover it while the ISR was below
        `min.insync.replicas`; REQUEST_TIMED_OUT after `timeout_ms`; NOT_LEADER_OR_FOLLOWER or
        KAFKA_STORAGE_ERROR when leadership or the dir was lost first. For the group
        coordinator's answers that write nothing, which rest on what its partition's log
        already holds."""
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
    ) -> ProduceResult:
        """The answer to an acks=-1 produce once the high watermark reaches `required` (or not)."""
        outcome = await self.await_high_watermark(hosted, required=required, timeout_ms=timeout_ms)
        if outcome is ErrorCode.NONE:
            return ProduceResult(ErrorCode.NONE, base)
        if outcome is ErrorCode.REQUEST_TIMED_OUT:
            return _failed(outcome, f"{hosted.name}: not replicated to the ISR within {timeout_ms} ms")
        if outcome is ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
            return _failed(
                outcome, f"{hosted.name}: the ISR shrank below min.insync.replicas={hosted.min_isr}"
            )
        return _failed(outcome, f"{hosted.name}: leadership or the log dir was lost before replication")
