"""A broker's Kafka listeners, wired to the agent: one `KafkaServer` per listener in `listeners`,
bound before the broker registers (so it registers the ports it really listens on), and the
group and transaction coordinators behind the group and transaction APIs.

Guarantees: a listener that cannot bind raises `StartupError`-like `OSError` naming it, after
closing those already started; `start_listeners` records each bound port in the agent's state.
The group and transaction coordinators follow the replica manager's roles from before the agent
runs (their hooks are added when the APIs are built) and their timers run from `start_listeners`
to `close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from jbod_agent.config import BrokerConfig
from jbod_agent.coordinators.group_coordinator import CoordinatorSettings, GroupCoordinator
from jbod_agent.coordinators.txn_coordinator import TxnCoordinator, TxnSettings
from jbod_agent.coordinators.txn_markers import PeerMarkerSender
from jbod_agent.coordinators.txn_verifier import TxnVerifier
from jbod_agent.kafka import client_quotas
from jbod_agent.kafka.acl_api import AclApis
from jbod_agent.kafka.admin_api import AdminApis
from jbod_agent.kafka.apis import KafkaApis
from jbod_agent.kafka.auth import BrokerAuthenticator
from jbod_agent.kafka.context import BrokerContext
from jbod_agent.kafka.election_api import ElectionApis
from jbod_agent.kafka.forwarding import Forwarder, ProducerIds
from jbod_agent.kafka.group_api import GroupApis
from jbod_agent.kafka.listener import KafkaServer, ListenerLimits
from jbod_agent.kafka.metadata_api import MetadataApis
from jbod_agent.kafka.quota_api import QuotaApis
from jbod_agent.kafka.reassign_api import ReassignApis
from jbod_agent.kafka.topic_creator import TopicCreator
from jbod_agent.kafka.txn_api import TxnApis
from jbod_agent.kafka.txn_markers_api import TxnMarkersApi
from jbod_agent.lifecycle.agent import Agent
from jbod_agent.replication.peer_links import InterBrokerLinks
from jbod_client.controller import ControllerLink
from jbod_core import groups, transactions
from jbod_runtime.tls import ServerTls

log = logging.getLogger("jbod_agent.kafka")


def coordinator_settings(config: BrokerConfig) -> CoordinatorSettings:
    return CoordinatorSettings(
        partitions=config.offsets_topic_num_partitions,
        commit_timeout_ms=config.offsets_commit_timeout_ms,
        offsets_retention_ms=config.offsets_retention_minutes * 60_000,
        offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
        group=groups.GroupSettings(
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
        ),
    )


def txn_settings(config: BrokerConfig) -> TxnSettings:
    return TxnSettings(
        partitions=config.transaction_state_log_num_partitions,
        config=transactions.TxnConfig(
            transaction_max_timeout_ms=config.transaction_max_timeout_ms,
            transactional_id_expiration_ms=config.transactional_id_expiration_ms,
        ),
        abort_timed_out_interval_ms=config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
        remove_expired_interval_ms=config.transaction_remove_expired_transaction_cleanup_interval_ms,
    )


@dataclass
class BrokerApis:
    """What `build_apis` makes: the dispatch, and the parts with links and tasks to close."""

    kafka: KafkaApis
    admin: AdminApis
    groups: GroupApis
    coordinator: GroupCoordinator
    creator: TopicCreator
    txns: TxnApis
    markers: PeerMarkerSender
    verifier: TxnVerifier


def build_apis(agent: Agent, *, admin_password: str | None) -> BrokerApis:
    """The broker's Kafka APIs over `agent`."""
    config = agent.state.config
    ctx = BrokerContext(
        state=agent.state,
        manager=agent.manager,
        produce=agent.produce,
        client_fetch=agent.client_fetch,
        mover=agent.mover,
        replica_fetch=agent.replica_fetch,
        clock=agent.clock,
    )
    timeout = config.session_timeout_ms / 1000
    forwarder = Forwarder(
        config.controller_urls, admin_token=admin_password, timeout=timeout, tls=config.client_tls()
    )
    admin = AdminApis(
        ctx,
        forwarder,
        ProducerIds(
            agent.state,
            ControllerLink(
                config.controller_urls, token=agent.token, failover_timeout=timeout, tls=config.client_tls()
            ),
        ),
    )
    coordinator = GroupCoordinator(
        agent.manager, agent.produce, clock=agent.clock, settings=coordinator_settings(config)
    )
    ctx.group_coordinator = coordinator
    group_apis = GroupApis(ctx, coordinator, forwarder)
    markers = PeerMarkerSender(agent.state, agent.token)
    txn_coordinator = TxnCoordinator(
        agent.manager,
        agent.produce,
        admin.producer_ids,
        markers,
        clock=agent.clock,
        settings=txn_settings(config),
    )
    verifier = TxnVerifier(
        agent.state, txn_coordinator, InterBrokerLinks(agent.state, agent.token, client_id="txn-verifier")
    )
    ctx.txn_verifier = verifier
    txn_apis = TxnApis(ctx, txn_coordinator, forwarder, idempotent_init=admin.init_producer_id)
    group_apis.find_transaction_coordinator = txn_apis.find_coordinator
    creator = TopicCreator(agent.state, forwarder, agent.clock)
    handlers = {
        **MetadataApis(ctx, creator).handlers(),
        **admin.handlers(),
        **group_apis.handlers(),
        **ReassignApis(ctx, forwarder).handlers(),
        **ElectionApis(ctx, forwarder).handlers(),
        **AclApis(ctx, forwarder).handlers(),
        **QuotaApis(ctx, forwarder).handlers(),
        **TxnMarkersApi(ctx, coordinator).handlers(),
        **txn_apis.handlers(),  # after admin's: InitProducerId with a transactional id
    }
    authenticator = BrokerAuthenticator(agent.state, admin_password, inter_broker_password=agent.token)
    kafka = KafkaApis(ctx, authenticator, handlers)
    kafka.quotas = admin.quotas = client_quotas.ClientQuotas(
        lambda: agent.state.image.client_quotas,
        clock=agent.clock,
        windows=client_quotas.Windows(config.quota_window_num, float(config.quota_window_size_seconds)),
        throttle_seconds=agent.state.client_throttle_seconds,
    )
    return BrokerApis(kafka, admin, group_apis, coordinator, creator, txn_apis, markers, verifier)


