"""Topic configs on our brokers beside Apache Kafka 4.3.1's, through librdkafka's AdminClient
(issue 32): the same values accepted and refused, with the same error code and message, at
CreateTopics (validate only) and IncrementalAlterConfigs; DescribeConfigs answering every key
with the same value, source, default flag and synonyms (and, asked for, Kafka's documentation
strings); and a producer refused alike by a
compacted topic (a record without a key) and by a topic's `max.message.bytes`; and DeleteRecords
moving the log start (and refusing what Kafka refuses), and a LogAppendTime topic stamping the
broker's time, as Kafka does. The produce-side configs: a topic of each `compression.type` stores
the batches of an lz4 and an uncompressed producer with Kafka's codec (read by a raw Fetch) and a
consumer reads the same records; records outside a topic's CreateTime window are refused with
Kafka's answer (raw Produce: code, message, record errors); and the legacy AlterConfigs
(librdkafka's `alter_configs`) replaces a topic's and a broker's configs as Kafka does.

What differs by design (docs/api.md, "Topic configs"): our brokers' own `log.segment.bytes` and
`log.flush.interval.ms` defaults (64 MiB where Kafka's is 1 GiB; 5 s where Kafka has none), so
the topic configs whose default comes from them are compared by source only; and `min.insync.replicas`, which Kafka's formatting sets as
a cluster-wide dynamic default.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from e2e.kafka_tools import KafkaCluster as RealKafka
from e2e.kafka_tools import KafkaInstall, ScramUser
from e2e.wait import wait_for
from jbod_core.broker_configs import FALLBACKS, OUR_DEFAULTS
from jbod_core.topic_configs import DEFINITIONS
from jbod_kafka import protocol, record_batch
from tests.kafka_api.conftest import earliest_and_values, start_kafka_cluster
from tests.kafka_api.raw_client import RawConnection
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TOPIC = "configured"
PRODUCE_KEY, FETCH_KEY, DESCRIBE_CONFIGS_KEY = 0, 1, 32
TIMEOUT = 30.0

# (key, value): refused by Kafka 4.3.1, each for another rule or type.
REFUSED = [
    ("cleanup.policy", "foo"),
    ("cleanup.policy", "compact,Delete"),
    ("compression.type", "GZIP"),
    ("compression.gzip.level", "12"),
    ("compression.lz4.level", "0"),
    ("compression.zstd.level", "23"),
    ("max.message.bytes", "abc"),
    ("max.message.bytes", "-5"),
    ("message.timestamp.type", "logappendtime"),
    ("min.cleanable.dirty.ratio", "2"),
    ("min.cleanable.dirty.ratio", "x"),
    ("preallocate", "maybe"),
    ("segment.bytes", "1048575"),
    ("segment.ms", "0"),
    ("retention.ms", "-2"),
    ("remote.storage.enable", "true"),
    ("unclean.leader.election.enable", "yes"),
    ("delete.retention.ms", "-1"),
    ("flush.messages", "0"),
    ("local.retention.bytes", "-3"),
    ("follower.replication.throttled.replicas", "x"),
    ("message.downconversion.enable", "true"),
]
# (key, value): accepted by Kafka 4.3.1.
ACCEPTED = [
    ("cleanup.policy", "compact"),
    ("cleanup.policy", "compact,delete"),
    ("cleanup.policy", " delete "),
    ("compression.type", "zstd"),
    ("compression.zstd.level", "-5"),
    ("max.message.bytes", "2000000"),
    ("message.timestamp.type", "LogAppendTime"),
    ("min.cleanable.dirty.ratio", "0.1"),
    ("preallocate", "TRUE"),
    ("segment.ms", "+60000"),
    ("retention.bytes", "-5"),
    ("unclean.leader.election.enable", "true"),
    ("leader.replication.throttled.replicas", "0:1"),
]


@dataclass
class Side:
    name: str
    config: dict[str, Any]  # librdkafka's, to log in as the admin

    def __post_init__(self) -> None:
        self.admin = AdminClient(self.config)


def _config(bootstrap: str, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
    }


def _prepare(side: Side) -> Side:
    futures = side.admin.create_topics([NewTopic(TOPIC, 1, 1)], request_timeout=TIMEOUT)
    futures[TOPIC].result(TIMEOUT)
    return side


@pytest.fixture(scope="module")
def kafka(install: KafkaInstall) -> Iterator[Side]:  # noqa: F811
    user = ScramUser()
    with RealKafka(install, scram=user) as real:
        yield _prepare(Side("Kafka", _config(real.bootstrap, user.name, user.password)))


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    with contextlib.ExitStack() as stack:
        cluster = start_kafka_cluster(stack, tmp_path_factory.mktemp("configs-vs-kafka"), brokers=1)
        bootstrap = cluster.cluster.brokers[1].kafka["SASL_PLAINTEXT"]
        yield _prepare(Side("ours", _config(bootstrap, "admin", cluster.admin_password)))


def _create_answer(side: Side, key: str, value: str) -> tuple[str, str]:
    """CreateTopics (validate only) of a topic with `key=value`: the error's name and message."""
    name = f"c-{uuid.uuid4().hex[:8]}"
    future = side.admin.create_topics(
        [NewTopic(name, 1, 1, config={key: value})], validate_only=True, request_timeout=TIMEOUT
    )[name]
    return _outcome(future)


