"""Kafka's admin APIs on a broker: topics, partitions, configs and SCRAM users, forwarded to the
active controller (KIP-590); InitProducerId from the broker's block of producer ids.

Guarantees:
* Kafka's ACLs (as KafkaApis), else TOPIC_AUTHORIZATION_FAILED (29) for a topic or
  CLUSTER_AUTHORIZATION_FAILED (31) for the cluster, and nothing changes: CreateTopics needs
  CREATE on the cluster or on the topic; DeleteTopics DELETE on the topic; CreatePartitions ALTER
  on the topic; DescribeConfigs / AlterConfigs / IncrementalAlterConfigs DESCRIBE_CONFIGS /
  ALTER_CONFIGS on the topic, or on the cluster for a BROKER resource; Describe/AlterUserScramCredentials DESCRIBE / ALTER on the cluster; InitProducerId
  IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679).
* A forwarded change is answered once the controller committed it and, for topics, once this
  broker's replica of the metadata log shows it (bounded by the request's timeout), so a client
  that creates a topic and then asks this broker for its metadata finds it.
* No controller answering is NOT_CONTROLLER for each item: retriable, as a controller failover
  is to Kafka's clients. The controller's own codes pass through (TOPIC_ALREADY_EXISTS,
  INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG, ...).
* `validate_only` requests are checked without changing anything.
* A client over its `controller_mutation_rate` (KIP-599; `client_quotas`) gets
  THROTTLING_QUOTA_EXCEEDED for each topic of a CreateTopics v6+, DeleteTopics v5+ or
  CreatePartitions v3+ and nothing changes; older versions go through. The partitions created or
  deleted are counted toward the quota once the controller committed them.
* CreateTopics checks the counts as Kafka's controller does: 0 or below -1 partitions is
  INVALID_PARTITIONS, replicas INVALID_REPLICATION_FACTOR, an assignment with counts other than
  -1 INVALID_REQUEST; nothing is created. IncrementalAlterConfigs naming an operation Kafka does
  not define is INVALID_REQUEST, nothing changed. DescribeConfigs of another broker's id is
  INVALID_REQUEST (a broker describes itself and the cluster default, as Kafka's).
* Error responses have Kafka 4.3.1's shape (tests/kafka_tools/test_error_responses.py): empty
  `configs` in a CreateTopics error, `""` for "no message" where Kafka's default is empty, a
  message with each refusal where Kafka's has one.
* DescribeConfigs answers as Kafka's (`jbod_core.broker_configs`): of a topic, every topic config
  with the topic's own value (DYNAMIC_TOPIC_CONFIG) or the default this broker's configs give it
  (their source: DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG or
  DEFAULT_CONFIG) and the broker keys as synonyms; of a broker, every broker config Kafka 4.3.1
  lists (and the dynamic ones it lists once set), each with its value, source, synonyms,
  sensitivity and read-only flag (read-only unless this broker takes it dynamically); of the
  cluster default (""), the dynamic defaults set. Synonyms and documentation only when asked;
  the documentation is Kafka 4.3.1's own string (`jbod_core.kafka_broker_config_table`,
  `jbod_core.kafka_topic_config_docs`), ours (`topic_configs`) only for a topic config Kafka
  gives none.
* A CreateTopics topic with -1 partitions or replication factor (and no assignment) gets this
  broker's `num.partitions` / `default.replication.factor`.
* AlterConfigs (the legacy form) replaces a TOPIC or BROKER resource's configs whole, as Kafka's:
  the keys given are set (a null value is a key not given), every other key set before goes back
  to its default, in one change checked and answered as IncrementalAlterConfigs' (validate_only,
  codes, ACLs).
* (Incremental)AlterConfigs of a BROKER resource ("" = the cluster default, else a broker id): a
  `cordoned.log.dirs` naming this broker checks its paths against this broker's `log.dirs`
  (INVALID_REQUEST, as Kafka answers a bad broker config value) before it is forwarded.
* InitProducerId gives a non-transactional producer a new producer id with epoch 0 (the Java
  client and librdkafka bump epochs themselves); a transactional id is refused
  (transactions are not supported). It never waits for the controller: while the broker has no
  producer id left it answers COORDINATOR_LOAD_IN_PROGRESS at once, as Kafka's brokers do, and
  the client retries (`forwarding.ProducerIds`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent import dynamic_configs
from jbod_agent.kafka.client_quotas import ClientQuotas
from jbod_agent.kafka.context import BrokerContext, refusal
from jbod_agent.kafka.forwarding import Forwarder, ProducerIds
from jbod_agent.kafka.listener import Connection
from jbod_agent.ports import Clock, ControllerCallError
from jbod_core import broker_configs, topic_configs
from jbod_core.acls import AclOperation, ResourceType
from jbod_core.kafka_topic_config_docs import DOCS as KAFKA_TOPIC_DOCS
from jbod_core.messages import (
    AlterBrokerConfigsRequest,
    AlterConfigOp,
    AlterScramCredentialsRequest,
    AlterTopicConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from jbod_kafka import protocol
from jbod_kafka.ids import kafka_uuid

TOPIC: Final = 2
BROKER: Final = 4
# DescribeConfigs types (Kafka's ConfigType).
_CONFIG_TYPES: Final = {
    "boolean": 1,
    "string": 2,
    "int": 3,
    "short": 4,
    "long": 5,
    "double": 6,
    "list": 7,
    "class": 8,
    "password": 9,
}
_OPS: Final[dict[int, Literal["SET", "DELETE", "APPEND", "SUBTRACT"]]] = {
    0: "SET",
    1: "DELETE",
    2: "APPEND",
    3: "SUBTRACT",
}
_WAIT_STEP_S: Final = 0.02
# KIP-599: the versions from which a mutation over the quota is refused (89) rather than delayed.
_STRICT_MUTATIONS_FROM: Final[dict[int, int]] = {19: 6, 20: 5, 37: 3}


def kafka_response(request: protocol.Request, **fields: Any) -> Any:
    return protocol.build(
        protocol.response_type(request.header.api_key, request.header.api_version), throttle_time=0, **fields
    )


def _entry(described: broker_configs.Described) -> dict[str, Any]:
    """One DescribeConfigs entry (every version's fields; the codec drops those a version lacks)."""
    return {
        "name": described.name,
        "value": described.value,
        "read_only": described.read_only,
        "config_source": int(described.source),
        "is_default": described.is_default,
        "is_sensitive": described.sensitive,
        "synonyms": [{"name": s.name, "value": s.value, "source": int(s.source)} for s in described.synonyms],
        "config_type": _CONFIG_TYPES[described.type],
        "documentation": described.doc,
    }


@dataclass(frozen=True, slots=True)
class _Described:
    """One resource's answer to DescribeConfigs: its code, its entries, why it was refused."""

    error_code: KafkaError
    entries: list[dict[str, Any]]
    error_message: str | None = None


def _refused(exc: Exception, *, invalid: KafkaError) -> dict[str, Any]:
    """The error fields of an item the controller did not decide: none answered (retriable
    NOT_CONTROLLER), or the request did not fit the controller's schema (`invalid`)."""
    code = KafkaError.not_controller if isinstance(exc, ControllerCallError) else invalid
    return {"error_code": code, "error_message": str(exc)}


def _unknown_operation(resource: Any) -> dict[str, Any] | None:
    """INVALID_REQUEST for an IncrementalAlterConfigs resource naming an operation Kafka does
    not define (Kafka 4.3.1 fails with UNKNOWN_SERVER_ERROR; docs/decisions.md), else None."""
    unknown = sorted({int(c.config_operation) for c in resource.configs} - set(_OPS))
    if not unknown:
        return None
    message = f"Unknown config operation {unknown[0]}: 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT"
    return {"error_code": KafkaError.invalid_request, "error_message": message}


def _alter_result(resource: Any) -> dict[str, Any]:
    """An (Incremental)AlterConfigs resource's answer, no error yet."""
    return {
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
        "error_code": KafkaError.none,
        "error_message": None,
    }


def _controller_error(reply: Any) -> dict[str, Any]:
    """The error fields of an item the controller refused, its code and message as they are."""
    return {"error_code": KafkaError(reply.error_code), "error_message": reply.error_message}


def _shape_error(topic: Any) -> tuple[KafkaError, str] | None:
    """Why a CreatableTopic's counts cannot be used, as Kafka's controller checks them: an
    assignment with counts other than -1 (the default), or a count of 0 or below -1."""
    if topic.assignments:
        if topic.replication_factor != -1 or topic.num_partitions != -1:
            return (
                KafkaError.invalid_request,
                "A manual partition assignment was given with a partition count or replication factor other than -1",
            )
        return None
    if topic.replication_factor == 0 or topic.replication_factor < -1:
        return (
            KafkaError.invalid_replication_factor,
            f"Replication factor {topic.replication_factor}: it must be positive, or -1 for the default",
        )
    if topic.num_partitions == 0 or topic.num_partitions < -1:
        return (
            KafkaError.invalid_partitions,
            f"Partition count {topic.num_partitions}: it must be positive, or -1 for the default",
        )
    return None


_CONFIG_WAIT_S: Final = 30.0  # IncrementalAlterConfigs has no timeout of its own; Kafka's admin default


async def until_image_shows(clock: Clock, condition: Callable[[], bool], timeout_s: float) -> None:
    """Wait (bounded, on `clock`) until this broker's image satisfies `condition`."""
    deadline = clock.monotonic() + max(timeout_s, 0.0)
    while not condition() and clock.monotonic() < deadline:
        await clock.sleep(_WAIT_STEP_S)


class AdminApis:
    def __init__(self, ctx: BrokerContext, forwarder: Forwarder, producer_ids: ProducerIds) -> None:
        self.ctx = ctx
        self.forwarder = forwarder
        self.producer_ids = producer_ids
        self.quotas: ClientQuotas | None = None  # controller_mutation_rate (set by `server.build_apis`)

    def _over_mutation_quota(self, conn: Connection, request: protocol.Request) -> dict[str, Any] | None:
        """THROTTLING_QUOTA_EXCEEDED while the client is over its controller_mutation_rate and its
        request version is strict (KIP-599: CreateTopics v6+, DeleteTopics v5+, CreatePartitions
        v3+; older versions are let through and throttled after), else None."""
        header = request.header
        if self.quotas is None or header.api_version < _STRICT_MUTATIONS_FROM.get(header.api_key, 99):
            return None
        if self.quotas.mutations_throttle_ms(conn, header.client_id) <= 0:
            return None
        return {
            "error_code": KafkaError.throttling_quota_exceeded,
            "error_message": "The throttling quota has been exceeded.",
        }

    def _mutated(self, conn: Connection, request: protocol.Request, partitions: int) -> None:
        if self.quotas is not None:
            self.quotas.record_mutations(conn, request.header.client_id, partitions)

    def handlers(self) -> dict[int, Any]:
        return {
            19: self.create_topics,
            20: self.delete_topics,
            22: self.init_producer_id,
            32: self.describe_configs,
            33: self.alter_configs,
            37: self.create_partitions,
            44: self.incremental_alter_configs,
            50: self.describe_user_scram_credentials,
            51: self.alter_user_scram_credentials,
        }

    # -- topics --------------------------------------------------------------------------------

    async def create_topics(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        timeout_s = body.timeout.total_seconds()
        results = await asyncio.gather(
            *(
                self._create_topic(conn, request, topic, timeout_s, validate_only=body.validate_only)
                for topic in body.topics
            )
        )
        return kafka_response(request, topics=list(results))

    async def _create_topic(
        self,
        conn: Connection,
        request: protocol.Request,
        topic: Any,
        timeout_s: float,
        *,
        validate_only: bool,
    ) -> dict[str, Any]:
        name = topic.name
        result: dict[str, Any] = {
            "name": name,
            "topic_id": None,
            "error_code": KafkaError.none,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": [],
        }
        if not self.ctx.allows(conn, AclOperation.CREATE) and not self.ctx.allows_topic(
            conn, AclOperation.CREATE, name
        ):
            denial = refusal(conn, AclOperation.CREATE, f"topic {name}")
            return {**result, "error_code": KafkaError.topic_authorization_failed, "error_message": denial}
        shape = _shape_error(topic)
        refused = (
            {"error_code": shape[0], "error_message": shape[1]}
            if shape is not None
            else None
            if validate_only
            else self._over_mutation_quota(conn, request)
        )
        if refused is not None:
            return {**result, **refused}
        assignment = [list(a.broker_ids) for a in sorted(topic.assignments, key=lambda a: a.partition_index)]
        defaults = self.ctx.state.config.auto_create_settings  # num.partitions, default.replication.factor
        partitions = (
            None
            if assignment
            else (topic.num_partitions if topic.num_partitions > 0 else defaults.num_partitions)
        )
        replication = (
            None
            if assignment
            else (topic.replication_factor if topic.replication_factor > 0 else defaults.replication_factor)
        )
        configs = {c.name: c.value for c in topic.configs if c.value is not None}
        if validate_only:
            code, message = self._validate_new_topic(name, partitions, replication, configs)
            return {
                **result,
                "error_code": code,
                "error_message": message,
                "num_partitions": partitions or len(assignment),
                "replication_factor": replication or len(assignment[0]),
            }
        try:
            reply = await self.forwarder.create_topic(
                CreateTopicRequest(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=replication,
                    replica_assignment=assignment or None,
                    configs=configs,
                )
            )
        except (ControllerCallError, ValueError) as exc:
            return {
                **result,
                "error_code": KafkaError.not_controller
                if isinstance(exc, ControllerCallError)
                else KafkaError.invalid_request,
                "error_message": str(exc),
            }
        if reply.error_code != 0:
            return {**result, **_controller_error(reply)}
        self._mutated(conn, request, reply.num_partitions)
        await until_image_shows(self.ctx.clock, lambda: self.ctx.serves_topic(name), timeout_s)
        topic_id = self.ctx.topic_id(name)
        return {
            **result,
            "topic_id": kafka_uuid(topic_id) if topic_id is not None else None,
            "num_partitions": reply.num_partitions,
            "replication_factor": reply.replication_factor,
            "configs": [],
        }

    def _validate_new_topic(
        self, name: str, partitions: int | None, replication: int | None, configs: dict[str, str]
    ) -> tuple[KafkaError, str | None]:
        if self.ctx.topic_id(name) is not None:
            return KafkaError.topic_already_exists, f"Topic '{name}' already exists."
        active = sum(1 for reg in self.ctx.state.image.brokers.values() if reg.is_active)
        if replication is not None and replication > active:
            return (
                KafkaError.invalid_replication_factor,
                f"Replication factor {replication} is larger than {active} brokers",
            )
        problem = topic_configs.create_error(configs, replication_factor=replication or 1)
        if problem is not None:
            return KafkaError.invalid_config, problem.message
        return KafkaError.none, None

    async def delete_topics(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        if request.header.api_version >= 6:
            named = [(t.name or ctx.topic_name(t.topic_id), t.topic_id) for t in body.topics]
        else:
            named = [(name, None) for name in body.topic_names]
        timeout_s = body.timeout.total_seconds()
        results = await asyncio.gather(
            *(self._delete_topic(conn, request, name, topic_id, timeout_s) for name, topic_id in named)
        )
        return kafka_response(request, responses=list(results))

    async def _delete_topic(
        self, conn: Connection, request: protocol.Request, name: str | None, topic_id: Any, timeout_s: float
    ) -> dict[str, Any]:
        result: dict[str, Any] = {
            "name": name,
            "topic_id": topic_id,
            "error_code": KafkaError.none,
            "error_message": None,
        }
        if name is None:
            return {
                **result,
                "error_code": KafkaError.unknown_topic_id,
                "error_message": f"No topic has id {topic_id}",
            }
        if not self.ctx.allows_topic(conn, AclOperation.DELETE, name):
            message = refusal(conn, AclOperation.DELETE, f"topic {name}")
            return {**result, "error_code": KafkaError.topic_authorization_failed, "error_message": message}
        throttled = self._over_mutation_quota(conn, request)
        if throttled is not None:
            return {**result, **throttled}
        known = self.ctx.topic_id(name)
        partitions = len(self.ctx.state.image.topics[known].partitions) if known is not None else 0
        try:
            reply = await self.forwarder.delete_topic(name)
        except ControllerCallError as exc:
            return {**result, "error_code": KafkaError.not_controller, "error_message": str(exc)}
        code = int(reply.get("errorCode", 0))
        if code != 0:
            return {**result, "error_code": KafkaError(code), "error_message": reply.get("errorMessage")}
        self._mutated(conn, request, partitions)
        await until_image_shows(self.ctx.clock, lambda: self.ctx.topic_id(name) is None, timeout_s)
        return result

    async def create_partitions(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        body = request.body
        results = []
        for topic in body.topics:
            result: dict[str, Any] = {
                "name": topic.name,
                "error_code": KafkaError.none,
                "error_message": None,
            }
            if not ctx.allows_topic(conn, AclOperation.ALTER, topic.name):
                results.append({**result, "error_code": KafkaError.topic_authorization_failed})
                continue
            assignment = (
                [list(a.broker_ids) for a in topic.assignments] if topic.assignments is not None else None
            )
            throttled = None if body.validate_only else self._over_mutation_quota(conn, request)
            if throttled is not None:
                results.append({**result, **throttled})
                continue
            before = self._partition_count(topic.name)
            try:
                reply = await self.forwarder.create_partitions(
                    topic.name,
                    CreatePartitionsRequest(
                        total_count=topic.count, assignment=assignment, validate_only=body.validate_only
                    ),
                )
            except (ControllerCallError, ValueError) as exc:
                results.append({**result, **_refused(exc, invalid=KafkaError.invalid_request)})
                continue
            if reply.error_code != 0:
                refused = _controller_error(reply)
                if refused["error_code"] == KafkaError.unknown_topic_or_partition:
                    refused["error_message"] = None  # Kafka names no reason for an unknown topic
                results.append({**result, **refused})
                continue
            if not body.validate_only:
                self._mutated(conn, request, int(topic.count) - before)
                grown = functools.partial(self._has_partitions, topic.name, int(topic.count))
                await until_image_shows(self.ctx.clock, grown, body.timeout.total_seconds())
            results.append(result)
        return kafka_response(request, results=results)

    def _partition_count(self, name: str) -> int:
        topic_id = self.ctx.topic_id(name)
        topic = self.ctx.state.image.topics.get(topic_id) if topic_id is not None else None
        return 0 if topic is None else len(topic.partitions)

    def _has_partitions(self, name: str, count: int) -> bool:
        topic_id = self.ctx.topic_id(name)
        topic = self.ctx.state.image.topics.get(topic_id) if topic_id is not None else None
        return topic is not None and len(topic.partitions) >= count

    # -- configs -------------------------------------------------------------------------------

    def _levels(self) -> broker_configs.BrokerLevels:
        return dynamic_configs.levels(self.ctx.state.config, self.ctx.state.image)

    def _broker_entries(self, name: str, keys: set[str] | None) -> _Described:
        """A broker's configs as Kafka's DescribeConfigs lists them (`broker_configs.KEYS`, every
        one with its value, source and synonyms); the cluster default ("") lists the dynamic
        defaults set. Another broker's are its own to describe (INVALID_REQUEST here, as in Kafka)."""
        problem = broker_configs.resource_error(name)
        if problem is not None:
            return _Described(KafkaError.invalid_request, [], problem)
        if name != broker_configs.CLUSTER_DEFAULT and int(name) != self.ctx.node_id:
            message = (
                f"Broker {name}'s configs are described by broker {name}, not by broker {self.ctx.node_id}"
            )
            return _Described(KafkaError.invalid_request, [], message)
        if name == broker_configs.CLUSTER_DEFAULT:
            default = self.ctx.state.image.broker_configs.get(broker_configs.CLUSTER_DEFAULT, {})
            described = broker_configs.describe_cluster_default(default)
        else:
            described = broker_configs.describe_broker(self._levels())
        return _Described(KafkaError.none, [_entry(d) for d in described if keys is None or d.name in keys])

    def _config_entries(self, resource_type: int, name: str, keys: set[str] | None) -> _Described:
        if resource_type == BROKER:
            return self._broker_entries(name, keys)
        if resource_type != TOPIC:
            return _Described(
                KafkaError.invalid_request, [], f"Configs of resource type {resource_type} are not served"
            )
        topic_id = self.ctx.topic_id(name)
        if topic_id is None:
            return _Described(KafkaError.unknown_topic_or_partition, [])
        levels = self._levels()
        own = self.ctx.state.image.topics[topic_id].configs
        entries = []
        for definition in topic_configs.DEFINITIONS:
            if keys is not None and definition.name not in keys:
                continue
            default = broker_configs.topic_default(definition, levels)
            synonyms = list(default.synonyms)
            if definition.name in own:
                value = topic_configs.shown_value(definition, own[definition.name])
                source = broker_configs.ConfigSource.DYNAMIC_TOPIC_CONFIG
                synonyms.insert(0, broker_configs.Synonym(definition.name, value, source))
            else:
                value, source = default.value, default.source
            entries.append(
                _entry(
                    broker_configs.Described(
                        name=definition.name,
                        value=value,
                        source=source,
                        read_only=False,
                        sensitive=False,
                        type=definition.type,
                        doc=KAFKA_TOPIC_DOCS.get(definition.name) or definition.doc,
                        synonyms=tuple(synonyms),
                    )
                )
            )
        return _Described(KafkaError.none, entries)

    async def describe_configs(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        results = []
        for resource in request.body.resources:
            keys = set(resource.configuration_keys) if resource.configuration_keys is not None else None
            denied = self._config_denied(conn, AclOperation.DESCRIBE_CONFIGS, resource)
            described = (
                _Described(denied["error_code"], [], denied["error_message"])
                if denied is not None
                else self._config_entries(int(resource.resource_type), resource.resource_name, keys)
            )
            # As Kafka: synonyms and documentation only when asked for.
            synonyms = bool(getattr(request.body, "include_synonyms", False))
            documentation = bool(getattr(request.body, "include_documentation", False))
            for entry in described.entries:
                if not synonyms:
                    entry["synonyms"] = []
                if not documentation:
                    entry["documentation"] = None
            results.append(
                {
                    "error_code": described.error_code,
                    # Kafka's default is an empty message, not a null one.
                    "error_message": described.error_message or "",
                    "resource_type": resource.resource_type,
                    "resource_name": resource.resource_name,
                    "configs": described.entries,
                }
            )
        return kafka_response(request, results=results)

    def _config_denied(
        self, conn: Connection, operation: AclOperation, resource: Any
    ) -> dict[str, Any] | None:
        """The authorization error (code and message, as Kafka's) of a config resource (a topic's
        ACL, or the cluster's for a broker), or None when allowed (other types are refused later)."""
        kind = int(resource.resource_type)
        if kind == TOPIC and not self.ctx.allows_topic(conn, operation, resource.resource_name):
            message = refusal(conn, operation, f"topic {resource.resource_name}")
            return {"error_code": KafkaError.topic_authorization_failed, "error_message": message}
        if kind == BROKER and not self.ctx.allows(conn, operation):
            message = refusal(conn, operation, "the cluster")
            return {"error_code": KafkaError.cluster_authorization_failed, "error_message": message}
        return None

    async def incremental_alter_configs(
        self, ctx: BrokerContext, conn: Connection, request: protocol.Request
    ) -> Any:
        body = request.body
        responses = []
        for resource in body.resources:
            refused = self._alter_refused(conn, resource) or _unknown_operation(resource)
            if refused is not None:
                responses.append({**_alter_result(resource), **refused})
                continue
            try:
                ops = [  # a null value but for DELETE is a ValueError (pydantic's), refused below
                    AlterConfigOp(name=c.name, op=_OPS[int(c.config_operation)], value=c.value)
                    for c in resource.configs
                ]
            except ValueError as exc:
                responses.append(
                    {**_alter_result(resource), **_refused(exc, invalid=KafkaError.invalid_config)}
                )
                continue
            responses.append(await self._alter_resource(resource, ops, body.validate_only, replace=False))
        return kafka_response(request, responses=responses)

    async def alter_configs(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        """Kafka's legacy AlterConfigs: each resource's configs replaced whole (keys not given go
        back to their defaults; a null value is a key not given), else as IncrementalAlterConfigs."""
        body = request.body
        responses = []
        for resource in body.resources:
            refused = self._alter_refused(conn, resource)
            if refused is not None:
                responses.append({**_alter_result(resource), **refused})
                continue
            ops = [
                AlterConfigOp(name=c.name, op="DELETE" if c.value is None else "SET", value=c.value)
                for c in resource.configs
            ]
            responses.append(await self._alter_resource(resource, ops, body.validate_only, replace=True))
        return kafka_response(request, responses=responses)

    def _alter_refused(self, conn: Connection, resource: Any) -> dict[str, Any] | None:
        """The error fields of a resource whose configs cannot be altered here: a type other than
        TOPIC or BROKER, or ALTER_CONFIGS denied (on the topic, or the cluster for a broker)."""
        if int(resource.resource_type) not in (TOPIC, BROKER):
            return {
                "error_code": KafkaError.invalid_request,
                "error_message": "only topic and broker configs can be changed",
            }
        return self._config_denied(conn, AclOperation.ALTER_CONFIGS, resource)

    async def _alter_resource(
        self, resource: Any, ops: list[AlterConfigOp], validate_only: bool, *, replace: bool
    ) -> dict[str, Any]:
        """`ops` on a TOPIC or BROKER resource, forwarded to the controller; answered once this
        broker's image shows the change. With `replace`, keys not named are deleted."""
        result = _alter_result(resource)
        if int(resource.resource_type) == BROKER:
            return await self._alter_broker_configs(
                resource.resource_name, ops, result, validate_only, replace
            )
        try:
            reply = await self.forwarder.alter_topic_configs(
                resource.resource_name,
                AlterTopicConfigsRequest(configs=ops, validate_only=validate_only, replace=replace),
            )
        except (ControllerCallError, ValueError) as exc:
            return {**result, **_refused(exc, invalid=KafkaError.invalid_config)}
        if reply.error_code != 0:
            return {**result, **_controller_error(reply)}
        if not validate_only and reply.configs is not None:
            # Answered once this broker's image shows the change, as topic creation is, so
            # a DescribeConfigs sent to the same broker next reads what was just set.
            shown = functools.partial(self._has_configs, resource.resource_name, reply.configs)
            await until_image_shows(self.ctx.clock, shown, _CONFIG_WAIT_S)
        return result

    async def _alter_broker_configs(
        self,
        broker: str,
        ops: list[AlterConfigOp],
        result: dict[str, Any],
        validate_only: bool,
        replace: bool,
    ) -> dict[str, Any]:
        """A BROKER resource (the principal may ALTER_CONFIGS the cluster): forwarded to the
        controller once its cordoned paths are this broker's own log dirs (when it names this
        broker); answered once this broker's image shows the change."""
        if broker == str(self.ctx.state.node_id):
            problem = dynamic_configs.cordoned_paths_error(self.ctx.state.config, ops)
            if problem is not None:
                return {**result, "error_code": KafkaError.invalid_request, "error_message": problem}
        try:
            reply = await self.forwarder.alter_broker_configs(
                broker, AlterBrokerConfigsRequest(configs=ops, validate_only=validate_only, replace=replace)
            )
        except (ControllerCallError, ValueError) as exc:
            return {**result, **_refused(exc, invalid=KafkaError.invalid_config)}
        if reply.error_code != 0:
            return {**result, **_controller_error(reply)}
        if not validate_only and reply.configs is not None:
            wanted = dict(reply.configs)
            image = self.ctx.state.image
            await until_image_shows(
                self.ctx.clock, lambda: dict(image.broker_configs.get(broker, {})) == wanted, _CONFIG_WAIT_S
            )
        return result

    def _has_configs(self, name: str, configs: dict[str, str]) -> bool:
        topic_id = self.ctx.topic_id(name)
        topic = self.ctx.state.image.topics.get(topic_id) if topic_id is not None else None
        return topic is not None and dict(topic.configs) == configs

    # -- users ---------------------------------------------------------------------------------

    async def describe_user_scram_credentials(
        self, ctx: BrokerContext, conn: Connection, request: protocol.Request
    ) -> Any:
        if not ctx.allows(conn, AclOperation.DESCRIBE):
            # As Kafka 4.3.1: no message, and one result per user named, the error in it, no name.
            named = request.body.users or ()
            denied = {
                "user": "",
                "error_code": KafkaError.cluster_authorization_failed,
                "error_message": None,
            }
            return kafka_response(
                request,
                error_code=KafkaError.cluster_authorization_failed,
                error_message=None,
                results=[{**denied, "credential_infos": []} for _user in named],
            )
        users = None if request.body.users is None else [u.name for u in request.body.users]
        try:
            found = await self.forwarder.describe_scram_credentials(users)
        except ControllerCallError as exc:
            return kafka_response(
                request, error_code=KafkaError.not_controller, error_message=str(exc), results=[]
            )
        return kafka_response(
            request,
            error_code=KafkaError.none,
            error_message="",  # Kafka's default: empty, not null
            results=[
                {
                    "user": r.user,
                    "error_code": KafkaError(r.error_code),
                    "error_message": r.error_message,
                    "credential_infos": [
                        {"mechanism": c.mechanism, "iterations": c.iterations} for c in r.credential_infos
                    ],
                }
                for r in found
            ],
        )

    async def alter_user_scram_credentials(
        self, ctx: BrokerContext, conn: Connection, request: protocol.Request
    ) -> Any:
        body = request.body
        users = [d.name for d in body.deletions] + [u.name for u in body.upsertions]
        if not ctx.allows(conn, AclOperation.ALTER):
            return kafka_response(
                request,
                results=[
                    {
                        "user": u,
                        "error_code": KafkaError.cluster_authorization_failed,
                        "error_message": refusal(conn, AclOperation.ALTER, "the cluster"),
                    }
                    for u in users
                ],
            )
        try:
            reply = await self.forwarder.alter_scram_credentials(
                AlterScramCredentialsRequest(
                    deletions=[
                        ScramCredentialDeletion(name=d.name, mechanism=int(d.mechanism))
                        for d in body.deletions
                    ],
                    upsertions=[
                        ScramCredentialUpsertion(
                            name=u.name,
                            mechanism=int(u.mechanism),
                            iterations=int(u.iterations),
                            salt=bytes(u.salt),
                            salted_password=bytes(u.salted_password),
                        )
                        for u in body.upsertions
                    ],
                )
            )
        except (ControllerCallError, ValueError) as exc:
            code = (
                KafkaError.not_controller
                if isinstance(exc, ControllerCallError)
                else KafkaError.unacceptable_credential
            )
            return kafka_response(
                request, results=[{"user": u, "error_code": code, "error_message": str(exc)} for u in users]
            )
        return kafka_response(
            request,
            results=[
                {"user": r.user, "error_code": KafkaError(r.error_code), "error_message": r.error_message}
                for r in reply.results
            ],
        )

    # -- producers -----------------------------------------------------------------------------

    async def init_producer_id(self, ctx: BrokerContext, conn: Connection, request: protocol.Request) -> Any:
        if request.body.transactional_id is not None:
            return kafka_response(
                request,
                error_code=KafkaError.transactional_id_authorization_failed,
                producer_id=-1,
                producer_epoch=-1,
            )
        if not ctx.allows(conn, AclOperation.IDEMPOTENT_WRITE) and not ctx.allows_any(
            conn, AclOperation.WRITE, ResourceType.TOPIC
        ):
            return kafka_response(
                request, error_code=KafkaError.cluster_authorization_failed, producer_id=-1, producer_epoch=-1
            )
        producer_id = self.producer_ids.next_id()
        if producer_id is None:  # the next block is asked for: Kafka's answer, retried by clients
            return kafka_response(
                request,
                error_code=KafkaError.coordinator_load_in_progress,
                producer_id=-1,
                producer_epoch=-1,
            )
        return kafka_response(request, error_code=KafkaError.none, producer_id=producer_id, producer_epoch=0)
