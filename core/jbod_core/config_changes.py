"""Topic config changes: Kafka's IncrementalAlterConfigs for one topic (an extension of protocol
§3.5, docs/api.md).

Guarantees:
* Checks run in this order and a rejection writes nothing (a topic's change is all or nothing, as
  Kafka's for one resource): unknown topic 3; a key named twice 42 (INVALID_REQUEST); then each op
  in request order: a key `topic_configs` does not define 40, APPEND or SUBTRACT of a key that is
  not a list 40, a SET, APPEND or SUBTRACT value `topic_configs.value_error` refuses 40 (as at
  create: `min.insync.replicas` at most the topic's smallest replication factor). The message is
  Kafka's (`Unknown topic config name: x`, `Invalid value 0 for configuration segment.ms: ...`).
* SET writes a `ConfigRecord` with the value, APPEND / SUBTRACT one with the list after adding
  or removing the entries (`list_value`; an emptied list is deleted), DELETE one with a null value (the topic falls back
  to the broker's default), each only when the effective value changes: a repeat writes nothing.
* `validate_only` decides alike and writes nothing; the reply carries the topic's effective
  configs as they are after the change (as they would be, with `validate_only`).
* `replace` (Kafka's legacy AlterConfigs) makes the ops the topic's whole configs: after them,
  every key set before and not named is deleted (`replaced`), checked and written as above.
* A change that turns unclean leader election on for the topic (`election.unclean_election_enabled`
  false before, true after, the cluster default included) also elects, after its ConfigRecords, a
  leader outside the ISR for each of the topic's leaderless partitions that has a replica able to
  lead (`election.elect_unclean_leaders`).
"""

from __future__ import annotations

from collections.abc import Mapping

from jbod_core import election, records, topic_configs
from jbod_core.draft import Draft
from jbod_core.errors import ErrorCode
from jbod_core.image import ClusterImage, TopicImage
from jbod_core.messages import AlterConfigOp, AlterTopicConfigsReply, AlterTopicConfigsRequest


def _op_error(op: AlterConfigOp, *, replication_factor: int) -> str | None:
    """Why `op` cannot apply to a topic of `replication_factor` replicas, or None."""
    value = op.value or ""
    if op.name not in topic_configs.KNOWN_KEYS:
        return topic_configs.unknown_key(op.name, value).message
    if op.op in ("APPEND", "SUBTRACT") and op.name not in topic_configs.LIST_KEYS:
        return f"Can't {op.op} to key {op.name} because its type is not LIST."
    if op.op != "DELETE":
        problem = topic_configs.value_error(op.name, value, replication_factor=replication_factor)
        if problem is not None:
            return problem.message
    return None


def _request_error(request: AlterTopicConfigsRequest, topic: TopicImage) -> tuple[ErrorCode, str] | None:
    names = [op.name for op in request.configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        return ErrorCode.INVALID_REQUEST, f"Config key(s) named more than once: {', '.join(duplicates)}"
    factor = min((len(p.replicas) for p in topic.partitions.values()), default=1)
    for op in request.configs:
        problem = _op_error(op, replication_factor=factor)
        if problem is not None:
            return ErrorCode.INVALID_CONFIG, problem
    return None


def list_value(op: AlterConfigOp, current: str | None) -> str | None:
    """The value of a list config after APPEND or SUBTRACT (Kafka: entries are comma-separated;
    APPEND adds entries not there yet, SUBTRACT removes them; an empty result deletes the key)."""
    entries = [e.strip() for e in (current or "").split(",") if e.strip()]
    named = [e.strip() for e in (op.value or "").split(",") if e.strip()]
    if op.op == "APPEND":
        entries += [e for e in named if e not in entries]
    else:
        entries = [e for e in entries if e not in named]
    return ",".join(entries) or None


def replaced(ops: list[AlterConfigOp], current: Mapping[str, str]) -> list[AlterConfigOp]:
    """`ops` then a DELETE of every key of `current` they do not name: a resource's whole configs
    (Kafka's legacy AlterConfigs)."""
    named = {op.name for op in ops}
    return [*ops, *(AlterConfigOp(name=key, op="DELETE") for key in sorted(current) if key not in named)]


def _new_value(op: AlterConfigOp, current: str | None) -> str | None:
    if op.op == "DELETE":
        return None
    if op.op in ("APPEND", "SUBTRACT"):
        return list_value(op, current)
    return op.value


def _changes(topic: TopicImage, ops: list[AlterConfigOp]) -> tuple[list[records.Record], Mapping[str, str]]:
    """The ConfigRecords of the ops that change an effective value, and the configs after them."""
    configs = dict(topic.configs)
    produced: list[records.Record] = []
    for op in ops:
        value = _new_value(op, configs.get(op.name))
        if configs.get(op.name) == value:
            continue
        produced.append(records.ConfigRecord(topic_id=topic.topic_id, name=op.name, value=value))
        if value is None:
            del configs[op.name]
        else:
            configs[op.name] = value
    return produced, configs


def alter_topic_configs(
    image: ClusterImage, name: str, request: AlterTopicConfigsRequest
) -> tuple[list[records.Record], AlterTopicConfigsReply]:
    """IncrementalAlterConfigs of topic `name`: SET or DELETE of the keys `topic_configs` defines."""
    topic_id = image.topic_ids_by_name.get(name)
    if topic_id is None:
        return [], AlterTopicConfigsReply(
            error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=f"Unknown topic '{name}'"
        )
    topic = image.topics[topic_id]
    refused = _request_error(request, topic)
    if refused is not None:
        code, message = refused
        return [], AlterTopicConfigsReply(error_code=code, error_message=message)
    ops = replaced(request.configs, topic.configs) if request.replace else request.configs
    produced, configs = _changes(topic, ops)
    reply = AlterTopicConfigsReply(topic_id=topic_id, configs=dict(configs))
    if request.validate_only:
        return [], reply
    unclean_after = topic_configs.unclean_leader_election(configs, image.broker_configs.get("", {}))
    if unclean_after and not election.unclean_election_enabled(image, topic_id):
        draft = Draft(image)
        for record in produced:
            draft.append(record)
        election.elect_unclean_leaders(draft, topic_id)
        produced = draft.records
    return produced, reply
