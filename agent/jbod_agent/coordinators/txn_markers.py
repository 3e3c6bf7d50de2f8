"""How a transaction coordinator sends WriteTxnMarkers (API 27, v1) to partition leaders: as a
Kafka request over each leader's inter-broker listener, the follower fetcher's way
(`replication.peer_links`), itself included (one path for every leader).

Guarantees:
* One connection per leader, opened on first use and reopened after any failure; one request in
  flight per connection: the markers queued for a leader while its request is in flight go
  together in its next request (as Kafka's marker channel batches them), at most one per
  producer id a request.
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
from jbod_agent.replication.peer_link import PeerError
from jbod_agent.replication.peer_links import InterBrokerLinks
from jbod_agent.state import AgentState
from jbod_core.errors import ErrorCode
from jbod_core.transactions import TopicPartition
from jbod_kafka import protocol

log = logging.getLogger("jbod_agent.transactions")

WRITE_TXN_MARKERS_KEY: Final = 27
WRITE_TXN_MARKERS_VERSION: Final = 1
TIMEOUT_S: Final = 30.0


class PeerMarkerSender:
    """WriteTxnMarkers to the leaders, over their inter-broker listeners (the module's guarantees)."""

    def __init__(self, state: AgentState, token: str) -> None:
        self._links = InterBrokerLinks(state, token, client_id="txn-coordinator")
        self._queued: dict[int, list[tuple[TxnMarker, asyncio.Future[Mapping[TopicPartition, int]]]]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}

    async def write_markers(self, leader: int, marker: TxnMarker) -> Mapping[TopicPartition, int]:
        """The leader's answer for `marker`'s partitions, sent with the markers queued meanwhile."""
        answer: asyncio.Future[Mapping[TopicPartition, int]] = asyncio.get_running_loop().create_future()
        self._queued.setdefault(leader, []).append((marker, answer))
        sender = self._senders.get(leader)
        if sender is None or sender.done():
            self._senders[leader] = asyncio.create_task(
                self._send_queued(leader), name=f"txn-markers-to-{leader}"
            )
        return await answer

    async def _send_queued(self, leader: int) -> None:
        """Send what is queued for `leader`, one request at a time, each with every marker
        queued while the one before was in flight (one per producer id; a second marker of a
        producer id waits for the next request)."""
        while queue := self._queued.pop(leader, None):
            batch: dict[int, tuple[TxnMarker, asyncio.Future[Mapping[TopicPartition, int]]]] = {}
            later = []
            for marker, answer in queue:
                if answer.done():
                    continue
                if marker.producer_id in batch:
                    later.append((marker, answer))
                else:
                    batch[marker.producer_id] = (marker, answer)
            if later:
                self._queued.setdefault(leader, [])[:0] = later
            if not batch:
                continue
            answers = await self._send(leader, [marker for marker, _ in batch.values()])
            for producer_id, (_marker, answer) in batch.items():
                if not answer.done():
                    answer.set_result(answers[producer_id])

    async def _send(self, leader: int, markers: list[TxnMarker]) -> dict[int, dict[TopicPartition, int]]:
        """One WriteTxnMarkers of `markers` (distinct producer ids): each one's partition errors."""
        answered = {
            m.producer_id: dict.fromkeys(m.partitions, int(ErrorCode.NOT_LEADER_OR_FOLLOWER)) for m in markers
        }
        try:
            link = await self._links.link(leader)
            if link is None:
                return answered
            response = await link.request(
                WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION, _request(markers), timeout=TIMEOUT_S
            )
        except (PeerError, OSError) as exc:  # OSError: the client TLS files
            self._links.drop(leader)
            log.debug("WriteTxnMarkers to broker %d failed: %s", leader, exc)
            return answered
        for result in response.markers:
            errors = answered.get(int(result.producer_id))
            if errors is None:
                continue
            for topic in result.topics:
                for partition in topic.partitions:
                    key = (str(topic.name), int(partition.partition_index))
                    if key in errors:
                        errors[key] = int(partition.error_code.value)
        return answered

    def close(self) -> None:
        for sender in self._senders.values():
            sender.cancel()
        for queue in self._queued.values():
            for _marker, answer in queue:
                answer.cancel()
        self._queued.clear()
        self._links.close()


def _request(markers: list[TxnMarker]) -> object:
    return protocol.build(
        protocol.request_type(WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION),
        markers=[
            {
                "producer_id": marker.producer_id,
                "producer_epoch": marker.producer_epoch,
                "transaction_result": marker.committed,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in _by_topic(marker).items()],
                "coordinator_epoch": marker.coordinator_epoch,
            }
            for marker in markers
        ],
    )


def _by_topic(marker: TxnMarker) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in marker.partitions:
        by_topic.setdefault(topic, []).append(partition)
    return by_topic
