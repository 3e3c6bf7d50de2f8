"""A broker's client quota state stays bounded by the clients seen lately (issue 34): the rate of
a (user, client id) nothing was recorded to for the whole sample span, a mutation bucket full
again and a throttle counter idle for an hour are dropped, and dropping them changes no answer.
Time is a fake clock moved by the test. And an address's connections are counted against its
`connection_creation_rate` (KIP-612) as Kafka's acceptor counts them.
"""

from __future__ import annotations

from typing import Any, cast

from jbod_agent.kafka import client_quotas
from jbod_agent.kafka.listener import Connection
from jbod_core import quotas
from tests.agent.runtime_support import FakeClock

WINDOWS = client_quotas.Windows(num=11, size_s=1.0)
SPAN = WINDOWS.num * WINDOWS.size_s
PER_CLIENT = {(((quotas.CLIENT_ID, None),)): {quotas.PRODUCER_BYTE_RATE: 1000.0}}
MUTATIONS = {(((quotas.USER, None),)): {quotas.CONTROLLER_MUTATION_RATE: 1.0}, **PER_CLIENT}
ALICE = Connection(listener=cast(Any, None), peer="10.0.0.1:5000", principal="User:alice")


def quota_state(configured: Any, clock: FakeClock) -> client_quotas.ClientQuotas:
    return client_quotas.ClientQuotas(lambda: configured, clock=clock, windows=WINDOWS)


def test_rates_of_clients_gone_for_a_whole_span_are_dropped() -> None:
    clock = FakeClock()
    state = quota_state(PER_CLIENT, clock)
    for i in range(1000):  # a thousand short-lived clients, one request each
        state.record(client_quotas.PRODUCE, ALICE, f"batch-job-{i}", 10)
    assert state.kept() == 1000
    clock.advance(SPAN + 0.1)
    state.record(client_quotas.PRODUCE, ALICE, "steady", 10)
    assert state.kept() == 1  # only the client seen within the span


def test_a_client_recorded_within_the_span_keeps_its_rate() -> None:
    clock = FakeClock()
    state = quota_state(PER_CLIENT, clock)
    state.record(client_quotas.PRODUCE, ALICE, "other", 1)  # sweeps, the next sweep a span later
    clock.advance(SPAN / 2)
    assert state.record(client_quotas.PRODUCE, ALICE, "busy", 50_000) > 0
    clock.advance(SPAN / 2 + 0.5)
    state.record(client_quotas.PRODUCE, ALICE, "other", 1)  # sweeps: "other" and "busy" are recent
    assert state.kept() == 2
    assert state.pending_throttle_ms(client_quotas.PRODUCE, ALICE, "busy") > 0


def test_a_client_back_after_its_rate_was_dropped_is_measured_as_a_new_one() -> None:
    clock = FakeClock()
    state = quota_state(PER_CLIENT, clock)
    state.record(client_quotas.PRODUCE, ALICE, "returning", 50_000)
    clock.advance(SPAN + 0.1)
    state.record(client_quotas.PRODUCE, ALICE, "sweeper", 1)
    assert state.kept() == 1
    fresh = quota_state(PER_CLIENT, FakeClock(clock.now))
    assert state.record(client_quotas.PRODUCE, ALICE, "returning", 20_000) == fresh.record(
        client_quotas.PRODUCE, ALICE, "returning", 20_000
    )


def test_a_mutation_bucket_in_debt_is_kept_until_full_again() -> None:
    clock = FakeClock()
    state = quota_state(MUTATIONS, clock)
    state.record_mutations(ALICE, "admin", 30)  # 30 partitions at 1/s, a burst of 11: 19 in debt
    clock.advance(SPAN + 0.1)
    assert state.mutations_throttle_ms(ALICE, "admin") > 0  # still in debt: kept
    assert state.kept() == 1
    clock.advance(30.0)  # 41 s at 1/s: full again
    state.record(client_quotas.PRODUCE, ALICE, "admin", 1)  # sweeps
    assert state.kept() == 1  # the produce rate just recorded; the bucket is gone
    assert state.mutations_throttle_ms(ALICE, "admin") == 0


def test_throttle_counters_are_dropped_an_hour_after_their_last_throttle() -> None:
    clock = FakeClock()
    state = quota_state(PER_CLIENT, clock)
    state.count_throttle(client_quotas.PRODUCE, ALICE, "old", 500)
    clock.advance(client_quotas.THROTTLE_COUNTER_EXPIRY_S / 2)
    state.count_throttle(client_quotas.PRODUCE, ALICE, "recent", 500)
    clock.advance(client_quotas.THROTTLE_COUNTER_EXPIRY_S / 2)
    state.count_throttle(client_quotas.PRODUCE, ALICE, "recent", 250)
    assert state.throttle_seconds == {(client_quotas.PRODUCE, "alice", "recent"): 0.75}


def test_an_address_over_its_connection_rate_is_held_for_at_most_a_window_and_not_counted() -> None:
    """KIP-612 as Kafka's acceptor measures it: a fresh rate spans 10 windows, so a quota of 2/s
    admits 20 connections at once; the 21st is held (at most one window) and not counted, so the
    address is admitted again as soon as its rate allows one more, and other addresses are not
    affected."""
    clock = FakeClock()
    state = quota_state({((quotas.IP, None),): {quotas.CONNECTION_CREATION_RATE: 2.0}}, clock)
    assert [state.admit_connection("10.0.0.1") for _ in range(20)] == [0] * 20
    held = state.admit_connection("10.0.0.1")
    assert 0 < held <= 1000
    assert state.admit_connection("10.0.0.1") == held  # the held ones were not counted
    assert state.admit_connection("10.0.0.2") == 0
    assert state.throttle_seconds[(client_quotas.CONNECTION, "", "")] == 2 * held / 1000
    clock.advance(0.5)  # 20 connections over 10.5 s: 1.9/s, room for one more
    assert state.admit_connection("10.0.0.1") == 0
    assert state.admit_connection("10.0.0.1") > 0


def test_without_an_ip_quota_connections_are_not_counted() -> None:
    state = quota_state(PER_CLIENT, FakeClock())
    assert all(state.admit_connection("10.0.0.1") == 0 for _ in range(1000))
    assert state.kept() == 0
