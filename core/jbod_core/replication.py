"""Pure decisions of partition replication (the leader's and the follower's side, as in Kafka).

Guarantees (no I/O, no clocks: callers pass `now_ms`):
* `high_watermark` is the smallest log end offset among the members of the maximal ISR (the
  committed ISR plus members whose addition is in flight), never below the current value and
  never above the leader's own end offset. An ISR member whose end offset is unknown holds the
  high watermark where it is.
* `FollowerProgress.on_fetch` keeps Kafka's "last caught up" rule: a fetch at or beyond the
  leader's end offset proves the follower caught up now; a fetch at or beyond the end offset of
  the previous fetch proves it was caught up then.
* Incremental fetch sessions (KIP-227, `jbod_core.fetch_session`): a partition left out of a
  session request was fetched again at the same offset. A caught-up partition is attached to its
  session's `SessionClock`, so every later request of that session counts as a caught-up fetch
  (`caught_up_ms`) without touching the partition — valid because the leader re-checks (and so
  detaches) a partition whenever its end offset moves, before the clock advances.
* `low_watermark` (DeleteRecords, Kafka's `lowWatermarkIfLeader`) is the smallest log start
  offset among the leader and the members of the maximal ISR, as each follower last reported it
  in a fetch (`FollowerProgress.log_start_offset`); a member that has not reported one yet
  makes it `UNKNOWN_OFFSET`.
* `isr_to_shrink` names ISR followers that have not caught up for longer than
  `replica.lag.time.max.ms`; `isr_to_expand` names eligible replicas outside the ISR that have
  reached the high watermark and the leader's current epoch.
* `diverging_epoch` (leader side) and `truncation_offset` (follower side) implement the fetch
  protocol's divergence check with leader epochs (KIP-320 / KIP-595): a follower never keeps a
  suffix that the leader's history does not contain.
* `produce_admission` answers NOT_ENOUGH_REPLICAS (19) for acks=-1 when the ISR is smaller than
  `min.insync.replicas`; acks 0 and 1 are never refused for ISR size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from jbod_core.errors import ErrorCode

UNKNOWN_OFFSET = -1


@dataclass(eq=False, slots=True)
class SessionClock:
    """The time of the latest request of one incremental fetch session (leader side).

    The leader advances it once per request, after it has re-checked every session partition
    whose state moved; partitions attached to it were caught up and unchanged since.
    """

    last_fetch_ms: float = 0.0


@dataclass(slots=True)
class FollowerProgress:
    """What a leader knows of one follower of one partition."""

    end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: float = 0.0
    last_fetch_ms: float = 0.0
    leader_end_at_last_fetch: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET  # the follower's own, as its latest fetch said
    # Set while the follower is caught up and idle in an incremental session: each request of
    # that session is a caught-up fetch of this partition (Kafka's session semantics).
    idle_in: SessionClock | None = None

    def caught_up_ms(self) -> float:
        """When the follower was last known caught up, counting idle session requests."""
        if self.idle_in is None:
            return self.last_caught_up_ms
        return max(self.last_caught_up_ms, self.idle_in.last_fetch_ms)

    def on_fetch(
        self,
        fetch_offset: int,
        leader_end_offset: int,
        now_ms: float,
        *,
        log_start_offset: int = UNKNOWN_OFFSET,
        session: SessionClock | None = None,
    ) -> None:
        """A fetch at `fetch_offset` by a follower whose log starts at `log_start_offset`;
        `session`: the incremental session it came through, if any.

        Call it before advancing `session` to `now_ms`: the session's previous request time is
        the last fetch an idle attached partition took part in.
        """
        self.detach()  # count the session's requests since the last explicit fetch first
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
            self.idle_in = session
        elif fetch_offset >= self.leader_end_at_last_fetch >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_ms = now_ms
        self.leader_end_at_last_fetch = leader_end_offset

    def detach(self) -> None:
        """Stop counting the session's requests (the partition is looked at again, was forgotten,
        or was answered with an error), keeping the ones counted so far."""
        if self.idle_in is not None:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.idle_in.last_fetch_ms)
            self.last_fetch_ms = max(self.last_fetch_ms, self.idle_in.last_fetch_ms)
            self.idle_in = None


def low_watermark(
    leader_id: int,
    leader_log_start: int,
    maximal_isr: Iterable[int],
    followers: Mapping[int, FollowerProgress],
) -> int:
    """The smallest log start offset among the leader and the other maximal ISR members."""
    lowest = leader_log_start
    for member in maximal_isr:
        if member == leader_id:
            continue
        progress = followers.get(member)
        lowest = min(lowest, UNKNOWN_OFFSET if progress is None else progress.log_start_offset)
    return lowest


def high_watermark(
    current: int,
    leader_id: int,
    leader_end_offset: int,
    maximal_isr: Iterable[int],
    followers: Mapping[int, FollowerProgress],
) -> int:
    lowest = leader_end_offset
    for member in maximal_isr:
        if member == leader_id:
            continue
        progress = followers.get(member)
        if progress is None or progress.end_offset == UNKNOWN_OFFSET:
            return current
        lowest = min(lowest, progress.end_offset)
    return max(current, min(lowest, leader_end_offset))


def isr_to_shrink(
    isr: Iterable[int],
    leader_id: int,
    followers: Mapping[int, FollowerProgress],
    *,
    now_ms: float,
    lag_time_max_ms: int,
) -> set[int]:
    """ISR followers that have not been caught up for longer than the allowed lag."""
    out: set[int] = set()
    for member in isr:
        if member == leader_id:
            continue
        progress = followers.get(member)
        if progress is None or now_ms - progress.caught_up_ms() > lag_time_max_ms:
            out.add(member)
    return out


def isr_to_expand(  # noqa: PLR0913  Kafka's ISR expansion inputs: replicas, ISR, progress, HW, epoch start, eligibility
    replicas: Iterable[int],
    isr: Iterable[int],
    followers: Mapping[int, FollowerProgress],
    *,
    high_watermark: int,
    leader_epoch_start_offset: int,
    eligible: Callable[[int], bool],
) -> set[int]:
    """Replicas outside the ISR that have every committed record and the current epoch's start."""
    members = set(isr)
    out: set[int] = set()
    for replica in replicas:
        if replica in members:
            continue
        progress = followers.get(replica)
        if progress is None or progress.end_offset == UNKNOWN_OFFSET:
            continue
        if (
            progress.end_offset >= high_watermark
            and progress.end_offset >= leader_epoch_start_offset
            and eligible(replica)
        ):
            out.add(replica)
    return out


