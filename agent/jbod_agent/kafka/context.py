"""What every Kafka API handler of a broker reads: the agent's state and replicas, and the
translations between the broker's own ids and Kafka's wire types.

Guarantees: read-only over the agent (`AgentState`'s metadata image, the replica manager's
hosted partitions), except through the data plane's own entry points (`produce`, `client_fetch`,
`mover`); time is the agent's injected clock; `endpoint` names the listener a
client connected through, so every address a client is given is one it can reach the same way.

Authorization (issue 25; docs/decisions.md, "ACLs"): `authorized` asks Kafka's StandardAuthorizer
rules (`jbod_core.acls`) over this broker's image of the ACLs, for the connection's principal (a
Kafka principal string: `User:<name>` after SASL, `User:ANONYMOUS` on a PLAINTEXT listener, and
whatever an SSL listener's principal mapping gives) and the client's address. `User:admin` (the
admin token's user) and `super.users` may do everything; `User:jbod-broker` (the brokers
replicating from each other, with the cluster token) may CLUSTER_ACTION on the cluster, what Kafka
asks of a follower's Fetch, and what its ACLs give it besides; `allow.everyone.if.no.acl.found`
is Kafka's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from jbod_agent.kafka.fetch_sessions import ConsumerSessions
from jbod_agent.kafka.listener import Connection, user_principal
from jbod_agent.partitions.client_fetch import ClientFetch
from jbod_agent.partitions.produce import Produce
from jbod_agent.partitions.replica_manager import ReplicaManager

if TYPE_CHECKING:
    from jbod_agent.coordinators.group_coordinator import GroupCoordinator
    from jbod_agent.coordinators.txn_verifier import TxnVerifier
from jbod_agent.ports import Clock
from jbod_agent.replication.mover import Mover
from jbod_agent.replication.peer_link import INTER_BROKER_USER
from jbod_agent.replication.replica_fetch import ReplicaFetchServer
from jbod_agent.state import AgentState
from jbod_core import acls
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid
from jbod_core.image import BrokerRegistration
from jbod_kafka import flexible
from jbod_kafka.ids import jbod_uuid

ZERO_UUID: Final = uuid.UUID(int=0)
ADMIN_USER: Final = "admin"  # the SASL user whose password is the admin token
ADMIN: Final = user_principal(ADMIN_USER)  # its principal: always a super user
INTER_BROKER: Final = user_principal(INTER_BROKER_USER)  # its principal: may CLUSTER_ACTION


def refusal(conn: Connection, operation: acls.AclOperation, what: str) -> str:
    """The error message of a request the ACLs refuse, where Kafka's responses carry one."""
    return f"{conn.principal} may not {operation.name} {what}"


def client_host(peer: str) -> str:
    """The client's address of a connection's `peer` ("host:port", IPv6 without brackets)."""
    host, _colon, _port = peer.rpartition(":")
    return host.strip("[]") or peer


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class CurrentLeader:
    """A partition's leader and leader epoch as this broker's image has them (-1, -1 when the
    partition is unknown), and its broker's endpoint on a client's listener (None when it has
    none, or there is no leader): the hint of KIP-951 that Fetch and Produce errors carry."""

    leader_id: int
    leader_epoch: int
    endpoint: Endpoint | None
    rack: str | None = None

    @property
    def hint(self) -> tuple[int, int]:
        """(leader id, leader epoch): the response's tagged `current_leader`."""
        return self.leader_id, self.leader_epoch


def hinted_endpoints(leaders: Iterable[CurrentLeader | None]) -> list[flexible.NodeEndpoint]:
    """A response's `node_endpoints`: the endpoint of each leader it hints, once per broker
    (leaders without an endpoint on the client's listener are left out)."""
    endpoints: dict[int, flexible.NodeEndpoint] = {}
    for leader in leaders:
        if leader is not None and leader.endpoint is not None:
            endpoints[leader.leader_id] = flexible.NodeEndpoint(
                leader.leader_id, leader.endpoint.host, leader.endpoint.port, leader.rack
            )
    return list(endpoints.values())


