"""The cluster image as DataFrames: the metadata log replayed by Spark (pure DataFrame → DataFrame).

The state of every partition is a fold, in record order, of its PartitionRecord and then its
PartitionChangeRecords applying only the fields they carry (`F.aggregate` over the records sorted
by `(offset, file, position)`); brokers fold RegisterBrokerRecord (a fresh registration),
BrokerRegistrationChangeRecord (only what changed) and UnregisterBrokerRecord; a topic lives unless
a later RemoveTopicRecord names its id, and its configs are its TopicRecord's overlaid by the
ConfigRecords after it (the last one of a key wins; a null value deletes the key). The SCRAM
credential and producer-id records change nothing the jobs read. The rules are those of
`jbod_core.image`:
* a change carrying `replicas` without `directories` keeps the dir of every replica that stays and
  gives new replicas UNASSIGNED; a change carrying `leader` without `leaderEpoch` bumps the epoch;
* a later PartitionRecord / RegisterBrokerRecord of the same key replaces the state (snapshots);
* a PartitionChangeRecord with no PartitionRecord before it is an inconsistency: the partition is
  left out and counted (`orphan_changes`), never guessed.

Guarantees: no I/O, no actions; the same log gives the same frames as `ClusterImage.replay`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)
from pyspark.sql.window import Window

from jbod_core import ids
from jbod_pipeline import schemas


def _uuid_hex(uuid_text: Column) -> Column:
    """The 32 hex digits (upper case) of a Uuid's 16 bytes."""
    return F.hex(F.unbase64(F.concat(F.translate(uuid_text, "-_", "+/"), F.lit("=="))))


def is_reserved(directory: Column) -> Column:
    """True for the reserved dir ids (msb 0, 0 <= lsb < 100), UNASSIGNED / LOST / MIGRATING included."""
    # The first 15 bytes are zero exactly when the text starts with 20 'A's: a cheap test that
    # spares decoding the millions of real dir ids.
    hexed = _uuid_hex(directory)
    return F.when(~directory.startswith("A" * 20), F.lit(False)).otherwise(
        (F.substring(hexed, 1, 30) == "0" * 30)
        & (F.conv(F.substring(hexed, 31, 2), 16, 10).cast("int") < 100)
    )


def uuid_order(uuid_text: Column) -> Column:
    """A string whose order is the contract's Uuid order (signed msb, then signed lsb)."""
    hexed = _uuid_hex(uuid_text)

    def flip(first: Column) -> Column:
        return F.translate(first, "0123456789ABCDEF", "89ABCDEF01234567")

    return F.concat(
        flip(F.substring(hexed, 1, 1)),
        F.substring(hexed, 2, 15),
        flip(F.substring(hexed, 17, 1)),
        F.substring(hexed, 18, 15),
    )


def is_online(directory: Column, online_dirs: Column) -> Column:
    """Protocol §1 `isOnline` (a null `online_dirs` — no registration — counts as none online)."""
    return (
        F.when(directory.isin(ids.UNASSIGNED_DIR_TEXT, ids.MIGRATING_DIR_TEXT), F.lit(True))
        .when(directory == ids.LOST_DIR_TEXT, F.lit(False))
        .otherwise(F.coalesce(F.array_contains(online_dirs, directory), F.lit(False)))
    )


_ORDER: Final = ("offset", "file", "pos")
#: The fields a partition's fold carries (`replicas` .. `directories`), and a broker's.
_PARTITION_STATE: Final = ("replicas", "isr", "leader", "leaderEpoch", "partitionEpoch", "directories")
_BROKER_STATE: Final = (
    "brokerEpoch",
    "fenced",
    "inControlledShutdown",
    "logDirs",
    "offlineLogDirs",
    "listeners",
    "rack",
)


def _nulls(fields: tuple[str, ...]) -> list[Column]:
    """Typed nulls for `fields`, typed as the record schema types them (`schemas.RECORD_DATA`)."""
    return [F.lit(None).cast(schemas.RECORD_DATA[f].dataType).alias(f) for f in fields]


@dataclass(frozen=True, slots=True)
class ClusterFrames:
    """The replayed cluster.

    * `brokers`: registered brokers — `brokerId`, `brokerEpoch`, `fenced`, `inControlledShutdown`,
      `logDirs` (online), `offlineLogDirs`, `listeners`, `rack`.
    * `topics`: live topics — `topicId`, `name`, `configs`, `minIsr` (`min.insync.replicas`, default 1).
    * `partitions`: partitions of live topics — `topicId`, `topic`, `partition`, `replicas`, `isr`,
      `leader`, `leaderEpoch`, `partitionEpoch`, `directories`, `minIsr`.
    * `orphan_changes`: PartitionChangeRecords of partitions never created (one row per partition).
    """

    brokers: DataFrame
    topics: DataFrame
    partitions: DataFrame
    orphan_changes: DataFrame


