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
* In local mode with a small input (`input_bytes` under `SMALL_INPUT_BYTES`) the run is sized for
  start-up, not throughput: N scan tasks and N shuffle partitions, no whole-stage code generation
  (compiling each query's Java code costs more than it saves on a few thousand rows), and the
  driver JVM compiles with C1 only and collects with the serial GC (less JIT and GC work on 2
  cores). A larger or unknown local input keeps Spark's throughput settings, with the
  throughput garbage collector (`LOCAL_JAVA_OPTIONS`).
* No generated method is too big for HotSpot to compile (`spark.sql.codegen.hugeMethodLimit`
  8000, as Spark's own documentation advises on HotSpot).
* No query plan's text is longer than `MAX_PLAN_STRING_LENGTH` characters
  (`spark.sql.maxPlanStringLength`), and the driver keeps the plans of the last 50 queries
  only (`spark.sql.ui.retainedExecutions`): it never spends its heap describing deep plans.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
# Below this (metadata + telemetry files), a local run is dominated by start-up: see `build`.
SMALL_INPUT_BYTES = 64 << 20
SMALL_INPUT_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# A larger local run: the throughput collector (G1's concurrent work competes with the tasks for
# the few cores of one machine; the 1M-partition run went about 15 % faster).
LOCAL_JAVA_OPTIONS = "-XX:+UseParallelGC"
MAX_PLAN_STRING_LENGTH = 100_000


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


def settings(
    *,
    master: str,
    shuffle_partitions: int | None = None,
    driver_memory: str | None = None,
    input_bytes: int | None = None,
) -> dict[str, str]:
    """The Spark settings of a run (pure: `build` applies them); `input_bytes` is the size of the
    local inputs if known (None: remote, so not known to be small)."""
    local = is_local(master)
    small = local and input_bytes is not None and input_bytes < SMALL_INPUT_BYTES
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        # HotSpot does not JIT-compile a method over 8,000 bytes of bytecode; Spark's default
        # limit (65,535) lets the generated code of a wide query (the input checks, the replay)
        # run interpreted: the input checks of a million records took 3.4 s instead of 1.3 s.
        # At 8,000 such a stage falls back to per-expression code, which is compiled.
        "spark.sql.codegen.hugeMethodLimit": "8000",
        # The text of a query plan, written for every query run (its listener event), is cut at
        # this length: the plan of an iterative job (the across-brokers plan) grows with each
        # round, and its full text ran the driver out of heap in a CI run.
        "spark.sql.maxPlanStringLength": str(MAX_PLAN_STRING_LENGTH),
        # The driver keeps each finished query's plan for the SQL UI (1,000 by default), UI off or
        # not: a long session of iterative jobs keeps only the last few.
        "spark.sql.ui.retainedExecutions": "50",
    }
    if local:
        cores = local_cores(master)
        conf["spark.driver.host"] = conf["spark.driver.bindAddress"] = "127.0.0.1"
        # Split input files into at least 4 scan tasks per core (not 128 MB splits), so that no
        # core idles while one finishes the last big split; one per core for a small input.
        conf["spark.sql.files.minPartitionNum"] = str((1 if small else 4) * cores)
        if shuffle_partitions is None:
            # Not 200 tiny tasks per shuffle on one machine.
            shuffle_partitions = (1 if small else 4) * cores
    if small:
        conf["spark.sql.codegen.wholeStage"] = "false"
        conf["spark.driver.extraJavaOptions"] = SMALL_INPUT_JAVA_OPTIONS
    elif local:
        conf["spark.driver.extraJavaOptions"] = LOCAL_JAVA_OPTIONS
    if shuffle_partitions is not None:
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    if driver_memory is not None:
        conf["spark.driver.memory"] = driver_memory
    return conf


def build(  # noqa: PLR0913  a keyword per Spark setting (master, app name, shuffle partitions, driver memory, ...)
    *,
    master: str = DEFAULT_MASTER,
    app_name: str = "jbod-pipeline",
    shuffle_partitions: int | None = None,
    driver_memory: str | None = None,
    input_bytes: int | None = None,
    extra: Mapping[str, str] | None = None,
) -> SparkSession:
    """A new (or the running) Spark session with `settings(...)` and `extra`."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = settings(
        master=master,
        shuffle_partitions=shuffle_partitions,
        driver_memory=driver_memory,
        input_bytes=input_bytes,
    )
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**conf, **(extra or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