@dataclass(slots=True)
class BrokerContext:
    state: AgentState
    manager: ReplicaManager
    produce: Produce
    client_fetch: ClientFetch
    mover: Mover
    replica_fetch: ReplicaFetchServer
    clock: Clock
    fetch_sessions: ConsumerSessions = field(default_factory=ConsumerSessions)
    group_coordinator: GroupCoordinator | None = None  # set once built (WriteTxnMarkers tells it markers)
    txn_verifier: TxnVerifier | None = None  # set once built (KIP-890 part 1 verification of produces)
    authorizer: acls.Authorizer = field(init=False)

    def __post_init__(self) -> None:
        config = self.state.config
        self.authorizer = acls.Authorizer(
            super_users=config.super_users | {ADMIN},
            allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found,
        )

    def allows(
        self, conn: Connection, operation: acls.AclOperation, resource: acls.Resource = acls.CLUSTER
    ) -> bool:
        """May the connection's principal do `operation` on `resource` (default: the cluster)?
        An unauthenticated connection may do nothing."""
        if conn.principal is None:
            return False
        if (
            conn.principal == INTER_BROKER
            and operation is acls.AclOperation.CLUSTER_ACTION
            and resource == acls.CLUSTER
        ):
            return True
        requester = acls.Requester(conn.principal, client_host(conn.peer))
        return self.authorizer.authorize(self.state.image.acls, requester, operation, resource)

    def authorized_operations(self, conn: Connection, resource: acls.Resource = acls.CLUSTER) -> int:
        """The bit field of what the connection's principal may do on `resource` (Kafka's
        authorized operations, the resource type's supported operations only)."""
        if conn.principal is None:
            return 0
        requester = acls.Requester(conn.principal, client_host(conn.peer))
        return self.authorizer.authorized_operations(self.state.image.acls, requester, resource)

    def allows_any(
        self, conn: Connection, operation: acls.AclOperation, resource_type: acls.ResourceType
    ) -> bool:
        """May the principal do `operation` on at least one resource of the type (KIP-679)?"""
        if conn.principal is None:
            return False
        requester = acls.Requester(conn.principal, client_host(conn.peer))
        return self.authorizer.authorize_any(self.state.image.acls, requester, operation, resource_type)

    def allows_topic(self, conn: Connection, operation: acls.AclOperation, name: str) -> bool:
        return self.allows(conn, operation, acls.Resource(acls.ResourceType.TOPIC, name))

    def allows_group(self, conn: Connection, operation: acls.AclOperation, group_id: str) -> bool:
        return self.allows(conn, operation, acls.Resource(acls.ResourceType.GROUP, group_id))

    @property
    def node_id(self) -> int:
        return self.state.node_id

    def endpoint(self, reg: BrokerRegistration, listener_name: str) -> Endpoint | None:
        """Where broker `reg` is reached through the listener called `listener_name`."""
        for listener in reg.listeners:
            if listener.name == listener_name:
                return Endpoint(listener.host, listener.port)
        return None

    def current_leader(self, topic: str | None, partition: int, listener_name: str) -> CurrentLeader:
        """The leader of `topic`-`partition` and its endpoint on `listener_name` (KIP-951)."""
        image = self.state.image
        topic_id = None if topic is None else image.topic_ids_by_name.get(topic)
        part = None if topic_id is None else image.partition((topic_id, partition))
        if part is None:
            return CurrentLeader(-1, -1, None)
        reg = image.brokers.get(part.leader) if part.leader >= 0 else None
        endpoint = None if reg is None or reg.fenced else self.endpoint(reg, listener_name)
        return CurrentLeader(part.leader, part.leader_epoch, endpoint, None if reg is None else reg.rack)

    def topic_id(self, name: str) -> Uuid | None:
        return self.state.image.topic_ids_by_name.get(name)

    def serves_topic(self, name: str) -> bool:
        """Is topic `name` in the image, with every partition the image has this broker lead
        hosted here as leader (or in an offline dir)? What a CreateTopics waits for, so that a
        produce to this broker right after it is not refused as NOT_LEADER_OR_FOLLOWER."""
        image = self.state.image
        topic_id = image.topic_ids_by_name.get(name)
        if topic_id is None:
            return False
        for index, part in image.topics[topic_id].partitions.items():
            if part.leader == self.state.node_id:
                hosted, code, _message = self.manager.lookup(name, index)
                if hosted is None and code is not ErrorCode.KAFKA_STORAGE_ERROR:
                    return False
        return True

    def topic_name(self, topic_id: Uuid | uuid.UUID | None) -> str | None:
        """The name of the topic with `topic_id` (ours or Kafka's type); None if unknown or None."""
        if topic_id is None:
            return None
        key = jbod_uuid(topic_id) if isinstance(topic_id, uuid.UUID) else topic_id
        topic = self.state.image.topics.get(key)
        return None if topic is None else topic.name
