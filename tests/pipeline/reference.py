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


Incident = tuple[int, str, int | None, str | None, str | None, int | None, str]


def _until(end: int | None, start: int, *, still: str, then: str) -> str:
    return still if end is None else f"{then} at offset {end} ({end - start} records later)"


def timeline(path: Path) -> list[Incident]:
    """§6's `timeline`, by replaying the log record by record in the controller's image and
    comparing each broker's and partition's state before and after the record: (offset, type,
    brokerId, directoryId, topic, partition, detail), in the job's order."""
    image = ClusterImage()
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    # Per record: the online dirs and fenced state of every registered broker, and the leaders.
    online_after: list[dict[int, set[str]]] = []
    fenced_after: list[dict[int, bool]] = []
    leader_after: list[dict[tuple[str, int], int]] = []
    offsets: list[int] = []
    names: dict[str, str] = {}
    incidents: list[Incident] = []
    open_offline: list[tuple[int, int, str]] = []  # (index, broker, dir) of each dir-offline
    open_fenced: list[tuple[int, int]] = []  # (index, broker) of each broker-fenced
    open_leaderless: list[tuple[int, str, int, int]] = []  # (index, topicId, partition, old leader)
    fenced_since: dict[int, int] = {}
    for index, entry in enumerate(entries):
        record = records.decode(entry["type"], entry["data"])
        offset = entry["offset"]
        before_reg = {b: (r.fenced, set(map(str, r.offline_log_dirs))) for b, r in image.brokers.items()}
        key = None
        if isinstance(record, records.PartitionChangeRecord):
            key = (str(record.topic_id), record.partition_id)
            old = image.partition((record.topic_id, record.partition_id))
            before_leader = None if old is None else old.leader
        if isinstance(record, records.TopicRecord):
            names[str(record.topic_id)] = record.name
        image.replay(record, offset)
        offsets.append(offset)
        online_after.append({b: set(map(str, r.log_dirs)) for b, r in image.brokers.items()})
        fenced_after.append({b: r.fenced for b, r in image.brokers.items()})
        leader_after.append({(str(t), i): p.leader for (t, i), p in image.iter_partitions()})
        for broker, reg in image.brokers.items():
            was_fenced, was_offline = before_reg.get(broker, (None, set()))
            for directory in sorted(set(map(str, reg.offline_log_dirs)) - was_offline):
                open_offline.append((index, broker, directory))
            if reg.fenced and was_fenced is False:
                open_fenced.append((index, broker))
                fenced_since[broker] = offset
            elif reg.fenced and was_fenced is None:
                fenced_since[broker] = offset  # a new registration starts fenced: not an incident
            elif not reg.fenced and was_fenced:
                since = fenced_since[broker]
                incidents.append(
                    (
                        offset,
                        "broker-unfenced",
                        broker,
                        None,
                        None,
                        None,
                        f"fenced since offset {since} ({offset - since} records)",
                    )
                )
        if key is not None and before_leader is not None:
            after = leader_after[-1][key]
            if after != before_leader:
                open_leaderless.append((index, key[0], key[1], before_leader))
    for index, broker, directory in open_offline:
        start = offsets[index]
        back = next(
            (
                offsets[i]
                for i in range(index + 1, len(entries))
                if directory in online_after[i].get(broker, ())
            ),
            None,
        )
        detail = _until(back, start, still="still offline", then="online again")
        incidents.append((start, "dir-offline", broker, directory, None, None, detail))
    for index, broker in open_fenced:
        start = offsets[index]
        unfenced = next(
            (offsets[i] for i in range(index + 1, len(entries)) if fenced_after[i].get(broker) is False),
            None,
        )
        detail = _until(unfenced, start, still="still fenced", then="unfenced")
        incidents.append((start, "broker-fenced", broker, None, None, None, detail))
    for index, topic_id, partition, old in open_leaderless:
        start = offsets[index]
        new = leader_after[index][(topic_id, partition)]

        def name(leader: int) -> str:
            return "none" if leader == -1 else str(leader)

        detail = f"leader {name(old)} -> {name(new)}"
        if new == -1:
            led = next(
                (
                    offsets[i]
                    for i in range(index + 1, len(entries))
                    if leader_after[i].get((topic_id, partition), -1) != -1
                ),
                None,
            )
            detail += ": partition offline, " + _until(led, start, still="still offline", then="led again")
        incidents.append(
            (start, "leader-change", None if old == -1 else old, None, names[topic_id], partition, detail)
        )

    def order(row: Incident) -> tuple[Any, ...]:
        def nulls_first(value: Any) -> tuple[bool, Any]:
            return (value is not None, value if value is not None else 0)

        offset, kind, broker, directory, topic, partition, _detail = row
        return (
            offset,
            kind,
            nulls_first(broker),
            nulls_first(topic),
            nulls_first(partition),
            nulls_first(directory),
        )

    return sorted(incidents, key=order)
