"""The `plan` job's transform: intra-broker moves, planned per broker inside Spark.

`moves(disks, planner_rows(replicas, latest), goals)` hashes brokers into buckets and cogroups
each bucket's dirs (from the `disks` table) with the rows its planner needs — the replicas the
controller places in real dirs, and the replica sizes of the latest telemetry samples — and runs
`planner.plan_broker` on every broker of the bucket (`applyInArrow`). Inside a bucket the
placements are joined with the sizes, and sorted in the planner's order, by Arrow (C++), so the
Python planner gets plain lists and builds no object per replica. No data leaves its broker's
bucket, so the plan scales out with the number of brokers. The result holds both the moves
(`kind = 'move'`, in the order the planner chose them per broker) and what could not be achieved
(`kind` = the issue kind); `table` keeps the moves with the §6 columns (and the extension's
`toBrokerId`, `kind`, `reason`).

Across brokers (`Goals.across_brokers`), drained brokers get no intra-broker moves (they are being
emptied), and `cross_candidates` selects the replicas the driver's cross-broker planner
(`cluster_planner`) may move: those of the source dirs it names and of the drained brokers, minus
the replicas the intra-broker pass moved, each with its partition's replica list and a size.

A replica's size is the largest size the latest sample of its dir lists for it (null when the
sample does not list it, or the dir has no sample).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

from jbod_pipeline import planner, replay, schemas

RESULT_SCHEMA: Final = (
    "kind string, step int, brokerId int, topic string, partition int, fromDirectoryId string, "
    "toDirectoryId string, bytes long, reason string, detail string"
)
_ARROW_RESULT: Final = pa.schema(
    [
        ("kind", pa.string()),
        ("step", pa.int32()),
        ("brokerId", pa.int32()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("fromDirectoryId", pa.string()),
        ("toDirectoryId", pa.string()),
        ("bytes", pa.int64()),
        ("reason", pa.string()),
        ("detail", pa.string()),
    ]
)
_KEY: Final = ["brokerId", "directoryId", "topic", "partition"]
#: The plan table's `kind` of a move.
INTRA_BROKER: Final = "intra-broker"
CROSS_BROKER: Final = "cross-broker"


def planner_rows(replicas: DataFrame, latest: DataFrame) -> DataFrame:
    """What the planner reads besides the dirs, as one frame: `brokerId`, `directoryId`, `topic`,
    `partition`, `sizeBytes`, `sampled`. Rows with `sampled = false` are the replicas placed in a
    real dir (`sizeBytes` null); rows with `sampled = true` are the replica entries of the latest
    telemetry samples."""
    placed = replicas.where(~replay.is_reserved(F.col("directoryId"))).select(
        F.col("brokerId").cast("int").alias("brokerId"),
        "directoryId",
        "topic",
        F.col("partition").cast("int").alias("partition"),
        F.lit(None).cast("long").alias("sizeBytes"),
        F.lit(False).alias("sampled"),
    )
    sampled = latest.select("brokerId", "directoryId", F.explode("replicas").alias("r")).select(
        F.col("brokerId").cast("int").alias("brokerId"),
        "directoryId",
        F.col("r.topic").alias("topic"),
        F.col("r.partition").cast("int").alias("partition"),
        F.col("r.sizeBytes").cast("long").alias("sizeBytes"),
        F.lit(True).alias("sampled"),
    )
    return placed.unionByName(sampled)


def _sized_placements(rows: pa.Table) -> pa.Table:
    """The placed replicas of `rows` with their sizes, sorted by broker, dir and then the
    planner's order (size, topic, partition; unknown sizes last)."""
    sampled = rows.filter(pc.field("sampled"))
    placed = rows.filter(~pc.field("sampled")).select(_KEY)
    sizes = sampled.group_by(_KEY).aggregate([("sizeBytes", "max")]).rename_columns([*_KEY, "sizeBytes"])
    joined = placed.join(sizes, keys=_KEY, join_type="left outer")
    joined = joined.append_column("unknown", pc.is_null(joined.column("sizeBytes")))
    order = ("brokerId", "directoryId", "unknown", "sizeBytes", "topic", "partition")
    return joined.sort_by([(c, "ascending") for c in order])


