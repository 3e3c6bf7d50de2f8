"""Fetch, ListOffsets and OffsetForLeaderEpoch for Kafka consumers, served by partition leaders
from the stored batches as they are.

Guarantees:
* Fetch returns whole stored batches from the one holding `fetch_offset`, only below the high
  watermark; with `isolation_level` 1 (read_committed) only below the last stable offset, with
  the aborted transactions of the range returned (`PartitionLog.aborted_transactions`, Kafka's
  collection over the segments' `.txnindex`; empty when nothing is returned), null under
  read_uncommitted; `last_stable_offset` is always the LSO (a partition's producer state is
  loaded off the event loop before its first read: `PartitionLog.load_transactions_off_loop`). Each partition gets at
  most `partition_max_bytes` and the response at most `max_bytes` (librdkafka's
  `fetch.max.bytes`, whose receive buffer is sized to it), except that the first partition with
  data always gets its first batch (KIP-74); a later partition whose next batch does not fit gets
  none. With less than `min_bytes` ready it
  waits up to `max_wait` (of the agent's clock) for new data on any of the partitions asked for.
* Per partition, Kafka's codes: UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID,
  NOT_LEADER_OR_FOLLOWER (only leaders serve consumers before v11), FENCED_LEADER_EPOCH /
  UNKNOWN_LEADER_EPOCH against `current_leader_epoch`, OFFSET_OUT_OF_RANGE, KAFKA_STORAGE_ERROR;
  a consumer whose `last_fetched_epoch` disagrees with the leader's history gets
  `diverging_epoch` and no records (KIP-320), as followers do.
* Every partition is answered in Kafka 4.3.1's shape (`PartitionAnswer`, checked against Kafka by
  tests/kafka_tools/test_error_responses.py): `records` is never null (librdkafka drops a whole
  response holding a null, issue 30); a failed read has offsets -1; from v16 NOT_LEADER_OR_FOLLOWER
  and FENCED_LEADER_EPOCH name the current leader and its endpoint (KIP-951).
* Follower fetching (KIP-392): from v11 a consumer's Fetch is served by any replica this broker
  hosts, a follower up to its own high watermark (read_committed: its last stable offset), with
  its own offsets; past a follower's end it is OFFSET_OUT_OF_RANGE, except that a v11 fetch
  without a leader epoch gets an empty answer (Kafka, KAFKA-14240). With `replica.selector.class`
  set (Kafka's RackAwareReplicaSelector), a leader answers a consumer whose `rack_id` names
  another rack holding an in-sync follower of the offset with that follower in
  `preferred_read_replica`, no records, its own offsets, at once (`jbod_core.replica_selector`);
  followers never redirect, and followers' fetches never get one. Bytes served from follower
  replicas are counted (`ClientFetch.follower_bytes_served`). ListOffsets and
  OffsetForLeaderEpoch stay on the leader.
* Fetch sessions (KIP-227): a full fetch with epoch 0 opens one, incremental fetches list only
  what changed and are answered only with what changed (`fetch_sessions`).
* From v12 (the flexible versions) the response is framed around the records by
  `jbod_kafka.fetch_response` (the same bytes kio would write, without copying the records).
* ListOffsets: -2 earliest and -4 earliest local are the log start, -1 latest the high
  watermark, -3 the record with the largest timestamp, a timestamp the first record at or after
  it (offset -1 when there is none), each with the leader epoch of that offset; under
  read_committed the last stable offset stands for the high watermark (latest, and the bound of
  the searches), as Kafka's `lastFetchableOffset`.
* OffsetForLeaderEpoch answers from the leader's epoch cache (Kafka's `endOffsetFor`).
* Kafka's ACLs: Fetch needs READ on the topic, ListOffsets and OffsetForLeaderEpoch DESCRIBE;
  otherwise the partition is TOPIC_AUTHORIZATION_FAILED (29) and nothing of it is read.
* A Fetch with a replica id is a follower's (issue 31): served by `ReplicaFetchServer` through
  `replica_wire` when the principal may CLUSTER_ACTION on the cluster (as Kafka authorizes a
  follower: `User:jbod-broker`, super users, or an ACL); otherwise every partition is answered
  TOPIC_AUTHORIZATION_FAILED, nothing is read, and the refusal is logged (rate limited).
  ListOffsets from a replica answers LATEST with the log end offset, as Kafka's does.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent.kafka.context import BrokerContext, CurrentLeader, hinted_endpoints
from jbod_agent.kafka.fetch_sessions import ConsumerSessions, SessionKey, Wanted
from jbod_agent.kafka.listener import Connection
from jbod_agent.partitions.replica_manager import HostedPartition, Role
from jbod_agent.ports import monotonic_ms
from jbod_agent.replication import divergence, replica_wire
from jbod_agent.storage.local_log import OffsetOutOfRangeError
from jbod_agent.storage.partition_log import PartitionLog
from jbod_core.acls import AclOperation
from jbod_core.errors import ErrorCode
from jbod_core.replica_fetch import ReplicaFetchAnswer, ReplicaPartitionAnswer
from jbod_core.replica_selector import NO_PREFERRED_REPLICA, ReplicaView, preferred_read_replica
from jbod_core.replication import DivergingEpoch
from jbod_kafka import fetch_response, protocol, record_batch
from jbod_runtime.http_server import RateLimitedLog

EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -2, -1, -3, -4
READ_COMMITTED: Final = 1  # Kafka's IsolationLevel.READ_COMMITTED
FOLLOWER_FETCH_FROM: Final = 11  # KIP-392: Fetch v11 carries the consumer's rack
log = logging.getLogger("jbod_agent.kafka.fetch")
_refused_replicas = RateLimitedLog(log, interval_s=10.0)


def _leader(  # noqa: PLR0913  the partition as the request names it, and who may serve it
    ctx: BrokerContext,
    topic: str | None,
    partition: int,
    current_leader_epoch: int,
    *,
    by_id: bool,
    any_replica: bool = False,
) -> tuple[HostedPartition | None, KafkaError]:
    """The hosted partition when this broker leads it (with `any_replica`, or follows it) at
    the client's `current_leader_epoch`, else None and Kafka's error."""
    if topic is None:
        return None, KafkaError.unknown_topic_id if by_id else KafkaError.unknown_topic_or_partition
    hosted, code, _message = ctx.manager.lookup(topic, partition, any_replica=any_replica)
    if hosted is None:
        return None, KafkaError(int(code))
    if current_leader_epoch >= 0 and current_leader_epoch < hosted.leader_epoch:
        return None, KafkaError.fenced_leader_epoch
    if current_leader_epoch > hosted.leader_epoch:
        return None, KafkaError.unknown_leader_epoch
    return hosted, KafkaError.none


#: The Fetch errors that carry the current leader (KIP-951), from Fetch v16.
_LEADER_HINTED: Final = frozenset({KafkaError.not_leader_or_follower, KafkaError.fenced_leader_epoch})


@dataclass(frozen=True, slots=True)
class PartitionAnswer:
    """One partition of a Fetch response, shaped as Kafka 4.3.1 shapes it.

    `records` is never null: Kafka sends empty records with every error, and librdkafka rejects a
    whole response that holds a null (`invalid MessageSetSize -1`), so an errored partition would
    cost its consumer the connection and never reset (issue 30). A partition refused before any
    read (`refused`: unknown topic or partition, not authorized) has empty `aborted_transactions`,
    any other a null one (read_uncommitted); a read that failed has no offsets (-1), as in Kafka.
    """

    partition_index: int
    error_code: KafkaError = KafkaError.none
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    last_stable_offset: int = -1
    aborted: tuple[tuple[int, int], ...] | None = None  # read_committed: (producer id, first offset)
    diverging: DivergingEpoch | None = None
    current_leader: CurrentLeader | None = None
    refused: bool = False
    preferred_read_replica: int = NO_PREFERRED_REPLICA  # KIP-392: the leader's pointer, no records

    @classmethod
    def refusal(cls, index: int, code: KafkaError) -> PartitionAnswer:
        """A partition refused before any read: unknown, or not authorized."""
        return cls(index, code, refused=True)

    @property
    def has_data(self) -> bool:
        return bool(self.records)

    @property
    def diverges(self) -> bool:
        return self.diverging is not None

    def to_wire(self) -> fetch_response.Partition:
        """The partition for `fetch_response`'s encoder (v12 on: records uncopied)."""
        return fetch_response.Partition(
            self.partition_index,
            int(self.error_code),
            high_watermark=self.high_watermark,
            last_stable_offset=self.last_stable_offset,
            log_start_offset=self.log_start_offset,
            aborted_transactions_null=not self.refused and self.aborted is None,
            aborted_transactions=self.aborted or (),
            records=self.records,
            diverging=None if self.diverging is None else (self.diverging.epoch, self.diverging.end_offset),
            current_leader=None if self.current_leader is None else self.current_leader.hint,
            preferred_read_replica=self.preferred_read_replica,
        )

    def to_kafka(self) -> dict[str, Any]:
        """The fields of the response's PartitionData for the versions before `fetch_response`'s
        (kio drops those a version lacks; no leader hints before v16)."""
        fields: dict[str, Any] = {
            "partition_index": self.partition_index,
            "error_code": self.error_code,
            "high_watermark": self.high_watermark,
            "last_stable_offset": self.last_stable_offset,
            "log_start_offset": self.log_start_offset,
            "aborted_transactions": []
            if self.refused
            else None
            if self.aborted is None
            else [{"producer_id": p, "first_offset": f} for p, f in self.aborted],
            "records": self.records,
            "preferred_read_replica": self.preferred_read_replica,
        }
        if self.diverging is not None:
            fields["diverging_epoch"] = {
                "epoch": self.diverging.epoch,
                "end_offset": self.diverging.end_offset,
            }
        return fields


