"""The metadata controller: recovery, the writer, broker sessions and snapshots, wired together.

Guarantees:
* `start()` recovers the image from the latest valid snapshot plus the log after it (a torn tail
  is truncated by the log), checks every record's offset, then starts the writer; `ready` is true
  only after that. Every registered unfenced broker then gets a fresh session (sessions are soft
  state and never logged).
* Every command goes through the one writer; sessions are only touched inside writer commands.
* Expired sessions are fenced by a periodic writer command, on session time (`StallClock`): time
  the event loop spent stalled, measured by a watcher task, does not count against sessions;
  snapshots are cut after every
  `snapshot_interval_records` records from a cheap copy of the image, written off the event loop.
* In a quorum on etcd (`ControllerConfig.quorum`, §3.8) the service starts as a standby that
  replays the committed log; only after winning the election does it catch up to the log's head,
  give every unfenced broker a fresh session and start the writer. Losing the lease or an append
  steps it down: queued and in-flight commands fail with `NotActiveError` (answered errorCode 41),
  the image (which may hold records that were never committed) is dropped and read again from
  etcd, and it follows the log as a standby.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jbod_controller.etcd_gateway import EtcdError, EtcdGateway
from jbod_controller.etcd_log import EtcdRecordLog, Keys
from jbod_controller.quorum import ControllerInfo, Quorum, QuorumConfig
from jbod_controller.record_log import FileRecordLog, LogCorruptError, NotActiveError, RecordLog, Recovery
from jbod_controller.writer import CommitSignal, Writer, exit_on_fatal
from jbod_core import (
    acls,
    assignments,
    broker_configs,
    brokers,
    config_changes,
    frames,
    isr,
    leader_election,
    producer_ids,
    quota_messages,
    quotas,
    reassignment,
    records,
    scram,
    topics,
)
from jbod_core.image import SCRAM_MECHANISMS, ClusterImage
from jbod_core.messages import (
    AllocateProducerIdsReply,
    AllocateProducerIdsRequest,
    AlterBrokerConfigsReply,
    AlterBrokerConfigsRequest,
    AlterPartitionReply,
    AlterPartitionRequest,
    AlterReassignmentsReply,
    AlterReassignmentsRequest,
    AlterScramCredentialsReply,
    AlterScramCredentialsRequest,
    AlterTopicConfigsReply,
    AlterTopicConfigsRequest,
    AssignReplicasToDirsReply,
    AssignReplicasToDirsRequest,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    CreateAclsReply,
    CreateAclsRequest,
    CreatePartitionsReply,
    CreatePartitionsRequest,
    CreateTopicReply,
    CreateTopicRequest,
    DeleteAclsReply,
    DeleteAclsRequest,
    DeleteTopicReply,
    ElectLeadersReply,
    ElectLeadersRequest,
    RegisterBrokerReply,
    RegisterBrokerRequest,
    UnregisterBrokerReply,
)
from jbod_core.quota_messages import AlterClientQuotasReply, AlterClientQuotasRequest
from jbod_core.sessions import Session, StallClock
from jbod_runtime import gc_policy

log = logging.getLogger("jbod_controller")

# The stall watcher's period and the lateness it tolerates before calling it a stall.
STALL_TICK_S = 0.1
STALL_TOLERANCE_S = 0.1


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    data_dir: Path
    cluster_id: str
    session_timeout_s: float = 9.0
    snapshot_interval_records: int = 200_000
    log_retention_bytes: int = 1024 * 1024 * 1024
    segment_bytes: int = 64 * 1024 * 1024
    # Kafka's default.replication.factor: used when a create names neither an RF nor an assignment.
    default_replication_factor: int | None = None
    # Written into a new topic's configs when the create does not set min.insync.replicas.
    default_min_insync_replicas: int | None = None
    # Where clients reach this controller (`activeController.url`, `/v1/cluster`).
    url: str = ""
    # A controller quorum on etcd (§3.8); None = the single controller with its file log.
    quorum: QuorumConfig | None = None
    # Kafka's auto.leader.rebalance.enable and leader.imbalance.check.interval.seconds: leadership
    # goes back to the preferred replicas periodically (`jbod_core.leader_election`).
    auto_leader_rebalance: bool = True
    leader_imbalance_check_interval_s: float = 300.0


class RecoveryError(RuntimeError):
    """The metadata log cannot be turned back into an image."""


def replay_recovery(recovery: Recovery) -> ClusterImage:
    """Build the image from a recovered snapshot and log (runs off the event loop)."""
    image = ClusterImage()
    decode = records.decode
    if recovery.snapshot is not None:
        last = recovery.snapshot.offset - 1
        decode_snapshot_entry = frames.decode_snapshot_entry
        for payload in recovery.snapshot.entries:
            record_type, data = decode_snapshot_entry(payload)
            image.replay(decode(record_type, data), last)
        image.end_offset = recovery.snapshot.offset
    expected = image.end_offset
    decode_entry = frames.decode_entry
    for payload in recovery.entries:
        offset, record_type, data = decode_entry(payload)
        if offset != expected:
            raise RecoveryError(f"record offset {offset} found where {expected} was expected")
        image.replay(decode(record_type, data), offset)
        expected += 1
    return image


class ControllerService:
    def __init__(
        self,
        config: ControllerConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        on_fatal: Callable[[BaseException], None] = exit_on_fatal,
    ) -> None:
        self.config = config
        self.clock = clock
        self.rng = rng or random.SystemRandom()
        self.record_log: RecordLog
        self.quorum: Quorum | None = None
        if config.quorum is None:
            self.record_log = FileRecordLog(config.data_dir / "metadata", segment_bytes=config.segment_bytes)
        else:
            gateway = EtcdGateway(config.quorum.endpoints, tls=config.quorum.tls)
            etcd_log = EtcdRecordLog(gateway, Keys.under(config.quorum.prefix), clock=clock)
            self.record_log = etcd_log
            self.quorum = Quorum(config.quorum, etcd_log, self)
        self.commits = CommitSignal(lambda: self.record_log.committed_offset)
        self.image = ClusterImage()
        self.sessions: dict[int, Session] = {}
        self.stall_clock = StallClock(STALL_TICK_S, STALL_TOLERANCE_S, last_tick=clock())
        self.writer: Writer | None = None
        self.ready = False
        self.recovery_seconds = 0.0
        self.recovered_records = 0
        self._on_fatal = on_fatal
        self._tasks: list[asyncio.Task[Any]] = []
        self._active_tasks: list[asyncio.Task[Any]] = []
        self._snapshot_task: asyncio.Task[None] | None = None
        self._active = False
        self._transition = asyncio.Lock()

    @property
    def active(self) -> bool:
        """True while this controller is the one writer (always, once started, without a quorum)."""
        return self._active

    def active_controller(self) -> ControllerInfo | None:
        if self.quorum is None:
            return ControllerInfo(0, self.config.url) if self._active else None
        return self.quorum.active_controller

    def controllers(self) -> list[dict[str, Any]]:
        if self.quorum is None:
            return [{"nodeId": 0, "url": self.config.url, "active": self._active}]
        return self.quorum.controllers()

    @property
    def elections(self) -> int:
        return self.quorum.elections if self.quorum is not None else 0

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        started = time.perf_counter()
        gc_policy.configure()
        loop = asyncio.get_running_loop()
        try:
            recovery = await loop.run_in_executor(None, self.record_log.recover)
            self.image = await loop.run_in_executor(None, replay_recovery, recovery)
            recovered = len(recovery.entries)
            snapshot_offset = recovery.snapshot.offset if recovery.snapshot else None
            truncated = recovery.truncated_bytes
        except (LogCorruptError, records.RecordError, ValueError, EtcdError, ConnectionError) as exc:
            raise RecoveryError(
                f"Failed recovering the metadata log in {self.record_log.directory}: {exc}"
            ) from exc
        if self.image.end_offset != self.record_log.end_offset:
            raise RecoveryError(
                f"image ends at {self.image.end_offset} but the log at {self.record_log.end_offset}"
            )
        del recovery
        gc_policy.full_collection()
        self.recovered_records = recovered
        self.recovery_seconds = time.perf_counter() - started
        if truncated:
            log.warning("Truncated a torn tail of %d bytes from the metadata log", truncated)
        log.info(
            "Recovered the metadata log: %d records replayed%s in %.2f s, end offset %d",
            self.recovered_records,
            f" after a snapshot at {snapshot_offset}" if snapshot_offset is not None else "",
            self.recovery_seconds,
            self.image.end_offset,
        )
        self.stall_clock.tick(self.clock())
        self._tasks.append(loop.create_task(self._watch_stalls_forever(), name="stall-watch"))
        self._tasks.append(loop.create_task(self._collect_garbage_forever(), name="gc"))
        if self.quorum is None:
            self._start_writing()
            self.ready = True
            return
        self.ready = True  # a standby that has read the whole committed log
        try:
            await self.quorum.start()
        except (EtcdError, ConnectionError) as exc:
            raise RecoveryError(f"Failed joining the controller quorum: {exc}") from exc

    def _start_writing(self) -> None:
        """Become the writer: fresh sessions for every unfenced broker, the writer, session expiry."""
        now = self.session_now()
        self.sessions = {
            reg.broker_id: Session(last_contact=now) for reg in self.image.brokers.values() if not reg.fenced
        }
        self.writer = Writer(
            self.image,
            self.record_log,
            on_fatal=self._on_fatal,
            commits=self.commits,
            on_deposed=self._deposed_by_writer,
        )
        self.writer.after_commit.append(self._maybe_snapshot)
        self.writer.start()
        loop = asyncio.get_running_loop()
        self._active_tasks.append(loop.create_task(self._expire_sessions_forever(), name="session-expiry"))
        if self.config.auto_leader_rebalance:
            self._active_tasks.append(
                loop.create_task(self._balance_leaders_forever(), name="leader-balance")
            )
        self._active = True

    # -- quorum roles (§3.8) ------------------------------------------------------------------

    async def apply_committed(self, first_offset: int, payloads: list[bytes], revision: int) -> None:
        """Replay records a standby read from the log; they must continue the image."""
        assert isinstance(self.record_log, EtcdRecordLog)
        self.record_log.extend_committed(first_offset, payloads, revision)
        image = self.image
        decode, decode_entry = records.decode, frames.decode_entry
        for payload in payloads:
            offset, record_type, data = decode_entry(payload)
            if offset != image.end_offset:
                raise ValueError(f"record offset {offset} found where {image.end_offset} was expected")
            image.replay(decode(record_type, data), offset)
        await self.commits.notify()

    async def promote(self, fence: int) -> None:
        """Won the election: catch up to the log's head, then write (fresh broker sessions)."""
        assert self.quorum is not None and isinstance(self.record_log, EtcdRecordLog)
        async with self._transition:
            started = time.perf_counter()
            await self.quorum.catch_up(self.apply_committed)
            self.record_log.take_over(
                fence, self.quorum.lease_deadline, give_up_s=2 * self.quorum.config.lease_ttl_s
            )
            self._start_writing()
            log.info(
                "Active controller from offset %d (took over in %.0f ms)",
                self.record_log.committed_offset,
                (time.perf_counter() - started) * 1000,
            )

    def _deposed_by_writer(self, exc: NotActiveError) -> None:
        assert self.quorum is not None
        self.quorum.spawn(self.step_down(str(exc)))

    async def step_down(self, why: str) -> None:
        """Stop writing, drop the image and follow the log again as a standby."""
        assert self.quorum is not None and isinstance(self.record_log, EtcdRecordLog)
        async with self._transition:
            if not self._active:
                return
            log.warning("No longer the active controller: %s", why)
            self._active = False
            self.record_log.fence = 0
            if self.quorum.active_controller == self.quorum.me:
                self.quorum.active_controller = None
            for task in self._active_tasks:
                task.cancel()
            for task in self._active_tasks:
                with contextlib.suppress(asyncio.CancelledError, NotActiveError):
                    await task
            self._active_tasks.clear()
            if self.writer is not None:
                await self.writer.stop_writing(NotActiveError(why))
                self.writer = None
            self.sessions.clear()
            await self.quorum.resign()
            await self._reread()
            self.quorum.resume_following()

    async def resync(self) -> None:
        """Re-read the log from etcd (a standby whose watch broke or fell behind a compaction)."""
        async with self._transition:
            if not self._active:
                await self._reread()

    async def _reread(self) -> None:
        loop = asyncio.get_running_loop()
        self.ready = False
        while True:
            try:
                recovery = await loop.run_in_executor(None, self.record_log.recover)
                self.image = await loop.run_in_executor(None, replay_recovery, recovery)
                break
            except (EtcdError, ConnectionError, ValueError, records.RecordError) as exc:
                log.warning("Could not re-read the metadata log from etcd: %s", exc)
                await asyncio.sleep(0.5)
        self.ready = True
        await self.commits.notify()

    async def wait_for_commit(self, beyond: int, timeout: float) -> None:
        await self.commits.wait_beyond(beyond, timeout)

    async def stop(self) -> None:
        self.ready = False
        for task in self._tasks + self._active_tasks:
            task.cancel()
        for task in self._tasks + self._active_tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._snapshot_task is not None:
            await asyncio.gather(self._snapshot_task, return_exceptions=True)
        if self.writer is not None:
            await self.writer.stop()
        if self.quorum is not None:
            await self.quorum.stop()
        self._active = False
        await self.commits.close()
        self.record_log.close()

    # -- commands -----------------------------------------------------------------------------

    def _writer(self) -> Writer:
        if self.writer is None or not self._active:
            raise NotActiveError("this controller is a standby")
        return self.writer

    async def register_broker(self, request: RegisterBrokerRequest) -> RegisterBrokerReply:
        def decide(image: ClusterImage) -> tuple[list[records.Record], RegisterBrokerReply]:
            now = self.session_now()
            produced, reply = brokers.register_broker(
                image,
                self.sessions,
                request,
                cluster_id=self.config.cluster_id,
                now=now,
                session_timeout=self.config.session_timeout_s,
            )
            if reply.error_code == 0:
                self.sessions[request.broker_id] = Session(last_contact=now)
                log.info("Registered broker %d with epoch %d", request.broker_id, reply.broker_epoch)
            return produced, reply

        return await self._writer().submit(decide, name="register")

    async def broker_heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply:
        def decide(image: ClusterImage) -> tuple[list[records.Record], BrokerHeartbeatReply]:
            before = image.brokers.get(request.broker_id)
            produced, reply = brokers.broker_heartbeat(image, self.sessions, request)
            if reply.error_code == 0:
                session = self.sessions.get(request.broker_id)
                if session is None:
                    self.sessions[request.broker_id] = Session(
                        last_contact=self.session_now(), metadata_offset=request.current_metadata_offset
                    )
                else:
                    session.last_contact = self.session_now()
                    session.metadata_offset = request.current_metadata_offset
                if produced and before is not None:
                    _log_transition(before.fenced, reply, request)
            return produced, reply

        return await self._writer().submit(decide, name="heartbeat")

    async def assign_replicas_to_dirs(
        self, request: AssignReplicasToDirsRequest
    ) -> AssignReplicasToDirsReply:
        return await self._writer().submit(
            lambda image: assignments.assign_replicas_to_dirs(image, request), name="assign-replicas-to-dirs"
        )

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionReply:
        return await self._writer().submit(
            lambda image: isr.alter_partition(image, request), name="alter-partition"
        )

    async def create_topic(self, request: CreateTopicRequest) -> CreateTopicReply:
        def decide(image: ClusterImage) -> tuple[list[records.Record], CreateTopicReply]:
            produced, reply = topics.create_topic(
                image,
                request,
                rng=self.rng,
                default_min_insync_replicas=self.config.default_min_insync_replicas,
            )
            if reply.error_code == 0:
                log.info("Created topic %s with %d partitions", request.name, reply.num_partitions)
            return produced, reply

        return await self._writer().submit(decide, name="create-topic")

    async def delete_topic(self, name: str) -> DeleteTopicReply:
        def decide(image: ClusterImage) -> tuple[list[records.Record], DeleteTopicReply]:
            produced, reply = topics.delete_topic(image, name)
            if reply.error_code == 0:
                log.info("Deleted topic %s", name)
            return produced, reply

        return await self._writer().submit(decide, name="delete-topic")

    async def alter_topic_configs(
        self, name: str, request: AlterTopicConfigsRequest
    ) -> AlterTopicConfigsReply:
        def decide(image: ClusterImage) -> tuple[list[records.Record], AlterTopicConfigsReply]:
            produced, reply = config_changes.alter_topic_configs(image, name, request)
            changes = [r for r in produced if isinstance(r, records.ConfigRecord)]
            if changes:
                log.info(
                    "Changed configs of topic %s: %s",
                    name,
                    ", ".join(
                        f"{r.name}={r.value}" if r.value is not None else f"{r.name} deleted" for r in changes
                    ),
                )
            return produced, reply

        return await self._writer().submit(decide, name="alter-configs")

    async def alter_broker_configs(
        self, broker: str, request: AlterBrokerConfigsRequest
    ) -> AlterBrokerConfigsReply:
        """Dynamic configs of broker `broker` ("" = the cluster default): `jbod_core.broker_configs`."""

        def decide(image: ClusterImage) -> tuple[list[records.Record], AlterBrokerConfigsReply]:
            produced, reply = broker_configs.alter_broker_configs(image, broker, request)
            changes = [r for r in produced if isinstance(r, records.BrokerConfigRecord)]
            if changes:
                log.info(
                    "Changed dynamic configs of %s: %s",
                    "the cluster default" if broker == "" else f"broker {broker}",
                    ", ".join(
                        f"{r.name}={r.value}" if r.value is not None else f"{r.name} deleted" for r in changes
                    ),
                )
            return produced, reply

        return await self._writer().submit(decide, name="alter-broker-configs")

    async def create_partitions(self, name: str, request: CreatePartitionsRequest) -> CreatePartitionsReply:
        def decide(image: ClusterImage) -> tuple[list[records.Record], CreatePartitionsReply]:
            produced, reply = topics.create_partitions(image, name, request, rng=self.rng)
            if produced:
                log.info("Added %d partitions to topic %s (now %d)", len(produced), name, request.total_count)
            return produced, reply

        return await self._writer().submit(decide, name="create-partitions")

    async def alter_reassignments(self, request: AlterReassignmentsRequest) -> AlterReassignmentsReply:
        def decide(image: ClusterImage) -> tuple[list[records.Record], AlterReassignmentsReply]:
            produced, reply = reassignment.alter_reassignments(image, request)
            for record in produced:
                if isinstance(record, records.PartitionChangeRecord) and record.replicas is not None:
                    topic = image.topics[record.topic_id].name
                    if record.adding_replicas or record.removing_replicas:
                        log.info(
                            "Reassigning %s-%d: replicas %s, adding %s, removing %s",
                            topic,
                            record.partition_id,
                            list(record.replicas),
                            list(record.adding_replicas or ()),
                            list(record.removing_replicas or ()),
                        )
                    else:
                        log.info(
                            "Replicas of %s-%d are now %s", topic, record.partition_id, list(record.replicas)
                        )
            return produced, reply

        return await self._writer().submit(decide, name="alter-reassignments")

    async def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersReply:
        def decide(image: ClusterImage) -> tuple[list[records.Record], ElectLeadersReply]:
            produced, reply = leader_election.elect_leaders(image, request)
            _log_elections(image, produced, "on request")
            return produced, reply

        return await self._writer().submit(decide, name="elect-leaders")

    async def balance_leaders(self) -> int:
        """Move leadership back to preferred replicas (at most Kafka's 1,000 partitions); how many."""

        def decide(image: ClusterImage) -> tuple[list[records.Record], int]:
            produced = leader_election.preferred_leader_balance(image)
            _log_elections(image, produced, "to balance leadership")
            return produced, len(produced)

        return await self._writer().submit(decide, name="balance-leaders")

    async def alter_scram_credentials(
        self, request: AlterScramCredentialsRequest
    ) -> AlterScramCredentialsReply:
        def decide(image: ClusterImage) -> tuple[list[records.Record], AlterScramCredentialsReply]:
            produced, reply = scram.alter_credentials(image, request)
            for record in produced:
                if isinstance(
                    record, records.UserScramCredentialRecord | records.RemoveUserScramCredentialRecord
                ):
                    verb = "Set" if isinstance(record, records.UserScramCredentialRecord) else "Deleted"
                    log.info(
                        "%s the %s credential of user %r",
                        verb,
                        SCRAM_MECHANISMS.get(record.mechanism, record.mechanism),
                        record.name,
                    )
            return produced, reply

        return await self._writer().submit(decide, name="alter-scram-credentials")

    async def alter_client_quotas(self, request: AlterClientQuotasRequest) -> AlterClientQuotasReply:
        """AlterClientQuotas (`jbod_core.quotas`): a ClientQuotaRecord per key that changes."""

        def decide(image: ClusterImage) -> tuple[list[records.Record], AlterClientQuotasReply]:
            produced, results = quotas.alter_client_quotas(
                image.client_quotas, quota_messages.to_entries(request), validate_only=request.validate_only
            )
            for record in produced:
                if isinstance(record, records.ClientQuotaRecord):
                    log.info(
                        "%s client quota %s of %s",
                        "Removed" if record.remove else "Set",
                        record.key if record.remove else f"{record.key}={record.value}",
                        quotas.describe_entity(record.entity),
                    )
            return produced, quota_messages.from_results(results)

        return await self._writer().submit(decide, name="alter-client-quotas")

    async def create_acls(self, request: CreateAclsRequest) -> CreateAclsReply:
        """CreateAcls (`jbod_core.acls`): the new ACLs in the metadata log."""

        def decide(image: ClusterImage) -> tuple[list[records.Record], CreateAclsReply]:
            produced, reply = acls.create_acls_reply(image.acls, request, rng=self.rng)
            for record in produced:
                if isinstance(record, records.AccessControlEntryRecord):
                    log.info("Created ACL %s: %s", record.id, acls.Acl.from_record(record).to_json())
            return produced, reply

        return await self._writer().submit(decide, name="create-acls")

    async def delete_acls(self, request: DeleteAclsRequest) -> DeleteAclsReply:
        """DeleteAcls (`jbod_core.acls`): every ACL a filter matches removed from the log."""

        def decide(image: ClusterImage) -> tuple[list[records.Record], DeleteAclsReply]:
            produced, reply = acls.delete_acls_reply(image.acls, request)
            for record in produced:
                if isinstance(record, records.RemoveAccessControlEntryRecord):
                    log.info("Deleted ACL %s: %s", record.id, image.acls.by_id[record.id].to_json())
            return produced, reply

        return await self._writer().submit(decide, name="delete-acls")

    async def allocate_producer_ids(self, request: AllocateProducerIdsRequest) -> AllocateProducerIdsReply:
        def decide(image: ClusterImage) -> tuple[list[records.Record], AllocateProducerIdsReply]:
            produced, reply = producer_ids.allocate_producer_ids(image, request)
            if produced:
                log.info(
                    "Allocated producer ids %d to %d to broker %d",
                    reply.producer_id_start,
                    reply.producer_id_start + reply.producer_id_len - 1,
                    request.broker_id,
                )
            return produced, reply

        return await self._writer().submit(decide, name="allocate-producer-ids")

    async def unregister_broker(self, broker_id: int) -> UnregisterBrokerReply:
        def decide(image: ClusterImage) -> tuple[list[records.Record], UnregisterBrokerReply]:
            produced, reply = brokers.unregister_broker(image, broker_id)
            if reply.error_code == 0:
                self.sessions.pop(broker_id, None)
                log.info("Unregistered broker %d", broker_id)
            return produced, reply

        return await self._writer().submit(decide, name="unregister")

    async def expire_sessions(self) -> list[int]:
        def decide(image: ClusterImage) -> tuple[list[records.Record], list[int]]:
            produced, fenced = brokers.expire_sessions(
                image, self.sessions, now=self.session_now(), session_timeout=self.config.session_timeout_s
            )
            for broker_id in fenced:
                log.warning("Fenced broker %d: session expired", broker_id)
            return produced, fenced

        return await self._writer().submit(decide, name="expire-sessions")

    def session_now(self) -> float:
        """Now on session time: the clock minus the time the event loop was stalled."""
        return self.stall_clock.session_time(self.clock())

    async def _watch_stalls_forever(self) -> None:
        while True:
            await asyncio.sleep(STALL_TICK_S)
            stall = self.stall_clock.tick(self.clock())
            if stall >= 1.0:
                log.warning("Event loop stalled for %.1f s; not counted against broker sessions", stall)

    async def _expire_sessions_forever(self) -> None:
        period = min(1.0, max(0.05, self.config.session_timeout_s / 8))
        while True:
            await asyncio.sleep(period)
            try:
                await self.expire_sessions()
            except NotActiveError:
                return  # deposed: `step_down` takes it from here

    async def _balance_leaders_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.leader_imbalance_check_interval_s)
            try:
                await self.balance_leaders()
            except NotActiveError:
                return  # deposed: `step_down` takes it from here

    async def _collect_garbage_forever(self) -> None:
        while True:
            await asyncio.sleep(gc_policy.FULL_COLLECTION_INTERVAL_S)
            log.info("Ran a full garbage collection in %.2f s", gc_policy.full_collection())

    # -- snapshots ----------------------------------------------------------------------------

    def _maybe_snapshot(self) -> None:
        writer = self._writer()
        if writer.records_since_snapshot < self.config.snapshot_interval_records:
            return
        if self._snapshot_task is not None and not self._snapshot_task.done():
            return
        writer.records_since_snapshot = 0
        copy = self.image.copy_for_snapshot()
        loop = asyncio.get_running_loop()
        self._snapshot_task = loop.create_task(self._write_snapshot(copy), name="snapshot")

    async def _write_snapshot(self, copy: ClusterImage) -> None:
        loop = asyncio.get_running_loop()
        started = time.perf_counter()

        def work() -> tuple[int, int]:
            count = write_image_snapshot(self.record_log, copy)
            deleted = self.record_log.delete_segments_before(
                copy.end_offset, keep_bytes=self.config.log_retention_bytes
            )
            return count, deleted

        try:
            count, deleted = await loop.run_in_executor(None, work)
        except (OSError, ValueError, RuntimeError) as exc:
            log.error("Failed writing a metadata snapshot at offset %d: %s", copy.end_offset, exc)
            return
        log.info(
            "Wrote a metadata snapshot of %d records at offset %d in %.2f s%s",
            count,
            copy.end_offset,
            time.perf_counter() - started,
            f", deleted {deleted} old segment(s)" if deleted else "",
        )

    # -- reads --------------------------------------------------------------------------------

    def snapshot_entries(self) -> tuple[int, list[bytes]] | None:
        snapshot = self.record_log.latest_snapshot()
        if snapshot is None:
            return None
        return snapshot.offset, snapshot.entries