def _sorted_records(records: DataFrame, key: list[str], fields: list[Column | str]) -> DataFrame:
    """One row per key with `recs`: its records as structs, sorted by (offset, file, position)."""
    entry = F.struct(*[F.col(c) for c in _ORDER], *[F.col(f) if isinstance(f, str) else f for f in fields])
    return records.groupBy(*key).agg(F.array_sort(F.collect_list(entry)).alias("recs"))


def replay_partitions(
    records: DataFrame, *, keep: Callable[[DataFrame], DataFrame] = lambda frame: frame
) -> tuple[DataFrame, DataFrame]:
    """(partitions state, orphan changes) keyed by `topicId`, `partition`; `keep` may persist
    the folded partitions that both are read from."""
    parts = records.where(F.col("type").isin("PartitionRecord", "PartitionChangeRecord"))
    key = ["topicId", "partitionId"]
    # Most partitions have one record (their PartitionRecord): find the keys with more, on narrow
    # rows, and gather and fold (interpreted, slower) only those.
    # The keys are few (the partitions that changed), so they are broadcast: the wide rows are
    # never shuffled to split them.
    several = F.broadcast(
        parts.groupBy(*key).agg(F.count(F.lit(1)).alias("n")).where(F.col("n") > 1).select(*key)
    )
    base = (F.col("type") == "PartitionRecord").alias("base")
    one = parts.join(several, key, "left_anti").select(
        "topicId",
        F.col("partitionId").alias("partition"),
        F.struct(base, *_PARTITION_STATE).alias("s"),
    )
    grouped = _sorted_records(parts.join(several, key, "left_semi"), key, [base, *_PARTITION_STATE])
    initial = F.struct(F.lit(False).alias("base"), *_nulls(_PARTITION_STATE))

    def step(acc: Column, r: Column) -> Column:
        kept = F.map_from_arrays(acc["replicas"], acc["directories"])
        remapped = F.transform(
            r["replicas"], lambda b: F.coalesce(F.element_at(kept, b), F.lit(ids.UNASSIGNED_DIR_TEXT))
        )
        change = F.struct(
            acc["base"].alias("base"),
            F.coalesce(r["replicas"], acc["replicas"]).alias("replicas"),
            F.coalesce(r["isr"], acc["isr"]).alias("isr"),
            F.coalesce(r["leader"], acc["leader"]).alias("leader"),
            F.when(r["leader"].isNull(), acc["leaderEpoch"])
            .otherwise(F.coalesce(r["leaderEpoch"], acc["leaderEpoch"] + 1))
            .alias("leaderEpoch"),
            r["partitionEpoch"].alias("partitionEpoch"),
            F.when(r["directories"].isNotNull(), r["directories"])
            .when(r["replicas"].isNotNull(), remapped)
            .otherwise(acc["directories"])
            .alias("directories"),
        )
        created = F.struct(F.lit(True).alias("base"), *[r[c].alias(c) for c in _PARTITION_STATE])
        return F.when(r["base"], created).otherwise(change)

    folded = keep(
        one.unionByName(
            grouped.select(
                "topicId",
                F.col("partitionId").alias("partition"),
                F.aggregate("recs", initial, step).alias("s"),
            )
        )
    )
    state = folded.where(F.col("s.base")).select(
        "topicId", "partition", *[f"s.{c}" for c in _PARTITION_STATE]
    )
    orphans = folded.where(~F.col("s.base")).select("topicId", "partition")
    return state, orphans