def _topic_name(ctx: BrokerContext, wanted: Wanted, *, by_id: bool) -> str | None:
    """The topic of `wanted`, named by the client by name or (v13+) by id; None when unknown."""
    topic_key = wanted.key[0]
    if by_id:
        return ctx.topic_name(topic_key) if isinstance(topic_key, uuid.UUID) else None
    return topic_key if isinstance(topic_key, str) else None


@dataclass(frozen=True, slots=True)
class _Reading:
    """What one Fetch reads: how the client names topics, its listener and its version."""

    by_id: bool
    listener_name: str
    version: int
    read_committed: bool = False  # isolation_level 1
    client_rack: str = ""  # v11+: the consumer's `client.rack` (KIP-392)

    @property
    def from_any_replica(self) -> bool:
        """KIP-392: a consumer's Fetch from v11 (it names its rack) may be served by a follower."""
        return self.version >= FOLLOWER_FETCH_FROM


def _not_read(
    ctx: BrokerContext, topic: str | None, partition: int, code: KafkaError, reading: _Reading
) -> PartitionAnswer:
    """The answer of a partition this broker does not read for the client: an unknown one is
    refused before any read, as Kafka's KafkaApis refuses it; the others failed their read."""
    if topic is None or code == KafkaError.unknown_topic_or_partition:
        return PartitionAnswer.refusal(partition, code)
    hint = None
    if code in _LEADER_HINTED and reading.version >= fetch_response.LEADER_HINTS_FROM:
        hint = ctx.current_leader(topic, partition, reading.listener_name)
    return PartitionAnswer(partition, code, current_leader=hint)


