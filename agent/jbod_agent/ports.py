"""The narrow ports between the agent's loop and its collaborators.

Guarantees:
* A collaborator (`ReplicaManager`, `Mover`, `Fetchers`, telemetry, the dir-health probes) sees the
  agent only through these: a clock, a way to report an I/O error on a dir, a place to put a
  replica placement for the controller, and a controller link for its own calls. None of them
  imports the agent, so `jbod_agent` has no import cycle.
* The controller link's failures are the port's own `ControllerCallError`: only
  `controller_port` knows the wire client behind it.
* `SystemClock` is the real clock; tests pass a fake one (`tests/agent/runtime_support.py`) and
  drive time by hand. Every wait of the agent's loop and probes goes through the clock, and so
  does the data plane's time (`replica_manager` and its parts, `fetcher`, `mover`, the Kafka
  listener's fetch, the logs' delete delay): deadlines, lag and throttling on `monotonic`, batch
  timestamps, producer activity and retention on `time` (`monotonic_ms`, `wall_ms`). Only the
  network's own timeouts (a socket's idle or read limit, an HTTP client's total) and a log
  cleaner's process (its I/O throttle and timings, where the agent's clock does not reach) are
  real time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Protocol

from jbod_core.ids import Uuid
from jbod_core.image import PartitionKey
from jbod_core.messages import (
    AlterPartitionReply,
    AlterPartitionRequest,
    AssignReplicasToDirsReply,
    AssignReplicasToDirsRequest,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    RegisterBrokerReply,
    RegisterBrokerRequest,
)


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (durations and deadlines)."""

    def time(self) -> float:
        """Seconds since the epoch (timestamps shown to people or stored: batches, producers)."""

    async def sleep(self, seconds: float) -> None: ...

    async def wait(self, event: asyncio.Event, timeout: float | None) -> bool:
        """Wait until `event` is set (True) or `timeout` seconds passed (False)."""


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait(self, event: asyncio.Event, timeout: float | None) -> bool:
        if event.is_set():
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # no task per wait: fetches and acks wait here
                await event.wait()
        return event.is_set()


def monotonic_ms(clock: Clock) -> float:
    """The clock's monotonic time in milliseconds: follower lag, fetch sessions."""
    return clock.monotonic() * 1000


def wall_ms(clock: Clock) -> int:
    """The clock's wall time in whole milliseconds: batch timestamps, producer activity, retention."""
    return int(clock.time() * 1000)


class DirFailures(Protocol):
    def io_error(self, directory: Uuid, exc: OSError, doing: str) -> None:
        """An I/O error from real work in `directory`: a full disk is marked full, else it fails."""

    def fail_dir(self, directory: Uuid, error: str) -> None:
        """Take `directory` offline for good (until restart)."""

    def latency(self, directory: Uuid, seconds: float) -> None:
        """A write-and-fsync of real work in `directory` took `seconds` (a log flush)."""


class PlacementSink(Protocol):
    def place(self, key: PartitionKey, directory: Uuid, *, reason: str) -> None:
        """Queue AssignReplicasToDirs for `key` in `directory` (sent by the agent's loop)."""

    def pending(self, key: PartitionKey) -> Uuid | None:
        """The dir queued (or in flight) for `key`, if any."""

    def cancel(self, key: PartitionKey) -> None: ...


class PartitionAlterations(Protocol):
    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionReply: ...


class ControllerCallError(Exception):
    """A controller call that got no answer (no controller reachable, an HTTP failure, a body that
    is not the contract's); `str()` is one line for the log. A reply with a non-zero errorCode is
    an answer, not this."""


class ControllerCalls(PartitionAlterations, Protocol):
    """What the agent asks the controller: `controller_port.LinkedController` in production, the
    controller's own decisions in-process in tests. A call that gets no answer raises
    `ControllerCallError`."""

    async def register(self, request: RegisterBrokerRequest) -> RegisterBrokerReply: ...

    async def heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply: ...

    async def assign_replicas_to_dirs(
        self, request: AssignReplicasToDirsRequest
    ) -> AssignReplicasToDirsReply: ...

    async def metadata(
        self, *, from_offset: int, max_wait_ms: int, max_records: int, last_checksum: int | None = None
    ) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...
