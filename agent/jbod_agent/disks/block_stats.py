"""The kernel's I/O counters of the block device under a log dir (`/sys/dev/block/<major>:<minor>/stat`,
the kernel's Documentation/block/stat.rst): what the disk itself read and wrote, whoever asked for
it (appends and their flushes, page-cache writeback, replication, the log cleaner, moves between
dirs, reads of consumers the page cache missed).

Guarantees:
* `parse_stat(text)` is the counters of one stat file: sectors are 512 bytes whatever the
  device's sector size (the file's unit), times are milliseconds; `ValueError` for text that is
  not one (fewer than 11 fields, or not integers).
* `read_block_stats(device)` reads the stat file of `device` (a `st_dev`): None, never an
  exception, when the file system has no block device (tmpfs, overlayfs: major 0) or the file
  cannot be read or parsed. A read of sysfs does not touch the disk, so a hung disk does not hang
  it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

SECTOR_BYTES: Final = 512
SYS_DEV_BLOCK: Final = Path("/sys/dev/block")


@dataclass(frozen=True, slots=True)
class BlockStats:
    reads: int  # read requests completed
    read_bytes: int
    read_ms: int  # time spent on reads (summed over requests)
    writes: int  # write requests completed
    written_bytes: int
    write_ms: int
    busy_ms: int  # time the device had requests in flight (its utilisation)


def parse_stat(text: str) -> BlockStats:
    fields = text.split()
    if len(fields) < 11:
        raise ValueError(f"a block device stat has at least 11 fields, not {len(fields)}")
    values = [int(field) for field in fields[:11]]
    return BlockStats(
        reads=values[0],
        read_bytes=values[2] * SECTOR_BYTES,
        read_ms=values[3],
        writes=values[4],
        written_bytes=values[6] * SECTOR_BYTES,
        write_ms=values[7],
        busy_ms=values[9],
    )


def read_block_stats(device: int, *, root: Path = SYS_DEV_BLOCK) -> BlockStats | None:
    if os.major(device) == 0:
        return None  # no block device behind this file system
    try:
        text = (root / f"{os.major(device)}:{os.minor(device)}" / "stat").read_text(encoding="ascii")
        return parse_stat(text)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
