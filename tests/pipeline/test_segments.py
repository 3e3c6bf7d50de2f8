"""The controller's log files read directly (`jbod_pipeline.segments`): the same records as
`jbodctl metadata export` of the same controller (a real one, with and without a snapshot and
deleted segments); a damaged frame is a bad line named by file and frame, a torn tail of the last
segment is cut with a warning, a log that starts after offset 0 without a snapshot is refused."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import SparkSession

from jbod_controller import service
from jbod_controller.record_log import FileRecordLog
from jbod_core import frames, records
from jbod_core.image import ClusterImage
from jbod_pipeline import inputs, jobs, replay, segments, synthetic
from tests.controller.conftest import Api, bring_up, random_uuid
from tests.harness import ControllerProcess
from tests.pipeline.conftest import jbodctl_export

SMALL = synthetic.ClusterSpec(brokers=3, dirs_per_broker=2, partitions=30, topics=3, samples_per_dir=1)


# -- helpers -------------------------------------------------------------------------------------


def _restart_and_export(data_dir: Path, out: Path) -> Path:
    """Start a controller on `data_dir`, export its log at once and kill it (the session timeout
    is long, so no broker is fenced, which would append records, before the export)."""
    with ControllerProcess(data_dir=data_dir, session_timeout_ms=600_000) as controller:
        return jbodctl_export(controller, out)


def _records(read: inputs.MetadataInput) -> list[dict[str, Any]]:
    """The good records in replay order, without where they were read from."""
    rows = sorted(read.records.collect(), key=lambda r: (r["offset"], r["pos"]))
    return [{k: v for k, v in r.asDict(recursive=True).items() if k not in ("file", "pos")} for r in rows]


def _state(read: inputs.MetadataInput) -> dict[str, list[tuple[Any, ...]]]:
    frames = replay.replay(read.records)
    return {
        "brokers": sorted(
            (r["brokerId"], r["brokerEpoch"], r["fenced"], tuple(r["logDirs"]), tuple(r["offlineLogDirs"]))
            for r in frames.brokers.collect()
        ),
        "topics": sorted((r["topicId"], r["name"], r["minIsr"]) for r in frames.topics.collect()),
        "partitions": sorted(
            (
                r["topicId"],
                r["partition"],
                tuple(r["replicas"]),
                tuple(r["isr"]),
                r["leader"],
                r["leaderEpoch"],
                tuple(r["directories"]),
            )
            for r in frames.partitions.collect()
        ),
    }


def _same_as_export(spark: SparkSession, log_path: Path, export: Path) -> inputs.MetadataInput:
    """The log at `log_path` reads the export's records and replays to its state (`ClusterFrames`)."""
    exported = inputs.read_metadata(spark, str(export))
    direct = inputs.read_metadata(spark, str(log_path))
    assert exported.report.bad_lines == 0 and direct.report.bad_lines == 0 and not direct.report.warnings
    got = _records(direct)
    assert got == _records(exported)
    assert len(got) == len(export.read_text().splitlines())
    assert _state(direct) == _state(exported)
    exported.unpersist()
    return direct


def _write_log(directory: Path, lines: list[str], *, segment_bytes: int, per_flush: int = 4) -> FileRecordLog:
    """The records of an export written by the controller's own log writer (small segments)."""
    log = FileRecordLog(directory, segment_bytes=segment_bytes)
    for start in range(0, len(lines), per_flush):
        for line in lines[start : start + per_flush]:
            log.append_one(orjson.dumps(json.loads(line)))
        log.flush()
    return log


def _snapshot(log: FileRecordLog, lines: list[str], offset: int) -> None:
    """A snapshot at `offset`, cut by the controller's own code from the image of the records below it."""
    image = ClusterImage()
    for line in lines[:offset]:
        entry = json.loads(line)
        image.replay(records.decode(entry["type"], entry["data"]), entry["offset"])
    assert image.end_offset == offset
    service.write_image_snapshot(log, image)


