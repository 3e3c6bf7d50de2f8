"""The independent computation the Spark jobs are checked against: the metadata log replayed by
`jbod_core.image.ClusterImage` (the controller's own code) and §6's definitions written out in
plain Python, one loop per rule."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jbod_core import records
from jbod_core.ids import Uuid, is_online
from jbod_core.image import ClusterImage


def replay(path: Path) -> ClusterImage:
    image = ClusterImage()
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        image.replay(records.decode(entry["type"], entry["data"]), entry["offset"])
    return image


def latest_samples(path: Path) -> dict[tuple[int, str], dict[str, Any]]:
    latest: dict[tuple[int, str], tuple[float, int, dict[str, Any]]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        sample = json.loads(line)
        key = (sample["brokerId"], sample["directoryId"])
        if key not in latest or (sample["ts"], number) >= latest[key][:2]:
            latest[key] = (sample["ts"], number, sample)
    return {k: v[2] for k, v in latest.items()}


def _replica_rows(image: ClusterImage) -> list[tuple[str, int, int, str, bool, Any, int]]:
    rows = []
    for (topic_id, index), part in image.iter_partitions():
        topic = image.topics[topic_id]
        min_isr = int(topic.configs.get("min.insync.replicas", "1"))
        for broker, directory in zip(part.replicas, part.directories, strict=True):
            rows.append((topic.name, index, broker, str(directory), part.leader == broker, part, min_isr))
    return rows


def disks(
    image: ClusterImage, latest: dict[tuple[int, str], dict[str, Any]]
) -> dict[tuple[int, str], dict[str, Any]]:
    keys: set[tuple[int, str]] = set()
    for broker_id, reg in image.brokers.items():
        keys.update((broker_id, str(d)) for d in (*reg.log_dirs, *reg.offline_log_dirs))
    counts: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    for (topic_id, _index), part in image.iter_partitions():
        del topic_id
        for broker, directory in zip(part.replicas, part.directories, strict=True):
            if directory.is_reserved:
                continue
            counts[(broker, str(directory))][0] += 1
            counts[(broker, str(directory))][1] += part.leader == broker
    keys.update(counts)
    keys.update(latest)
    rows: dict[tuple[int, str], dict[str, Any]] = {}
    for broker, directory in keys:
        reg = image.brokers.get(broker)
        online = reg is not None and Uuid.parse(directory) in reg.log_dirs
        sample = latest.get((broker, directory))
        state = (
            ("full" if sample is not None and sample["state"] == "full" else "online")
            if online
            else "offline"
        )
        used = sum(r["sizeBytes"] for r in sample["replicas"]) if sample else 0
        total = sample["totalBytes"] if sample else None
        rows[(broker, directory)] = {
            "state": state,
            "replicas": counts[(broker, directory)][0],
            "leaders": counts[(broker, directory)][1],
            "bytes": used,
            "totalBytes": total,
            "utilisation": used / total if total else None,
        }
    for broker in {b for b, _ in rows}:
        utils = [
            r["utilisation"]
            for (b, _), r in rows.items()
            if b == broker and r["state"] != "offline" and r["utilisation"] is not None
        ]
        mean = sum(utils) / len(utils) if utils else None
        for (b, _), r in rows.items():
            if b == broker:
                r["skew"] = None if r["utilisation"] is None or mean is None else r["utilisation"] - mean
    return rows


@dataclass
class Blast:
    replicas: int = 0
    leadersLost: int = 0  # noqa: N815 (the column names)
    offlinePartitions: int = 0  # noqa: N815
    underMinIsr: int = 0  # noqa: N815


def blast_radius(image: ClusterImage) -> dict[tuple[int, str], Blast]:
    rows = {(b, str(d)): Blast() for b, reg in image.brokers.items() for d in reg.log_dirs}

    def acceptable(broker: int, directory: Uuid) -> bool:
        reg = image.brokers.get(broker)
        return reg is not None and not reg.fenced and is_online(directory, reg.log_dirs)

    for (topic_id, _index), part in image.iter_partitions():
        min_isr = int(image.topics[topic_id].configs.get("min.insync.replicas", "1"))
        for broker, directory in zip(part.replicas, part.directories, strict=True):
            row = rows.get((broker, str(directory)))
            if row is None:
                continue
            row.replicas += 1
            if part.leader == broker:
                row.leadersLost += 1
                others = [
                    b
                    for b, d in zip(part.replicas, part.directories, strict=True)
                    if b != broker and b in part.isr and acceptable(b, d)
                ]
                row.offlinePartitions += not others
            if broker in part.isr and len(part.isr) - 1 < min_isr:
                row.underMinIsr += 1
    return rows
