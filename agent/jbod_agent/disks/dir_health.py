"""Disk health of a running broker: probe loops, and the one place a dir goes full or offline.

Guarantees:
* Every `log.dir.probe.interval.ms`, one probe round probes each data dir not offline and the
  metadata dir, one after the other in the probe thread (an idle broker pays one thread wake-up
  and one event-loop wake-up per round, not one per dir); each probe is bounded by
  `log.dir.probe.timeout.ms` of this process's running time (a frozen process does not mistake a
  healthy disk for a hung one). A probe past its timeout fails its dir; the thread is left to the
  hung disk and the next round runs on a fresh one. Results are applied on the event loop when
  the round ends. The prober is injected: the real one is `probe.probe_dir`; tests pass fake
  disks.
* `fail_dir` takes a dir offline for good (until restart): its replicas move to the offline set,
  its failure is recorded for the next heartbeat (`FailedDir`), and every listener (`on_failed`:
  placement queue, mover, replica manager, the loop's wake-up) is told once. `mark_full` and a
  later probe with free space move a dir between FULL and ONLINE. Each probe's free space also
  decides whether the dir is cordoned for its space (`log.dir.cordon.threshold`,
  `jbod_core.disk_space`), with its fill rate over the recent probes; and each probe's latency,
  like each log flush's (`latency`), whether the dir is slow (`log.dir.slow.threshold.ms`,
  `jbod_core.disk_latency`). `io_error` classifies an error
  from real work with the same rule as the probes (`probe.classify_io_error`).
* `start_pulses` pulses every dir not offline, and the metadata dir when there is only one such
  dir (`pulse`); a dir whose pulse
  goes unanswered for `log.dir.stall.timeout.ms` while the others answer is `stalled` (reported
  slow, so its leaderships move at the next heartbeat, which the agent sends at once) until its
  pulses answer promptly again; `on_stall` listeners are told of each change. A dir taken
  offline is no longer pulsed. A stalled dir that has answered nothing for
  `log.dir.stall.offline.ms` more (0: at once) is taken offline; by default (-1) offline stays
  the probe timeout's decision.
* A failed metadata dir is recorded in `state.metadata_dir_error`; the decision to stop is
  `decide`'s, not this module's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from jbod_agent import dynamic_configs
from jbod_agent.disks import probe, pulse
from jbod_agent.placement import DirHealth
from jbod_agent.ports import Clock
from jbod_agent.state import AgentState, FailedDir, LogDirState
from jbod_core import disk_space, disk_stall
from jbod_core.ids import Uuid

log = logging.getLogger("jbod_agent")

Prober = Callable[[LogDirState, bytes], probe.ProbeResult]
ProbeHook = Callable[[Uuid, probe.ProbeResult], None]
ProbeAnswer = probe.ProbeResult | None  # None: the probe timed out
_METADATA: Final = "metadata"  # the metadata dir's key among the pulsed paths


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
        self.on_flush: list[Callable[[Uuid, float], None]] = []  # a log flush's fsync seconds
        self.on_stall: list[Callable[[Uuid], None]] = []  # a dir's stall found or released
        self.probes_in_flight = 0  # probe rounds started and not yet answered (or timed out)
        self._payload = os.urandom(512)
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.pulses: pulse.Pulses | None = None

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
        state.stalled = False
        if self.pulses is not None:
            self.pulses.forget(directory)
        self.state.failed[directory] = FailedDir(failed_at=self.clock.monotonic())
        for key, local in list(self.state.local.items()):
            if local.directory_id == directory:
                self.state.offline_local[key] = self.state.local.pop(key)
        log.error("Took log dir %s (%s) offline: %s", state.path, directory, error)
        for listener in self.on_failed:
            listener(directory)

    def latency(self, directory: Uuid, seconds: float) -> None:
        """A log flush's fsync of `directory` took `seconds` (the `DirFailures` port)."""
        for hook in self.on_flush:
            hook(directory, seconds)
        self._record_latency(directory, seconds)

    def _record_latency(self, directory: Uuid, seconds: float) -> None:
        """A write-and-fsync latency of `directory` (a probe round's or a log flush's)."""
        state = self.state.dirs.get(directory)
        if state is None or state.health is DirHealth.OFFLINE:
            return
        state.latency.add(seconds)
        threshold = dynamic_configs.slow_threshold_s(self.state.config, self.state.image)
        slow = state.latency.slow(threshold, slow=state.slow)
        if slow == state.slow:
            return
        state.slow = slow
        median = (state.latency.median() or 0.0) * 1000
        if slow:
            log.warning(
                "Log dir %s (%s) is slow: its median write-and-fsync latency over the last %d is "
                "%.0f ms (log.dir.slow.threshold.ms %.0f)",
                state.path,
                directory,
                len(state.latency.samples),
                median,
                threshold * 1000,
            )
        else:
            log.info("Log dir %s (%s) is no longer slow (median %.0f ms)", state.path, directory, median)

    def _stall_changed(self, key: object, stalled: bool, silent_s: float, waited_s: float) -> None:
        """On the event loop: the pulses found a dir stalled (`silent_s` after its last answer,
        `waited_s` after the pulse it left unanswered was issued), or released it."""
        state = self.state.dirs.get(key) if isinstance(key, Uuid) else None
        if state is None or state.health is DirHealth.OFFLINE or state.stalled == stalled:
            return
        state.stalled = stalled
        timeout_ms = dynamic_configs.stall_timeout_s(self.state.config, self.state.image) * 1000
        if stalled:
            state.stalls += 1
            state.stall_found_after_s = silent_s
            state.stall_unanswered_s = waited_s
            log.warning(
                "Log dir %s (%s) stalled: it has answered nothing for %.1f ms, its last pulse "
                "waits since %.1f ms (log.dir.stall.timeout.ms %.0f), while the broker's other "
                "dirs answer; it leads nothing another replica can lead until it answers again",
                state.path,
                state.directory_id,
                silent_s * 1000,
                waited_s * 1000,
                timeout_ms,
            )
            self._offline_if_still_hung(state, stalled_at=self.clock.monotonic())
        else:
            log.info(
                "Log dir %s (%s) no longer stalled: its pulses answered within %.0f ms for %.0f s",
                state.path,
                state.directory_id,
                timeout_ms / 2,
                disk_stall.RELEASE_S,
            )
        for listener in self.on_stall:
            listener(state.directory_id)

    def _offline_if_still_hung(self, state: LogDirState, *, stalled_at: float) -> None:
        """Take a stalled dir offline once it has answered nothing for `log.dir.stall.offline.ms`
        since it was found stalled (at once for 0; never for -1). A check that runs late (the
        process was frozen) looks again a little later rather than decide on stale pulses."""
        after = dynamic_configs.stall_offline_s(self.state.config, self.state.image)
        if after is None:
            return
        loop = asyncio.get_running_loop()

        def check(due: float) -> None:
            if state.health is DirHealth.OFFLINE or not state.stalled or self.pulses is None:
                return
            now = self.clock.monotonic()
            if now - due > pulse.LATE_S:
                again = now + 2 * disk_stall.pulse_interval(self.pulses.timeout_s)
                loop.call_later(again - now, check, again)
                return
            found = self.pulses.pulse(state.directory_id)
            if found is not None and disk_stall.still_hung(found, stalled_at=stalled_at):
                self.fail_dir(
                    state.directory_id,
                    f"stalled: its pulse unanswered for {(now - (found.answered_at or now)) * 1000:.0f} ms "
                    f"(log.dir.stall.offline.ms {after * 1000:.0f})",
                )

        if after == 0:
            check(self.clock.monotonic())
        else:
            loop.call_later(after, check, stalled_at + after)

    def start_pulses(self) -> None:
        """Pulse every data dir not offline, and the metadata dir when there is one such dir only
        (a stall needs a peer that answers); on the event loop."""
        targets: dict[object, pulse.Beat] = {
            d: pulse.PulseFile(s.path)
            for d, s in self.state.dirs.items()
            if s.health is not DirHealth.OFFLINE
        }
        if len(targets) < 2:
            targets[_METADATA] = pulse.PulseFile(self.state.metadata_dir.path)
        self.pulses = pulse.Pulses(
            targets,
            timeout_s=dynamic_configs.stall_timeout_s(self.state.config, self.state.image),
            monotonic=self.clock.monotonic,
            on_change=self._stall_changed,
            loop=asyncio.get_running_loop(),
        )
        self.pulses.start()

    # -- probe rounds --------------------------------------------------------------------------

    async def probe_forever(self, on_metadata_dir_failed: Callable[[], None]) -> None:
        """Every `log.dir.probe.interval.ms`, one round over the dirs not offline and the metadata
        dir; each result is applied on the event loop as soon as the round ends."""
        interval = self.state.config.log_dir_probe_interval_ms / 1000
        metadata = self.state.metadata_dir
        while not self.state.stopping.is_set():
            if self.pulses is not None:  # a dynamic change takes effect at the next round
                self.pulses.timeout_s = dynamic_configs.stall_timeout_s(self.state.config, self.state.image)
            targets = [d for d in self.state.dirs.values() if d.health is not DirHealth.OFFLINE]
            if self.state.metadata_dir_error is None:
                targets.append(metadata)
            if not targets:
                return
            for state, result in await self.probe_round(targets):
                if state is metadata:
                    self._apply_metadata_probe(result, on_metadata_dir_failed)
                else:
                    self._apply_probe(state, result)
            await self.clock.sleep(interval)

    async def probe_round(self, targets: list[LogDirState]) -> list[tuple[LogDirState, ProbeAnswer]]:
        """Probe `targets` one after the other in the probe thread: one thread wake-up and one
        event-loop wake-up per round, however many dirs. Each probe is bounded by the probe
        timeout of running time; a probe past it answers `None`, the thread is left to the hung
        disk, and the dirs after it wait for the next round (on a fresh thread)."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="probe")
        progress = _RoundProgress()
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, self._run_round, targets, progress)
        timeout = self.state.config.log_dir_probe_timeout_ms / 1000
        self.probes_in_flight += 1
        try:
            finished = await bounded_by_running_time(
                future, timeout, restart=lambda: progress.probing, monotonic=self.clock.monotonic
            )
        finally:
            self.probes_in_flight -= 1
        if finished:
            return list(zip(targets, progress.results, strict=True))
        self._executor.shutdown(wait=False)
        self._executor = None
        hung = progress.probing
        answers: list[tuple[LogDirState, ProbeAnswer]] = list(
            zip(targets[:hung], progress.results[:hung], strict=True)
        )
        return [*answers, (targets[hung], None)]

    def _run_round(self, targets: list[LogDirState], progress: _RoundProgress) -> None:
        """In the probe thread: the only writer of `progress`."""
        for index, target in enumerate(targets):
            progress.probing = index
            progress.results.append(self.prober(target, self._payload))

    def _apply_probe(self, state: LogDirState, result: ProbeAnswer) -> None:
        if state.health is DirHealth.OFFLINE:  # failed by real work while the round ran
            return
        if result is None:
            self.fail_dir(
                state.directory_id, f"probe timed out after {self.state.config.log_dir_probe_timeout_ms} ms"
            )
            return
        for hook in self.on_probe:
            hook(state.directory_id, result)
        self._record_latency(state.directory_id, result.seconds)
        if result.outcome is probe.ProbeOutcome.FAILED:
            self.fail_dir(state.directory_id, result.error or "probe failed")
            return
        state.total_bytes, state.usable_bytes = result.total_bytes, result.usable_bytes
        state.fill.add(self.clock.monotonic(), result.usable_bytes)
        self._apply_space(state)
        if result.outcome is probe.ProbeOutcome.FULL:
            self.mark_full(state.directory_id, result.error or "no space left")
        elif state.health is DirHealth.FULL:
            state.health, state.error, state.since = DirHealth.ONLINE, None, self.clock.time()
            log.info("Log dir %s (%s) has free space again", state.path, state.directory_id)

    def _apply_space(self, state: LogDirState) -> None:
        """Cordon the dir at `log.dir.cordon.threshold` of its volume used, release it 0.05 below
        (`jbod_core.disk_space`); the next heartbeat reports the change."""
        threshold = dynamic_configs.cordon_threshold(self.state.config, self.state.image)
        used = disk_space.used_fraction(state.total_bytes, state.usable_bytes)
        cordoned = disk_space.space_cordoned(used, threshold, cordoned=state.space_cordoned)
        if cordoned == state.space_cordoned:
            return
        state.space_cordoned = cordoned
        if cordoned:
            left = state.fill.seconds_to_full()
            log.warning(
                "Log dir %s (%s) is %.1f%% used (log.dir.cordon.threshold %.2f): cordoned, it "
                "receives no new replicas%s",
                state.path,
                state.directory_id,
                used * 100,
                threshold,
                "" if left is None else f"; full in about {left:.0f} s at the current rate",
            )
        else:
            log.info(
                "Log dir %s (%s) is %.1f%% used: no longer cordoned for its space",
                state.path,
                state.directory_id,
                used * 100,
            )

    def _apply_metadata_probe(self, result: ProbeAnswer, on_failed: Callable[[], None]) -> None:
        if result is not None and result.outcome is not probe.ProbeOutcome.FAILED:
            return
        reason = "probe timed out" if result is None else result.error
        self.state.metadata_dir_error = (
            f"the metadata log dir {self.state.metadata_dir.path} failed: {reason}"
        )
        on_failed()

    def shutdown(self) -> None:
        if self.pulses is not None:
            self.pulses.stop()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


@dataclass
class _RoundProgress:
    """How far the probe thread is in a round: the index of the dir it probes, and the results so
    far (in the targets' order)."""

    probing: int = 0
    results: list[probe.ProbeResult] = field(default_factory=list)


async def bounded_by_running_time(
    future: asyncio.Future[None],
    timeout: float,
    *,
    monotonic: Callable[[], float],
    restart: Callable[[], object] = lambda: None,
) -> bool:
    """True once the future is done; False once it has taken `timeout` seconds of this process's
    time since `restart()` last changed (the probe thread moved on to the next dir).

    Time during which the whole process was frozen (SIGSTOP, a VM pause) is not counted: each
    step counts at most twice its nominal length, so a paused process does not mistake a healthy
    disk for a hung one, while a disk that hangs the probe thread is still caught in time.
    """
    step = max(0.005, min(0.1, timeout / 10))
    counted = 0.0
    last = monotonic()
    marker = restart()
    while True:
        done, _ = await asyncio.wait({future}, timeout=step)
        if done:
            future.result()
            return True
        now = monotonic()
        if restart() != marker:
            marker, counted = restart(), 0.0
        counted += min(now - last, 2 * step)
        last = now
        if counted >= timeout:
            return False
