"""Durable small files: atomic replacement, directory fsync and `meta.properties` on disk.

The file I/O half of `jbod_core.meta_properties` (which parses and renders, and does no I/O),
shared by every package that writes such files: the agent (`jbod-storage`, replica metadata,
moves), the controller (its data dir's identity, its log's new files) and the local cluster.

Guarantees:
* `write_atomically(path, data)` writes a temp file next to `path`, fsyncs it, renames it over
  `path` and fsyncs the directory: a reader sees the old file or the new one, never a mix, and
  after it returns the new file survives a crash. A failed rename removes the temp file.
* `replace_atomically(path, data)` is the same temp file and rename without any fsync: a reader
  sees the old file or the new one, and the new one is durable only once the caller fsyncs the
  file and its directory (for derived files whose writer flushes them with its data later, such
  as a partition log's indexes and leader-epoch checkpoint). The temp file is `path` + `.tmp`.
* `fsync_directory(directory)` makes a rename or a new file in `directory` durable.
* `read_meta_properties(directory)` is `meta_properties.parse` of `directory/meta.properties`:
  `FileNotFoundError` when absent, `OSError` when unreadable, `ValueError` (`MetaPropertiesError`,
  `UnicodeDecodeError`) when malformed. `write_meta_properties` replaces it with
  `write_atomically`.
"""

from __future__ import annotations

import os
from pathlib import Path

from jbod_core import meta_properties
from jbod_core.meta_properties import MetaProperties


def read_meta_properties(directory: Path) -> MetaProperties:
    """Read `directory/meta.properties`; `FileNotFoundError` if absent, `OSError` if unreadable."""
    return meta_properties.parse((directory / meta_properties.FILE_NAME).read_text(encoding="utf-8"))


def write_meta_properties(directory: Path, props: MetaProperties) -> None:
    """Atomically replace `directory/meta.properties` (temp file, fsync, rename, fsync dir)."""
    write_atomically(directory / meta_properties.FILE_NAME, meta_properties.render(props).encode("utf-8"))


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` by `data` durably and atomically (the module's guarantee)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def replace_atomically(path: Path, data: bytes) -> None:
    """Replace `path` by `data` atomically but not durably (the module's guarantee)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            if written <= 0:
                raise OSError(f"write to {tmp} returned {written}")
            view = view[written:]
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def fsync_directory(directory: Path) -> None:
    """Make a rename or a new file in `directory` durable."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
