"""jbod's legacy record frames: found, refused at start in one line, converted by
`jbod-storage convert-logs` to Kafka's RecordBatch v2 with every record, offset, epoch and
timestamp kept; an interrupted conversion finishes when run again. The legacy replica is a
fixture written by the previous version's own `PartitionLog` (tests/agent/data/README.md)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jbod_agent.storage import legacy_batch, log_format
from jbod_agent.storage.partition_log import PartitionLog
from jbod_kafka import record_batch
from tests.agent.support import NODE, format_dir

LEGACY = Path(__file__).parent / "data" / "legacy-log-dir" / "t-0"
EXPECTED = [
    (3 * i + j, 1_700_000_000_000 + i, None if i % 2 else b"k%d" % i, b"value-%d-%d" % (i, j))
    for i in range(6)
    for j in range(3)
]


def legacy_copy(tmp_path: Path) -> Path:
    log_dir = tmp_path / "disk0"
    format_dir(log_dir)
    shutil.copytree(LEGACY, log_dir / "t-0")
    return log_dir


def records(replica: Path) -> list[tuple[int, int, bytes | None, bytes | None]]:
    log = PartitionLog.open(replica)
    try:
        data = log.read(log.log_start_offset, 1 << 30)
        return [
            (r.offset, r.timestamp_ms, r.key, r.value)
            for h in record_batch.iter_headers(data)
            for r in record_batch.decode_records(data[h.position : h.position + h.size])
        ]
    finally:
        log.close()


def test_the_fixture_is_legacy_and_is_found(tmp_path: Path) -> None:
    log_dir = legacy_copy(tmp_path)
    segments = sorted((log_dir / "t-0").glob("*.log"))
    assert len(segments) == 2 and all(log_format.segment_is_legacy(s) for s in segments)
    assert log_format.find_legacy(log_dir) == [log_dir / "t-0"]
    with pytest.raises(record_batch.CorruptBatchError, match="Unsupported record batch magic"):
        PartitionLog.open(log_dir / "t-0")  # never read as Kafka batches


def test_conversion_keeps_every_record_offset_epoch_and_timestamp(tmp_path: Path) -> None:
    log_dir = legacy_copy(tmp_path)
    done = log_format.convert_replica(log_dir / "t-0")
    assert (done.segments, done.batches, done.torn_bytes) == (2, 6, 0)
    assert log_format.find_legacy(log_dir) == []
    assert records(log_dir / "t-0") == EXPECTED
    log = PartitionLog.open(log_dir / "t-0")
    assert log.epoch_entries() == [(1, 0), (4, 9)]
    log.close()
    again = log_format.convert_replica(log_dir / "t-0")  # nothing left to do
    assert (again.segments, again.batches) == (0, 0)


def test_an_interrupted_conversion_finishes_when_run_again(tmp_path: Path) -> None:
    log_dir = legacy_copy(tmp_path)
    first, second = sorted((log_dir / "t-0").glob("*.log"))
    # As if the command died after replacing the first segment.
    data = first.read_bytes()
    first.write_bytes(
        b"".join(
            record_batch.encode_batch(f.base_offset, f.leader_epoch, f.max_timestamp_ms, f.records)
            for f in legacy_batch.read_frames(data)
        )
    )
    (log_dir / "t-0" / (second.name + ".tmp")).write_bytes(b"half-written")
    assert log_format.find_legacy(log_dir) == [log_dir / "t-0"]
    done = log_format.convert_replica(log_dir / "t-0")
    assert (done.segments, done.batches) == (1, 3)
    assert records(log_dir / "t-0") == EXPECTED


def test_a_torn_legacy_tail_is_cut_and_older_damage_refused(tmp_path: Path) -> None:
    log_dir = legacy_copy(tmp_path)
    second = sorted((log_dir / "t-0").glob("*.log"))[1]
    second.write_bytes(second.read_bytes()[:-5])  # the last frame torn
    done = log_format.convert_replica(log_dir / "t-0")
    assert (done.batches, done.torn_bytes > 0) == (5, True)
    assert records(log_dir / "t-0") == EXPECTED[:15]

    damaged = legacy_copy(tmp_path / "again")
    older = sorted((damaged / "t-0").glob("*.log"))[0]
    raw = bytearray(older.read_bytes())
    raw[40] ^= 0xFF
    older.write_bytes(bytes(raw))
    assert log_format.find_legacy(damaged) == [damaged / "t-0"]  # still refused at start, not misread
    with pytest.raises(ValueError, match=f"{older}: Bad CRC of the legacy frame at byte 0"):
        log_format.convert_replica(damaged / "t-0")


def _config(tmp_path: Path, log_dir: Path) -> Path:
    metadata = tmp_path / "metadata"
    format_dir(metadata)
    config = tmp_path / "server.properties"
    config.write_text(
        f"node.id={NODE}\nlog.dirs={log_dir}\nmetadata.log.dir={metadata}\n"
        "controller.url=http://127.0.0.1:9\ncluster.token.file=/nonexistent\n"
    )
    return config


def test_the_agent_refuses_a_legacy_log_and_the_command_converts_it(tmp_path: Path) -> None:
    log_dir = legacy_copy(tmp_path)
    config = _config(tmp_path, log_dir)
    agent = subprocess.run(
        [sys.executable, "-m", "jbod_agent.cli", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert agent.returncode == 1
    [line] = agent.stderr.strip().splitlines()
    assert line.startswith("jbod-agent: error: log dir ") and "jbod-storage convert-logs --config" in line
    assert "t-0" in line

    convert = subprocess.run(
        [sys.executable, "-m", "jbod_agent.storage_cli", "convert-logs", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert convert.returncode == 0, convert.stderr
    assert convert.stdout.splitlines() == [f"Converted {log_dir / 't-0'}: 2 segment(s), 6 batch(es)"]
    assert records(log_dir / "t-0") == EXPECTED
    again = subprocess.run(
        [sys.executable, "-m", "jbod_agent.storage_cli", "convert-logs", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.stdout.strip() == "No replica is in the legacy record format."
