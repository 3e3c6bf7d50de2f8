"""Produce through the Kafka listener: each partition's batch checked as Kafka checks it, appended
by its leader as the client encoded it, acknowledged as `acks` asks.

Guarantees:
* acks must be -1, 0 or 1 (else INVALID_REQUIRED_ACKS for every partition); acks=0 gets no
  response at all, as in Kafka.
* Each partition's `records` must be exactly one RecordBatch v2 no larger than the topic's
  `max.message.bytes` (the broker's `message.max.bytes` when unset; MESSAGE_TOO_LARGE), with a
  key on every record when the topic is compacted (else INVALID_RECORD with a record error per
  keyless record, as Kafka answers), passing
  `record_batch.check_produced` (else INVALID_RECORD or CORRUPT_MESSAGE, nothing appended); the
  partitions of one request are appended and replicated concurrently, each answered with its
  own error code.
* `__consumer_offsets` is the group coordinators' (they write it through `Produce` directly): a
  client's produce to it is INVALID_TOPIC_EXCEPTION, unless its client id is Kafka's
  `__admin_client` (as Kafka's `internalTopicsAllowed`).
* The codes are Kafka's: UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID, NOT_LEADER_OR_FOLLOWER
  (from v10 with the current leader and its endpoint, KIP-951), NOT_ENOUGH_REPLICAS (before the
  append), NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, the
  idempotent producers' 45 / 47 / 87, INVALID_TIMESTAMP (32) for records outside the topic's
  CreateTime window: each `produce.ProduceResult`'s error as it is; a damaged
  batch is CORRUPT_MESSAGE, a whole one that breaks a rule INVALID_RECORD. As in Kafka 4.3.1,
  only a batch whose bounds cannot be read and refused records (with Kafka's message, each
  record's index and reason, and the log start offset) are answered with an error message.
* From v9 (the flexible versions) the response is written by `jbod_kafka.produce_response`
  (byte for byte what kio writes), before by kio.
* A request whose batches are transactional needs a transactional id the principal may WRITE
  (Kafka's check): otherwise every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) and
  nothing is appended. The transaction itself is the producer state's (INVALID_TXN_STATE 48 for a
  non-transactional batch of a producer with an ongoing transaction). KIP-890 part 1 (with
  `transaction.partition.verification.enable`, the default): a transactional batch whose producer
  has no ongoing transaction of its epoch on the partition is verified with the transactional
  id's coordinator first (`coordinators.txn_verifier`, `Produce.append_batch`): appended only if
  the coordinator has the partition in the producer's ongoing transaction and no marker of the
  producer was appended meanwhile (`jbod_core.txn_verification`), else INVALID_TXN_STATE 48
  (TRANSACTION_ABORTABLE 120 from Produce v11), NOT_ENOUGH_REPLICAS 19 while the coordinator
  cannot answer, INVALID_PRODUCER_EPOCH 47 for a fenced producer, as Kafka 4.3.1.
* Kafka's ACLs: a topic the principal may not WRITE is TOPIC_AUTHORIZATION_FAILED (29) for each of
  its partitions, nothing appended (`BrokerContext.allows`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent.kafka.context import BrokerContext, CurrentLeader, hinted_endpoints
from jbod_agent.kafka.listener import CloseConnectionError, Connection
from jbod_agent.partitions.produce import PartitionVerifier, ProduceResult
from jbod_core import log_validator
from jbod_core.acls import AclOperation, Resource, ResourceType
from jbod_core.errors import ErrorCode
from jbod_core.group_records import OFFSETS_TOPIC
from jbod_kafka import produce_response, protocol, record_batch

ADMIN_CLIENT_ID: Final = "__admin_client"  # Kafka's: the one client allowed to write internal topics


@dataclass(frozen=True, slots=True)
class _PartitionResult:
    """One partition's answer. `reason` says why it failed; the response carries it only when
    `reason_shown`, where Kafka 4.3.1 sends one: for a batch whose bounds cannot be read (its
    CorruptRecordException while splitting the request's records); every other error is null."""

    index: int
    error_code: KafkaError
    base_offset: int = -1
    log_start_offset: int = -1
    log_append_time_ms: int = -1
    reason: str | None = None
    reason_shown: bool = False
    current_leader: CurrentLeader | None = None
    record_errors: tuple[tuple[int, str], ...] = ()  # (batch index, message) of refused records

    def to_wire(self) -> produce_response.PartitionProduceResponse:
        leader = self.current_leader
        return produce_response.PartitionProduceResponse(
            self.index,
            int(self.error_code),
            base_offset=self.base_offset,
            log_append_time_ms=self.log_append_time_ms,
            log_start_offset=self.log_start_offset,
            record_errors=self.record_errors,
            error_message=self.reason if self.reason_shown else None,
            current_leader=None if leader is None else leader.hint,
        )

    def to_kafka(self) -> dict[str, Any]:
        """The fields kio writes for the versions before `produce_response`'s (no leader hints)."""
        return {
            "index": self.index,
            "error_code": self.error_code,
            "base_offset": self.base_offset,
            "log_append_time": (
                None
                if self.log_append_time_ms < 0
                else datetime.datetime.fromtimestamp(self.log_append_time_ms / 1000, tz=datetime.UTC)
            ),
            "log_start_offset": self.log_start_offset,
            "record_errors": [
                {"batch_index": index, "batch_index_error_message": message}
                for index, message in self.record_errors
            ],
            "error_message": self.reason if self.reason_shown else None,
        }


def _failed(
    index: int, code: KafkaError, reason: str | None = None, *, shown: bool = False
) -> _PartitionResult:
    return _PartitionResult(index, code, reason=reason, reason_shown=shown)


@dataclass(frozen=True, slots=True)
class _Partition:
    topic: str | None  # None: an unknown topic id
    index: int
    records: bytes | None


def _refused(
    ctx: BrokerContext, part: _Partition, batch: bytes, *, internal_allowed: bool
) -> _PartitionResult | None:
    """The partition's error when it is refused before the produce path sees it."""
    if part.topic is None:
        return _failed(part.index, KafkaError.unknown_topic_id)
    if part.topic == OFFSETS_TOPIC and not internal_allowed:
        return _failed(
            part.index, KafkaError.invalid_topic_exception, f"Cannot append to internal topic {OFFSETS_TOPIC}"
        )
    topic_id = ctx.topic_id(part.topic)
    hosted = ctx.manager.partitions.get((topic_id, part.index)) if topic_id is not None else None
    limit = hosted.max_message_bytes if hosted is not None else ctx.state.config.message_max_bytes
    if len(batch) > limit:
        return _failed(
            part.index,
            KafkaError.message_too_large,
            f"the batch of {len(batch)} bytes is larger than the topic's max.message.bytes {limit}",
        )
    if hosted is not None and hosted.compacted:
        keyless = record_batch.keyless_records(batch)
        if keyless:  # each named, as Kafka does: a client fails only those records (KIP-467)
            errors = log_validator.keyless_errors(keyless, topic=part.topic, partition=part.index)
            return _PartitionResult(
                part.index,
                KafkaError.invalid_record,
                log_start_offset=hosted.log.log_start_offset,
                reason=log_validator.record_errors_message(errors),
                reason_shown=True,
                record_errors=tuple((e.batch_index, e.message) for e in errors),
            )
    return None


async def _produce_partition(  # noqa: PLR0913  the partition, then how it is appended
    ctx: BrokerContext,
    part: _Partition,
    *,
    acks: int,
    timeout_ms: int,
    internal_allowed: bool,
    verifier: PartitionVerifier | None,
) -> _PartitionResult:
    index = part.index
    batch = bytes(part.records or b"")
    refused = _refused(ctx, part, batch, internal_allowed=internal_allowed)
    if refused is not None:
        return refused
    assert part.topic is not None  # an unknown topic id is refused above
    try:
        result = await ctx.produce.append_batch(
            part.topic, index, batch, acks=acks, timeout_ms=timeout_ms, verifier=verifier
        )
    except record_batch.CorruptBatchError as exc:
        if exc.fault is record_batch.BatchFault.INVALID:
            return _failed(index, KafkaError.invalid_record, str(exc))
        unreadable = exc.fault is record_batch.BatchFault.UNREADABLE
        return _failed(index, KafkaError.corrupt_message, str(exc), shown=unreadable)
    except ValueError as exc:  # a batch the log refuses (epoch, offsets)
        return _failed(index, KafkaError.invalid_record, str(exc))
    return _answered(ctx, part.topic, index, result)


def _answered(ctx: BrokerContext, topic: str, index: int, result: ProduceResult) -> _PartitionResult:
    """The partition's answer to what the produce path decided."""
    hosted, _code, _message = ctx.manager.lookup(topic, index)
    log_start = hosted.log.log_start_offset if hosted is not None else -1
    if result.record_errors:  # Kafka's answer to refused records: why, each, and the log start
        return _PartitionResult(
            index,
            KafkaError(int(result.error)),
            log_start_offset=log_start,
            reason=result.message,
            reason_shown=True,
            record_errors=tuple((e.batch_index, e.message) for e in result.record_errors),
        )
    if result.error != ErrorCode.NONE:
        return _failed(index, KafkaError(int(result.error)), result.message)
    return _PartitionResult(
        index,
        KafkaError.none,
        base_offset=result.base_offset,
        log_start_offset=log_start,
        log_append_time_ms=result.log_append_time_ms,
    )


WRITE: Final = AclOperation.WRITE
_ATTRIBUTES_AT: Final = 21  # a batch's attributes (int16), after base offset .. magic and CRC


async def _denied(index: int) -> _PartitionResult:
    return _failed(index, KafkaError.topic_authorization_failed)


def _with_leader(
    ctx: BrokerContext, conn: Connection, topic: str | None, result: _PartitionResult
) -> _PartitionResult:
    """`result` with the current leader when it is NOT_LEADER_OR_FOLLOWER (KIP-951)."""
    if result.error_code != KafkaError.not_leader_or_follower:
        return result
    return dataclasses.replace(
        result, current_leader=ctx.current_leader(topic, result.index, conn.listener.name)
    )


def _is_transactional(records: bytes | None) -> bool:
    """Whether the first batch of `records` is flagged transactional (Kafka's
    `ProduceRequest.hasTransactionalRecords`; a batch too short to say is not)."""
    return (
        records is not None and len(records) > _ATTRIBUTES_AT + 1 and bool(records[_ATTRIBUTES_AT + 1] & 0x10)
    )


async def produce(ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
    body = request.body
    acks = int(body.acks)
    timeout_ms = int(body.timeout.total_seconds() * 1000)
    by_id = request.header.api_version >= 13
    topics: list[tuple[Any, str | None, list[tuple[int, Any]]]] = []
    for topic in body.topic_data:
        name = ctx.topic_name(topic.topic_id) if by_id else topic.name
        topics.append(
            (
                topic.topic_id if by_id else topic.name,
                name,
                [(p.index, p.records) for p in topic.partition_data],
            )
        )
    transactional = any(_is_transactional(records) for _k, _n, parts in topics for _i, records in parts)
    verifier = (
        ctx.txn_verifier.for_request(body.transactional_id, request.header.api_version)
        if transactional
        and body.transactional_id is not None
        and ctx.txn_verifier is not None
        and ctx.state.config.transaction_partition_verification_enable
        else None
    )
    if transactional and not (
        body.transactional_id is not None
        and ctx.allows(conn, WRITE, Resource(ResourceType.TRANSACTIONAL_ID, body.transactional_id))
    ):
        results = [
            [_failed(index, KafkaError.transactional_id_authorization_failed) for index, _records in parts]
            for _k, _n, parts in topics
        ]
    elif acks not in (-1, 0, 1):
        results = [
            [_failed(index, KafkaError.invalid_required_acks) for index, _records in parts]
            for _k, _n, parts in topics
        ]
    else:
        # Kafka's WRITE on each topic named (an unknown id is UNKNOWN_TOPIC_ID below).
        denied = {
            name for _k, name, _p in topics if name is not None and not ctx.allows_topic(conn, WRITE, name)
        }
        answers = iter(
            await asyncio.gather(
                *(
                    _denied(index)
                    if name in denied
                    else _produce_partition(
                        ctx,
                        _Partition(name, index, records),
                        acks=acks,
                        timeout_ms=timeout_ms,
                        internal_allowed=request.header.client_id == ADMIN_CLIENT_ID,
                        verifier=verifier,
                    )
                    for _key, name, parts in topics
                    for index, records in parts
                )
            )
        )
        results = [[next(answers) for _part in parts] for _key, _name, parts in topics]
    if acks == 0:
        failed = [p for answered in results for p in answered if p.error_code != KafkaError.none]
        if failed:
            # As Kafka: an acks=0 producer learns of a failure only by the connection closing.
            raise CloseConnectionError(
                f"an acks=0 produce failed: {failed[0].reason or failed[0].error_code}"
            )
        return None
    version = request.header.api_version
    if version >= produce_response.LEADER_HINTS_FROM:
        results = [
            [_with_leader(ctx, conn, name, result) for result in answered]
            for (_key, name, _parts), answered in zip(topics, results, strict=True)
        ]
    if version >= produce_response.FIRST_VERSION:  # written around kio: the hot path
        return protocol.EncodedResponse(
            [
                produce_response.encode(
                    version,
                    correlation_id=request.header.correlation_id,
                    topics=[
                        (key, [r.to_wire() for r in answered])
                        for (key, _name, _parts), answered in zip(topics, results, strict=True)
                    ],
                    node_endpoints=hinted_endpoints(
                        r.current_leader for answered in results for r in answered
                    ),
                    throttle_ms=conn.throttle_ms,
                )
            ]
        )
    responses = [
        {("topic_id" if by_id else "name"): key, "partition_responses": [r.to_kafka() for r in answered]}
        for (key, _name, _parts), answered in zip(topics, results, strict=True)
    ]
    return protocol.build(
        protocol.response_type(request.header.api_key, version),
        responses=responses,
        throttle_time=conn.throttle_ms,
    )
