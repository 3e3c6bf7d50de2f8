"""`jbod_agent.disks.pulse`: the pulse threads and their watcher, with real threads and the real
clock; the disks are stand-ins whose beat blocks while a test holds it (the real disks' hang is
`tests/broker/test_slow_disks.py`'s, made by the kernel's block throttling)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Hashable
from pathlib import Path

import pytest

from jbod_agent.disks import pulse
from jbod_core import disk_stall
from tests.agent.runtime_support import until_in_real_time

TIMEOUT = 0.1


class Disk:
    """A beat that answers at once, or blocks while `hung`."""

    def __init__(self) -> None:
        self.answering = threading.Event()
        self.answering.set()
        self.beats = 0
        self.closed = False

    def beat(self) -> None:
        self.answering.wait()
        self.beats += 1

    def close(self) -> None:
        self.closed = True


def _in_flight_for(pulses: pulse.Pulses, key: Hashable) -> float:
    found = pulses.pulse(key)
    since = None if found is None else found.in_flight_since
    return 0.0 if since is None else time.monotonic() - since


def start(
    disks: dict[Hashable, Disk], changes: list[tuple[Hashable, bool, float]], **kw: float
) -> pulse.Pulses:
    pulses = pulse.Pulses(
        disks,
        timeout_s=kw.pop("timeout_s", TIMEOUT),
        monotonic=time.monotonic,
        on_change=lambda key, stalled, silent, waited: changes.append((key, stalled, time.monotonic())),
        loop=asyncio.get_running_loop(),
        **kw,
    )
    pulses.start()
    return pulses


@pytest.mark.asyncio
async def test_a_disk_that_stops_answering_stalls_at_the_timeout_and_is_released_once_it_answers() -> None:
    disks = {"a": Disk(), "b": Disk()}
    changes: list[tuple[Hashable, bool, float]] = []
    pulses = start(disks, changes, release_s=0.5)
    try:
        await until_in_real_time(lambda: disks["a"].beats >= 3 and disks["b"].beats >= 3)
        disks["a"].answering.clear()
        await until_in_real_time(lambda: changes != [])
        key, stalled, found_at = changes[0]
        last_answer = pulses.pulse("a").answered_at  # type: ignore[union-attr]
        assert (key, stalled) == ("a", True)
        assert last_answer is not None
        print(f"stall found {(found_at - last_answer) * 1000:.1f} ms after the last answer")
        assert found_at - last_answer >= TIMEOUT  # not before the timeout
        assert found_at - last_answer < disk_stall.DEFAULT_TIMEOUT_MS / 1000 + 1.0  # nowhere near 5 s
        disks["a"].answering.set()
        await until_in_real_time(lambda: len(changes) >= 2)
        assert [(k, s) for k, s, _ in changes] == [("a", True), ("a", False)]
        assert changes[1][2] - changes[0][2] >= 0.5  # released only after prompt answers for 0.5 s
    finally:
        pulses.stop()


@pytest.mark.asyncio
async def test_a_path_without_a_peer_and_a_forgotten_path_get_no_verdict() -> None:
    alone = {"a": Disk()}
    changes: list[tuple[Hashable, bool, float]] = []
    pulses = start(alone, changes)
    try:
        await until_in_real_time(lambda: alone["a"].beats >= 2)
        alone["a"].answering.clear()
        await until_in_real_time(lambda: _in_flight_for(pulses, "a") > 5 * TIMEOUT)
        assert changes == []  # a machine whose every disk is slow is not a hung disk
    finally:
        alone["a"].answering.set()
        pulses.stop()
    disks = {"a": Disk(), "b": Disk()}
    pulses = start(disks, changes)
    try:
        await until_in_real_time(lambda: disks["a"].beats >= 2)
        pulses.forget("a")
        disks["a"].answering.clear()
        beats = disks["b"].beats
        await until_in_real_time(lambda: disks["b"].beats >= beats + 10)
        assert changes == []
    finally:
        disks["a"].answering.set()
        pulses.stop()


@pytest.mark.asyncio
async def test_switching_the_detection_off_releases_a_stalled_path() -> None:
    disks = {"a": Disk(), "b": Disk()}
    changes: list[tuple[Hashable, bool, float]] = []
    pulses = start(disks, changes)
    try:
        await until_in_real_time(lambda: disks["a"].beats >= 2 and disks["b"].beats >= 2)
        disks["a"].answering.clear()
        await until_in_real_time(lambda: [(k, s) for k, s, _ in changes] == [("a", True)])
        pulses.timeout_s = 0  # log.dir.stall.timeout.ms set to 0 while the disk still hangs
        await until_in_real_time(lambda: [(k, s) for k, s, _ in changes] == [("a", True), ("a", False)])
    finally:
        disks["a"].answering.set()
        pulses.stop()


def test_the_pulse_file_is_one_block_written_and_read_back(tmp_path: Path) -> None:
    beat = pulse.PulseFile(tmp_path)
    beat.beat()
    beat.beat()
    assert (tmp_path / pulse.PULSE_FILE).stat().st_size == pulse.BLOCK
    beat.close()
    missing = pulse.PulseFile(tmp_path / "gone")
    with pytest.raises(OSError):
        missing.beat()