@dataclass(frozen=True, slots=True)
class DivergingEpoch:
    epoch: int
    end_offset: int


def diverging_epoch(
    fetch_offset: int,
    last_fetched_epoch: int,
    epoch_end_offset: Callable[[int], tuple[int, int]],
) -> DivergingEpoch | None:
    """Leader side: None when the follower's log is a prefix of ours, else where ours ends.

    `epoch_end_offset(e)` is the leader's answer to OffsetsForLeaderEpoch: (largest epoch <= e
    in its history, where that epoch ends).
    """
    if last_fetched_epoch < 0:
        return None
    epoch, end = epoch_end_offset(last_fetched_epoch)
    if epoch != last_fetched_epoch or end < fetch_offset:
        return DivergingEpoch(epoch, end)
    return None


def truncation_offset(
    diverging: DivergingEpoch,
    local_epoch_end_offset: Callable[[int], tuple[int, int]],
    *,
    local_end_offset: int,
    high_watermark: int,
) -> int:
    """Follower side: where to cut its log after the leader reported a divergence.

    Same epoch on both sides → the smaller end; the follower has no such epoch → its own end of
    the largest epoch below (the next fetch narrows it further); neither knows an epoch → the
    high watermark (everything below it is committed on both).
    """
    if diverging.epoch < 0:
        return min(high_watermark, local_end_offset)
    local_epoch, local_end = local_epoch_end_offset(diverging.epoch)
    if local_epoch < 0:
        return min(high_watermark, local_end_offset)
    if local_epoch == diverging.epoch:
        return min(diverging.end_offset, local_end, local_end_offset)
    return min(local_end, local_end_offset)


def produce_admission(acks: int, isr_size: int, min_insync_replicas: int) -> ErrorCode:
    if acks == -1 and isr_size < min_insync_replicas:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return ErrorCode.NONE
