"""Human tables for `jbodctl` (rich). Pure: data in, `rich.table.Table` out.

Guarantees: dir ids are shown in full (they are what users grep for); reserved ids are shown by
name (UNASSIGNED, LOST, MIGRATING); fenced / offline states are highlighted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
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


def human_bytes(value: int | None) -> str:
    """`1536` -> `1.5 KiB`; None (unknown) -> `-`."""
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"  # pragma: no cover - the loop always returns


def log_dirs_table(broker_id: int, dirs: Sequence[Mapping[str, Any]]) -> Table:
    """One broker's `GET /v1/log-dirs`: a row per dir, future replicas (moves in progress) by name."""
    table = Table(title=f"Broker {broker_id} log dirs", title_justify="left")
    for column in ("path", "directory id", "state", "usable", "total", "replicas", "future replicas"):
        table.add_column(column, justify="right" if column in ("usable", "total", "replicas") else "left")
    for d in dirs:
        state = str(d.get("state") or "-")
        if state == "offline":
            error = d.get("error")
            state = "[red]offline[/]" + (f"\n{escape(str(error))}" if error else "")
        elif state == "online":
            state = "[green]online[/]"
        else:
            state = f"[yellow]{escape(state)}[/]"
        replicas = d.get("replicas") or []
        future = [r for r in replicas if r.get("future")]
        table.add_row(
            escape(str(d.get("path") or "-")),
            str(d.get("directoryId") or "-"),
            state,
            human_bytes(d.get("usableBytes")),
            human_bytes(d.get("totalBytes")),
            str(len(replicas) - len(future)),
            "\n".join(escape(f"{r['topic']}-{r['partition']}") for r in future) or "-",
        )
    return table


def produced_table(topic: str, offsets: Mapping[int, Sequence[int]]) -> Table:
    """What `jbodctl produce` wrote: per partition the record count and offset range."""
    table = Table(title=f"Produced to {topic}", title_justify="left")
    for column in ("partition", "records", "first offset", "last offset"):
        table.add_column(column, justify="right")
    for partition in sorted(offsets):
        known = [o for o in offsets[partition] if o >= 0]
        table.add_row(
            str(partition),
            str(len(offsets[partition])),
            str(min(known)) if known else "-",
            str(max(known)) if known else "-",
        )
    return table


def bullets(console: Console) -> Callable[[str], None]:
    """A function printing one dimmed-bullet progress line per message (local cluster, demo)."""

    def say(message: str) -> None:
        console.print(f"[dim]•[/] {message}", highlight=False)

    return say
