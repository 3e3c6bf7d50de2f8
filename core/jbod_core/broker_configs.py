"""Dynamic broker configs (Kafka's `kafka-configs.sh --entity-type brokers`, issue 24): the keys a
broker takes at run time, the controller's decision on a change, and a broker's effective values.

Guarantees:
* `DEFINITIONS` is the one table of the dynamic keys: the replication throttles
  (`leader.replication.throttled.rate`, `follower.replication.throttled.rate`), the intra-broker
  mover's rate (`replica.alter.log.dirs.io.max.bytes.per.second`), all longs >= 0 in bytes per
  second, and KIP-1066's `cordoned.log.dirs` (`*` or a comma-separated list of absolute paths).
* A resource is "" (the cluster default, `--entity-default`) or a broker id in decimal.
  `effective(image, broker_id)` is the broker's own value of each key over the cluster default.
* `alter_broker_configs` checks, in this order, and a rejection writes nothing: a resource name
  that is neither 42 (INVALID_REQUEST); a key named twice 42; then each op in request order: a
  key that is not dynamic here 42 ("Cannot update these configs dynamically", Kafka's words),
  APPEND or SUBTRACT of a number 40, a value `value_error` refuses 40 (INVALID_CONFIG). Only the
  broker knows its log dir paths, so `cordoned.log.dirs` is checked for its form here and for its
  paths by the broker that receives the request for itself (the Kafka listener).
* SET / APPEND / SUBTRACT / DELETE write a `BrokerConfigRecord` only when the value changes;
  `validate_only` writes nothing. The reply carries the resource's configs after the change.
  With `replace` (Kafka's legacy AlterConfigs) every key set before and not named is deleted.
* Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from jbod_core import records
from jbod_core.config_changes import list_value, replaced
from jbod_core.errors import ErrorCode
from jbod_core.image import ClusterImage
from jbod_core.messages import (
    INT32_MAX,
    INT64_MAX,
    AlterBrokerConfigsReply,
    AlterBrokerConfigsRequest,
    AlterConfigOp,
)

LEADER_THROTTLED_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE: Final = "follower.replication.throttled.rate"
ALTER_LOG_DIRS_RATE: Final = "replica.alter.log.dirs.io.max.bytes.per.second"
CORDONED_LOG_DIRS: Final = "cordoned.log.dirs"
CLUSTER_DEFAULT: Final = ""
EVERY_DIR: Final = "*"


@dataclass(frozen=True, slots=True)
class BrokerConfigDefinition:
    """One dynamic broker config: Kafka's name and type; its default when nothing is set."""

    name: str
    type: Literal["long", "list"]
    default: str  # Kafka's default, as DescribeConfigs shows it
    doc: str


DEFINITIONS: Final[tuple[BrokerConfigDefinition, ...]] = (
    BrokerConfigDefinition(
        name=LEADER_THROTTLED_RATE,
        type="long",
        default=str(INT64_MAX),
        doc="Bytes per second a leader sends to followers out of the ISR of the partitions listed "
        "in their topic's leader.replication.throttled.replicas.",
    ),
    BrokerConfigDefinition(
        name=FOLLOWER_THROTTLED_RATE,
        type="long",
        default=str(INT64_MAX),
        doc="Bytes per second a follower out of the ISR fetches for the partitions listed in their "
        "topic's follower.replication.throttled.replicas.",
    ),
    BrokerConfigDefinition(
        name=ALTER_LOG_DIRS_RATE,
        type="long",
        default=str(INT64_MAX),
        doc="Bytes per second an intra-broker replica move copies (over the static setting).",
    ),
    BrokerConfigDefinition(
        name=CORDONED_LOG_DIRS,
        type="list",
        default="",
        doc="Log dirs of the broker that receive no new replica (KIP-1066): `*` for all, or "
        "a comma-separated list of log dir paths.",
    ),
)
BY_NAME: Final[Mapping[str, BrokerConfigDefinition]] = {d.name: d for d in DEFINITIONS}

_DIGITS: Final = re.compile(r"[0-9]{1,19}")


def resource_error(name: str) -> str | None:
    """Why `name` is not a broker config resource ("" or a broker id), or None."""
    if name == CLUSTER_DEFAULT:
        return None
    if not _DIGITS.fullmatch(name) or int(name) > INT32_MAX:
        return f"Invalid broker name '{name}': the cluster default ('') or a broker id"
    return None