def replay_brokers(records: DataFrame) -> DataFrame:
    """Registered brokers after the whole log."""
    regs = records.where(
        F.col("type").isin("RegisterBrokerRecord", "BrokerRegistrationChangeRecord", "UnregisterBrokerRecord")
    )
    grouped = _sorted_records(regs, ["brokerId"], [F.col("type").alias("kind"), *_BROKER_STATE])
    listeners_type = schemas.RECORD_DATA["listeners"].dataType
    initial = F.struct(F.lit(False).alias("registered"), *_nulls(_BROKER_STATE))

    def step(acc: Column, r: Column) -> Column:
        registered = F.struct(
            F.lit(True).alias("registered"),
            r["brokerEpoch"].alias("brokerEpoch"),
            F.coalesce(r["fenced"], F.lit(True)).alias("fenced"),
            F.coalesce(r["inControlledShutdown"], F.lit(False)).alias("inControlledShutdown"),
            r["logDirs"].alias("logDirs"),
            F.coalesce(r["offlineLogDirs"], F.array().cast("array<string>")).alias("offlineLogDirs"),
            F.coalesce(r["listeners"], F.array().cast(listeners_type)).alias("listeners"),
            r["rack"].alias("rack"),
        )
        changed = F.struct(
            acc["registered"].alias("registered"),
            acc["brokerEpoch"].alias("brokerEpoch"),
            F.coalesce(r["fenced"], acc["fenced"]).alias("fenced"),
            F.coalesce(r["inControlledShutdown"], acc["inControlledShutdown"]).alias("inControlledShutdown"),
            F.coalesce(r["logDirs"], acc["logDirs"]).alias("logDirs"),
            F.coalesce(r["offlineLogDirs"], acc["offlineLogDirs"]).alias("offlineLogDirs"),
            acc["listeners"].alias("listeners"),
            acc["rack"].alias("rack"),
        )
        unregistered = initial
        return (
            F.when(r["kind"] == "RegisterBrokerRecord", registered)
            .when(r["kind"] == "UnregisterBrokerRecord", unregistered)
            .otherwise(changed)
        )

    folded = grouped.select("brokerId", F.aggregate("recs", initial, step).alias("s"))
    return folded.where(F.col("s.registered")).select(
        "brokerId",
        "s.brokerEpoch",
        "s.fenced",
        "s.inControlledShutdown",
        F.array_sort("s.logDirs").alias("logDirs"),
        F.array_sort("s.offlineLogDirs").alias("offlineLogDirs"),
        "s.listeners",
        "s.rack",
    )


def replay_topics(records: DataFrame) -> DataFrame:
    """Live topics: the last TopicRecord of each id not followed by a RemoveTopicRecord of that id."""
    created = records.where(F.col("type") == "TopicRecord").select("topicId", "name", "configs", *_ORDER)
    latest = Window.partitionBy("topicId").orderBy(*[F.col(c).desc() for c in _ORDER])
    created = created.withColumn("_n", F.row_number().over(latest)).where(F.col("_n") == 1).drop("_n")
    removed = (
        records.where(F.col("type") == "RemoveTopicRecord")
        .groupBy("topicId")
        .agg(F.max(F.struct(*[F.col(c) for c in _ORDER])).alias("removedAt"))
    )
    live = created.join(removed, "topicId", "left").where(
        F.col("removedAt").isNull() | (F.struct(*[F.col(c) for c in _ORDER]) > F.col("removedAt"))
    )
    configs = _effective_configs(records, live)
    min_isr = F.coalesce(F.col("configs").getItem("min.insync.replicas").cast("int"), F.lit(1))
    return (
        live.drop("configs")
        .join(configs, "topicId", "left")
        .select(
            "topicId",
            "name",
            F.coalesce("configs", F.create_map().cast("map<string,string>")).alias("configs"),
        )
        .withColumn("minIsr", min_isr)
    )


def _effective_configs(records: DataFrame, live: DataFrame) -> DataFrame:
    """`topicId`, `configs` of every live topic with a config: the entries of its TopicRecord,
    then its ConfigRecords after that TopicRecord, the last of each key winning (null: deleted)."""
    order = F.struct(*[F.col(c) for c in _ORDER])
    created = live.select("topicId", order.alias("createdAt"))
    from_topics = live.select("topicId", F.explode("configs").alias("key", "value"), *_ORDER)
    changes = (
        records.where(F.col("type") == "ConfigRecord")
        .select("topicId", F.col("name").alias("key"), "value", *_ORDER)
        .join(created, "topicId")
        .where(order > F.col("createdAt"))
        .drop("createdAt")
    )
    latest = Window.partitionBy("topicId", "key").orderBy(*[F.col(c).desc() for c in _ORDER])
    entries = from_topics.unionByName(changes).withColumn("_n", F.row_number().over(latest))
    return (
        entries.where((F.col("_n") == 1) & F.col("value").isNotNull())
        .groupBy("topicId")
        .agg(F.map_from_entries(F.collect_list(F.struct("key", "value"))).alias("configs"))
    )


