"""Disk telemetry for the pipeline: one JSON line per log dir per interval (protocol §6 samples).

Enabled by `telemetry.dir`; every `telemetry.interval.ms` the agent appends, for each of its log
dirs, `{ts, brokerId, directoryId, path, state, totalBytes, usableBytes, replicas: [{topic,
partition, sizeBytes}], probeSeconds, probeErrors, error}` — the state and space of the last probe,
the replicas hosted there (future replicas of moves excluded) with their size on disk, the last
probe's duration and the number of failed probes since start.

Guarantees:
* Files are `telemetry-<brokerId>-<first ts in ms>.jsonl` in `telemetry.dir`; a file is closed
  after `max_file_bytes` or `max_file_age` seconds and the oldest files beyond `max_files` are
  deleted, so the directory stays bounded (about `max_files x max_file_bytes`).
* Sampling reads the agent's state on the event loop (no locks, a consistent snapshot) and sizes
  the replicas and writes the lines in a worker thread, so disks never stall the loop; a write
  that fails is logged and retried at the next interval, never fatal to the broker.
* `build_samples` is pure (state snapshot and sizes in, lines out) and takes the time as a parameter.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from jbod_agent.disks import probe
from jbod_agent.placement import DirHealth
from jbod_agent.ports import Clock
from jbod_agent.state import AgentState
from jbod_agent.storage import replicas
from jbod_core.ids import Uuid

log = logging.getLogger("jbod_agent.telemetry")

MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_FILE_AGE_SECONDS = 3600.0
MAX_FILES = 8


@dataclass(frozen=True, slots=True)
class DirSnapshot:
    directory_id: str
    path: str
    state: str
    total_bytes: int
    usable_bytes: int
    error: str | None
    replicas: tuple[tuple[str, int, Path], ...]  # (topic, partition, replica dir)


@dataclass(slots=True)
class ProbeStats:
    seconds: float | None = None
    errors: int = 0


def build_samples(
    broker_id: int,
    dirs: Sequence[DirSnapshot],
    probes: dict[str, ProbeStats],
    *,
    now: float,
    size_of: Callable[[Path], int],
) -> list[dict[str, Any]]:
    """One §6 sample per dir; offline dirs list no replicas (their files cannot be read)."""
    samples = []
    for d in dirs:
        stats = probes.get(d.directory_id, ProbeStats())
        samples.append(
            {
                "ts": now,
                "brokerId": broker_id,
                "directoryId": d.directory_id,
                "path": d.path,
                "state": d.state,
                "totalBytes": d.total_bytes,
                "usableBytes": d.usable_bytes,
                "replicas": []
                if d.state == DirHealth.OFFLINE.value
                else [
                    {"topic": topic, "partition": partition, "sizeBytes": size_of(path)}
                    for topic, partition, path in d.replicas
                ],
                "probeSeconds": stats.seconds,
                "probeErrors": stats.errors,
                "error": d.error,
            }
        )
    return samples


@dataclass(slots=True)
class RotatingFiles:
    """Append-only JSON-lines files in one directory, rotated by size and age, bounded in number."""

    directory: Path
    prefix: str
    max_file_bytes: int = MAX_FILE_BYTES
    max_file_age: float = MAX_FILE_AGE_SECONDS
    max_files: int = MAX_FILES
    current: Path | None = None
    opened_at: float = 0.0
    written: int = 0
    _names: list[Path] = field(default_factory=list)

    def append(self, lines: Sequence[bytes], *, now: float) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        if (
            self.current is None
            or self.written >= self.max_file_bytes
            or now - self.opened_at >= self.max_file_age
        ):
            self.current = self.directory / f"{self.prefix}-{int(now * 1000)}.jsonl"
            self.opened_at, self.written = now, 0
            self._prune(keep=self.max_files - 1)
        data = b"".join(line + b"\n" for line in lines)
        with open(self.current, "ab") as handle:
            handle.write(data)
        self.written += len(data)
        return self.current

    def _prune(self, *, keep: int) -> None:
        existing = sorted(
            (p for p in self.directory.glob(f"{self.prefix}-*.jsonl") if p != self.current),
            key=lambda p: (p.stat().st_mtime, p.name),
        )
        for old in existing[: max(0, len(existing) - keep)]:
            old.unlink(missing_ok=True)


class TelemetryWriter:
    def __init__(self, broker: AgentState, directory: Path, *, interval_ms: int, clock: Clock) -> None:
        """Call `observe_probe` with every probe result (the agent hooks it to its probes)."""
        self.broker = broker
        self.clock = clock
        self.interval = interval_ms / 1000
        self.files = RotatingFiles(directory, prefix=f"telemetry-{broker.node_id}")
        self.probes: dict[str, ProbeStats] = {}

    def observe_probe(self, directory: Uuid, result: probe.ProbeResult) -> None:
        stats = self.probes.setdefault(str(directory), ProbeStats())
        stats.seconds = result.seconds
        if result.outcome is not probe.ProbeOutcome.OK:
            stats.errors += 1

    def snapshot(self) -> list[DirSnapshot]:
        """The agent's dirs and hosted replicas, read on the event loop."""
        hosted: dict[Uuid, list[tuple[str, int, Path]]] = {}
        for key, local in [*self.broker.local.items(), *self.broker.offline_local.items()]:
            hosted.setdefault(local.directory_id, []).append((local.topic, key[1], local.path))
        return [
            DirSnapshot(
                directory_id=str(directory),
                path=str(state.path),
                state=state.health.value,
                total_bytes=state.total_bytes,
                usable_bytes=state.usable_bytes,
                error=state.error,
                replicas=tuple(sorted(hosted.get(directory, []))),
            )
            for directory, state in sorted(self.broker.dirs.items(), key=lambda item: str(item[1].path))
        ]

    def write_once(self, *, now: float) -> Path:
        """Snapshot on the caller's thread, then size and write (the caller may be a worker)."""
        return self._write(self.snapshot(), dict(self.probes), now)

    def _write(self, dirs: list[DirSnapshot], probes: dict[str, ProbeStats], now: float) -> Path:
        samples = build_samples(self.broker.node_id, dirs, probes, now=now, size_of=replicas.size_bytes)
        return self.files.append([orjson.dumps(s) for s in samples], now=now)

    async def run_forever(self) -> None:
        while not self.broker.stopping.is_set():
            dirs, probes = (
                self.snapshot(),
                {k: ProbeStats(v.seconds, v.errors) for k, v in self.probes.items()},
            )
            try:
                await asyncio.to_thread(self._write, dirs, probes, self.clock.time())
            except OSError as exc:
                log.warning(
                    "Could not write telemetry to %s: %s", self.files.directory, probe.describe_os_error(exc)
                )
            await self.clock.sleep(self.interval)
