"""Every consumer group's committed offsets, and the log end offsets of the partitions they
committed to: what `kafka-consumer-groups.sh --describe --all-groups` asks a cluster, through this
package's own Kafka protocol client (`kafka_admin`). The operator's consumer lag is made of it
(docs/decisions.md, "The operator asks for consumer lag with its own Kafka client": librdkafka's
admin crashed the operator while group coordinators moved).

Guarantees:
* Metadata once (any bootstrap server), then ListGroups to every broker it lists (a broker lists
  the groups it coordinates), OffsetFetch of those groups to the broker that listed them (one
  request, v8+), and ListOffsets (latest, read_uncommitted: the high watermark) to each
  partition's leader for the partitions some group committed to. Brokers are asked concurrently.
* Nothing wrong is said: a group its broker cannot be asked for (unreachable, an error such as
  NOT_COORDINATOR after its coordinator moved, COORDINATOR_LOAD_IN_PROGRESS) is left out, and so
  is a partition without a committed offset (or with an error), or whose end cannot be had (no
  leader, an unreachable leader, an error). Only Metadata that no bootstrap server gives raises
  (`ClientError`, as `KafkaAdmin` raises it).
* The result is frozen (`GroupOffsets`), group and partition keys as Kafka names them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jbod_client.controller import ClientError
from jbod_client.kafka_admin import (
    LIST_GROUPS,
    OFFSET_FETCH,
    READ_UNCOMMITTED,
    KafkaAdmin,
    latest_offsets,
    partition_leaders,
)

Partition = tuple[str, int]


@dataclass(frozen=True)
class GroupOffsets:
    committed: Mapping[str, Mapping[Partition, int]]  # group → partition → committed offset (≥ 0)
    log_end: Mapping[Partition, int]  # partition → high watermark


async def group_offsets(admin: KafkaAdmin) -> GroupOffsets:
    """Ask the cluster `admin` reaches (the module's guarantees)."""
    brokers, leaders, _refused = await partition_leaders(await admin.any_broker(), None)
    addresses = sorted(set(brokers.values()))
    listed = await asyncio.gather(*(_listed_groups(admin, a) for a in addresses))
    fetched = await asyncio.gather(
        *(
            _committed(admin, address, groups)
            for address, groups in zip(addresses, listed, strict=True)
            if groups
        )
    )
    committed = {group: offsets for part in fetched for group, offsets in part.items()}
    by_leader: dict[str, list[Partition]] = {}
    for partition in sorted({p for offsets in committed.values() for p in offsets}):
        leader = brokers.get(leaders.get(partition, -1))
        if leader is not None:
            by_leader.setdefault(leader, []).append(partition)
    ends = await asyncio.gather(*(_log_ends(admin, address, ps) for address, ps in sorted(by_leader.items())))
    return GroupOffsets(
        committed=committed, log_end={p: offset for part in ends for p, offset in part.items()}
    )


async def _listed_groups(admin: KafkaAdmin, address: str) -> list[str]:
    """The groups the broker at `address` coordinates (none when it cannot say)."""
    try:
        response = await (await admin.connection(address)).request(LIST_GROUPS)
    except ClientError:
        return []
    if int(response.error_code) != 0:
        return []
    return sorted(str(g.group_id) for g in response.groups)


async def _committed(
    admin: KafkaAdmin, address: str, groups: Sequence[str]
) -> dict[str, dict[Partition, int]]:
    """Each group's committed offsets, asked of its coordinator at `address`."""
    try:
        response = await (await admin.connection(address)).request(
            OFFSET_FETCH, groups=[{"group_id": g, "topics": None} for g in groups], require_stable=False
        )
    except ClientError:
        return {}
    return {
        str(group.group_id): {
            (str(t.name), int(p.partition_index)): int(p.committed_offset)
            for t in group.topics
            for p in t.partitions
            if int(p.error_code) == 0 and int(p.committed_offset) >= 0
        }
        for group in response.groups
        if int(group.error_code) == 0
    }


async def _log_ends(admin: KafkaAdmin, address: str, partitions: Sequence[Partition]) -> dict[Partition, int]:
    """The high watermark of each partition the broker at `address` leads."""
    try:
        answers = await latest_offsets(await admin.connection(address), partitions, READ_UNCOMMITTED)
    except ClientError:
        return {}
    return {p: offset for p, (code, offset) in answers.items() if code == 0}
