"""Kafka's transaction coordinator APIs on a broker: FindCoordinator for a transactional id (key
type 1), InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
DescribeTransactions and ListTransactions, in every version from Kafka 4's floor to Kafka 4.3.1's
newest (EndTxn and AddPartitionsToTxn up to v4: transaction version 1 only, docs/decisions.md).
What they decide is `jbod_core.transactions`' (through
`jbod_agent.coordinators.txn_coordinator`); this module is the wire and the ACLs.

Guarantees:
* FindCoordinator of a transactional id answers the leader of its partition of
  `__transaction_state` at the address of the listener the client came through. The topic is
  created on the first such FindCoordinator through the active controller with the admin token
  (`transaction.state.log.num.partitions` partitions, `transaction.state.log.replication.factor`
  replicas capped at the active brokers, `min.insync.replicas` = `transaction.state.log.min.isr`
  capped at that, compacted, `transaction.state.log.segment.bytes`), in the background:
  COORDINATOR_NOT_AVAILABLE until its partition has a leader, never waiting for the controller.
* Kafka's ACLs (as KafkaApis): FindCoordinator, DescribeTransactions need DESCRIBE on the
  transactional id; InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn WRITE — else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) and the coordinator is not asked. AddPartitionsToTxn
  v0-v3 needs WRITE on each topic (TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED);
  v4+ is a broker's request: CLUSTER_ACTION (else CLUSTER_AUTHORIZATION_FAILED) and no check of
  the transactional id or the topics (as Kafka); AddOffsetsToTxn READ on
  the group (GROUP_AUTHORIZATION_FAILED). DescribeTransactions leaves out the topics the principal
  may not DESCRIBE; ListTransactions lists the ids it may DESCRIBE. InitProducerId without a
  transactional id is the idempotent producer's (`AdminApis.init_producer_id`).
* AddPartitionsToTxn: a topic or partition the metadata image does not have is
  UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, nothing added (as Kafka); a
  verify-only transaction (v4+) changes nothing and answers each partition's verification.
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent.coordinators.txn_coordinator import TxnCoordinator
from jbod_agent.kafka.context import BrokerContext
from jbod_agent.kafka.forwarding import Forwarder
from jbod_agent.kafka.internal_topics import InternalTopic
from jbod_agent.kafka.listener import Connection
from jbod_core.acls import AclOperation, Resource, ResourceType
from jbod_core.messages import CreateTopicRequest
from jbod_core.transactions import TopicPartition, TxnError
from jbod_core.txn_records import TRANSACTION_STATE_TOPIC
from jbod_kafka import protocol

log = logging.getLogger("jbod_agent.transactions")

WRITE: Final = AclOperation.WRITE
DESCRIBE: Final = AclOperation.DESCRIBE
TXN_DENIED: Final = KafkaError.transactional_id_authorization_failed
NOT_ATTEMPTED: Final = KafkaError.operation_not_attempted

ApiHandler = Callable[[BrokerContext, Connection, protocol.Request], Awaitable[Any]]


def _response(request: protocol.Request, **fields: Any) -> Any:
    return protocol.build(
        protocol.response_type(request.header.api_key, request.header.api_version), throttle_time=0, **fields
    )


def _txn_id(transactional_id: str) -> Resource:
    return Resource(ResourceType.TRANSACTIONAL_ID, transactional_id)


class TxnApis:
    """The handlers of the transaction APIs over one broker's coordinator (the module's guarantees)."""

    def __init__(
        self,
        ctx: BrokerContext,
        coordinator: TxnCoordinator,
        forwarder: Forwarder,
        *,
        idempotent_init: ApiHandler,
    ) -> None:
        self.ctx = ctx
        self.coordinator = coordinator
        self.forwarder = forwarder
        self._idempotent_init = idempotent_init
        self.state_topic = InternalTopic(
            ctx,
            forwarder,
            TRANSACTION_STATE_TOPIC,
            topic_request=self._state_topic,
            key_owner="transactional id",
            log=log,
        )

    def handlers(self) -> dict[int, Any]:
        return {
            22: self.init_producer_id,
            24: self.add_partitions_to_txn,
            25: self.add_offsets_to_txn,
            26: self.end_txn,
            65: self.describe_transactions,
            66: self.list_transactions,
        }

    # -- FindCoordinator (key type 1) -------------------------------------------------------------

    def find_coordinator(self, conn: Connection, key: str) -> dict[str, Any]:
        """One FindCoordinator entry for transactional id `key` (GroupApis' shape)."""
        if not self.ctx.allows(conn, DESCRIBE, _txn_id(key)):
            return {
                "key": key,
                "node_id": -1,
                "host": "",
                "port": -1,
                "error_code": TXN_DENIED,
                "error_message": None,
            }
        return self.state_topic.find_coordinator(conn, key, self.coordinator.partition_of(key))

    async def aclose(self) -> None:
        await self.state_topic.aclose()

    def _state_topic(self, active_brokers: int) -> CreateTopicRequest:
        config = self.ctx.state.config
        replication = max(1, min(config.transaction_state_log_replication_factor, active_brokers))
        return CreateTopicRequest(
            name=TRANSACTION_STATE_TOPIC,
            num_partitions=config.transaction_state_log_num_partitions,
            replication_factor=replication,
            configs={
                "cleanup.policy": "compact",
                "min.insync.replicas": str(min(config.transaction_state_log_min_isr, replication)),
                "segment.bytes": str(config.transaction_state_log_segment_bytes),
                "unclean.leader.election.enable": "false",
            },
        )

    # -- InitProducerId ---------------------------------------------------------------------------

    async def init_producer_id(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        transactional_id = body.transactional_id
        if transactional_id is None:
            return await self._idempotent_init(ctx, conn, request)
        if not ctx.allows(conn, WRITE, _txn_id(transactional_id)):
            return _response(request, error_code=TXN_DENIED, producer_id=-1, producer_epoch=-1)
        error, producer_id, epoch = await self.coordinator.init_producer_id(
            transactional_id,
            transaction_timeout_ms=body.transaction_timeout // datetime.timedelta(milliseconds=1),
            producer_id=int(getattr(body, "producer_id", -1)),
            producer_epoch=int(getattr(body, "producer_epoch", -1)),
            version=request.header.api_version,
        )
        return _response(request, error_code=int(error), producer_id=producer_id, producer_epoch=epoch)

    # -- AddPartitionsToTxn -----------------------------------------------------------------------

    async def add_partitions_to_txn(
        self, ctx: BrokerContext, conn: Connection, request: protocol.Request
    ) -> Any:
        version = request.header.api_version
        body = request.body
        if version < 4:
            topics = self._topic_results(
                conn,
                body.v3_and_below_transactional_id,
                int(body.v3_and_below_producer_id),
                int(body.v3_and_below_producer_epoch),
                [(t.name, [int(p) for p in t.partitions]) for t in body.v3_and_below_topics],
                verify_only=False,
                version=version,
            )
            return _response(request, results_by_topic_v3_and_below=await topics)
        if not ctx.allows(conn, AclOperation.CLUSTER_ACTION):
            return _response(
                request, error_code=KafkaError.cluster_authorization_failed, results_by_transaction=[]
            )
        results = []
        for txn in body.transactions:
            topic_results = await self._topic_results(
                conn,
                txn.transactional_id,
                int(txn.producer_id),
                int(txn.producer_epoch),
                [(t.name, [int(p) for p in t.partitions]) for t in txn.topics],
                verify_only=bool(txn.verify_only),
                version=version,
            )
            results.append({"transactional_id": txn.transactional_id, "topic_results": topic_results})
        return _response(request, error_code=KafkaError.none, results_by_transaction=results)

    async def _topic_results(  # noqa: PLR0913  one transaction of the request
        self,
        conn: Connection,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topics: Sequence[tuple[str, Sequence[int]]],
        *,
        verify_only: bool,
        version: int,
    ) -> list[dict[str, Any]]:
        partitions: list[TopicPartition] = [(t, p) for t, ps in topics for p in ps]
        errors: dict[TopicPartition, int]
        client = version < 4  # v4+ is a broker's, CLUSTER_ACTION checked: no more ACLs (as Kafka)
        if client and not self.ctx.allows(conn, WRITE, _txn_id(transactional_id)):
            errors = dict.fromkeys(partitions, int(TXN_DENIED))
            return _by_topic(errors)
        refused: dict[TopicPartition, int] = {}
        image = self.ctx.state.image
        for topic, partition in partitions:
            if client and not self.ctx.allows_topic(conn, WRITE, topic):
                refused[(topic, partition)] = int(KafkaError.topic_authorization_failed)
                continue
            topic_id = image.topic_ids_by_name.get(topic)
            if topic_id is None or image.partition((topic_id, partition)) is None:
                refused[(topic, partition)] = int(KafkaError.unknown_topic_or_partition)
        if refused:
            errors = {tp: refused.get(tp, int(NOT_ATTEMPTED)) for tp in partitions}
        elif verify_only:
            verified = self.coordinator.verify_partitions(
                transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                partitions=partitions,
            )
            errors = {tp: int(e) for tp, e in verified.items()}
        else:
            error = await self.coordinator.add_partitions(
                transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                partitions=partitions,
                version=version,
            )
            errors = dict.fromkeys(partitions, int(error))
        return _by_topic(errors)

    # -- AddOffsetsToTxn, EndTxn ------------------------------------------------------------------

    async def add_offsets_to_txn(
        self, ctx: BrokerContext, conn: Connection, request: protocol.Request
    ) -> Any:
        body = request.body
        if not ctx.allows(conn, WRITE, _txn_id(body.transactional_id)):
            return _response(request, error_code=TXN_DENIED)
        if not ctx.allows_group(conn, AclOperation.READ, body.group_id):
            return _response(request, error_code=KafkaError.group_authorization_failed)
        error = await self.coordinator.add_offsets(
            body.transactional_id,
            producer_id=int(body.producer_id),
            producer_epoch=int(body.producer_epoch),
            group_id=body.group_id,
            version=request.header.api_version,
        )
        return _response(request, error_code=int(error))

    async def end_txn(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        if not ctx.allows(conn, WRITE, _txn_id(body.transactional_id)):
            return _response(request, error_code=TXN_DENIED)
        error = await self.coordinator.end_txn(
            body.transactional_id,
            producer_id=int(body.producer_id),
            producer_epoch=int(body.producer_epoch),
            committed=bool(body.committed),
            version=request.header.api_version,
        )
        return _response(request, error_code=int(error))

    # -- DescribeTransactions, ListTransactions ---------------------------------------------------

    async def describe_transactions(
        self, ctx: BrokerContext, conn: Connection, request: protocol.Request
    ) -> Any:
        states = []
        for transactional_id in request.body.transactional_ids:
            if not ctx.allows(conn, DESCRIBE, _txn_id(transactional_id)):
                states.append(_described(transactional_id, int(TXN_DENIED)))
                continue
            described = self.coordinator.describe(transactional_id)
            if described.error is not TxnError.NONE:
                states.append(_described(transactional_id, int(described.error)))
                continue
            states.append(
                {
                    "error_code": KafkaError.none,
                    "transactional_id": transactional_id,
                    "transaction_state": described.state,
                    "transaction_timeout": described.transaction_timeout_ms,
                    "transaction_start_time": _timestamp(described.transaction_start_time_ms),
                    "producer_id": described.producer_id,
                    "producer_epoch": described.producer_epoch,
                    "topics": [
                        {"topic": topic, "partitions": list(partitions)}
                        for topic, partitions in described.topics
                        if ctx.allows_topic(conn, DESCRIBE, topic)
                    ],
                }
            )
        return _response(request, transaction_states=states)

    async def list_transactions(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        pattern_text = getattr(body, "transactional_id_pattern", None)
        pattern: re.Pattern[str] | None = None
        if pattern_text:
            try:
                pattern = re.compile(pattern_text)
            except re.error:
                return _response(
                    request,
                    error_code=KafkaError.invalid_request,
                    unknown_state_filters=[],
                    transaction_states=[],
                )
        error, listing = self.coordinator.list_transactions(
            state_filters=list(body.state_filters),
            producer_id_filters=[int(p) for p in body.producer_id_filters],
            duration_filter_ms=int(getattr(body, "duration_filter", -1)),
            transactional_id_pattern=pattern,
        )
        return _response(
            request,
            error_code=int(error),
            unknown_state_filters=list(listing.unknown_state_filters),
            transaction_states=[
                {
                    "transactional_id": t.transactional_id,
                    "producer_id": t.producer_id,
                    "transaction_state": t.state,
                }
                for t in listing.transactions
                if ctx.allows(conn, DESCRIBE, _txn_id(t.transactional_id))
            ],
        )


def _by_topic(errors: dict[TopicPartition, int]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": code})
    return [{"name": topic, "results_by_partition": results} for topic, results in by_topic.items()]


def _described(transactional_id: str, code: int) -> dict[str, Any]:
    """An entry of DescribeTransactions with an error: the other fields at the schema's defaults
    (0, ""), as Kafka answers."""
    return {
        "error_code": code,
        "transactional_id": transactional_id,
        "transaction_state": "",
        "transaction_timeout": 0,
        "transaction_start_time": _timestamp(0),
        "producer_id": 0,
        "producer_epoch": 0,
        "topics": [],
    }


def _timestamp(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
