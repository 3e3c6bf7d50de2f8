"""The jobs at their edges: read the inputs once, run the transforms, write Parquet, JSON and HTML.

Guarantees:
* One `Run` reads and replays the metadata log once and shares the result (persisted) between
  the jobs it runs, so `jbod-pipeline all` costs one replay.
* Every job writes `OUT/<table>` (Parquet, overwritten) with exactly the §6 columns (the `plan`
  table: and its extension columns); `plan` also writes `OUT/plan.json` (the input of `jbodctl
  apply-plan`) and `OUT/reassignment.json` (the input of Kafka's `kafka-reassign-partitions.sh`).
  `OUT/report.html` holds a section per job run plus the input report; `OUT/input_errors.json` lists the bad lines found.
* Bad input lines are skipped and reported (stderr, report, `input_errors.json`); with
  `strict=True` any bad line stops the run before a job starts (`JobError`).
* Reports are drawn from the tables read back from their Parquet: they show what was written.
* `execute_topic_stats` reads one topic through Spark's Kafka source once (its records reduced to
  sizes, offsets and keys, persisted), writes `OUT/topic_partitions` and `OUT/topic_keys` and a
  report; a read that fails for a reason `kafka_source.describe_failure` knows is a
  `kafka_source.TopicReadError` of one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import orjson
import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

from jbod_client import kafka_config
from jbod_pipeline import (
    blast_radius,
    cluster_planner,
    disks,
    errors,
    inputs,
    kafka_source,
    plan,
    planner,
    replay,
    report,
    timeline,
    topic_stats,
)

PLAN_VERSION = 1
#: A plan with cross-broker parts (`--across-brokers`): `brokerMoves`, `reassignments`, `unplaced`.
PLAN_VERSION_ACROSS_BROKERS = 2
#: The columns of `replay.replicas` that the jobs read (`dir_counts`, `plan.planner_rows`).
REPLICA_COLUMNS = (
    "topic",
    "partition",
    "brokerId",
    "directoryId",
    "isLeader",
    "inIsr",
    "isrSize",
    "minIsr",
    "otherAcceptableInIsr",
)


class JobError(errors.PipelineError):
    """A run that cannot go on (missing input, strict mode and bad lines); one line."""


@dataclass(frozen=True, slots=True)
class Options:
    metadata: str
    out: Path
    telemetry: str | None = None
    strict: bool = False
    goals: planner.Goals = field(default_factory=planner.Goals)


@dataclass(slots=True)
class Outcome:
    """What a job wrote, for the command's summary line."""

    job: str
    summary: str
    section: report.Section


