"""Human tables for `jbodctl` (rich). Pure: data in, `rich.table.Table` out.

Guarantees:
* Fit an 80-column terminal by default, and never cut or fold an id: directory and topic ids are
  shown by their shortest prefix of at least `SHORT_ID_LENGTH` characters that is unique within
  the table (like git's short hashes), in columns that do not wrap; log dir paths relative to the
  directory holding them all (named once, in the title); errors as one line each under the table,
  cut with an ellipsis where the table ends. Local-cluster aliases (`b2/disk-1`) replace ids.
* `wide=True` shows everything whole (full ids, absolute paths, whole errors, listeners); print it
  with `console(wide=True)`, which is as wide as the table rather than the terminal.
* Reserved ids are shown by name (UNASSIGNED, LOST, MIGRATING); fenced / offline states are
  highlighted. `-o json` output never goes through this module: it stays complete.
"""

from __future__ import annotations

import itertools
import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from jbod_core import ids

#: Characters of an id shown by default; more where two ids of a table share that prefix.
SHORT_ID_LENGTH = 8
#: The console width used for `wide` tables: no terminal is that narrow, no table that wide.
WIDE_WIDTH = 10_000

_RESERVED_NAMES = {
    ids.UNASSIGNED_DIR_TEXT: "UNASSIGNED",
    ids.LOST_DIR_TEXT: "LOST",
    ids.MIGRATING_DIR_TEXT: "MIGRATING",
}


def console(*, wide: bool = False) -> Console:
    """The console to print tables on: the terminal's width (`COLUMNS` when not a terminal), or
    with `wide` as wide as each table needs, so lines may be longer than the terminal."""
    return Console(width=WIDE_WIDTH) if wide else Console()


def short_ids(values: Iterable[str], *, wide: bool = False) -> dict[str, str]:
    """Each id → its prefix of one length for all, at least `SHORT_ID_LENGTH` and long enough that
    no two ids share it; every id whole when `wide`. Reserved dir ids are left out."""
    distinct = sorted({v for v in values if v not in _RESERVED_NAMES})
    if wide:
        return {v: v for v in distinct}
    length = SHORT_ID_LENGTH
    for left, right in itertools.pairwise(distinct):  # sorted: a longest shared prefix is a neighbour's
        shared = next((i for i, (a, b) in enumerate(zip(left, right, strict=False)) if a != b), len(left))
        length = max(length, shared + 1)
    return {v: v[:length] for v in distinct}


@dataclass(frozen=True)
class DirNames:
    """How one table names directory ids: reserved ids by name, then the alias if there is one
    (with the whole id when `wide`), else the id, short unless `wide` (`short_ids`)."""

    short: Mapping[str, str]
    aliases: Mapping[str, str] = field(default_factory=dict)
    wide: bool = False

    @classmethod
    def of(
        cls, directories: Iterable[str], *, aliases: Mapping[str, str] | None = None, wide: bool = False
    ) -> DirNames:
        return cls(short=short_ids(directories, wide=wide), aliases=dict(aliases or {}), wide=wide)

    def label(self, directory: str) -> str:
        """Rich markup naming `directory`."""
        if directory in _RESERVED_NAMES:
            return f"[yellow]{_RESERVED_NAMES[directory]}[/]"
        alias = self.aliases.get(directory)
        if alias is not None:
            return f"{escape(alias)} ({directory})" if self.wide else escape(alias)
        return escape(self.short.get(directory, directory))


def path_base(paths: Sequence[str]) -> str | None:
    """The deepest directory holding each of `paths` (so each has a name below it), or None when
    there is nothing to strip (a relative path among them, or only `/` in common)."""
    if not paths or not all(posixpath.isabs(p) for p in paths):
        return None
    base = posixpath.commonpath([posixpath.dirname(posixpath.normpath(p)) for p in paths])
    return None if base == "/" else base


def shown_dir(path: str, cwd: str | None) -> str:
    """`path` relative to `cwd` when it lies below it and that is shorter, else as it is."""
    if cwd is None:
        return path
    relative = posixpath.relpath(path, cwd)
    return relative if not relative.startswith("..") and len(relative) < len(path) else path


def _ints(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values) or "-"


def brokers_table(
    brokers: Sequence[Mapping[str, Any]], aliases: Mapping[str, str] | None = None, *, wide: bool = False
) -> Table:
    """A row per broker: state, online and offline dirs, unassigned replicas (and listeners if `wide`)."""
    table = Table(title="Brokers", title_justify="left")
    for column in ("broker", "epoch", "state"):
        table.add_column(column)
    table.add_column("online dirs", no_wrap=True)
    table.add_column("offline dirs", no_wrap=True)
    table.add_column("unassigned")
    if wide:
        table.add_column("listeners")
    names = DirNames.of(
        [d for b in brokers for d in (*b["logDirs"], *b["offlineLogDirs"])], aliases=aliases, wide=wide
    )
    for b in brokers:
        if b["fenced"]:
            state = "[red]fenced[/]"
        elif b["inControlledShutdown"]:
            state = "[yellow]shutting down[/]"
        else:
            state = "[green]unfenced[/]"
        cells = [
            str(b["brokerId"]),
            str(b["brokerEpoch"]),
            state,
            "\n".join(names.label(d) for d in b["logDirs"]) or "-",
            "\n".join(f"[red]{names.label(d)}[/]" for d in b["offlineLogDirs"]) or "-",
            str(b["unassignedReplicas"]),
        ]
        if wide:
            listeners = (f"{x['name']}://{x['host']}:{x['port']}" for x in b.get("listeners", []))
            cells.append(escape("\n".join(listeners)) or "-")
        table.add_row(*cells)
    return table


