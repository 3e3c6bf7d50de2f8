"""Open transactions per partition, read over Kafka's protocol (`jbodctl transactions`): what
each partition's leader says about its last stable offset (LSO) and the transactions holding it
back, as Kafka's `kafka-transactions.sh find-hanging` reads them.

Guarantees:
* `open_transactions(admin, topics)` asks one bootstrap server for the partitions and their leaders
  (Metadata: the topics named, else every topic, internal ones included), then every leader at
  once for its partitions' high watermark (ListOffsets latest, read_uncommitted), last stable
  offset (ListOffsets latest, read_committed) and producers (DescribeProducers); one
  `PartitionTransactions` per partition, sorted by topic and partition.
* A partition that has no leader, whose leader cannot be reached or that answers an error
  carries that error (Kafka's code, or a one-line reason for an unreachable leader) and no
  offsets; the other partitions are complete. A topic Metadata does not know is
  UNKNOWN_TOPIC_OR_PARTITION for partition -1.
* `open` lists only the producers with a transaction in progress on the partition
  (DescribeProducers' `current_txn_start_offset` >= 0), oldest first; `lso_lag` is the high
  watermark minus the LSO (0 when nothing is open; the records a read_committed consumer cannot
  read yet).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode as KafkaErrorCode

from jbod_client.controller import ClientError
from jbod_client.kafka_admin import (
    DESCRIBE_PRODUCERS,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    KafkaAdmin,
    KafkaConnection,
    by_topic,
    latest_offsets,
    partition_leaders,
)

NO_LEADER: Final = -1


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A producer's transaction in progress on one partition (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int  # its first offset on the partition
    last_timestamp_ms: int  # of its last batch (-1 when unknown)


@dataclass(frozen=True, slots=True)
class PartitionTransactions:
    """One partition's LSO and the transactions holding it back, or why it could not be read."""

    topic: str
    partition: int
    leader: int
    high_watermark: int | None = None
    last_stable_offset: int | None = None
    open: tuple[OpenTransaction, ...] = ()
    error_code: int = 0
    error: str | None = None  # a one-line reason when the leader could not be asked

    @property
    def lso_lag(self) -> int | None:
        if self.high_watermark is None or self.last_stable_offset is None:
            return None
        return max(0, self.high_watermark - self.last_stable_offset)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "leader": self.leader,
            "highWatermark": self.high_watermark,
            "lastStableOffset": self.last_stable_offset,
            "lsoLag": self.lso_lag,
            "openTransactions": [
                {
                    "producerId": t.producer_id,
                    "producerEpoch": t.producer_epoch,
                    "coordinatorEpoch": t.coordinator_epoch,
                    "startOffset": t.start_offset,
                    "lastTimestampMs": t.last_timestamp_ms,
                }
                for t in self.open
            ],
            "errorCode": self.error_code,
            "error": self.error,
        }


Partition = tuple[str, int]


def _refused(refused: Mapping[str, int]) -> list[PartitionTransactions]:
    """A topic Metadata refused: its error for partition -1."""
    return [PartitionTransactions(topic, -1, NO_LEADER, error_code=code) for topic, code in refused.items()]


async def _producers(
    connection: KafkaConnection, partitions: Sequence[Partition]
) -> dict[Partition, tuple[int, tuple[OpenTransaction, ...]]]:
    response = await connection.request(
        DESCRIBE_PRODUCERS,
        topics=[{"name": t, "partition_indexes": ps} for t, ps in by_topic(partitions).items()],
    )
    out: dict[Partition, tuple[int, tuple[OpenTransaction, ...]]] = {}
    for t in response.topics:
        for p in t.partitions:
            open_txns = sorted(
                (
                    OpenTransaction(
                        producer_id=int(s.producer_id),
                        producer_epoch=int(s.producer_epoch),
                        coordinator_epoch=int(s.coordinator_epoch),
                        start_offset=int(s.current_txn_start_offset),
                        last_timestamp_ms=int(s.last_timestamp),
                    )
                    for s in p.active_producers
                    if int(s.current_txn_start_offset) >= 0
                ),
                key=lambda o: (o.start_offset, o.producer_id),
            )
            out[(str(t.name), int(p.partition_index))] = (int(p.error_code), tuple(open_txns))
    return out


async def _ask_leader(
    admin: KafkaAdmin, leader: int, address: str, partitions: Sequence[Partition]
) -> list[PartitionTransactions]:
    try:
        connection = await admin.connection(address)
        ends, stable, producers = await asyncio.gather(
            latest_offsets(connection, partitions, READ_UNCOMMITTED),
            latest_offsets(connection, partitions, READ_COMMITTED),
            _producers(connection, partitions),
        )
    except ClientError as exc:
        return [PartitionTransactions(t, i, leader, error=str(exc)) for t, i in partitions]
    missing = (int(KafkaErrorCode.unknown_server_error), -1)
    found = []
    for name in partitions:
        end_code, end = ends.get(name, missing)
        stable_code, lso = stable.get(name, missing)
        producers_code, open_txns = producers.get(name, (missing[0], ()))
        code = end_code or stable_code or producers_code
        if code != 0:
            found.append(PartitionTransactions(*name, leader, error_code=code))
        else:
            found.append(
                PartitionTransactions(
                    *name, leader, high_watermark=end, last_stable_offset=lso, open=open_txns
                )
            )
    return found


async def open_transactions(
    admin: KafkaAdmin, topics: Sequence[str] | None = None
) -> list[PartitionTransactions]:
    """Every partition of `topics` (all when None) with its LSO and open transactions (the
    module's guarantees)."""
    brokers, leaders, refused = await partition_leaders(await admin.any_broker(), topics)
    found = _refused(refused)
    by_leader: dict[int, list[Partition]] = {}
    for name, leader in leaders.items():
        if leader == NO_LEADER or leader not in brokers:
            found.append(
                PartitionTransactions(*name, leader, error_code=int(KafkaErrorCode.leader_not_available))
            )
        else:
            by_leader.setdefault(leader, []).append(name)
    answers = await asyncio.gather(
        *(_ask_leader(admin, leader, brokers[leader], names) for leader, names in by_leader.items())
    )
    for answer in answers:
        found.extend(answer)
    return sorted(found, key=lambda p: (p.topic, p.partition))