class Run:
    def __init__(self, spark: SparkSession, options: Options) -> None:
        self.spark = spark
        self.options = options
        self._persisted: list[DataFrame] = []
        self.warnings: list[str] = []
        self.log: Callable[[str], None] = lambda message: None

    # -- inputs --------------------------------------------------------------------------------

    def _keep(self, frame: DataFrame) -> DataFrame:
        frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(frame)
        return frame

    @cached_property
    def metadata(self) -> inputs.MetadataInput:
        read = inputs.read_metadata(self.spark, self.options.metadata)
        self._check(read.report)
        return read

    @cached_property
    def telemetry(self) -> inputs.TelemetryInput | None:
        if self.options.telemetry is None:
            return None
        read = inputs.read_telemetry(self.spark, self.options.telemetry)
        self._check(read.report)
        return read

    def _check(self, found: inputs.InputReport) -> None:
        if found.bad_lines or found.warnings:
            self.log(found.summary())
            if self.options.strict and found.bad_lines:
                raise JobError(f"{found.summary()} (--strict)")

    def require_telemetry(self, job: str) -> inputs.TelemetryInput:
        if self.telemetry is None:
            raise JobError(f"{job} needs --telemetry (the agents' disk samples)")
        return self.telemetry

    @cached_property
    def cluster(self) -> replay.ClusterFrames:
        frames = replay.replay(self.metadata.records, keep=self._keep)
        orphans = frames.orphan_changes.count()
        if orphans:
            self.warnings.append(
                f"{orphans} partition(s) have PartitionChangeRecords but no PartitionRecord: left out"
            )
            self.log(self.warnings[-1])
        return frames

    @cached_property
    def replicas(self) -> DataFrame:
        """The replica rows, persisted with the columns the jobs read."""
        rows = replay.replicas(self.cluster.partitions, self.cluster.brokers)
        return self._keep(rows.select(*REPLICA_COLUMNS))

    @cached_property
    def dir_counts(self) -> DataFrame:
        return self._keep(replay.dir_counts(self.replicas))

    @cached_property
    def latest(self) -> DataFrame:
        return self._keep(inputs.latest_samples(self.require_telemetry("this job").samples))

    @cached_property
    def disks(self) -> DataFrame:
        self.require_telemetry("disks")
        return self._keep(disks.disks(self.cluster.brokers, self.dir_counts, self.latest))

    # -- outputs -------------------------------------------------------------------------------

    def write(self, name: str, frame: DataFrame, *, files: int | None = 1) -> pd.DataFrame:
        path = str(self.options.out / name)
        (frame.coalesce(files) if files else frame).write.mode("overwrite").parquet(path)
        return self.spark.read.parquet(path).toPandas()

    def input_section(self) -> report.Section:
        section = report.Section("Inputs")
        reports = [self.metadata.report] + ([self.telemetry.report] if self.telemetry else [])
        section.facts([(r.source, f"{r.bad_lines} bad line(s) skipped") for r in reports])
        for warning in [*(f"{r.source}: {w}" for r in reports for w in r.warnings), *self.warnings]:
            section.text(warning)
        bad = [
            {
                "source": r.source,
                "file": inputs._short(b.file),
                "line": b.line,
                "offset": b.offset,
                "problem": b.problem,
            }
            for r in reports
            for b in r.examples
        ]
        if bad:
            section.table(pd.DataFrame(bad), "Bad lines (first ones per input)")
        return section

    def write_input_errors(self) -> None:
        reports = [self.metadata.report] + ([self.telemetry.report] if self.telemetry else [])
        data = [
            {
                "source": r.source,
                "badLines": r.bad_lines,
                "warnings": r.warnings,
                "examples": [
                    {"file": inputs._short(b.file), "line": b.line, "offset": b.offset, "problem": b.problem}
                    for b in r.examples
                ],
            }
            for r in reports
        ]
        (self.options.out / "input_errors.json").write_text(
            json.dumps(data, indent=2) + "\n", encoding="utf-8"
        )

    def close(self) -> None:
        for frame in self._persisted:
            frame.unpersist()
        self._persisted.clear()
        for name in ("metadata", "telemetry"):
            read = self.__dict__.get(name)
            if read is not None:
                read.unpersist()


# -- the jobs ------------------------------------------------------------------------------------


def run_disks(run: Run) -> Outcome:
    table = run.write("disks", run.disks)
    section = report.Section("Disks: load per broker and dir")
    known = table["utilisation"].notna()
    threshold = run.options.goals.threshold
    over = table[known & (table["utilisation"] > threshold)]
    section.facts(
        [
            ("dirs", len(table)),
            ("brokers", table["brokerId"].nunique()),
            ("offline dirs", int((table["state"] == "offline").sum())),
            ("full dirs", int((table["state"] == "full").sum())),
            (f"dirs over {threshold:.0%}", len(over)),
            ("largest skew", f"{table['skew'].max():.1%}" if table["skew"].notna().any() else "n/a"),
        ]
    )
    worst = table.sort_values(["utilisation"], ascending=False, na_position="last")
    hot_brokers = worst["brokerId"].drop_duplicates().head(report.HEATMAP_BROKERS).tolist()
    section.figure(
        report.heatmap(
            table[table["brokerId"].isin(hot_brokers)],
            "utilisation",
            title="Utilisation (hottest brokers)",
            vmax=1.0,
            cmap="magma",
        ),
        f"Utilisation of every dir of the {len(hot_brokers)} brokers with the fullest dirs (blank: unknown).",
    )
    if table["brokerId"].nunique() > len(hot_brokers):
        section.figure(
            report.heatmap(table, "utilisation", title="Utilisation (all brokers)", vmax=1.0, cmap="magma"),
            "Every broker, one row each.",
        )
    section.figure(
        report.histogram(
            table["utilisation"], title="Utilisation of dirs", xlabel="utilisation", marker=threshold
        ),
        "How full the dirs are.",
    )
    section.figure(
        report.histogram(table["skew"], title="Skew against the broker's mean", xlabel="skew"),
        "Utilisation minus the mean of the broker's online dirs.",
    )
    section.table(worst, "Fullest dirs")
    skewed = table.reindex(table["skew"].abs().sort_values(ascending=False).index)
    section.table(skewed, "Most skewed dirs")
    return Outcome("disks", f"disks: {len(table)} dirs, {len(over)} over {threshold:.0%}", section)


