"""`jbodctl local fail-disk` and `restore-disk`: take one disk of a running local broker away, and
put it back (the cluster's lifecycle is `jbod_local.supervisor`'s).

Guarantees:
* A failed disk needs no root: its dir is renamed away and a marker file is left at its path, so the
  running broker's disk probe finds the volume gone, and a restarted broker starts with the dir
  offline (unreadable) instead of formatting a fresh one. `restore_disk` puts the dir back and
  restarts the broker, as a dir that went offline only comes back after a restart (as in Kafka).
* With loop disks (`jbod_local.loop_disks`, root only) a failed disk is a real one: its filesystem
  is shut down (EXT4_IOC_SHUTDOWN, every later I/O fails with EIO); `restore_disk` unmounts and
  mounts it again.
* `fail_disk` waits at most `wait` seconds for the controller to show the dir offline, and not at
  all with `wait` 0 (`DiskFailure.awaited` is False then: the disk is failed, nothing more is
  asked of the controller).
* Both hold the cluster directory's lock (`layout.exclusive`); cluster.json lists the pid of the
  broker `restore_disk` restarted once it is started.
* Every user mistake (unknown broker or disk, no cluster in DIR, a disk already failed or not
  failed, a broker that is not running) raises `LocalClusterError` with one line, before anything
  is changed.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jbod_client.controller import ClientError, ControllerClient
from jbod_local import supervisor
from jbod_local.layout import (
    BrokerLayout,
    ClusterLayout,
    broker_alive,
    controller_alive,
    exclusive,
    read_layout,
    resolve_root,
    write_layout,
)
from jbod_local.loop_disks import (
    check_loop_support,
    mount_loop_disk,
    mount_of,
    shut_down_filesystem,
    unmount_loop_disk,
)
from jbod_local.processes import LocalClusterError, stop_processes
from jbod_local.supervisor import Report
from jbod_runtime import durable_files

FAILED_MARKER_TEXT = (
    "This disk was failed by `jbodctl local fail-disk`; its data is in {moved}.\n"
    "Run `jbodctl local restore-disk {broker} {disk}` to put it back.\n"
)


def resolve_disk(layout: ClusterLayout, broker_id: int, disk: str) -> tuple[BrokerLayout, int]:
    """(broker, 1-based disk index) for DISK given as an index or a path; `LocalClusterError` else."""
    broker = layout.broker(broker_id)
    count = len(broker.disks)
    text = disk.strip()
    if text.isdigit():
        index = int(text)
        if not 1 <= index <= count:
            raise LocalClusterError(f"broker {broker_id} has disks 1..{count}, not {index}")
        return broker, index
    wanted = Path(text).expanduser().resolve()
    for index, path in enumerate(broker.disks, start=1):
        if path == wanted or path.name == text:
            return broker, index
    raise LocalClusterError(f"{disk!r} is not a disk of broker {broker_id} (give 1..{count} or its path)")


@dataclass(frozen=True)
class LeaderMove:
    topic: str
    partition: int
    old_leader: int
    new_leader: int


def leader_moves(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]) -> list[LeaderMove]:
    """Partitions whose leader changed between two GET /v1/topics answers."""
    old = {(t["name"], p["partitionIndex"]): int(p["leader"]) for t in before for p in t["partitions"]}
    moves = []
    for t in after:
        for p in t["partitions"]:
            key = (t["name"], p["partitionIndex"])
            if key in old and old[key] != int(p["leader"]):
                moves.append(LeaderMove(t["name"], p["partitionIndex"], old[key], int(p["leader"])))
    return moves


@dataclass(frozen=True)
class DiskFailure:
    broker_id: int
    index: int
    path: Path
    moved_to: Path | None  # where the dir went (None with loop disks: the filesystem was shut down)
    directory_id: str | None
    failed_at: float  # the clock's reading when the disk was taken away
    awaited: bool  # whether the controller was watched for the dir going offline (wait > 0)
    offline_after: float | None  # seconds until the controller showed the dir offline; None: not seen
    leader_moves: tuple[LeaderMove, ...]  # empty when not awaited


def _require_running(layout: ClusterLayout, broker: BrokerLayout) -> None:
    if not controller_alive(layout):
        raise LocalClusterError(
            f"the local cluster in {layout.root} is not running (start it with: jbodctl local up)"
        )
    if not broker_alive(broker):
        raise LocalClusterError(f"broker {broker.broker_id} is not running (start it with: jbodctl local up)")


def fail_disk(  # noqa: PLR0913  `jbodctl local fail-disk`'s arguments and --wait, plus the report hook and the clock
    root: Path,
    broker_id: int,
    disk: str,
    *,
    wait: float = 15.0,
    report: Report = supervisor.quiet,
    clock: Callable[[], float] = time.monotonic,
) -> DiskFailure:
    """Fail disk `disk` of a running broker (rename + marker file, or with loop disks shut its
    filesystem down) and wait, at most `wait` seconds (0: not at all), until the controller shows
    its dir offline for that broker."""
    root = read_layout(resolve_root(root)).root  # no cluster there: say so before taking the lock
    with exclusive(root):
        layout = read_layout(root)
        broker, index = resolve_disk(layout, broker_id, disk)
        path = broker.disks[index - 1]
        if broker.disk_failed(index):
            raise LocalClusterError(f"disk {index} of broker {broker_id} is already failed ({path})")
        _require_running(layout, broker)
        if layout.loop:
            check_loop_support()
            if mount_of(path) is None:
                raise LocalClusterError(f"disk {index} of broker {broker_id} is not mounted at {path}")
        try:
            directory_id: str | None = str(durable_files.read_meta_properties(path).directory_id)
        except (OSError, ValueError):
            directory_id = None
        awaited = wait > 0
        with layout.controller(timeout=5.0) as client:
            before = client.list_topics() if awaited else []
            failed_at = clock()
            moved_to = _take_away(layout, broker, index, report=report)
            seen_at = (
                _await_offline(client, broker_id, directory_id, deadline=failed_at + wait, clock=clock)
                if awaited
                else None
            )
            offline_after = None if seen_at is None else seen_at - failed_at
            after = client.list_topics() if offline_after is not None else before
    return DiskFailure(
        broker_id=broker_id,
        index=index,
        path=path,
        moved_to=moved_to,
        directory_id=directory_id,
        failed_at=failed_at,
        awaited=awaited,
        offline_after=offline_after,
        leader_moves=tuple(leader_moves(before, after)),
    )


def _take_away(layout: ClusterLayout, broker: BrokerLayout, index: int, *, report: Report) -> Path | None:
    """Fail the disk: shut its loop filesystem down, or move its dir to the marker path (returned)."""
    path = broker.disks[index - 1]
    marker = broker.failed_path(index)
    broker_id = broker.broker_id
    if layout.loop:
        shut_down_filesystem(path)
        marker.write_text(f"The filesystem at {path} was shut down by `jbodctl local fail-disk`\n")
        report(
            f"Failed disk {index} of broker {broker_id}: shut down the ext4 filesystem at {path} "
            "(EXT4_IOC_SHUTDOWN: every I/O on it now fails with EIO)"
        )
        return None
    os.rename(path, marker)
    path.write_text(FAILED_MARKER_TEXT.format(moved=marker, broker=broker_id, disk=index))
    report(f"Failed disk {index} of broker {broker_id}: moved {path} to {marker}")
    return marker


def _await_offline(
    client: ControllerClient,
    broker_id: int,
    directory_id: str | None,
    *,
    deadline: float,
    clock: Callable[[], float],
) -> float | None:
    """The clock's reading when the controller first listed the dir offline for the broker; None
    if it did not before `deadline`."""
    while clock() < deadline:
        with contextlib.suppress(ClientError):
            view = client.broker(broker_id)
            if directory_id is not None and directory_id in view["offlineLogDirs"]:
                return clock()
        time.sleep(0.1)
    return None


@dataclass(frozen=True)
class DiskRestore:
    broker_id: int
    index: int
    path: Path
    directory_id: str | None
    restarted: bool
    seconds: float
    broker_epoch: int | None


def restore_disk(
    root: Path,
    broker_id: int,
    disk: str,
    *,
    timeout: float = 45.0,
    report: Report = supervisor.quiet,
) -> DiskRestore:
    """Put a disk failed by `fail_disk` back and restart its broker (if it runs), then wait until it
    is unfenced with every disk's dir online."""
    root = read_layout(resolve_root(root)).root
    with exclusive(root):
        return _restore_disk(read_layout(root), broker_id, disk, timeout=timeout, report=report)


