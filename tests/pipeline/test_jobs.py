"""Every job against the independent computation (`reference`) on generated clusters with
offline dirs, LOST and UNASSIGNED placements, fenced and unregistered brokers and skewed disks."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from jbod_pipeline import jobs, planner
from tests.pipeline import reference
from tests.pipeline.conftest import Computed, Generated, same_value


def _run(
    spark: SparkSession, tmp_path: Path, metadata: Path, telemetry: Path | None, **goals: Any
) -> jobs.Run:
    options = jobs.Options(
        metadata=str(metadata),
        telemetry=None if telemetry is None else str(telemetry),
        out=tmp_path,
        goals=planner.Goals(**goals),
    )
    return jobs.Run(spark, options)


def _table(computed: Computed, name: str) -> list[dict[str, Any]]:
    """A table the jobs wrote, as rows in the order of its file."""
    rows: list[dict[str, Any]] = pq.read_table(computed.out / name).to_pylist()
    return rows


def test_replayed_state_matches_the_controllers_image(computed: Computed) -> None:
    image = reference.replay(computed.generated.metadata)
    brokers = computed.brokers
    assert set(brokers) == set(image.brokers)
    for broker_id, reg in image.brokers.items():
        row = brokers[broker_id]
        assert row["fenced"] == reg.fenced
        assert sorted(row["logDirs"]) == sorted(str(d) for d in reg.log_dirs)
        assert sorted(row["offlineLogDirs"]) == sorted(str(d) for d in reg.offline_log_dirs)
        assert row["brokerEpoch"] == reg.broker_epoch
    parts = computed.partitions
    expected = dict(image.iter_partitions())
    assert set(parts) == {(str(t), i) for t, i in expected}
    for (topic_id, index), part in expected.items():
        row = parts[(str(topic_id), index)]
        assert tuple(row["replicas"]) == part.replicas
        assert tuple(row["isr"]) == part.isr
        assert row["leader"] == part.leader
        assert row["leaderEpoch"] == part.leader_epoch
        assert row["partitionEpoch"] == part.partition_epoch
        assert tuple(row["directories"]) == tuple(str(d) for d in part.directories)
        assert row["minIsr"] == int(image.topics[topic_id].configs.get("min.insync.replicas", "1"))
    assert computed.orphans == 0


def test_disks_match_the_reference(computed: Computed) -> None:
    generated = computed.generated
    expected = reference.disks(
        reference.replay(generated.metadata), reference.latest_samples(generated.telemetry)
    )
    table = _table(computed, "disks")
    rows = {(r["brokerId"], r["directoryId"]): r for r in table}
    assert len(rows) == len(table), "one row per dir"
    assert set(rows) == set(expected)
    states = Counter(r["state"] for r in rows.values())
    assert states["offline"] and states["online"]  # the generated clusters exercise both
    for key, want in expected.items():
        got = rows[key]
        for column in ("state", "replicas", "leaders", "bytes", "totalBytes"):
            assert got[column] == want[column], (key, column)
        assert same_value(got["utilisation"], want["utilisation"]), key
        assert same_value(got["skew"], want["skew"]), key


def test_blast_radius_matches_the_reference(computed: Computed) -> None:
    expected = reference.blast_radius(reference.replay(computed.generated.metadata))
    got = {(r["brokerId"], r["directoryId"]): r for r in _table(computed, "blast_radius")}
    assert set(got) == set(expected)
    for key, want in expected.items():
        for column in ("replicas", "leadersLost", "offlinePartitions", "underMinIsr"):
            assert got[key][column] == getattr(want, column), (key, column)
    assert sum(w.offlinePartitions + w.underMinIsr for w in expected.values()) > 0
    ranked = sorted(got.values(), key=lambda r: r["rank"])
    assert [r["rank"] for r in ranked] == list(range(1, len(ranked) + 1))
    keys = [(-r["offlinePartitions"], -r["underMinIsr"], -r["leadersLost"]) for r in ranked]
    assert keys == sorted(keys)


def test_timeline_matches_the_reference(computed: Computed) -> None:
    name = computed.generated.name
    expected = reference.timeline(computed.generated.metadata)
    got = [
        (r["offset"], r["type"], r["brokerId"], r["directoryId"], r["topic"], r["partition"], r["detail"])
        for r in _table(computed, "timeline")
    ]
    assert got == expected  # in the job's order, as written
    # The generated logs hold dirs that were online (registered) before failing: one that stays
    # offline, one that comes back and, in "skewed", one that fails a second time.
    offline = [r for r in expected if r[1] == "dir-offline"]
    assert any(r[6] == "still offline" for r in offline)
    assert any(r[6].startswith("online again at offset") for r in offline)
    if name == "skewed":
        assert len({(r[2], r[3]) for r in offline}) < len(offline), "a dir fails twice"
    assert {r[1] for r in expected} == {"dir-offline", "broker-fenced", "broker-unfenced", "leader-change"}


def _apply(
    state: dict[tuple[int, str], dict[str, Any]], moves: list[dict[str, Any]]
) -> dict[tuple[int, str], int]:
    used = {k: v["bytes"] for k, v in state.items()}
    for m in moves:
        used[(m["brokerId"], m["fromDirectoryId"])] -= m["bytes"]
        used[(m["brokerId"], m["toDirectoryId"])] += m["bytes"]
    return used


def test_plan_meets_the_goals_on_the_generated_state(computed: Computed) -> None:
    threshold = planner.DEFAULT_THRESHOLD
    image = reference.replay(computed.generated.metadata)
    latest = reference.latest_samples(computed.generated.telemetry)
    state = reference.disks(image, latest)
    document = computed.plan()
    moves = document["moves"]
    assert moves, computed.plan_summary
    assert document["version"] == jobs.PLAN_VERSION
    # Where each replica sits according to the metadata, and its size according to telemetry.
    placed = {}
    for (topic_id, index), part in image.iter_partitions():
        for broker, directory in zip(part.replicas, part.directories, strict=True):
            placed[(image.topics[topic_id].name, index, broker)] = str(directory)
    sizes = {
        (r["topic"], r["partition"], b): r["sizeBytes"]
        for (b, _d), s in latest.items()
        for r in s["replicas"]
    }
    seen = set()
    for m in moves:
        key = (m["topic"], m["partition"], m["brokerId"])
        assert key not in seen, "a replica moves at most once"
        seen.add(key)
        assert placed[key] == m["fromDirectoryId"], "moves start where the metadata places the replica"
        assert m["bytes"] == sizes[key]
        target = state[(m["brokerId"], m["toDirectoryId"])]
        assert target["state"] == "online", "never to an offline or full dir"
        assert state[(m["brokerId"], m["fromDirectoryId"])]["state"] in ("online", "full")
    used = _apply(state, moves)
    for key, row in state.items():
        if row["totalBytes"]:
            after = used[key] / row["totalBytes"]
            before = row["utilisation"]
            if row["state"] == "online" and before <= threshold:
                assert after <= threshold + 1e-9, "no move pushes a dir over the threshold"
            if before > threshold and row["state"] != "offline":
                # Either fixed, or nothing else on the broker had room (reported).
                room = [
                    threshold * r["totalBytes"] - used[k]
                    for k, r in state.items()
                    if k[0] == key[0] and k != key and r["state"] == "online" and r["totalBytes"]
                ]
                smallest = min(
                    (
                        s
                        for (t, p, b), s in sizes.items()
                        if b == key[0] and placed.get((t, p, b)) == key[1] and (t, p, b) not in seen
                    ),
                    default=None,
                )
                assert after <= threshold + 1e-9 or smallest is None or smallest > max(room, default=0)


def test_drain_empties_the_named_dir(spark: SparkSession, tmp_path: Path) -> None:
    from jbod_pipeline import synthetic

    spec = synthetic.ClusterSpec(
        brokers=3,
        dirs_per_broker=4,
        partitions=200,
        topics=2,
        offline_dirs=0,
        fenced_brokers=0,
        skewed_dirs=0,
        telemetry_missing_dirs=0,
        lost_fraction=0,
        unassigned_fraction=0,
        mean_utilisation=0.3,
    )
    metadata, telemetry = tmp_path / "m.jsonl", tmp_path / "t.jsonl"
    synthetic.generate(spec, seed=5, metadata=metadata, telemetry=telemetry)
    image = reference.replay(metadata)
    broker = 2
    drained = str(sorted(image.brokers[broker].log_dirs)[0])
    hosted = {
        (image.topics[t].name, i)
        for (t, i), p in image.iter_partitions()
        if broker in p.replicas and str(p.directory_of(broker)) == drained
    }
    (tmp_path / "out").mkdir()
    run = _run(spark, tmp_path / "out", metadata, telemetry, drain=frozenset({drained}), balance=False)
    try:
        jobs.run_plan(run)
    finally:
        run.close()
    moves = json.loads((tmp_path / "out" / "plan.json").read_text())["moves"]
    out_of_drained = {(m["topic"], m["partition"]) for m in moves if m["fromDirectoryId"] == drained}
    assert out_of_drained == hosted
    assert all(m["toDirectoryId"] != drained for m in moves)
    assert all(m["brokerId"] == broker for m in moves if m["fromDirectoryId"] == drained)


def test_plan_is_deterministic(
    spark: SparkSession, compute: Callable[[str], Computed], tmp_path: Path
) -> None:
    """The same inputs give the same plan, however Spark splits the work: a second run of the
    skewed cluster, with other scan splits and shuffle partitions than the first, writes the same
    plan.json byte for byte."""
    computed = compute("skewed")
    generated = computed.generated
    settings = {"spark.sql.shuffle.partitions": "5", "spark.sql.files.maxPartitionBytes": "16k"}
    for key, value in settings.items():
        spark.conf.set(key, value)
    run = _run(spark, tmp_path, generated.metadata, generated.telemetry)
    try:
        assert run.metadata.cache.rdd.getNumPartitions() > 2  # not split as in the first run
        jobs.run_plan(run)
    finally:
        run.close()
        for key in settings:
            spark.conf.unset(key)
    assert (tmp_path / "plan.json").read_text() == (computed.out / "plan.json").read_text()


def test_across_brokers_plan_drains_a_broker_and_keeps_the_rules(
    spark: SparkSession, generate: Callable[[str], Generated], tmp_path: Path
) -> None:
    skewed = generate("skewed")
    metadata, telemetry = skewed.metadata, skewed.telemetry
    image = reference.replay(metadata)
    state = reference.disks(image, reference.latest_samples(telemetry))
    threshold = planner.DEFAULT_THRESHOLD
    usable = {b for b, reg in image.brokers.items() if reg.is_active}
    drained = min(usable)
    placed: dict[tuple[str, int], list[tuple[int, str]]] = {}
    for (topic_id, index), part in image.iter_partitions():
        placed[(image.topics[topic_id].name, index)] = [
            (b, str(d)) for b, d in zip(part.replicas, part.directories, strict=True)
        ]
    out = tmp_path / "out"
    out.mkdir()
    run = _run(spark, out, metadata, telemetry, across_brokers=True, drain_brokers=frozenset({drained}))
    try:
        summary = jobs.run_plan(run).summary
        with pytest.raises(jobs.JobError, match="--drain-broker 99: no such broker"):
            jobs._check_drained_brokers(run, frozenset({99}))
    finally:
        run.close()
    document = json.loads((out / "plan.json").read_text())
    kafka = json.loads((out / "reassignment.json").read_text())
    assert document["version"] == 2 and document["drainBrokers"] == [drained], summary
    cross, intra = document["brokerMoves"], document["moves"]
    assert cross, summary
    moved = Counter(
        [(m["topic"], m["partition"], m["brokerId"]) for m in intra]
        + [(m["topic"], m["partition"], m["fromBrokerId"]) for m in cross]
    )
    assert max(moved.values()) == 1, "a replica moves at most once"
    assert all(m["brokerId"] != drained for m in intra), "a drained broker gets no intra-broker move"
    for m in cross:
        assert (m["fromBrokerId"], m["fromDirectoryId"]) in placed[(m["topic"], m["partition"])]
        assert m["toBrokerId"] in usable and m["toBrokerId"] != drained, "only usable brokers are targets"
        assert state[(m["toBrokerId"], m["toDirectoryId"])]["state"] == "online"
    # The drained broker ends empty, or what stays is listed with its reason.
    left = {(u["topic"], u["partition"]) for u in document["unplaced"] if u["brokerId"] == drained}
    hosted = {key for key, replicas in placed.items() if any(b == drained for b, _ in replicas)}
    assert left | {(m["topic"], m["partition"]) for m in cross if m["fromBrokerId"] == drained} == hosted
    assert all(u["reason"] in ("size-unknown", "no-broker", "no-room") for u in document["unplaced"])
    # No dir pushed over the threshold.
    used = {k: r["bytes"] for k, r in state.items()}
    for m in intra:
        used[(m["brokerId"], m["fromDirectoryId"])] -= m["bytes"]
        used[(m["brokerId"], m["toDirectoryId"])] += m["bytes"]
    for m in cross:
        used[(m["fromBrokerId"], m["fromDirectoryId"])] = (
            used.get((m["fromBrokerId"], m["fromDirectoryId"]), 0) - m["bytes"]
        )
        used[(m["toBrokerId"], m["toDirectoryId"])] += m["bytes"]
    for key, row in state.items():
        if row["totalBytes"] and row["utilisation"] <= threshold:
            assert used[key] <= threshold * row["totalBytes"] + 1e-6, key
    # The reassignments: one per partition touched, one replica per broker, in Kafka's format too.
    assert len(document["reassignments"]) == len({(m["topic"], m["partition"]) for m in cross})
    by_partition = {(p["topic"], p["partition"]): p for p in kafka["partitions"]}
    assert kafka["version"] == 1 and len(by_partition) == len(document["reassignments"])
    for r in document["reassignments"]:
        before = [b for b, _ in placed[(r["topic"], r["partition"])]]
        assert r["originalReplicas"] == before and len(r["replicas"]) == len(set(r["replicas"])) == len(
            before
        )
        assert drained not in r["replicas"]
        entry = by_partition[(r["topic"], r["partition"])]
        assert entry["replicas"] == r["replicas"] and len(entry["log_dirs"]) == len(before)
        for old, new, path in zip(before, r["replicas"], entry["log_dirs"], strict=True):
            assert (path == "any") == (old == new), "a new replica names its dir's path, a staying one 'any'"
    table = run.spark.read.parquet(str(out / "plan")).toPandas()
    assert Counter(table["kind"]) == {"intra-broker": len(intra), "cross-broker": len(cross)}
