"""The `disks` job's transform (protocol §6): per broker and dir — replicas, leaders, bytes,
utilisation and skew against the broker's mean.

Guarantees (pure DataFrame → DataFrame, no actions):
* One row per (broker, dir) known from a registration (online or offline dirs of registered
  brokers), from a partition's directories (reserved ids — UNASSIGNED, LOST, MIGRATING — are not
  dirs and make no row) or from telemetry.
* `state` is `online` if the dir is in its broker's online dirs (`full` instead when the latest
  telemetry sample says full), else `offline`; `bytes` is the sum of the replica sizes of the
  latest sample (0 without one); `totalBytes` comes from that sample (null without one);
  `utilisation = bytes / totalBytes` (null if unknown or 0); `skew` is the utilisation minus the
  mean utilisation of the broker's online (and full) dirs that have one.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)
from pyspark.sql.window import Window

from jbod_pipeline import replay, schemas


def dir_usage(latest: DataFrame) -> DataFrame:
    """`brokerId`, `directoryId`, `telemetryState`, `bytes`, `totalBytes` from the latest samples."""
    sizes = (
        latest.select("brokerId", "directoryId", F.explode("replicas").alias("r"))
        .groupBy("brokerId", "directoryId")
        .agg(F.sum("r.sizeBytes").alias("bytes"))
    )
    return latest.join(sizes, ["brokerId", "directoryId"], "left").select(
        "brokerId",
        "directoryId",
        F.col("state").alias("telemetryState"),
        F.coalesce("bytes", F.lit(0)).cast("long").alias("bytes"),
        F.col("totalBytes").cast("long").alias("totalBytes"),
    )


def disks(brokers: DataFrame, counts: DataFrame, latest: DataFrame) -> DataFrame:
    """The `disks` table from the replayed brokers, the per-dir counts of the replica rows
    (`replay.dir_counts`) and the latest telemetry samples (`inputs.latest_samples`)."""
    registered = brokers.select(
        "brokerId", F.explode(F.array_union("logDirs", "offlineLogDirs")).alias("directoryId")
    )
    placed = counts.where(~replay.is_reserved(F.col("directoryId"))).select(
        "brokerId", "directoryId", "replicas", "leaders"
    )
    usage = dir_usage(latest)
    keys = (
        registered.unionByName(placed.select("brokerId", "directoryId"))
        .unionByName(usage.select("brokerId", "directoryId"))
        .distinct()
    )
    online = brokers.select("brokerId", "logDirs")
    rows = (
        keys.join(placed, ["brokerId", "directoryId"], "left")
        .join(usage, ["brokerId", "directoryId"], "left")
        .join(F.broadcast(online), "brokerId", "left")
    )
    is_online = F.coalesce(F.array_contains("logDirs", F.col("directoryId")), F.lit(False))
    state = (
        F.when(is_online & (F.col("telemetryState") == "full"), "full")
        .when(is_online, "online")
        .otherwise("offline")
    )
    utilisation = F.when(F.col("totalBytes") > 0, F.col("bytes").cast("double") / F.col("totalBytes"))
    shaped = rows.select(
        F.col("brokerId").cast("int").alias("brokerId"),
        "directoryId",
        state.alias("state"),
        F.coalesce("replicas", F.lit(0)).cast("long").alias("replicas"),
        F.coalesce("leaders", F.lit(0)).cast("long").alias("leaders"),
        F.coalesce("bytes", F.lit(0)).cast("long").alias("bytes"),
        "totalBytes",
        utilisation.alias("utilisation"),
    )
    per_broker = Window.partitionBy("brokerId")
    mean_online = F.avg(F.when(F.col("state") != "offline", F.col("utilisation"))).over(per_broker)
    return shaped.withColumn("skew", F.col("utilisation") - mean_online).select(
        *[f.name for f in schemas.DISKS.fields]
    )
