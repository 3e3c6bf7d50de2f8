"""The Spark session of a pipeline run: local mode by default, any master on request.

Guarantees:
* In local mode the driver binds and advertises 127.0.0.1 only and the UI is off, so a run
  opens no port reachable from elsewhere.
* Python workers run the interpreter of the driver (`PYSPARK_PYTHON`, unless already set), so the
  planner's dependencies (pandas, pyarrow, `jbod_core`) are the ones installed here. On a cluster
  master the executors need the same packages installed (docs/pipeline.md).
* In local mode with N cores, input files are split into at least 4N scan tasks and shuffles
  default to 4N partitions (not Spark's cluster-sized 128 MB splits and 200 partitions), so no
  core idles behind one big task and no stage runs hundreds of tiny ones.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def local_cores(master: str) -> int:
    """The cores of a local master: `local` 1, `local[N]` N, `local[*]` every core."""
    inside = master[len("local[") : -1] if master.startswith("local[") else "1"
    if inside == "*":
        return os.cpu_count() or 1
    try:
        return max(1, int(inside.split(",")[0]))
    except ValueError:
        return 1


def build(
    *,
    master: str = DEFAULT_MASTER,
    app_name: str = "jbod-pipeline",
    shuffle_partitions: int | None = None,
    driver_memory: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> SparkSession:
    """A new (or the running) Spark session with the pipeline's settings."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "true")
    )
    if is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            # Split input files into at least 4 scan tasks per core (not 128 MB splits), so
            # that no core idles while one finishes the last big split.
            .config("spark.sql.files.minPartitionNum", str(4 * local_cores(master)))
        )
    if shuffle_partitions is None and is_local(master):
        shuffle_partitions = 4 * local_cores(master)  # not 200 tiny tasks per shuffle on one machine
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    if driver_memory is not None:
        builder = builder.config("spark.driver.memory", driver_memory)
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
