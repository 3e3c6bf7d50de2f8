"""Local replicas on disk: one directory `<topic>-<partition>` per replica inside a log dir.

Guarantees:
* A replica directory holds `partition.metadata` (`version=0`, `topic_id=<uuid>`), written
  atomically, so a replica found at startup is tied to its topic id and a topic recreated under
  the same name is never mistaken for the old one.
* `scan` reports every replica directory of a log dir with its topic id; directories without a
  readable `partition.metadata` are reported as unreadable, never silently adopted.
* A replica to delete is first renamed `<name>.<topic id>-delete` (`mark_deleted`, never seen
  by `scan` again), then removed; a start finds the ones a crash left (`scan_deleted`).
* `create` / `delete` raise `OSError` untouched so the caller can classify it (EIO → the dir
  goes offline, ENOSPC → the dir is full).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from jbod_core.ids import Uuid
from jbod_core.meta_properties import parse_properties
from jbod_runtime.durable_files import write_atomically

METADATA_FILE: Final = "partition.metadata"
_REPLICA_DIR: Final = re.compile(r"(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)")


@dataclass(frozen=True, slots=True)
class FoundReplica:
    topic: str
    partition: int
    topic_id: Uuid | None  # None: partition.metadata missing or unreadable
    path: Path


def replica_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_replica_dir_name(name: str) -> tuple[str, int] | None:
    match = _REPLICA_DIR.fullmatch(name)
    return None if match is None else (match["topic"], int(match["partition"]))


def scan(log_dir: Path) -> Iterator[FoundReplica]:
    """Every replica directory in `log_dir` (OSError if the dir cannot be listed)."""
    with os.scandir(log_dir) as entries:
        for entry in entries:
            match = _REPLICA_DIR.fullmatch(entry.name)
            if match is None or not entry.is_dir(follow_symlinks=False):
                continue
            topic_id: Uuid | None
            try:
                with open(os.path.join(entry.path, METADATA_FILE), encoding="utf-8") as file:
                    values = parse_properties(file.read())
                topic_id = Uuid.parse(values.get("topic_id", ""))
            except (OSError, ValueError):
                topic_id = None
            yield FoundReplica(match["topic"], int(match["partition"]), topic_id, Path(entry.path))


def create(log_dir: Path, *, topic: str, partition: int, topic_id: Uuid, sync: bool = True) -> Path:
    """Create the replica dir and its `partition.metadata`.

    With `sync=False` nothing is fsync'd (the caller syncs a whole batch once): a crash can then
    leave a dir without readable metadata, which `scan` ignores and the next reconcile creates
    again, so no fsync per replica is needed for safety.
    """
    path = log_dir / replica_dir_name(topic, partition)
    path.mkdir(exist_ok=True)
    content = f"version=0\ntopic_id={topic_id}\n".encode()
    if sync:
        write_atomically(path / METADATA_FILE, content)
    else:
        (path / METADATA_FILE).write_bytes(content)
    return path


def delete(path: Path) -> None:
    shutil.rmtree(path)


DELETE_SUFFIX: Final = "-delete"


def mark_deleted(path: Path, topic_id: Uuid) -> Path:
    """Rename a replica to `<name>.<topic id>-delete` (one rename, so a large replica leaves the
    serving path at once); `delete` then removes it, and `scan_deleted` finds those a crash left."""
    target = path.with_name(f"{path.name}.{topic_id}{DELETE_SUFFIX}")
    path.rename(target)
    return target


def scan_deleted(log_dir: Path) -> list[Path]:
    """The replicas renamed by `mark_deleted` and not yet removed (OSError if unlistable)."""
    with os.scandir(log_dir) as entries:
        return [
            Path(e.path)
            for e in entries
            if e.name.endswith(DELETE_SUFFIX) and e.is_dir(follow_symlinks=False)
        ]


def mark_stray(path: Path, topic_id: Uuid) -> Path:
    """Rename a replica the metadata does not know to `<name>.<topic id>-stray` (kept, not deleted)."""
    target = path.with_name(f"{path.name}.{topic_id}-stray")
    path.rename(target)
    return target


def size_bytes(path: Path) -> int:
    total = 0
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    except OSError:
        return 0
    return total
