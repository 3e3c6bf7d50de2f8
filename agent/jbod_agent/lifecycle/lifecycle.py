"""The broker's lifecycle calls to the controller: registration, heartbeats, placements.

Guarantees:
* Every request is built from the state with the `jbod_core.messages` models and sent through the
  `ControllerCalls` port; a transport failure is logged, never raised.
* A reply is folded into the state (epoch, registered, fenced, acknowledged dir failures) and into
  `LifecycleProgress`, the part of the loop's snapshot that is about the controller: a refused
  registration, a request to shut down, when to register again (exponential backoff from 100 ms to
  the session timeout), when the last heartbeat ended and which failed dirs it named.
* Placements: a batch's reply confirms or requeues each placement (`AssignmentQueue`); a failed
  request backs the queue off.
* Registration and every heartbeat (once caught up with the metadata log) carry the cordoned dirs
  (`dynamic_configs.cordoned_dir_ids`, KIP-1066); every heartbeat the dirs that are slow now
  (`AgentState.slow_dir_ids`, issue 35).
* Nothing here decides what to do next: that is `decide`; the loop in `agent` calls these.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from jbod_agent import dynamic_configs
from jbod_agent.lifecycle.assignment_queue import AssignmentQueue, Placement
from jbod_agent.ports import Clock, ControllerCallError, ControllerCalls
from jbod_agent.state import AgentState
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid
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


@dataclass
class LifecycleProgress:
    registration_refused: str | None = None
    controller_said_shutdown: bool = False
    next_register_at: float = 0.0
    register_backoff: float = REGISTER_BACKOFF_INITIAL
    last_heartbeat_at: float | None = None
    sent_offline: frozenset[Uuid] = frozenset()
    sent_slow: frozenset[Uuid] = frozenset()  # slow or stalled dirs named in the last heartbeat


class LifecycleCalls:
    def __init__(
        self, state: AgentState, *, link: ControllerCalls, clock: Clock, queue: AssignmentQueue
    ) -> None:
        self.state = state
        self.link = link
        self.clock = clock
        self.queue = queue
        self.progress = LifecycleProgress()
        self.on_registered: list[Callable[[], None]] = []

    def listeners(self) -> list[ListenerModel]:
        """What the broker registers: its HTTP API first (replication and the tools find it
        there), then its Kafka listeners, each as advertised (a port 0 or no advertised entry:
        the port it is bound to)."""
        config, state = self.state.config, self.state
        advertised_http = config.advertised_listener
        http = ListenerModel(
            name=config.listener.scheme,  # http or https: the scheme peers and tools dial
            host=(advertised_http or config.listener).host,
            port=advertised_http.port if advertised_http and advertised_http.port else state.listener_port,
        )
        advertised = {k.name: k for k in config.advertised_kafka_listeners}
        kafka = []
        for listener in config.kafka_listeners:
            named = advertised.get(listener.name)
            bound = state.kafka_ports.get(listener.name, listener.port)
            kafka.append(
                ListenerModel(
                    name=listener.name,
                    host=named.host if named else listener.host,
                    port=named.port if named and named.port else bound,
                )
            )
        return [http, *kafka]

    async def register(self) -> None:
        state = self.state
        request = RegisterBrokerRequest(
            broker_id=state.node_id,
            cluster_id=state.cluster_id,
            incarnation_id=state.incarnation,
            log_dirs=list(state.registered_dirs),
            has_offline_log_dirs=bool(state.startup_offline),
            listeners=self.listeners(),
            rack=state.config.rack,
            previous_broker_epoch=state.epoch,
            cordoned_log_dirs=dynamic_configs.cordoned_dir_ids(state),
        )
        try:
            reply = await self.link.register(request)
        except ControllerCallError as exc:
            log.warning("Failed registering with the controller: %s", exc)
            reply = None
        if reply is not None and reply.error_code == ErrorCode.NONE:
            state.epoch = reply.broker_epoch
            state.registered = True
            self.progress.register_backoff = REGISTER_BACKOFF_INITIAL
            self.progress.last_heartbeat_at = None  # heartbeat at once
            log.info("Registered broker %d with epoch %d", state.node_id, state.epoch)
            for listener in self.on_registered:
                listener()
            return
        if reply is not None and reply.error_code in (
            ErrorCode.INCONSISTENT_CLUSTER_ID,
            ErrorCode.INVALID_REQUEST,
        ):
            self.progress.registration_refused = reply.error_message or f"errorCode {reply.error_code}"
            return
        if reply is not None:
            log.warning("Registration answered errorCode %s: %s", reply.error_code, reply.error_message)
        self.progress.next_register_at = self.clock.monotonic() + self.progress.register_backoff
        self.progress.register_backoff = min(
            self.progress.register_backoff * 2, state.config.session_timeout_ms / 1000
        )

    def heartbeat_request(self, offline: list[Uuid], *, want_shut_down: bool) -> BrokerHeartbeatRequest:
        state = self.state
        return BrokerHeartbeatRequest(
            broker_id=state.node_id,
            broker_epoch=state.epoch,
            current_metadata_offset=state.applied_offset,
            want_fence=not state.ready_to_unfence,
            want_shut_down=want_shut_down,
            offline_log_dirs=offline,
            # KIP-1066 (and KAFKA-20441): only once caught up, so a dynamic change is never undone
            # by a broker that has not replayed it yet.
            cordoned_log_dirs=dynamic_configs.cordoned_dir_ids(state) if state.caught_up() else None,
            slow_log_dirs=state.slow_dir_ids(),
        )

    async def heartbeat(self, offline: list[Uuid]) -> None:
        state = self.state
        try:
            reply = await self.link.heartbeat(self.heartbeat_request(offline, want_shut_down=False))
        except ControllerCallError as exc:
            log.warning("Failed sending a heartbeat: %s", exc)
            return
        finally:
            self.progress.last_heartbeat_at = self.clock.monotonic()
        if reply.error_code == ErrorCode.STALE_BROKER_EPOCH:
            log.warning("Heartbeat was stale (%s); registering again", reply.error_message)
            state.registered = False
            self.progress.sent_offline = frozenset()
            self.progress.sent_slow = frozenset()
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
            self.progress.controller_said_shutdown = True

    async def controlled_shutdown(self, timeout: float = 5.0) -> None:
        """Heartbeat with wantShutDown until the controller says shouldShutDown (bounded).

        Also when this broker believes it is fenced: the controller may have unfenced it in a reply
        not read yet, and for a fenced broker the controller answers shouldShutDown at once."""
        if not self.state.registered:
            return
        deadline = self.clock.monotonic() + timeout
        while self.clock.monotonic() < deadline:
            request = self.heartbeat_request(self.state.reported_offline_dirs(), want_shut_down=True)
            try:
                reply = await self.link.heartbeat(request)
            except ControllerCallError as exc:
                log.warning("Failed sending a heartbeat: %s", exc)
            else:
                if reply.error_code == 0 and reply.should_shut_down:
                    log.info("Finished a controlled shutdown: leadership handed over")
                    return
            await self.clock.sleep(0.1)
        log.warning("Gave up the controlled shutdown after %.0f s", timeout)

    async def send_placements(self, batch: dict[PartitionKey, Placement]) -> None:
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
        except ControllerCallError as exc:
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
