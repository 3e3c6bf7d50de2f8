"""Leader-epoch divergence on real partition logs: the leader's check and the follower's cut.

The pure rules are `jbod_core.replication.diverging_epoch` (leader side) and
`truncation_offset` (follower side); this module applies them to a `PartitionLog`, and is the
one place the replica manager (answering a follower's fetch) and the fetcher (handling the
answer) do so.

Guarantees:
* `leader_check(log, fetch_offset=..., last_fetched_epoch=...)` is None when a follower that
  fetches from `fetch_offset` after a record of `last_fetched_epoch` holds a prefix of `log`'s
  history, else the epoch and end offset the follower must truncate against.
* `truncate_follower(log, diverging)` cuts the follower's `log` to the offset the rule gives,
  never below its log start nor above its end, and returns that offset. It truncates even when
  nothing is cut, so that epochs starting at or after the offset go too (an epoch this broker
  recorded as leader but never wrote in), or the next fetch would diverge again. Repeated
  fetch-check-truncate rounds leave the follower's log a prefix of the leader's.
"""

from __future__ import annotations

from jbod_agent.storage.partition_log import PartitionLog
from jbod_core.replication import DivergingEpoch, diverging_epoch, truncation_offset


def leader_check(log: PartitionLog, *, fetch_offset: int, last_fetched_epoch: int) -> DivergingEpoch | None:
    """Where the follower diverges from `log` (the leader's), or None (the module's guarantee)."""
    return diverging_epoch(fetch_offset, last_fetched_epoch, log.epoch_end_offset)


def truncate_follower(log: PartitionLog, diverging: DivergingEpoch) -> int:
    """Cut the follower's `log` after the leader reported `diverging`; the offset it now ends at."""
    target = truncation_offset(
        diverging,
        log.epoch_end_offset,
        local_end_offset=log.end_offset,
        high_watermark=log.high_watermark,
    )
    target = min(max(target, log.log_start_offset), log.end_offset)
    log.truncate_to(target)
    return target
