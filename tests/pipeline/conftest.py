"""One local Spark session for the whole pipeline tier (starting Spark, and warming its JIT, is
most of the cost), the generated clusters, and every job run once on each of them (`computed`),
shared by the tests that only read what the jobs wrote.

`tests/conftest.py` puts every test of this directory on one xdist worker (group "spark"), so
the session starts once per `make test`. It keeps whole-stage code generation and the C2
compiler (the settings of a larger local run, two shuffle partitions): the small-input settings
(`input_bytes` below 64 MiB: C1 only, no whole-stage code) made the tier's longest test, the
across-brokers plan, twice as slow.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402

from jbod_pipeline import jobs, planner, session, synthetic  # noqa: E402
from tests.harness import ControllerProcess  # noqa: E402


def jbodctl_export(controller: ControllerProcess, out: Path) -> Path:
    """`jbodctl metadata export --out OUT` of the running controller (the format follows the
    suffix of `out`: .parquet or JSON lines)."""
    token = out.with_name(f"{out.name}.token")
    token.write_text(controller.admin_token)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jbod_cli.cli",
            "--controller",
            controller.url,
            "--token-file",
            str(token),
            "metadata",
            "export",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return out


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # The whole tier shares this one driver: 2g rather than Spark's 1g default, so the
    # broadcasts of the generated clusters fit beside what earlier tests left behind.
    spark = session.build(
        master="local[2]", app_name="jbod-pipeline-tests", shuffle_partitions=2, driver_memory="2g"
    )
    yield spark
    spark.stop()


@pytest.fixture(autouse=True)
def _spark_cache_cleared(request: pytest.FixtureRequest) -> Iterator[None]:
    """Frames a test persisted (an input read it never unpersisted) are dropped after it, so
    cached blocks do not pile up in the shared driver over the tier's tests."""
    yield
    if "spark" in request.fixturenames:
        request.getfixturevalue("spark").catalog.clearCache()


SPECS = {
    "mixed": synthetic.ClusterSpec(),
    "skewed": synthetic.ClusterSpec(
        brokers=5,
        dirs_per_broker=5,
        partitions=400,
        topics=4,
        offline_dirs=3,
        recovered_dirs=2,  # one comes back for good, one fails a second time
        refailed_dirs=1,
        fenced_brokers=1,
        unregistered_brokers=1,
        skewed_dirs=6,
        unassigned_fraction=0.05,
        lost_fraction=0.03,
        leader_moves=20,
        reassignments=4,
        telemetry_missing_dirs=2,
    ),
}


@dataclass(frozen=True, slots=True)
class Generated:
    """A generated cluster: its spec's name and its two input files."""

    name: str
    metadata: Path
    telemetry: Path


@dataclass(frozen=True, slots=True)
class Computed:
    """Every job (`jobs.JOBS`, as `jbod-pipeline all` runs them) on one generated cluster with the
    default goals: the tables, `plan.json` and `reassignment.json` in `out`, and the replayed
    frames the jobs started from (collected: rows as dicts)."""

    generated: Generated
    out: Path
    brokers: dict[int, dict[str, Any]]
    partitions: dict[tuple[str, int], dict[str, Any]]
    orphans: int
    plan_summary: str

    def plan(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads((self.out / "plan.json").read_text())
        return document


def same_value(a: Any, b: Any) -> bool:
    """Two cells of a job's output are the same: floats to 1e-9 relative, anything else (None
    included) equal."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


def assert_same_table(got: Path, want: Path) -> int:
    """The Parquet tables at `got` and `want` hold the same rows (in any order, cells compared by
    `same_value`); returns how many."""

    def rows(table: Any) -> list[tuple[Any, ...]]:
        return sorted((tuple(row.values()) for row in table.to_pylist()), key=repr)

    got_table, want_table = pq.read_table(got), pq.read_table(want)
    assert got_table.column_names == want_table.column_names, got
    got_rows, want_rows = rows(got_table), rows(want_table)
    assert len(got_rows) == len(want_rows), got
    for got_row, want_row in zip(got_rows, want_rows, strict=True):
        assert all(same_value(g, w) for g, w in zip(got_row, want_row, strict=True)), (got, got_row, want_row)
    return len(got_rows)


def _run_every_job(spark: SparkSession, generated: Generated, out: Path) -> Computed:
    options = jobs.Options(
        metadata=str(generated.metadata),
        telemetry=str(generated.telemetry),
        out=out,
        goals=planner.Goals(),
    )
    run = jobs.Run(spark, options)
    try:
        brokers = {r["brokerId"]: r.asDict(recursive=True) for r in run.cluster.brokers.collect()}
        partitions = {
            (r["topicId"], r["partition"]): r.asDict(recursive=True) for r in run.cluster.partitions.collect()
        }
        orphans = run.cluster.orphan_changes.count()
        outcomes = {name: job(run) for name, job in jobs.JOBS.items()}
    finally:
        run.close()
    return Computed(generated, out, brokers, partitions, orphans, outcomes["plan"].summary)


@pytest.fixture(scope="session")
def generate(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Generated]:
    """The cluster of `SPECS[name]` (seed 7), generated once per session."""
    made: dict[str, Generated] = {}

    def get(name: str) -> Generated:
        if name not in made:
            root = tmp_path_factory.mktemp(f"cluster-{name}")
            metadata, telemetry = root / "metadata.jsonl", root / "telemetry.jsonl"
            synthetic.generate(SPECS[name], seed=7, metadata=metadata, telemetry=telemetry)
            made[name] = Generated(name, metadata, telemetry)
        return made[name]

    return get


@pytest.fixture(scope="session")
def compute(
    spark: SparkSession, generate: Callable[[str], Generated], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], Computed]:
    """Every job on the cluster of `SPECS[name]`, run once per session."""
    done: dict[str, Computed] = {}

    def get(name: str) -> Computed:
        if name not in done:
            done[name] = _run_every_job(spark, generate(name), tmp_path_factory.mktemp(f"jobs-{name}"))
        return done[name]

    return get


@pytest.fixture(scope="session", params=sorted(SPECS))
def computed(request: pytest.FixtureRequest, compute: Callable[[str], Computed]) -> Computed:
    return compute(request.param)
