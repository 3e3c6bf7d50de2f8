"""Declared Spark schemas: the two inputs (metadata export lines, telemetry samples) and the
output tables of protocol §6. docs/pipeline.md documents every field.

Guarantees:
* Inputs are parsed against these schemas only (never inferred), so a field of the wrong JSON type
  is detected (`inputs` compares each field with its raw text) instead of being coerced.
* Every output table is written with exactly the columns of §6, in this order.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import types as T  # noqa: N812

from jbod_core import acls

# -- the metadata log export (`jbodctl metadata export`; one {offset, type, data} per line) ------

#: One export line. `data` is kept as JSON text here and parsed per record type afterwards.
METADATA_LINE: Final = T.StructType(
    [
        T.StructField("offset", T.LongType()),
        T.StructField("type", T.StringType()),
        T.StructField("data", T.StringType()),
    ]
)

LISTENER: Final = T.StructType(
    [
        T.StructField("name", T.StringType()),
        T.StructField("host", T.StringType()),
        T.StructField("port", T.IntegerType()),
    ]
)

#: The union of the `data` fields of the seven record types (§3.5) and of the admin extensions
#: (docs/api.md: `ConfigRecord`, the SCRAM credential records, `ProducerIdsRecord`,
#: `BrokerConfigRecord`, the ACL records — read and checked, used by no job), camelCase as on the wire. `name` is a topic's name, a config key or a user name, by record type.
RECORD_DATA: Final = T.StructType(
    [
        T.StructField("brokerId", T.IntegerType()),
        T.StructField("brokerEpoch", T.LongType()),
        T.StructField("incarnationId", T.StringType()),
        T.StructField("logDirs", T.ArrayType(T.StringType())),
        T.StructField("offlineLogDirs", T.ArrayType(T.StringType())),
        T.StructField("hasOfflineLogDirs", T.BooleanType()),
        T.StructField("fenced", T.BooleanType()),
        T.StructField("inControlledShutdown", T.BooleanType()),
        T.StructField("listeners", T.ArrayType(LISTENER)),
        T.StructField("rack", T.StringType()),
        T.StructField("name", T.StringType()),
        T.StructField("topicId", T.StringType()),
        T.StructField("configs", T.MapType(T.StringType(), T.StringType())),
        T.StructField("partitionId", T.IntegerType()),
        T.StructField("replicas", T.ArrayType(T.IntegerType())),
        T.StructField("isr", T.ArrayType(T.IntegerType())),
        T.StructField("leader", T.IntegerType()),
        T.StructField("leaderEpoch", T.IntegerType()),
        T.StructField("partitionEpoch", T.IntegerType()),
        T.StructField("directories", T.ArrayType(T.StringType())),
        T.StructField("value", T.StringType()),
        T.StructField("mechanism", T.IntegerType()),
        T.StructField("salt", T.StringType()),
        T.StructField("storedKey", T.StringType()),
        T.StructField("serverKey", T.StringType()),
        T.StructField("iterations", T.IntegerType()),
        T.StructField("nextProducerId", T.LongType()),
        T.StructField("broker", T.StringType()),
        T.StructField("id", T.StringType()),
        T.StructField("resourceType", T.IntegerType()),
        T.StructField("resourceName", T.StringType()),
        T.StructField("patternType", T.IntegerType()),
        T.StructField("principal", T.StringType()),
        T.StructField("host", T.StringType()),
        T.StructField("operation", T.IntegerType()),
        T.StructField("permissionType", T.IntegerType()),
    ]
)

#: The fields of the admin extensions' records, added to the typed Parquet export after its first
#: layout: an export without their columns (written before them) reads them as null.
LATER_FIELDS: Final = (
    "value",
    "mechanism",
    "salt",
    "storedKey",
    "serverKey",
    "iterations",
    "nextProducerId",
    "broker",
    "id",
    *acls.BINDING_FIELDS,
)

#: Fields every record of a type must carry (the rest are optional: "only what changed").
REQUIRED_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "RegisterBrokerRecord": ("brokerId", "brokerEpoch", "incarnationId", "logDirs"),
    "BrokerRegistrationChangeRecord": ("brokerId", "brokerEpoch"),
    "UnregisterBrokerRecord": ("brokerId", "brokerEpoch"),
    "TopicRecord": ("name", "topicId"),
    "PartitionRecord": (
        "topicId",
        "partitionId",
        "replicas",
        "isr",
        "leader",
        "leaderEpoch",
        "partitionEpoch",
        "directories",
    ),
    "PartitionChangeRecord": ("topicId", "partitionId", "partitionEpoch"),
    "RemoveTopicRecord": ("topicId",),
    "ConfigRecord": ("topicId", "name"),
    "UserScramCredentialRecord": ("name", "mechanism", "salt", "storedKey", "serverKey", "iterations"),
    "RemoveUserScramCredentialRecord": ("name", "mechanism"),
    "ProducerIdsRecord": ("brokerId", "brokerEpoch", "nextProducerId"),
    "BrokerConfigRecord": ("broker", "name"),
    "AccessControlEntryRecord": ("id", *acls.BINDING_FIELDS),
    "RemoveAccessControlEntryRecord": ("id",),
}
RECORD_TYPES: Final = tuple(REQUIRED_FIELDS)

#: Every field each record type may carry; a field outside its type's list is ignored (§3.5:
#: readers ignore fields they do not know), a listed field of the wrong JSON type is an error.
FIELDS_BY_TYPE: Final[dict[str, tuple[str, ...]]] = {
    "RegisterBrokerRecord": (
        "brokerId",
        "brokerEpoch",
        "incarnationId",
        "logDirs",
        "hasOfflineLogDirs",
        "fenced",
        "inControlledShutdown",
        "listeners",
        "rack",
        "offlineLogDirs",
    ),
    "BrokerRegistrationChangeRecord": (
        "brokerId",
        "brokerEpoch",
        "fenced",
        "inControlledShutdown",
        "logDirs",
        "offlineLogDirs",
    ),
    "UnregisterBrokerRecord": ("brokerId", "brokerEpoch"),
    "TopicRecord": ("name", "topicId", "configs"),
    "PartitionRecord": REQUIRED_FIELDS["PartitionRecord"],
    "PartitionChangeRecord": (
        "topicId",
        "partitionId",
        "partitionEpoch",
        "replicas",
        "isr",
        "leader",
        "leaderEpoch",
        "directories",
    ),
    "RemoveTopicRecord": ("topicId",),
    "ConfigRecord": ("topicId", "name", "value"),
    "UserScramCredentialRecord": REQUIRED_FIELDS["UserScramCredentialRecord"],
    "RemoveUserScramCredentialRecord": REQUIRED_FIELDS["RemoveUserScramCredentialRecord"],
    "ProducerIdsRecord": REQUIRED_FIELDS["ProducerIdsRecord"],
    "BrokerConfigRecord": ("broker", "name", "value"),
    "AccessControlEntryRecord": REQUIRED_FIELDS["AccessControlEntryRecord"],
    "RemoveAccessControlEntryRecord": ("id",),
}

#: Fields that may be JSON null (`rack`; a ConfigRecord's `value`, null for a deleted config);
#: any other listed field that is null or of the wrong JSON type is an error.
NULLABLE_FIELDS: Final = frozenset({"rack", "value"})

#: Per type, the fields it may leave out ("only what changed"): `inputs` looks for their keys in
#: the line, to tell "left out" from "of the wrong type".
OPTIONAL_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    t: tuple(f for f in FIELDS_BY_TYPE[t] if f not in REQUIRED_FIELDS[t] and f not in NULLABLE_FIELDS)
    for t in FIELDS_BY_TYPE
}

#: A metadata line parsed in one pass: `data` typed.
METADATA_RECORD: Final = T.StructType(
    [
        T.StructField("offset", T.LongType()),
        T.StructField("type", T.StringType()),
        T.StructField("data", RECORD_DATA),
    ]
)

#: Fields that hold Uuids (checked for the canonical 22-character text form).
UUID_FIELDS: Final = ("incarnationId", "topicId", "id")
UUID_LIST_FIELDS: Final = ("logDirs", "offlineLogDirs", "directories")

# -- agent telemetry (one sample per dir per interval; agent/jbod_agent/lifecycle/telemetry.py) ----------

TELEMETRY_REPLICA: Final = T.StructType(
    [
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("sizeBytes", T.LongType()),
    ]
)

#: One telemetry line. The first eight fields are §6's and required; `probeSeconds`,
#: `probeErrors` and `error` are optional additions of the agent's writer.
TELEMETRY_SAMPLE: Final = T.StructType(
    [
        T.StructField("ts", T.DoubleType()),
        T.StructField("brokerId", T.IntegerType()),
        T.StructField("directoryId", T.StringType()),
        T.StructField("path", T.StringType()),
        T.StructField("state", T.StringType()),
        T.StructField("totalBytes", T.LongType()),
        T.StructField("usableBytes", T.LongType()),
        T.StructField("replicas", T.ArrayType(TELEMETRY_REPLICA)),
        T.StructField("probeSeconds", T.DoubleType()),
        T.StructField("probeErrors", T.LongType()),
        T.StructField("error", T.StringType()),
    ]
)
TELEMETRY_REQUIRED: Final = (
    "ts",
    "brokerId",
    "directoryId",
    "path",
    "state",
    "totalBytes",
    "usableBytes",
    "replicas",
)
TELEMETRY_STATES: Final = ("online", "offline", "full")

# -- outputs (§6) ------------------------------------------------------------------------------

DISKS: Final = T.StructType(
    [
        T.StructField("brokerId", T.IntegerType(), False),
        T.StructField("directoryId", T.StringType(), False),
        T.StructField("state", T.StringType(), False),
        T.StructField("replicas", T.LongType(), False),
        T.StructField("leaders", T.LongType(), False),
        T.StructField("bytes", T.LongType(), False),
        T.StructField("totalBytes", T.LongType()),
        T.StructField("utilisation", T.DoubleType()),
        T.StructField("skew", T.DoubleType()),
    ]
)

BLAST_RADIUS: Final = T.StructType(
    [
        T.StructField("brokerId", T.IntegerType(), False),
        T.StructField("directoryId", T.StringType(), False),
        T.StructField("replicas", T.LongType(), False),
        T.StructField("leadersLost", T.LongType(), False),
        T.StructField("offlinePartitions", T.LongType(), False),
        T.StructField("underMinIsr", T.LongType(), False),
        T.StructField("rank", T.IntegerType(), False),
    ]
)

PLAN: Final = T.StructType(
    [
        T.StructField("topic", T.StringType(), False),
        T.StructField("partition", T.IntegerType(), False),
        T.StructField("brokerId", T.IntegerType(), False),
        T.StructField("fromDirectoryId", T.StringType(), False),
        T.StructField("toDirectoryId", T.StringType(), False),
        T.StructField("bytes", T.LongType(), False),
        # Extension (issue 24): where the replica goes (`brokerId` for an intra-broker move), the
        # move's kind (`intra-broker` | `cross-broker`) and the goal it serves.
        T.StructField("toBrokerId", T.IntegerType(), False),
        T.StructField("kind", T.StringType(), False),
        T.StructField("reason", T.StringType(), False),
    ]
)

TIMELINE: Final = T.StructType(
    [
        T.StructField("offset", T.LongType(), False),
        T.StructField("type", T.StringType(), False),
        T.StructField("brokerId", T.IntegerType()),
        T.StructField("directoryId", T.StringType()),
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("detail", T.StringType()),
    ]
)

TABLES: Final = {"disks": DISKS, "blast_radius": BLAST_RADIUS, "plan": PLAN, "timeline": TIMELINE}

# -- a topic read by Spark's Kafka source (`topic-stats`, extension) ---------------------------

#: What `spark.read.format("kafka")` gives (without headers).
KAFKA_RECORD: Final = T.StructType(
    [
        T.StructField("key", T.BinaryType()),
        T.StructField("value", T.BinaryType()),
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("timestamp", T.TimestampType()),
        T.StructField("timestampType", T.IntegerType()),
    ]
)

TOPIC_PARTITIONS: Final = T.StructType(
    [
        T.StructField("topic", T.StringType(), False),
        T.StructField("partition", T.IntegerType(), False),
        T.StructField("records", T.LongType(), False),
        T.StructField("keyBytes", T.LongType(), False),
        T.StructField("valueBytes", T.LongType(), False),
        T.StructField("keys", T.LongType(), False),
        T.StructField("firstOffset", T.LongType(), False),
        T.StructField("lastOffset", T.LongType(), False),
        T.StructField("firstTimestamp", T.TimestampType()),
        T.StructField("lastTimestamp", T.TimestampType()),
    ]
)

TOPIC_KEYS: Final = T.StructType(
    [
        T.StructField("topic", T.StringType(), False),
        T.StructField("key", T.StringType()),
        T.StructField("records", T.LongType(), False),
        T.StructField("valueBytes", T.LongType(), False),
        T.StructField("partitions", T.LongType(), False),
    ]
)
