"""An in-process harness for the broker agent: fake clock, fake disks, the controller's decisions.

Runs the real `Agent` (its observe → decide → act loop, metadata follower, reconciler, replica
manager) on one event loop without root and without sockets:
* `FakeClock` — time moves only when the test advances it; the agent's waits (`Clock.sleep`,
  `Clock.wait`) resolve as it passes.
* `FakeDisks` — the injected prober: a dir answers OK until the test fails it.
* `InProcessController` — a `ControllerLink` stand-in backed by the controller's own pure decisions
  (`jbod_core.brokers`, `jbod_core.assignments`, `jbod_core.isr`) and a replayed `ClusterImage`,
  as the controller service runs them; it records every request, the placements it confirmed by
  the time of each heartbeat, and every call refused while it is unreachable. It can be made
  unreachable, and its AssignReplicasToDirs replies can be delayed in fake time.
Replica dirs are real directories under the test's tmp_path.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from jbod_agent.config import parse_config
from jbod_agent.disks.probe import ProbeOutcome, ProbeResult
from jbod_agent.lifecycle.agent import Agent
from jbod_agent.ports import ControllerCallError
from jbod_agent.state import LogDirState
from jbod_agent.storage.storage import LoadedDir, LoadedStorage
from jbod_core import assignments, brokers, isr, records
from jbod_core.ids import Uuid
from jbod_core.image import ClusterImage, PartitionKey
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
from jbod_core.sessions import Session
from tests.agent.support import CLUSTER, NODE, format_dir, read_props

SESSION_TIMEOUT = 9.0


class FakeClock:
    """Monotonic time moved by the test; sleepers wake in deadline order as it passes."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._seq), future))
        await future

    async def wait(self, event: asyncio.Event, timeout: float | None) -> bool:
        if event.is_set():
            return True
        waiter = asyncio.ensure_future(event.wait())
        if timeout is None:
            await waiter
            return True
        sleeper = asyncio.ensure_future(self.sleep(timeout))
        _done, pending = await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return event.is_set()

    def advance(self, seconds: float) -> None:
        target = self.now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, future = heapq.heappop(self._sleepers)
            self.now = max(self.now, deadline)
            if not future.done():
                future.set_result(None)
        self.now = target


class FakeDisks:
    """The agent's prober: every dir is healthy until `fail` names it."""

    def __init__(self) -> None:
        self.failed: dict[Path, str] = {}
        self.probes: dict[Path, int] = {}

    def fail(self, path: Path, error: str = "EIO: Input/output error (fake disk)") -> None:
        self.failed[path] = error

    def __call__(self, state: LogDirState, payload: bytes) -> ProbeResult:
        self.probes[state.path] = self.probes.get(state.path, 0) + 1
        error = self.failed.get(state.path)
        if error is not None:
            return ProbeResult(ProbeOutcome.FAILED, error, 0.001)
        return ProbeResult(ProbeOutcome.OK, None, 0.001, total_bytes=10 << 30, usable_bytes=8 << 30)


@dataclass
class InProcessController:
    """The controller's decisions behind the agent's `ControllerLink` interface."""

    clock: FakeClock
    cluster_id: str = CLUSTER
    reachable: bool = True
    image: ClusterImage = field(default_factory=ClusterImage)
    log: list[records.Record] = field(default_factory=list)
    sessions: dict[int, Session] = field(default_factory=dict)
    heartbeats: list[BrokerHeartbeatRequest] = field(default_factory=list)
    replies: list[BrokerHeartbeatReply] = field(default_factory=list)
    assignments: list[AssignReplicasToDirsRequest] = field(default_factory=list)
    registrations: list[RegisterBrokerRequest] = field(default_factory=list)
    # Placements committed so far, and for each heartbeat received, the ones committed before it.
    confirmed: set[PartitionKey] = field(default_factory=set)
    heartbeats_with_confirmed: list[tuple[BrokerHeartbeatRequest, frozenset[PartitionKey]]] = field(
        default_factory=list
    )
    # Every call made while unreachable, by name, with its request (None for a metadata fetch).
    refused: list[tuple[str, Any]] = field(default_factory=list)
    # Fake seconds an AssignReplicasToDirs waits before it is decided and answered.
    assignment_delay: float = 0.0
    appended: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = "in-process"

    def apply(self, produced: Sequence[records.Record]) -> None:
        for record in produced:
            self.image.replay(record, len(self.log))
            self.log.append(record)
        if produced:
            self.appended.set()

    def _check(self, path: str, request: Any = None) -> None:
        if not self.reachable:
            self.refused.append((path, request))
            raise ControllerCallError(f"cannot reach the controller at {self.url}: {path} (test)")

    async def register(self, request: RegisterBrokerRequest) -> RegisterBrokerReply:
        self._check("register", request)
        self.registrations.append(request)
        produced, reply = brokers.register_broker(
            self.image,
            self.sessions,
            request,
            cluster_id=self.cluster_id,
            now=self.clock.now,
            session_timeout=SESSION_TIMEOUT,
        )
        if reply.error_code == 0:
            self.sessions[request.broker_id] = Session(last_contact=self.clock.now)
        self.apply(produced)
        return reply

    async def heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply:
        self._check("heartbeat", request)
        self.heartbeats.append(request)
        self.heartbeats_with_confirmed.append((request, frozenset(self.confirmed)))
        produced, reply = brokers.broker_heartbeat(self.image, self.sessions, request)
        if reply.error_code == 0:
            self.sessions[request.broker_id] = Session(
                last_contact=self.clock.now, metadata_offset=request.current_metadata_offset
            )
        self.apply(produced)
        self.replies.append(reply)
        return reply

    async def assign_replicas_to_dirs(
        self, request: AssignReplicasToDirsRequest
    ) -> AssignReplicasToDirsReply:
        self._check("assignments", request)
        if self.assignment_delay:
            await self.clock.sleep(self.assignment_delay)
            self._check("assignments", request)
        self.assignments.append(request)
        produced, reply = assignments.assign_replicas_to_dirs(self.image, request)
        self.apply(produced)
        if reply.error_code == 0:
            self.confirmed.update(
                (topic.topic_id, p.partition_index)
                for directory in reply.directories
                for topic in directory.topics
                for p in topic.partitions
                if p.error_code == 0
            )
        return reply

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionReply:
        self._check("alter partition", request)
        produced, reply = isr.alter_partition(self.image, request)
        self.apply(produced)
        return reply

    async def metadata(
        self, *, from_offset: int, max_wait_ms: int, max_records: int, last_checksum: int | None = None
    ) -> dict[str, Any]:
        self._check("metadata")
        if from_offset >= len(self.log) and max_wait_ms > 0:
            self.appended.clear()
            await self.clock.wait(self.appended, max_wait_ms / 1000)
            self._check("metadata")
        page = self.log[from_offset : from_offset + max_records]
        return {
            "errorCode": 0,
            "records": [
                {"offset": from_offset + i, "type": r.TYPE, "data": orjson.loads(orjson.dumps(r.to_data()))}
                for i, r in enumerate(page)
            ],
            "endOffset": len(self.log),
        }

    async def aclose(self) -> None:
        pass