def _read_partition(
    ctx: BrokerContext, wanted: Wanted, budget: int, *, first: bool, reading: _Reading
) -> tuple[PartitionAnswer, HostedPartition | None]:
    partition = wanted.key[1]
    topic = _topic_name(ctx, wanted, by_id=reading.by_id)
    hosted, code = _leader(
        ctx,
        topic,
        partition,
        wanted.current_leader_epoch,
        by_id=reading.by_id,
        any_replica=reading.from_any_replica,
    )
    if hosted is None:
        return _not_read(ctx, topic, partition, code, reading), None
    log_ = hosted.log
    preferred = _preferred_replica(ctx, hosted, wanted.fetch_offset, reading)
    read = functools.partial(
        PartitionAnswer,
        partition,
        high_watermark=log_.high_watermark,
        log_start_offset=log_.log_start_offset,
        last_stable_offset=log_.last_stable_offset,
    )
    if preferred != NO_PREFERRED_REPLICA:
        # Kafka skips the read: the consumer is pointed at the replica of its rack.
        return read(preferred_read_replica=preferred), hosted
    if wanted.last_fetched_epoch >= 0:
        diverging = divergence.leader_check(
            log_, fetch_offset=wanted.fetch_offset, last_fetched_epoch=wanted.last_fetched_epoch
        )
        if diverging is not None:
            return read(diverging=diverging), hosted
    return _read_records(ctx, hosted, wanted, budget, first=first, reading=reading, read=read)


