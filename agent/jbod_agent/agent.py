"""The broker agent's loop: observe → decide → act (Patroni's shape, KIP-112 / KIP-858's rules).

Guarantees:
* One state owner: `BrokerState`, touched only on the event loop. Collaborators get the state and
  narrow ports (`jbod_agent.ports`), never this class: `DirMonitor` (probes, a dir goes offline),
  `MetadataFollower` (the metadata log into the image), `Reconciler` (replicas on disk match the
  image, placements), `ReplicaManager` / `Fetchers` / `Mover` (the data plane), telemetry.
* The control loop wakes when something happens (a dir fails, a metadata page lands, a reply
  arrives, a placement is queued) or at the deadline the last plan named; it builds a `Snapshot`,
  asks the pure `decide` for a `Plan`, and carries out its actions: register, mark ready to be
  unfenced, heartbeat, send a placement batch, shut down. Controller calls run as single-flight
  tasks through the typed `ControllerLink`, so the loop never waits on the controller: a hung
  controller cannot delay the failure-timeout shutdown.
* The clock and the disk prober are injected (`SystemClock` and `probe_log_dir` by default), so
  the whole runtime runs in-process under a fake clock with fake disks
  (`tests/agent/runtime_support.py`).
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

from jbod_agent import telemetry
from jbod_agent.assignment_queue import AssignmentQueue, Placement, PlacementOutbox
from jbod_agent.config import BrokerConfig
from jbod_agent.decide import ActionKind, FailedDirView, Plan, Snapshot, decide
from jbod_agent.dir_health import DirMonitor, Prober, probe_log_dir
from jbod_agent.fetcher import Fetchers
from jbod_agent.metadata_follower import MetadataFollower
from jbod_agent.mover import Mover
from jbod_agent.ports import Clock, ControllerCalls, SystemClock
from jbod_agent.reconciler import Reconciler
from jbod_agent.replica_manager import ReplicaManager
from jbod_agent.state import BrokerState, LogDirState
from jbod_agent.storage import LoadedStorage
from jbod_client.controller import ClientError, ControllerLink
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid, random_uuid
from jbod_core.image import PartitionKey
from jbod_core.messages import (
    AssignDirectory,
    AssignReplicasToDirsRequest,
    AssignTopic,
    BrokerHeartbeatRequest,
    ListenerModel,
    PartitionIndex,
    RegisterBrokerRequest,
)

log = logging.getLogger("jbod_agent")

REGISTER_BACKOFF_INITIAL = 0.1


class Agent:
    def __init__(
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
        self.state = BrokerState(
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
        self.link: ControllerCalls = link or ControllerLink([config.controller_url], token=token)
        self.wakeup = asyncio.Event()
        self.queue = AssignmentQueue()
        self.placements = PlacementOutbox(self.queue, self.clock.monotonic, self.wakeup.set)
        self.monitor = DirMonitor(self.state, self.clock, prober)
        self.manager = ReplicaManager(self.state, failures=self.monitor, link=self.link)
        self.mover = Mover(
            self.state, manager=self.manager, placements=self.placements, failures=self.monitor
        )
        self.reconciler = Reconciler(
            self.state,
            manager=self.manager,
            moves=self.mover,
            placements=self.placements,
            failures=self.monitor,
            clock=self.clock,
        )
        self.follower = MetadataFollower(
            self.state, link=self.link, reconciler=self.reconciler, clock=self.clock, wake=self.wakeup.set
        )
        self.monitor.on_failed.append(self._dir_failed)
        self.fetchers: Fetchers | None = None
        # What the loop knows of its own schedule and of the controller's word (see `observe`).
        self.registration_refused: str | None = None
        self.controller_said_shutdown = False
        self.next_register_at = 0.0
        self.register_backoff = REGISTER_BACKOFF_INITIAL
        self.last_heartbeat_at: float | None = None
        self.sent_offline: frozenset[Uuid] = frozenset()
        self._lifecycle_call: asyncio.Task[None] | None = None
        self._placement_call: asyncio.Task[None] | None = None
        self.last_plan: Plan | None = None
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
                state, state.config.telemetry_dir, interval_ms=state.config.telemetry_interval_ms
            )
            self.monitor.on_probe.append(writer.observe_probe)
            self._spawn(writer.run_forever(), "telemetry")
        for dir_state in state.dirs.values():
            self._spawn(self.monitor.probe_forever(dir_state), f"probe-{dir_state.path}")
        self._spawn(self.monitor.probe_metadata_dir_forever(self.wakeup.set), "probe-metadata")
        self._spawn(self._control_loop(), "control")
        self._spawn(self.follower.follow_forever(), "metadata")
        self._spawn(self.reconciler.creations_forever(), "creations")
        self.fetchers = Fetchers(
            state, self.manager, self.token, on_source_truncated=self.mover.source_truncated
        )
        self._spawn(self.manager.isr_forever(), "isr")
        self._spawn(self.manager.flush_forever(), "flush")
        self._spawn(self.manager.retention_forever(), "retention")
        await state.stopping.wait()
        for call in (self._lifecycle_call, self._placement_call):
            if call is not None:
                call.cancel()
        if self.controlled_shutdown_requested:
            await self._controlled_shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.fetchers.close()
        await asyncio.to_thread(self._flush_all)
        await self.follower.save_cache()
        self.manager.close()
        await self.link.aclose()
        self.monitor.shutdown()
        return self.exit_code

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.create_task(work, name=name))

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

    def _flush_all(self) -> None:
        for hosted in list(self.manager.partitions.values()):
            if not hosted.dirty:
                continue
            try:
                hosted.log.flush()
            except (OSError, ValueError) as exc:
                log.warning("Could not flush %s at shutdown: %s", hosted.name, exc)

    def _dir_failed(self, directory: Uuid) -> None:
        for key, local in self.state.offline_local.items():
            if local.directory_id == directory:
                self.queue.cancel(key)
        self.mover.dir_failed(directory)
        self.manager.dir_failed(directory)
        self.wakeup.set()

    # -- observe → decide → act -----------------------------------------------------------------

    def observe(self) -> Snapshot:
        state = self.state
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
            registration_refused=self.registration_refused,
            controller_said_shutdown=self.controller_said_shutdown,
            registered=state.registered,
            register_in_flight=self._lifecycle_call is not None and not state.registered,
            next_register_at=self.next_register_at,
            heartbeat_in_flight=self._lifecycle_call is not None,
            last_heartbeat_at=self.last_heartbeat_at,
            heartbeat_interval_ms=state.config.heartbeat_interval_ms,
            sent_offline_dirs=self.sent_offline,
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
            self.last_plan = plan
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
                self._lifecycle_call = self._call(self._register(), "register")
            elif action.kind is ActionKind.READY_TO_UNFENCE:
                self.state.ready_to_unfence = True
                log.info("Ready to be unfenced: %s", action.reason)
            elif action.kind is ActionKind.HEARTBEAT:
                offline = self.state.reported_offline_dirs()
                self.sent_offline = frozenset(offline)
                self._lifecycle_call = self._call(self._heartbeat(offline), "heartbeat")
            elif action.kind is ActionKind.SEND_PLACEMENTS:
                now = self.clock.monotonic()
                batch = self.queue.take_batch(now=now, is_valid=self.reconciler.placement_valid)
                if batch is not None:
                    self._placement_call = self._call(self._send_placements(batch), "placements")

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

    # -- controller calls -----------------------------------------------------------------------

    def _listener(self) -> ListenerModel:
        config = self.state.config
        if config.advertised_listener is not None:
            return ListenerModel(
                name="http", host=config.advertised_listener.host, port=config.advertised_listener.port
            )
        return ListenerModel(name="http", host=config.listener.host, port=self.state.listener_port)

    async def _register(self) -> None:
        state = self.state
        request = RegisterBrokerRequest(
            broker_id=state.node_id,
            cluster_id=state.cluster_id,
            incarnation_id=state.incarnation,
            log_dirs=list(state.registered_dirs),
            has_offline_log_dirs=bool(state.startup_offline),
            listeners=[self._listener()],
            rack=state.config.rack,
            previous_broker_epoch=state.epoch,
        )
        try:
            reply = await self.link.register(request)
        except ClientError as exc:
            log.warning("Failed registering with the controller: %s", exc)
            reply = None
        if reply is not None and reply.error_code == ErrorCode.NONE:
            state.epoch = reply.broker_epoch
            state.registered = True
            self.register_backoff = REGISTER_BACKOFF_INITIAL
            self.last_heartbeat_at = None  # heartbeat at once
            log.info("Registered broker %d with epoch %d", state.node_id, state.epoch)
            return
        if reply is not None and reply.error_code in (
            ErrorCode.INCONSISTENT_CLUSTER_ID,
            ErrorCode.INVALID_REQUEST,
        ):
            self.registration_refused = reply.error_message or f"errorCode {reply.error_code}"
            return
        if reply is not None:
            log.warning("Registration answered errorCode %s: %s", reply.error_code, reply.error_message)
        self.next_register_at = self.clock.monotonic() + self.register_backoff
        self.register_backoff = min(self.register_backoff * 2, state.config.session_timeout_ms / 1000)

    def _heartbeat_request(self, offline: list[Uuid], *, want_shut_down: bool) -> BrokerHeartbeatRequest:
        state = self.state
        return BrokerHeartbeatRequest(
            broker_id=state.node_id,
            broker_epoch=state.epoch,
            current_metadata_offset=state.applied_offset,
            want_fence=not state.ready_to_unfence,
            want_shut_down=want_shut_down,
            offline_log_dirs=offline,
        )

    async def _heartbeat(self, offline: list[Uuid]) -> None:
        state = self.state
        try:
            reply = await self.link.heartbeat(self._heartbeat_request(offline, want_shut_down=False))
        except ClientError as exc:
            log.warning("Failed sending a heartbeat: %s", exc)
            return
        finally:
            self.last_heartbeat_at = self.clock.monotonic()
        if reply.error_code == ErrorCode.STALE_BROKER_EPOCH:
            log.warning("Heartbeat was stale (%s); registering again", reply.error_message)
            state.registered = False
            self.sent_offline = frozenset()
            return
        if reply.error_code != ErrorCode.NONE:
            log.warning("Heartbeat answered errorCode %s: %s", reply.error_code, reply.error_message)
            return
        for directory in offline:
            failed = state.failed[directory]
            if not failed.acknowledged:
                failed.acknowledged = True
                log.info("The controller acknowledged that log dir %s is offline", directory)
        if state.fenced != reply.is_fenced:
            state.fenced = reply.is_fenced
            log.info("Broker %d is now %s", state.node_id, "fenced" if state.fenced else "unfenced")
        if reply.should_shut_down:
            self.controller_said_shutdown = True

    async def _controlled_shutdown(self, timeout: float = 5.0) -> None:
        """Heartbeat with wantShutDown until the controller says shouldShutDown (bounded).

        Also when this broker believes it is fenced: the controller may have unfenced it in a reply
        not read yet, and for a fenced broker the controller answers shouldShutDown at once."""
        if not self.state.registered:
            return
        deadline = self.clock.monotonic() + timeout
        while self.clock.monotonic() < deadline:
            request = self._heartbeat_request(self.state.reported_offline_dirs(), want_shut_down=True)
            try:
                reply = await self.link.heartbeat(request)
            except ClientError as exc:
                log.warning("Failed sending a heartbeat: %s", exc)
            else:
                if reply.error_code == 0 and reply.should_shut_down:
                    log.info("Finished a controlled shutdown: leadership handed over")
                    return
            await self.clock.sleep(0.1)
        log.warning("Gave up the controlled shutdown after %.0f s", timeout)

    async def _send_placements(self, batch: dict[PartitionKey, Placement]) -> None:
        by_dir: dict[Uuid, dict[Uuid, list[int]]] = {}
        for (topic_id, index), placed in batch.items():
            by_dir.setdefault(placed.directory, {}).setdefault(topic_id, []).append(index)
        request = AssignReplicasToDirsRequest(
            broker_id=self.state.node_id,
            broker_epoch=self.state.epoch,
            directories=[
                AssignDirectory(
                    id=d,
                    topics=[
                        AssignTopic(topic_id=t, partitions=[PartitionIndex(partition_index=i) for i in idx])
                        for t, idx in topics.items()
                    ],
                )
                for d, topics in by_dir.items()
            ],
        )
        error: str | None = None
        try:
            reply = await self.link.assign_replicas_to_dirs(request)
        except ClientError as exc:
            error = str(exc)
        else:
            if reply.error_code != 0:
                error = reply.error_message or f"errorCode {reply.error_code}"
        now = self.clock.monotonic()
        if error is not None:
            delay = self.queue.on_failure(now=now)
            log.warning("AssignReplicasToDirs failed (%s); retrying in %.1f s", error, delay)
            return
        codes = {
            (topic.topic_id, p.partition_index): p.error_code
            for directory in reply.directories
            for topic in directory.topics
            for p in topic.partitions
        }
        confirmed = self.queue.on_response(codes, now=now)
        log.info("The controller confirmed %d placement(s); %d still queued", len(confirmed), self.queue.size)