def replay(
    records: DataFrame, *, keep: Callable[[DataFrame], DataFrame] = lambda frame: frame
) -> ClusterFrames:
    """The cluster after replaying every record of `records` (`inputs.MetadataInput.records`);
    `keep` is applied to the intermediate frames worth persisting."""
    brokers = keep(replay_brokers(records))
    topics = replay_topics(records)
    state, orphans = replay_partitions(records, keep=keep)
    partitions = state.join(
        F.broadcast(topics.select("topicId", F.col("name").alias("topic"), "minIsr")), "topicId"
    ).select(
        "topicId",
        "topic",
        "partition",
        "replicas",
        "isr",
        "leader",
        "leaderEpoch",
        "partitionEpoch",
        "directories",
        "minIsr",
    )
    return ClusterFrames(brokers=brokers, topics=topics, partitions=partitions, orphan_changes=orphans)


def replicas(partitions: DataFrame, brokers: DataFrame) -> DataFrame:
    """One row per replica: `topicId`, `topic`, `partition`, `brokerId`, `directoryId`, `isLeader`,
    `inIsr`, `isrSize`, `minIsr`, `acceptable` (its broker is registered and unfenced and its dir
    is online for it: it could lead if in the ISR), `otherAcceptableInIsr` (another ISR member is
    acceptable).

    Cost: the replica rows are never shuffled. The acceptable ISR members of a partition are its
    ISR replicas minus the unacceptable ones, and only those — few: the controller drops fenced
    brokers and offline dirs from the ISR — are grouped and broadcast back."""
    exploded = partitions.select(
        "topicId",
        "topic",
        "partition",
        "leader",
        "isr",
        "minIsr",
        F.size(F.array_intersect("replicas", "isr")).alias("isrReplicas"),
        F.posexplode(F.arrays_zip("replicas", "directories")).alias("position", "r"),
    ).select(
        "topicId",
        "topic",
        "partition",
        "leader",
        "isr",
        "minIsr",
        "isrReplicas",
        F.col("r.replicas").alias("brokerId"),
        F.col("r.directories").alias("directoryId"),
    )
    state = brokers.select("brokerId", "fenced", "logDirs")
    acceptable = (
        F.col("fenced").isNotNull() & ~F.col("fenced") & is_online(F.col("directoryId"), F.col("logDirs"))
    )
    flagged = exploded.join(F.broadcast(state), "brokerId", "left").select(
        "topicId",
        "topic",
        "partition",
        "brokerId",
        "directoryId",
        (F.col("leader") == F.col("brokerId")).alias("isLeader"),
        F.array_contains("isr", F.col("brokerId")).alias("inIsr"),
        F.size("isr").alias("isrSize"),
        "minIsr",
        acceptable.alias("acceptable"),
        "isrReplicas",
    )
    key = ["topicId", "partition"]
    unacceptable = (
        flagged.where(F.col("inIsr") & ~F.col("acceptable"))
        .groupBy(*key)
        .agg(F.count(F.lit(1)).alias("unacceptableInIsr"))
    )
    acceptable_in_isr = F.col("isrReplicas") - F.coalesce("unacceptableInIsr", F.lit(0))
    itself = F.when(F.col("acceptable") & F.col("inIsr"), 1).otherwise(0)
    return flagged.join(F.broadcast(unacceptable), key, "left").select(
        "topicId",
        "topic",
        "partition",
        "brokerId",
        "directoryId",
        "isLeader",
        "inIsr",
        "isrSize",
        "minIsr",
        "acceptable",
        ((acceptable_in_isr - itself) > 0).alias("otherAcceptableInIsr"),
    )


def dir_counts(replicas: DataFrame) -> DataFrame:
    """Per (`brokerId`, `directoryId`) of the replica rows — reserved dir ids included — the
    counts the `disks` and `blast-radius` tables are made of: `replicas`, `leaders`,
    `offlinePartitions` (led there, with no other acceptable leader in the ISR) and `underMinIsr`
    (in the ISR there, and the ISR minus one would be under `min.insync.replicas`). One
    aggregation over the replica rows serves both tables."""
    return replicas.groupBy("brokerId", "directoryId").agg(
        F.count(F.lit(1)).alias("replicas"),
        F.count(F.when(F.col("isLeader"), 1)).alias("leaders"),
        F.count(F.when(F.col("isLeader") & ~F.col("otherAcceptableInIsr"), 1)).alias("offlinePartitions"),
        F.count(F.when(F.col("inIsr") & (F.col("isrSize") - 1 < F.col("minIsr")), 1)).alias("underMinIsr"),
    )