def list_entries(value: str) -> list[str]:
    """The entries of a list value (comma-separated, blanks around entries ignored)."""
    return [e.strip() for e in value.split(",") if e.strip()]


def value_error(name: str, value: str) -> str | None:
    """Why the dynamic broker config `name` must not be `value`, or None (`name` is defined)."""
    definition = BY_NAME[name]
    if definition.type == "long":
        if not _DIGITS.fullmatch(value) or int(value) > INT64_MAX:
            return f"{name}: {value!r} is not a long in [0, {INT64_MAX}]"
        return None
    entries = list_entries(value)
    if EVERY_DIR in entries and len(entries) > 1:
        return f"{name}: '*' cannot be listed with other log dirs"
    for entry in entries:
        if entry != EVERY_DIR and not entry.startswith("/"):
            return f"{name}: {entry!r} is not an absolute log dir path"
    return None


def effective(image: ClusterImage, broker_id: int) -> Mapping[str, str]:
    """The dynamic configs broker `broker_id` applies: its own over the cluster default's."""
    default = image.broker_configs.get(CLUSTER_DEFAULT, {})
    own = image.broker_configs.get(str(broker_id), {})
    if not own:
        return default
    return {**default, **own}


def rate(configs: Mapping[str, str], name: str) -> int | None:
    """A rate config in bytes per second, or None when it is not set (or unusable): unthrottled."""
    text = configs.get(name)
    if text is None or not _DIGITS.fullmatch(text):
        return None
    value = int(text)
    return None if value >= INT64_MAX else value


def cordoned_paths(configs: Mapping[str, str]) -> tuple[str, ...]:
    """The paths `cordoned.log.dirs` lists (`*` stays `*`), normalised without a trailing slash."""
    return tuple(
        e if e == EVERY_DIR else e.rstrip("/") or "/"
        for e in list_entries(configs.get(CORDONED_LOG_DIRS, ""))
    )


def _op_error(op: AlterConfigOp) -> tuple[ErrorCode, str] | None:
    definition = BY_NAME.get(op.name)
    if definition is None:
        return ErrorCode.INVALID_REQUEST, (
            f"Cannot update these configs dynamically: {op.name} (dynamic broker configs: {', '.join(sorted(BY_NAME))})"
        )
    if op.op in ("APPEND", "SUBTRACT") and definition.type != "list":
        return (
            ErrorCode.INVALID_CONFIG,
            f"{op.name}: {op.op} is not allowed (it applies to list configs only)",
        )
    if op.op != "DELETE":
        problem = value_error(op.name, op.value or "")
        if problem is not None:
            return ErrorCode.INVALID_CONFIG, problem
    return None


def _new_value(op: AlterConfigOp, current: str | None) -> str | None:
    if op.op == "DELETE":
        return None
    if op.op in ("APPEND", "SUBTRACT"):
        return list_value(op, current)
    return op.value


def alter_broker_configs(
    image: ClusterImage, broker: str, request: AlterBrokerConfigsRequest
) -> tuple[list[records.Record], AlterBrokerConfigsReply]:
    """IncrementalAlterConfigs of the BROKER resource `broker` ("" = the cluster default)."""
    problem = resource_error(broker)
    if problem is not None:
        return [], AlterBrokerConfigsReply(error_code=ErrorCode.INVALID_REQUEST, error_message=problem)
    names = [op.name for op in request.configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        return [], AlterBrokerConfigsReply(
            error_code=ErrorCode.INVALID_REQUEST,
            error_message=f"Config key(s) named more than once: {', '.join(duplicates)}",
        )
    for op in request.configs:
        refused = _op_error(op)
        if refused is not None:
            code, message = refused
            return [], AlterBrokerConfigsReply(error_code=code, error_message=message)
    configs = dict(image.broker_configs.get(broker, {}))
    produced: list[records.Record] = []
    for op in replaced(request.configs, configs) if request.replace else request.configs:
        value = _new_value(op, configs.get(op.name))
        if configs.get(op.name) == value:
            continue
        produced.append(records.BrokerConfigRecord(broker=broker, name=op.name, value=value))
        if value is None:
            del configs[op.name]
        else:
            configs[op.name] = value
    reply = AlterBrokerConfigsReply(broker=broker, configs=configs)
    return ([] if request.validate_only else produced), reply