def _runs(*columns: pa.ChunkedArray | pa.Array) -> list[int]:
    """Start indices of the runs of equal values across `columns` (sorted rows), plus the end."""
    n = len(columns[0])
    if n == 0:
        return [0]
    change = np.zeros(n - 1, dtype=bool)
    for column in columns:
        flat = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        change |= pc.not_equal(flat.slice(1), flat.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return [0, *(np.flatnonzero(change) + 1).tolist(), n]


def _placements_by_broker(sorted_rows: pa.Table) -> dict[int, planner.Placements]:
    topics = sorted_rows.column("topic")
    partitions = sorted_rows.column("partition")

    def name(ref: int) -> tuple[str, int]:
        return str(topics[ref].as_py()), int(partitions[ref].as_py())

    brokers = sorted_rows.column("brokerId").to_numpy()
    dirs = sorted_rows.column("directoryId")
    sizes = sorted_rows.column("sizeBytes")
    known = sizes.is_valid().to_numpy(zero_copy_only=False)
    size_values = pc.fill_null(sizes, 0).to_numpy()
    by_broker: dict[int, tuple[dict[str, tuple[list[int], list[int]]], dict[str, list[int]]]] = {}
    bounds = _runs(sorted_rows.column("brokerId"), dirs)
    for start, end in itertools.pairwise(bounds):
        broker = int(brokers[start])
        directory = str(dirs[start].as_py())
        sized, unknown = by_broker.setdefault(broker, ({}, {}))
        split = start + int(known[start:end].sum())  # unknown sizes sort last
        if split > start:
            sized[directory] = (size_values[start:split].tolist(), list(range(start, split)))
        if end > split:
            unknown[directory] = list(range(split, end))
    return {
        broker: planner.Placements(sized=sized, unknown=unknown, name=name)
        for broker, (sized, unknown) in by_broker.items()
    }


def _plan_bucket(goals: planner.Goals) -> Callable[[pa.Table, pa.Table], pa.Table]:
    """Plan every broker of a bucket: one Python call per bucket instead of per broker (the
    per-call overhead dominates a broker's planning time)."""

    def run(dirs: pa.Table, rows: pa.Table) -> pa.Table:
        placements = _placements_by_broker(_sized_placements(rows))
        empty = planner.Placements(sized={}, unknown={}, name=lambda ref: ("", 0))
        out: dict[str, list[object]] = {name: [] for name in _ARROW_RESULT.names}

        def emit(*values: object) -> None:
            for column, value in zip(_ARROW_RESULT.names, values, strict=True):
                out[column].append(value)

        by_broker: dict[int, list[planner.Dir]] = {}
        for d in dirs.select(["brokerId", "directoryId", "state", "bytes", "totalBytes"]).to_pylist():
            by_broker.setdefault(int(d["brokerId"]), []).append(
                planner.Dir(
                    directory_id=str(d["directoryId"]),
                    state=str(d["state"]),
                    used_bytes=int(d["bytes"]),
                    total_bytes=None if d["totalBytes"] is None else int(d["totalBytes"]),
                )
            )
        for broker_id in sorted(by_broker):
            if broker_id in goals.drain_brokers:
                continue  # emptied onto other brokers by the cross-broker pass
            result = planner.plan_broker(by_broker[broker_id], placements.get(broker_id, empty), goals)
            for step, m in enumerate(result.moves):
                emit(
                    "move",
                    step,
                    broker_id,
                    m.topic,
                    m.partition,
                    m.from_dir,
                    m.to_dir,
                    m.size_bytes,
                    m.reason,
                    None,
                )
            for i in result.issues:
                emit(i.kind, None, broker_id, None, None, i.directory_id, None, None, None, i.detail)
        return pa.Table.from_pydict(out, schema=_ARROW_RESULT)

    return run


def moves(disks: DataFrame, rows: DataFrame, goals: planner.Goals, *, buckets: int = 64) -> DataFrame:
    """Moves and issues of every broker (`RESULT_SCHEMA`) from the `disks` table and
    `planner_rows`. Brokers are spread over `buckets` groups by id; each broker is planned
    alone, inside its bucket's call."""
    bucket = F.pmod(F.col("brokerId"), F.lit(buckets)).alias("bucket")
    dirs = disks.select(bucket, "brokerId", "directoryId", "state", "bytes", "totalBytes")
    return (
        dirs.groupBy("bucket")
        .cogroup(rows.select(bucket, *rows.columns).groupBy("bucket"))
        .applyInArrow(_plan_bucket(goals), schema=RESULT_SCHEMA)
    )


def table(result: DataFrame, across: DataFrame | None = None) -> DataFrame:
    """The §6 `plan` table: the intra-broker moves ordered by broker and planning step, then the
    cross-broker moves of `across` (`schemas.PLAN` columns and a `step`) in planning order."""
    columns = [f.name for f in schemas.PLAN.fields]
    rows = result.where(F.col("kind") == "move").select(
        F.lit(0).alias("_pass"),
        F.col("brokerId").alias("_broker"),
        F.col("step").alias("_step"),
        F.col("brokerId").alias("toBrokerId"),
        F.lit(INTRA_BROKER).alias("kind"),
        *[c for c in columns if c not in ("toBrokerId", "kind")],
    )
    if across is not None:
        rows = rows.unionByName(
            across.select(
                F.lit(1).alias("_pass"), F.lit(0).alias("_broker"), F.col("step").alias("_step"), *columns
            )
        )
    return rows.orderBy("_pass", "_broker", "_step").select(
        *[F.col(f.name).cast(f.dataType).alias(f.name) for f in schemas.PLAN.fields]
    )


def cross_candidates(
    partitions: DataFrame,
    latest: DataFrame,
    sources: DataFrame,
    moved: DataFrame,
    *,
    drain_brokers: frozenset[int],
) -> DataFrame:
    """The replicas the cross-broker planner may move: those in the dirs of `sources`
    (`brokerId`, `directoryId`; few) and every replica of `drain_brokers` (any dir, reserved
    ones included), minus those of `moved` (`brokerId`, `topic`, `partition`: the intra-broker
    moves). Columns: `topicId`, `topic`, `partition`, `brokerId`, `directoryId`, `replicas`,
    `directories` (the partition's lists), `sizeBytes`: the largest size the replica's latest
    sample lists for it, else the largest any latest sample lists for a replica of the partition
    (a new replica is copied from the leader: an offline dir's replica still has a size), else null.

    Cost: one pass over the partitions (exploded, filtered against the broadcast `sources`) and
    one over the latest samples' replica entries (semi-joined to the candidates); only the
    candidates reach the driver."""
    exploded = partitions.select(
        "topicId",
        "topic",
        "partition",
        "replicas",
        "directories",
        F.posexplode("replicas").alias("position", "brokerId"),
    ).select(
        "topicId",
        "topic",
        F.col("partition").cast("int").alias("partition"),
        F.col("brokerId").cast("int").alias("brokerId"),
        F.element_at("directories", F.col("position") + 1).alias("directoryId"),
        F.col("replicas").cast("array<int>").alias("replicas"),
        "directories",
    )
    drained = F.col("brokerId").isin(sorted(drain_brokers)) if drain_brokers else F.lit(False)
    chosen = exploded.join(F.broadcast(sources), ["brokerId", "directoryId"], "left_semi").where(~drained)
    if drain_brokers:
        chosen = chosen.unionByName(exploded.where(drained))
    chosen = chosen.join(F.broadcast(moved), ["brokerId", "topic", "partition"], "left_anti")
    sampled = latest.select("brokerId", "directoryId", F.explode("replicas").alias("r")).select(
        F.col("brokerId").cast("int").alias("brokerId"),
        "directoryId",
        F.col("r.topic").alias("topic"),
        F.col("r.partition").cast("int").alias("partition"),
        F.col("r.sizeBytes").cast("long").alias("sizeBytes"),
    )
    key = ["brokerId", "directoryId", "topic", "partition"]
    own = (
        sampled.join(chosen.select(*key), key, "left_semi")
        .groupBy(*key)
        .agg(F.max("sizeBytes").alias("ownSize"))
    )
    any_replica = (
        sampled.join(chosen.select("topic", "partition").distinct(), ["topic", "partition"], "left_semi")
        .groupBy("topic", "partition")
        .agg(F.max("sizeBytes").alias("anySize"))
    )
    return (
        chosen.join(own, key, "left")
        .join(any_replica, ["topic", "partition"], "left")
        .select(
            "topicId",
            "topic",
            "partition",
            "brokerId",
            "directoryId",
            "replicas",
            "directories",
            F.coalesce("ownSize", "anySize").alias("sizeBytes"),
        )
    )