def _read_records(  # noqa: PLR0913  the read's inputs, as `_read_partition` has them
    ctx: BrokerContext,
    hosted: HostedPartition,
    wanted: Wanted,
    budget: int,
    *,
    first: bool,
    reading: _Reading,
    read: Callable[..., PartitionAnswer],
) -> tuple[PartitionAnswer, HostedPartition | None]:
    """The records of `wanted` below the high watermark (read_committed: the LSO) of `hosted`."""
    log_ = hosted.log
    partition = wanted.key[1]
    hw = log_.high_watermark
    lso = log_.last_stable_offset
    if not log_.log_start_offset <= wanted.fetch_offset <= log_.end_offset:
        if _follower_catching_up(hosted, wanted, reading):
            return read(records=b""), hosted
        return PartitionAnswer(partition, KafkaError.offset_out_of_range), hosted
    # The partition's and the response's limits both hold; only the first partition with data
    # gets its first batch whatever its size (KIP-74), the others nothing that does not fit.
    limit = max(min(wanted.max_bytes, budget), 0)
    try:
        upper = lso if reading.read_committed else hw
        data = (
            log_.read(wanted.fetch_offset, limit, max_offset=upper, min_one=first)
            if limit > 0 or first
            else b""
        )
        aborted = _aborted(log_, wanted.fetch_offset, data) if reading.read_committed else None
    except OffsetOutOfRangeError:
        return PartitionAnswer(partition, KafkaError.offset_out_of_range), hosted
    except OSError as exc:
        ctx.manager.storage_error(hosted, exc, "reading for a consumer")
        return PartitionAnswer(partition, KafkaError.kafka_storage_error), None
    if hosted.role is not Role.LEADER and data:
        ctx.client_fetch.follower_bytes_served += len(data)
    return read(records=bytes(data), aborted=aborted), hosted


def _preferred_replica(
    ctx: BrokerContext, hosted: HostedPartition, fetch_offset: int, reading: _Reading
) -> int:
    """KIP-392 on the leader with `replica.selector.class` set: the in-sync follower of the
    consumer's rack to read from (`jbod_core.replica_selector`), or -1. Followers never point
    elsewhere, and a follower counts only on a live broker with the client's listener."""
    if (
        ctx.state.config.replica_selector_class is None
        or not reading.client_rack
        or hosted.role is not Role.LEADER
    ):
        return NO_PREFERRED_REPLICA
    image = ctx.state.image
    leader_reg = image.brokers.get(ctx.node_id)
    log_ = hosted.log
    leader = ReplicaView(
        ctx.node_id, None if leader_reg is None else leader_reg.rack, log_.log_start_offset, log_.end_offset
    )
    followers = []
    for broker_id in hosted.isr:
        progress = hosted.followers.get(broker_id)
        reg = image.brokers.get(broker_id)
        if (
            broker_id == ctx.node_id
            or progress is None
            or reg is None
            or reg.fenced
            or ctx.endpoint(reg, reading.listener_name) is None
        ):
            continue
        followers.append(
            ReplicaView(
                broker_id, reg.rack, progress.log_start_offset, progress.end_offset, progress.caught_up_ms()
            )
        )
    return preferred_read_replica(
        client_rack=reading.client_rack, fetch_offset=fetch_offset, leader=leader, followers=followers
    )