def _restore_disk(
    layout: ClusterLayout, broker_id: int, disk: str, *, timeout: float, report: Report
) -> DiskRestore:
    started_at = time.monotonic()
    broker, index = resolve_disk(layout, broker_id, disk)
    path = broker.disks[index - 1]
    moved = broker.failed_path(index)
    if not broker.disk_failed(index):
        raise LocalClusterError(f"disk {index} of broker {broker_id} is not failed ({path})")
    if layout.loop:
        check_loop_support()
    elif path.is_dir():
        raise LocalClusterError(f"{path} is a directory again; move it away before restoring {moved}")
    running = broker_alive(broker)
    if running and not controller_alive(layout):
        raise LocalClusterError(f"the controller of {layout.root} is not running (run: jbodctl local up)")
    if running:
        report(f"Stopping broker {broker_id} (an offline dir comes back only after a restart)")
        stop_processes([(broker.pid, broker.config_path)] if broker.pid else [], grace=15)
        layout = layout.with_broker(replace(broker, pid=None))
        write_layout(layout)
    if layout.loop:
        assert layout.loop_disk_mib is not None
        unmount_loop_disk(path)
        moved.unlink()
        if running:
            mount_loop_disk(broker.image_path(index), path, size_mib=layout.loop_disk_mib)
            report(
                f"Restored disk {index} of broker {broker_id}: mounted {broker.image_path(index)} at {path} again"
            )
        else:
            report(
                f"Restored disk {index} of broker {broker_id}: unmounted the dead filesystem; up mounts it again"
            )
    else:
        path.unlink(missing_ok=True)
        os.rename(moved, path)
        report(f"Restored disk {index} of broker {broker_id}: moved {moved} back to {path}")
    if not running:
        return DiskRestore(broker_id, index, path, None, False, time.monotonic() - started_at, None)
    report(f"Starting broker {broker_id} again")
    broker = replace(layout.broker(broker_id), directory_ids=supervisor.directory_ids(broker))
    if not supervisor.port_free(broker.port):
        broker = replace(broker, port=supervisor.free_port(layout.ports()))
    layout = layout.with_broker(broker)
    supervisor.local_broker(layout, broker).write_config()
    broker = supervisor.start_broker(layout, broker)
    layout = layout.with_broker(broker)
    write_layout(layout)
    wanted = [
        d for i, d in enumerate(broker.directory_ids, start=1) if d is not None and not broker.disk_failed(i)
    ]
    views = supervisor.await_brokers_ready(
        layout, [broker_id], deadline=started_at + timeout, online_dirs={broker_id: wanted}
    )
    return DiskRestore(
        broker_id=broker_id,
        index=index,
        path=path,
        directory_id=broker.directory_ids[index - 1],
        restarted=True,
        seconds=time.monotonic() - started_at,
        broker_epoch=int(views[broker_id]["brokerEpoch"]),
    )