def write_image_snapshot(record_log: RecordLog, image: ClusterImage) -> int:
    """Write `image` to `record_log` as the snapshot at its end offset, one snapshot entry per
    record of `ClusterImage.iter_records`; returns the number of records."""
    count = image.record_count()
    entries = (frames.encode_snapshot_entry(r.TYPE, r.to_data()) for r in image.iter_records())
    record_log.write_snapshot(image.end_offset, entries, count=count)
    return count


def _log_elections(image: ClusterImage, produced: list[records.Record], why: str) -> None:
    for record in produced:
        if isinstance(record, records.PartitionChangeRecord) and record.leader is not None:
            topic = image.topics[record.topic_id].name
            log.info("Elected broker %d leader of %s-%d %s", record.leader, topic, record.partition_id, why)


def _log_transition(was_fenced: bool, reply: BrokerHeartbeatReply, request: BrokerHeartbeatRequest) -> None:
    if reply.should_shut_down:
        log.info("Shut down broker %d", request.broker_id)
    elif was_fenced and not reply.is_fenced:
        log.info("Unfenced broker %d", request.broker_id)
    elif not was_fenced and reply.is_fenced:
        log.info("Fenced broker %d: it asked to be fenced", request.broker_id)
    if request.offline_log_dirs:
        log.info(
            "Broker %d reported offline dirs %s",
            request.broker_id,
            ", ".join(str(d) for d in request.offline_log_dirs),
        )
