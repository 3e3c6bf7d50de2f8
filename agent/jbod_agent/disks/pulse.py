"""Pulses: each log dir of the broker (and its metadata dir when it has one log dir only: a peer to
compare with) written every half `log.dir.stall.timeout.ms`, so a disk that stops answering is
found within that timeout (issue 35). The rules are `jbod_core.disk_stall`'s; this module runs
the threads.

Guarantees:
* Each path has a daemon thread of its own; a pulse is one write of a 4 KiB block that is
  allocated once (`.jbod-pulse` in the path): O_DIRECT where the file system allows, so the
  device itself must answer it (else O_DSYNC); no allocation, no journal commit, no flush of the
  device's cache: a healthy disk answers it in well under a millisecond, and it costs about
  0.1 ms of CPU. An I/O error is
  an answer (the probe and the real work classify errors); a path whose file cannot be opened is
  not pulsed until it can.
* One watcher thread applies `disk_stall.stalls` and `disk_stall.released` and sleeps until the
  next moment a verdict could change (the earliest timeout of a pulse in flight, else half the
  timeout): an idle broker pays two thread wake-ups per path and one more per half timeout.
  A watcher that wakes more than `LATE_S` after it meant to (the process was frozen or starved of
  CPU) gives no verdict on that wake-up.
* Each change of verdict is handed to `on_change(key, stalled, silent_s, waited_s)` on the event
  loop (`call_soon_threadsafe`), in order, with how long the path had not answered and how long
  its unanswered pulse had waited when it was found stalled (0 for a release); `forget(key)` stops pulsing a path (an offline dir; its
  thread may stay blocked in the hung disk, it is a daemon) and no verdict on it follows.
* `timeout_s` is read by the threads at each step; the event loop sets it (dynamic config). 0
  stops the pulses and releases every stalled path.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import mmap
import os
import threading
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Final, Protocol

from jbod_core import disk_stall

PULSE_FILE: Final = ".jbod-pulse"
BLOCK: Final = 4096
#: A watcher wake-up this late gives no verdict (the process did not run on time).
LATE_S: Final = 0.02
_RECHECK_S: Final = 0.01  # a path past its timeout without a peer's evidence yet
_OFF_PAUSE_S: Final = 1.0  # how often a switched-off detection looks at the timeout again


def open_pulse_file(path: Path) -> int:
    """The pulse file's descriptor, its block allocated and on disk (OSError if it cannot be)."""
    target = path / PULSE_FILE
    flags = os.O_WRONLY | os.O_CREAT
    try:
        fd = os.open(target, flags | getattr(os, "O_DIRECT", 0), 0o644)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # tmpfs and others refuse O_DIRECT
            raise
        fd = os.open(target, flags | os.O_DSYNC, 0o644)
    try:
        if os.fstat(fd).st_size < BLOCK:
            os.pwrite(fd, mmap.mmap(-1, BLOCK), 0)
            os.fsync(fd)
    except OSError:
        os.close(fd)
        raise
    return fd