def _generated(tmp_path: Path) -> list[str]:
    metadata = tmp_path / "generated.jsonl"
    synthetic.generate(SMALL, seed=3, metadata=metadata, telemetry=tmp_path / "telemetry.jsonl")
    return metadata.read_text().splitlines()


def _segment_names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.log"))


# -- a real controller writes the log ------------------------------------------------------------


def test_a_real_controllers_log_reads_like_its_export(spark: SparkSession, tmp_path: Path) -> None:
    data_dir = tmp_path / "controller"
    with ControllerProcess(data_dir=data_dir) as controller:
        api = Api(controller)
        try:
            brokers = bring_up(api, [1, 2, 3], dirs_per_broker=2)
            api.create_topic("orders", numPartitions=4, replicationFactor=3)
            api.create_topic(
                "audit", numPartitions=2, replicationFactor=2, configs={"min.insync.replicas": "2"}
            )
            doomed = api.create_topic("doomed", numPartitions=1, replicationFactor=1)
            assert api.heartbeat(2, brokers[2].epoch, offlineLogDirs=[brokers[2].dirs[0]])["errorCode"] == 0
            assert api.heartbeat(3, brokers[3].epoch, wantFence=True)["errorCode"] == 0
            assert api.admin.delete("/v1/topics/doomed").status_code == 200, doomed
            api.register(4, [random_uuid()])
        finally:
            api.close()
        assert controller.stop() == 0
    metadata_dir = data_dir / "metadata"
    assert _segment_names(metadata_dir) == ["00000000000000000000.log"]
    export = _restart_and_export(data_dir, tmp_path / "export.jsonl")
    assert segments.plan(str(data_dir)) == segments.plan(str(metadata_dir))  # either dir names the log
    direct = _same_as_export(spark, data_dir, export)
    rows = direct.records.select("file", "pos").collect()
    assert {r["file"] for r in rows} == {(metadata_dir / "00000000000000000000.log").as_uri()}
    assert sorted(r["pos"] for r in rows) == list(range(1, len(rows) + 1))  # a line is a frame
    direct.unpersist()


def test_a_snapshot_and_deleted_segments_read_like_the_export(spark: SparkSession, tmp_path: Path) -> None:
    lines = _generated(tmp_path)
    data_dir = tmp_path / "controller"
    metadata_dir = data_dir / "metadata"
    log = _write_log(metadata_dir, lines, segment_bytes=1024)
    older, offset = len(lines) // 3, len(lines) // 2
    _snapshot(log, lines, older)
    _snapshot(log, lines, offset)
    # Retention deletes the first segment only: the next ones, wholly below the snapshot, stay.
    first_segment = metadata_dir / f"{0:020d}.log"
    keep = log.size_bytes() - first_segment.stat().st_size
    assert log.delete_segments_before(offset, keep_bytes=keep) == 1
    log.close()
    # A newer snapshot that does not verify (cut short) is passed over, as the controller does.
    newest = metadata_dir / f"{len(lines) - 1:020d}.snapshot"
    newest.write_bytes((metadata_dir / f"{offset:020d}.snapshot").read_bytes()[:-3])
    chosen = segments.plan(str(data_dir))
    assert chosen.snapshot_offset == offset
    read = [t.base_offset for t in chosen.tasks if t.kind == "segment"]
    bases = [int(name.removesuffix(".log")) for name in _segment_names(metadata_dir)]
    assert bases[0] < read[0] < offset < read[1]  # segments below the snapshot's are not read
    export = _restart_and_export(data_dir, tmp_path / "export.jsonl")
    assert json.loads(export.read_text().splitlines()[0])["offset"] == offset - 1  # the export's snapshot
    direct = _same_as_export(spark, data_dir, export)
    direct.unpersist()


# -- damage --------------------------------------------------------------------------------------


def _damaged_log(tmp_path: Path) -> tuple[Path, list[str], list[Path]]:
    lines = _generated(tmp_path)[:60]
    directory = tmp_path / "metadata"
    _write_log(directory, lines, segment_bytes=1500).close()
    files = sorted(directory.glob("*.log"))
    assert len(files) >= 3
    return directory, lines, files


