"""`bench.transactions` sums its producers' results as its docstring says (issue 33): records/s is
the sum of each producer's records over its own window, commit latency percentiles are over every
commit of every producer, and the goals compare ours with Kafka's medians over the runs."""

from __future__ import annotations

import pytest

from bench.transactions import ProducerResult, report, summarise_run


def test_producers_add_up_and_commit_percentiles_span_every_producer() -> None:
    fast = ProducerResult(transactions=3, records=300, seconds=1.5, commits=(0.010, 0.020, 0.030))
    slow = ProducerResult(transactions=1, records=100, seconds=2.0, commits=(0.500,))
    run = summarise_run("ours", 1, [fast, slow], cpu_s=4.0, loads=(1.0, 1.5))
    assert run.transactions == 4
    assert run.records_per_s == pytest.approx(300 / 1.5 + 100 / 2.0)
    assert run.mib_per_s == pytest.approx(250 * 1024 / 2**20)
    assert (run.commit_p50_ms, run.commit_p99_ms, run.commit_max_ms) == pytest.approx((20.0, 500.0, 500.0))
    assert run.seconds == 2.0
    assert run.cpu_s_per_gb == pytest.approx(4.0 / (250 * 2.0 * 1024 / 1e9))


def test_goals_are_kafkas_medians() -> None:
    def one(records: int, commit_s: float) -> ProducerResult:
        return ProducerResult(1, records, 1.0, (commit_s,))

    runs = [
        summarise_run("ours", 1, [one(5000, 0.030)], cpu_s=1.0, loads=(0.0, 0.0)),
        summarise_run("kafka", 1, [one(4000, 0.050)], cpu_s=1.0, loads=(0.0, 0.0)),
        summarise_run("ours", 2, [one(3000, 0.040)], cpu_s=1.0, loads=(0.0, 0.0)),
        summarise_run("kafka", 2, [one(2000, 0.040)], cpu_s=1.0, loads=(0.0, 0.0)),
    ]
    throughput, p99, *_ = report(runs)
    assert (throughput.measured, throughput.goal, throughput.met) == (4000, 3000, True)
    assert p99.measured == pytest.approx(0.035) and p99.goal == pytest.approx(0.045) and p99.met
