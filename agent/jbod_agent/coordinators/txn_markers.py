"""How a transaction coordinator sends WriteTxnMarkers (API 27, v1) to partition leaders: as a
Kafka request over each leader's inter-broker listener, the follower fetcher's way
(`replication.peer_link`), itself included (one path for every leader).

Guarantees:
* One connection per leader, opened on first use and reopened after any failure; one request in
  flight per connection (a lock per leader).
* `write_markers` never raises: a leader without an inter-broker listener, a connection or login
  that fails, a request that times out or an answer that does not name a partition gives that
  partition NOT_LEADER_OR_FOLLOWER (the coordinator retries it); otherwise each partition's
  error code as the leader answered it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Final

from jbod_agent.coordinators.txn_coordinator import TxnMarker
from jbod_agent.replication.peer_link import INTER_BROKER_USER, PeerConnection, PeerError, PeerLogin
from jbod_agent.state import AgentState
from jbod_core.errors import ErrorCode
from jbod_core.transactions import TopicPartition
from jbod_kafka import protocol
from jbod_runtime.tls import ClientTls

log = logging.getLogger("jbod_agent.transactions")

WRITE_TXN_MARKERS_KEY: Final = 27
WRITE_TXN_MARKERS_VERSION: Final = 1
TIMEOUT_S: Final = 30.0


class PeerMarkerSender:
    """WriteTxnMarkers to the leaders, over their inter-broker listeners (the module's guarantees)."""

    def __init__(self, state: AgentState, token: str) -> None:
        self._state = state
        self._token = token
        self._links: dict[int, PeerConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._tls: ClientTls | None = None

    async def write_markers(self, leader: int, marker: TxnMarker) -> Mapping[TopicPartition, int]:
        failed = dict.fromkeys(marker.partitions, int(ErrorCode.NOT_LEADER_OR_FOLLOWER))
        lock = self._locks.setdefault(leader, asyncio.Lock())
        async with lock:
            try:
                link = await self._link(leader)
                if link is None:
                    return failed
                response = await link.request(
                    WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION, _request(marker), timeout=TIMEOUT_S
                )
            except PeerError as exc:
                self._drop(leader)
                log.debug("WriteTxnMarkers to broker %d failed: %s", leader, exc)
                return failed
        answered = dict(failed)
        for result in response.markers:
            if int(result.producer_id) != marker.producer_id:
                continue
            for topic in result.topics:
                for partition in topic.partitions:
                    key = (str(topic.name), int(partition.partition_index))
                    if key in answered:
                        answered[key] = int(partition.error_code.value)
        return answered

    async def _link(self, leader: int) -> PeerConnection | None:
        link = self._links.get(leader)
        if link is not None and not link.closed:
            return link
        config = self._state.config
        reg = self._state.image.brokers.get(leader)
        endpoint = next(
            (
                (listener.host, listener.port)
                for listener in (() if reg is None else reg.listeners)
                if listener.name == config.inter_broker_listener_name
            ),
            None,
        )
        if endpoint is None:
            return None
        listener = config.inter_broker_listener
        tls = None
        if listener.tls:
            if self._tls is None:
                self._tls = config.client_tls()
            self._tls.refresh()
            tls = self._tls.context
        link = await PeerConnection.open(
            *endpoint,
            tls=tls,
            login=PeerLogin(
                config.sasl_mechanism_inter_broker_protocol if listener.authenticates else None,
                INTER_BROKER_USER,
                self._token,
            ),
            client_id=f"broker-{self._state.node_id}-txn-coordinator",
            timeout=TIMEOUT_S,
        )
        self._links[leader] = link
        return link

    def _drop(self, leader: int) -> None:
        link = self._links.pop(leader, None)
        if link is not None:
            link.close()

    def close(self) -> None:
        for leader in list(self._links):
            self._drop(leader)


def _request(marker: TxnMarker) -> object:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in marker.partitions:
        by_topic.setdefault(topic, []).append(partition)
    return protocol.build(
        protocol.request_type(WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION),
        markers=[
            {
                "producer_id": marker.producer_id,
                "producer_epoch": marker.producer_epoch,
                "transaction_result": marker.committed,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
                "coordinator_epoch": marker.coordinator_epoch,
            }
        ],
    )