def _frame_position(data: bytes, number: int) -> int:
    position = 0
    for _ in range(number - 1):
        length, _crc = frames.HEADER.unpack_from(data, position)
        position += frames.HEADER.size + length
    return position


def _frames(segment: Path) -> int:
    data = segment.read_bytes()
    return sum(1 for item in frames.iter_frames(data, entries=True) if not isinstance(item, frames.Damage))


def test_a_damaged_frame_is_a_bad_line_and_a_torn_tail_is_cut(spark: SparkSession, tmp_path: Path) -> None:
    directory, lines, files = _damaged_log(tmp_path)
    middle, last = files[1], files[-1]
    data = bytearray(middle.read_bytes())
    position = _frame_position(bytes(data), 3)
    data[position + frames.HEADER.size + 5] ^= 0xFF  # inside frame 3's payload: its CRC fails
    middle.write_bytes(bytes(data))
    torn = frames.HEADER.pack(100, 0) + b'{"offset":'  # a frame whose write was cut short
    with last.open("ab") as handle:
        handle.write(torn)
    read = inputs.read_metadata(spark, str(directory))
    base = int(middle.name.removesuffix(".log"))
    rest = len(data) - position
    assert read.report.bad_lines == 1
    (bad,) = read.report.examples
    assert (bad.file, bad.line) == (middle.as_uri(), 3)
    assert bad.problem == (
        f"damaged frame at offset {base + 2} (CRC mismatch): the remaining {rest} byte(s) of the "
        "segment cannot be framed and were skipped"
    )
    assert read.report.warnings == [
        f"cut a torn tail of {len(torn)} byte(s) from frame {_frames(last) + 1} of the last segment "
        f"{last.name} (frame of 100 bytes runs past the end of the file; never acknowledged, the "
        "controller's recovery cuts it too)"
    ]
    assert f"{middle} line 3: damaged frame" in read.report.summary()
    skipped = set(range(base + 2, int(files[2].name.removesuffix(".log"))))
    assert [r["offset"] for r in _records(read)] == [n for n in range(len(lines)) if n not in skipped]
    read.unpersist()

    run = jobs.Run(spark, jobs.Options(metadata=str(directory), out=tmp_path / "out", strict=True))
    with pytest.raises(jobs.JobError, match=r"line 3: damaged frame at offset \d+ \(CRC mismatch\)"):
        _ = run.metadata
    run.close()
    data[position + frames.HEADER.size + 5] ^= 0xFF  # repaired: only the torn tail is left
    middle.write_bytes(bytes(data))
    run = jobs.Run(spark, jobs.Options(metadata=str(directory), out=tmp_path / "out", strict=True))
    assert run.metadata.report.bad_lines == 0 and len(run.metadata.report.warnings) == 1
    assert run.metadata.records.count() == len(lines)
    run.close()


