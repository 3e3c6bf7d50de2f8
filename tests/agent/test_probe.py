"""Disk health probes against real filesystems (`jbod_agent.disks.probe`, protocol §4.3).

Covers: OK with sizes on a plain dir, a healthy ext4 and a tmpfs; FULL (not FAILED) on a filled
tmpfs — also when an earlier probe left its file behind — and OK again once space is freed;
FAILED with EIO after an ext4 shutdown, EROFS after a read-only remount, after a lazy unmount
(device changed, and `meta.properties` vanished under the old device id), when `meta.properties`
carries another directory id, was deleted or is damaged, and when the dir is gone; the probe file
does not stay behind; `classify_io_error` for EIO, EROFS, ENOTCONN, ESTALE, ENOSPC, EDQUOT.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from jbod_agent.disks import probe
from jbod_agent.disks.probe import ProbeOutcome, ProbeResult
from jbod_core.ids import Uuid
from tests.agent.support import format_dir
from tests.fs import fill, loop_ext4, requires_root, tmpfs

PAYLOAD = os.urandom(4096 + 123)  # more than one page


def probe_now(path: Path, *, directory_id: Uuid, device: int | None = None) -> ProbeResult:
    return probe.probe_dir(
        path,
        device=os.stat(path).st_dev if device is None else device,
        directory_id=directory_id,
        payload=PAYLOAD,
    )


def formatted(path: Path) -> Uuid:
    directory_id = format_dir(path)
    assert directory_id is not None
    return directory_id


def assert_ok(result: ProbeResult) -> None:
    assert result.outcome is ProbeOutcome.OK, result
    assert result.error is None
    assert result.total_bytes > 0
    assert 0 < result.usable_bytes <= result.total_bytes
    assert result.seconds >= 0


def test_ok_on_a_plain_dir(tmp_path: Path) -> None:
    directory_id = formatted(tmp_path)
    assert_ok(probe_now(tmp_path, directory_id=directory_id))
    assert not (tmp_path / probe.PROBE_FILE).exists()
    assert_ok(probe_now(tmp_path, directory_id=directory_id))  # and again


@requires_root
def test_ok_on_ext4(tmp_path: Path) -> None:
    with loop_ext4(tmp_path / "disk") as disk:
        directory_id = formatted(disk.path)
        result = probe_now(disk.path, directory_id=directory_id)
        assert_ok(result)
        assert result.total_bytes > 16 * 1024 * 1024


@requires_root
def test_ok_on_tmpfs(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "t", size_kb=512) as path:
        directory_id = formatted(path)
        result = probe_now(path, directory_id=directory_id)
        assert_ok(result)
        assert result.total_bytes == 512 * 1024


@requires_root
@pytest.mark.parametrize("probed_before", [False, True])
def test_full_tmpfs_is_full_not_failed(tmp_path: Path, probed_before: bool) -> None:
    with tmpfs(tmp_path / "t", size_kb=256) as path:
        directory_id = formatted(path)
        if probed_before:  # the normal case: the agent probes every second
            assert_ok(probe_now(path, directory_id=directory_id))
        fill(path)
        result = probe_now(path, directory_id=directory_id)
        assert result.outcome is ProbeOutcome.FULL, result
        assert result.error is not None and "ENOSPC" in result.error
        assert result.total_bytes == 256 * 1024
        assert result.usable_bytes == 0
        # Still full on the next probe.
        assert probe_now(path, directory_id=directory_id).outcome is ProbeOutcome.FULL
        (path / "filler").unlink()
        assert_ok(probe_now(path, directory_id=directory_id))


@requires_root
def test_shut_down_ext4_fails_with_eio(tmp_path: Path) -> None:
    with loop_ext4(tmp_path / "disk") as disk:
        directory_id = formatted(disk.path)
        device = os.stat(disk.path).st_dev
        assert_ok(probe_now(disk.path, directory_id=directory_id, device=device))
        disk.shutdown()
        result = probe_now(disk.path, directory_id=directory_id, device=device)
        assert result.outcome is ProbeOutcome.FAILED, result
        assert result.error is not None and "EIO" in result.error


@requires_root
def test_read_only_remount_fails_with_erofs(tmp_path: Path) -> None:
    with loop_ext4(tmp_path / "disk") as disk:
        directory_id = formatted(disk.path)
        subprocess.run(["mount", "-o", "remount,ro", str(disk.path)], check=True, capture_output=True)
        result = probe_now(disk.path, directory_id=directory_id)
        assert result.outcome is ProbeOutcome.FAILED, result
        assert result.error is not None and "EROFS" in result.error


@requires_root
def test_detached_volume_fails(tmp_path: Path) -> None:
    with loop_ext4(tmp_path / "disk") as disk:
        directory_id = formatted(disk.path)
        device = os.stat(disk.path).st_dev
        disk.detach()
        result = probe_now(disk.path, directory_id=directory_id, device=device)
        assert result.outcome is ProbeOutcome.FAILED, result
        assert result.error is not None and "volume changed" in result.error
        # Had the device id matched (say, the same device number reused), the missing
        # meta.properties still gives the swap away.
        result = probe_now(disk.path, directory_id=directory_id)
        assert result.outcome is ProbeOutcome.FAILED, result
        assert result.error is not None and "meta.properties vanished" in result.error


def test_swapped_volume_fails(tmp_path: Path) -> None:
    directory_id = formatted(tmp_path)
    other = Uuid(0x5EED, 0xF00D)
    format_dir(tmp_path, directory_id=other)
    result = probe_now(tmp_path, directory_id=directory_id)
    assert result.outcome is ProbeOutcome.FAILED, result
    assert result.error is not None
    assert str(directory_id) in result.error and str(other) in result.error


def test_meta_properties_without_an_id_fails(tmp_path: Path) -> None:
    directory_id = formatted(tmp_path)
    format_dir(tmp_path, with_id=False)
    assert probe_now(tmp_path, directory_id=directory_id).outcome is ProbeOutcome.FAILED


def test_deleted_meta_properties_fails(tmp_path: Path) -> None:
    directory_id = formatted(tmp_path)
    (tmp_path / "meta.properties").unlink()
    result = probe_now(tmp_path, directory_id=directory_id)
    assert result.outcome is ProbeOutcome.FAILED, result
    assert result.error is not None and "vanished" in result.error


@pytest.mark.parametrize("content", [b"version=5\n", b"version=1\nnode.id=1\n", b"cluster.id=\xff\xfe\n"])
def test_damaged_meta_properties_fails(tmp_path: Path, content: bytes) -> None:
    directory_id = formatted(tmp_path)
    (tmp_path / "meta.properties").write_bytes(content)
    result = probe_now(tmp_path, directory_id=directory_id)
    assert result.outcome is ProbeOutcome.FAILED, result
    assert result.error


def test_vanished_dir_fails(tmp_path: Path) -> None:
    path = tmp_path / "gone"
    directory_id = formatted(path)
    device = os.stat(path).st_dev
    (path / "meta.properties").unlink()
    path.rmdir()
    result = probe_now(path, directory_id=directory_id, device=device)
    assert result.outcome is ProbeOutcome.FAILED, result
    assert result.error is not None and "ENOENT" in result.error


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        (errno.EIO, ProbeOutcome.FAILED),
        (errno.EROFS, ProbeOutcome.FAILED),
        (errno.ENOTCONN, ProbeOutcome.FAILED),
        (errno.ESTALE, ProbeOutcome.FAILED),
        (errno.ENOENT, ProbeOutcome.FAILED),
        (errno.EACCES, ProbeOutcome.FAILED),
        (errno.ENOSPC, ProbeOutcome.FULL),
        (errno.EDQUOT, ProbeOutcome.FULL),
    ],
)
def test_classify_io_error(code: int, outcome: ProbeOutcome) -> None:
    assert probe.classify_io_error(OSError(code, os.strerror(code))) is outcome


def test_classify_io_error_without_errno() -> None:
    assert probe.classify_io_error(OSError("mystery")) is ProbeOutcome.FAILED


def test_describe_os_error() -> None:
    assert probe.describe_os_error(OSError(errno.EIO, "Input/output error")) == "EIO: Input/output error"
    assert probe.describe_os_error(OSError("no errno")) == "no errno"
