"""`jbod_core.disk_latency`: when a dir is slow by its recent write-and-fsync latencies."""

from __future__ import annotations

from jbod_core.disk_latency import DirLatency


def _after(latencies: list[float], threshold_s: float = 0.2) -> list[bool]:
    dir_latency, slow, seen = DirLatency(window=5), False, []
    for seconds in latencies:
        dir_latency.add(seconds)
        slow = dir_latency.slow(threshold_s, slow=slow)
        seen.append(slow)
    return seen


def test_a_dir_is_slow_once_the_median_of_a_full_window_reaches_the_threshold() -> None:
    assert _after([0.5, 0.5, 0.5, 0.5]) == [False] * 4  # the window is not full yet
    assert _after([0.5] * 5) == [False] * 4 + [True]
    assert _after([0.001, 0.001, 0.001, 0.001, 0.001, 0.2, 0.2, 0.2]) == [False] * 7 + [True]


def test_one_stall_among_healthy_answers_is_not_a_slow_disk() -> None:
    assert not any(_after([0.001, 0.001, 3.0, 0.001, 0.001, 0.001, 5.0, 0.001]))


def test_a_slow_dir_is_normal_again_only_below_half_the_threshold() -> None:
    seen = _after([0.5] * 5 + [0.15] * 5 + [0.09] * 3)
    assert seen[4:10] == [True] * 6  # 0.15 s is under the threshold but not under half of it
    assert seen[-1] is False


def test_a_threshold_of_zero_turns_detection_off() -> None:
    assert not any(_after([10.0] * 10, threshold_s=0))


def test_the_window_keeps_the_last_samples_and_clamps_negatives() -> None:
    latency = DirLatency(window=3)
    for seconds in (1.0, 2.0, -1.0, 4.0, 5.0):
        latency.add(seconds)
    assert list(latency.samples) == [0.0, 4.0, 5.0] and latency.median() == 4.0
    assert DirLatency().median() is None
