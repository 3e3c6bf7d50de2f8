"""Kafka's transaction coordinator on a broker: the transactional ids of the `__transaction_state`
partitions this broker leads, decided by `jbod_core.transactions` and written to those partitions.

A transactional id lives in partition `abs(hash(id)) % partitions` of `__transaction_state`
(`jbod_core.txn_records.partition_for`); the leader of that partition is its coordinator.

Guarantees:
* Follows leadership as the group coordinator does (`coordinator_partitions`): when this broker
  becomes leader of a partition of `__transaction_state` it loads the partition (the last record
  of each key, read from the log start to the end offset; a record that does not decode is
  skipped with a WARNING), answering COORDINATOR_LOAD_IN_PROGRESS meanwhile; when it stops
  leading it, it drops them at once. A transactional id of a partition it does not lead is NOT_COORDINATOR,
  once the request's own errors (an empty id, an InitProducerId's timeout) were answered, as
  Kafka orders them.
* Persistence first: every `Transition` is appended to the id's partition through the leader's
  produce path (`Produce.append_batch`, acks=-1, `transaction.state.log` writes bounded by
  `APPEND_TIMEOUT_MS`) before it takes effect and before anything is answered; while it is in
  flight the id holds the transition's `holding` metadata (its pending state), so a concurrent
  request of the same id is answered CONCURRENT_TRANSACTIONS by the pure decision. An
  AddPartitionsToTxn or AddOffsetsToTxn that arrives while the markers of the id's Prepare*
  transaction are being written is decided once they are (Complete* written), or after
  `MARKERS_WAIT_S` if that comes first (then CONCURRENT_TRANSACTIONS, which Kafka answers at
  once: clients retry it after a backoff, 20 ms in librdkafka). An append that failed keeps
  `after_failure` and is answered `transactions.append_error` of its error (a leadership lost
  meanwhile: NOT_COORDINATOR).
* Markers: after a Prepare* record was written (EndTxn, a timeout's or a fence's abort), and for
  every Prepare* transaction found on load, one task per transaction sends WriteTxnMarkers (v1,
  the coordinator epoch = the partition's leader epoch) through `MarkerSender` to the leader of
  each of its partitions, again every `MARKER_RETRY_S` for the partitions not yet written, until
  each leader wrote it or the partition's topic is gone; then it writes the Complete* record
  (retried the same way). The task stops when the coordinator stops leading the partition (the
  new leader resumes it on load), or when a leader answers INVALID_PRODUCER_EPOCH or
  TRANSACTION_COORDINATOR_FENCED (a newer coordinator exists, as Kafka), with a WARNING.
* Timers: every `transaction.abort.timed.out.transaction.cleanup.interval.ms` the ongoing
  transactions past their `transaction.timeout.ms` are aborted (an epoch fence, as Kafka); every
  `transaction.remove.expired.transaction.cleanup.interval.ms` the ids idle longer than
  `transactional.id.expiration.ms` are written as tombstones and forgotten.
* Producer ids of new transactional ids come from the broker's block (`ProducerIds`); when it has
  none left the InitProducerId is answered COORDINATOR_LOAD_IN_PROGRESS (retried by clients).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from jbod_agent.coordinators.coordinator_partitions import CoordinatorPartitions, CoordinatorShard
from jbod_agent.partitions.produce import Produce
from jbod_agent.partitions.replica_manager import ReplicaManager
from jbod_agent.ports import Clock, wall_ms
from jbod_core import group_records, transactions, txn_records
from jbod_core.errors import ErrorCode
from jbod_core.transactions import (
    AnswerNow,
    Decision,
    NeedProducerId,
    TopicPartition,
    Transition,
    TxnConfig,
    TxnError,
    TxnMetadata,
)
from jbod_core.txn_records import TRANSACTION_STATE_TOPIC, TransactionState
from jbod_kafka import record_batch

log = logging.getLogger("jbod_agent.transactions")

APPEND_TIMEOUT_MS: Final = 5000  # Kafka's transaction log append waits request.timeout.ms
MARKER_RETRY_S: Final = 0.1
#: How long an AddPartitionsToTxn / AddOffsetsToTxn waits for the markers of the id's previous
#: transaction before it is answered CONCURRENT_TRANSACTIONS (clients retry that after a backoff).
MARKERS_WAIT_S: Final = 1.0
MAX_MARKER_RETRY_S: Final = 2.0
#: A leader's answers to a marker that mean this coordinator is stale: stop sending (Kafka's
#: INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED).
FENCED_BY_LEADER: Final = frozenset({47, 52})


@dataclass(frozen=True, slots=True)
class TxnSettings:
    partitions: int = txn_records.DEFAULT_PARTITIONS  # transaction.state.log.num.partitions
    config: TxnConfig = field(default_factory=TxnConfig)
    abort_timed_out_interval_ms: int = transactions.DEFAULT_ABORT_TIMED_OUT_INTERVAL_MS
    remove_expired_interval_ms: int = transactions.DEFAULT_REMOVE_EXPIRED_INTERVAL_MS


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One WriteTxnMarkers entry: the result of a producer's transaction on some partitions."""

    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


