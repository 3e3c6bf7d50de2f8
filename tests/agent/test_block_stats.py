"""The kernel's I/O counters of a log dir's block device (`jbod_agent.disks.block_stats`): the
stat file's fields in bytes and milliseconds, None for a file system without a block device or an
unreadable file; and the counters of a real device move when it is written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jbod_agent.disks.block_stats import BlockStats, parse_stat, read_block_stats

# A line of /sys/block/<dev>/stat (the kernel's Documentation/block/stat.rst): reads, merged,
# sectors, ms; writes, merged, sectors, ms; in flight, io ms, weighted ms; discards; flushes.
LINE = "    1200       10    80000      340     5000      300   160000     9100        2    12000    15000        0        0        0        0       70      900\n"


def test_fields_in_bytes_and_milliseconds() -> None:
    assert parse_stat(LINE) == BlockStats(
        reads=1200,
        read_bytes=80000 * 512,
        read_ms=340,
        writes=5000,
        written_bytes=160000 * 512,
        write_ms=9100,
        busy_ms=12000,
    )


@pytest.mark.parametrize("text", ["", "1 2 3", "1 2 3 4 5 6 7 8 9 10 x"])
def test_text_that_is_not_a_stat_line_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_stat(text)


def test_reads_the_device_of_a_dir_and_none_without_one(tmp_path: Path) -> None:
    device = os.makedev(7, 3)
    (tmp_path / "7:3").mkdir()
    (tmp_path / "7:3" / "stat").write_text(LINE)
    stats = read_block_stats(device, root=tmp_path)
    assert stats is not None and stats.written_bytes == 160000 * 512
    assert read_block_stats(os.makedev(7, 4), root=tmp_path) is None  # no such file
    assert read_block_stats(os.makedev(0, 52), root=tmp_path) is None  # tmpfs, overlayfs: no device
    (tmp_path / "7:3" / "stat").write_text("garbage\n")
    assert read_block_stats(device, root=tmp_path) is None


def test_a_real_device_counts_the_writes_of_a_file_on_it(tmp_path: Path) -> None:
    device = os.stat(tmp_path).st_dev
    before = read_block_stats(device)
    if before is None:
        pytest.skip("the test's tmp dir has no block device here (tmpfs, overlayfs)")
    path = tmp_path / "data"
    with path.open("wb") as out:
        out.write(os.urandom(1 << 20))
        out.flush()
        os.fsync(out.fileno())
    after = read_block_stats(device)
    assert after is not None and after.written_bytes > before.written_bytes and after.writes > before.writes
