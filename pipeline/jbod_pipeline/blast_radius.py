"""The `blast-radius` job's transform (protocol §6): what each online dir's failure would do now.

Guarantees (pure DataFrame → DataFrame, no actions), for every dir in a registered broker's
online dirs (full ones included), counting the partitions whose replica on that broker sits in it:
* `leadersLost`: of those, the partitions that broker leads;
* `offlinePartitions`: of those it leads, the ones with no other acceptable leader in the ISR
  (registered, unfenced, its replica's dir online) — they would go offline;
* `underMinIsr`: the ones where that broker is in the ISR and the ISR size minus one is below the
  topic's `min.insync.replicas` (acks=-1 producers would fail);
* `rank`: 1 = worst, by offlinePartitions, then underMinIsr, then leadersLost, then replicas (all
  descending), then broker id and the contract's Uuid order — a total order, so ranks are unique.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)
from pyspark.sql.window import Window

from jbod_pipeline import replay, schemas


def blast_radius(brokers: DataFrame, counts: DataFrame) -> DataFrame:
    """The table from the replayed brokers and the per-dir counts (`replay.dir_counts`)."""
    online = brokers.select("brokerId", F.explode("logDirs").alias("directoryId"))
    counted = counts.select(
        "brokerId",
        "directoryId",
        "replicas",
        F.col("leaders").alias("leadersLost"),
        "offlinePartitions",
        "underMinIsr",
    )
    rows = online.join(counted, ["brokerId", "directoryId"], "left").select(
        F.col("brokerId").cast("int").alias("brokerId"),
        "directoryId",
        *[
            F.coalesce(c, F.lit(0)).cast("long").alias(c)
            for c in ("replicas", "leadersLost", "offlinePartitions", "underMinIsr")
        ],
    )
    worst_first = Window.orderBy(
        F.col("offlinePartitions").desc(),
        F.col("underMinIsr").desc(),
        F.col("leadersLost").desc(),
        F.col("replicas").desc(),
        F.col("brokerId").asc(),
        replay.uuid_order(F.col("directoryId")).asc(),
    )
    return rows.withColumn("rank", F.row_number().over(worst_first).cast("int")).select(
        *[f.name for f in schemas.BLAST_RADIUS.fields]
    )


def per_broker(table: DataFrame) -> DataFrame:
    """Totals per broker of a `blast_radius` table (for the report)."""
    return (
        table.groupBy("brokerId")
        .agg(
            F.count(F.lit(1)).alias("dirs"),
            F.sum("replicas").alias("replicas"),
            F.sum("leadersLost").alias("leadersLost"),
            F.sum("offlinePartitions").alias("offlinePartitions"),
            F.sum("underMinIsr").alias("underMinIsr"),
            F.max("offlinePartitions").alias("worstDirOfflinePartitions"),
        )
        .orderBy(F.col("offlinePartitions").desc(), F.col("underMinIsr").desc(), "brokerId")
    )