def run_blast_radius(run: Run) -> Outcome:
    frame = blast_radius.blast_radius(run.cluster.brokers, run.dir_counts)
    table = run.write("blast_radius", frame).sort_values("rank")
    totals = (
        table.groupby("brokerId")[["replicas", "leadersLost", "offlinePartitions", "underMinIsr"]]
        .sum()
        .reset_index()
        .sort_values(
            ["offlinePartitions", "underMinIsr", "leadersLost", "brokerId"],
            ascending=[False, False, False, True],
        )
    )
    section = report.Section("Blast radius: what each dir's failure would do now")
    worst = table.head(1)
    section.facts(
        [
            ("online dirs", len(table)),
            ("dirs whose failure takes partitions offline", int((table["offlinePartitions"] > 0).sum())),
            (
                "dirs whose failure puts partitions under min.insync.replicas",
                int((table["underMinIsr"] > 0).sum()),
            ),
            (
                "worst dir",
                f"broker {int(worst['brokerId'].iloc[0])} dir {worst['directoryId'].iloc[0]}"
                if len(worst)
                else "n/a",
            ),
        ]
    )
    top = table.head(25)
    section.figure(
        report.bars(
            [f"{b}/{d[:6]}" for b, d in zip(top["brokerId"], top["directoryId"], strict=True)],
            {k: top[k].tolist() for k in ("offlinePartitions", "underMinIsr", "leadersLost")},
            title="The 25 worst dirs",
        ),
        "Partitions that would go offline, fall under min.insync.replicas, or lose their leader.",
    )
    hot = totals["brokerId"].head(report.HEATMAP_BROKERS).tolist()
    section.figure(
        report.heatmap(
            table[table["brokerId"].isin(hot)],
            "underMinIsr",
            title="Partitions under min ISR if the dir failed",
            cmap="Reds",
        ),
        "Per dir of the brokers with the largest blast radius.",
    )
    section.table(table, "Ranked dirs")
    section.table(totals, "Totals per broker")
    offline = int(table["offlinePartitions"].max()) if len(table) else 0
    return Outcome(
        "blast-radius",
        f"blast-radius: {len(table)} dirs ranked, worst takes {offline} partition(s) offline",
        section,
    )


@dataclass(slots=True)
class _AcrossBrokers:
    """What the cross-broker pass planned, for plan.json, reassignment.json and the report."""

    plan: cluster_planner.ClusterPlan
    reassignments: list[cluster_planner.Reassignment]
    candidates: int


def _check_drained_brokers(run: Run, drain_brokers: frozenset[int]) -> None:
    """A `--drain-broker` must be registered or host a replica."""
    if not drain_brokers:
        return
    wanted = sorted(drain_brokers)
    registered = {
        int(r["brokerId"])
        for r in run.cluster.brokers.where(F.col("brokerId").isin(wanted)).select("brokerId").collect()
    }
    hosting = {
        int(r["brokerId"])
        for r in run.replicas.where(F.col("brokerId").isin(wanted)).select("brokerId").distinct().collect()
    }
    unknown = [b for b in wanted if b not in registered | hosting]
    if unknown:
        raise JobError(f"--drain-broker {unknown[0]}: no such broker (not registered and hosting no replica)")


