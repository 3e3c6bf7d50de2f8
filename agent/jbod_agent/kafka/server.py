"""A broker's Kafka listeners, wired to the agent: one `KafkaServer` per listener in `listeners`,
bound before the broker registers (so it registers the ports it really listens on).

Guarantees: a listener that cannot bind raises `StartupError`-like `OSError` naming it, after
closing those already started; `start_listeners` records each bound port in the agent's state.
"""

from __future__ import annotations

from jbod_agent.agent import Agent
from jbod_agent.kafka.apis import KafkaApis
from jbod_agent.kafka.auth import BrokerAuthenticator
from jbod_agent.kafka.context import BrokerContext
from jbod_agent.kafka.listener import KafkaServer, ListenerLimits


def build_apis(agent: Agent, *, admin_password: str | None) -> KafkaApis:
    ctx = BrokerContext(agent.state, agent.manager)
    return KafkaApis(ctx, BrokerAuthenticator(admin_password), {})


async def start_listeners(agent: Agent, *, admin_password: str | None) -> list[KafkaServer]:
    config = agent.state.config
    apis = build_apis(agent, admin_password=admin_password)
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
            for other in started:
                await other.close()
            raise OSError(exc.errno, f"listeners: cannot listen on {listener}: {exc.strerror}") from exc
        agent.state.kafka_ports[listener.name] = port
        started.append(server)
    return started