def _outcome(future: Future[Any]) -> tuple[str, str]:
    """An admin call's error name and message, or ("NO_ERROR", "")."""
    try:
        future.result(TIMEOUT)
    except KafkaException as exc:
        error = exc.args[0]
        return error.name(), error.str()
    return "NO_ERROR", ""


def _alter_answer(side: Side, key: str, value: str, op: AlterConfigOpType) -> tuple[str, str]:
    resource = ConfigResource(
        ResourceType.TOPIC,
        TOPIC,
        incremental_configs=[ConfigEntry(key, value, incremental_operation=op)],
    )
    return _outcome(side.admin.incremental_alter_configs([resource], request_timeout=TIMEOUT)[resource])


def _described(side: Side) -> dict[str, dict[str, Any]]:
    resource = ConfigResource(ResourceType.TOPIC, TOPIC)
    entries = side.admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(TIMEOUT)
    return {
        name: {
            "value": entry.value,
            "source": entry.source,
            "is_default": entry.is_default,
            "read_only": entry.is_read_only,
            "sensitive": entry.is_sensitive,
            "synonyms": [(s.name, s.source) for s in entry.synonyms.values()],
        }
        for name, entry in entries.items()
    }


@pytest.mark.parametrize(("key", "value"), REFUSED)
def test_a_refused_value_gets_kafkas_code_and_message(kafka: Side, ours: Side, key: str, value: str) -> None:
    expected = _create_answer(kafka, key, value)
    assert expected[0] != "NO_ERROR", expected
    assert _create_answer(ours, key, value) == expected
    altered = _alter_answer(kafka, key, value, AlterConfigOpType.SET)
    assert _alter_answer(ours, key, value, AlterConfigOpType.SET) == altered


@pytest.mark.parametrize(("key", "value"), ACCEPTED)
def test_an_accepted_value_is_described_as_kafka_describes_it(
    kafka: Side, ours: Side, key: str, value: str
) -> None:
    assert _create_answer(kafka, key, value) == ("NO_ERROR", "")
    assert _create_answer(ours, key, value) == ("NO_ERROR", "")
    described = {}
    for side in (kafka, ours):
        assert _alter_answer(side, key, value, AlterConfigOpType.SET) == ("NO_ERROR", ""), side.name
        # The broker asked describes its metadata image, which follows the controller's change
        # (on either side): wait until it shows the topic's own value.
        described[side.name] = wait_for(
            lambda side=side: (
                (entry := _described(side)[key])["source"] == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
                and entry
            ),
            timeout=TIMEOUT,
            what=f"{key} set on {side.name}",
        )
        assert _alter_answer(side, key, "", AlterConfigOpType.DELETE) == ("NO_ERROR", ""), side.name
        wait_for(
            lambda side=side: _described(side)[key]["source"] != ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
            timeout=TIMEOUT,
            what=f"{key} deleted on {side.name}",
        )
    assert described["ours"] == described["Kafka"]


