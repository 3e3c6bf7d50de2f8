"""The placement queue: replica → dir assignments waiting to reach the controller (§4.3).

Pure state machine with time as a parameter (Kafka's AssignmentsManager, 3.8.1+ behaviour):

* `enqueue` keeps only the newest placement of a partition (latest wins).
* At most one request is in flight; a batch holds at most `max_batch` (2,250) partitions.
* A batch is due `batch_delay` after the first queued placement (so placements batch up), at
  once when more than `max_batch` are waiting, and after an exponential backoff following a
  failed request.
* `take_batch` drops placements the caller says are no longer valid (the broker no longer hosts
  the replica, the topic is gone) instead of sending them.
* After a failed request or a per-partition error, placements go back to the queue unless a newer
  placement of the same partition arrived meanwhile.
* `size` = queued + in flight: the value of `jbod_queued_replica_to_dir_assignments`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from jbod_core.ids import Uuid
from jbod_core.image import PartitionKey

MAX_BATCH: Final = 2250


@dataclass(slots=True)
class Placement:
    directory: Uuid
    reason: str
    queued_at: float


@dataclass(slots=True)
class AssignmentQueue:
    max_batch: int = MAX_BATCH
    batch_delay: float = 0.1
    backoff_initial: float = 0.1
    backoff_max: float = 10.0
    ready: dict[PartitionKey, Placement] = field(default_factory=dict)
    inflight: dict[PartitionKey, Placement] = field(default_factory=dict)
    failures: int = 0
    _due: float | None = None
    dropped: int = 0
    confirmed: int = 0

    @property
    def size(self) -> int:
        return len(self.ready) + len(self.inflight)

    def enqueue(self, key: PartitionKey, directory: Uuid, *, now: float, reason: str) -> None:
        self.ready[key] = Placement(directory=directory, reason=reason, queued_at=now)
        if self._due is None:
            self._due = now + self.batch_delay

    def pending(self, key: PartitionKey) -> Uuid | None:
        """The dir of the newest queued or in-flight placement of `key`, if any."""
        placement = self.ready.get(key) or self.inflight.get(key)
        return None if placement is None else placement.directory

    def cancel(self, key: PartitionKey) -> None:
        """Forget a queued placement (e.g. the replica was deleted); an in-flight one finishes."""
        self.ready.pop(key, None)
        if not self.ready and (not self.failures or self.inflight):
            # The next placement starts a new batch_delay. (A backoff deadline is kept; once the
            # retry is in flight there is none: the reply sets the next due time.)
            self._due = None

    def next_send_time(self, now: float) -> float | None:
        """When the next request should go out, or None if there is nothing to send."""
        if self.inflight or not self.ready:
            return None
        if self.failures:
            return self._due if self._due is not None else now  # backing off after a failure
        if len(self.ready) > self.max_batch:
            return now
        return self._due if self._due is not None else now

    def take_batch(
        self, *, now: float, is_valid: Callable[[PartitionKey, Uuid], bool]
    ) -> dict[PartitionKey, Placement] | None:
        """The batch to send now (marked in flight), or None if nothing is due."""
        due = self.next_send_time(now)
        if due is None or due > now:
            return None
        batch: dict[PartitionKey, Placement] = {}
        for key in list(self.ready):
            if len(batch) >= self.max_batch:
                break
            placement = self.ready.pop(key)
            if is_valid(key, placement.directory):
                batch[key] = placement
            else:
                self.dropped += 1
        self._due = (now + self.batch_delay) if self.ready else None
        if not batch:
            return None
        self.inflight = batch
        return batch

    def _requeue(self, items: Mapping[PartitionKey, Placement]) -> None:
        for key, placement in items.items():
            self.ready.setdefault(key, placement)

    def on_response(
        self, errors: Mapping[PartitionKey, int], *, now: float
    ) -> list[tuple[PartitionKey, Uuid]]:
        """A reply arrived: returns the confirmed placements; failed or missing ones are requeued."""
        confirmed = []
        retry: dict[PartitionKey, Placement] = {}
        for key, placement in self.inflight.items():
            code = errors.get(key)
            if code == 0:
                confirmed.append((key, placement.directory))
            else:
                retry[key] = placement
        self.inflight = {}
        self.failures = 0
        self.confirmed += len(confirmed)
        self._requeue(retry)
        if self.ready and self._due is None:
            self._due = now + (self.batch_delay if retry else 0.0)
        return confirmed

    def on_failure(self, *, now: float) -> float:
        """The request failed as a whole: requeue it and back off; returns the backoff delay."""
        retry, self.inflight = self.inflight, {}
        self.failures += 1
        self._requeue(retry)
        # The exponent is capped: 2.0 ** 1024 overflows a float after ~3 h of failures at 10 s.
        delay = min(self.backoff_max, self.backoff_initial * 2.0 ** min(self.failures - 1, 64))
        self._due = now + delay
        return delay


class PlacementOutbox:
    """The `PlacementSink` port over the queue: collaborators place replicas, the loop sends them."""

    def __init__(self, queue: AssignmentQueue, now: Callable[[], float], wake: Callable[[], None]) -> None:
        self.queue = queue
        self._now = now
        self._wake = wake

    def place(self, key: PartitionKey, directory: Uuid, *, reason: str) -> None:
        self.queue.enqueue(key, directory, now=self._now(), reason=reason)
        self._wake()

    def pending(self, key: PartitionKey) -> Uuid | None:
        return self.queue.pending(key)

    def cancel(self, key: PartitionKey) -> None:
        self.queue.cancel(key)
