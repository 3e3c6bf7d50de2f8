"""The `plan` job's transform: intra-broker moves, planned per broker inside Spark.

`moves(disks, replica_sizes, goals)` cogroups each broker's dirs (from the `disks` table) with its
movable replicas and runs `planner.plan_broker` on every group (`applyInPandas`): no data leaves
its broker's group, so the plan scales out with the number of brokers. The result holds both the
moves (`kind = 'move'`, in the order the planner chose them per broker) and what could not be
achieved (`kind` = the issue kind); `table` keeps the moves with the §6 columns.
"""

from __future__ import annotations

from typing import Final

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

from jbod_pipeline import planner, replay, schemas

RESULT_SCHEMA: Final = (
    "kind string, step int, brokerId int, topic string, partition int, fromDirectoryId string, "
    "toDirectoryId string, bytes long, reason string, detail string"
)
_COLUMNS: Final = [c.split()[0] for c in RESULT_SCHEMA.split(", ")]


def replica_sizes(replicas: DataFrame, latest: DataFrame) -> DataFrame:
    """Every replica placed in a real dir, with its size from that dir's latest telemetry sample
    (`sizeBytes` null when the sample does not list it): `brokerId`, `directoryId`, `topic`,
    `partition`, `sizeBytes`."""
    sizes = latest.select("brokerId", "directoryId", F.explode("replicas").alias("r")).select(
        "brokerId",
        "directoryId",
        F.col("r.topic").alias("topic"),
        F.col("r.partition").alias("partition"),
        F.col("r.sizeBytes").alias("sizeBytes"),
    )
    sizes = sizes.groupBy("brokerId", "directoryId", "topic", "partition").agg(
        F.max("sizeBytes").alias("sizeBytes")
    )
    placed = replicas.where(~replay.is_reserved(F.col("directoryId"))).select(
        "brokerId", "directoryId", "topic", "partition"
    )
    return placed.join(sizes, ["brokerId", "directoryId", "topic", "partition"], "left")


def _plan_group(goals: planner.Goals):  # type: ignore[no-untyped-def]
    def run(dirs: pd.DataFrame, reps: pd.DataFrame) -> pd.DataFrame:
        if dirs.empty:
            return pd.DataFrame(columns=_COLUMNS)
        broker_id = int(dirs["brokerId"].tolist()[0])
        dir_values = [
            planner.Dir(
                directory_id=str(directory),
                state=str(state),
                used_bytes=int(used),
                total_bytes=None if pd.isna(total) else int(total),
            )
            for directory, state, used, total in zip(
                dirs["directoryId"].tolist(),
                dirs["state"].tolist(),
                dirs["bytes"].tolist(),
                dirs["totalBytes"].tolist(),
                strict=True,
            )
        ]
        replica_values = [
            planner.Replica(
                topic=str(topic),
                partition=int(partition),
                directory_id=str(directory),
                size_bytes=None if pd.isna(size) else int(size),
            )
            for topic, partition, directory, size in zip(
                reps["topic"].tolist(),
                reps["partition"].tolist(),
                reps["directoryId"].tolist(),
                reps["sizeBytes"].tolist(),
                strict=True,
            )
        ]
        result = planner.plan_broker(dir_values, replica_values, goals)
        rows: list[tuple[object, ...]] = [
            (
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
            for step, m in enumerate(result.moves)
        ]
        rows += [
            (i.kind, None, broker_id, None, None, i.directory_id, None, None, None, i.detail)
            for i in result.issues
        ]
        frame = pd.DataFrame(rows, columns=_COLUMNS)
        return frame.astype({"step": "Int32", "partition": "Int32", "bytes": "Int64", "brokerId": "int32"})

    return run


def _plan_bucket(goals: planner.Goals):  # type: ignore[no-untyped-def]
    """Plan every broker of a bucket: one pandas call per bucket instead of per broker (the
    per-call overhead dominates a broker's planning time)."""
    plan_one = _plan_group(goals)

    def run(dirs: pd.DataFrame, reps: pd.DataFrame) -> pd.DataFrame:
        frames = []
        rep_groups = dict(tuple(reps.groupby("brokerId", sort=False))) if len(reps) else {}
        for broker_id, broker_dirs in dirs.groupby("brokerId", sort=True):
            broker_reps = rep_groups.get(broker_id, reps.iloc[0:0])
            frames.append(plan_one(broker_dirs, broker_reps))
        if not frames:
            return pd.DataFrame(columns=_COLUMNS)
        combined: pd.DataFrame = pd.concat(frames, ignore_index=True)
        return combined

    return run


def moves(disks: DataFrame, sizes: DataFrame, goals: planner.Goals, *, buckets: int = 64) -> DataFrame:
    """Moves and issues of every broker (`RESULT_SCHEMA`). Brokers are hashed into `buckets`
    groups; each broker is planned alone, inside its bucket's call."""
    bucket = F.pmod(F.hash("brokerId"), F.lit(buckets)).alias("bucket")
    dirs = disks.select(bucket, "brokerId", "directoryId", "state", "bytes", "totalBytes")
    reps = sizes.select(bucket, "brokerId", "topic", "partition", "directoryId", "sizeBytes")
    return (
        dirs.groupBy("bucket")
        .cogroup(reps.groupBy("bucket"))
        .applyInPandas(_plan_bucket(goals), schema=RESULT_SCHEMA)
    )


def table(result: DataFrame) -> DataFrame:
    """The §6 `plan` table: the moves, ordered by broker and planning step."""
    return (
        result.where(F.col("kind") == "move")
        .orderBy("brokerId", "step")
        .select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schemas.PLAN.fields])
    )
