"""A follower's fetch and its leader's answer, as both sides of replication read them (issue 31).

Followers replicate with Kafka's Fetch (a `replica_id`, topic ids, fetch sessions); these are its
requests and answers once decoded from the wire, or before they are encoded onto it: the leader
(`jbod_agent.replication.replica_fetch`) serves a `ReplicaFetch` and returns a
`ReplicaFetchAnswer`, the follower (`jbod_agent.replication.fetcher`) applies the answer; each
listener's edge (`jbod_agent.replication.replica_wire`) translates them to and from Kafka's
messages.

Guarantees: plain frozen values, no I/O; error codes are `ErrorCode`s (or the session codes of
`jbod_core.fetch_session`), never text; a partition is named by `PartitionKey` (topic id,
partition index), as Kafka's Fetch names it from v13 on.
"""

from __future__ import annotations

from dataclasses import dataclass

from jbod_core.errors import ErrorCode
from jbod_core.fetch_session import FetchPosition
from jbod_core.image import PartitionKey
from jbod_core.replication import DivergingEpoch


@dataclass(frozen=True, slots=True)
class WantedPartition:
    """One partition of a follower's fetch: where it fetches from, and its byte limit."""

    key: PartitionKey
    position: FetchPosition
    max_bytes: int


@dataclass(frozen=True, slots=True)
class ReplicaFetch:
    """A follower's fetch from one leader (Kafka's FetchRequest with a replica id)."""

    replica_id: int
    broker_epoch: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    session_id: int
    session_epoch: int
    partitions: tuple[WantedPartition, ...]
    forgotten: tuple[PartitionKey, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplicaPartitionAnswer:
    """The leader's answer for one partition: an error, a divergence, or the next batches (as
    stored: whole RecordBatch v2 frames) with the leader's high watermark and log start."""

    key: PartitionKey
    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = -1
    log_start_offset: int = -1
    diverging: DivergingEpoch | None = None
    records: bytes | memoryview = b""


@dataclass(frozen=True, slots=True)
class ReplicaFetchAnswer:
    """The leader's answer to a `ReplicaFetch`: a top-level error (the fetch session's 70 / 71,
    or CLUSTER_AUTHORIZATION_FAILED) with no partitions, or the partitions answered."""

    error: int
    session_id: int
    partitions: tuple[ReplicaPartitionAnswer, ...] = ()
