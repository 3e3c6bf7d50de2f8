"""Bad input is reported with its line and skipped (or rejected with --strict), never used."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from jbod_cli import metadata_parquet
from jbod_core.image import ClusterImage
from jbod_pipeline import inputs, jobs, replay, schemas
from tests.pipeline import reference
from tests.pipeline.conftest import Generated

DIR_A = "ECfE0cOGu8QeL-uJQUw0PA"
DIR_B = "YS52lqbOzBs1v5ktyenGFg"
TOPIC = "kbdYSiJlsfXNYT4w2PFq3w"
INC = "ws5vRH7U1Xt45RBhcxHYow"


def _line(offset: int, record_type: str, data: dict[str, object]) -> str:
    return json.dumps({"offset": offset, "type": record_type, "data": data})


GOOD = [
    _line(
        0,
        "RegisterBrokerRecord",
        {"brokerId": 1, "brokerEpoch": 0, "incarnationId": INC, "logDirs": [DIR_A, DIR_B]},
    ),
    _line(1, "TopicRecord", {"name": "t", "topicId": TOPIC, "configs": {"min.insync.replicas": "2"}}),
    _line(
        2,
        "PartitionRecord",
        {
            "topicId": TOPIC,
            "partitionId": 0,
            "replicas": [1],
            "isr": [1],
            "leader": 1,
            "leaderEpoch": 0,
            "partitionEpoch": 0,
            "directories": [DIR_A],
        },
    ),
]

BAD = {
    "not json {": "not a JSON object with offset, type and data",
    "[1, 2]": "not a JSON object with offset, type and data",
    json.dumps({"type": "TopicRecord", "data": {}}): "offset is missing or not a non-negative integer",
    json.dumps(
        {"offset": "x", "type": "TopicRecord", "data": {}}
    ): "offset is missing or not a non-negative integer",
    _line(9, "HeartbeatRecord", {"brokerId": 1}): "unknown record type 'HeartbeatRecord'",
    json.dumps({"offset": 9, "type": "TopicRecord"}): "data is missing or not a JSON object",
    _line(9, "TopicRecord", {"topicId": TOPIC}): "TopicRecord field name is missing or malformed",
    _line(
        9, "PartitionChangeRecord", {"topicId": TOPIC, "partitionId": 0, "partitionEpoch": 1, "leader": "2"}
    ): "PartitionChangeRecord field leader has the wrong type",
    _line(
        9, "PartitionChangeRecord", {"topicId": TOPIC, "partitionId": 0, "partitionEpoch": 1, "isr": [1, "x"]}
    ): "PartitionChangeRecord field isr has the wrong type",
    _line(9, "RemoveTopicRecord", {"topicId": "not-a-uuid"}): "RemoveTopicRecord field topicId is not a Uuid",
    _line(
        9,
        "PartitionRecord",
        {
            "topicId": TOPIC,
            "partitionId": 1,
            "replicas": [1, 2],
            "isr": [1],
            "leader": 1,
            "leaderEpoch": 0,
            "partitionEpoch": 0,
            "directories": [DIR_A],
        },
    ): "PartitionRecord directories and replicas differ in length",
}


def test_bad_metadata_lines_are_reported_with_their_line_and_skipped(
    spark: SparkSession, tmp_path: Path
) -> None:
    lines = [*GOOD, "", *BAD]
    path = tmp_path / "export.jsonl"
    path.write_text("\n".join(lines) + "\n")
    read = inputs.read_metadata(spark, str(path))
    assert read.report.bad_lines == len(BAD)
    got = {(b.line, b.problem) for b in read.report.examples}
    want = {(lines.index(text) + 1, problem) for text, problem in BAD.items()}
    assert got == want
    good = read.records.collect()
    assert [r["offset"] for r in sorted(good, key=lambda r: r["pos"])] == [0, 1, 2]
    frames = replay.replay(read.records)
    assert frames.partitions.count() == 1


def test_typed_parquet_reports_the_same_bad_records_as_json_lines(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A record that does not fit the typed columns is kept as JSON text and checked as a JSON
    line: the same problems, on the same row numbers, and the same good records."""
    objects = [json.loads(text) for text in [*GOOD, *BAD] if text.startswith("{")]
    lines = [json.dumps(o) for o in objects]
    (tmp_path / "export.jsonl").write_text("\n".join(lines) + "\n")
    metadata_parquet.write(objects, tmp_path / "export.parquet")
    reads = [inputs.read_metadata(spark, str(tmp_path / name)) for name in ("export.jsonl", "export.parquet")]
    from_lines, from_parquet = ({(b.line, b.problem) for b in r.report.examples} for r in reads)
    assert from_parquet == from_lines
    assert len(from_lines) == len(objects) - len(GOOD) and from_parquet
    good = [
        sorted(
            json.dumps(row.asDict(recursive=True), sort_keys=True)
            for row in r.records.drop("file", "pos").collect()
        )
        for r in reads
    ]
    assert good[0] == good[1] and len(good[0]) == len(GOOD)


