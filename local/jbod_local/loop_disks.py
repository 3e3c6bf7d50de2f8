"""Loop-mounted disk images (root only): with `jbodctl local up --loop` every disk of the local
cluster is an ext4 image (`broker-N/disk-K.img`) loop-mounted at its path, so that `fail-disk`
fails a real filesystem.

Guarantees:
* `check_loop_support` raises `LocalClusterError` (one line) unless this runs as root with every
  tool of `LOOP_TOOLS` on PATH.
* `mount_loop_disk` does nothing where something is mounted already, creates and formats the image
  only when it is missing, and detaches the loop device it attached if mounting fails.
  `unmount_loop_disk` unmounts lazily and detaches the loop device (nothing mounted: a no-op).
* `shut_down_filesystem` is EXT4_IOC_SHUTDOWN: from then on every read, write or fsync under the
  path fails with EIO.
* A tool that fails raises `LocalClusterError` naming its command line and its stderr.
* Mounts are read from /proc/self/mountinfo (its octal escapes undone); of several mounts on one
  path the last one wins.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import struct
import subprocess
from pathlib import Path

from jbod_local.processes import LocalClusterError

EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2
LOOP_TOOLS = ("mkfs.ext4", "losetup", "mount", "umount", "blockdev")


def check_loop_support() -> None:
    if os.geteuid() != 0:
        raise LocalClusterError("loop-mounted disks need root (losetup, mount); run without --loop")
    missing = [tool for tool in LOOP_TOOLS if shutil.which(tool) is None]
    if missing:
        raise LocalClusterError(f"loop-mounted disks need {', '.join(missing)}; install them or drop --loop")


def _tool(*args: str) -> str:
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LocalClusterError(f"{' '.join(args)} failed: {result.stderr.strip() or result.returncode}")
    return result.stdout.strip()


def _unescape_mount_path(text: str) -> str:
    return text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_of(path: Path) -> tuple[str, str] | None:
    """(source device, super options) of the filesystem mounted exactly at `path`, if any."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    found = None
    for line in lines:
        fields, _, tail = line.partition(" - ")
        parts = fields.split()
        if len(parts) > 4 and _unescape_mount_path(parts[4]) == str(path):
            rest = tail.split()
            found = (rest[1], rest[2] if len(rest) > 2 else "")  # the last mount on a path wins
    return found


def mount_points() -> set[Path]:
    """Every path something is mounted at (/proc/self/mountinfo)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return set()
    return {
        Path(_unescape_mount_path(parts[4])) for parts in (line.split() for line in lines) if len(parts) > 4
    }


def mount_loop_disk(image: Path, path: Path, *, size_mib: int) -> None:
    """Loop-mount the ext4 `image` at `path` (creating and formatting it first if missing)."""
    path.mkdir(parents=True, exist_ok=True)
    if mount_of(path) is not None:
        return
    if not image.exists():
        with open(image, "wb") as handle:
            handle.truncate(size_mib * 1024 * 1024)
        _tool("mkfs.ext4", "-q", "-F", "-E", "nodiscard", str(image))
    device = _tool("losetup", "--find", "--show", str(image))
    try:
        _tool("blockdev", "--setrw", device)  # loop devices may attach read-only
        _tool("mount", "-t", "ext4", device, str(path))
    except LocalClusterError:
        subprocess.run(["losetup", "-d", device], capture_output=True, check=False)
        raise


def unmount_loop_disk(path: Path) -> None:
    """Lazily unmount `path` and detach its loop device (no-op when nothing is mounted there)."""
    mounted = mount_of(path)
    if mounted is None:
        return
    _tool("umount", "-l", str(path))
    if mounted[0].startswith("/dev/loop"):
        subprocess.run(["losetup", "-d", mounted[0]], capture_output=True, check=False)


def shut_down_filesystem(path: Path) -> None:
    """EXT4_IOC_SHUTDOWN: from now on every read, write or fsync under `path` returns EIO."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
    finally:
        os.close(fd)
