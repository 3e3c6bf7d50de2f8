"""Disk health: one synchronous probe of a log dir, and the rules that classify its outcome.

`probe_dir` runs in a worker thread (the caller bounds it with `log.dir.probe.interval.ms` and
`log.dir.probe.timeout.ms`; a probe slower than its timeout takes the dir offline).

Guarantees:
* A probe checks, in order: the path is still the mount it was at load (device id), the
  `meta.properties` under it still carries the same `directory.id`, and a probe file can be
  written (into newly allocated space), fsync'd, read back byte for byte and removed; then it
  reads the free space.
* ENOSPC / EDQUOT is `FULL` (not a failed disk); every other I/O error (EIO, EROFS, ENOTCONN,
  ESTALE, ...), a vanished or swapped volume, or bytes that do not read back is `FAILED`.
* `classify_io_error` is the single rule, also used when real work (an append, a read) fails.
"""

from __future__ import annotations

import enum
import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from jbod_core import meta_properties
from jbod_core.ids import Uuid
from jbod_runtime import durable_files

PROBE_FILE: Final = ".jbod-probe"
_FULL_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT})


class ProbeOutcome(enum.Enum):
    OK = "ok"
    FULL = "full"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ProbeResult:
    outcome: ProbeOutcome
    error: str | None
    seconds: float
    total_bytes: int = 0
    usable_bytes: int = 0


def describe_os_error(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0)
    return f"{name}: {exc.strerror}" if name else str(exc)


def classify_io_error(exc: OSError) -> ProbeOutcome:
    """FULL for a full disk or quota, FAILED for anything else."""
    return ProbeOutcome.FULL if exc.errno in _FULL_ERRNOS else ProbeOutcome.FAILED


def free_space(path: Path) -> tuple[int, int]:
    """(total bytes, bytes usable by this process)."""
    stats = os.statvfs(path)
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize


def _identity_problem(path: Path, *, device: int, directory_id: Uuid) -> str | None:
    """Why `path` no longer holds the volume it held at load (another device, a vanished or
    damaged `meta.properties`, another `directory.id`), or None."""
    current = os.stat(path).st_dev
    if current != device:
        return f"the volume changed under the path (device {device} → {current})"
    try:
        props = durable_files.read_meta_properties(path)
    except FileNotFoundError:
        return "meta.properties vanished (volume detached or replaced)"
    except meta_properties.MetaPropertiesError as exc:
        return f"meta.properties is damaged: {exc}"
    if props.directory_id != directory_id:
        return f"directory.id changed from {directory_id} to {props.directory_id} (volume swapped)"
    return None


def _write_reads_back(path: Path, payload: bytes) -> bool:
    """Write `payload` into the probe file, fsync it and read it back: True (and the file removed)
    when it reads back byte for byte."""
    probe = path / PROBE_FILE
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    with open(probe, "rb") as handle:
        if handle.read() != payload:
            return False
    # Removed so that the next probe allocates fresh space: rewriting a file that already holds
    # the payload reuses its blocks and would succeed on a full disk (never ENOSPC, never FULL).
    os.unlink(probe)
    return True


def probe_dir(path: Path, *, device: int, directory_id: Uuid, payload: bytes) -> ProbeResult:
    started = time.perf_counter()

    def result(outcome: ProbeOutcome, error: str | None, total: int = 0, usable: int = 0) -> ProbeResult:
        return ProbeResult(outcome, error, time.perf_counter() - started, total, usable)

    try:
        problem = _identity_problem(path, device=device, directory_id=directory_id)
        if problem is not None:
            return result(ProbeOutcome.FAILED, problem)
        if not _write_reads_back(path, payload):
            return result(ProbeOutcome.FAILED, "the probe file did not read back as written")
        total, usable = free_space(path)
    except OSError as exc:
        outcome = classify_io_error(exc)
        total = usable = 0
        if outcome is ProbeOutcome.FULL:
            try:
                total, usable = free_space(path)
            except OSError:
                outcome = ProbeOutcome.FAILED
        return result(outcome, describe_os_error(exc), total, usable)
    except (ValueError, UnicodeDecodeError) as exc:
        return result(ProbeOutcome.FAILED, f"meta.properties is unreadable: {exc}")
    return result(ProbeOutcome.OK, None, total, usable)
