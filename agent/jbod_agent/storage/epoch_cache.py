"""The leader-epoch cache of one replica's log and its `leader-epoch-checkpoint` file.

The cache is the history of leader epochs as (epoch, start offset) entries, oldest first: Kafka's
`LeaderEpochFileCache`, which OffsetsForLeaderEpoch and the followers' divergence check read.
The checkpoint is Kafka's text format: `0`, the count, then one `epoch start_offset` line each.

Guarantees:
* Entries have strictly increasing epochs with non-decreasing start offsets (`assign` keeps it so:
  a new entry first drops those at or after its start or with an epoch not below its own), and
  `end_offset_for` answers exactly as Kafka's `LeaderEpochFileCache.endOffsetFor`.
* `write` replaces the checkpoint atomically (temp file, rename) without an fsync: a leader change
  of 20,000 partitions would otherwise cost 40,000 fsyncs on the request path. The caller makes it
  durable with its data (`PartitionLog.flush` fsyncs the file and the dir).
* The checkpoint is derived data (the batches carry their epochs), so after a crash it may be torn,
  empty, or older than the batches that survived (its rename not yet durable): `load` rebuilds
  the history from the batches when the file cannot be parsed (`CorruptCheckpointError`, logged
  at WARNING) or names no epoch as recent as the last batch's, and says so, so the caller writes
  the repaired history. A missing file is an empty history.
* Nothing here knows the log's offsets: trimming to the log start and end is the caller's
  (`truncate_from_start`, `truncate_from_end`), as is when to write.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

from jbod_runtime import durable_files

log = logging.getLogger("jbod_agent.epoch_cache")

EPOCH_CHECKPOINT: Final = "leader-epoch-checkpoint"


class CorruptCheckpointError(ValueError):
    """A `leader-epoch-checkpoint` that cannot be parsed or is not monotonic."""


def checkpoint_path(replica_dir: Path) -> Path:
    return replica_dir / EPOCH_CHECKPOINT


class LeaderEpochCache:
    """(epoch, start offset) entries, oldest first (see the module docstring)."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[tuple[int, int]] = ()) -> None:
        self._entries: list[tuple[int, int]] = list(entries)

    @classmethod
    def from_batches(cls, batch_epochs: Iterable[tuple[int, int]]) -> LeaderEpochCache:
        """The history read from (leader epoch, base offset) of every batch, in log order."""
        entries: list[tuple[int, int]] = []
        for epoch, base_offset in batch_epochs:
            if not entries or epoch > entries[-1][0]:
                entries.append((epoch, base_offset))
        return cls(entries)

    @classmethod
    def load(
        cls,
        replica_dir: Path,
        *,
        last_batch_epoch: int,
        batch_epochs: Callable[[], Iterable[tuple[int, int]]],
    ) -> tuple[LeaderEpochCache, bool]:
        """The cache from the checkpoint in `replica_dir`, or rebuilt from `batch_epochs()` when the
        checkpoint is damaged or older than the log's last batch (`last_batch_epoch`); and whether
        it was rebuilt (then the caller should `write` it)."""
        path = checkpoint_path(replica_dir)
        try:
            cache = cls(read_checkpoint(path))
        except CorruptCheckpointError as exc:
            # The checkpoint is written without fsync (flush syncs it): after a power loss it
            # may be empty or torn. The batches carry their epochs, so the history is rebuilt.
            log.warning("%s; rebuilding the leader epochs from the log", exc)
            return cls.from_batches(batch_epochs()), True
        if last_batch_epoch > cache.latest_epoch:
            # Its rename was not durable when the batches were (a power loss between the
            # segment's fsync and the dir's): an older checkpoint than the log.
            log.warning(
                "%s names leader epoch %d at most, the log holds a batch of epoch %d; rebuilding the "
                "leader epochs from the log",
                path,
                cache.latest_epoch,
                last_batch_epoch,
            )
            return cls.from_batches(batch_epochs()), True
        return cache, False

    # -- reading -------------------------------------------------------------------------------

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else -1

    def __bool__(self) -> bool:
        return bool(self._entries)

    def entries(self) -> list[tuple[int, int]]:
        """(epoch, start offset) of every cached epoch, oldest first (a copy)."""
        return list(self._entries)

    def end_offset_for(self, epoch: int, end_offset: int) -> tuple[int, int]:
        """Kafka's `LeaderEpochFileCache.endOffsetFor` over a log ending at `end_offset`: (the
        largest cached epoch <= `epoch`, the start offset of the next cached epoch, or `end_offset`
        for the latest); (`epoch`, the first cached start offset) when `epoch` is below every
        cached epoch; (-1, -1) when the cache is empty, `epoch` is negative or above every cached
        epoch."""
        entries = self._entries
        if epoch < 0 or not entries:
            return -1, -1
        if entries[-1][0] == epoch:
            return epoch, end_offset
        higher = bisect.bisect_right(entries, (epoch, 1 << 63))  # first entry with a larger epoch
        if higher == len(entries):
            return -1, -1  # above every known epoch
        if higher == 0:
            return epoch, entries[0][1]  # below every known epoch: the data was deleted
        return entries[higher - 1][0], entries[higher][1]

    # -- changing ------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> None:
        """Kafka's `assign`: entries at or after `start_offset` (or with an epoch >= `epoch`) give
        way to the new one."""
        entries = self._entries
        while entries and (entries[-1][0] >= epoch or entries[-1][1] >= start_offset):
            entries.pop()
        entries.append((epoch, start_offset))

    def truncate_from_end(self, end_offset: int) -> bool:
        """Kafka's `truncateFromEnd`: drop the entries starting at or after `end_offset`; whether
        any was dropped."""
        entries = self._entries
        changed = False
        while entries and entries[-1][1] >= end_offset:
            entries.pop()
            changed = True
        return changed

    def truncate_from_start(self, start_offset: int) -> bool:
        """Kafka's `truncateFromStart`: the entry covering `start_offset` now starts there (those
        before it are dropped); whether anything changed."""
        entries = self._entries
        covering = bisect.bisect_right([start for _epoch, start in entries], start_offset)
        if covering == 0 or (covering == 1 and entries[0][1] == start_offset):
            return False
        epoch = entries[covering - 1][0]
        del entries[:covering]
        entries.insert(0, (epoch, start_offset))
        return True

    def clear(self) -> None:
        self._entries.clear()

    # -- the checkpoint file -------------------------------------------------------------------

    def write(self, replica_dir: Path) -> Path:
        """Replace the checkpoint in `replica_dir` atomically, without fsync (the module docstring
        says why); the path written."""
        lines = [f"{epoch} {start}\n" for epoch, start in self._entries]
        content = f"0\n{len(lines)}\n{''.join(lines)}".encode("ascii")
        path = checkpoint_path(replica_dir)
        durable_files.replace_atomically(path, content)
        return path


def read_checkpoint(path: Path) -> list[tuple[int, int]]:
    """The entries of the checkpoint at `path` ([] when there is none); `CorruptCheckpointError`
    when it cannot be parsed or its entries are not increasing."""
    try:
        text = path.read_bytes().decode("ascii")
    except FileNotFoundError:
        return []
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"{path}: not ASCII text") from None
    lines = text.split("\n")
    try:
        if lines[0] != "0":
            raise ValueError(f"unknown version {lines[0]!r}")
        count = int(lines[1])
        if count < 0 or lines[2 + count :] != [""]:
            raise ValueError(f"count {count} does not match {len(lines) - 3} entry lines")
        entries: list[tuple[int, int]] = []
        for line in lines[2 : 2 + count]:
            epoch_text, start_text = line.split(" ")
            epoch, start = int(epoch_text), int(start_text)
            if epoch < 0 or start < 0:
                raise ValueError(f"negative entry {line!r}")
            if entries and (epoch <= entries[-1][0] or start < entries[-1][1]):
                raise ValueError(f"entry {line!r} is not after {entries[-1]}")
            entries.append((epoch, start))
    except (ValueError, IndexError) as exc:
        raise CorruptCheckpointError(f"{path}: {exc}") from None
    return entries
