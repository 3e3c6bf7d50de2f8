"""Kafka's consumer-group APIs on a broker (the classic protocol): FindCoordinator, JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups,
DeleteGroups, OffsetDelete and TxnOffsetCommit, each in every version from Kafka 4's floor to Kafka 4.3.1's newest.
What they decide is `jbod_core.groups`' (through `jbod_agent.coordinators.group_coordinator`); this module is
the wire: versions, topic names and ids, the shape of each answer.

Guarantees:
* FindCoordinator answers the leader of the group's partition of `__consumer_offsets` at the
  address of the listener the client came through (v4+: each key of the request). The topic is
  created on the first FindCoordinator through the active controller with the admin token
  (`offsets.topic.num.partitions` partitions, `offsets.topic.replication.factor` replicas capped
  at the active brokers, `min.insync.replicas` one below that (at least 1), compacted with
  retention off: only tombstones remove a group's records); until its partition has a leader the
  answer is COORDINATOR_NOT_AVAILABLE, which clients retry. FindCoordinator never waits for the
  controller (as Kafka's): the creation runs in the background, one at a time, and the
  FindCoordinator that started it is answered COORDINATOR_NOT_AVAILABLE at once, so the requests
  a client pipelined behind it on the connection (librdkafka's Metadata and Fetch) are answered
  while no controller does. A transactional id (key type 1) is answered by
  `find_transaction_coordinator` (`txn_api.TxnApis`; TRANSACTIONAL_ID_AUTHORIZATION_FAILED when
  none is set), another key type INVALID_REQUEST.
* Kafka's ACLs (as KafkaApis): FindCoordinator needs DESCRIBE on the group; JoinGroup, SyncGroup,
  Heartbeat, LeaveGroup and OffsetCommit READ; OffsetFetch and DescribeGroups DESCRIBE;
  DeleteGroups and OffsetDelete DELETE — else GROUP_AUTHORIZATION_FAILED (30) and the coordinator
  is not asked. OffsetCommit and OffsetDelete need READ on each topic, OffsetFetch DESCRIBE (else
  TOPIC_AUTHORIZATION_FAILED (29) for its partitions; fetching every offset leaves those topics
  out). ListGroups lists every group with DESCRIBE on the cluster, else the groups the principal
  may DESCRIBE.
* OffsetCommit and OffsetDelete answer UNKNOWN_TOPIC_OR_PARTITION for a topic or partition the
  metadata image does not have (UNKNOWN_TOPIC_ID for an unknown id, v10), without asking the
  coordinator about it; the other partitions are decided together.
* OffsetFetch answers -1 for partitions without a committed offset, and every committed offset of
  the group when no topic is named (v2+); v10 names topics by id and leaves out topics that no
  longer exist. A transaction's pending offsets are not shown; with `require_stable` (v7+) a
  partition that has one answers UNSTABLE_OFFSET_COMMIT (88) without an offset, as Kafka.
* TxnOffsetCommit (issue 33) checks WRITE on the transactional id (else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) on every partition), then READ on the group (30 on
  every partition), then READ on each topic (29) and that its partition exists
  (UNKNOWN_TOPIC_OR_PARTITION), as Kafka's KafkaApis; the other partitions are the coordinator's
  (`GroupCoordinator.txn_commit`).
* DescribeGroups of a group the coordinator does not know is Dead (v0-5), and from v6 Dead with
  GROUP_ID_NOT_FOUND (KIP-1043); ListGroups lists the groups of every partition this broker
  leads (type `classic`; filters by state v4+, by type v5+), COORDINATOR_LOAD_IN_PROGRESS while
  one loads.
* Messages as Kafka 4.3.1's: FindCoordinator's is empty per key from v4 and before v4 always
  set (naming even NONE); a refused group key has one before v4 (docs/decisions.md, "Error
  responses compared with Kafka's").
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Any, Final

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent.coordinators.group_coordinator import GroupCoordinator
from jbod_agent.kafka.context import BrokerContext, refusal
from jbod_agent.kafka.forwarding import Forwarder
from jbod_agent.kafka.internal_topics import InternalTopic
from jbod_agent.kafka.listener import Connection
from jbod_core import groups, txn_offsets
from jbod_core.acls import OPERATIONS_NOT_ASKED, AclOperation, Resource, ResourceType
from jbod_core.group_records import OFFSETS_TOPIC
from jbod_core.groups import GroupError
from jbod_core.messages import CreateTopicRequest
from jbod_kafka import protocol
from jbod_kafka.ids import kafka_uuid

log = logging.getLogger("jbod_agent.groups")

GROUP_KEY: Final = 0
TRANSACTION_KEY: Final = 1
READ: Final = AclOperation.READ
DESCRIBE: Final = AclOperation.DESCRIBE
GROUP_DENIED: Final = KafkaError.group_authorization_failed
TOPIC_DENIED: Final = KafkaError.topic_authorization_failed
OFFSETS_SEGMENT_BYTES: Final = 100 * 1024 * 1024  # Kafka's offsets.topic.segment.bytes


def _ms(value: datetime.timedelta) -> int:
    return value // datetime.timedelta(milliseconds=1)


def _response(request: protocol.Request, **fields: Any) -> Any:
    return protocol.build(
        protocol.response_type(request.header.api_key, request.header.api_version), throttle_time=0, **fields
    )


def _kafka(error: GroupError) -> KafkaError:
    return KafkaError(int(error))


def _code(error: GroupError | KafkaError) -> KafkaError:
    return error if isinstance(error, KafkaError) else _kafka(error)


def _group(group_id: str) -> Resource:
    return Resource(ResourceType.GROUP, group_id)


class GroupApis:
    """The handlers of the group APIs over one broker's coordinator (the module's guarantees)."""

    def __init__(self, ctx: BrokerContext, coordinator: GroupCoordinator, forwarder: Forwarder) -> None:
        self.ctx = ctx
        self.coordinator = coordinator
        self.forwarder = forwarder
        self.offsets_topic = InternalTopic(
            ctx, forwarder, OFFSETS_TOPIC, topic_request=self._offsets_topic, key_owner="group", log=log
        )
        #: FindCoordinator of a transactional id (`TxnApis.find_coordinator`), when served.
        self.find_transaction_coordinator: Callable[[Connection, str], dict[str, Any]] | None = None

    def handlers(self) -> dict[int, Any]:
        return {
            8: self.offset_commit,
            9: self.offset_fetch,
            10: self.find_coordinator,
            11: self.join_group,
            12: self.heartbeat,
            13: self.leave_group,
            14: self.sync_group,
            15: self.describe_groups,
            16: self.list_groups,
            42: self.delete_groups,
            47: self.offset_delete,
            28: self.txn_offset_commit,
        }

    # -- FindCoordinator --------------------------------------------------------------------------

    async def find_coordinator(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        version = request.header.api_version
        key_type = int(getattr(body, "key_type", GROUP_KEY))
        keys = list(body.coordinator_keys) if version >= 4 else [body.key]
        found = [
            await self._coordinator(conn, key, key_type)
            if key_type != GROUP_KEY or ctx.allows_group(conn, DESCRIBE, key)
            else {
                "key": key,
                "node_id": -1,
                "host": "",
                "port": -1,
                "error_code": GROUP_DENIED,
                "error_message": refusal(conn, DESCRIBE, f"group {key}") if version < 4 else "",
            }
            for key in keys
        ]
        if version >= 4:
            # Kafka's default message per key is empty, not null.
            return _response(
                request, coordinators=[{**f, "error_message": f["error_message"] or ""} for f in found]
            )
        [only] = found
        # Before v4 Kafka always names the error in the message, even NONE.
        message = only["error_message"] or KafkaError(only["error_code"]).name.upper()
        return _response(
            request,
            **{k: v for k, v in only.items() if k not in ("key", "error_message")},
            error_message=message,
        )

    async def _coordinator(self, conn: Connection, key: str, key_type: int) -> dict[str, Any]:
        missing: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1}
        if key_type == TRANSACTION_KEY and self.find_transaction_coordinator is not None:
            return self.find_transaction_coordinator(conn, key)
        if key_type == TRANSACTION_KEY:
            return {
                **missing,
                "error_code": KafkaError.transactional_id_authorization_failed,
                "error_message": "transactions are not supported",
            }
        if key_type != GROUP_KEY:
            return {
                **missing,
                "error_code": KafkaError.invalid_request,
                "error_message": f"key type {key_type}",
            }
        return self.offsets_topic.find_coordinator(conn, key, self.coordinator.partition_of(key))

    async def aclose(self) -> None:
        """Stop a creation of `__consumer_offsets` still waiting for the controller."""
        await self.offsets_topic.aclose()

    def _offsets_topic(self, active_brokers: int) -> CreateTopicRequest:
        config = self.ctx.state.config
        replication = max(1, min(config.offsets_topic_replication_factor, active_brokers))
        return CreateTopicRequest(
            name=OFFSETS_TOPIC,
            num_partitions=config.offsets_topic_num_partitions,
            replication_factor=replication,
            configs={
                "cleanup.policy": "compact",  # as Kafka: the latest commit of each key is kept
                "min.insync.replicas": str(max(1, replication - 1)),
                "retention.ms": "-1",
                "retention.bytes": "-1",
                "segment.bytes": str(OFFSETS_SEGMENT_BYTES),
            },
        )

    # -- membership -----------------------------------------------------------------------------

    async def join_group(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        version = request.header.api_version
        session_ms = _ms(body.session_timeout)
        if not ctx.allows_group(conn, READ, body.group_id):
            return _response(
                request,
                error_code=GROUP_DENIED,
                generation_id=-1,
                protocol_type=None,
                protocol_name=None if version >= 7 else "",
                leader="",
                skip_assignment=False,
                member_id=body.member_id,
                members=[],
            )
        answer = await self.coordinator.join(
            groups.JoinRequest(
                group_id=body.group_id,
                member_id=body.member_id,
                instance_id=getattr(body, "group_instance_id", None),
                protocol_type=body.protocol_type,
                protocols=tuple(groups.Protocol(p.name, bytes(p.metadata)) for p in body.protocols),
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=_ms(body.rebalance_timeout) if version >= 1 else session_ms,
                client_id=request.header.client_id or "",
                client_host="/" + conn.peer.rsplit(":", 1)[0],
                api_version=version,
            )
        )
        nullable = version >= 7
        return _response(
            request,
            error_code=_kafka(answer.error),
            generation_id=answer.generation,
            protocol_type=answer.protocol_type,
            protocol_name=answer.protocol_name if nullable else (answer.protocol_name or ""),
            leader=answer.leader,
            skip_assignment=answer.skip_assignment,
            member_id=answer.member_id,
            members=[
                {"member_id": m.member_id, "group_instance_id": m.instance_id, "metadata": m.metadata}
                for m in answer.members
            ],
        )

    async def sync_group(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        if not ctx.allows_group(conn, READ, body.group_id):
            return _response(
                request, error_code=GROUP_DENIED, protocol_type=None, protocol_name=None, assignment=b""
            )
        answer = await self.coordinator.sync(
            groups.SyncRequest(
                group_id=body.group_id,
                member_id=body.member_id,
                instance_id=getattr(body, "group_instance_id", None),
                generation=int(body.generation_id),
                protocol_type=getattr(body, "protocol_type", None),
                protocol_name=getattr(body, "protocol_name", None),
                assignments={a.member_id: bytes(a.assignment) for a in body.assignments},
            )
        )
        return _response(
            request,
            error_code=_kafka(answer.error),
            protocol_type=answer.protocol_type,
            protocol_name=answer.protocol_name,
            assignment=answer.assignment,
        )

    async def heartbeat(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        if not ctx.allows_group(conn, READ, body.group_id):
            return _response(request, error_code=GROUP_DENIED)
        error = await self.coordinator.heartbeat(
            groups.HeartbeatRequest(
                body.group_id,
                body.member_id,
                getattr(body, "group_instance_id", None),
                int(body.generation_id),
            )
        )
        return _response(request, error_code=_kafka(error))

    async def leave_group(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        if not ctx.allows_group(conn, READ, body.group_id):
            return _response(request, error_code=GROUP_DENIED, members=[])
        if request.header.api_version < 3:
            answer = await self.coordinator.leave(body.group_id, [groups.LeavingMember(body.member_id, None)])
            error = (
                answer.error
                if answer.error is not GroupError.NONE or not answer.members
                else answer.members[0]
            )
            return _response(request, error_code=_kafka(error))
        leaving = [groups.LeavingMember(m.member_id, m.group_instance_id) for m in body.members]
        answer = await self.coordinator.leave(body.group_id, leaving)
        return _response(
            request,
            error_code=_kafka(answer.error),
            members=[
                {"member_id": m.member_id, "group_instance_id": m.instance_id, "error_code": _kafka(e)}
                for m, e in zip(leaving, answer.members, strict=True)
            ]
            if answer.error is GroupError.NONE
            else [],
        )

    # -- offsets --------------------------------------------------------------------------------

    def _partition_error(self, topic: str | None, partition: int, *, by_id: bool) -> GroupError:
        """Why the image does not have this partition (NONE when it does)."""
        if topic is None:
            return GroupError.UNKNOWN_TOPIC_ID if by_id else GroupError.UNKNOWN_TOPIC_OR_PARTITION
        topic_id = self.ctx.topic_id(topic)
        if topic_id is None or self.ctx.state.image.partition((topic_id, partition)) is None:
            return GroupError.UNKNOWN_TOPIC_OR_PARTITION
        return GroupError.NONE

    async def offset_commit(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        version = request.header.api_version
        by_id = version >= 10
        named = [(t, ctx.topic_name(t.topic_id) if by_id else t.name) for t in body.topics]
        errors: dict[tuple[int, int], GroupError | KafkaError] = {}
        to_commit: list[tuple[tuple[int, int], groups.OffsetToCommit]] = []
        group_allowed = ctx.allows_group(conn, READ, body.group_id)
        for i, (topic, name) in enumerate(named):
            topic_allowed = name is None or ctx.allows_topic(conn, READ, name)
            for j, p in enumerate(topic.partitions):
                if not group_allowed or not topic_allowed:
                    errors[(i, j)] = GROUP_DENIED if not group_allowed else TOPIC_DENIED
                    continue
                error = self._partition_error(name, int(p.partition_index), by_id=by_id)
                if error is not GroupError.NONE:
                    errors[(i, j)] = error
                    continue
                assert name is not None
                epoch = int(getattr(p, "committed_leader_epoch", -1))
                to_commit.append(
                    (
                        (i, j),
                        groups.OffsetToCommit(
                            name, int(p.partition_index), int(p.committed_offset), epoch, p.committed_metadata
                        ),
                    )
                )
        if to_commit:
            answers = await self.coordinator.commit(
                groups.CommitRequest(
                    group_id=body.group_id,
                    generation=int(body.generation_id_or_member_epoch),
                    member_id=body.member_id,
                    instance_id=getattr(body, "group_instance_id", None),
                    offsets=tuple(item for _position, item in to_commit),
                    api_version=version,
                )
            )
            errors.update(zip((position for position, _item in to_commit), answers, strict=True))
        return _response(
            request,
            topics=[
                {
                    ("topic_id" if by_id else "name"): topic.topic_id if by_id else topic.name,
                    "partitions": [
                        {"partition_index": p.partition_index, "error_code": _code(errors[(i, j)])}
                        for j, p in enumerate(topic.partitions)
                    ],
                }
                for i, (topic, _name) in enumerate(named)
            ],
        )

    async def txn_offset_commit(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        """TxnOffsetCommit: WRITE on the transactional id, then READ on the group (else every
        partition answers that refusal), then READ on each topic and the partition's existence,
        as Kafka's KafkaApis; the rest is the coordinator's (`GroupCoordinator.txn_commit`)."""
        body = request.body
        refused: GroupError | KafkaError | None = None
        if not ctx.allows(
            conn, AclOperation.WRITE, Resource(ResourceType.TRANSACTIONAL_ID, body.transactional_id)
        ):
            refused = KafkaError.transactional_id_authorization_failed
        elif not ctx.allows_group(conn, READ, body.group_id):
            refused = GROUP_DENIED
        errors: dict[tuple[int, int], GroupError | KafkaError] = {}
        to_commit: list[tuple[tuple[int, int], groups.OffsetToCommit]] = []
        for i, topic in enumerate(body.topics):
            topic_allowed = refused is None and ctx.allows_topic(conn, READ, topic.name)
            for j, p in enumerate(topic.partitions):
                if refused is not None or not topic_allowed:
                    errors[(i, j)] = refused if refused is not None else TOPIC_DENIED
                    continue
                error = self._partition_error(topic.name, int(p.partition_index), by_id=False)
                if error is not GroupError.NONE:
                    errors[(i, j)] = error
                    continue
                to_commit.append(
                    (
                        (i, j),
                        groups.OffsetToCommit(
                            topic.name,
                            int(p.partition_index),
                            int(p.committed_offset),
                            int(getattr(p, "committed_leader_epoch", -1)),
                            p.committed_metadata,
                        ),
                    )
                )
        if to_commit:
            answers = await self.coordinator.txn_commit(
                txn_offsets.TxnCommitRequest(
                    transactional_id=body.transactional_id,
                    group_id=body.group_id,
                    producer_id=int(body.producer_id),
                    producer_epoch=int(body.producer_epoch),
                    generation=int(getattr(body, "generation_id", -1)),
                    member_id=getattr(body, "member_id", ""),
                    instance_id=getattr(body, "group_instance_id", None),
                    offsets=tuple(item for _position, item in to_commit),
                )
            )
            errors.update(zip((position for position, _item in to_commit), answers, strict=True))
        return _response(
            request,
            topics=[
                {
                    "name": topic.name,
                    "partitions": [
                        {"partition_index": p.partition_index, "error_code": _code(errors[(i, j)])}
                        for j, p in enumerate(topic.partitions)
                    ],
                }
                for i, topic in enumerate(body.topics)
            ],
        )

    async def offset_fetch(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        version = request.header.api_version
        if version >= 8:
            stable = bool(body.require_stable)
            return _response(
                request,
                groups=[self._fetch_group(conn, g, version, require_stable=stable) for g in body.groups],
            )
        fetched = self._fetch_group(
            conn, body, version, require_stable=bool(getattr(body, "require_stable", False))
        )
        if version < 2 and fetched["error_code"] != KafkaError.none:
            # v0-1 have no group error: every partition carries it.
            for topic in fetched["topics"]:
                for partition in topic["partitions"]:
                    partition["error_code"] = fetched["error_code"]
        return _response(request, topics=fetched["topics"], error_code=fetched["error_code"])

    def _fetch_group(
        self, conn: Connection, group: Any, version: int, *, require_stable: bool
    ) -> dict[str, Any]:
        """One group's answer: its error, and the offsets of the topics it names (or all); with
        `require_stable`, UNSTABLE_OFFSET_COMMIT for a partition with a pending transactional
        offset (as Kafka 4.3.1)."""
        by_id = version >= 10
        if not self.ctx.allows_group(conn, DESCRIBE, group.group_id):
            return {"group_id": group.group_id, "topics": [], "error_code": GROUP_DENIED}
        error, offsets = self.coordinator.offsets(group.group_id)
        failed = error is not GroupError.NONE
        wanted = group.topics
        topics: list[dict[str, Any]] = []
        if wanted is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(offsets):
                by_topic.setdefault(topic, []).append(partition)
            for topic, partitions in by_topic.items():
                topic_id = self.ctx.topic_id(topic)
                if (by_id and topic_id is None) or not self.ctx.allows_topic(conn, DESCRIBE, topic):
                    continue
                key = kafka_uuid(topic_id) if by_id and topic_id is not None else topic
                topics.append(self._fetched_topic(key, topic, partitions, offsets, by_id=by_id))
        else:
            for requested in wanted:
                name = self.ctx.topic_name(requested.topic_id) if by_id else requested.name
                key = requested.topic_id if by_id else requested.name
                partitions = [int(p) for p in requested.partition_indexes]
                fetched = self._fetched_topic(
                    key, name or "", partitions, {} if failed else offsets, by_id=by_id
                )
                if name is not None and not self.ctx.allows_topic(conn, DESCRIBE, name):
                    for entry in fetched["partitions"]:
                        entry["error_code"] = TOPIC_DENIED
                topics.append(fetched)
        if require_stable and not failed:
            self._mark_unstable(group.group_id, topics, by_id=by_id)
        return {"group_id": group.group_id, "topics": topics, "error_code": _kafka(error)}

    def _mark_unstable(self, group_id: str, topics: list[dict[str, Any]], *, by_id: bool) -> None:
        """UNSTABLE_OFFSET_COMMIT (no offset) for each fetched partition with a pending
        transactional offset (OffsetFetch `require_stable`, as Kafka's `fetchOffsets`)."""
        for entry_topic in topics:
            name = self.ctx.topic_name(entry_topic["topic_id"]) if by_id else entry_topic["name"]
            for entry in entry_topic["partitions"]:
                if (
                    name is not None
                    and entry["error_code"] == KafkaError.none
                    and self.coordinator.has_pending(group_id, name, entry["partition_index"])
                ):
                    entry.update(
                        committed_offset=-1,
                        committed_leader_epoch=-1,
                        metadata="",
                        error_code=KafkaError.unstable_offset_commit,
                    )

    @staticmethod
    def _fetched_topic(
        key: Any,
        topic: str,
        partitions: list[int],
        offsets: Any,
        *,
        by_id: bool,
    ) -> dict[str, Any]:
        entries = []
        for partition in partitions:
            committed = offsets.get((topic, partition))
            entries.append(
                {
                    "partition_index": partition,
                    "committed_offset": -1 if committed is None else committed.offset,
                    "committed_leader_epoch": -1 if committed is None else committed.leader_epoch,
                    "metadata": "" if committed is None else committed.metadata,
                    "error_code": KafkaError.none,
                }
            )
        return {("topic_id" if by_id else "name"): key, "partitions": entries}

    async def offset_delete(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        if not ctx.allows(conn, AclOperation.DELETE, _group(body.group_id)):
            return _response(request, error_code=GROUP_DENIED, topics=[])
        readable = {t.name for t in body.topics if ctx.allows_topic(conn, READ, t.name)}
        known: list[tuple[str, list[int]]] = []
        for t in body.topics:
            partitions = [
                int(p.partition_index)
                for p in t.partitions
                if t.name in readable
                and self._partition_error(t.name, int(p.partition_index), by_id=False) is GroupError.NONE
            ]
            if partitions:
                known.append((t.name, partitions))
        answer = await self.coordinator.delete_offsets(body.group_id, known)
        decided = {(topic, p): e for topic, parts in answer.topics for p, e in parts}
        if answer.error is not GroupError.NONE:
            return _response(request, error_code=_kafka(answer.error), topics=[])
        return _response(
            request,
            error_code=KafkaError.none,
            topics=[
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": TOPIC_DENIED
                            if t.name not in readable
                            else _kafka(
                                decided.get(
                                    (t.name, int(p.partition_index)),
                                    self._partition_error(t.name, int(p.partition_index), by_id=False),
                                )
                            ),
                        }
                        for p in t.partitions
                    ],
                }
                for t in body.topics
            ],
        )

    # -- groups ---------------------------------------------------------------------------------

    async def describe_groups(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        version = request.header.api_version
        asked = bool(getattr(body, "include_authorized_operations", False))
        described = []
        for group_id in body.groups:
            entry: dict[str, Any] = {
                "group_id": group_id,
                "error_code": KafkaError.none,
                "error_message": None,
                "group_state": "",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
                "authorized_operations": OPERATIONS_NOT_ASKED,
            }
            if not ctx.allows_group(conn, DESCRIBE, group_id):
                described.append({**entry, "error_code": GROUP_DENIED})
                continue
            if asked:  # as Kafka: only for a group the principal may describe
                entry["authorized_operations"] = ctx.authorized_operations(
                    conn, Resource(ResourceType.GROUP, group_id)
                )
            error, group = self.coordinator.group(group_id)
            if error is not GroupError.NONE:
                described.append({**entry, "error_code": _kafka(error)})
                continue
            if group is None and version >= 6:
                described.append(
                    {
                        **entry,
                        "error_code": KafkaError.group_id_not_found,
                        "error_message": f"Group {group_id} not found.",
                        "group_state": groups.GroupState.DEAD.value,
                    }
                )
                continue
            description = groups.describe(group)
            described.append(
                {
                    **entry,
                    "group_state": description.state.value,
                    "protocol_type": description.protocol_type,
                    "protocol_data": description.protocol_data,
                    "members": [
                        {
                            "member_id": m.member_id,
                            "group_instance_id": m.instance_id,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "member_metadata": m.metadata,
                            "member_assignment": m.assignment,
                        }
                        for m in description.members
                    ],
                }
            )
        return _response(request, groups=described)

    async def list_groups(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        states = list(getattr(body, "states_filter", ()))
        types = list(getattr(body, "types_filter", ()))
        error, found = self.coordinator.all_groups()
        if not ctx.allows(conn, DESCRIBE):
            found = [g for g in found if ctx.allows_group(conn, DESCRIBE, g.group_id)]
        return _response(
            request,
            error_code=_kafka(error),
            groups=[
                {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type or "",
                    "group_state": g.state.value,
                    "group_type": groups.CLASSIC_GROUP_TYPE,
                }
                for g in sorted(found, key=lambda g: g.group_id)
                if groups.listed(g, states=states, types=types)
            ],
        )

    async def delete_groups(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        results = []
        for group_id in request.body.groups_names:
            if not ctx.allows(conn, AclOperation.DELETE, _group(group_id)):
                results.append({"group_id": group_id, "error_code": GROUP_DENIED})
                continue
            error = await self.coordinator.delete_group(group_id)
            results.append({"group_id": group_id, "error_code": _kafka(error)})
        return _response(request, results=results)
