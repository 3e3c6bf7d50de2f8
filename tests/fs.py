"""Real filesystems that really fail, for tests (needs root: loop devices, mount, ioctl).

* `loop_ext4(dir)`: an ext4 image attached to a loop device (forced read-write with
  `blockdev --setrw`, as loop devices may attach read-only here) and mounted at `dir`.
  `shutdown()` issues EXT4_IOC_SHUTDOWN: from then on every I/O on it returns EIO.
  `detach()` lazily unmounts it (a volume pulled out from under a running process).
* `tmpfs(dir, size)`: a small tmpfs, for full-disk (ENOSPC) tests via `fill()`.
* `BlkioThrottle(pid)`: a cgroup v1 blkio group holding process `pid`, whose writes to a device
  are throttled by the kernel (`slow(device, iops)`: a slow disk; `hang(device)`: 1 byte per
  second, a disk that stops answering; `release(device)`: full speed again).
Everything is unmounted and detached when the context exits, even after a failure.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2

IS_ROOT = os.geteuid() == 0
HAS_TOOLS = all(shutil.which(t) for t in ("mkfs.ext4", "losetup", "mount", "umount", "blockdev"))
requires_root = pytest.mark.skipif(
    not (IS_ROOT and HAS_TOOLS), reason="needs root and mkfs.ext4/losetup/mount (CI runs as root)"
)


def _run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout.strip()


@dataclass
class LoopMount:
    path: Path
    image: Path
    device: str
    mounted: bool = True

    def shutdown(self) -> None:
        """Make the filesystem fail: every later read, write or fsync returns EIO."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
        finally:
            os.close(fd)

    def detach(self) -> None:
        """Lazily unmount (the volume is pulled away; open files keep a dead reference)."""
        if self.mounted:
            _run("umount", "-l", str(self.path))
            self.mounted = False


@contextlib.contextmanager
def loop_ext4(path: Path, *, size_mb: int = 32) -> Iterator[LoopMount]:
    path.mkdir(parents=True, exist_ok=True)
    image = path.with_name(path.name + ".img")
    with open(image, "wb") as handle:
        handle.truncate(size_mb * 1024 * 1024)
    _run("mkfs.ext4", "-q", "-F", "-E", "nodiscard", str(image))
    device = _run("losetup", "--find", "--show", str(image))
    try:
        _run("blockdev", "--setrw", device)
        _run("mount", device, str(path))
        mount = LoopMount(path=path, image=image, device=device)
        try:
            yield mount
        finally:
            if mount.mounted:
                subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)
    finally:
        subprocess.run(["losetup", "-d", device], check=False, capture_output=True)
        image.unlink(missing_ok=True)


@contextlib.contextmanager
def tmpfs(path: Path, *, size_kb: int = 1024) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    _run("mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill(path: Path) -> None:
    """Write into `path` until the filesystem is full (ENOSPC)."""
    chunk = b"\0" * (64 * 1024)
    with open(path / "filler", "ab", buffering=0) as handle:
        while True:
            try:
                handle.write(chunk)
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    return
                raise


BLKIO: Final = Path("/sys/fs/cgroup/blkio")
requires_blkio = pytest.mark.skipif(
    not (IS_ROOT and (BLKIO / "blkio.throttle.write_iops_device").exists()),
    reason="needs root and cgroup v1 blkio throttling (a disk made slow by the kernel)",
)


def device_number(device: str) -> str:
    """`major:minor` of a block device such as /dev/loop3."""
    rdev = os.stat(device).st_rdev
    return f"{os.major(rdev)}:{os.minor(rdev)}"


class BlkioThrottle:
    """A blkio cgroup holding process `pid` (every thread): its writes to a device are throttled
    by the kernel's block layer, fsync included, so the disk is really slow for that process."""

    def __init__(self, pid: int, name: str) -> None:
        self.group = BLKIO / name
        self.group.mkdir(exist_ok=True)
        self.pid = pid
        self.devices: set[str] = set()
        (self.group / "cgroup.procs").write_text(str(pid))

    def _set(self, device: str, knob: str, value: int) -> None:
        (self.group / f"blkio.throttle.{knob}").write_text(f"{device_number(device)} {value}")

    def slow(self, device: str, *, iops: int) -> None:
        self.devices.add(device)
        self._set(device, "write_iops_device", iops)

    def hang(self, device: str) -> None:
        self.devices.add(device)
        self._set(device, "write_bps_device", 1)

    def release(self, device: str) -> None:
        """Full speed again: the throttled writes queued so far go through."""
        for knob in ("write_iops_device", "write_bps_device"):
            self._set(device, knob, 0)
        self.devices.discard(device)

    def close(self) -> None:
        for device in list(self.devices):
            with contextlib.suppress(OSError):
                self.release(device)
        with contextlib.suppress(OSError):
            (BLKIO / "cgroup.procs").write_text(str(self.pid))
        with contextlib.suppress(OSError):
            self.group.rmdir()
