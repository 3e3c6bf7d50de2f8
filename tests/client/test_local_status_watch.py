"""`jbodctl local status --watch` against a real local cluster (3 brokers x 3 disks, a topic, a
failed disk): piped, it prints plain snapshots as it goes; in an 80x24 terminal nothing is cut."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from jbod_cli.local_cli import compact_lines
from jbod_core.ids import UNASSIGNED_DIR
from jbod_local import disk_faults, status, supervisor
from jbod_local.layout import STATE_FILE, read_layout

JBODCTL = str(Path(sys.executable).parent / "jbodctl")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
FAILED_DISK: list[int] = []  # the disk of broker 2 the fixture failed


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("watch") / "c"
    try:
        layout = supervisor.up(path).layout
        supervisor.create_topic(layout, "orders", partitions=6, replication_factor=3)
        deadline = time.monotonic() + 30
        while True:  # until every replica sits in a dir
            with layout.controller() as client:
                partitions = client.describe_topic("orders")["partitions"]
            if all(str(UNASSIGNED_DIR) not in p["directories"] for p in partitions):
                break
            assert time.monotonic() < deadline, partitions
            time.sleep(0.2)
        on_broker_2 = {
            d for p in partitions for b, d in zip(p["replicas"], p["directories"], strict=True) if b == 2
        }
        disk = 1 + next(i for i, d in enumerate(layout.broker(2).directory_ids) if d in on_broker_2)
        failure = disk_faults.fail_disk(path, 2, str(disk))
        assert failure.offline_after is not None
        FAILED_DISK.append(disk)
        yield path
    finally:
        if (path / STATE_FILE).exists():  # never leave processes behind
            supervisor.down(path, grace=2)


def read_until(fd: int, needle: str, *, count: int, deadline: float) -> str:
    """Read `fd` until `needle` appeared `count` times (or the deadline); all that was read."""
    out = b""
    while out.decode(errors="replace").count(needle) < count and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # a pty whose other side closed
                break
            if not chunk:
                break
            out += chunk
    return out.decode(errors="replace")


def interrupt(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGINT)
    try:
        return process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


@pytest.mark.integration
@pytest.mark.slow
def test_watch_piped_prints_plain_snapshots_while_it_runs(root: Path) -> None:
    process = subprocess.Popen(
        [JBODCTL, "local", "status", "--watch", "--dir", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "120"},
    )
    try:
        assert process.stdout is not None
        out = read_until(process.stdout.fileno(), "Every 1s:", count=3, deadline=time.monotonic() + 60)
        still_running = process.poll() is None
    finally:
        interrupt(process)
    assert still_running
    assert out.count("Every 1s:") >= 3, out  # the snapshots arrive while it runs, one per second
    assert "\x1b[" not in out  # plain text, no terminal codes
    snapshot = out.split("Every 1s:")[1]
    assert "Processes" in snapshot and "broker 3" in snapshot and "orders" in snapshot


@pytest.mark.integration
@pytest.mark.slow
def test_watch_in_an_80x24_terminal_cuts_nothing(root: Path) -> None:
    snapshot = status.status(root)
    lines = compact_lines(snapshot, width=80, height=23, now="12:00:00")
    console = Console(width=80, height=24, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    for line in lines:
        console.print(line)
    text = console.export_text()
    assert len(text.splitlines()) <= 23
    assert "…" not in text and "more lines" not in text, text
    assert f"{FAILED_DISK[0]}:OFFLINE" in text and "orders" in text and "offline 2" in text, text

    parent, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in {"COLUMNS", "LINES"}}
    process = subprocess.Popen(
        [JBODCTL, "local", "status", "--watch", "--dir", str(root)],
        stdin=child,
        stdout=child,
        stderr=child,
        env={**env, "TERM": "xterm-256color"},
        start_new_session=True,
    )
    os.close(child)
    try:
        raw = read_until(parent, "controller http", count=3, deadline=time.monotonic() + 60)
    finally:
        interrupt(process)
        os.close(parent)
    screen = ANSI.sub("", raw)
    assert screen.count("controller http") >= 3, screen  # redrawn every second
    assert "..." not in screen and "…" not in screen, screen
    assert all(len(line) <= 80 for line in re.split(r"[\r\n]", screen)), screen
    assert f"{FAILED_DISK[0]}:OFFLINE" in screen and "orders" in screen


def test_status_fits_80_columns_and_wide_shows_everything(root: Path) -> None:
    """`jbodctl local status` (not watching) at 80 columns: no line is longer, no id is cut with an
    ellipsis (short ids, unique in the table), the failed disk's error is one line; `--wide` shows
    the paths and the ids whole."""
    env = {**os.environ, "COLUMNS": "80", "LINES": "200", "NO_COLOR": "1", "TERM": "dumb"}
    layout = read_layout(root)
    shown = subprocess.run(
        [JBODCTL, "local", "status", "--dir", str(root)], capture_output=True, text=True, env=env, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, shown.stdout
    section = shown.stdout[shown.stdout.index("Log dirs") :]
    section = section[: section.index("Partitions")] if "Partitions" in section else section
    words = set(re.split(r"[\s│|]+", section))
    for broker in layout.brokers:
        for directory in filter(None, broker.directory_ids):
            assert any(len(w) >= 8 and directory.startswith(w) for w in words), (directory, section)
    assert f"b2/disk-{FAILED_DISK[0]}:" in section
    wide = subprocess.run(
        [JBODCTL, "local", "status", "--wide", "--dir", str(root)],
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "250"},
        timeout=60,
    )
    assert wide.returncode == 0, wide.stderr
    for broker in layout.brokers:
        assert all(directory in wide.stdout for directory in filter(None, broker.directory_ids))
        assert str(broker.disks[0]) in wide.stdout
