"""Read-only views of the agent's state for its HTTP API.

Guarantees: built on the event loop from `AgentState` and the mover, no side effect; replica
sizes are read from disk only for dirs that are not offline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jbod_agent import dynamic_configs
from jbod_agent.partitions.log_cleaning import DirCleaner
from jbod_agent.placement import DirHealth
from jbod_agent.replication import mover
from jbod_agent.state import AgentState, LocalReplica
from jbod_agent.storage import replicas
from jbod_core import disk_space
from jbod_core.ids import Uuid
from jbod_core.image import PartitionKey


def cleaner_view(cleaner: DirCleaner | None) -> dict[str, Any] | None:
    """A dir's log cleaner as `GET /v1/log-dirs` shows it (None: no compacted log there yet)."""
    if cleaner is None:
        return None
    return {
        "state": cleaner.state.value,
        "cleaning": cleaner.cleaning,
        "runs": cleaner.runs,
        "bytesRead": cleaner.bytes_read,
        "bytesWritten": cleaner.bytes_written,
        "recordsRemoved": cleaner.records_removed,
        "bytesFreed": cleaner.bytes_freed,
        "lastRunMs": cleaner.last_run_ms,
        "maxDirtyRatio": round(cleaner.max_dirty_ratio, 4),
    }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def log_dirs_view(
    broker: AgentState, moves: mover.Mover, cleaners: Mapping[Uuid, DirCleaner]
) -> list[dict[str, Any]]:
    """`GET /v1/log-dirs`: every dir (sorted by path) with its replicas, futures included, and its
    log cleaner."""
    out: list[dict[str, Any]] = []
    by_dir: dict[Uuid, list[tuple[PartitionKey, LocalReplica]]] = {}
    for key, local in [*broker.local.items(), *broker.offline_local.items()]:
        by_dir.setdefault(local.directory_id, []).append((key, local))
    futures: dict[Uuid, list[mover.Move]] = {}
    for move in moves.future_replicas():
        futures.setdefault(move.destination, []).append(move)
    cordoned = set(dynamic_configs.cordoned_dir_ids(broker))
    for directory, state in sorted(broker.dirs.items(), key=lambda item: str(item[1].path)):
        hosted = sorted(by_dir.get(directory, []), key=lambda item: (item[1].topic, item[0][1]))
        out.append(
            {
                "path": str(state.path),
                "directoryId": str(directory),
                "state": state.health.value,
                "cordoned": directory in cordoned,
                "spaceCordoned": state.cordoned_for_space,
                "usedRatio": round(disk_space.used_fraction(state.total_bytes, state.usable_bytes), 4),
                "secondsToFull": _rounded(state.fill.seconds_to_full()),
                "slow": state.slow,
                "stalled": state.stalled,
                "stalls": state.stalls,
                "stallFoundAfterMs": _ms(state.stall_found_after_s),
                "stallUnansweredMs": _ms(state.stall_unanswered_s),
                "latencyMs": _ms(state.latency.median()),
                "error": state.error,
                "since": state.since,
                "totalBytes": state.total_bytes,
                "usableBytes": state.usable_bytes,
                "cleaner": cleaner_view(cleaners.get(directory)),
                "replicas": [
                    {
                        "topic": local.topic,
                        "partition": key[1],
                        "sizeBytes": replicas.size_bytes(local.path)
                        if state.health is not DirHealth.OFFLINE
                        else 0,
                        "future": False,
                    }
                    for key, local in hosted
                ]
                + [
                    {
                        "topic": move.topic,
                        "partition": move.key[1],
                        "sizeBytes": replicas.size_bytes(move.future_path),
                        "future": True,
                        "moveState": move.state.value,
                        "copiedBytes": move.copied_bytes,
                    }
                    for move in futures.get(directory, [])
                ],
            }
        )
    for path, reason in broker.startup_offline:
        out.append(
            {
                "path": str(path),
                "directoryId": None,
                "state": "offline",
                "cordoned": False,
                "spaceCordoned": False,
                "usedRatio": 0.0,
                "secondsToFull": None,
                "slow": False,
                "latencyMs": None,
                "error": reason,
                "since": None,
                "totalBytes": 0,
                "usableBytes": 0,
                "cleaner": None,
                "replicas": [],
            }
        )
    return out
