"""How a partition leader verifies a transactional batch with its producer's transaction
coordinator (KIP-890 part 1): AddPartitionsToTxn v4 with `verify_only` (Kafka's
broker-to-coordinator shape: transactional id, producer id, epoch, partitions) to the leader of the
transactional id's `__transaction_state` partition (`jbod_core.txn_records.partition_for`, as
FindCoordinator finds it), over its inter-broker listener (`replication.peer_links`), or a direct
call when this broker is that leader.

Guarantees:
* `for_request(transactional_id, produce_version)` is the `partitions.produce.PartitionVerifier`
  of one Produce request; its `verify` never raises and caches nothing: every call asks the
  coordinator, and its answer is mapped by `txn_verification.produce_answer`. A coordinator that
  cannot be found (no `__transaction_state` yet, its partition without leader) is
  COORDINATOR_NOT_AVAILABLE, one that cannot be reached or does not answer within `TIMEOUT_S` is
  NETWORK_EXCEPTION (both answered NOT_ENOUGH_REPLICAS, retried by producers); an answer that
  does not name the partition is NETWORK_EXCEPTION too.
* Per coordinator broker, one request in flight: the verifications asked meanwhile go together
  in the next request, one entry per transactional id (a second producer id or epoch of the same
  transactional id waits for the request after), as Kafka's `AddPartitionsToTxnManager` batches.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Final

from jbod_agent.coordinators.txn_coordinator import TxnCoordinator
from jbod_agent.replication.peer_link import PeerError
from jbod_agent.replication.peer_links import InterBrokerLinks
from jbod_agent.state import AgentState
from jbod_core import txn_verification
from jbod_core.transactions import TopicPartition, TxnError
from jbod_core.txn_records import TRANSACTION_STATE_TOPIC
from jbod_kafka import protocol

log = logging.getLogger("jbod_agent.transactions")

ADD_PARTITIONS_TO_TXN_KEY: Final = 24
VERIFY_VERSION: Final = 4  # the first broker-to-coordinator version
TIMEOUT_S: Final = 30.0
NETWORK_EXCEPTION: Final = 13


@dataclass(frozen=True, slots=True)
class _Ask:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partition: TopicPartition


class TxnVerifier:
    """Verifications of this broker's partitions with the coordinators (the module's guarantees)."""

    def __init__(self, state: AgentState, coordinator: TxnCoordinator, links: InterBrokerLinks) -> None:
        self._state = state
        self._coordinator = coordinator
        self._links = links
        self._queued: dict[int, list[tuple[_Ask, asyncio.Future[int]]]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}

    def for_request(self, transactional_id: str, produce_version: int) -> RequestVerifier:
        return RequestVerifier(self, transactional_id, produce_version)

    async def coordinator_answer(self, ask: _Ask) -> int:
        """The coordinator's Kafka error code for `ask`'s partition (the module's guarantees)."""
        image = self._state.image
        topic_id = image.topic_ids_by_name.get(TRANSACTION_STATE_TOPIC)
        part = (
            None
            if topic_id is None
            else image.partition((topic_id, self._coordinator.partition_of(ask.transactional_id)))
        )
        if part is None or part.leader < 0:
            return int(TxnError.COORDINATOR_NOT_AVAILABLE)
        if part.leader == self._state.node_id:
            answers = self._coordinator.verify_partitions(
                ask.transactional_id,
                producer_id=ask.producer_id,
                producer_epoch=ask.producer_epoch,
                partitions=[ask.partition],
            )
            return int(answers.get(ask.partition, TxnError.UNKNOWN_SERVER_ERROR))
        answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queued.setdefault(part.leader, []).append((ask, answer))
        sender = self._senders.get(part.leader)
        if sender is None or sender.done():
            self._senders[part.leader] = asyncio.create_task(
                self._send_queued(part.leader), name=f"txn-verify-to-{part.leader}"
            )
        return await answer

    async def _send_queued(self, node: int) -> None:
        while queue := self._queued.pop(node, None):
            batch: list[tuple[_Ask, asyncio.Future[int]]] = []
            producers: dict[str, tuple[int, int]] = {}
            later = []
            for ask, answer in queue:
                if answer.done():
                    continue
                producer = producers.setdefault(ask.transactional_id, (ask.producer_id, ask.producer_epoch))
                if producer == (ask.producer_id, ask.producer_epoch):
                    batch.append((ask, answer))
                else:
                    later.append((ask, answer))
            if later:
                self._queued.setdefault(node, [])[:0] = later
            if not batch:
                continue
            answers = await self._send(node, [ask for ask, _ in batch])
            for ask, answer in batch:
                if not answer.done():
                    answer.set_result(answers.get((ask.transactional_id, ask.partition), NETWORK_EXCEPTION))

    async def _send(self, node: int, asks: list[_Ask]) -> dict[tuple[str, TopicPartition], int]:
        """One AddPartitionsToTxn v4 (verify only) of `asks` (one producer per transactional id)."""
        try:
            link = await self._links.link(node)
            if link is None:
                return {}
            response = await link.request(
                ADD_PARTITIONS_TO_TXN_KEY, VERIFY_VERSION, _request(asks), timeout=TIMEOUT_S
            )
        except (PeerError, OSError) as exc:  # OSError: the client TLS files
            self._links.drop(node)
            log.debug("AddPartitionsToTxn (verify) to broker %d failed: %s", node, exc)
            return {}
        top = int(response.error_code.value)
        if top != 0:
            return {(a.transactional_id, a.partition): top for a in asks}
        answered: dict[tuple[str, TopicPartition], int] = {}
        for txn in response.results_by_transaction:
            for topic in txn.topic_results:
                for result in topic.results_by_partition:
                    key = (str(txn.transactional_id), (str(topic.name), int(result.partition_index)))
                    answered[key] = int(result.partition_error_code.value)
        return answered

    def close(self) -> None:
        for sender in self._senders.values():
            sender.cancel()
        for queue in self._queued.values():
            for _ask, answer in queue:
                answer.cancel()
        self._queued.clear()
        self._links.close()


class RequestVerifier:
    """The verifier of one Produce request's transactional id (`partitions.produce.PartitionVerifier`)."""

    def __init__(self, verifier: TxnVerifier, transactional_id: str, produce_version: int) -> None:
        self._verifier = verifier
        self._transactional_id = transactional_id
        self._produce_version = produce_version

    async def verify(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int
    ) -> txn_verification.Unverified | None:
        code = await self._verifier.coordinator_answer(
            _Ask(self._transactional_id, producer_id, producer_epoch, (topic, partition))
        )
        return txn_verification.produce_answer(code, produce_version=self._produce_version)


def _request(asks: list[_Ask]) -> object:
    by_txn: dict[str, tuple[_Ask, dict[str, list[int]]]] = {}
    for ask in asks:
        _first, topics = by_txn.setdefault(ask.transactional_id, (ask, {}))
        topic, partition = ask.partition
        if partition not in topics.setdefault(topic, []):
            topics[topic].append(partition)
    return protocol.build(
        protocol.request_type(ADD_PARTITIONS_TO_TXN_KEY, VERIFY_VERSION),
        transactions=[
            {
                "transactional_id": transactional_id,
                "producer_id": first.producer_id,
                "producer_epoch": first.producer_epoch,
                "verify_only": True,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            }
            for transactional_id, (first, topics) in by_txn.items()
        ],
    )