@dataclass
class Harness:
    agent: Agent
    clock: FakeClock
    disks: FakeDisks
    controller: InProcessController
    data_dirs: list[Path]
    metadata_dir: Path
    ids: dict[Path, Uuid]
    task: asyncio.Task[int] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.agent.run())

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    async def run_for(self, seconds: float, *, step: float = 0.01) -> None:
        """Let `seconds` of fake time pass, in steps, letting the agent's tasks and threads run."""
        end = self.clock.now + seconds
        while self.clock.now < end:
            self.clock.advance(min(step, end - self.clock.now))
            await _settle(self.agent, running=self.running)

    async def until(self, condition: Callable[[], bool], *, within: float, step: float = 0.01) -> float:
        """Advance fake time until `condition` holds; returns the fake seconds it took."""
        start = self.clock.now
        await _settle(self.agent, running=self.running)
        while not condition():
            if self.clock.now - start >= within:
                raise AssertionError(f"not reached within {within} s of fake time")
            self.clock.advance(step)
            await _settle(self.agent, running=self.running)
        return self.clock.now - start

    async def exit_code(self, *, within: float = 30.0) -> int:
        assert self.task is not None
        await self.until(self.task.done, within=within)
        return self.task.result()

    async def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.agent.shut_down(0, "test over")
            await self.until(self.task.done, within=30.0)


def _worker_threads_busy(agent: Agent) -> bool:
    """Work the agent does in worker threads, in real time: probes, the replica scan, creations."""
    return bool(
        agent.monitor.probes_in_flight or not agent.reconciler.scanned.is_set() or agent.state.creating
    )


async def _settle(agent: Agent, *, running: bool) -> None:
    """Give every ready task a chance to run, and wait (real time) for the agent's worker threads:
    fake time stands still while a disk is probed, listed or written, however slow the machine is."""
    for _ in range(5):
        await asyncio.sleep(0)
    # fixed wait: one real millisecond for the worker threads to pick up what the tasks handed them
    await asyncio.sleep(0.001)
    deadline = time.monotonic() + 30.0
    while running and _worker_threads_busy(agent) and time.monotonic() < deadline:
        await asyncio.sleep(0.001)
    for _ in range(5):
        await asyncio.sleep(0)


def make_harness(
    tmp_path: Path,
    *,
    dirs: int = 2,
    extra: str = "",
    controller: InProcessController | None = None,
    clock: FakeClock | None = None,
    reuse: bool = False,
) -> Harness:
    """An agent over `dirs` data dirs and a metadata dir under `tmp_path` (formatted, or with
    `reuse` the ones an earlier harness formatted there: a restart of the same broker)."""
    clock = clock or FakeClock()
    controller = controller or InProcessController(clock)
    data_dirs = [tmp_path / f"disk{i}" for i in range(dirs)]
    metadata_dir = tmp_path / "metadata"
    ids: dict[Path, Uuid] = {}
    for path in [*data_dirs, metadata_dir]:
        directory_id = read_props(path).directory_id if reuse else format_dir(path)
        assert directory_id is not None
        ids[path] = directory_id
    config = parse_config(
        f"node.id={NODE}\n"
        f"log.dirs={','.join(str(p) for p in data_dirs)}\n"
        f"metadata.log.dir={metadata_dir}\n"
        "controller.url=http://127.0.0.1:9\n"
        "cluster.token.file=/nonexistent/token\n"
        "listeners=http://127.0.0.1:0\n"
        f"{extra}"
    )
    storage = LoadedStorage(
        cluster_id=CLUSTER,
        online=tuple(LoadedDir(p, ids[p], os.stat(p).st_dev) for p in data_dirs),
        offline=(),
        metadata_dir=LoadedDir(metadata_dir, ids[metadata_dir], os.stat(metadata_dir).st_dev),
    )
    disks = FakeDisks()
    agent = Agent(config, storage, token="t", link=controller, clock=clock, prober=disks)
    return Harness(agent, clock, disks, controller, data_dirs, metadata_dir, ids)


async def until_in_real_time(condition: Callable[[], bool], within: float = 20.0) -> None:
    """Poll `condition` every 10 ms of real time until it holds (for the agent's parts that run in
    real threads: the probe thread, the pulses); TimeoutError after `within` seconds."""
    async with asyncio.timeout(within):
        while not condition():
            await asyncio.sleep(0.01)
