"""`jbodctl local up` after a crash and `down --purge` on a mount point, with real processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jbod_local import supervisor
from jbod_local.layout import STATE_FILE, controller_alive, read_layout
from tests.client.local_commands import ok, status


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "cluster"
    yield path
    if (path / STATE_FILE).exists():  # never leave processes behind
        supervisor.down(path, grace=2)


@pytest.mark.integration
@pytest.mark.slow
def test_up_after_kill_9_of_the_controller_restarts_only_it_on_its_port(root: Path) -> None:
    ok("up", "--dir", str(root), "--brokers", "2", "--disks", "1")
    before = status(root)
    controller_pid = before["controller"]["pid"]
    broker_pids = {b["brokerId"]: b["pid"] for b in before["brokers"]}
    # Let the brokers talk to the controller, so that the kill leaves its port in TIME_WAIT.
    ok("status", "--dir", str(root))
    os.kill(controller_pid, signal.SIGKILL)
    layout = read_layout(root)
    deadline = time.monotonic() + 10
    while controller_alive(layout) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not controller_alive(layout)

    out = ok("up", "--dir", str(root))
    assert "started controller;" in out, out
    after = status(root)
    assert after["controller"]["running"] and after["controller"]["pid"] != controller_pid
    assert after["controller"]["url"] == before["controller"]["url"]
    assert {b["brokerId"]: b["pid"] for b in after["brokers"]} == broker_pids
    assert all(b["running"] and b["registered"] and b["fenced"] is False for b in after["brokers"])


@pytest.mark.integration
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="needs root to mount a tmpfs")
def test_down_purge_empties_a_mounted_controller_dir_and_keeps_the_mount_point(root: Path) -> None:
    controller_dir = root / "controller"
    controller_dir.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(controller_dir)], check=True)
    try:
        ok("up", "--dir", str(root), "--brokers", "1", "--disks", "1")
        assert any(controller_dir.iterdir())
        out = ok("down", "--dir", str(root), "--purge")
        assert f"kept the mount point(s) {controller_dir}" in out, out
        assert os.path.ismount(controller_dir)
        assert list(controller_dir.iterdir()) == []
        assert [p.name for p in root.iterdir()] == ["controller"]
    finally:
        subprocess.run(["umount", "-l", str(controller_dir)], check=False)