def test_typed_parquet_columns_have_the_declared_types(spark: SparkSession, tmp_path: Path) -> None:
    """The exporter's columns (jbod_client) and the reader's schema (jbod_pipeline) agree."""
    metadata_parquet.write([json.loads(GOOD[0])], tmp_path / "m.parquet")
    read = spark.read.parquet(str(tmp_path / "m.parquet")).schema
    for field in schemas.RECORD_DATA.fields:
        assert read[field.name].dataType.simpleString() == field.dataType.simpleString(), field.name


def test_a_parquet_export_missing_a_typed_column_is_one_error(spark: SparkSession, tmp_path: Path) -> None:
    metadata_parquet.write([json.loads(GOOD[0])], tmp_path / "full.parquet")
    table = pq.read_table(tmp_path / "full.parquet").drop_columns(["leaderEpoch"])
    pq.write_table(table, tmp_path / "m.parquet")
    with pytest.raises(inputs.InputError, match="the Parquet export has no column leaderEpoch"):
        inputs.read_metadata(spark, str(tmp_path / "m.parquet"))


def test_line_numbers_are_exact_across_many_splits(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    lines = [_line(i, "TopicRecord", {"name": f"t{i}", "topicId": TOPIC}) for i in range(3000)]
    broken = {17, 1234, 2999}
    for n in broken:
        lines[n - 1] = "garbage"
    path.write_text("\n".join(lines) + "\n")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "16k")
    try:
        read = inputs.read_metadata(spark, str(path))
        numbered = read.records.select("offset", "pos").collect()
        splits = read.cache.where("problem IS NOT NULL").select("_pid").distinct().count()
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    assert splits == len(broken), "each broken line is read in another split"
    assert {b.line for b in read.report.examples} == broken
    by_position = [r["offset"] for r in sorted(numbered, key=lambda r: r["pos"])]
    assert by_position == sorted(by_position) and len(by_position) == 3000 - len(broken)


@pytest.mark.parametrize("layout", ["typed", "json-text"])
def test_parquet_export_reads_like_json_lines(
    spark: SparkSession, generate: Callable[[str], Generated], tmp_path: Path, layout: str
) -> None:
    """Both Parquet layouts: the typed one of `jbodctl metadata export --format parquet` and the
    earlier one (`offset`, `type`, `data` as JSON text), which is still read."""
    metadata = generate("skewed").metadata
    rows = [json.loads(line) for line in metadata.read_text().splitlines()]
    if layout == "typed":
        metadata_parquet.write(rows, tmp_path / "export.parquet")
        assert pq.read_table(tmp_path / "export.parquet").column("data").null_count == len(rows)
    else:
        table = pa.table(
            {
                "offset": pa.array([r["offset"] for r in rows], pa.int64()),
                "type": pa.array([r["type"] for r in rows], pa.string()),
                "data": pa.array([json.dumps(r["data"]) for r in rows], pa.string()),
            }
        )
        pq.write_table(table, tmp_path / "export.parquet")
    from_parquet = inputs.read_metadata(spark, str(tmp_path / "export.parquet"))
    assert from_parquet.report.bad_lines == 0
    image = reference.replay(metadata)
    parts = replay.replay(from_parquet.records).partitions.select("topicId", "partition", "leader").collect()
    assert {(r["topicId"], r["partition"]): r["leader"] for r in parts} == {
        (str(t), i): p.leader for (t, i), p in image.iter_partitions()
    }