class MarkerSender(Protocol):
    async def write_markers(self, leader: int, marker: TxnMarker) -> Mapping[TopicPartition, int]:
        """Send `marker` to broker `leader`: the Kafka error code of each partition (raises
        nothing: an unreachable leader is NOT_LEADER_OR_FOLLOWER for all)."""


class ProducerIdSource(Protocol):
    def next_id(self) -> int | None: ...


@dataclass(eq=False)
class _Shard(CoordinatorShard):
    """The transactional ids of one `__transaction_state` partition this broker leads."""

    txns: dict[str, TxnMetadata] = field(default_factory=dict)
    markers: dict[str, asyncio.Task[None]] = field(default_factory=dict)


class TxnCoordinator:
    """The transactional ids this broker coordinates (the module's guarantees)."""

    def __init__(  # noqa: PLR0913  the broker's parts it uses
        self,
        manager: ReplicaManager,
        produce: Produce,
        producer_ids: ProducerIdSource,
        markers: MarkerSender,
        *,
        clock: Clock,
        settings: TxnSettings,
    ) -> None:
        self._manager = manager
        self._produce = produce
        self._producer_ids = producer_ids
        self._markers = markers
        self._clock = clock
        self.settings = settings
        self._partitions: CoordinatorPartitions[_Shard] = CoordinatorPartitions(
            manager, TRANSACTION_STATE_TOPIC, _Shard, self._load, self._unload, log=log, what="transactions"
        )
        self._shards = self._partitions.shards

    # -- where transactional ids live -----------------------------------------------------------

    def state_topic_partitions(self) -> int:
        image = self._manager.state.image
        topic_id = image.topic_ids_by_name.get(TRANSACTION_STATE_TOPIC)
        topic = image.topics.get(topic_id) if topic_id is not None else None
        return len(topic.partitions) if topic is not None and topic.partitions else self.settings.partitions

    def partition_of(self, transactional_id: str) -> int:
        return txn_records.partition_for(transactional_id, self.state_topic_partitions())

    def _offsets_partitions(self) -> int:
        image = self._manager.state.image
        topic_id = image.topic_ids_by_name.get(group_records.OFFSETS_TOPIC)
        topic = image.topics.get(topic_id) if topic_id is not None else None
        if topic is not None and topic.partitions:
            return len(topic.partitions)
        return self._manager.state.config.offsets_topic_num_partitions

    def _shard_of(self, transactional_id: str) -> tuple[_Shard | None, TxnError]:
        shard = self._shards.get(self.partition_of(transactional_id))
        if shard is None:
            return None, TxnError.NOT_COORDINATOR
        if not shard.loaded:
            return None, TxnError.COORDINATOR_LOAD_IN_PROGRESS
        return shard, TxnError.NONE

    def _now_ms(self) -> int:
        return wall_ms(self._clock)

    # -- leadership: loading and unloading ------------------------------------------------------

    def _current(self, shard: _Shard) -> bool:
        return self._partitions.current(shard)

    async def _load(self, shard: _Shard) -> None:
        started = self._clock.monotonic()
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        if not await self._partitions.read_log(
            shard, lambda data, position: _scan_chunk(latest, data, position)
        ):
            return
        txns = await asyncio.to_thread(_replay, latest, shard.index)
        if not self._current(shard):
            return
        shard.txns = txns
        shard.loaded = True
        (log.info if txns else log.debug)(
            "Loaded %d transactional ids of %s-%d in %.2f s (leader epoch %d)",
            len(txns),
            TRANSACTION_STATE_TOPIC,
            shard.index,
            self._clock.monotonic() - started,
            shard.leader_epoch,
        )
        for transactional_id, metadata in txns.items():
            if metadata.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
                self._start_markers(shard, transactional_id)

    def _unload(self, shard: _Shard, reason: str) -> None:
        self._partitions.forget(shard)
        for task in shard.markers.values():
            task.cancel()
        shard.markers.clear()
        if shard.loaded:
            (log.info if shard.txns else log.debug)(
                "Unloaded %d transactional ids of %s-%d: %s",
                len(shard.txns),
                TRANSACTION_STATE_TOPIC,
                shard.index,
                reason,
            )

    def close(self) -> None:
        self._partitions.close()

    # -- writing --------------------------------------------------------------------------------

    async def _write(self, shard: _Shard, transition: Transition) -> TxnError:
        """Append the transition's record (acks=-1), holding its metadata meanwhile: the error to
        answer (the transition's own when written)."""
        transactional_id = transition.record.transactional_id
        shard.txns[transactional_id] = transition.holding
        key, value = txn_records.encode(transition.record)
        batch = record_batch.encode_batch(0, -1, self._now_ms(), [(key, value)])
        result = await self._produce.append_batch(
            TRANSACTION_STATE_TOPIC, shard.index, batch, acks=-1, timeout_ms=APPEND_TIMEOUT_MS
        )
        if not self._current(shard):
            return TxnError.NOT_COORDINATOR
        if result.error != ErrorCode.NONE:
            log.warning(
                "Writing transactional id %s (%s) to %s-%d failed (errorCode %d): %s",
                transactional_id,
                "tombstone" if transition.record.value is None else transition.record.value.state.kafka_name,
                TRANSACTION_STATE_TOPIC,
                shard.index,
                int(result.error),
                result.message,
            )
            shard.txns[transactional_id] = transition.after_failure
            return transactions.append_error(int(result.error))
        if transition.after_append is None:
            shard.txns.pop(transactional_id, None)
        else:
            shard.txns[transactional_id] = transition.after_append
            if transition.after_append.state in (
                TransactionState.PREPARE_COMMIT,
                TransactionState.PREPARE_ABORT,
            ):
                self._start_markers(shard, transactional_id)
        return transition.error

    async def _decide(
        self,
        transactional_id: str,
        decide: Callable[[TxnMetadata | None], Decision],
        *,
        after_markers: bool = False,
    ) -> TxnError:
        if not transactional_id:  # before asking where it lives, as Kafka
            return TxnError.INVALID_REQUEST
        shard, error = self._shard_of(transactional_id)
        if shard is None:
            return error
        if after_markers and await self._markers_written(shard, transactional_id):
            shard, error = self._shard_of(transactional_id)  # it may have moved meanwhile
            if shard is None:
                return error
        decision = decide(shard.txns.get(transactional_id))
        if isinstance(decision, AnswerNow):
            return decision.error
        assert isinstance(decision, Transition)
        return await self._write(shard, decision)

    # -- markers --------------------------------------------------------------------------------

    async def _markers_written(self, shard: _Shard, transactional_id: str) -> bool:
        """Wait, at most `MARKERS_WAIT_S`, for the markers (and the Complete* record) of the id's
        Prepare* transaction, if they are being written; whether it waited."""
        running = shard.markers.get(transactional_id)
        if running is None or running.done():
            return False
        await asyncio.wait([running], timeout=MARKERS_WAIT_S)
        return True

    def _start_markers(self, shard: _Shard, transactional_id: str) -> None:
        running = shard.markers.get(transactional_id)
        if running is not None and not running.done():
            return
        shard.markers[transactional_id] = self._partitions.spawn(
            self._complete(shard, transactional_id), f"txn-markers-{transactional_id}"
        )

    async def _complete(self, shard: _Shard, transactional_id: str) -> None:
        """Write the markers of the id's Prepare* transaction, then its Complete* record."""
        metadata = shard.txns.get(transactional_id)
        if metadata is None:
            return
        committed = metadata.state is TransactionState.PREPARE_COMMIT
        if not await self._send_markers(shard, metadata, committed):
            return
        delay = MARKER_RETRY_S
        while self._current(shard):
            current = shard.txns.get(transactional_id)
            if current is None or current.state is not metadata.state:
                return
            error = await self._write(shard, transactions.markers_written(current, now_ms=self._now_ms()))
            if error is TxnError.NONE or error is TxnError.NOT_COORDINATOR:
                if error is TxnError.NONE:
                    log.debug(
                        "Completed the transaction of %s (producer %d, epoch %d): %s",
                        transactional_id,
                        metadata.producer_id,
                        metadata.producer_epoch,
                        "committed" if committed else "aborted",
                    )
                return
            await self._clock.sleep(delay)
            delay = min(delay * 2, MAX_MARKER_RETRY_S)

    async def _send_markers(self, shard: _Shard, metadata: TxnMetadata, committed: bool) -> bool:
        """Until every partition's leader wrote the marker (True), or one answered that this
        coordinator or producer epoch is stale (False: stop, as Kafka)."""
        pending = set(metadata.partitions)
        delay = MARKER_RETRY_S
        while pending and self._current(shard):
            image = self._manager.state.image
            by_leader: dict[int, list[TopicPartition]] = {}
            for topic, partition in sorted(pending):
                topic_id = image.topic_ids_by_name.get(topic)
                part = None if topic_id is None else image.partition((topic_id, partition))
                if part is None:  # the partition is gone: nothing to mark
                    pending.discard((topic, partition))
                    continue
                by_leader.setdefault(part.leader, []).append((topic, partition))
            results = await asyncio.gather(
                *(
                    self._markers.write_markers(
                        leader,
                        TxnMarker(
                            metadata.producer_id,
                            metadata.producer_epoch,
                            committed,
                            shard.leader_epoch,
                            tuple(partitions),
                        ),
                    )
                    for leader, partitions in by_leader.items()
                    if leader >= 0
                )
            )
            for result in results:
                for written, code in result.items():
                    if code == ErrorCode.NONE:
                        pending.discard(written)
                    elif code in FENCED_BY_LEADER:
                        log.warning(
                            "Stopped writing the markers of %s (producer %d, epoch %d): %s-%d answered "
                            "errorCode %d (a newer coordinator or epoch)",
                            metadata.transactional_id,
                            metadata.producer_id,
                            metadata.producer_epoch,
                            *written,
                            code,
                        )
                        return False
            if pending:
                await self._clock.sleep(delay)
                delay = min(delay * 2, MAX_MARKER_RETRY_S)
        return not pending

    # -- timers ---------------------------------------------------------------------------------

    async def run_forever(self) -> None:
        """Abort timed-out transactions and expire idle transactional ids (the module's
        guarantees); first, load the partitions this broker already leads."""
        self._partitions.follow_all()
        abort_every = self.settings.abort_timed_out_interval_ms / 1000
        expire_every = self.settings.remove_expired_interval_ms / 1000
        next_expiry = self._clock.monotonic() + expire_every
        while True:
            await self._clock.sleep(abort_every)
            await self._abort_timed_out()
            if self._clock.monotonic() >= next_expiry:
                await self._expire()
                next_expiry = self._clock.monotonic() + expire_every

    async def _abort_timed_out(self) -> None:
        for shard in list(self._shards.values()):
            if not shard.loaded:
                continue
            for transactional_id, metadata in list(shard.txns.items()):
                transition = transactions.abort_timed_out(metadata, now_ms=self._now_ms())
                if transition is not None and self._current(shard):
                    log.info(
                        "Aborting the transaction of %s (producer %d): older than its timeout of %d ms",
                        transactional_id,
                        metadata.producer_id,
                        metadata.txn_timeout_ms,
                    )
                    await self._write(shard, transition)

    async def _expire(self) -> None:
        for shard in list(self._shards.values()):
            if not shard.loaded:
                continue
            for transactional_id, metadata in list(shard.txns.items()):
                transition = transactions.expire(metadata, now_ms=self._now_ms(), config=self.settings.config)
                written = transition is not None and self._current(shard)
                if (
                    written
                    and transition is not None
                    and await self._write(shard, transition) is TxnError.NONE
                ):
                    log.info("Expired transactional id %s", transactional_id)

    # -- the requests ---------------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str,
        *,
        transaction_timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
        version: int,
    ) -> tuple[TxnError, int, int]:
        """(error, producer id, epoch) of an InitProducerId with a transactional id."""
        config = self.settings.config
        fresh: int | None = None

        def decide(metadata: TxnMetadata | None) -> Decision:
            return transactions.init_producer_id(
                metadata,
                transactional_id=transactional_id,
                transaction_timeout_ms=transaction_timeout_ms,
                now_ms=self._now_ms(),
                config=config,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                fresh_producer_id=fresh,
                version=version,
            )

        # The request's own errors come first, wherever its coordinator is (as Kafka).
        checked = decide(None)
        if isinstance(checked, AnswerNow):
            return checked.error, -1, -1
        shard, error = self._shard_of(transactional_id)
        if shard is None:
            return error, -1, -1
        metadata = shard.txns.get(transactional_id)
        decision = decide(metadata)
        if isinstance(decision, NeedProducerId):
            fresh = self._producer_ids.next_id()
            if fresh is None:
                return TxnError.COORDINATOR_LOAD_IN_PROGRESS, -1, -1
            decision = decide(metadata)
        if isinstance(decision, AnswerNow):
            return decision.error, -1, -1
        assert isinstance(decision, Transition) and shard is not None
        error = await self._write(shard, decision)
        if error is not TxnError.NONE:
            return error, -1, -1
        written = decision.after_append
        assert written is not None
        return TxnError.NONE, written.producer_id, written.producer_epoch

    async def add_partitions(
        self,
        transactional_id: str,
        *,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
        version: int,
    ) -> TxnError:
        return await self._decide(
            transactional_id,
            lambda metadata: transactions.add_partitions_to_txn(
                metadata,
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                partitions=partitions,
                now_ms=self._now_ms(),
                version=version,
            ),
            after_markers=True,
        )

    def verify_partitions(
        self,
        transactional_id: str,
        *,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> Mapping[TopicPartition, TxnError]:
        shard, error = (
            self._shard_of(transactional_id) if transactional_id else (None, TxnError.INVALID_REQUEST)
        )
        if shard is None:
            return dict.fromkeys(partitions, error)
        return transactions.verify_partitions_in_txn(
            shard.txns.get(transactional_id),
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            partitions=partitions,
        )

    async def add_offsets(
        self, transactional_id: str, *, producer_id: int, producer_epoch: int, group_id: str, version: int
    ) -> TxnError:
        offsets_partitions = self._offsets_partitions()
        return await self._decide(
            transactional_id,
            lambda metadata: transactions.add_offsets_to_txn(
                metadata,
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                group_id=group_id,
                now_ms=self._now_ms(),
                version=version,
                offsets_topic_partitions=offsets_partitions,
            ),
            after_markers=True,
        )

    async def end_txn(
        self, transactional_id: str, *, producer_id: int, producer_epoch: int, committed: bool, version: int
    ) -> TxnError:
        now_ms = self._now_ms()
        return await self._decide(
            transactional_id,
            lambda metadata: transactions.end_txn(
                metadata,
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                commit=committed,
                now_ms=now_ms,
                version=version,
            ),
        )

    # -- reads ----------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> transactions.TransactionDescription:
        if not transactional_id:
            return transactions.describe(None, transactional_id=transactional_id)
        shard, error = self._shard_of(transactional_id)
        if shard is None:
            return transactions.TransactionDescription(transactional_id, error)
        return transactions.describe(shard.txns.get(transactional_id), transactional_id=transactional_id)

    def list_transactions(
        self,
        *,
        state_filters: Sequence[str],
        producer_id_filters: Sequence[int],
        duration_filter_ms: int,
        transactional_id_pattern: re.Pattern[str] | None,
    ) -> tuple[TxnError, transactions.TransactionListing]:
        loading = any(not s.loaded for s in self._shards.values())
        if loading:  # as Kafka: no list while a partition loads
            return TxnError.COORDINATOR_LOAD_IN_PROGRESS, transactions.TransactionListing((), ())
        listing = transactions.list_transactions(
            (m for s in self._shards.values() for m in s.txns.values()),
            now_ms=self._now_ms(),
            state_filters=state_filters,
            producer_id_filters=producer_id_filters,
            duration_filter_ms=duration_filter_ms,
            transactional_id_pattern=transactional_id_pattern,
        )
        return TxnError.NONE, listing


def _scan_chunk(latest: dict[bytes, tuple[int, bytes | None]], data: bytes, position: int) -> int:
    """Note in `latest` the offset and value of each keyed record of `data` at or after
    `position` (a later record of a key replacing an earlier one): the offset after them."""
    view = memoryview(data)
    for header in record_batch.iter_headers(data, verify_crc=False):
        if not header.is_control and header.record_count:
            try:
                records = record_batch.stored_records(view[header.position : header.position + header.size])
            except ValueError as exc:
                log.warning("Skipped a batch of %s that does not decode: %s", TRANSACTION_STATE_TOPIC, exc)
                records = []
            for record in records:
                if record.offset >= position and record.key is not None:
                    latest[record.key] = (record.offset, record.value)
        position = header.next_offset
    return position


def _replay(latest: dict[bytes, tuple[int, bytes | None]], index: int) -> dict[str, TxnMetadata]:
    """The transactional ids of the last record of each key (a record that does not decode is
    skipped with a WARNING; a tombstone forgets its id)."""
    txns: dict[str, TxnMetadata] = {}
    for key, (offset, value) in sorted(latest.items(), key=lambda item: item[1][0]):
        try:
            record = txn_records.decode(key, value)
            metadata = transactions.loaded(record)
        except ValueError as exc:
            log.warning("Skipped record %d of %s-%d: %s", offset, TRANSACTION_STATE_TOPIC, index, exc)
            continue
        if metadata is None:
            txns.pop(record.transactional_id, None)
        else:
            txns[record.transactional_id] = metadata
    return txns
