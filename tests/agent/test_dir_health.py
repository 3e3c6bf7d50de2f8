"""Probe rounds (`DirMonitor`): every dir probed each round in one thread, a hung probe fails only
its own dir, and the dirs after it are probed again on a fresh thread."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from jbod_agent.disks.dir_health import DirMonitor
from jbod_agent.disks.probe import ProbeOutcome, ProbeResult
from jbod_agent.placement import DirHealth
from jbod_agent.ports import SystemClock
from jbod_agent.state import AgentState, LogDirState
from jbod_core.ids import Uuid
from tests.agent.runtime_support import until_in_real_time
from tests.agent.test_config import parse

pytestmark = pytest.mark.asyncio

OK = ProbeResult(ProbeOutcome.OK, None, 0.001, total_bytes=10 << 30, usable_bytes=8 << 30)


class HangingDisks:
    """A prober: every dir answers OK, except `hung`, whose probe blocks until `release` is set."""

    def __init__(self, hung: Path) -> None:
        self.hung = hung
        self.release = threading.Event()
        self.probes: list[tuple[Path, int]] = []

    def __call__(self, state: LogDirState, payload: bytes) -> ProbeResult:
        self.probes.append((state.path, threading.get_ident()))
        if state.path == self.hung:
            self.release.wait(30)
        return OK


def _state(paths: list[Path]) -> AgentState:
    dirs = {
        Uuid(1, n + 1): LogDirState(path=p, directory_id=Uuid(1, n + 1), device=0)
        for n, p in enumerate(paths)
    }
    return AgentState(
        config=parse(log_dir_probe_interval_ms="20", log_dir_probe_timeout_ms="200"),
        cluster_id="c",
        incarnation=Uuid(5, 5),
        dirs=dirs,
        startup_offline=[],
        metadata_dir=LogDirState(path=Path("/meta"), directory_id=Uuid(9, 9), device=0),
    )


async def test_a_round_probes_every_dir_and_the_metadata_dir_in_one_thread() -> None:
    disks = HangingDisks(hung=Path("/none"))
    state = _state([Path("/d0"), Path("/d1")])
    monitor = DirMonitor(state, SystemClock(), disks)
    answers = await monitor.probe_round([*state.dirs.values(), state.metadata_dir])
    assert [(s.path, r) for s, r in answers] == [(Path("/d0"), OK), (Path("/d1"), OK), (Path("/meta"), OK)]
    assert len({thread for _, thread in disks.probes}) == 1
    monitor.shutdown()


async def test_a_hung_probe_fails_its_dir_only_and_the_others_go_on_in_a_fresh_thread() -> None:
    disks = HangingDisks(hung=Path("/d1"))
    state = _state([Path("/d0"), Path("/d1"), Path("/d2")])
    monitor = DirMonitor(state, SystemClock(), disks)
    failed: list[Uuid] = []
    monitor.on_failed.append(failed.append)
    task = asyncio.create_task(monitor.probe_forever(lambda: None))
    try:
        await until_in_real_time(lambda: bool(failed))
        hung_thread = next(t for p, t in disks.probes if p == Path("/d1"))
        # After the timeout, /d2 and the metadata dir are probed again, on another thread.
        await until_in_real_time(lambda: any(p == Path("/d2") and t != hung_thread for p, t in disks.probes))
        await until_in_real_time(lambda: sum(1 for p, _ in disks.probes if p == Path("/meta")) >= 3)
    finally:
        task.cancel()
        disks.release.set()
        monitor.shutdown()
    assert failed == [Uuid(1, 2)]
    assert [d.health for d in state.dirs.values()] == [DirHealth.ONLINE, DirHealth.OFFLINE, DirHealth.ONLINE]
    assert "probe timed out after 200 ms" in (state.dirs[Uuid(1, 2)].error or "")
    assert state.metadata_dir_error is None
    assert sum(1 for p, _ in disks.probes if p == Path("/d1")) == 1  # an offline dir is not probed again
