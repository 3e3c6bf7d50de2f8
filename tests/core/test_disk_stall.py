"""`jbod_core.disk_stall`: when a path that stops answering its pulse stalls, and when it is
normal again."""

from __future__ import annotations

from jbod_core import disk_stall
from jbod_core.disk_stall import Pulse

T = 0.1  # the default timeout


def healthy(at: float) -> Pulse:
    """A peer whose last pulse started at `at` and answered 1 ms later."""
    return Pulse(answered_at=at + 0.001, answered_started_at=at, prompt_since=0.0)


def test_a_pulse_unanswered_for_the_timeout_since_the_last_answer_stalls_while_a_peer_answers() -> None:
    hung = Pulse(in_flight_since=10.05, answered_at=10.0, answered_started_at=9.999)
    assert not disk_stall.stalls(hung, [healthy(10.06)], now=10.099, timeout_s=T)
    assert disk_stall.stalls(hung, [healthy(10.06)], now=10.1001, timeout_s=T)


def test_no_stall_without_evidence_that_other_disks_answer() -> None:
    hung = Pulse(in_flight_since=10.05, answered_at=10.0, answered_started_at=9.999)
    # The peer's last answered pulse started before the hung one: the process may have been
    # frozen, or every disk is slow; no verdict.
    assert not disk_stall.stalls(hung, [healthy(10.04)], now=11.0, timeout_s=T)
    assert not disk_stall.stalls(hung, [], now=11.0, timeout_s=T)  # one path: never
    in_flight_peer = Pulse(in_flight_since=10.06, answered_at=10.0, answered_started_at=9.99)
    assert not disk_stall.stalls(hung, [in_flight_peer], now=11.0, timeout_s=T)


def test_nothing_in_flight_nothing_answered_yet_or_switched_off_never_stalls() -> None:
    peer = [healthy(10.5)]
    assert not disk_stall.stalls(
        Pulse(answered_at=10.0, answered_started_at=9.9), peer, now=11.0, timeout_s=T
    )
    assert not disk_stall.stalls(Pulse(in_flight_since=10.0), peer, now=11.0, timeout_s=T)
    hung = Pulse(in_flight_since=10.05, answered_at=10.0, answered_started_at=9.999)
    assert not disk_stall.stalls(hung, peer, now=11.0, timeout_s=0)


def test_prompt_answers_for_the_release_time_release_a_stalled_path() -> None:
    pulse = Pulse(in_flight_since=0.0, answered_at=None)
    pulse = disk_stall.answered(pulse, started=0.0, now=3.0, timeout_s=T)  # the hung pulse returns
    assert pulse.prompt_since is None and not disk_stall.released(pulse, now=3.0, timeout_s=T)
    started = 3.05
    while started < 3.05 + disk_stall.RELEASE_S:
        pulse = disk_stall.answered(pulse, started=started, now=started + 0.002, timeout_s=T)
        started += 0.05
    assert pulse.prompt_since == 3.05
    assert not disk_stall.released(pulse, now=3.05 + disk_stall.RELEASE_S - 0.01, timeout_s=T)
    assert disk_stall.released(pulse, now=3.05 + disk_stall.RELEASE_S, timeout_s=T)


def test_one_answer_slower_than_half_the_timeout_starts_the_release_time_again() -> None:
    pulse = disk_stall.answered(Pulse(), started=0.0, now=0.001, timeout_s=T)
    pulse = disk_stall.answered(pulse, started=5.0, now=5.001, timeout_s=T)
    assert pulse.prompt_since == 0.0
    pulse = disk_stall.answered(pulse, started=6.0, now=6.0 + T / 2 + 1e-6, timeout_s=T)
    assert pulse.prompt_since is None
    pulse = disk_stall.answered(pulse, started=6.1, now=6.101, timeout_s=T)
    assert pulse.prompt_since == 6.1
    # A pulse in flight for half the timeout holds the release back.
    waiting = Pulse(in_flight_since=20.0, answered_at=19.9, prompt_since=0.0)
    assert not disk_stall.released(waiting, now=20.0 + T / 2, timeout_s=T)
    assert disk_stall.released(waiting, now=20.0 + T / 2 - 0.001, timeout_s=T)


def test_the_pulse_interval_is_half_the_timeout_within_bounds() -> None:
    assert disk_stall.pulse_interval(0.1) == 0.05
    assert disk_stall.pulse_interval(0.001) == 0.01
    assert disk_stall.pulse_interval(60) == 1.0


def test_the_next_check_is_the_moment_the_timeout_passes() -> None:
    in_flight = Pulse(in_flight_since=10.05, answered_at=10.0)
    assert disk_stall.next_check(in_flight, now=10.06, timeout_s=T) == max(10.0 + T, 10.05 + T / 2)
    late = Pulse(in_flight_since=10.09, answered_at=10.0)
    assert disk_stall.next_check(late, now=10.1, timeout_s=T) == 10.09 + T / 2
    assert disk_stall.next_check(in_flight, now=10.5, timeout_s=T) == 10.5
    assert disk_stall.next_check(Pulse(answered_at=10.0), now=10.06, timeout_s=T) is None
    assert disk_stall.next_check(in_flight, now=10.06, timeout_s=0) is None


def test_a_stalled_path_is_still_hung_until_a_pulse_answers_after_the_stall() -> None:
    hung = Pulse(in_flight_since=10.05, answered_at=10.0)
    assert disk_stall.still_hung(hung, stalled_at=10.1)
    assert disk_stall.still_hung(Pulse(in_flight_since=1.0), stalled_at=1.1)
    came_back = disk_stall.answered(hung, started=10.05, now=10.4, timeout_s=T)
    assert not disk_stall.still_hung(came_back, stalled_at=10.1)


def test_a_pulse_that_started_late_must_wait_half_the_timeout_itself() -> None:
    """A pulse thread starved of CPU starts its pulse late: the path's silence is then not the
    disk's. It stalls only once that pulse itself has waited half the timeout."""
    late = Pulse(in_flight_since=10.09, answered_at=10.0, answered_started_at=9.999)
    peers = [healthy(10.1)]
    assert not disk_stall.stalls(late, peers, now=10.12, timeout_s=T)
    assert disk_stall.stalls(late, peers, now=10.1401, timeout_s=T)