class KafkaListeners:
    """The started Kafka listeners of a broker; `close` stops them, the group coordinator, the
    topic creations still running and the admin links."""

    def __init__(
        self, servers: list[KafkaServer], apis: BrokerApis, timers: asyncio.Task[None] | None
    ) -> None:
        self.servers = servers
        self._apis = apis
        self._timers = timers

    async def close(self) -> None:
        for server in self.servers:
            await server.close()
        if self._timers is not None:
            self._timers.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timers
        self._apis.coordinator.close()
        self._apis.txns.coordinator.close()
        self._apis.markers.close()
        self._apis.verifier.close()
        await self._apis.txns.aclose()
        await self._apis.groups.aclose()
        await self._apis.creator.aclose()
        await self._apis.admin.forwarder.aclose()
        await self._apis.admin.producer_ids.aclose()


async def start_listeners(
    agent: Agent, *, admin_password: str | None, tls: Mapping[str, ServerTls] | None = None
) -> KafkaListeners:
    """Start a `KafkaServer` per listener; an SSL or SASL_SSL listener handshakes with its
    entry of `tls` (by listener name)."""
    config = agent.state.config
    apis = build_apis(agent, admin_password=admin_password)
    limits = ListenerLimits(
        max_request_bytes=config.socket_request_max_bytes,
        idle_timeout_s=config.connections_max_idle_ms / 1000,
        read_timeout_s=config.request_read_timeout_ms / 1000,
    )
    started: list[KafkaServer] = []
    quotas = apis.kafka.quotas
    for listener in config.kafka_listeners:
        server = KafkaServer(
            listener,
            apis.kafka,
            limits=limits,
            tls=(tls or {}).get(listener.name) if listener.tls else None,
            principal_rules=config.ssl_principal_mapping_rules,
            admit=None if quotas is None else quotas.admit_connection,  # KIP-612's ip quotas
        )
        try:
            port = await server.start()
        except OSError as exc:
            await KafkaListeners(started, apis, None).close()
            raise OSError(exc.errno, f"listeners: cannot listen on {listener}: {exc.strerror}") from exc
        agent.state.kafka_ports[listener.name] = port
        started.append(server)
    timers = asyncio.create_task(_run_coordinators(apis), name="coordinator-timers")
    timers.add_done_callback(_log_failure)
    return KafkaListeners(started, apis, timers)


async def _run_coordinators(apis: BrokerApis) -> None:
    """The group and transaction coordinators' timers, until cancelled."""
    await asyncio.gather(apis.coordinator.run_forever(), apis.txns.coordinator.run_forever())


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("The coordinators' %s task failed", task.get_name(), exc_info=task.exception())