def test_a_flipped_byte_inside_the_last_segment_is_a_bad_line_not_a_torn_tail(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Frames after the damaged one were acknowledged: the controller refuses to start on this log
    (`jbod_core.frames.tail_damage`), so the reader reports it instead of cutting it silently."""
    directory, _lines, files = _damaged_log(tmp_path)
    last = files[-1]
    data = bytearray(last.read_bytes())
    assert _frames(last) >= 3
    position = _frame_position(bytes(data), 2)
    data[position + frames.HEADER.size + 5] ^= 0xFF  # frame 2 of the last segment: its CRC fails
    last.write_bytes(bytes(data))
    read = inputs.read_metadata(spark, str(directory))
    base = int(last.name.removesuffix(".log"))
    assert read.report.warnings == []
    assert read.report.bad_lines == 1
    (bad,) = read.report.examples
    assert (bad.file, bad.line) == (last.as_uri(), 2)
    assert bad.problem == (
        f"damaged frame at offset {base + 1} (CRC mismatch): the remaining {len(data) - position} "
        "byte(s) of the segment cannot be framed and were skipped"
    )
    assert [r["offset"] for r in _records(read)] == list(range(base + 1))
    read.unpersist()


def test_a_missing_segment_is_a_bad_line(spark: SparkSession, tmp_path: Path) -> None:
    directory, lines, files = _damaged_log(tmp_path)
    files[1].unlink()
    read = inputs.read_metadata(spark, str(directory))
    (bad,) = read.report.examples
    end, next_base = (int(f.name.removesuffix(".log")) for f in files[1:3])
    assert (bad.file, bad.line) == (files[0].as_uri(), _frames(files[0]) + 1)
    assert bad.problem == (
        f"offsets {end}-{next_base - 1} are missing: the segment ends before offset {end} and the next "
        f"one starts at {next_base}"
    )
    assert len(_records(read)) == len(lines) - (next_base - end)
    read.unpersist()


def test_a_log_that_starts_after_zero_needs_a_snapshot(spark: SparkSession, tmp_path: Path) -> None:
    directory, lines, files = _damaged_log(tmp_path)
    files[0].unlink()
    second = int(files[1].name.removesuffix(".log"))
    with pytest.raises(inputs.InputError) as caught:
        inputs.read_metadata(spark, str(directory))
    assert str(caught.value) == (
        f"metadata {directory}: the controller log {directory} starts at offset {second} "
        f"({files[1].name}) and no valid snapshot covers the offsets below it"
    )
    log = FileRecordLog(directory)
    _snapshot(log, lines, second - 1)
    log.close()
    with pytest.raises(segments.LogError, match=rf"offsets {second - 1}-{second - 1} are missing$"):
        segments.plan(str(directory))


# -- pure parts ----------------------------------------------------------------------------------


def test_what_counts_as_a_controller_log(tmp_path: Path) -> None:
    _write_log(
        tmp_path / "data" / "metadata",
        [json.dumps({"offset": 0, "type": "T", "data": {}})],
        segment_bytes=1024,
    )
    (tmp_path / "exports").mkdir()
    (tmp_path / "exports" / "a.jsonl").write_text("{}\n")
    (tmp_path / "exports" / "notes.log").write_text("{}\n")
    assert segments.is_controller_log(str(tmp_path / "data"))
    assert segments.is_controller_log(str(tmp_path / "data" / "metadata"))
    assert segments.is_controller_log((tmp_path / "data").as_uri())
    assert not segments.is_controller_log(str(tmp_path / "exports"))
    assert not segments.is_controller_log(str(tmp_path / "exports" / "a.jsonl"))
    assert not segments.is_controller_log(str(tmp_path / "nope"))


def test_frames_and_damage() -> None:
    entry = b'{"offset":0,"type":"T","data":{}}'
    good = frames.HEADER.pack(len(entry), zlib.crc32(entry)) + entry
    assert list(frames.iter_frames(good * 2, entries=True)) == [entry, entry]
    too_long = frames.HEADER.pack(2**31, 0)
    cases = {
        good + good[:5]: "frame header cut short",
        good + good[:-1]: f"frame of {len(entry)} bytes runs past the end of the file",
        good + good[:8] + b"X" + entry[1:]: "CRC mismatch",
        good + too_long: f"frame length {2**31} over the {frames.MAX_FRAME_BYTES}-byte limit",
    }
    for data, reason in cases.items():
        assert list(frames.iter_frames(data, entries=True)) == [
            entry,
            frames.Damage(2, len(good), reason),
        ]
    other = b'{"type":"T","data":{}}'
    framed = frames.HEADER.pack(len(other), zlib.crc32(other)) + other
    assert list(frames.iter_frames(framed, entries=False)) == [other]
    assert list(frames.iter_frames(framed, entries=True)) == [
        frames.Damage(1, 0, "payload is not a log entry")
    ]


def test_files_are_packed_like_spark_splits() -> None:
    mib = 1024 * 1024
    assert segments.pack([10] * 6, parallelism=2) == [[0, 1, 2], [3, 4, 5]]
    assert segments.pack([64 * mib] * 4, parallelism=2) == [[0], [1], [2], [3]]
    assert segments.pack([300 * mib, 1], parallelism=8) == [[0], [1]]