def _plan_across_brokers(
    run: Run, result: DataFrame, dirs_after: pd.DataFrame, intra: pd.DataFrame
) -> _AcrossBrokers:
    """The cross-broker pass on the driver: the dirs' bytes after the intra-broker moves (one
    row per dir), the brokers (one row each), and only the candidate replicas (`plan.cross_candidates`)."""
    goals = run.options.goals
    brokers = [
        cluster_planner.Broker(
            int(r["brokerId"]), not r["fenced"] and not r["inControlledShutdown"], r["rack"] or None
        )
        for r in run.cluster.brokers.select("brokerId", "fenced", "inControlledShutdown", "rack").collect()
    ]
    dirs = [
        cluster_planner.BrokerDir(
            broker_id=int(d["brokerId"]),
            directory_id=str(d["directoryId"]),
            state=str(d["state"]),
            used_bytes=int(d["bytesAfter"]),
            total_bytes=None if pd.isna(d["totalBytes"]) else int(d["totalBytes"]),
        )
        for d in dirs_after.to_dict("records")
    ]
    sources = sorted(cluster_planner.source_dirs(dirs, brokers, goals))
    source_frame = run.spark.createDataFrame(sources, "brokerId int, directoryId string")
    moved = result.where(F.col("kind") == "move").select(
        F.col("brokerId").cast("int").alias("brokerId"),
        "topic",
        F.col("partition").cast("int").alias("partition"),
    )
    rows = plan.cross_candidates(
        run.cluster.partitions, run.latest, source_frame, moved, drain_brokers=goals.drain_brokers
    ).collect()
    candidates = [
        cluster_planner.Candidate(
            topic=str(r["topic"]),
            topic_id=str(r["topicId"]),
            partition=int(r["partition"]),
            broker_id=int(r["brokerId"]),
            directory_id=str(r["directoryId"]),
            size_bytes=None if r["sizeBytes"] is None else int(r["sizeBytes"]),
            replicas=tuple(int(b) for b in r["replicas"]),
        )
        for r in rows
    ]
    planned = cluster_planner.plan_cluster(dirs, brokers, candidates, goals)
    # The partitions' dirs in replica order, after the intra-broker moves.
    moved_within = {
        (str(m["topic"]), int(m["partition"]), int(m["brokerId"])): str(m["toDirectoryId"])
        for m in intra.to_dict("records")
    }
    directories = {
        (str(r["topic"]), int(r["partition"])): [
            moved_within.get((str(r["topic"]), int(r["partition"]), int(b)), str(d))
            for b, d in zip(r["replicas"], r["directories"], strict=True)
        ]
        for r in rows
    }
    lists = cluster_planner.reassignments(candidates, directories, planned.moves)
    return _AcrossBrokers(planned, lists, len(candidates))


def _write_json(path: Path, document: object) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
    os.replace(tmp, path)


