"""`jbodctl local up|down|status|fail-disk|restore-disk` against real processes, and the demo's
verification rules (pure)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jbod_cli.demo import DeliveryLog
from jbod_local import loop_disks, supervisor
from jbod_local.layout import STATE_FILE, exclusive
from tests.broker.conftest import wait_for
from tests.client.local_commands import ok, run, status


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jbodctl: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "cluster"
    yield path
    if (path / STATE_FILE).exists():  # never leave processes behind
        supervisor.down(path, grace=2)


def running(pid: int) -> bool:
    """A live process (a zombie has an empty command line)."""
    try:
        return bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return False


def disk_ids(data: dict[str, Any]) -> dict[int, list[str]]:
    return {b["brokerId"]: [d["directoryId"] for d in b["disks"]] for b in data["brokers"]}


@pytest.mark.integration
@pytest.mark.slow
def test_lifecycle_up_fail_restore_down_up(root: Path) -> None:
    out = ok("up", "--dir", str(root))
    assert "every broker is unfenced" in out
    # The next step it suggests is the one command that sets the URL, the token and the telemetry dir.
    assert f'eval "$(jbodctl local env --dir {root})"' in out
    first = status(root)
    assert first["running"] and first["controller"]["running"]
    assert [b["brokerId"] for b in first["brokers"]] == [1, 2, 3]
    for broker in first["brokers"]:
        assert broker["running"] and broker["registered"] and broker["fenced"] is False
        assert [d["path"] for d in broker["disks"]] == [
            str(root / f"broker-{broker['brokerId']}" / f"disk-{k}") for k in (1, 2, 3)
        ]
        assert all(d["state"] == "online" for d in broker["disks"])
        assert sorted(broker["logDirs"]) == sorted(d["directoryId"] for d in broker["disks"])
        assert broker["offlineLogDirs"] == []
    ids = disk_ids(first)
    assert len({i for dirs in ids.values() for i in dirs}) == 9

    assert "already up" in ok("up", "--dir", str(root))

    # Bad input changes nothing.
    state_before = (root / STATE_FILE).read_text()
    assert "no broker 7" in one_line_error(run("fail-disk", "7", "1", "--dir", str(root)))
    assert "disks 1..3, not 4" in one_line_error(run("fail-disk", "2", "4", "--dir", str(root)))
    assert "not a disk of broker 2" in one_line_error(run("fail-disk", "2", "/nowhere", "--dir", str(root)))
    assert "is not failed" in one_line_error(run("restore-disk", "2", "1", "--dir", str(root)))
    # A wait of 0 where the command cannot do without one is refused before anything happens.
    assert run("restore-disk", "2", "1", "--timeout", "0", "--dir", str(root)).returncode == 2
    assert run("kill-controller", "--wait", "0", "--dir", str(root)).returncode == 2
    with exclusive(root):
        assert "another jbodctl local command" in one_line_error(
            run("fail-disk", "2", "1", "--dir", str(root))
        )
    assert (root / STATE_FILE).read_text() == state_before
    assert all((root / "broker-2" / f"disk-{k}").is_dir() for k in (1, 2, 3))

    failed_id = ids[2][0]
    out = ok("fail-disk", "2", "1", "--dir", str(root))
    assert f"took dir {failed_id} of broker 2 offline" in out
    assert (root / "broker-2" / ".failed-disk-1").is_dir()
    after_failure = status(root)
    broker2 = after_failure["brokers"][1]
    assert broker2["offlineLogDirs"] == [failed_id]
    assert failed_id not in broker2["logDirs"]
    assert broker2["disks"][0]["state"] == "offline" and broker2["disks"][0]["failedByFailDisk"]
    assert "already failed" in one_line_error(run("fail-disk", "2", "disk-1", "--dir", str(root)))

    out = ok("restore-disk", "2", str(root / "broker-2" / "disk-1"), "--dir", str(root))
    assert "unfenced again" in out
    restored = status(root)["brokers"][1]
    assert restored["fenced"] is False and restored["offlineLogDirs"] == []
    assert sorted(restored["logDirs"]) == sorted(ids[2])
    assert all(d["state"] == "online" for d in restored["disks"])

    # --wait 0 does not wait (issue 30): the disk is failed, the command exits 0 at once, and the
    # controller takes the dir offline on its own.
    out = ok("fail-disk", "3", "2", "--wait", "0", "--dir", str(root))
    assert "Failed disk 2 of broker 3" in out and "not waiting for the controller (--wait 0)" in out
    assert (root / "broker-3" / ".failed-disk-2").is_dir()
    wait_for(
        lambda: status(root)["brokers"][2]["offlineLogDirs"] == [ids[3][1]],
        timeout=60,
        what="the controller showing disk 2 of broker 3 offline",
    )
    ok("restore-disk", "3", "2", "--dir", str(root))

    current = status(root)
    pids = [current["controller"]["pid"], *(b["pid"] for b in current["brokers"])]
    out = ok("down", "--dir", str(root))
    assert "Stopped broker 1, broker 2, broker 3, controller" in out
    assert not any(running(pid) for pid in pids)
    assert "not running" in one_line_error(run("status", "--dir", str(root)))
    assert "already down" in ok("down", "--dir", str(root))

    ok("up", "--dir", str(root))
    again = status(root)
    assert again["clusterId"] == first["clusterId"]
    assert disk_ids(again) == ids
    assert all(b["fenced"] is False for b in again["brokers"])

    ok("down", "--dir", str(root), "--purge")
    assert not root.exists()


def test_commands_without_a_cluster_say_so(tmp_path: Path) -> None:
    for args in (("status",), ("down",), ("fail-disk", "1", "1"), ("restore-disk", "1", "1")):
        line = one_line_error(run(*args, "--dir", str(tmp_path)))
        assert f"no local cluster in {tmp_path}" in line
    (tmp_path / "precious").write_text("keep me")
    line = one_line_error(run("up", "--fresh", "--dir", str(tmp_path)))
    assert "refusing" in line
    assert (tmp_path / "precious").exists()


# -- the demo's delivery log (pure) -------------------------------------------------------------


def test_delivery_log_times_acknowledgements() -> None:
    now = [0.0]
    log = DeliveryLog(clock=lambda: now[0])
    rids = [log.send(0), log.send(0), log.send(1)]
    assert rids == [("p0", 0), ("p0", 1), ("p1", 0)]
    log.on_ack(rids[0], 0, 0)
    now[0] = 2.0
    log.on_ack(rids[1], 0, 1)
    assert log.first_ack_after([0], 1.0) == 2.0
    assert log.first_ack_after([1], 0.0) is None


@pytest.mark.integration
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(t) for t in loop_disks.LOOP_TOOLS),
    reason="needs root and mkfs.ext4/losetup/mount (CI runs as root)",
)
def test_loop_disks_fail_for_real_and_survive_restarts(root: Path) -> None:
    ok("up", "--dir", str(root), "--loop", "--disk-size", "16", "--disks", "2")
    disks = [root / f"broker-{b}" / f"disk-{k}" for b in (1, 2, 3) for k in (1, 2)]
    assert all(loop_disks.mount_of(d) is not None for d in disks)
    ids = disk_ids(status(root))

    out = ok("fail-disk", "1", "2", "--dir", str(root))
    assert "EXT4_IOC_SHUTDOWN" in out
    broker1 = status(root)["brokers"][0]
    assert broker1["offlineLogDirs"] == [ids[1][1]]
    assert broker1["disks"][1]["state"] == "offline" and "EIO" in broker1["disks"][1]["error"]

    ok("down", "--dir", str(root))
    assert not any(loop_disks.mount_of(d) for d in disks)
    ok("up", "--dir", str(root))  # the failed disk stays failed: shut down again at mount
    broker1 = status(root)["brokers"][0]
    assert broker1["disks"][1]["state"] == "offline" and ids[1][1] not in broker1["logDirs"]

    ok("restore-disk", "1", "2", "--dir", str(root))
    broker1 = status(root)["brokers"][0]
    assert sorted(broker1["logDirs"]) == sorted(ids[1]) and broker1["fenced"] is False
    assert disk_ids(status(root)) == ids

    ok("down", "--dir", str(root), "--purge")
    assert not any(loop_disks.mount_of(d) for d in disks)
    assert not root.exists()