def topics_table(topics: Sequence[Mapping[str, Any]], *, wide: bool = False) -> Table:
    """A row per topic; topic ids short unless `wide`."""
    table = Table(title="Topics", title_justify="left")
    table.add_column("topic")
    table.add_column("id", no_wrap=True)
    for column in ("partitions", "replication", "offline partitions", "configs"):
        table.add_column(column)
    topic_ids = short_ids((t["topicId"] for t in topics), wide=wide)
    for t in topics:
        parts = t["partitions"]
        offline = sum(1 for p in parts if p["leader"] == -1)
        table.add_row(
            escape(t["name"]),
            topic_ids[t["topicId"]],
            str(len(parts)),
            str(len(parts[0]["replicas"])) if parts else "-",
            f"[red]{offline}[/]" if offline else "0",
            ", ".join(f"{k}={v}" for k, v in sorted(t["configs"].items())) or "-",
        )
    return table


def partitions_table(
    topic: Mapping[str, Any], aliases: Mapping[str, str] | None = None, *, wide: bool = False
) -> Table:
    """A row per partition: leader, ISR, each replica's `broker: dir`, offline replicas. The title
    names the topic's whole id; dir ids are short unless `wide`."""
    table = Table(title=f"Topic {escape(topic['name'])} ({topic['topicId']})", title_justify="left")
    for column in ("partition", "leader", "leader epoch", "replicas", "isr"):
        table.add_column(column)
    table.add_column("directories", no_wrap=True)
    table.add_column("offline replicas")
    names = DirNames.of(
        (d for p in topic["partitions"] for d in p["directories"]), aliases=aliases, wide=wide
    )
    for p in topic["partitions"]:
        leader = "[red]none[/]" if p["leader"] == -1 else str(p["leader"])
        dirs = "\n".join(
            f"{b}: {names.label(d)}" for b, d in zip(p["replicas"], p["directories"], strict=True)
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


def log_dirs_table(
    broker_id: int, dirs: Sequence[Mapping[str, Any]], *, wide: bool = False, cwd: str | None = None
) -> Table:
    """One broker's log dirs (`jbodctl log-dirs`' JSON: DescribeLogDirs joined with the broker's
    `GET /v1/log-dirs`): a row per dir, future replicas (moves in progress) by name (with `wide`,
    and their lag in offsets while they have one; and the dir's log cleaner), and under the table one line per dir with an
    error. Unless `wide`, paths are shown relative to the directory holding them all, which the
    title names (relative to `cwd` when that is shorter)."""
    paths = [str(d["path"]) for d in dirs if d.get("path")]
    base = None if wide else path_base(paths)
    title = f"Broker {broker_id} log dirs"
    if base is not None:
        title += f" in {escape(shown_dir(base, cwd).rstrip('/'))}/"
    table = Table(title=title, title_justify="left", caption_justify="left")
    table.add_column("path")
    table.add_column("directory id", no_wrap=True)
    table.add_column("state")
    table.add_column("cordoned")
    for column in ("usable", "total", "replicas"):
        table.add_column(column, justify="right")
    table.add_column("future replicas")
    if wide:  # 80 columns hold the rest only
        table.add_column("cleaner")
    names = DirNames.of((str(d["directoryId"]) for d in dirs if d.get("directoryId")), wide=wide)
    errors: list[str] = []
    for d in dirs:
        path = str(d.get("path") or "-")
        if base is not None and d.get("path"):
            path = posixpath.relpath(path, base)
        if d.get("error"):
            errors.append(f"{path}: {d['error']}")
        state = str(d.get("state") or "-")
        if state == "offline":
            state = "[red]offline[/]"
        elif state == "online":
            state = "[green]online[/]"
        else:
            state = f"[yellow]{escape(state)}[/]"
        replicas = d.get("replicas") or []
        future = [r for r in replicas if r.get("future")]
        table.add_row(
            escape(path),
            names.label(str(d["directoryId"])) if d.get("directoryId") else "-",
            state,
            "[yellow]space[/]" if d.get("spaceCordoned") else "[yellow]yes[/]" if d.get("cordoned") else "-",
            human_bytes(d.get("usableBytes")),
            human_bytes(d.get("totalBytes")),
            str(len(replicas) - len(future)),
            "\n".join(escape(_future_label(r, wide=wide)) for r in future) or "-",
            *([_cleaner_label(d.get("cleaner"))] if wide else []),
        )
    if errors:
        table.caption = Text(
            "\n".join(errors), style="red", no_wrap=not wide, overflow="fold" if wide else "ellipsis"
        )
    return table


def _cleaner_label(cleaner: Mapping[str, Any] | None) -> str:
    """A dir's log cleaner: its state (what it cleans now), and what it removed so far."""
    if not cleaner:
        return "-"
    state = str(cleaner.get("state"))
    if state == "failed":
        return "[red]failed[/]"
    if cleaner.get("cleaning"):
        state = f"cleaning {escape(str(cleaner['cleaning']))}"
    freed = int(cleaner.get("bytesFreed") or 0)
    return f"{state}, {human_bytes(freed)} freed" if cleaner.get("runs") else state


def _future_label(replica: Mapping[str, Any], *, wide: bool) -> str:
    lag = int(replica.get("offsetLag") or 0)
    name = f"{replica['topic']}-{replica['partition']}"
    return f"{name} (lag {lag:,})" if lag > 0 and wide else name


def bullets(console: Console) -> Callable[[str], None]:
    """A function printing one dimmed-bullet progress line per message (local cluster, demo)."""

    def say(message: str) -> None:
        console.print(f"[dim]•[/] {message}", highlight=False)

    return say