def test_append_to_a_key_that_is_not_a_list_is_refused_as_kafka_refuses_it(kafka: Side, ours: Side) -> None:
    expected = _alter_answer(kafka, "segment.ms", "5", AlterConfigOpType.APPEND)
    assert expected[0] == "INVALID_CONFIG"
    assert _alter_answer(ours, "segment.ms", "5", AlterConfigOpType.APPEND) == expected


def test_every_key_is_described_with_kafkas_default_source_and_synonyms(kafka: Side, ours: Side) -> None:
    theirs, mine = _described(kafka), _described(ours)
    assert sorted(mine) == sorted(theirs)
    own_settings = {  # the topic configs whose default our brokers' own settings give
        d.name
        for d in DEFINITIONS
        if d.broker_key is not None
        and any(k in OUR_DEFAULTS for k, _ in FALLBACKS.get(d.broker_key, ((d.broker_key, 1),)))
    }
    for key, entry in theirs.items():
        if key == "min.insync.replicas":
            # Kafka 4.3's `kafka-storage.sh format` writes a cluster-wide dynamic default of it
            # (for eligible leader replicas); a cluster of ours has none unless an admin sets one.
            continue
        if key in own_settings:  # the broker's own setting: its value is the broker's
            assert mine[key]["source"] == entry["source"], key
            continue
        assert mine[key] == entry, key


