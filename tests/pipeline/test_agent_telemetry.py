"""The agent's telemetry writer: §6 samples from the agent's dirs and replicas, bounded files,
and lines the pipeline reads without a single bad line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

from pyspark.sql import SparkSession

from jbod_agent.config import parse_config
from jbod_agent.disks import probe
from jbod_agent.lifecycle import telemetry
from jbod_agent.placement import DirHealth
from jbod_agent.ports import SystemClock
from jbod_agent.state import LocalReplica, LogDirState
from jbod_agent.storage import replicas
from jbod_core.ids import Uuid
from jbod_pipeline import inputs

A, B = Uuid.parse("ECfE0cOGu8QeL-uJQUw0PA"), Uuid.parse("YS52lqbOzBs1v5ktyenGFg")
TOPIC_ID = Uuid.parse("kbdYSiJlsfXNYT4w2PFq3w")


def _agent(tmp_path: Path) -> SimpleNamespace:
    dirs = {}
    for name, directory in (("a", A), ("b", B)):
        (tmp_path / name).mkdir()
        dirs[directory] = LogDirState(
            path=tmp_path / name, directory_id=directory, device=0, total_bytes=1000, usable_bytes=600
        )
    dirs[B].health, dirs[B].error = DirHealth.OFFLINE, "EIO: Input/output error"
    path = replicas.create(tmp_path / "a", topic="orders", partition=3, topic_id=TOPIC_ID)
    (path / "00000000000000000000.log").write_bytes(b"x" * 1234)
    gone = replicas.create(tmp_path / "b", topic="orders", partition=4, topic_id=TOPIC_ID)
    return SimpleNamespace(
        node_id=7,
        dirs=dirs,
        local={(TOPIC_ID, 3): LocalReplica(A, path, "orders")},
        offline_local={(TOPIC_ID, 4): LocalReplica(B, gone, "orders")},
        stopping=asyncio.Event(),
    )


def test_samples_describe_every_dir_with_replica_sizes_and_probe_stats(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    writer = telemetry.TelemetryWriter(agent, tmp_path / "telemetry", interval_ms=1000, clock=SystemClock())  # type: ignore[arg-type]
    for hook in [writer.observe_probe]:
        hook(A, probe.ProbeResult(probe.ProbeOutcome.OK, None, 0.004, 1000, 600))
        hook(B, probe.ProbeResult(probe.ProbeOutcome.FAILED, "EIO", 0.5))
    written = writer.write_once(now=1700000000.5)
    lines = [json.loads(line) for line in written.read_text().splitlines()]
    by_dir = {line["directoryId"]: line for line in lines}
    a, b = by_dir[str(A)], by_dir[str(B)]
    assert a["brokerId"] == 7 and a["ts"] == 1700000000.5 and a["state"] == "online"
    assert a["totalBytes"] == 1000 and a["usableBytes"] == 600
    size = replicas.size_bytes(tmp_path / "a" / "orders-3")
    assert size >= 1234
    assert a["replicas"] == [{"topic": "orders", "partition": 3, "sizeBytes": size}]
    assert a["probeSeconds"] == 0.004 and a["probeErrors"] == 0
    assert (
        b["state"] == "offline"
        and b["replicas"] == []
        and b["probeErrors"] == 1
        and b["error"].startswith("EIO")
    )


def test_files_rotate_and_stay_bounded(tmp_path: Path) -> None:
    files = telemetry.RotatingFiles(
        tmp_path, prefix="telemetry-1", max_file_bytes=100, max_file_age=1e9, max_files=3
    )
    for i in range(20):
        files.append([b'{"n": %d, "pad": "................................"}' % i], now=1000.0 + i)
    names = sorted(tmp_path.glob("telemetry-1-*.jsonl"))
    assert len(names) <= 3
    assert all(p.stat().st_size <= 200 for p in names)
    last = [json.loads(line)["n"] for line in names[-1].read_text().splitlines()]
    assert last[-1] == 19
    aged = telemetry.RotatingFiles(tmp_path / "aged", prefix="t", max_file_age=10)
    first = aged.append([b"{}"], now=0.0)
    assert aged.append([b"{}"], now=5.0) == first
    assert aged.append([b"{}"], now=11.0) != first


def test_the_pipeline_reads_the_agents_samples(spark: SparkSession, tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    writer = telemetry.TelemetryWriter(agent, tmp_path / "telemetry", interval_ms=1000, clock=SystemClock())  # type: ignore[arg-type]
    writer.write_once(now=1.0)
    writer.write_once(now=2.0)
    read = inputs.read_telemetry(spark, str(tmp_path / "telemetry"))
    assert read.report.bad_lines == 0
    latest = inputs.latest_samples(read.samples).collect()
    assert {(r["directoryId"], r["ts"]) for r in latest} == {(str(A), 2.0), (str(B), 2.0)}


def test_config_keys() -> None:
    base = "node.id=1\nlog.dirs=/a,/b\nmetadata.log.dir=/m\ncontroller.url=http://127.0.0.1:9093\ncluster.token.file=/t\n"
    assert parse_config(base).telemetry_dir is None
    config = parse_config(base + "telemetry.dir=/var/lib/jbod/telemetry\ntelemetry.interval.ms=5000\n")
    assert config.telemetry_dir == Path("/var/lib/jbod/telemetry") and config.telemetry_interval_ms == 5000
