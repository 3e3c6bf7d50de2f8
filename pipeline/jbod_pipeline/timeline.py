"""The `timeline` job's transform (protocol §6): incidents found in the metadata log, with durations.

The log has no clock, so durations are in records: "back online at offset N (K records later)".

Guarantees (pure DataFrame → DataFrame, no actions):
* `dir-offline`: a dir enters a broker's offline list (a BrokerRegistrationChangeRecord, or a
  registration carrying offline dirs), whether or not the dir was online before; every failure of
  a dir that fails twice is a row; `detail` says when it is next in the broker's online list
  after that failure, or that it is still offline.
* `broker-fenced` / `broker-unfenced`: the broker's fenced state flips (a registration of a new
  incarnation starts fenced: that is `broker-fenced` only if it was unfenced before). `detail`
  says how long it stayed fenced.
* `leader-change`: a PartitionChangeRecord sets a leader different from the current one;
  `brokerId` is the broker that lost the leadership (null if there was none), `detail` names both
  and, when the new leader is none, when the partition got a leader again.
* Rows are ordered by offset, then type, broker, topic and partition.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)
from pyspark.sql.window import Window

from jbod_pipeline import schemas

_ORDER = ("offset", "file", "pos")


def _until(end: Column, start: Column, *, still: str, then: str) -> Column:
    return F.when(end.isNull(), F.lit(still)).otherwise(
        F.concat(
            F.lit(then + " at offset "),
            end.cast("string"),
            F.lit(" ("),
            (end - start).cast("string"),
            F.lit(" records later)"),
        )
    )


def _broker_events(records: DataFrame) -> DataFrame:
    regs = records.where(
        F.col("type").isin("RegisterBrokerRecord", "BrokerRegistrationChangeRecord", "UnregisterBrokerRecord")
    )
    is_register = F.col("type") == "RegisterBrokerRecord"
    ordered = Window.partitionBy("brokerId").orderBy(*_ORDER)
    so_far = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    after = ordered.rowsBetween(1, Window.unboundedFollowing)
    empty = F.array().cast("array<string>")
    states = (
        regs.withColumn(
            "fencedNow",
            F.when(is_register, F.coalesce("fenced", F.lit(True))).when(
                F.col("type") == "BrokerRegistrationChangeRecord", F.col("fenced")
            ),
        )
        .withColumn(
            "offNow",
            F.when(is_register, F.coalesce("offlineLogDirs", empty)).when(
                F.col("type") == "BrokerRegistrationChangeRecord", F.col("offlineLogDirs")
            ),
        )
        .withColumn(
            "onNow", F.when(F.col("type") == "UnregisterBrokerRecord", empty).otherwise(F.col("logDirs"))
        )
        .withColumn("fencedState", F.last("fencedNow", ignorenulls=True).over(so_far))
        .withColumn("offState", F.coalesce(F.last("offNow", ignorenulls=True).over(so_far), empty))
        .withColumn("onState", F.coalesce(F.last("onNow", ignorenulls=True).over(so_far), empty))
        .withColumn("prevFenced", F.lag("fencedState").over(ordered))
        .withColumn("prevOff", F.coalesce(F.lag("offState").over(ordered), empty))
    )
    became_fenced = F.col("fencedState") & (F.col("prevFenced").isNull() | ~F.col("prevFenced"))
    states = states.withColumn(
        "fencedSince", F.last(F.when(became_fenced, F.col("offset")), ignorenulls=True).over(so_far)
    )
    states = states.withColumn(
        "unfencedAt", F.first(F.when(~F.col("fencedState"), F.col("offset")), ignorenulls=True).over(after)
    )
    fenced = states.where(F.col("fencedState") & ~F.coalesce("prevFenced", F.lit(True))).select(
        "offset",
        F.lit("broker-fenced").alias("type"),
        "brokerId",
        _until(F.col("unfencedAt"), F.col("offset"), still="still fenced", then="unfenced").alias("detail"),
    )
    unfenced = states.where(~F.col("fencedState") & F.coalesce("prevFenced", F.lit(False))).select(
        "offset",
        F.lit("broker-unfenced").alias("type"),
        "brokerId",
        F.concat(
            F.lit("fenced since offset "),
            F.col("fencedSince").cast("string"),
            F.lit(" ("),
            (F.col("offset") - F.col("fencedSince")).cast("string"),
            F.lit(" records)"),
        ).alias("detail"),
    )
    went_offline = states.select(
        "brokerId",
        "offset",
        F.explode(F.array_except("offState", "prevOff")).alias("directoryId"),
    )
    back = states.select(
        F.col("brokerId").alias("backBroker"),
        F.explode("onState").alias("backDir"),
        F.col("offset").alias("backAt"),
    )
    # "Online again" is the first online listing *after* the failure: the `backAt > offset`
    # condition belongs to the outer join itself. Filtered after the join, it would drop the
    # listings before the failure (the registration, for one) together with the incident.
    returned = (
        went_offline.join(
            back,
            (F.col("brokerId") == F.col("backBroker"))
            & (F.col("directoryId") == F.col("backDir"))
            & (F.col("backAt") > F.col("offset")),
            "left",
        )
        .groupBy("brokerId", "directoryId", "offset")
        .agg(F.min("backAt").alias("backAt"))
    )
    offline = returned.select(
        "offset",
        F.lit("dir-offline").alias("type"),
        "brokerId",
        "directoryId",
        _until(F.col("backAt"), F.col("offset"), still="still offline", then="online again").alias("detail"),
    )
    no_dir = F.lit(None).cast("string").alias("directoryId")
    return (
        fenced.select("offset", "type", "brokerId", no_dir, "detail")
        .unionByName(unfenced.select("offset", "type", "brokerId", no_dir, "detail"))
        .unionByName(offline)
    )


def _leader_events(records: DataFrame) -> DataFrame:
    parts = records.where(F.col("type").isin("PartitionRecord", "PartitionChangeRecord"))
    ordered = Window.partitionBy("topicId", "partitionId").orderBy(*_ORDER)
    so_far = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    after = ordered.rowsBetween(1, Window.unboundedFollowing)
    states = (
        parts.withColumn("leaderState", F.last("leader", ignorenulls=True).over(so_far))
        .withColumn("prevLeader", F.lag("leaderState").over(ordered))
        .withColumn(
            "ledAgainAt",
            F.first(F.when(F.col("leaderState") != -1, F.col("offset")), ignorenulls=True).over(after),
        )
    )
    changes = states.where(
        (F.col("type") == "PartitionChangeRecord")
        & F.col("leader").isNotNull()
        & F.col("prevLeader").isNotNull()
        & (F.col("leader") != F.col("prevLeader"))
    )

    def name(leader: Column) -> Column:
        return F.when(leader == -1, F.lit("none")).otherwise(leader.cast("string"))

    detail = F.concat(F.lit("leader "), name(F.col("prevLeader")), F.lit(" -> "), name(F.col("leader")))
    detail = F.when(
        F.col("leader") == -1,
        F.concat(
            detail,
            F.lit(": partition offline, "),
            _until(F.col("ledAgainAt"), F.col("offset"), still="still offline", then="led again"),
        ),
    ).otherwise(detail)
    topics = (
        records.where(F.col("type") == "TopicRecord")
        .groupBy("topicId")
        .agg(F.max_by("name", F.struct(*[F.col(c) for c in _ORDER])).alias("topic"))
    )
    return changes.join(F.broadcast(topics), "topicId", "left").select(
        "offset",
        F.lit("leader-change").alias("type"),
        F.when(F.col("prevLeader") != -1, F.col("prevLeader")).alias("brokerId"),
        "topic",
        F.col("partitionId").alias("partition"),
        detail.alias("detail"),
    )


def timeline(records: DataFrame) -> DataFrame:
    brokers = _broker_events(records).select(
        "offset",
        "type",
        "brokerId",
        "directoryId",
        F.lit(None).cast("string").alias("topic"),
        F.lit(None).cast("int").alias("partition"),
        "detail",
    )
    leaders = _leader_events(records).select(
        "offset",
        "type",
        "brokerId",
        F.lit(None).cast("string").alias("directoryId"),
        "topic",
        "partition",
        "detail",
    )
    return (
        brokers.unionByName(leaders)
        .select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schemas.TIMELINE.fields])
        .orderBy("offset", "type", "brokerId", "topic", "partition", "directoryId")
    )
