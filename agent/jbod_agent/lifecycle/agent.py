"""The broker agent's loop: observe → decide → act (Patroni's shape, KIP-112 / KIP-858's rules).

Guarantees:
* One state owner: `AgentState`, touched only on the event loop. Collaborators get the state and
  narrow ports (`jbod_agent.ports`), never this class: `DirMonitor` (probes, a dir goes offline),
  `MetadataFollower` (the metadata log into the image), `Reconciler` (replicas on disk match the
  image, placements), the data plane (`ReplicaManager` with its parts `Produce`, `ClientFetch`,
  `ReplicaFetchServer`, `IsrUpkeep` and `LogUpkeep`; `Fetchers`; `Mover`), telemetry.
* The control loop wakes when something happens (a dir fails, a metadata page lands, a reply
  arrives, a placement is queued) or at the deadline the last plan named; it builds a `Snapshot`,
  asks the pure `decide` for a `Plan`, and carries out its actions: register, mark ready to be
  unfenced, heartbeat, send a placement batch, shut down. Controller calls run as single-flight
  tasks through the typed `ControllerLink`, so the loop never waits on the controller: a hung
  controller cannot delay the failure-timeout shutdown.
* The clock and the disk prober are injected (`SystemClock` and `probe_log_dir` by default), so
  the whole runtime runs in-process under a fake clock with fake disks
  (`tests/agent/runtime_support.py`); every collaborator that needs time gets this clock.
* On a signal, a controlled shutdown (heartbeats with wantShutDown until the controller says
  shouldShutDown, bounded); then tasks stop, dirty logs are flushed, and `run` returns the exit code
  `decide` chose.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Coroutine
from typing import Any

from jbod_agent.config import BrokerConfig
from jbod_agent.disks.dir_health import DirMonitor, Prober, probe_log_dir
from jbod_agent.lifecycle import telemetry
from jbod_agent.lifecycle.assignment_queue import AssignmentQueue, PlacementOutbox
from jbod_agent.lifecycle.controller_port import LinkedController
from jbod_agent.lifecycle.decide import ActionKind, FailedDirView, Plan, Snapshot, decide
from jbod_agent.lifecycle.lifecycle import LifecycleCalls
from jbod_agent.lifecycle.metadata_follower import MetadataFollower
from jbod_agent.lifecycle.reconciler import Reconciler
from jbod_agent.partitions.client_fetch import ClientFetch
from jbod_agent.partitions.log_cleaning import LogCleaning
from jbod_agent.partitions.log_upkeep import LogUpkeep
from jbod_agent.partitions.produce import Produce
from jbod_agent.partitions.replica_manager import ReplicaManager
from jbod_agent.ports import Clock, ControllerCalls, SystemClock
from jbod_agent.replication.fetcher import Fetchers
from jbod_agent.replication.isr_upkeep import IsrUpkeep
from jbod_agent.replication.mover import Mover
from jbod_agent.replication.replica_fetch import ReplicaFetchServer
from jbod_agent.replication.replication_quota import ReplicationQuota
from jbod_agent.state import AgentState, LogDirState
from jbod_agent.storage.storage import LoadedStorage
from jbod_client.controller import ControllerLink
from jbod_core import broker_configs, topic_configs
from jbod_core.ids import Uuid, random_uuid
from jbod_runtime import gc_policy

log = logging.getLogger("jbod_agent")


class Agent:
    def __init__(  # noqa: PLR0913  config, storage and token, then the three ports a test replaces (link, clock, prober)
        self,
        config: BrokerConfig,
        storage: LoadedStorage,
        *,
        token: str,
        link: ControllerCalls | None = None,
        clock: Clock | None = None,
        prober: Prober = probe_log_dir,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        now = self.clock.time()
        self.state = AgentState(
            config=config,
            cluster_id=storage.cluster_id,
            incarnation=random_uuid(random.SystemRandom()),
            dirs={
                d.directory_id: LogDirState(
                    path=d.path, directory_id=d.directory_id, device=d.device, since=now
                )
                for d in storage.online
            },
            startup_offline=list(storage.offline),
            metadata_dir=LogDirState(
                path=storage.metadata_dir.path,
                directory_id=storage.metadata_dir.directory_id,
                device=storage.metadata_dir.device,
                since=now,
            ),
        )
        self.token = token
        self.link: ControllerCalls = link or LinkedController(
            ControllerLink(
                config.controller_urls,
                token=token,
                failover_timeout=config.session_timeout_ms / 1000,
                tls=config.client_tls(),
            )
        )
        self.wakeup = asyncio.Event()
        self.queue = AssignmentQueue()
        self.placements = PlacementOutbox(self.queue, self.clock.monotonic, self.wakeup.set)
        self.monitor = DirMonitor(self.state, self.clock, prober)
        self.manager = ReplicaManager(self.state, failures=self.monitor, clock=self.clock)
        self.produce = Produce(self.manager, clock=self.clock)
        self.client_fetch = ClientFetch(clock=self.clock)
        self.isr_upkeep = IsrUpkeep(self.manager, link=self.link, clock=self.clock)
        self.leader_quota = ReplicationQuota(
            self.state,
            clock=self.clock,
            rate_key=broker_configs.LEADER_THROTTLED_RATE,
            replicas_key=topic_configs.LEADER_THROTTLED_REPLICAS,
        )
        self.follower_quota = ReplicationQuota(
            self.state,
            clock=self.clock,
            rate_key=broker_configs.FOLLOWER_THROTTLED_RATE,
            replicas_key=topic_configs.FOLLOWER_THROTTLED_REPLICAS,
        )
        self.replica_fetch = ReplicaFetchServer(
            self.manager,
            clock=self.clock,
            on_isr_expandable=self.isr_upkeep.check_now,
            quota=self.leader_quota,
        )
        self.log_upkeep = LogUpkeep(self.manager, clock=self.clock)
        self.log_cleaning = LogCleaning(self.manager, clock=self.clock)
        self.mover = Mover(
            self.state,
            manager=self.manager,
            placements=self.placements,
            failures=self.monitor,
            clock=self.clock,
        )
        self.reconciler = Reconciler(
            self.state,
            manager=self.manager,
            moves=self.mover,
            placements=self.placements,
            failures=self.monitor,
        )
        self.follower = MetadataFollower(
            self.state, link=self.link, reconciler=self.reconciler, clock=self.clock, wake=self.wakeup.set
        )
        self.monitor.on_failed.append(self._dir_failed)
        self.monitor.on_stall.append(lambda _directory: self.wakeup.set())
        self.fetchers: Fetchers | None = None
        self.calls = LifecycleCalls(self.state, link=self.link, clock=self.clock, queue=self.queue)
        self.calls.on_registered.append(self.follower.recheck.set)
        self._lifecycle_call: asyncio.Task[None] | None = None
        self._placement_call: asyncio.Task[None] | None = None
        self.controlled_shutdown_requested = False
        self.exit_code = 0
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifetime -------------------------------------------------------------------------------

    async def run(self) -> int:
        state = self.state
        # The scan runs in a worker thread while the broker registers and fetches metadata;
        # nothing is reconciled before it is done (`Reconciler.scanned`).
        self._spawn(self.reconciler.scan_local_replicas(), "scan")
        if state.config.telemetry_dir is not None:
            writer = telemetry.TelemetryWriter(
                state,
                state.config.telemetry_dir,
                interval_ms=state.config.telemetry_interval_ms,
                clock=self.clock,
            )
            self.monitor.on_probe.append(writer.observe_probe)
            self._spawn(writer.run_forever(), "telemetry")
        self.monitor.start_pulses()
        self._spawn(self.monitor.probe_forever(self.wakeup.set), "probes")
        self._spawn(self._control_loop(), "control")
        self._spawn(self.follower.follow_forever(), "metadata")
        self._spawn(self.reconciler.creations_forever(), "creations")
        self.fetchers = Fetchers(
            state,
            self.manager,
            self.token,
            clock=self.clock,
            on_source_truncated=self.mover.source_truncated,
            quota=self.follower_quota,
        )
        self._spawn(self.isr_upkeep.run_forever(), "isr")
        self._spawn(self.log_upkeep.flush_forever(), "flush")
        self._spawn(self.log_upkeep.retention_forever(), "retention")
        self._spawn(self.log_cleaning.run_forever(), "cleaner")
        self._spawn(self._collect_garbage_forever(), "gc")
        await state.stopping.wait()
        for call in (self._lifecycle_call, self._placement_call):
            if call is not None:
                call.cancel()
        if self.controlled_shutdown_requested:
            await self.calls.controlled_shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.fetchers.close()
        self.log_upkeep.save_producer_snapshots()
        await asyncio.to_thread(self.log_upkeep.flush_dirty)
        await self.follower.save_cache()
        self.manager.close()
        await self.link.aclose()
        self.monitor.shutdown()
        return self.exit_code

    async def _collect_garbage_forever(self) -> None:
        """The broker's heap is mostly long-lived (hosted partitions, logs, the metadata image):
        freeze it every `FREEZE_INTERVAL_S` so routine collections scan only what is new, and
        reclaim frozen cyclic garbage with a full collection once an hour (`gc_policy`)."""
        gc_policy.configure()
        since_full = 0.0
        while True:
            await self.clock.sleep(gc_policy.FREEZE_INTERVAL_S)
            since_full += gc_policy.FREEZE_INTERVAL_S
            if since_full >= gc_policy.FULL_COLLECTION_INTERVAL_S:
                since_full = 0.0
                log.info("Ran a full garbage collection in %.2f s", gc_policy.full_collection())
            else:
                gc_policy.freeze()

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """A task of the agent's lifetime; one that dies of an error is logged, not lost silently."""
        task = asyncio.create_task(work, name=name)
        task.add_done_callback(_log_failure)
        self._tasks.append(task)

    def request_stop(self) -> None:
        """A signal: hand leadership over (controlled shutdown), then stop."""
        self.controlled_shutdown_requested = True
        self.shut_down(0, "received a signal")

    def shut_down(self, code: int, reason: str) -> None:
        if not self.state.stopping.is_set():
            (log.info if code == 0 else log.error)("Shutting down: %s", reason)
            self.exit_code = code
            self.state.stopping.set()
            self.wakeup.set()

    def _dir_failed(self, directory: Uuid) -> None:
        for key, local in self.state.offline_local.items():
            if local.directory_id == directory:
                self.queue.cancel(key)
        self.mover.dir_failed(directory)
        self.log_cleaning.dir_failed(directory)
        self.manager.dir_failed(directory)
        self.wakeup.set()

    # -- observe → decide → act -----------------------------------------------------------------

    def observe(self) -> Snapshot:
        state = self.state
        progress = self.calls.progress
        now = self.clock.monotonic()
        return Snapshot(
            now=now,
            online_dirs=state.online_dirs(),
            metadata_dir_error=state.metadata_dir_error,
            failed_dirs=tuple(
                FailedDirView(d, f.failed_at, f.acknowledged, state.leads_in(d))
                for d, f in state.failed.items()
            ),
            failure_timeout_ms=state.config.log_dir_failure_timeout_ms,
            registration_refused=progress.registration_refused,
            controller_said_shutdown=progress.controller_said_shutdown,
            registered=state.registered,
            register_in_flight=self._lifecycle_call is not None and not state.registered,
            next_register_at=progress.next_register_at,
            heartbeat_in_flight=self._lifecycle_call is not None,
            last_heartbeat_at=progress.last_heartbeat_at,
            heartbeat_interval_ms=state.config.heartbeat_interval_ms,
            sent_offline_dirs=progress.sent_offline,
            slow_dirs=frozenset(state.slow_dir_ids()),
            sent_slow_dirs=progress.sent_slow,
            fenced=state.fenced,
            ready_to_unfence=state.ready_to_unfence,
            caught_up=state.caught_up(),
            reconciled_once=state.reconciled_once,
            creating=len(state.creating),
            queued_placements=self.queue.size,
            placements_in_flight=self._placement_call is not None,
            placements_due_at=self.queue.next_send_time(now) if state.registered else None,
        )

    async def _control_loop(self) -> None:
        while not self.state.stopping.is_set():
            self.wakeup.clear()
            plan = decide(self.observe())
            self.act(plan)
            if self.state.stopping.is_set():
                return
            timeout = None if plan.wake_at is None else max(0.0, plan.wake_at - self.clock.monotonic())
            await self.clock.wait(self.wakeup, timeout)

    def act(self, plan: Plan) -> None:
        for action in plan.actions:
            if action.kind is ActionKind.SHUT_DOWN:
                assert action.exit_code is not None
                self.shut_down(action.exit_code, action.reason)
                return
            if action.kind is ActionKind.REGISTER:
                self._lifecycle_call = self._call(self.calls.register(), "register")
            elif action.kind is ActionKind.READY_TO_UNFENCE:
                self.state.ready_to_unfence = True
                log.info("Ready to be unfenced: %s", action.reason)
            elif action.kind is ActionKind.HEARTBEAT:
                offline = self.state.reported_offline_dirs()
                self.calls.progress.sent_offline = frozenset(offline)
                self.calls.progress.sent_slow = frozenset(self.state.slow_dir_ids())
                self._lifecycle_call = self._call(self.calls.heartbeat(offline), "heartbeat")
            elif action.kind is ActionKind.SEND_PLACEMENTS:
                now = self.clock.monotonic()
                batch = self.queue.take_batch(now=now, is_valid=self.reconciler.placement_valid)
                if batch is not None:
                    self._placement_call = self._call(self.calls.send_placements(batch), "placements")

    def _call(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """A controller call in its own task; when it ends, its slot frees and the loop wakes."""
        task = asyncio.create_task(work, name=name)

        def done(finished: asyncio.Task[None]) -> None:
            if self._lifecycle_call is finished:
                self._lifecycle_call = None
            if self._placement_call is finished:
                self._placement_call = None
            if not finished.cancelled() and finished.exception() is not None:
                log.error("The %s call failed", name, exc_info=finished.exception())
            self.wakeup.set()

        task.add_done_callback(done)
        return task


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("The agent's %s task failed", task.get_name(), exc_info=task.exception())
