"""Which replica a consumer should read from (KIP-392, follower fetching): the broker-side
`replica.selector.class` of Kafka, as a pure decision of the partition's leader.

Guarantees:
* `RACK_AWARE_SELECTOR` (Kafka's `org.apache.kafka.common.replica.RackAwareReplicaSelector`) is the
  only selector class accepted by name; unset means the leader serves every consumer, as Kafka.
* `preferred_read_replica` follows Kafka's RackAwareReplicaSelector over the replicas Kafka's
  leader offers it: the leader, and the in-sync followers on a live broker that hold the fetch
  offset (their log start at or below it, their end offset at or above it). A client without a
  rack, or whose rack holds the leader, reads from the leader (-1: no preferred replica is sent);
  otherwise the replica of its rack with the largest end offset (ties: the one caught up most
  recently, then the lowest id) is preferred; no replica in its rack: the leader.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

RACK_AWARE_SELECTOR: Final = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
NO_PREFERRED_REPLICA: Final = -1


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """What the leader knows of one replica of a partition."""

    broker_id: int
    rack: str | None
    log_start_offset: int
    end_offset: int
    last_caught_up_ms: float = 0.0


def selector_error(value: str) -> str | None:
    """Why `value` cannot be `replica.selector.class`, or None."""
    if value.strip() == RACK_AWARE_SELECTOR:
        return None
    return f"replica.selector.class: only {RACK_AWARE_SELECTOR} is supported, not '{value.strip()}'"


def preferred_read_replica(
    *, client_rack: str, fetch_offset: int, leader: ReplicaView, followers: Sequence[ReplicaView]
) -> int:
    """The broker a consumer in `client_rack` should fetch from, or -1 for the leader.
    `followers` are the in-sync followers on live brokers (the caller's filter)."""
    if not client_rack or leader.rack == client_rack:
        return NO_PREFERRED_REPLICA
    candidates = [
        f for f in followers if f.rack == client_rack and f.log_start_offset <= fetch_offset <= f.end_offset
    ]
    if not candidates:
        return NO_PREFERRED_REPLICA
    best = max(candidates, key=lambda f: (f.end_offset, f.last_caught_up_ms, -f.broker_id))
    return best.broker_id
