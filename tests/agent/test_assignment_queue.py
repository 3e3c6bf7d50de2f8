"""The placement queue (`jbod_agent.lifecycle.assignment_queue`) with fake time (plain floats).

Covers: the newest placement of a partition wins; batches hold at most 2,250 partitions; a backlog
above 2,250 goes at once, anything smaller after `batch_delay` (also when a queue emptied by
`cancel` fills again); one request in flight; responses confirm 0s and requeue per-partition errors
and missing partitions unless a newer placement arrived; failures requeue with exponential backoff
(0.1, 0.2, 0.4 … capped at `backoff_max`, also after thousands of failures) reset by a success;
invalid placements are dropped and counted; and a hypothesis state machine that checks the queue
against a model of those rules (contents, timing, batch size, size = queued + in flight) after
every step.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from jbod_agent.lifecycle.assignment_queue import MAX_BATCH, AssignmentQueue, Placement
from jbod_core.ids import Uuid
from jbod_core.image import PartitionKey

TOPIC = Uuid(0x7091C, 0x1D)
D1, D2, D3 = Uuid(1, 1), Uuid(2, 2), Uuid(3, 3)


def key(partition: int) -> PartitionKey:
    return (TOPIC, partition)


def valid(_key: PartitionKey, _directory: Uuid) -> bool:
    return True


def dirs_of(batch: dict[PartitionKey, Placement] | None) -> dict[PartitionKey, Uuid]:
    assert batch is not None
    return {k: p.directory for k, p in batch.items()}


def test_defaults_follow_kafka() -> None:
    queue = AssignmentQueue()
    assert (queue.max_batch, queue.batch_delay, queue.backoff_initial, queue.backoff_max) == (
        MAX_BATCH,
        0.1,
        0.1,
        10.0,
    )
    assert MAX_BATCH == 2250
    assert queue.size == 0
    assert queue.next_send_time(0.0) is None
    assert queue.take_batch(now=0.0, is_valid=valid) is None


def test_latest_placement_wins() -> None:
    queue = AssignmentQueue()
    queue.enqueue(key(0), D1, now=0.0, reason="first")
    queue.enqueue(key(1), D1, now=0.01, reason="other")
    queue.enqueue(key(0), D2, now=0.02, reason="second")
    assert queue.size == 2
    batch = queue.take_batch(now=1.0, is_valid=valid)
    assert dirs_of(batch) == {key(0): D2, key(1): D1}
    assert batch is not None and batch[key(0)].reason == "second"


def test_batch_waits_for_batch_delay_after_the_first_placement() -> None:
    queue = AssignmentQueue()
    queue.enqueue(key(0), D1, now=10.0, reason="r")
    queue.enqueue(key(1), D1, now=10.05, reason="r")
    assert queue.next_send_time(10.05) == pytest.approx(10.1)
    assert queue.take_batch(now=10.09, is_valid=valid) is None
    assert dirs_of(queue.take_batch(now=10.1, is_valid=valid)) == {key(0): D1, key(1): D1}


def test_a_queue_emptied_by_cancel_starts_a_fresh_delay() -> None:
    queue = AssignmentQueue()
    queue.enqueue(key(0), D1, now=0.0, reason="r")
    queue.cancel(key(0))
    assert queue.size == 0
    assert queue.next_send_time(0.5) is None
    queue.enqueue(key(1), D1, now=5.0, reason="r")
    assert queue.take_batch(now=5.0, is_valid=valid) is None
    assert queue.next_send_time(5.0) == pytest.approx(5.1)
    assert dirs_of(queue.take_batch(now=5.1, is_valid=valid)) == {key(1): D1}


def test_exactly_max_batch_waits_and_more_goes_at_once() -> None:
    queue = AssignmentQueue()
    for p in range(MAX_BATCH):
        queue.enqueue(key(p), D1, now=0.0, reason="r")
    assert queue.take_batch(now=0.0, is_valid=valid) is None
    queue.enqueue(key(MAX_BATCH), D1, now=0.0, reason="r")
    assert queue.next_send_time(0.0) == 0.0
    batch = queue.take_batch(now=0.0, is_valid=valid)
    assert batch is not None and len(batch) == MAX_BATCH
    assert list(batch) == [key(p) for p in range(MAX_BATCH)]  # oldest first
    assert list(queue.ready) == [key(MAX_BATCH)]
    assert queue.size == MAX_BATCH + 1
    assert queue.on_response(dict.fromkeys(batch, 0), now=0.01) == [(k, D1) for k in batch]
    assert queue.size == 1
    assert dirs_of(queue.take_batch(now=0.2, is_valid=valid)) == {key(MAX_BATCH): D1}


def test_a_big_backlog_drains_in_max_batch_requests() -> None:
    queue = AssignmentQueue(max_batch=4)
    for p in range(10):
        queue.enqueue(key(p), D1, now=0.0, reason="r")
    sizes = []
    now = 0.0
    while queue.size:
        due = queue.next_send_time(now)
        assert due is not None
        now = max(now, due)
        batch = queue.take_batch(now=now, is_valid=valid)
        assert batch is not None
        sizes.append(len(batch))
        queue.on_response(dict.fromkeys(batch, 0), now=now)
    assert sizes == [4, 4, 2]
    assert queue.confirmed == 10


def test_one_request_in_flight() -> None:
    queue = AssignmentQueue()
    queue.enqueue(key(0), D1, now=0.0, reason="r")
    assert queue.take_batch(now=0.1, is_valid=valid) is not None
    for p in range(1, MAX_BATCH + 10):  # even a backlog waits for the reply
        queue.enqueue(key(p), D1, now=0.2, reason="r")
    assert queue.next_send_time(5.0) is None
    assert queue.take_batch(now=5.0, is_valid=valid) is None
    assert queue.size == MAX_BATCH + 10
    queue.on_response({key(0): 0}, now=5.0)
    assert queue.take_batch(now=5.0, is_valid=valid) is not None


def test_on_response_confirms_and_requeues() -> None:
    queue = AssignmentQueue()
    for p in range(4):
        queue.enqueue(key(p), D1, now=0.0, reason="r")
    queue.take_batch(now=0.1, is_valid=valid)
    # Partition 0 ok, 1 an error, 2 NOT_LEADER_OR_FOLLOWER, 3 missing from the reply.
    confirmed = queue.on_response({key(0): 0, key(1): 56, key(2): 6}, now=0.2)
    assert confirmed == [(key(0), D1)]
    assert queue.confirmed == 1
    assert queue.inflight == {}
    assert set(queue.ready) == {key(1), key(2), key(3)}
    assert queue.size == 3
    assert queue.failures == 0
    # Retried after batch_delay.
    assert queue.take_batch(now=0.29, is_valid=valid) is None
    assert set(dirs_of(queue.take_batch(now=0.31, is_valid=valid))) == {key(1), key(2), key(3)}


def test_a_newer_placement_is_not_overwritten_by_a_retry() -> None:
    queue = AssignmentQueue()
    queue.enqueue(key(0), D1, now=0.0, reason="old")
    queue.enqueue(key(1), D1, now=0.0, reason="old")
    queue.take_batch(now=0.1, is_valid=valid)
    queue.enqueue(key(0), D2, now=0.15, reason="new")
    queue.enqueue(key(1), D3, now=0.15, reason="new")
    assert queue.size == 4  # in flight and queued both count
    # Partition 0 failed, partition 1 succeeded: both keep their newer placement queued.
    assert queue.on_response({key(0): 56, key(1): 0}, now=0.2) == [(key(1), D1)]
    assert {k: (p.directory, p.reason) for k, p in queue.ready.items()} == {
        key(0): (D2, "new"),
        key(1): (D3, "new"),
    }


def test_a_newer_placement_survives_a_failed_request() -> None:
    queue = AssignmentQueue()
    queue.enqueue(key(0), D1, now=0.0, reason="old")
    queue.enqueue(key(1), D1, now=0.0, reason="old")
    queue.take_batch(now=0.1, is_valid=valid)
    queue.enqueue(key(0), D2, now=0.15, reason="new")
    queue.on_failure(now=0.2)
    assert dirs_of(dict(queue.ready)) == {key(0): D2, key(1): D1}
    assert queue.size == 2


def test_backoff_doubles_up_to_the_cap_and_resets_after_success() -> None:
    queue = AssignmentQueue(backoff_max=1.0)
    queue.enqueue(key(0), D1, now=0.0, reason="r")
    now = 0.1
    delays = []
    for _ in range(7):
        assert queue.take_batch(now=now, is_valid=valid) is not None
        delay = queue.on_failure(now=now)
        delays.append(delay)
        assert queue.size == 1
        assert queue.next_send_time(now) == pytest.approx(now + delay)
        assert queue.take_batch(now=now + delay * 0.99, is_valid=valid) is None
        now += delay
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])
    queue.take_batch(now=now, is_valid=valid)
    assert queue.on_response({key(0): 0}, now=now) == [(key(0), D1)]
    assert queue.failures == 0
    queue.enqueue(key(1), D1, now=now, reason="r")
    assert queue.take_batch(now=now + 0.1, is_valid=valid) is not None
    assert queue.on_failure(now=now + 0.1) == pytest.approx(0.1)


def test_default_backoff_cap_and_thousands_of_failures() -> None:
    queue = AssignmentQueue()
    queue.enqueue(key(0), D1, now=0.0, reason="r")
    now = 0.0
    delays = []
    for _ in range(3000):  # ~8 hours of an unreachable controller at the 10 s cap
        now = queue.next_send_time(now) or now
        assert queue.take_batch(now=now, is_valid=valid) is not None
        delays.append(queue.on_failure(now=now))
    assert delays[:8] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0])
    assert set(delays[7:]) == {10.0}


def test_backoff_holds_back_a_backlog_too() -> None:
    queue = AssignmentQueue(max_batch=2)
    queue.enqueue(key(0), D1, now=0.0, reason="r")
    queue.take_batch(now=0.1, is_valid=valid)
    assert queue.on_failure(now=0.1) == pytest.approx(0.1)
    for p in range(1, 6):
        queue.enqueue(key(p), D1, now=0.12, reason="r")
    assert queue.take_batch(now=0.15, is_valid=valid) is None
    assert queue.take_batch(now=0.2, is_valid=valid) is not None


def test_invalid_placements_are_dropped_and_counted() -> None:
    queue = AssignmentQueue(max_batch=3)
    for p in range(8):
        queue.enqueue(key(p), D1, now=0.0, reason="r")
    seen: list[tuple[PartitionKey, Uuid]] = []

    def odd_only(k: PartitionKey, directory: Uuid) -> bool:
        seen.append((k, directory))
        return k[1] % 2 == 1

    batch = queue.take_batch(now=1.0, is_valid=odd_only)
    assert list(dirs_of(batch)) == [key(1), key(3), key(5)]  # dropped ones do not fill the batch
    assert queue.dropped == 3  # partitions 0, 2, 4
    assert list(queue.ready) == [key(6), key(7)]
    assert queue.size == 5
    assert seen[0] == (key(0), D1)


def test_a_batch_of_only_invalid_placements_sends_nothing() -> None:
    queue = AssignmentQueue()
    queue.enqueue(key(0), D1, now=0.0, reason="r")
    queue.enqueue(key(1), D1, now=0.0, reason="r")
    assert queue.take_batch(now=1.0, is_valid=lambda k, d: False) is None
    assert (queue.size, queue.dropped, queue.inflight) == (0, 2, {})
    assert queue.next_send_time(1.0) is None


def test_cancel_forgets_a_queued_placement_but_not_an_in_flight_one() -> None:
    queue = AssignmentQueue()
    queue.enqueue(key(0), D1, now=0.0, reason="r")
    queue.take_batch(now=0.1, is_valid=valid)
    queue.enqueue(key(0), D2, now=0.15, reason="r")
    queue.cancel(key(0))
    queue.cancel(key(9))  # unknown: no-op
    assert queue.ready == {}
    assert queue.size == 1
    assert queue.on_response({key(0): 0}, now=0.2) == [(key(0), D1)]
    assert queue.size == 0


# -- model-based state machine -------------------------------------------------------------------

KEYS = [key(p) for p in range(6)]
DIRS = [D1, D2, D3]


class QueueMachine(RuleBasedStateMachine):
    """Drives the queue with random steps and compares it with a model of the docstring's rules."""

    def __init__(self) -> None:
        super().__init__()
        self.queue = AssignmentQueue(max_batch=3, batch_delay=0.1, backoff_initial=0.1, backoff_max=0.8)
        self.now = 0.0
        self.seq = 0
        self.ready: dict[PartitionKey, str] = {}  # key -> reason (a unique sequence number)
        self.inflight: dict[PartitionKey, str] = {}
        self.failures = 0
        self.backoff_until = 0.0
        self.batch_start: float | None = None  # when the current batch_delay started
        self.dropped = 0
        self.confirmed = 0

    @rule(k=st.sampled_from(KEYS), directory=st.sampled_from(DIRS))
    def enqueue(self, k: PartitionKey, directory: Uuid) -> None:
        self.seq += 1
        reason = f"s{self.seq}"
        if not self.ready and self.batch_start is None:
            self.batch_start = self.now
        self.queue.enqueue(k, directory, now=self.now, reason=reason)
        self.ready[k] = reason  # newest wins (keeping the partition's place in the queue)

    @rule(k=st.sampled_from(KEYS))
    def cancel(self, k: PartitionKey) -> None:
        self.queue.cancel(k)
        self.ready.pop(k, None)
        if not self.ready:
            self.batch_start = None

    @rule(dt=st.sampled_from([0.0, 0.01, 0.05, 0.1, 0.3, 1.0]))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(drop=st.sets(st.sampled_from(KEYS)))
    def take(self, drop: set[PartitionKey]) -> None:
        due = self.queue.next_send_time(self.now)
        batch = self.queue.take_batch(now=self.now, is_valid=lambda k, d: k not in drop)
        if self.inflight or not self.ready:
            assert due is None
            assert batch is None
            return
        assert due is not None
        if self.failures:
            may_send = self.now >= self.backoff_until - 1e-9
        elif len(self.ready) > self.queue.max_batch:
            may_send = True
        else:
            # Due batch_delay after the first placement queued since the last send (or reply).
            assert self.batch_start is not None
            may_send = self.now >= self.batch_start + 0.1 - 1e-9
            assert due >= self.batch_start + 0.1 - 1e-9
        if not may_send:
            assert batch is None
            assert due > self.now
            return
        if due > self.now:  # the queue may wait longer than the model's bound, but not forever
            assert batch is None
            assert due <= self.now + max(self.queue.batch_delay, self.queue.backoff_max) + 1e-9
            return
        # Model: take the oldest up to max_batch valid ones, dropping invalid ones on the way.
        expected: dict[PartitionKey, str] = {}
        for k in list(self.ready):
            if len(expected) >= self.queue.max_batch:
                break
            reason = self.ready.pop(k)
            if k in drop:
                self.dropped += 1
            else:
                expected[k] = reason
        self.batch_start = self.now if self.ready else None
        if not expected:
            assert batch is None
            return
        assert batch is not None
        assert len(batch) <= self.queue.max_batch
        assert {k: p.reason for k, p in batch.items()} == expected
        self.inflight = expected

    @precondition(lambda self: bool(self.inflight))
    @rule(codes=st.lists(st.sampled_from([None, 0, 0, 56, 6]), min_size=6, max_size=6))
    def respond(self, codes: list[int | None]) -> None:
        errors = {k: c for k, c in zip(KEYS, codes, strict=True) if c is not None and k in self.inflight}
        confirmed = self.queue.on_response(errors, now=self.now)
        assert [k for k, _ in confirmed] == [k for k in self.inflight if errors.get(k) == 0]
        self.confirmed += len(confirmed)
        for k, reason in self.inflight.items():
            if errors.get(k) != 0:
                self.ready.setdefault(k, reason)
        if self.ready and self.batch_start is None:
            self.batch_start = self.now
        self.inflight = {}
        self.failures = 0

    @precondition(lambda self: bool(self.inflight))
    @rule()
    def fail(self) -> None:
        delay = self.queue.on_failure(now=self.now)
        self.failures += 1
        assert delay == pytest.approx(min(0.8, 0.1 * 2 ** (self.failures - 1)))
        self.backoff_until = self.now + delay
        for k, reason in self.inflight.items():
            self.ready.setdefault(k, reason)
        self.inflight = {}

    @invariant()
    def matches_model(self) -> None:
        queue = self.queue
        assert {k: p.reason for k, p in queue.ready.items()} == self.ready
        assert {k: p.reason for k, p in queue.inflight.items()} == self.inflight
        assert queue.size == len(queue.ready) + len(queue.inflight) == len(self.ready) + len(self.inflight)
        assert len(queue.inflight) <= queue.max_batch
        assert queue.dropped == self.dropped
        assert queue.confirmed == self.confirmed
        assert queue.failures == self.failures

    @invariant()
    def never_stuck(self) -> None:
        """With something queued and nothing in flight, a send time exists and is not far off."""
        if self.ready and not self.inflight:
            due = self.queue.next_send_time(self.now)
            assert due is not None
            assert due <= self.now + max(self.queue.batch_delay, self.queue.backoff_max) + 1e-9


QueueMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestQueueMachine = QueueMachine.TestCase