class PulseFile:
    """A path's pulse: `beat()` writes the block (OSError on an I/O error or when the file cannot
    be opened; it is opened again at the next beat)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._block = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT needs

    def beat(self) -> None:
        if self._fd is None:
            self._fd = open_pulse_file(self.path)
        try:
            os.pwrite(self._fd, self._block, 0)
        except OSError:
            self.close()
            raise

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Beat(Protocol):
    def beat(self) -> None: ...

    def close(self) -> None: ...


class _PathPulse:
    """One path's pulse thread: the only writer of `pulse`."""

    def __init__(self, key: Hashable, target: Beat, owner: Pulses) -> None:
        self.key = key
        self.target = target
        self.owner = owner
        self.pulse = disk_stall.Pulse()
        self.forgotten = False
        self._thread = threading.Thread(target=self._run, name=f"pulse-{key}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        owner = self.owner
        while not owner.stopped.is_set() and not self.forgotten:
            timeout = owner.timeout_s
            if timeout <= 0:
                owner.stopped.wait(_OFF_PAUSE_S)
                continue
            started = owner.monotonic()
            self.pulse = dataclasses.replace(self.pulse, in_flight_since=started)
            with contextlib.suppress(OSError):  # an error is an answer: the probe classifies it
                self.target.beat()
            self.pulse = disk_stall.answered(
                self.pulse, started=started, now=owner.monotonic(), timeout_s=timeout
            )
            owner.stopped.wait(disk_stall.pulse_interval(timeout))
        self.target.close()


class Pulses:
    """The pulse threads of a broker's paths and their watcher."""

    def __init__(  # noqa: PLR0913  the paths, the timeout, then the clock, the callback and its loop
        self,
        targets: Mapping[Hashable, Beat],
        *,
        timeout_s: float,
        monotonic: Callable[[], float],
        on_change: Callable[[Hashable, bool, float, float], None],
        loop: asyncio.AbstractEventLoop,
        release_s: float = disk_stall.RELEASE_S,
    ) -> None:
        self.timeout_s = timeout_s
        self.release_s = release_s
        self.monotonic = monotonic
        self.stopped = threading.Event()
        self._on_change = on_change
        self._loop = loop
        self._paths = {key: _PathPulse(key, target, self) for key, target in targets.items()}
        self._stalled: set[Hashable] = set()
        self._watcher = threading.Thread(target=self._watch, name="pulse-watch", daemon=True)

    def start(self) -> None:
        for path in self._paths.values():
            path.start()
        self._watcher.start()

    def stop(self) -> None:
        self.stopped.set()

    def forget(self, key: Hashable) -> None:
        """Stop pulsing `key`'s path and give no further verdict on it."""
        found = self._paths.get(key)
        if found is not None:
            found.forgotten = True

    def pulse(self, key: Hashable) -> disk_stall.Pulse | None:
        found = self._paths.get(key)
        return None if found is None else found.pulse

    def _watch(self) -> None:
        intended = self.monotonic()
        while not self.stopped.wait(max(0.0, intended - self.monotonic())):
            now = self.monotonic()
            on_time = now - intended <= LATE_S
            intended = self._judge(now, on_time=on_time)

    def _judge(self, now: float, *, on_time: bool) -> float:
        """Apply the verdicts (when on time) and return when to look again."""
        timeout = self.timeout_s
        live = {k: p.pulse for k, p in self._paths.items() if not p.forgotten}
        if on_time:
            for key, pulse in live.items():
                if key in self._stalled:
                    if disk_stall.released(pulse, now=now, timeout_s=timeout, release_s=self.release_s):
                        self._change(key, stalled=False, silent_s=0.0, waited_s=0.0)
                else:
                    peers = [p for k, p in live.items() if k != key]
                    if disk_stall.stalls(pulse, peers, now=now, timeout_s=timeout):
                        self._change(
                            key,
                            stalled=True,
                            silent_s=now - (pulse.answered_at or now),
                            waited_s=now - (pulse.in_flight_since or now),
                        )
        for key in [k for k in self._stalled if k not in live]:
            self._stalled.discard(key)
        if timeout <= 0:
            return now + _OFF_PAUSE_S
        wake = now + disk_stall.pulse_interval(timeout)
        for key, pulse in live.items():
            due = disk_stall.next_check(pulse, now=now, timeout_s=timeout)
            if due is None or key in self._stalled:  # a stalled path is released at a later wake
                continue
            wake = min(wake, due if due > now else now + _RECHECK_S)
        return wake

    def _change(self, key: Hashable, *, stalled: bool, silent_s: float, waited_s: float) -> None:
        (self._stalled.add if stalled else self._stalled.discard)(key)
        try:
            self._loop.call_soon_threadsafe(self._on_change, key, stalled, silent_s, waited_s)
        except RuntimeError:  # the loop closed: the broker is stopping
            self.stopped.set()
