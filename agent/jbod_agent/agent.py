"""The broker agent's runtime: registration, heartbeats, metadata, replica placement, disk health.

One asyncio loop, several small tasks, all state owned by `Agent` (no locks):
* lifecycle — register (with the dirs loaded at start), heartbeat every interval, and at once
  when a dir fails; ask to stay fenced until caught up with the metadata log, the first
  reconcile is done and no placement is queued (then never ask again, as Kafka does);
* metadata — long-poll `/v1/metadata`, replay into a local `ClusterImage` (the controller's own
  replay code), then reconcile the changed partitions with the replica-management table. Each
  fetch sends the checksum of the last applied record (`lastChecksum`); when the controller
  answers OFFSET_OUT_OF_RANGE (its log ends before what this broker applied, or holds another
  record at that offset: restored from a backup or cut back), the broker logs a WARNING naming
  both offsets and replays the log from offset 0 into a fresh image, which replaces the live one
  once caught up, followed by a full reconcile (never silently skipping reused offsets);
* placements — send queued AssignReplicasToDirs, one request in flight, ≤ 2,250 per request;
* probes — probe each dir every `log.dir.probe.interval.ms` in the dir's own thread, bounded by
  `log.dir.probe.timeout.ms`; a failed dir goes offline for good (until restart);
* failure timeout — if a failed dir is not acknowledged by the controller within
  `log.dir.failure.timeout.ms` and the broker leads a replica in it, the broker shuts down.
Losing the metadata dir or the last data dir shuts the broker down at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from jbod_agent import mover, placement, probe, replicas, telemetry
from jbod_agent.assignment_queue import AssignmentQueue
from jbod_agent.config import BrokerConfig
from jbod_agent.fetcher import Fetchers
from jbod_agent.placement import DirHealth, DirView
from jbod_agent.replica_manager import ReplicaManager
from jbod_agent.storage import LoadedDir, LoadedStorage
from jbod_core import records
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid, random_uuid
from jbod_core.image import ClusterImage, PartitionKey

log = logging.getLogger("jbod_agent")

EXIT_DIR_FAILURE_UNREPORTED = 3
EXIT_STORAGE_LOST = 4
EXIT_CONTROLLER_SAID_SHUTDOWN = 0
EXIT_REGISTRATION_REFUSED = 5


@dataclass
class LogDirState:
    path: Path
    directory_id: Uuid
    device: int
    health: DirHealth = DirHealth.ONLINE
    error: str | None = None
    since: float = field(default_factory=time.time)
    total_bytes: int = 0
    usable_bytes: int = 0
    executor: concurrent.futures.ThreadPoolExecutor | None = None


@dataclass
class LocalReplica:
    directory_id: Uuid
    path: Path
    topic: str


@dataclass
class FailedDir:
    failed_at: float
    acknowledged: bool = False


class Agent:
    def __init__(self, config: BrokerConfig, storage: LoadedStorage, *, token: str) -> None:
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = storage.cluster_id
        self.incarnation = random_uuid(random.SystemRandom())
        self.dirs: dict[Uuid, LogDirState] = {
            d.directory_id: LogDirState(path=d.path, directory_id=d.directory_id, device=d.device)
            for d in storage.online
        }
        self.startup_offline = list(storage.offline)
        self.metadata_dir: LoadedDir = storage.metadata_dir
        self.registered_dirs = tuple(sorted(self.dirs))
        self.image = ClusterImage()
        self.applied_offset = -1
        self.applied_checksum: int | None = None  # of the record at applied_offset, from the controller
        self.rebuilding: ClusterImage | None = None  # replayed from offset 0 after the log went back
        self.metadata_end = 0
        self.local: dict[PartitionKey, LocalReplica] = {}
        self.offline_local: dict[PartitionKey, LocalReplica] = {}
        self.removed_topics: set[Uuid] = set()
        self.changed: set[PartitionKey] = set()
        self.full_reconcile = False
        self.creating: dict[PartitionKey, Uuid] = {}
        self.creations_now = asyncio.Event()
        self.queue = AssignmentQueue()
        self.epoch = -1
        self.registered = False
        self.fenced = True
        self.ready_to_unfence = False
        self.reconciled_once = False
        self.failed: dict[Uuid, FailedDir] = {}
        self.stopping = asyncio.Event()
        self.controlled_shutdown_requested = False
        self.exit_code = 0
        self.heartbeat_now = asyncio.Event()
        self.placements_now = asyncio.Event()
        self.on_probe: list[Any] = []
        self._payload = os.urandom(512)
        self._http = httpx.AsyncClient(
            base_url=config.controller_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(10.0, read=40.0),
            trust_env=False,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self.token = token
        self.listener_port = config.listener.port  # the bound port once listening (port 0 = any)
        self.manager = ReplicaManager(self)
        self.mover = mover.Mover(self)
        self.fetchers: Fetchers | None = None
        self._background: set[asyncio.Task[Any]] = set()

    # -- lifetime -----------------------------------------------------------------------------

    def background(self, work: Any) -> None:
        """Run a coroutine without waiting for it (kept referenced until done)."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def scan_local_replicas(self) -> None:
        for state in list(self.dirs.values()):
            try:
                for line in mover.settle_leftovers(state.path):
                    log.info("Interrupted move in %s: %s", state.path, line)
            except OSError as exc:
                self.fail_dir(state.directory_id, f"cannot list replicas: {probe.describe_os_error(exc)}")
                continue
        for line in mover.settle_abandoned_futures([s.path for s in self.dirs.values()]):
            log.info("Interrupted move: %s", line)
        for state in list(self.dirs.values()):
            if state.health is DirHealth.OFFLINE:
                continue
            try:
                found = list(replicas.scan(state.path))
            except OSError as exc:
                self.fail_dir(state.directory_id, f"cannot list replicas: {probe.describe_os_error(exc)}")
                continue
            for replica in found:
                if replica.topic_id is None:
                    log.warning(
                        "Ignored replica dir %s: partition.metadata is missing or unreadable", replica.path
                    )
                    continue
                key = (replica.topic_id, replica.partition)
                self.local[key] = LocalReplica(state.directory_id, replica.path, replica.topic)
        log.info("Found %d local replicas in %d online dirs", len(self.local), len(self.dirs))

    async def run(self) -> int:
        self.scan_local_replicas()
        if self.config.telemetry_dir is not None:
            writer = telemetry.TelemetryWriter(
                self, self.config.telemetry_dir, interval_ms=self.config.telemetry_interval_ms
            )
            self._tasks.append(asyncio.create_task(writer.run_forever(), name="telemetry"))
        for state in self.dirs.values():
            self._tasks.append(asyncio.create_task(self._probe_forever(state), name=f"probe-{state.path}"))
        self._tasks.append(asyncio.create_task(self._probe_metadata_dir_forever(), name="probe-metadata"))
        self._tasks.append(asyncio.create_task(self._lifecycle(), name="lifecycle"))
        self._tasks.append(asyncio.create_task(self._metadata_forever(), name="metadata"))
        self._tasks.append(asyncio.create_task(self._placements_forever(), name="placements"))
        self._tasks.append(asyncio.create_task(self._creations_forever(), name="creations"))
        self._tasks.append(asyncio.create_task(self._failure_timeouts_forever(), name="failure-timeouts"))
        self.fetchers = Fetchers(self, self.manager, self.token)
        self._tasks.append(asyncio.create_task(self.manager.isr_forever(), name="isr"))
        self._tasks.append(asyncio.create_task(self.manager.flush_forever(), name="flush"))
        self._tasks.append(asyncio.create_task(self.manager.retention_forever(), name="retention"))
        await self.stopping.wait()
        if self.controlled_shutdown_requested:
            await self._controlled_shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.fetchers.close()
        await asyncio.to_thread(self._flush_all)
        self.manager.close()
        await self._http.aclose()
        for state in self.dirs.values():
            if state.executor is not None:
                state.executor.shutdown(wait=False, cancel_futures=True)
        return self.exit_code

    def request_stop(self) -> None:
        """A signal: hand leadership over (controlled shutdown), then stop."""
        self.controlled_shutdown_requested = True
        self.shut_down(0, "received a signal")

    async def _controlled_shutdown(self, timeout: float = 5.0) -> None:
        """Heartbeat with wantShutDown until the controller says shouldShutDown (bounded).

        Also when this broker believes it is fenced: the controller may have unfenced it in a reply
        not read yet, and for a fenced broker the controller answers shouldShutDown at once."""
        if not self.registered:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            body = self._heartbeat_body(self.reported_offline_dirs(), want_shut_down=True)
            reply = await self.post("/v1/brokers/heartbeat", body)
            if reply is not None and reply.get("errorCode") == 0 and reply.get("shouldShutDown"):
                log.info("Finished a controlled shutdown: leadership handed over")
                return
            await asyncio.sleep(0.1)
        log.warning("Gave up the controlled shutdown after %.0f s", timeout)

    def _flush_all(self) -> None:
        for hosted in list(self.manager.partitions.values()):
            if not hosted.dirty:
                continue
            try:
                hosted.log.flush()
            except (OSError, ValueError) as exc:
                log.warning("Could not flush %s at shutdown: %s", hosted.name, exc)

    def shut_down(self, code: int, reason: str) -> None:
        if not self.stopping.is_set():
            (log.info if code == 0 else log.error)("Shutting down: %s", reason)
            self.exit_code = code
            self.stopping.set()

    # -- controller calls ---------------------------------------------------------------------

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        try:
            response = await self._http.post(
                path, content=orjson.dumps(body), headers={"Content-Type": "application/json"}
            )
        except httpx.HTTPError as exc:
            log.warning("Failed calling the controller (%s): %s", path, exc)
            return None
        if response.status_code != 200:
            log.warning(
                "Controller answered %s with HTTP %d: %s", path, response.status_code, response.text[:200]
            )
            return None
        result: dict[str, Any] = response.json()
        return result

    # -- lifecycle ----------------------------------------------------------------------------

    def _registered_listener(self) -> dict[str, Any]:
        advertised = self.config.advertised_listener
        if advertised is not None:
            return {"name": "http", "host": advertised.host, "port": advertised.port}
        return {"name": "http", "host": self.config.listener.host, "port": self.listener_port}

    async def _register(self) -> bool:
        body = {
            "brokerId": self.node_id,
            "clusterId": self.cluster_id,
            "incarnationId": str(self.incarnation),
            "logDirs": [str(d) for d in self.registered_dirs],
            "hasOfflineLogDirs": bool(self.startup_offline),
            "listeners": [self._registered_listener()],
            "rack": self.config.rack,
            "previousBrokerEpoch": self.epoch,
        }
        reply = await self.post("/v1/brokers/register", body)
        if reply is None:
            return False
        code = reply.get("errorCode", 0)
        if code == ErrorCode.NONE:
            self.epoch = int(reply["brokerEpoch"])
            self.registered = True
            log.info("Registered broker %d with epoch %d", self.node_id, self.epoch)
            return True
        if code in (ErrorCode.INCONSISTENT_CLUSTER_ID, ErrorCode.INVALID_REQUEST):
            self.shut_down(
                EXIT_REGISTRATION_REFUSED,
                f"the controller refused the registration: {reply.get('errorMessage')}",
            )
        else:
            log.warning("Registration answered errorCode %s: %s", code, reply.get("errorMessage"))
        return False

    def reported_offline_dirs(self) -> list[Uuid]:
        """Every registered dir that failed since start: sent in every heartbeat until restart."""
        return sorted(d for d in self.failed if d in self.registered_dirs)

    def _heartbeat_body(self, offline: list[Uuid], *, want_shut_down: bool) -> dict[str, Any]:
        return {
            "brokerId": self.node_id,
            "brokerEpoch": self.epoch,
            "currentMetadataOffset": self.applied_offset,
            "wantFence": not self.ready_to_unfence,
            "wantShutDown": want_shut_down,
            "offlineLogDirs": [str(d) for d in offline],
        }

    def caught_up(self) -> bool:
        return (
            self.registered
            and self.applied_offset >= self.epoch
            and self.applied_offset + 1 >= self.metadata_end
        )

    async def _heartbeat(self) -> None:
        if (
            not self.ready_to_unfence
            and self.caught_up()
            and self.reconciled_once
            and not self.creating
            and self.queue.size == 0
        ):
            self.ready_to_unfence = True
            log.info("Ready to be unfenced: caught up and every placement confirmed")
        offline = self.reported_offline_dirs()
        reply = await self.post("/v1/brokers/heartbeat", self._heartbeat_body(offline, want_shut_down=False))
        if reply is None:
            return
        code = reply.get("errorCode", 0)
        if code == ErrorCode.STALE_BROKER_EPOCH:
            log.warning("Heartbeat was stale (%s); registering again", reply.get("errorMessage"))
            self.registered = False
            return
        if code != ErrorCode.NONE:
            log.warning("Heartbeat answered errorCode %s: %s", code, reply.get("errorMessage"))
            return
        for directory in offline:
            failed = self.failed[directory]
            if not failed.acknowledged:
                failed.acknowledged = True
                log.info("The controller acknowledged that log dir %s is offline", directory)
        was_fenced = self.fenced
        self.fenced = bool(reply["isFenced"])
        if was_fenced != self.fenced:
            log.info("Broker %d is now %s", self.node_id, "fenced" if self.fenced else "unfenced")
        if reply.get("shouldShutDown"):
            self.shut_down(EXIT_CONTROLLER_SAID_SHUTDOWN, "the controller said to shut down")

    async def _lifecycle(self) -> None:
        interval = self.config.heartbeat_interval_ms / 1000
        backoff = 0.1
        while not self.stopping.is_set():
            if not self.registered:
                if not await self._register():
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, self.config.session_timeout_ms / 1000)
                    continue
                backoff = 0.1
            await self._heartbeat()
            self.heartbeat_now.clear()
            wait = interval if self.ready_to_unfence else min(interval, 0.1)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.heartbeat_now.wait(), wait)

    # -- metadata -----------------------------------------------------------------------------

    async def _metadata_forever(self) -> None:
        while not self.stopping.is_set():
            params = {"fromOffset": self.applied_offset + 1, "maxWaitMs": 5000, "maxRecords": 10000}
            if self.applied_checksum is not None:
                params["lastChecksum"] = self.applied_checksum
            try:
                response = await self._http.get("/v1/metadata", params=params)
                reply = response.json() if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("Failed fetching metadata: %s", exc)
                await asyncio.sleep(0.5)
                continue
            if reply is not None and reply.get("errorCode") == ErrorCode.OFFSET_OUT_OF_RANGE:
                self.restart_metadata(reply)
                continue
            if reply is None or reply.get("errorCode", 0) != 0:
                log.warning("Metadata fetch failed: %s", reply)
                await asyncio.sleep(0.5)
                continue
            self.apply_metadata(reply)

    def restart_metadata(self, reply: dict[str, Any]) -> None:
        """The controller's log went backwards: replay it from offset 0 into a fresh image."""
        log.warning(
            "The controller's metadata log went backwards: this broker applied up to offset %d, the "
            "controller's log ends at offset %s (%s); replaying it from offset 0 into a fresh image",
            self.applied_offset,
            reply.get("endOffset"),
            reply.get("errorMessage"),
        )
        self.applied_offset = -1
        self.applied_checksum = None
        self.metadata_end = int(reply.get("endOffset") or 0)
        self.rebuilding = ClusterImage()
        self.changed = set()
        self.full_reconcile = True

    def apply_metadata(self, reply: dict[str, Any]) -> None:
        """Replay a page of records; reconcile everything that changed once caught up.

        Changes are remembered across pages, so a large change that arrives over several pages
        is reconciled in full when the last page lands.
        """
        if reply.get("snapshot"):
            if self.rebuilding is not None:
                self.rebuilding = ClusterImage()
            else:
                self.image = ClusterImage()
            self.full_reconcile = True
        image = self.rebuilding if self.rebuilding is not None else self.image
        for entry in reply["records"]:
            record = records.decode(entry["type"], entry["data"])
            image.replay(record, entry["offset"])
            self.applied_offset = entry["offset"]
            if isinstance(record, records.PartitionRecord | records.PartitionChangeRecord):
                self.changed.add((record.topic_id, record.partition_id))
            elif isinstance(record, records.RemoveTopicRecord):
                self.removed_topics.add(record.topic_id)
                self.changed.update(k for k in self.local if k[0] == record.topic_id)
            elif (
                isinstance(record, records.RegisterBrokerRecord | records.BrokerRegistrationChangeRecord)
                and record.broker_id == self.node_id
            ):
                self.full_reconcile = True
        if reply["records"]:
            checksum = reply.get("lastChecksum")
            self.applied_checksum = int(checksum) if checksum is not None else None
        self.metadata_end = int(reply["endOffset"])
        if self.rebuilding is not None and self.applied_offset + 1 >= self.metadata_end:
            self.image, self.rebuilding = self.rebuilding, None
            log.warning(
                "Rebuilt the metadata image from the controller's log, up to offset %d", self.applied_offset
            )
        if self.caught_up():
            if self.full_reconcile or not self.reconciled_once:
                keys = set(self.image.replicas_by_broker.get(self.node_id, ())) | set(self.local)
            else:
                keys = self.changed
            self.changed = set()
            self.full_reconcile = False
            self.reconcile(keys)
            self.reconciled_once = True

    # -- replica management -------------------------------------------------------------------

    def _views(self) -> dict[Uuid, DirView]:
        counts: dict[Uuid, int] = {}
        for replica in self.local.values():
            counts[replica.directory_id] = counts.get(replica.directory_id, 0) + 1
        return {d: DirView(d, s.health, s.usable_bytes, counts.get(d, 0)) for d, s in self.dirs.items()}

    def reconcile(self, keys: set[PartitionKey]) -> None:
        views = self._views()
        has_offline = bool(self.failed) or bool(self.startup_offline)
        now = time.monotonic()
        for key in sorted(keys):
            part = self.image.partition(key)
            local = self.local.get(key)
            if part is None or self.node_id not in part.replicas:
                if local is not None:
                    self._retire_local(key, local, deleted_topic=key[0] in self.removed_topics)
                continue
            if key in self.offline_local or key in self.creating or self.mover.destination_of(key):
                continue
            assigned = part.directory_of(self.node_id)
            action = placement.decide_replica(
                key,
                assigned,
                local_dir=local.directory_id if local else None,
                dirs=views,
                has_offline_dirs=has_offline,
                chosen=placement.choose_dir(views.values()),
            )
            if action is None:
                continue
            if action.kind is placement.ActionKind.REPORT and self.queue.pending(key) == action.directory:
                continue  # already on its way to the controller
            if action.kind is placement.ActionKind.CREATE:
                if key not in self.creating:
                    self.creating[key] = action.directory
                    self.creations_now.set()
                    view = views[action.directory]
                    views[action.directory] = DirView(
                        view.directory_id, view.health, view.usable_bytes, view.replicas + 1
                    )
                continue  # reported once it exists on disk
            self.queue.enqueue(key, action.directory, now=now, reason=action.reason)
            self.placements_now.set()
        self.manager.sync(keys)

    async def _creations_forever(self, batch_size: int = 1000) -> None:
        """Create queued replica dirs in a worker thread, a batch at a time, then report them.

        The event loop keeps heartbeating while disks work; a batch is made durable with one
        sync before its placements are queued.
        """
        while not self.stopping.is_set():
            if not self.creating:
                self.creations_now.clear()
                await self.creations_now.wait()
                continue
            batch = []
            for key, directory in list(self.creating.items())[:batch_size]:
                topic = self.image.topics.get(key[0])
                state = self.dirs[directory]
                if topic is None or state.health is DirHealth.OFFLINE:
                    del self.creating[key]
                    continue
                batch.append((key, directory, state.path, topic.name))
            if not batch:
                continue
            results = await asyncio.to_thread(_create_replicas, batch)
            now = time.monotonic()
            created: list[PartitionKey] = []
            for (key, directory, _path, topic_name), outcome in zip(batch, results, strict=True):
                self.creating.pop(key, None)
                if isinstance(outcome, OSError):
                    self.io_error(directory, outcome, f"creating replica {topic_name}-{key[1]}")
                    continue
                if self.dirs[directory].health is DirHealth.OFFLINE:
                    continue
                self.local[key] = LocalReplica(directory, outcome, topic_name)
                self.queue.enqueue(key, directory, now=now, reason="created")
                created.append(key)
            self.placements_now.set()
            self.manager.sync(created)

    def _retire_local(self, key: PartitionKey, local: LocalReplica, *, deleted_topic: bool) -> None:
        """Delete the replica of a deleted topic; keep any other unknown replica as `-stray`."""
        self.mover.cancel(key, "the replica is no longer hosted here")
        self.manager.remove(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        try:
            if deleted_topic:
                replicas.delete(local.path)
                log.info("Deleted replica %s: its topic was deleted", local.path.name)
            else:
                target = replicas.mark_stray(local.path, key[0])
                log.warning(
                    "Renamed replica %s to %s: this broker no longer hosts it", local.path.name, target.name
                )
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.io_error(local.directory_id, exc, f"retiring replica {local.path.name}")
            return
        del self.local[key]
        self.queue.cancel(key)

    def placement_valid(self, key: PartitionKey, directory: Uuid) -> bool:
        part = self.image.partition(key)
        local = self.local.get(key)
        return (
            part is not None
            and self.node_id in part.replicas
            and local is not None
            and (local.directory_id == directory or self.mover.destination_of(key) == directory)
            and self.dirs[directory].health is not DirHealth.OFFLINE
        )

    async def _placements_forever(self) -> None:
        while not self.stopping.is_set():
            now = time.monotonic()
            due = self.queue.next_send_time(now) if self.registered else None
            if due is None or due > now:
                self.placements_now.clear()
                timeout = None if due is None else due - now
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.placements_now.wait(), timeout)
                continue
            batch = self.queue.take_batch(now=now, is_valid=self.placement_valid)
            if batch is None:
                continue
            await self._send_placements(batch)

    async def _send_placements(self, batch: dict[PartitionKey, Any]) -> None:
        by_dir: dict[Uuid, dict[Uuid, list[int]]] = {}
        for (topic_id, index), placed in batch.items():
            by_dir.setdefault(placed.directory, {}).setdefault(topic_id, []).append(index)
        body = {
            "brokerId": self.node_id,
            "brokerEpoch": self.epoch,
            "directories": [
                {
                    "id": str(d),
                    "topics": [
                        {"topicId": str(t), "partitions": [{"partitionIndex": i} for i in idx]}
                        for t, idx in topics.items()
                    ],
                }
                for d, topics in by_dir.items()
            ],
        }
        reply = await self.post("/v1/assignments", body)
        now = time.monotonic()
        if reply is None or reply.get("errorCode", 0) != 0:
            delay = self.queue.on_failure(now=now)
            log.warning(
                "AssignReplicasToDirs failed (%s); retrying in %.1f s",
                reply and reply.get("errorMessage"),
                delay,
            )
            return
        codes: dict[PartitionKey, int] = {}
        for directory in reply["directories"]:
            for topic in directory["topics"]:
                topic_id = Uuid.parse(topic["topicId"])
                for p in topic["partitions"]:
                    codes[(topic_id, p["partitionIndex"])] = p["errorCode"]
        confirmed = self.queue.on_response(codes, now=now)
        log.info("The controller confirmed %d placement(s); %d still queued", len(confirmed), self.queue.size)
        if self.queue.size:
            self.placements_now.set()

    # -- disk health --------------------------------------------------------------------------

    def io_error(self, directory: Uuid, exc: OSError, doing: str) -> None:
        """An I/O error from real work: a full disk is marked full, anything else fails the dir."""
        if probe.classify_io_error(exc) is probe.ProbeOutcome.FULL:
            self.mark_full(directory, f"{doing}: {probe.describe_os_error(exc)}")
        else:
            self.fail_dir(directory, f"{doing}: {probe.describe_os_error(exc)}")

    def mark_full(self, directory: Uuid, error: str) -> None:
        state = self.dirs[directory]
        if state.health is DirHealth.ONLINE:
            state.health, state.error, state.since = DirHealth.FULL, error, time.time()
            log.warning(
                "Log dir %s (%s) is full: %s; it receives no new replicas", state.path, directory, error
            )

    def fail_dir(self, directory: Uuid, error: str) -> None:
        state = self.dirs[directory]
        if state.health is DirHealth.OFFLINE:
            return
        state.health, state.error, state.since = DirHealth.OFFLINE, error, time.time()
        self.failed[directory] = FailedDir(failed_at=time.monotonic())
        for key, local in list(self.local.items()):
            if local.directory_id == directory:
                self.offline_local[key] = self.local.pop(key)
                self.queue.cancel(key)
        self.mover.dir_failed(directory)
        self.manager.dir_failed(directory)
        log.error("Took log dir %s (%s) offline: %s", state.path, directory, error)
        self.heartbeat_now.set()
        if not any(s.health is not DirHealth.OFFLINE for s in self.dirs.values()):
            self.shut_down(EXIT_STORAGE_LOST, "the last online log dir failed")

    async def _probe_once(self, state: LogDirState) -> probe.ProbeResult | None:
        if state.executor is None:
            state.executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="probe")
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(
            state.executor,
            lambda: probe.probe_dir(
                state.path, device=state.device, directory_id=state.directory_id, payload=self._payload
            ),
        )
        result = await _bounded_by_running_time(future, self.config.log_dir_probe_timeout_ms / 1000)
        if result is None:
            state.executor.shutdown(wait=False)
            state.executor = None
        return result

    async def _probe_forever(self, state: LogDirState) -> None:
        interval = self.config.log_dir_probe_interval_ms / 1000
        while state.health is not DirHealth.OFFLINE and not self.stopping.is_set():
            result = await self._probe_once(state)
            if result is None:
                self.fail_dir(
                    state.directory_id, f"probe timed out after {self.config.log_dir_probe_timeout_ms} ms"
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
                state.health, state.error, state.since = DirHealth.ONLINE, None, time.time()
                log.info("Log dir %s (%s) has free space again", state.path, state.directory_id)
            await asyncio.sleep(interval)

    async def _probe_metadata_dir_forever(self) -> None:
        state = LogDirState(
            path=self.metadata_dir.path,
            directory_id=self.metadata_dir.directory_id,
            device=self.metadata_dir.device,
        )
        interval = self.config.log_dir_probe_interval_ms / 1000
        while not self.stopping.is_set():
            result = await self._probe_once(state)
            if result is None or result.outcome is probe.ProbeOutcome.FAILED:
                reason = "probe timed out" if result is None else result.error
                self.shut_down(EXIT_STORAGE_LOST, f"the metadata log dir {state.path} failed: {reason}")
                return
            await asyncio.sleep(interval)

    def leads_in(self, directory: Uuid) -> int:
        hosted = self.image.replicas_by_dir.get((self.node_id, directory), set())
        led = self.image.leaders_by_broker.get(self.node_id, set())
        return len(hosted & led)

    async def _failure_timeouts_forever(self) -> None:
        timeout = self.config.log_dir_failure_timeout_ms / 1000
        while not self.stopping.is_set():
            now = time.monotonic()
            for directory, failed in self.failed.items():
                if failed.acknowledged or now - failed.failed_at < timeout:
                    continue
                if self.leads_in(directory):
                    self.shut_down(
                        EXIT_DIR_FAILURE_UNREPORTED,
                        f"could not tell the controller that log dir {directory} is offline within "
                        f"{self.config.log_dir_failure_timeout_ms} ms and this broker leads replicas in it",
                    )
                    return
            await asyncio.sleep(min(0.1, timeout / 2))

    # -- views --------------------------------------------------------------------------------

    def offline_replica_count(self) -> int:
        """Replicas this broker hosts that sit in an offline dir (as far as it can tell)."""
        count = len(self.offline_local)
        online = {d for d, s in self.dirs.items() if s.health is not DirHealth.OFFLINE}
        for key in self.image.replicas_by_broker.get(self.node_id, ()):
            if key in self.local or key in self.offline_local:
                continue
            part = self.image.partition(key)
            if part is None:
                continue
            assigned = part.directory_of(self.node_id)
            if not assigned.is_reserved and assigned not in online:
                count += 1
        return count

    def log_dirs_view(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        by_dir: dict[Uuid, list[tuple[PartitionKey, LocalReplica]]] = {}
        for key, local in [*self.local.items(), *self.offline_local.items()]:
            by_dir.setdefault(local.directory_id, []).append((key, local))
        futures: dict[Uuid, list[mover.Move]] = {}
        for move in self.mover.future_replicas():
            futures.setdefault(move.destination, []).append(move)
        for directory, state in sorted(self.dirs.items(), key=lambda item: str(item[1].path)):
            hosted = sorted(by_dir.get(directory, []), key=lambda item: (item[1].topic, item[0][1]))
            out.append(
                {
                    "path": str(state.path),
                    "directoryId": str(directory),
                    "state": state.health.value,
                    "error": state.error,
                    "since": state.since,
                    "totalBytes": state.total_bytes,
                    "usableBytes": state.usable_bytes,
                    "replicas": [
                        {
                            "topic": local.topic,
                            "partition": key[1],
                            "sizeBytes": replicas.size_bytes(local.path)
                            if state.health is not DirHealth.OFFLINE
                            else 0,
                            "future": False,
                        }
                        for key, local in hosted
                    ]
                    + [
                        {
                            "topic": move.topic,
                            "partition": move.key[1],
                            "sizeBytes": replicas.size_bytes(move.future_path),
                            "future": True,
                            "moveState": move.state.value,
                            "copiedBytes": move.copied_bytes,
                        }
                        for move in futures.get(directory, [])
                    ],
                }
            )
        for path, reason in self.startup_offline:
            out.append(
                {
                    "path": str(path),
                    "directoryId": None,
                    "state": "offline",
                    "error": reason,
                    "since": None,
                    "totalBytes": 0,
                    "usableBytes": 0,
                    "replicas": [],
                }
            )
        return out


async def _bounded_by_running_time(
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


def _create_replicas(batch: list[tuple[PartitionKey, Uuid, Path, str]]) -> list[Path | OSError]:
    """Create replica dirs (worker thread): no per-replica fsync, one sync for the batch."""
    results: list[Path | OSError] = []
    for key, _directory, log_dir, topic_name in batch:
        try:
            results.append(
                replicas.create(log_dir, topic=topic_name, partition=key[1], topic_id=key[0], sync=False)
            )
        except OSError as exc:
            results.append(exc)
    os.sync()
    return results