def run_plan(run: Run) -> Outcome:
    goals = run.options.goals
    if goals.across_brokers:
        _check_drained_brokers(run, goals.drain_brokers)
    result = run._keep(plan.moves(run.disks, plan.planner_rows(run.replicas, run.latest), goals))
    dirs = run.disks.select(
        "brokerId", "directoryId", "state", "bytes", "totalBytes", "utilisation"
    ).toPandas()
    across: _AcrossBrokers | None = None
    across_rows = None
    if goals.across_brokers:
        intra = plan.table(result).toPandas()
        across = _plan_across_brokers(run, result, utilisation_after(dirs, intra), intra)
        across_rows = run.spark.createDataFrame(
            [
                (
                    m.topic,
                    m.partition,
                    m.from_broker,
                    m.from_dir,
                    m.to_dir,
                    m.size_bytes,
                    m.to_broker,
                    plan.CROSS_BROKER,
                    m.reason,
                    step,
                )
                for step, m in enumerate(across.plan.moves)
            ],
            "topic string, partition int, brokerId int, fromDirectoryId string, toDirectoryId string, "
            "bytes long, toBrokerId int, kind string, reason string, step int",
        )
    moves = run.write("plan", plan.table(result, across_rows))
    if across is None:
        issues = (
            result.where(F.col("kind") != "move")
            .select("brokerId", "kind", F.col("fromDirectoryId").alias("directoryId"), "detail")
            .orderBy("brokerId", "directoryId")
            .toPandas()
        )
    else:
        # The cross-broker pass took over the drains and the capacity and balance goals: its
        # unplaced replicas and unmet goals are the plan's.
        issues = pd.DataFrame(
            [
                {
                    "brokerId": u.broker_id,
                    "kind": f"unplaced ({u.reason})",
                    "directoryId": u.directory_id,
                    "detail": f"{u.topic}-{u.partition}: {u.detail}",
                }
                for u in across.plan.unplaced
            ]
            + [
                {"brokerId": i.broker_id, "kind": i.kind, "directoryId": i.directory_id, "detail": i.detail}
                for i in across.plan.issues
            ],
            columns=["brokerId", "kind", "directoryId", "detail"],
        )
    intra_moves = moves[moves["kind"] == plan.INTRA_BROKER] if len(moves) else moves
    document: dict[str, object] = {
        "version": PLAN_VERSION if across is None else PLAN_VERSION_ACROSS_BROKERS,
        "threshold": goals.threshold,
        "balanceMargin": goals.balance_margin,
        "drain": sorted(goals.drain),
        "moves": [
            {
                "topic": str(m["topic"]),
                "partition": int(m["partition"]),
                "brokerId": int(m["brokerId"]),
                "fromDirectoryId": str(m["fromDirectoryId"]),
                "toDirectoryId": str(m["toDirectoryId"]),
                "bytes": int(m["bytes"]),
            }
            for m in intra_moves.to_dict("records")
        ],
    }
    reassignments = [] if across is None else across.reassignments
    paths = (
        {
            (int(r["brokerId"]), str(r["directoryId"])): str(r["path"])
            for r in run.latest.select("brokerId", "directoryId", "path").collect()
        }
        if reassignments
        else {}
    )
    if across is not None:
        document |= {
            "acrossBrokers": True,
            "drainBrokers": sorted(goals.drain_brokers),
            "brokerMoves": [
                {
                    "topic": m.topic,
                    "topicId": m.topic_id,
                    "partition": m.partition,
                    "fromBrokerId": m.from_broker,
                    "fromDirectoryId": m.from_dir,
                    "toBrokerId": m.to_broker,
                    "toDirectoryId": m.to_dir,
                    "bytes": m.size_bytes,
                    "reason": m.reason,
                }
                for m in across.plan.moves
            ],
            "reassignments": [
                {
                    "topic": r.topic,
                    "topicId": r.topic_id,
                    "partition": r.partition,
                    "replicas": list(r.replicas),
                    "logDirs": list(r.directories),
                    "originalReplicas": list(r.original_replicas),
                }
                for r in reassignments
            ],
            "unplaced": [
                {
                    "topic": u.topic,
                    "topicId": u.topic_id,
                    "partition": u.partition,
                    "brokerId": u.broker_id,
                    "directoryId": u.directory_id,
                    "bytes": u.size_bytes,
                    "reason": u.reason,
                    "detail": u.detail,
                }
                for u in across.plan.unplaced
            ],
            "goalsNotMet": [
                {"brokerId": i.broker_id, "directoryId": i.directory_id, "kind": i.kind, "detail": i.detail}
                for i in across.plan.issues
            ],
        }
    _write_json(run.options.out / "plan.json", document)
    _write_json(
        run.options.out / "reassignment.json", cluster_planner.kafka_reassignment_file(reassignments, paths)
    )
    after = utilisation_after(dirs, moves)
    section = report.Section(
        "Plan: intra-broker moves" if across is None else "Plan: moves within and across brokers"
    )
    cross = moves[moves["kind"] == plan.CROSS_BROKER] if len(moves) else moves
    facts: list[tuple[str, object]] = [
        ("moves", len(moves)),
        ("bytes to move", f"{int(moves['bytes'].sum()) if len(moves) else 0:,}"),
        ("brokers touched", moves["brokerId"].nunique() if len(moves) else 0),
        ("threshold", f"{goals.threshold:.0%}"),
        ("balance margin", f"{goals.balance_margin:.0%}"),
        ("drained dirs", ", ".join(sorted(goals.drain)) or "none"),
    ]
    if across is not None:
        facts += [
            ("moves across brokers (reassignments)", f"{len(cross)} ({len(reassignments)} partition(s))"),
            ("bytes across brokers", f"{int(cross['bytes'].sum()) if len(cross) else 0:,}"),
            ("drained brokers", ", ".join(str(b) for b in sorted(goals.drain_brokers)) or "none"),
            ("candidate replicas read by the driver", across.candidates),
            ("replicas left unplaced", len(across.plan.unplaced)),
        ]
    facts += [
        (f"dirs over {goals.threshold:.0%} before", int((dirs["utilisation"] > goals.threshold).sum())),
        (f"dirs over {goals.threshold:.0%} after", int((after["utilisationAfter"] > goals.threshold).sum())),
        ("goals not met", len(issues)),
    ]
    section.facts(facts)
    section.figure(
        report.before_after(
            after["utilisation"],
            after["utilisationAfter"],
            title="Utilisation before and after",
            threshold=goals.threshold,
        ),
        "Every dir with a known capacity.",
    )
    if len(moves):
        section.figure(
            report.heatmap(
                after[
                    after["brokerId"].isin(
                        moves.groupby("brokerId")["bytes"].sum().nlargest(report.HEATMAP_BROKERS).index
                    )
                ],
                "utilisationAfter",
                title="Utilisation after the plan (brokers moving the most)",
                vmax=1.0,
                cmap="magma",
            ),
            "Per dir after the moves.",
        )
    section.table(moves, "Moves")
    if len(issues):
        section.table(issues, "Goals not met")
    summary = f"plan: {len(moves)} move(s) on {moves['brokerId'].nunique() if len(moves) else 0} broker(s)"
    if across is not None:
        summary += f", {len(cross)} across brokers"
        if across.plan.unplaced:
            summary += f", {len(across.plan.unplaced)} replica(s) unplaced"
    if len(issues):
        summary += f", {len(issues)} goal(s) not met"
        run.log(
            f"{len(issues)} goal(s) not met, e.g. broker {int(issues['brokerId'].iloc[0])} dir {issues['directoryId'].iloc[0]}: {issues['kind'].iloc[0]}: {issues['detail'].iloc[0]}"
        )
    return Outcome("plan", summary, section)


