"""`jbod_core.disk_space`: when a dir is cordoned for its space, and the time left until it is full."""

from __future__ import annotations

import pytest

from jbod_core import disk_space
from jbod_core.disk_space import FillRate


@pytest.mark.parametrize(
    ("total", "usable", "used"),
    [(0, 0, 0.0), (100, 100, 0.0), (100, 25, 0.75), (100, 0, 1.0), (100, 120, 0.0), (100, -5, 1.0)],
)
def test_the_used_fraction_is_what_the_broker_can_no_longer_write(
    total: int, usable: int, used: float
) -> None:
    assert disk_space.used_fraction(total, usable) == pytest.approx(used)


def test_a_dir_is_cordoned_at_the_threshold_and_released_only_well_below_it() -> None:
    seen = []
    cordoned = False
    for used in (0.5, 0.89, 0.90, 0.95, 0.87, 0.86, 0.849, 0.89, 0.9):
        cordoned = disk_space.space_cordoned(used, 0.9, cordoned=cordoned)
        seen.append(cordoned)
    assert seen == [False, False, True, True, True, True, False, False, True]


def test_a_threshold_of_one_never_cordons() -> None:
    assert not disk_space.space_cordoned(1.0, 1.0, cordoned=False)
    assert not disk_space.space_cordoned(1.0, 1.0, cordoned=True)


def test_the_time_to_full_follows_the_fill_rate() -> None:
    fill = FillRate()
    for second in range(0, 31, 3):
        fill.add(float(second), 1_000_000 - 10_000 * second)  # 10 kB/s
    assert fill.bytes_per_second() == pytest.approx(10_000)
    assert fill.seconds_to_full() == pytest.approx(700_000 / 10_000)


def test_no_forecast_without_enough_samples_or_while_not_filling() -> None:
    fill = FillRate(min_span_s=5.0)
    fill.add(0.0, 1000)
    fill.add(1.0, 900)
    assert fill.seconds_to_full() is None  # two samples
    fill.add(2.0, 800)
    assert fill.seconds_to_full() is None  # a 2 s span
    steady = FillRate()
    for second in range(10):
        steady.add(float(second), 500)
    assert steady.bytes_per_second() == pytest.approx(0) and steady.seconds_to_full() is None


def test_freed_space_starts_a_new_window_and_old_samples_age_out() -> None:
    fill = FillRate(window_s=20.0)
    for second in range(10):
        fill.add(float(second), 1000 - 50 * second)
    fill.add(10.0, 5000)  # retention freed space
    assert list(fill.samples) == [(10.0, 5000)]
    for second in range(11, 40):
        fill.add(float(second), 5000 - second)
    assert fill.samples[0][0] >= 39 - 20
