"""One local Spark session for the whole pipeline tier (startup is the slow part), plus
generated clusters shared by the tests that only read them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402

from jbod_pipeline import session, synthetic  # noqa: E402
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
    # broadcasts of the larger generated clusters fit beside what earlier tests left behind.
    spark = session.build(
        master="local[2]", app_name="jbod-pipeline-tests", shuffle_partitions=2, driver_memory="2g"
    )
    yield spark
    spark.stop()


@pytest.fixture(autouse=True)
def _spark_cache_cleared(request: pytest.FixtureRequest) -> Iterator[None]:
    """Frames a test persisted (an input read it never unpersisted) are dropped after it, so
    cached blocks do not pile up in the shared driver over the tier's hundreds of tests."""
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


@pytest.fixture(scope="session", params=sorted(SPECS))
def generated(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, Path]:
    name = request.param
    root = tmp_path_factory.mktemp(f"cluster-{name}")
    metadata, telemetry = root / "metadata.jsonl", root / "telemetry.jsonl"
    synthetic.generate(SPECS[name], seed=7, metadata=metadata, telemetry=telemetry)
    return name, metadata, telemetry