def utilisation_after(dirs: pd.DataFrame, moves: pd.DataFrame) -> pd.DataFrame:
    """`dirs` (brokerId, directoryId, bytes, totalBytes, utilisation) with `bytesAfter` and
    `utilisationAfter` once `moves` (the plan table: bytes leave `brokerId`'s `fromDirectoryId`
    and arrive in `toBrokerId`'s `toDirectoryId`) have run."""
    out = dirs.copy()
    delta = pd.Series(0, index=pd.MultiIndex.from_frame(out[["brokerId", "directoryId"]]), dtype="int64")
    if len(moves):
        leaving = moves.groupby(["brokerId", "fromDirectoryId"])["bytes"].sum()
        arriving = moves.groupby(["toBrokerId", "toDirectoryId"])["bytes"].sum()
        delta = delta.sub(leaving.rename_axis(["brokerId", "directoryId"]), fill_value=0)
        delta = delta.add(arriving.rename_axis(["brokerId", "directoryId"]), fill_value=0)
    keys = pd.MultiIndex.from_frame(out[["brokerId", "directoryId"]])
    out["bytesAfter"] = out["bytes"].to_numpy() + delta.reindex(keys).fillna(0).to_numpy()
    total = out["totalBytes"].astype("float64")
    out["utilisationAfter"] = (out["bytesAfter"] / total).where(total > 0)
    return out


def run_timeline(run: Run) -> Outcome:
    table = run.write("timeline", timeline.timeline(run.metadata.records))
    section = report.Section("Timeline: incidents in the metadata log")
    counts = table["type"].value_counts()
    section.facts(
        [
            (kind, int(counts.get(kind, 0)))
            for kind in ("dir-offline", "broker-fenced", "broker-unfenced", "leader-change")
        ]
    )
    if len(table):
        shown = (
            table if len(table) <= 200_000 else table.sample(200_000, random_state=0).sort_values("offset")
        )
        section.figure(
            report.timeline_scatter(shown, title="Incidents by metadata offset"), "One dot per incident."
        )
    section.table(table[table["type"] != "leader-change"], "Dir and broker incidents")
    section.table(table[table["type"] == "leader-change"], "Leader changes")
    return Outcome("timeline", f"timeline: {len(table)} incident(s)", section)


