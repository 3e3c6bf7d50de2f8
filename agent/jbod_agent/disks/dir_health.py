"""Disk health of a running broker: probe loops, and the one place a dir goes full or offline.

Guarantees:
* Each data dir and the metadata dir is probed every `log.dir.probe.interval.ms` in the dir's own
  worker thread, bounded by `log.dir.probe.timeout.ms` of this process's running time (a frozen
  process does not mistake a healthy disk for a hung one). The prober is injected: the real one is
  `probe.probe_dir`; tests pass fake disks.
* `fail_dir` takes a dir offline for good (until restart): its replicas move to the offline set,
  its failure is recorded for the next heartbeat (`FailedDir`), and every listener (`on_failed`:
  placement queue, mover, replica manager, the loop's wake-up) is told once. `mark_full` and a
  later probe with free space move a dir between FULL and ONLINE. `io_error` classifies an error
  from real work with the same rule as the probes (`probe.classify_io_error`).
* A failed metadata dir is recorded in `state.metadata_dir_error`; the decision to stop is
  `decide`'s, not this module's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import time
from collections.abc import Callable

from jbod_agent.disks import probe
from jbod_agent.placement import DirHealth
from jbod_agent.ports import Clock
from jbod_agent.state import AgentState, FailedDir, LogDirState
from jbod_core.ids import Uuid

log = logging.getLogger("jbod_agent")

Prober = Callable[[LogDirState, bytes], probe.ProbeResult]
ProbeHook = Callable[[Uuid, probe.ProbeResult], None]


def probe_log_dir(state: LogDirState, payload: bytes) -> probe.ProbeResult:
    """The real prober: the checks of `probe.probe_dir` on the dir's volume."""
    return probe.probe_dir(state.path, device=state.device, directory_id=state.directory_id, payload=payload)


class DirMonitor:
    """Implements the `DirFailures` port; runs the probe loops."""

    def __init__(self, state: AgentState, clock: Clock, prober: Prober = probe_log_dir) -> None:
        self.state = state
        self.clock = clock
        self.prober = prober
        self.on_failed: list[Callable[[Uuid], None]] = []
        self.on_probe: list[ProbeHook] = []
        self.probes_in_flight = 0  # probes started and not yet answered (or timed out)
        self._payload = os.urandom(512)

    # -- health changes ------------------------------------------------------------------------

    def io_error(self, directory: Uuid, exc: OSError, doing: str) -> None:
        """An I/O error from real work: a full disk is marked full, anything else fails the dir."""
        if probe.classify_io_error(exc) is probe.ProbeOutcome.FULL:
            self.mark_full(directory, f"{doing}: {probe.describe_os_error(exc)}")
        else:
            self.fail_dir(directory, f"{doing}: {probe.describe_os_error(exc)}")

    def mark_full(self, directory: Uuid, error: str) -> None:
        state = self.state.dirs[directory]
        if state.health is DirHealth.ONLINE:
            state.health, state.error, state.since = DirHealth.FULL, error, self.clock.time()
            log.warning(
                "Log dir %s (%s) is full: %s; it receives no new replicas", state.path, directory, error
            )

    def fail_dir(self, directory: Uuid, error: str) -> None:
        state = self.state.dirs[directory]
        if state.health is DirHealth.OFFLINE:
            return
        state.health, state.error, state.since = DirHealth.OFFLINE, error, self.clock.time()
        self.state.failed[directory] = FailedDir(failed_at=self.clock.monotonic())
        for key, local in list(self.state.local.items()):
            if local.directory_id == directory:
                self.state.offline_local[key] = self.state.local.pop(key)
        log.error("Took log dir %s (%s) offline: %s", state.path, directory, error)
        for listener in self.on_failed:
            listener(directory)

    # -- probe loops ---------------------------------------------------------------------------

    async def probe_once(self, state: LogDirState) -> probe.ProbeResult | None:
        """One probe in the dir's thread; None if it took longer than the probe timeout."""
        if state.executor is None:
            state.executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="probe")
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(state.executor, self.prober, state, self._payload)
        self.probes_in_flight += 1
        try:
            result = await bounded_by_running_time(future, self.state.config.log_dir_probe_timeout_ms / 1000)
        finally:
            self.probes_in_flight -= 1
        if result is None:
            state.executor.shutdown(wait=False)
            state.executor = None
        return result

    async def probe_forever(self, state: LogDirState) -> None:
        config = self.state.config
        interval = config.log_dir_probe_interval_ms / 1000
        while state.health is not DirHealth.OFFLINE and not self.state.stopping.is_set():
            result = await self.probe_once(state)
            if result is None:
                self.fail_dir(
                    state.directory_id, f"probe timed out after {config.log_dir_probe_timeout_ms} ms"
                )
                return
            for hook in self.on_probe:
                hook(state.directory_id, result)
            if result.outcome is probe.ProbeOutcome.FAILED:
                self.fail_dir(state.directory_id, result.error or "probe failed")
                return
            state.total_bytes, state.usable_bytes = result.total_bytes, result.usable_bytes
            if result.outcome is probe.ProbeOutcome.FULL:
                self.mark_full(state.directory_id, result.error or "no space left")
            elif state.health is DirHealth.FULL:
                state.health, state.error, state.since = DirHealth.ONLINE, None, self.clock.time()
                log.info("Log dir %s (%s) has free space again", state.path, state.directory_id)
            await self.clock.sleep(interval)

    async def probe_metadata_dir_forever(self, wake: Callable[[], None]) -> None:
        state = self.state.metadata_dir
        interval = self.state.config.log_dir_probe_interval_ms / 1000
        while not self.state.stopping.is_set():
            result = await self.probe_once(state)
            if result is None or result.outcome is probe.ProbeOutcome.FAILED:
                reason = "probe timed out" if result is None else result.error
                self.state.metadata_dir_error = f"the metadata log dir {state.path} failed: {reason}"
                wake()
                return
            await self.clock.sleep(interval)

    def shutdown(self) -> None:
        for state in [*self.state.dirs.values(), self.state.metadata_dir]:
            if state.executor is not None:
                state.executor.shutdown(wait=False, cancel_futures=True)


async def bounded_by_running_time(
    future: asyncio.Future[probe.ProbeResult], timeout: float
) -> probe.ProbeResult | None:
    """The future's result, or None once it has taken `timeout` seconds of this process's time.

    Time during which the whole process was frozen (SIGSTOP, a VM pause) is not counted: each
    step counts at most twice its nominal length, so a paused process does not mistake a healthy
    disk for a hung one, while a disk that hangs the probe thread is still caught in time.
    """
    step = max(0.005, min(0.1, timeout / 10))
    counted = 0.0
    last = time.monotonic()
    while True:
        done, _ = await asyncio.wait({future}, timeout=step)
        if done:
            return future.result()
        now = time.monotonic()
        counted += min(now - last, 2 * step)
        last = now
        if counted >= timeout:
            return None