def _documentation(side: Side) -> dict[str, tuple[str | None, int]]:
    """DescribeConfigs v4 of the topic with `include_documentation` (a raw request: librdkafka
    does not ask for it): each key's documentation and the number of synonyms (none asked)."""
    with _raw(side) as conn:
        answer = _request(
            conn,
            DESCRIBE_CONFIGS_KEY,
            4,
            resources=[{"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}],
            include_synonyms=False,
            include_documentation=True,
        )
    [result] = answer.results
    assert int(result.error_code) == 0, (side.name, result)
    return {entry.name: (entry.documentation, len(entry.synonyms)) for entry in result.configs}


def test_every_key_is_described_with_kafkas_documentation_when_asked(kafka: Side, ours: Side) -> None:
    theirs = _documentation(kafka)
    assert sorted(theirs) == [d.name for d in DEFINITIONS]
    assert all(doc and synonyms == 0 for doc, synonyms in theirs.values())
    assert _documentation(ours) == theirs


def _produce_error(side: Side, topic: str, key: bytes | None, value: bytes) -> str:
    """The delivery error's name of one record produced to `topic` (acks=all), or NO_ERROR."""
    config = dict(side.config)
    config.update({"acks": "all", "message.timeout.ms": 20000})
    producer = Producer(config)
    errors: list[str] = []
    producer.produce(
        topic, value, key=key, on_delivery=lambda err, _msg: errors.append(err.name() if err else "NO_ERROR")
    )
    assert producer.flush(TIMEOUT) == 0
    return errors[0]


def _create(side: Side, name: str, configs: dict[str, str]) -> None:
    side.admin.create_topics([NewTopic(name, 1, 1, config=configs)], request_timeout=TIMEOUT)[name].result(
        TIMEOUT
    )


def test_a_compacted_topic_refuses_a_record_without_a_key_as_kafka_does(kafka: Side, ours: Side) -> None:
    answers = {}
    for side in (kafka, ours):
        _create(side, "compacted", {"cleanup.policy": "compact"})
        answers[side.name] = (
            _produce_error(side, "compacted", None, b"no key"),
            _produce_error(side, "compacted", b"k", b"keyed"),
        )
        # a batch mixing keyed and keyless records: each keyless one named (librdkafka fails only those)
        answers[side.name] += (
            _produce_answer(side, "compacted", _batch([1000] * 5, keys=[b"k", None, b"k", None, None])),
        )
    assert answers["Kafka"][:2] == ("INVALID_RECORD", "NO_ERROR")
    assert [index for index, _message in answers["Kafka"][2][4]] == [1, 3, 4]
    assert answers["ours"] == answers["Kafka"]


def test_a_topics_max_message_bytes_refuses_a_larger_batch_as_kafka_does(kafka: Side, ours: Side) -> None:
    answers = {}
    for side in (kafka, ours):
        _create(side, "small-batches", {"max.message.bytes": "2000"})
        answers[side.name] = (
            _produce_error(side, "small-batches", b"k", b"x" * 5000),
            _produce_error(side, "small-batches", b"k", b"x" * 500),
        )
    assert answers["Kafka"] == ("MSG_SIZE_TOO_LARGE", "NO_ERROR")
    assert answers["ours"] == answers["Kafka"]


def _delete_records(side: Side, topic: str, offset: int) -> tuple[str, int]:
    """DeleteRecords of partition 0 of `topic` before `offset`: the error's name (or NO_ERROR)
    and the low watermark."""
    partition = TopicPartition(topic, 0, offset)
    future = side.admin.delete_records([partition], request_timeout=TIMEOUT)[partition]
    try:
        deleted = future.result(TIMEOUT)
    except KafkaException as exc:
        return exc.args[0].name(), -1
    return "NO_ERROR", int(deleted.low_watermark)


def _earliest_and_values(side: Side, topic: str) -> tuple[int, list[bytes]]:
    return earliest_and_values(side.config, topic, timeout=TIMEOUT)


def test_delete_records_moves_the_log_start_as_kafka_does(kafka: Side, ours: Side) -> None:
    seen = {}
    for side in (kafka, ours):
        _create(side, "purged", {})
        _create(side, "purged-compacted", {"cleanup.policy": "compact"})
        producer = Producer({**side.config, "acks": "all", "linger.ms": 0})
        for i in range(10):
            producer.produce("purged", f"v{i}".encode(), key=b"k", partition=0)
            producer.flush(TIMEOUT)  # one batch per record: the log start lands inside no batch
        producer.produce("purged-compacted", b"v", key=b"k", partition=0)
        assert producer.flush(TIMEOUT) == 0
        seen[side.name] = (
            _delete_records(side, "purged", 4),
            _earliest_and_values(side, "purged"),
            _delete_records(side, "purged", 2),  # below the log start: nothing moves
            _delete_records(side, "purged", 11),  # past the high watermark
            _delete_records(side, "purged-compacted", 1),
            _delete_records(side, "purged", -1),  # up to the high watermark
            _earliest_and_values(side, "purged"),
        )
    assert seen["Kafka"][0] == ("NO_ERROR", 4)
    assert seen["Kafka"][1] == (4, [f"v{i}".encode() for i in range(4, 10)])
    assert seen["ours"] == seen["Kafka"]


def test_a_log_append_time_topic_stamps_the_brokers_time_as_kafka_does(kafka: Side, ours: Side) -> None:
    seen = {}
    for side in (kafka, ours):
        _create(side, "appended", {"message.timestamp.type": "LogAppendTime"})
        producer = Producer({**side.config, "acks": "all"})
        delivered: list[tuple[int, int]] = []
        before = int(time.time() * 1000)
        producer.produce(
            "appended",
            b"v",
            key=b"k",
            timestamp=1000,
            on_delivery=lambda _e, m, into=delivered: into.append(m.timestamp()),
        )
        assert producer.flush(TIMEOUT) == 0
        consumer = Consumer({**side.config, "group.id": f"g-{uuid.uuid4().hex[:8]}"})
        consumer.assign([TopicPartition("appended", 0, OFFSET_BEGINNING)])
        message = consumer.poll(TIMEOUT)
        consumer.close()
        assert message is not None and message.error() is None, side.name
        kind, stamp = message.timestamp()
        assert before - 5000 <= stamp <= int(time.time() * 1000) + 5000, (side.name, stamp)
        assert delivered[0][1] == stamp, side.name  # the produce response carries it
        seen[side.name] = (kind, delivered[0][0])
    assert seen["Kafka"] == (TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_LOG_APPEND_TIME)
    assert seen["ours"] == seen["Kafka"]


# -- produce-side configs (compression.type, the CreateTime window) and legacy AlterConfigs ----

RATE = "leader.replication.throttled.rate"
HOUR_MS = 3_600_000
# Topic (suffix) → its configs: every compression.type, with levels where the codec has one.
CODEC_TOPICS = {
    "producer": {},
    "uncompressed": {"compression.type": "uncompressed"},
    "gzip": {"compression.type": "gzip", "compression.gzip.level": "1"},
    "snappy": {"compression.type": "snappy"},
    "lz4": {"compression.type": "lz4", "compression.lz4.level": "17"},
    "zstd": {"compression.type": "zstd", "compression.zstd.level": "10"},
}


def _raw(side: Side) -> RawConnection:
    conn = RawConnection(side.config["bootstrap.servers"], timeout=TIMEOUT)
    answer = conn.authenticate_scram(side.config["sasl.username"], side.config["sasl.password"])
    assert int(answer.error_code) == 0, answer
    return conn


def _request(conn: RawConnection, api_key: int, version: int, **fields: Any) -> Any:
    return conn.request(api_key, version, protocol.build(protocol.request_type(api_key, version), **fields))


def _stored_batches(side: Side, topic: str) -> list[record_batch.BatchHeader]:
    """The headers of partition 0's batches as the broker stores them (a Fetch v12 from 0)."""
    with _raw(side) as conn:
        answer = _request(
            conn,
            FETCH_KEY,
            12,
            replica_id=-1,
            max_wait=0,
            min_bytes=0,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[
                {
                    "topic": topic,
                    "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
                }
            ],
            forgotten_topics_data=[],
        )
    [partition] = answer.responses[0].partitions
    assert int(partition.error_code) == 0, (side.name, partition)
    return list(record_batch.iter_headers(bytes(partition.records or b"")))


def _consumed(side: Side, topic: str, count: int) -> list[tuple[Any, ...]]:
    """The first `count` records of partition 0 as librdkafka reads them."""
    consumer = Consumer({**side.config, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    read: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + TIMEOUT
    while len(read) < count and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            read.append(
                (message.offset(), message.key(), message.value(), message.headers(), message.timestamp())
            )
    consumer.close()
    return read


def test_a_topics_compression_type_is_the_codec_of_its_stored_batches_as_in_kafka(
    kafka: Side, ours: Side
) -> None:
    """An lz4 producer and an uncompressed one write to a topic of each compression.type: the
    stored batches (read by a Fetch) have Kafka's codecs, producer ids and sequences, and a
    consumer reads the same records (keys, values, headers, timestamps) as from Kafka."""
    base = int(time.time() * 1000) - 1000
    stored, consumed = {}, {}
    for side in (kafka, ours):
        for suffix, configs in CODEC_TOPICS.items():
            _create(side, f"codec-{suffix}", configs)
        for codec in ("lz4", "none"):
            producer = Producer(
                {
                    **side.config,
                    "acks": "all",
                    "compression.type": codec,
                    "linger.ms": 100,
                    "enable.idempotence": True,
                }
            )
            for suffix in CODEC_TOPICS:
                for i in range(5):
                    producer.produce(
                        f"codec-{suffix}",
                        f"{codec}-{i}-".encode() * 40,
                        key=f"k{i}".encode(),
                        headers=[("h", f"{i}".encode()), ("empty", None)],
                        timestamp=base + i,
                    )
            assert producer.flush(TIMEOUT) == 0
        stored[side.name] = {
            suffix: [
                (
                    h.base_offset,
                    h.compression,
                    h.record_count,
                    h.producer_id >= 0,
                    h.base_sequence,
                    h.base_timestamp,
                    h.max_timestamp_ms,
                )
                for h in _stored_batches(side, f"codec-{suffix}")
            ]
            for suffix in CODEC_TOPICS
        }
        consumed[side.name] = {suffix: _consumed(side, f"codec-{suffix}", 10) for suffix in CODEC_TOPICS}
    codecs = {suffix: [batch[1] for batch in batches] for suffix, batches in stored["Kafka"].items()}
    assert codecs == {
        "producer": [3, 0],
        "uncompressed": [0, 0],
        "gzip": [1, 1],
        "snappy": [2, 2],
        "lz4": [3, 3],
        "zstd": [4, 4],
    }
    assert stored["ours"] == stored["Kafka"]
    assert consumed["ours"] == consumed["Kafka"]
    assert all(len(records) == 10 for records in consumed["Kafka"].values())


def _batch(timestamps: list[int], *, compression: int = 0, keys: list[bytes | None] | None = None) -> bytes:
    """One produced batch: a record per timestamp (keyed unless `keys` says otherwise, not idempotent)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for delta, timestamp in enumerate(timestamps):
        key = b"k" if keys is None else keys[delta]
        builder.append(offset=delta, timestamp=timestamp, key=key, value=b"v" * 100, headers=[])
    return bytes(builder.build())


_WINDOW = re.compile(r"within \[(-?\d+), (-?\d+)\]")


def _produce_answer(side: Side, topic: str, batch: bytes) -> tuple[Any, ...]:
    """Produce v12 of `batch`: the partition's code, base offset, log start offset, error message
    and record errors, each window `[low, high]` replaced by its width (the brokers' clocks differ)."""
    with _raw(side) as conn:
        answer = _request(
            conn,
            PRODUCE_KEY,
            12,
            acks=-1,
            timeout=30_000,
            topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        )
    [partition] = answer.responses[0].partition_responses

    def width(match: re.Match[str]) -> str:
        return f"within a window of {int(match.group(2)) - int(match.group(1))} ms"

    return (
        int(partition.error_code),
        int(partition.base_offset),
        int(partition.log_start_offset),
        partition.error_message,
        [
            (int(e.batch_index), _WINDOW.sub(width, e.batch_index_error_message or ""))
            for e in partition.record_errors
        ],
    )


def test_records_outside_a_topics_timestamp_window_are_refused_as_kafka_refuses_them(
    kafka: Side, ours: Side
) -> None:
    """Every record is checked, not the batch's max: a batch whose max is fine but one record is
    too old is refused, each record outside named; a compressed batch alike; a record too far in
    the future by Kafka's default after.max.ms; a LogAppendTime topic checks nothing."""
    now = int(time.time() * 1000)
    cases = [
        ("ts-window", [now, now - 2 * HOUR_MS, now + 2 * HOUR_MS, now - 3 * HOUR_MS], 0),
        ("ts-window", [now - 2 * HOUR_MS, now], 3),  # lz4: the max is inside, the first is not
        ("ts-window", [now - 30 * 60_000, now + 30 * 60_000], 0),  # inside: appended
        ("ts-default", [1000, now + 2 * HOUR_MS], 4),  # zstd: the default window's future edge
        ("ts-default", [1000, now], 0),  # the default has no past limit
        ("ts-append-time", [now - 2 * HOUR_MS, now + 2 * HOUR_MS], 0),  # not checked
    ]
    answers = {}
    for side in (kafka, ours):
        _create(side, "ts-window", {"message.timestamp.before.max.ms": str(HOUR_MS)})
        _create(side, "ts-default", {})
        _create(
            side,
            "ts-append-time",
            {"message.timestamp.type": "LogAppendTime", "message.timestamp.before.max.ms": str(HOUR_MS)},
        )
        answers[side.name] = [
            _produce_answer(side, topic, _batch(stamps, compression=codec)) for topic, stamps, codec in cases
        ]
        answers[side.name].append(_consumed(side, "ts-window", 2)[0][:3])  # only the good batch is in
    refused = answers["Kafka"][0]
    assert (
        refused[0] == 32 and refused[3] == "One or more records have been rejected due to invalid timestamp"
    )
    assert [index for index, _message in refused[4]] == [1, 2, 3]
    assert [answer[0] for answer in answers["Kafka"][:-1]] == [32, 32, 0, 32, 0, 0]
    assert answers["ours"] == answers["Kafka"]


def _legacy_alter(side: Side, resource: ConfigResource, *, validate_only: bool = False) -> tuple[str, str]:
    futures = side.admin.alter_configs([resource], validate_only=validate_only, request_timeout=TIMEOUT)
    return _outcome(futures[resource])


def _set_keys(side: Side, topic: str) -> dict[str, tuple[str, int]]:
    """The topic's keys set on the topic itself: value and source."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = side.admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(TIMEOUT)
    return {
        k: (e.value, e.source)
        for k, e in entries.items()
        if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }


def _broker_value(side: Side, key: str) -> tuple[str, int]:
    """Broker 1's value of `key` and its source."""
    resource = ConfigResource(ResourceType.BROKER, "1")
    entry = side.admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(TIMEOUT)[key]
    return entry.value, entry.source


def test_legacy_alter_configs_replaces_a_resources_configs_as_kafka_does(kafka: Side, ours: Side) -> None:
    """AlterConfigs (librdkafka's alter_configs): the keys given become the topic's whole configs,
    the others go back to their defaults; validate_only changes nothing; a bad value and an
    unknown topic get Kafka's code and message; a broker resource is replaced alike (read back on
    ours only: Kafka 4.3.1 does not describe the throttle rates)."""
    seen = {}
    for side in (kafka, ours):
        _create(side, "legacy", {"retention.ms": "100000", "segment.ms": "60000"})
        topic = functools.partial(ConfigResource, ResourceType.TOPIC, "legacy")
        broker = functools.partial(ConfigResource, ResourceType.BROKER, "1")
        seen[side.name] = [
            _legacy_alter(side, topic(set_config={"cleanup.policy": "compact"}), validate_only=True),
            _set_keys(side, "legacy"),
            _legacy_alter(side, topic(set_config={"cleanup.policy": "compact", "max.message.bytes": "5000"})),
            _set_keys(side, "legacy"),
            _legacy_alter(side, topic(set_config={"segment.ms": "0"})),
            _legacy_alter(side, topic(set_config={"no.such.key": "1"})),
            _set_keys(side, "legacy"),
            _legacy_alter(
                side, ConfigResource(ResourceType.TOPIC, "no-such-topic", set_config={"segment.ms": "1000"})
            )[0],
            _legacy_alter(side, topic(set_config={})),
            _set_keys(side, "legacy"),
            _legacy_alter(side, broker(set_config={RATE: "1000000"})),
            _legacy_alter(side, broker(set_config={})),
        ]
    assert seen["Kafka"][3] == {"cleanup.policy": ("compact", 1), "max.message.bytes": ("5000", 1)}
    assert seen["Kafka"][9] == {}
    assert seen["ours"] == seen["Kafka"]
    # Kafka 4.3.1 does not describe the throttle rates (dynamic-only keys): ours shows the replacement.
    broker = ConfigResource(ResourceType.BROKER, "1", set_config={RATE: "1000000"})
    assert _legacy_alter(ours, broker) == ("NO_ERROR", "")
    assert _broker_value(ours, RATE) == ("1000000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert _legacy_alter(ours, ConfigResource(ResourceType.BROKER, "1", set_config={})) == ("NO_ERROR", "")
    assert _broker_value(ours, RATE) == (str(2**63 - 1), ConfigSource.DEFAULT_CONFIG.value)