def _follower_catching_up(hosted: HostedPartition, wanted: Wanted, reading: _Reading) -> bool:
    """A v11 consumer that gave no leader epoch and fetches past a follower's end gets an empty
    answer, not OFFSET_OUT_OF_RANGE: it may be there on stale metadata (Kafka, KAFKA-14240)."""
    return (
        hosted.role is not Role.LEADER
        and reading.version == FOLLOWER_FETCH_FROM
        and wanted.current_leader_epoch < 0
        and wanted.fetch_offset > hosted.log.end_offset
    )


def _aborted(log_: PartitionLog, fetch_offset: int, data: bytes | memoryview) -> tuple[tuple[int, int], ...]:
    """The aborted transactions a read_committed answer of `data` lists (Kafka's collection over
    the `.txnindex` of the segments read, up to the offset after the last batch returned)."""
    headers = list(record_batch.iter_headers(data, verify_crc=False)) if data else []
    if not headers:
        return ()
    upper = headers[-1].next_offset
    return tuple((a.producer_id, a.first_offset) for a in log_.aborted_transactions(fetch_offset, upper))


def _listed(request: protocol.Request) -> tuple[list[Wanted], list[SessionKey], bool]:
    """The partitions a Fetch lists and forgets, keyed by the topic as the client names it."""
    by_id = request.header.api_version >= 13
    body = request.body
    listed = [
        Wanted(
            (topic.topic_id if by_id else topic.topic, int(part.partition)),
            int(part.fetch_offset),
            int(getattr(part, "current_leader_epoch", -1)),
            int(getattr(part, "last_fetched_epoch", -1)),
            int(part.partition_max_bytes),
        )
        for topic in body.topics
        for part in topic.partitions
    ]
    forgotten = [
        (topic.topic_id if by_id else topic.topic, int(index))
        for topic in getattr(body, "forgotten_topics_data", None) or ()
        for index in topic.partitions
    ]
    return listed, forgotten, by_id


def _read_all(
    ctx: BrokerContext,
    wanted: list[Wanted],
    max_bytes: int,
    *,
    reading: _Reading,
    readable: Callable[[str], bool],
) -> tuple[list[PartitionAnswer], int, list[HostedPartition]]:
    answers: list[PartitionAnswer] = []
    hosted_parts: list[HostedPartition] = []
    total = 0
    for item in wanted:
        topic = _topic_name(ctx, item, by_id=reading.by_id)
        if topic is not None and not readable(topic):
            answers.append(PartitionAnswer.refusal(item.key[1], KafkaError.topic_authorization_failed))
            continue
        answer, hosted = _read_partition(ctx, item, max_bytes - total, first=total == 0, reading=reading)
        total += len(answer.records)
        answers.append(answer)
        if hosted is not None:
            hosted_parts.append(hosted)
    return answers, total, hosted_parts


