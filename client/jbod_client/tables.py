"""Human tables for `jbodctl` (rich). Pure: data in, `rich.table.Table` out.

Guarantees: dir ids are shown in full (they are what users grep for); reserved ids are shown by
name (UNASSIGNED, LOST, MIGRATING); fenced / offline states are highlighted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from jbod_core import ids

_RESERVED_NAMES = {
    str(ids.UNASSIGNED_DIR): "UNASSIGNED",
    str(ids.LOST_DIR): "LOST",
    str(ids.MIGRATING_DIR): "MIGRATING",
}


def dir_label(directory: str, aliases: Mapping[str, str] | None = None) -> str:
    if directory in _RESERVED_NAMES:
        return f"[yellow]{_RESERVED_NAMES[directory]}[/]"
    if aliases and directory in aliases:
        return f"{aliases[directory]} ({directory[:6]}…)"
    return directory


def _ints(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values) or "-"


def brokers_table(brokers: Sequence[Mapping[str, Any]], aliases: Mapping[str, str] | None = None) -> Table:
    table = Table(title="Brokers", title_justify="left")
    for column in ("broker", "epoch", "state", "online dirs", "offline dirs", "unassigned", "listeners"):
        table.add_column(column)
    for b in brokers:
        if b["fenced"]:
            state = "[red]fenced[/]"
        elif b["inControlledShutdown"]:
            state = "[yellow]shutting down[/]"
        else:
            state = "[green]unfenced[/]"
        table.add_row(
            str(b["brokerId"]),
            str(b["brokerEpoch"]),
            state,
            "\n".join(dir_label(d, aliases) for d in b["logDirs"]) or "-",
            "\n".join(f"[red]{dir_label(d, aliases)}[/]" for d in b["offlineLogDirs"]) or "-",
            str(b["unassignedReplicas"]),
            ", ".join(f"{x['name']}://{x['host']}:{x['port']}" for x in b.get("listeners", [])) or "-",
        )
    return table


def topics_table(topics: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title="Topics", title_justify="left")
    for column in ("topic", "id", "partitions", "replication", "offline partitions", "configs"):
        table.add_column(column)
    for t in topics:
        parts = t["partitions"]
        offline = sum(1 for p in parts if p["leader"] == -1)
        table.add_row(
            t["name"],
            t["topicId"],
            str(len(parts)),
            str(len(parts[0]["replicas"])) if parts else "-",
            f"[red]{offline}[/]" if offline else "0",
            ", ".join(f"{k}={v}" for k, v in sorted(t["configs"].items())) or "-",
        )
    return table


def partitions_table(topic: Mapping[str, Any], aliases: Mapping[str, str] | None = None) -> Table:
    table = Table(title=f"Topic {topic['name']} ({topic['topicId']})", title_justify="left")
    for column in (
        "partition",
        "leader",
        "leader epoch",
        "replicas",
        "isr",
        "directories",
        "offline replicas",
    ):
        table.add_column(column)
    for p in topic["partitions"]:
        leader = "[red]none[/]" if p["leader"] == -1 else str(p["leader"])
        dirs = "\n".join(
            f"{b}: {dir_label(d, aliases)}" for b, d in zip(p["replicas"], p["directories"], strict=True)
        )
        offline = _ints(p["offlineReplicas"])
        table.add_row(
            str(p["partitionIndex"]),
            leader,
            str(p["leaderEpoch"]),
            _ints(p["replicas"]),
            _ints(p["isr"]),
            dirs,
            f"[red]{offline}[/]" if p["offlineReplicas"] else "-",
        )
    return table


def cluster_table(cluster: Mapping[str, Any]) -> Table:
    table = Table(title="Cluster", title_justify="left", show_header=False)
    table.add_column("field")
    table.add_column("value")
    for key in ("clusterId", "metadataEndOffset", "brokers", "fencedBrokers", "offlinePartitions"):
        table.add_row(key, str(cluster[key]))
    return table


def records_table(records: Sequence[Mapping[str, Any]], title: str = "Metadata log") -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("offset", justify="right")
    table.add_column("type")
    table.add_column("data")
    for r in records:
        data = dict(r["data"])
        summary = ", ".join(f"{k}={v}" for k, v in data.items() if k not in ("listeners",))
        table.add_row(str(r["offset"]), r["type"], summary)
    return table
