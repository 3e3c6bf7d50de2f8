"""What every Kafka API handler of a broker reads: the agent's state and replicas, and the
translations between the broker's own ids and Kafka's wire types.

Guarantees: read-only over the agent (`AgentState`'s metadata image, the replica manager's
hosted partitions), except through the data plane's own entry points (`produce`, `client_fetch`,
`mover`); time is the agent's injected clock; `kafka_uuid` and `jbod_uuid` are inverse; `endpoint` names the listener a
client connected through, so every address a client is given is one it can reach the same way.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Final

from jbod_agent.client_fetch import ClientFetch
from jbod_agent.kafka.fetch_sessions import ConsumerSessions
from jbod_agent.mover import Mover
from jbod_agent.ports import Clock
from jbod_agent.produce import Produce
from jbod_agent.replica_manager import ReplicaManager
from jbod_agent.state import AgentState
from jbod_core.ids import Uuid
from jbod_core.image import BrokerRegistration

ZERO_UUID: Final = uuid.UUID(int=0)
ADMIN: Final = "admin"


def kafka_uuid(value: Uuid) -> uuid.UUID:
    return uuid.UUID(bytes=value.to_bytes())


def jbod_uuid(value: uuid.UUID) -> Uuid:
    return Uuid.from_bytes(value.bytes)


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int


@dataclass(slots=True)
class BrokerContext:
    state: AgentState
    manager: ReplicaManager
    produce: Produce
    client_fetch: ClientFetch
    mover: Mover
    clock: Clock
    fetch_sessions: ConsumerSessions = field(default_factory=ConsumerSessions)

    @property
    def node_id(self) -> int:
        return self.state.node_id

    def endpoint(self, reg: BrokerRegistration, listener_name: str) -> Endpoint | None:
        """Where broker `reg` is reached through the listener called `listener_name`."""
        for listener in reg.listeners:
            if listener.name == listener_name:
                return Endpoint(listener.host, listener.port)
        return None

    def topic_id(self, name: str) -> Uuid | None:
        return self.state.image.topic_ids_by_name.get(name)

    def topic_name(self, topic_id: Uuid | uuid.UUID | None) -> str | None:
        """The name of the topic with `topic_id` (ours or Kafka's type); None if unknown or None."""
        if topic_id is None:
            return None
        key = jbod_uuid(topic_id) if isinstance(topic_id, uuid.UUID) else topic_id
        topic = self.state.image.topics.get(key)
        return None if topic is None else topic.name
