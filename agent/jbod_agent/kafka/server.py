"""A broker's Kafka listeners, wired to the agent: one `KafkaServer` per listener in `listeners`,
bound before the broker registers (so it registers the ports it really listens on).

Guarantees: a listener that cannot bind raises `StartupError`-like `OSError` naming it, after
closing those already started; `start_listeners` records each bound port in the agent's state.
"""

from __future__ import annotations

from jbod_agent.agent import Agent
from jbod_agent.kafka.admin_api import AdminApis
from jbod_agent.kafka.apis import KafkaApis
from jbod_agent.kafka.auth import BrokerAuthenticator
from jbod_agent.kafka.context import BrokerContext
from jbod_agent.kafka.forwarding import Forwarder, ProducerIds
from jbod_agent.kafka.listener import KafkaServer, ListenerLimits
from jbod_client.controller import ControllerLink


def build_apis(agent: Agent, *, admin_password: str | None) -> tuple[KafkaApis, AdminApis]:
    """The broker's Kafka APIs over `agent`, and the admin half (whose links must be closed)."""
    config = agent.state.config
    ctx = BrokerContext(
        state=agent.state,
        manager=agent.manager,
        produce=agent.produce,
        client_fetch=agent.client_fetch,
        mover=agent.mover,
        clock=agent.clock,
    )
    timeout = config.session_timeout_ms / 1000
    admin = AdminApis(
        ctx,
        Forwarder(config.controller_urls, admin_token=admin_password, timeout=timeout),
        ProducerIds(
            agent.state, ControllerLink(config.controller_urls, token=agent.token, failover_timeout=timeout)
        ),
    )
    return KafkaApis(ctx, BrokerAuthenticator(agent.state, admin_password), admin.handlers()), admin


class KafkaListeners:
    """The started Kafka listeners of a broker; `close` stops them and the admin links."""

    def __init__(self, servers: list[KafkaServer], admin: AdminApis) -> None:
        self.servers = servers
        self._admin = admin

    async def close(self) -> None:
        for server in self.servers:
            await server.close()
        await self._admin.forwarder.aclose()
        await self._admin.producer_ids.aclose()


async def start_listeners(agent: Agent, *, admin_password: str | None) -> KafkaListeners:
    config = agent.state.config
    apis, admin = build_apis(agent, admin_password=admin_password)
    limits = ListenerLimits(
        max_request_bytes=config.socket_request_max_bytes,
        idle_timeout_s=config.connections_max_idle_ms / 1000,
        read_timeout_s=config.request_read_timeout_ms / 1000,
    )
    started: list[KafkaServer] = []
    for listener in config.kafka_listeners:
        server = KafkaServer(listener, apis, limits=limits)
        try:
            port = await server.start()
        except OSError as exc:
            await KafkaListeners(started, admin).close()
            raise OSError(exc.errno, f"listeners: cannot listen on {listener}: {exc.strerror}") from exc
        agent.state.kafka_ports[listener.name] = port
        started.append(server)
    return KafkaListeners(started, admin)