def test_a_snapshot_export_replays_to_the_same_state(
    spark: SparkSession, generate: Callable[[str], Generated], tmp_path: Path
) -> None:
    """An export that starts with a snapshot: image records all at one offset, then the log."""
    metadata = generate("skewed").metadata
    lines = metadata.read_text().splitlines()
    head, tail = lines[: len(lines) // 2], lines[len(lines) // 2 :]
    image = ClusterImage()
    from jbod_core import records

    for line in head:
        entry = json.loads(line)
        image.replay(records.decode(entry["type"], entry["data"]), entry["offset"])
    snapshot_offset = json.loads(head[-1])["offset"]
    exported = [
        json.dumps({"offset": snapshot_offset, "type": r.TYPE, "data": r.to_data()})
        for r in image.to_records()
    ]
    path = tmp_path / "snapshot.jsonl"
    path.write_text("\n".join(exported + tail) + "\n")
    read = inputs.read_metadata(spark, str(path))
    assert read.report.bad_lines == 0
    expected = reference.replay(metadata)
    frames = replay.replay(read.records)
    got = {
        (r["topicId"], r["partition"]): (tuple(r["isr"]), r["leader"], r["leaderEpoch"])
        for r in frames.partitions.collect()
    }
    assert got == {(str(t), i): (p.isr, p.leader, p.leader_epoch) for (t, i), p in expected.iter_partitions()}
    brokers = {r["brokerId"]: r["fenced"] for r in frames.brokers.collect()}
    assert brokers == {b: reg.fenced for b, reg in expected.brokers.items()}


def test_bad_telemetry_lines_are_reported(spark: SparkSession, tmp_path: Path) -> None:
    good = {
        "ts": 1.0,
        "brokerId": 1,
        "directoryId": DIR_A,
        "path": "/d",
        "state": "online",
        "totalBytes": 10,
        "usableBytes": 5,
        "replicas": [{"topic": "t", "partition": 0, "sizeBytes": 3}],
    }
    bad = {
        json.dumps({**good, "state": "melting"}): "state 'melting' is not online, offline or full",
        json.dumps(
            {k: v for k, v in good.items() if k != "totalBytes"}
        ): "missing or malformed field totalBytes",
        json.dumps(
            {**good, "replicas": [{"topic": "t", "partition": 0}]}
        ): "field replicas has the wrong type",
        json.dumps({**good, "directoryId": "x"}): "field directoryId is not a Uuid",
        "{": "not a JSON object with the sample fields",
    }
    lines = [json.dumps(good), *bad]
    path = tmp_path / "telemetry.jsonl"
    path.write_text("\n".join(lines) + "\n")
    read = inputs.read_telemetry(spark, str(path))
    assert {(b.line, b.problem) for b in read.report.examples} == {
        (lines.index(t) + 1, p) for t, p in bad.items()
    }
    assert read.samples.count() == 1


def test_strict_mode_rejects_bad_lines(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "export.jsonl"
    path.write_text("\n".join([*GOOD, "garbage"]) + "\n")
    run = jobs.Run(spark, jobs.Options(metadata=str(path), out=tmp_path / "out", strict=True))
    with pytest.raises(jobs.JobError, match=r"line 4: not a JSON object"):
        _ = run.metadata


def test_missing_inputs_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(inputs.InputError, match="does not exist"):
        inputs.check_exists(str(tmp_path / "nope.jsonl"), what="metadata")
    (tmp_path / "empty").mkdir()
    with pytest.raises(inputs.InputError, match="empty directory"):
        inputs.check_exists(str(tmp_path / "empty"), what="metadata")


def test_each_line_is_parsed_once_for_all_its_checks(spark: SparkSession, tmp_path: Path) -> None:
    """The checks read ~100 fields of the parsed line; Spark must not inline `from_json` into
    each of them (the read persists no intermediate frame to prevent it)."""
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(GOOD) + "\n", encoding="utf-8")
    read = inputs.read_metadata(spark, str(path))
    try:
        plan = read.cache._jdf.queryExecution().executedPlan().toString()
        assert plan.count("from_json(") == 1, plan
        assert read.records.count() == len(GOOD)
    finally:
        read.unpersist()