JOBS: dict[str, Callable[[Run], Outcome]] = {
    "disks": run_disks,
    "blast-radius": run_blast_radius,
    "plan": run_plan,
    "timeline": run_timeline,
}


def execute(
    spark: SparkSession, options: Options, jobs: Sequence[str], *, log: Callable[[str], None]
) -> list[Outcome]:
    """Run `jobs` (names of `JOBS`) into `options.out`; returns what each wrote."""
    options.out.mkdir(parents=True, exist_ok=True)
    run = Run(spark, options)
    run.log = log
    try:
        _ = run.metadata  # read (and check) before any job
        if options.telemetry is not None:
            _ = run.telemetry
        outcomes = [JOBS[job](run) for job in jobs]
        run.write_input_errors()
        sections = [run.input_section(), *(o.section for o in outcomes)]
        page = report.render(f"jbod-pipeline: {', '.join(jobs)}", sections)
        (options.out / "report.html").write_text(page, encoding="utf-8")
        return outcomes
    finally:
        run.close()


# -- a topic through Spark's Kafka source (`topic-stats`) ------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicSource:
    """One topic of the brokers' Kafka listeners, and who reads it."""

    bootstrap: tuple[str, ...]
    security: kafka_config.KafkaSecurity
    topic: str


def _write_table(spark: SparkSession, frame: DataFrame, path: Path) -> pd.DataFrame:
    frame.coalesce(1).write.mode("overwrite").parquet(str(path))
    return spark.read.parquet(str(path)).toPandas()


def execute_topic_stats(spark: SparkSession, source: TopicSource, out: Path) -> Outcome:
    """Read all of `source.topic` with `spark.read.format("kafka")` and write what it holds to `out`."""
    out.mkdir(parents=True, exist_ok=True)
    options = kafka_source.read_options(
        bootstrap=source.bootstrap, security=source.security, topic=source.topic
    )
    sized: DataFrame | None = None
    try:
        records = spark.read.format("kafka").options(**options).load()
        sized = topic_stats.sized(records).persist(StorageLevel.MEMORY_AND_DISK)
        partitions = _write_table(spark, topic_stats.partitions(sized), out / "topic_partitions")
        keys = _write_table(spark, topic_stats.keys(sized), out / "topic_keys")
    except Exception as exc:  # a Py4J or Spark error carrying the Java exception's text
        line = kafka_source.describe_failure(
            str(exc), topic=source.topic, bootstrap=source.bootstrap, who=source.security.describe()
        )
        if line is None:
            raise
        raise kafka_source.TopicReadError(line) from None
    finally:
        if sized is not None:
            sized.unpersist()
    records_read = int(partitions["records"].sum())
    total_bytes = int(partitions["keyBytes"].sum() + partitions["valueBytes"].sum())
    keyed = int(keys["key"].notna().sum())
    section = report.Section(f"Topic {source.topic}: read by Spark's Kafka source")
    section.facts(
        [
            ("bootstrap servers", ",".join(source.bootstrap)),
            ("read as", source.security.describe()),
            ("records", f"{records_read:,}"),
            ("bytes (keys and values)", f"{total_bytes:,}"),
            ("partitions holding records", len(partitions)),
            ("distinct keys", keyed),
            ("records without a key", int(keys.loc[keys["key"].isna(), "records"].sum())),
        ]
    )
    if len(partitions):
        section.figure(
            report.bars(
                [str(p) for p in partitions["partition"]],
                {"records": partitions["records"].tolist()},
                title="Records per partition",
            ),
            "Records read from each partition (earliest to latest offset).",
        )
    section.table(partitions, "Partitions")
    section.table(keys, "Keys (most records first)")
    page = report.render(f"jbod-pipeline: topic-stats {source.topic}", [section])
    (out / "report.html").write_text(page, encoding="utf-8")
    summary = (
        f"topic-stats: {source.topic}: {records_read} record(s), {total_bytes} byte(s) in "
        f"{len(partitions)} partition(s), {keyed} key(s)"
    )
    return Outcome("topic-stats", summary, section)