async def _replica_fetch(ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
    """A follower's Fetch (the module's guarantees)."""
    version = request.header.api_version
    fetch, names = replica_wire.replica_fetch_of(request.body, version, topic_id=ctx.topic_id)
    if not ctx.allows(conn, AclOperation.CLUSTER_ACTION):
        _refused_replicas.warning(
            "Refused a replica fetch as broker %d from %s (%s): CLUSTER_ACTION is not allowed",
            fetch.replica_id,
            conn.peer,
            conn.principal,
        )
        answer = ReplicaFetchAnswer(
            int(ErrorCode.NONE),
            0,
            tuple(
                ReplicaPartitionAnswer(p.key, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in fetch.partitions
            ),
        )
    else:
        answer = await ctx.replica_fetch.serve(fetch)
    return replica_wire.response_of(answer, version, names, correlation_id=request.header.correlation_id)


async def _transactions_loaded(ctx: BrokerContext, wanted: Sequence[Wanted], *, by_id: bool) -> None:
    """The producer state of each hosted partition fetched, loaded off the event loop first (the
    LSO a fetch answers needs it: `PartitionLog.load_transactions_off_loop`)."""
    loads = []
    for item in wanted:
        topic = _topic_name(ctx, item, by_id=by_id)
        hosted = None if topic is None else ctx.manager.lookup(topic, item.key[1], any_replica=True)[0]
        if hosted is not None and not hosted.log.transactions_loaded:
            loads.append(hosted.log.load_transactions_off_loop())
    if loads:
        await asyncio.gather(*loads)


async def fetch(ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
    body = request.body
    if replica_wire.replica_id_of(body, request.header.api_version) >= 0:
        return await _replica_fetch(ctx, conn, request)
    listed, forgotten, by_id = _listed(request)
    plan = ctx.fetch_sessions.plan(
        conn,
        session_id=int(getattr(body, "session_id", 0)),
        epoch=int(getattr(body, "session_epoch", -1)),
        listed=listed,
        forgotten=forgotten,
        now_ms=monotonic_ms(ctx.clock),
    )
    response_type = protocol.response_type(request.header.api_key, request.header.api_version)
    if plan.error is not None:
        return protocol.build(
            response_type,
            throttle_time=0,
            error_code=int(plan.error),
            session_id=0,
            responses=[],
            node_endpoints=[],
        )
    max_bytes = int(getattr(body, "max_bytes", 0x7FFFFFFF))
    deadline = ctx.clock.monotonic() + body.max_wait.total_seconds()
    allowed: dict[str, bool] = {}

    def readable(topic: str) -> bool:
        if topic not in allowed:
            allowed[topic] = ctx.allows_topic(conn, AclOperation.READ, topic)
        return allowed[topic]

    reading = _Reading(
        by_id=by_id,
        listener_name=conn.listener.name,
        version=request.header.api_version,
        read_committed=int(getattr(body, "isolation_level", 0)) == READ_COMMITTED,
        client_rack=str(getattr(body, "rack_id", "") or ""),
    )
    await _transactions_loaded(ctx, plan.wanted, by_id=by_id)
    while True:
        answers, total, hosted_parts = _read_all(
            ctx, plan.wanted, max_bytes, reading=reading, readable=readable
        )
        remaining = deadline - ctx.clock.monotonic()
        errors = any(a.error_code != KafkaError.none for a in answers)
        redirected = any(a.preferred_read_replica != NO_PREFERRED_REPLICA for a in answers)
        if total >= body.min_bytes or remaining <= 0 or errors or redirected or not hosted_parts:
            break
        await ctx.client_fetch.wait_for_data(hosted_parts, remaining)
    responses: list[tuple[Any, list[PartitionAnswer]]] = []
    for item, answer in zip(plan.wanted, answers, strict=True):
        if not ConsumerSessions.answered(plan, item, answer):
            continue
        if not responses or responses[-1][0] != item.key[0]:
            responses.append((item.key[0], []))
        responses[-1][1].append(answer)
    key = "topic_id" if by_id else "topic"
    if reading.version >= fetch_response.FIRST_VERSION:
        return protocol.EncodedResponse(
            fetch_response.encode(
                reading.version,
                correlation_id=request.header.correlation_id,
                error_code=0,
                session_id=plan.session_id,
                topics=[(topic, [a.to_wire() for a in sent]) for topic, sent in responses],
                node_endpoints=hinted_endpoints(a.current_leader for _topic, sent in responses for a in sent),
            )
        )
    return protocol.build(
        response_type,
        throttle_time=0,
        error_code=KafkaError.none,
        session_id=plan.session_id,
        responses=[{key: topic, "partitions": [a.to_kafka() for a in sent]} for topic, sent in responses],
    )


def _epoch_at(hosted: HostedPartition, offset: int) -> int:
    """The leader epoch of the record at `offset` (of the last record when at the end)."""
    epoch = -1
    for entry_epoch, start in hosted.log.epoch_entries():
        if start > offset:
            break
        epoch = entry_epoch
    return epoch


def _list_offset(hosted: HostedPartition, timestamp: int, *, read_committed: bool) -> tuple[int, int, int]:
    """(timestamp, offset, leader epoch) answering ListOffsets for `timestamp`; under
    read_committed the last stable offset bounds it as the high watermark does otherwise."""
    log_ = hosted.log
    hw = log_.last_stable_offset if read_committed else log_.high_watermark
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, log_.log_start_offset, _epoch_at(hosted, log_.log_start_offset)
    if timestamp == LATEST:
        return -1, hw, _epoch_at(hosted, max(hw - 1, 0)) if hw > 0 else log_.latest_epoch
    found = (
        log_.offset_of_max_timestamp(max_offset=hw)
        if timestamp == MAX_TIMESTAMP
        else log_.offset_for_timestamp(timestamp, max_offset=hw)
        if timestamp >= 0
        else None
    )
    if found is None:
        return -1, -1, -1
    offset, found_timestamp = found
    return found_timestamp, offset, _epoch_at(hosted, offset)


async def list_offsets(ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
    read_committed = int(getattr(request.body, "isolation_level", 0)) == READ_COMMITTED
    topics = []
    for topic in request.body.topics:
        partitions = []
        if not ctx.allows_topic(conn, AclOperation.DESCRIBE, topic.name):
            denied = {"error_code": KafkaError.topic_authorization_failed, "timestamp": -1, "offset": -1}
            partitions = [
                {"partition_index": p.partition_index, **denied, "leader_epoch": -1} for p in topic.partitions
            ]
            topics.append({"name": topic.name, "partitions": partitions})
            continue
        for part in topic.partitions:
            hosted, code = _leader(
                ctx,
                topic.name,
                int(part.partition_index),
                int(getattr(part, "current_leader_epoch", -1)),
                by_id=False,
            )
            answer: dict[str, Any] = {"partition_index": part.partition_index, "error_code": code}
            if hosted is None:
                answer.update(timestamp=-1, offset=-1, leader_epoch=-1)
            else:
                try:
                    found_timestamp, offset, epoch = _list_offset(
                        hosted, int(part.timestamp), read_committed=read_committed
                    )
                except OSError as exc:
                    ctx.manager.storage_error(hosted, exc, "looking up an offset")
                    answer.update(
                        error_code=KafkaError.kafka_storage_error, timestamp=-1, offset=-1, leader_epoch=-1
                    )
                else:
                    answer.update(timestamp=found_timestamp, offset=offset, leader_epoch=epoch)
            partitions.append(answer)
        topics.append({"name": topic.name, "partitions": partitions})
    return protocol.build(
        protocol.response_type(request.header.api_key, request.header.api_version),
        throttle_time=0,
        topics=topics,
    )


async def offset_for_leader_epoch(ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
    topics = []
    for topic in request.body.topics:
        partitions = []
        described = ctx.allows_topic(conn, AclOperation.DESCRIBE, topic.topic)
        for part in topic.partitions:
            hosted, code = _leader(
                ctx, topic.topic, int(part.partition), int(part.current_leader_epoch), by_id=False
            )
            if not described:
                hosted, code = None, KafkaError.topic_authorization_failed
            if hosted is None:
                partitions.append(
                    {"error_code": code, "partition": part.partition, "leader_epoch": -1, "end_offset": -1}
                )
                continue
            epoch, end = hosted.log.epoch_end_offset(int(part.leader_epoch))
            partitions.append(
                {
                    "error_code": KafkaError.none,
                    "partition": part.partition,
                    "leader_epoch": epoch,
                    "end_offset": end,
                }
            )
        topics.append({"topic": topic.topic, "partitions": partitions})
    return protocol.build(
        protocol.response_type(request.header.api_key, request.header.api_version),
        throttle_time=0,
        topics=topics,
    )
