"""Our brokers' error responses beside Apache Kafka 4.3.1's, field by field (issue 30).

A librdkafka consumer whose position was out of range never recovered on our brokers: the Fetch
response carried `records: null` for the errored partition where Kafka sends empty records, and
librdkafka rejects the whole response. This module sends the same error-provoking requests, on raw
connections (`RawConnection`, kio's types), to one real single-node Kafka (SASL_PLAINTEXT,
SCRAM-SHA-512, Kafka's StandardAuthorizer) and to one of our clusters (two brokers), decodes both
answers and compares them
after `normalised`: the same error codes everywhere, null exactly where Kafka sends null, empty
exactly where Kafka sends empty, and the same values except what legitimately differs between two
clusters (docs/decisions.md, "Error responses compared with Kafka's"): ids, hosts and ports,
throttle times, leader epochs, log dir paths and sizes, the lists of brokers, mechanisms and APIs
(each cluster's own), and the wording of error messages (only whether there is one counts).

Both clusters are set up alike: topic `present` (one partition, its replica on node 1) holds 5
records written before node 1 restarts and 5 after, so its leader epoch has moved on (fenced and
diverging epochs can be provoked) and epoch 0 ends at offset 5. Each group case uses a group of
its own that nobody joined. User `alice`, whom no ACL names, is refused everything on both.
Node 2 of ours does not host `present` (Kafka has one node): our
NOT_LEADER_OR_FOLLOWER is compared with Kafka's FENCED_LEADER_EPOCH, the other Fetch error that
carries the current leader (KIP-951).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import enum
import hashlib
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kio.serial import entity_reader

from e2e.kafka_tools import KafkaCluster as RealKafka
from e2e.kafka_tools import KafkaInstall, ScramUser
from jbod_kafka import protocol, record_batch
from tests.kafka_api.conftest import start_kafka_cluster
from tests.kafka_api.raw_client import RawConnection, encode_request
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TOPIC = "present"
RECORDS_BEFORE_RESTART = 5
RECORDS = 10
NO_TOPIC = "missing"
ZERO_UUID = uuid.UUID(int=0)
UNKNOWN_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
OFFSETS_TOPIC = "__consumer_offsets"
ALICE, ALICE_PASSWORD = "alice", "alice-secret"  # a user no ACL names: refused everything
# Kafka's API keys used below.
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT = 8, 9, 10, 11, 12
LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, SASL_HANDSHAKE, API_VERSIONS = 13, 14, 15, 17, 18
CREATE_TOPICS, DELETE_TOPICS, OFFSET_FOR_LEADER_EPOCH, DESCRIBE_CONFIGS = 19, 20, 23, 32
ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS, SASL_AUTHENTICATE, CREATE_PARTITIONS = 34, 35, 36, 37
DELETE_GROUPS, INCREMENTAL_ALTER_CONFIGS, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 42, 44, 45, 46
ALTER_CONFIGS = 33
OFFSET_DELETE, DESCRIBE_SCRAM, ALTER_SCRAM, DESCRIBE_CLUSTER = 47, 50, 51, 60
#: Error codes that mean "ask again" while a group coordinator loads: retried on both sides.
COORDINATOR_NOT_READY = frozenset(
    {"not_coordinator", "coordinator_load_in_progress", "coordinator_not_available"}
)


@dataclass(frozen=True)
class Side:
    """One of the two clusters compared: where to send, as whom, and its id of `present`."""

    name: str
    leader: str  # the address of node 1, which leads `present`
    other: str | None  # a broker that does not host `present` (ours only)
    user: str
    password: str
    topic_id: uuid.UUID = ZERO_UUID

    def as_user(self, user: str, password: str) -> Side:
        return dataclasses.replace(self, user=user, password=password)

    def connect(self, address: str | None = None, *, login: bool = True) -> RawConnection:
        conn = RawConnection(address or self.leader, timeout=30)
        if login:
            answer = conn.authenticate_scram(self.user, self.password)
            assert int(answer.error_code) == 0, f"{self.name}: login refused: {answer}"
        return conn

    def coordinator(self, group: str) -> str:
        """The address of `group`'s coordinator (waits while the offsets topic is being created)."""
        deadline = time.monotonic() + 60
        while True:
            with self.connect() as conn:
                answer = request(conn, FIND_COORDINATOR, 6, key_type=0, coordinator_keys=[group])
            [found] = answer.coordinators
            if int(found.error_code) == 0:
                return f"{found.host}:{int(found.port)}"
            assert time.monotonic() < deadline, f"{self.name}: no coordinator for {group}: {found}"
            time.sleep(0.2)


def request(conn: RawConnection, api_key: int, version: int, **fields: Any) -> Any:
    return conn.request(api_key, version, protocol.build(protocol.request_type(api_key, version), **fields))


def batch(values: range) -> bytes:
    return record_batch.encode_batch(0, -1, int(time.time() * 1000), [(None, b"v%d" % i) for i in values])


def metadata_of(side: Side, topic: str) -> Any:
    with side.connect() as conn:
        answer = request(
            conn,
            METADATA,
            12,
            topics=[{"name": topic, "topic_id": ZERO_UUID}],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    [found] = answer.topics
    return found


def produce(side: Side, values: range) -> None:
    """`values` appended to `present` (acks=all), retried while node 1 is not yet its leader, as a
    client retries: the metadata can name a leader a moment before it serves."""
    deadline = time.monotonic() + 60
    while True:
        with side.connect() as conn:
            answer = request(
                conn,
                PRODUCE,
                12,
                acks=-1,
                timeout=30_000,
                topic_data=[{"name": TOPIC, "partition_data": [{"index": 0, "records": batch(values)}]}],
            )
        [partition] = answer.responses[0].partition_responses
        if int(partition.error_code) == 0:
            return
        retriable = int(partition.error_code) in (5, 6)  # LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER
        assert retriable and time.monotonic() < deadline, f"{side.name}: produce failed: {partition}"
        time.sleep(0.2)


def leader_epoch(side: Side) -> int:
    """`present`'s leader epoch as node 1 sees it (-1 while node 1 does not lead it)."""
    with contextlib.suppress(OSError, AssertionError):
        found = metadata_of(side, TOPIC)
        [partition] = found.partitions
        if int(partition.error_code) == 0 and int(partition.leader_id) == 1:
            return int(partition.leader_epoch)
    return -1


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def prepare(side: Side, restart: Callable[[], Side]) -> Side:
    """`present` on node 1 with records before and after a restart of node 1, and the offsets
    topic created (a coordinator found); the side as it is after the restart."""
    with side.connect() as conn:
        created = request(
            conn,
            CREATE_TOPICS,
            7,
            topics=[
                {
                    "name": TOPIC,
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": [1]}],
                    "configs": [],
                }
            ],
            timeout=30_000,
        )
    assert int(created.topics[0].error_code) == 0, f"{side.name}: {created}"
    wait_until(lambda: leader_epoch(side) >= 0, f"{side.name}: node 1 to lead {TOPIC}")
    produce(side, range(RECORDS_BEFORE_RESTART))
    side = restart()
    wait_until(lambda: leader_epoch(side) >= 1, f"{side.name}: node 1 to lead {TOPIC} in a later epoch")
    produce(side, range(RECORDS_BEFORE_RESTART, RECORDS))
    side.coordinator("any-group")
    add_user(side, ALICE, ALICE_PASSWORD)
    for address in (side.leader, side.other or side.leader):
        wait_until(
            lambda a=address: can_log_in(side.as_user(ALICE, ALICE_PASSWORD), a),
            f"{ALICE} to log in at {address}",
        )
    return dataclasses.replace(side, topic_id=metadata_of(side, TOPIC).topic_id)


def add_user(side: Side, name: str, password: str) -> None:
    """A SCRAM-SHA-512 user `name` (no ACL names it), added through AlterUserScramCredentials."""
    salt, iterations = b"salt-of-" + name.encode(), 4096
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    upsertion = {
        "name": name,
        "mechanism": 2,
        "iterations": iterations,
        "salt": salt,
        "salted_password": salted,
    }
    with side.connect() as conn:
        answer = request(conn, ALTER_SCRAM, 0, deletions=[], upsertions=[upsertion])
    assert [int(r.error_code) for r in answer.results] == [0], f"{side.name}: {answer}"


def can_log_in(side: Side, address: str) -> bool:
    with RawConnection(address, timeout=30) as conn:
        return int(conn.authenticate_scram(side.user, side.password).error_code) == 0


@pytest.fixture(scope="module")
def kafka(install: KafkaInstall) -> Iterator[Side]:  # noqa: F811
    user = ScramUser()
    # Kafka's ACLs, as ours always are (the controller listener's PLAINTEXT principal is ANONYMOUS).
    authorizer = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{user.name};User:ANONYMOUS",
    }
    with RealKafka(install, scram=user, properties=authorizer) as real:
        side = Side("Kafka", real.bootstrap, None, user.name, user.password)

        def restart() -> Side:
            real.restart()
            return side

        yield prepare(side, restart)


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    with contextlib.ExitStack() as stack:
        cluster = start_kafka_cluster(stack, tmp_path_factory.mktemp("error-responses"), brokers=2)
        brokers = cluster.cluster.brokers

        def side() -> Side:  # a broker's Kafka port changes when it restarts
            return Side(
                "ours",
                brokers[1].kafka["SASL_PLAINTEXT"],
                brokers[2].kafka["SASL_PLAINTEXT"],
                "admin",
                cluster.admin_password,
            )

        def restart() -> Side:
            brokers[1].stop()
            brokers[1].start()
            return side()

        yield prepare(side(), restart)


# -- normalising -------------------------------------------------------------------------------

#: Fields whose values are each cluster's own: compared only as set or unset (-1, "", empty).
OWN_VALUES = frozenset(
    {
        "throttle_time",
        "cluster_id",
        "controller_id",
        "node_id",
        "leader_id",
        "broker_id",
        "host",
        "port",
        "brokers",
        "member_id",
        "error_message",
        "leader_epoch",
        "mechanisms",
        "api_keys",
        "supported_features",
        "finalized_features",
        "finalized_features_epoch",
        "log_dir",
        "total_bytes",
        "usable_bytes",
    }
)


def normalised(value: Any, name: str = "") -> Any:
    """`value` (a decoded response) as plain data: dataclasses as dicts, error codes by name,
    bytes by whether they are empty, topic ids by whether they are set, durations in ms, and the
    fields of `OWN_VALUES` by whether they are set; None stays None everywhere."""
    if value is None:
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: normalised(getattr(value, f.name), f.name) for f in dataclasses.fields(value)}
    if name in OWN_VALUES:
        return value if isinstance(value, int | str | tuple) and value in (-1, "", ()) else "<own>"
    if isinstance(value, tuple):
        return [normalised(item, name) for item in value]
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bytes):
        return b"" if not value else "<bytes>"
    if isinstance(value, uuid.UUID):
        return "<zero uuid>" if value == ZERO_UUID else "<uuid>"
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return value


def differences(ours: Any, kafka: Any, path: str = "") -> list[str]:
    """Each place where the normalised answers differ, as `path: ours X, Kafka Y`."""
    if isinstance(ours, dict) and isinstance(kafka, dict):
        out = []
        for key in sorted(set(ours) | set(kafka)):
            out += differences(ours.get(key, "<absent>"), kafka.get(key, "<absent>"), f"{path}.{key}")
        return out
    if isinstance(ours, list) and isinstance(kafka, list) and len(ours) == len(kafka):
        pairs = zip(ours, kafka, strict=True)
        return [d for i, (o, k) in enumerate(pairs) for d in differences(o, k, f"{path}[{i}]")]
    return [] if ours == kafka else [f"{path or '.'}: ours {ours!r}, Kafka {kafka!r}"]


def error_codes(value: Any) -> set[str]:
    """Every error code named anywhere in a normalised answer."""
    if isinstance(value, dict):
        own = {value["error_code"]} if isinstance(value.get("error_code"), str) else set()
        return own | {code for item in value.values() for code in error_codes(item)}
    if isinstance(value, list):
        return {code for item in value for code in error_codes(item)}
    return set()


# -- the cases ---------------------------------------------------------------------------------

Fields = Callable[[Side], dict[str, Any]]
CLOSED = "closed"  # what a broker that closed the connection instead of answering "answered"


@dataclass(frozen=True)
class Sent:
    """A request of a case: `fields(side)` of API `api_key` at `version`."""

    api_key: int
    version: int
    fields: Fields

    def body(self, side: Side) -> Any:
        return protocol.build(protocol.request_type(self.api_key, self.version), **self.fields(side))


@dataclass(frozen=True)
class Case:
    """One request sent to both sides: `fields(side)` of API `api_key` at `version`, on a
    connection (logged in unless `login` is False) to `present`'s leader, or with `group` to that
    group's coordinator (retried while it loads), after the requests `before` on the same
    connection, as `admin` (a super user) or `as_alice` (a user no ACL names). `view` picks what
    is compared, when only part of the answer is about errors.
    `deliberate` lists where ours differs from Kafka on purpose (docs/decisions.md): (path,
    our value) pairs put in Kafka's answer before the comparison."""

    name: str
    api_key: int
    version: int
    fields: Fields
    login: bool = True
    group: str | None = None
    before: tuple[Sent, ...] = ()
    view: Callable[[Any], Any] = lambda answer: answer
    deliberate: tuple[tuple[str, Any], ...] = ()
    as_alice: bool = False

    def answer(self, side: Side) -> Any:
        """The normalised answer of `side`, or CLOSED when it closed the connection instead."""
        deadline = time.monotonic() + 60
        while True:
            address = side.coordinator(self.group) if self.group is not None else None
            who = side.as_user(ALICE, ALICE_PASSWORD) if self.as_alice else side
            with who.connect(address, login=self.login) as conn:
                answer = None
                for sent in (*self.before, Sent(self.api_key, self.version, self.fields)):
                    answer = conn.answer(sent.api_key, sent.version, sent.body(side))
                    if answer is None:
                        return CLOSED
            plain = normalised(answer)
            if self.group is None or not error_codes(plain) & COORDINATOR_NOT_READY:
                return self.view(plain)
            assert time.monotonic() < deadline, f"{side.name}: {self.group}'s coordinator never got ready"
            time.sleep(0.2)

    def as_we_answer(self, kafkas: Any) -> Any:
        """Kafka's normalised answer with our `deliberate` differences in it."""
        for path, value in self.deliberate:
            *parents, last = path.removeprefix(".").split(".")
            place = kafkas
            for step in parents:
                place = place[int(step)] if isinstance(place, list) else place[step]
            place[last] = value
        return kafkas


def fixed(**fields: Any) -> Fields:
    return lambda _side: fields


def fetch(partition: dict[str, Any], *, by: str = "id", **top: Any) -> Fields:
    """A Fetch of one partition of `present` (by id, by name, or of topic `by`), not waiting."""

    def fields(side: Side) -> dict[str, Any]:
        key = {
            "id": {"topic_id": side.topic_id},
            "name": {"topic": TOPIC},
            NO_TOPIC: {"topic": NO_TOPIC},
            "unknown id": {"topic_id": UNKNOWN_ID},
        }[by]
        wanted = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20, **partition}
        return {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{**key, "partitions": [wanted]}],
            "forgotten_topics_data": [],
            **top,
        }

    return fields


def on_topic(name: str, partition: dict[str, Any], **top: Any) -> Fields:
    """ListOffsets' and OffsetForLeaderEpoch's shape: one partition of topic `name`."""
    return fixed(topics=[{"name": name, "topic": name, "partitions": [partition]}], **top)


def list_offsets(name: str, **partition: Any) -> Fields:
    wanted = {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1, **partition}
    return on_topic(name, wanted, replica_id=-1, isolation_level=0, timeout=10_000)


def epochs(name: str, **partition: Any) -> Fields:
    return on_topic(
        name, {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0, **partition}, replica_id=-1
    )


def metadata(**topic: Any) -> Fields:
    return fixed(
        topics=[{"topic_id": ZERO_UUID, **topic}],
        allow_auto_topic_creation=False,  # another change adds auto.create.topics.enable
        include_topic_authorized_operations=False,
    )


def produce_to(name: str, index: int = 0, *, acks: int = -1, records: bytes | None = None) -> Fields:
    def fields(_side: Side) -> dict[str, Any]:
        data = records if records is not None else batch(range(1))
        return {
            "acks": acks,
            "timeout": 10_000,
            "topic_data": [{"name": name, "partition_data": [{"index": index, "records": data}]}],
        }

    return fields


def with_bad_crc(records: bytes) -> bytes:
    """`records` with its CRC (bytes 17-20 of a RecordBatch v2) wrong."""
    (crc,) = struct.unpack_from(">I", records, 17)
    return records[:17] + struct.pack(">I", crc ^ 1) + records[21:]


def with_magic(records: bytes, magic: int) -> bytes:
    return records[:16] + bytes([magic]) + records[17:]


def create_topic(
    name: str, *, partitions: int = 1, rf: int = 1, configs: dict[str, str] | None = None
) -> Fields:
    topic = {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": rf,
        "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }
    return fixed(topics=[topic], timeout=10_000, validate_only=False)


def describe_configs(resource_type: int, name: str) -> Fields:
    resource = {"resource_type": resource_type, "resource_name": name, "configuration_keys": None}
    return fixed(resources=[resource], include_synonyms=False, include_documentation=False)


def alter_config(name: str, key: str, value: str, *, operation: int = 0) -> Fields:
    config = {"name": key, "config_operation": operation, "value": value}
    return fixed(
        resources=[{"resource_type": 2, "resource_name": name, "configs": [config]}], validate_only=True
    )


def legacy_alter(resource_type: int, name: str, configs: dict[str, str | None]) -> Fields:
    """AlterConfigs (the legacy whole-resource form) of one resource, validate only."""
    entries = [{"name": key, "value": value} for key, value in configs.items()]
    return fixed(
        resources=[{"resource_type": resource_type, "resource_name": name, "configs": entries}],
        validate_only=True,
    )


def group_case(
    name: str,
    api_key: int,
    version: int,
    fields: Callable[[str], dict[str, Any]],
    *,
    before: tuple[tuple[int, int, Callable[[str], dict[str, Any]]], ...] = (),
    as_alice: bool = False,
) -> Case:
    """A case about a group of its own (named after the case), sent to its coordinator after
    the requests `before` (API key, version, fields of the group)."""
    group = "g-" + name.replace(" ", "-").replace(":", "")
    earlier = tuple(Sent(key, at, fixed(**make(group))) for key, at, make in before)
    return Case(
        name, api_key, version, fixed(**fields(group)), group=group, before=earlier, as_alice=as_alice
    )


def alice(name: str, api_key: int, version: int, fields: Fields, **options: Any) -> Case:
    """A case sent as alice, whom no ACL names: every answer is an authorization error."""
    return Case(f"alice: {name}", api_key, version, fields, as_alice=True, **options)


def acl_filter(**fields: Any) -> dict[str, Any]:
    """An ACL binding filter matching nothing of this module (a topic's, literal, READ, ALLOW)."""
    return {
        "resource_type_filter": 2,
        "resource_name_filter": "no-such-acl",
        "pattern_type_filter": 3,
        "principal_filter": None,
        "host_filter": None,
        "operation": 3,
        "permission_type": 3,
        **fields,
    }


def acl(**fields: Any) -> dict[str, Any]:
    """An ACL binding (User:bob may READ topic `t`) with `fields` changed."""
    binding = {
        "resource_type": 2,
        "resource_name": "t",
        "resource_pattern_type": 3,
        "principal": "User:bob",
        "host": "*",
        "operation": 3,
        "permission_type": 3,
    }
    return {**binding, **fields}


def join(member_id: str, *, session_ms: int = 10_000, protocols: int = 1) -> Callable[[str], dict[str, Any]]:
    return lambda group: {
        "group_id": group,
        "session_timeout": session_ms,
        "rebalance_timeout": 10_000,
        "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}][:protocols],
    }


def commit(topic: str, *, generation: int = -1, member: str = "") -> Callable[[str], dict[str, Any]]:
    partition = {
        "partition_index": 0,
        "committed_offset": 1,
        "committed_leader_epoch": -1,
        "committed_metadata": "",
    }
    return lambda group: {
        "group_id": group,
        "generation_id_or_member_epoch": generation,
        "generation_id": generation,
        "member_id": member,
        "retention_time": -1,
        "topics": [{"name": topic, "partitions": [partition]}],
    }


def first_result(answer: Any) -> Any:
    """DescribeLogDirs: each cluster has its own number of log dirs; the first one's answer."""
    return {**answer, "results": answer["results"][:1]}


ERROR_FIELDS = ("error_code", "error_message")


def only_errors(key: str | None = None) -> Callable[[Any], Any]:
    """The error fields of the answer and of its first item of `key` (what a successful answer
    says about errors; each cluster has its own items)."""

    def view(answer: Any) -> Any:
        errors = {k: v for k, v in answer.items() if k in ERROR_FIELDS}
        if key is None:
            return errors
        items = [{k: v for k, v in item.items() if k in ERROR_FIELDS} for item in answer[key][:1]]
        return {**errors, key: items}

    return view


CASES = [
    # Fetch: by id (v16, librdkafka's), by name (v12), and before flexible versions (v4).
    Case("fetch unknown topic id", FETCH, 16, fetch({}, by="unknown id")),
    Case("fetch unknown topic name", FETCH, 12, fetch({}, by=NO_TOPIC)),
    Case("fetch unknown partition", FETCH, 16, fetch({"partition": 7})),
    Case("fetch unknown topic v4", FETCH, 4, fetch({}, by=NO_TOPIC)),
    Case("fetch offset out of range", FETCH, 16, fetch({"fetch_offset": 5_000})),
    Case("fetch offset out of range v12", FETCH, 12, fetch({"fetch_offset": 5_000}, by="name")),
    Case("fetch offset out of range v4", FETCH, 4, fetch({"fetch_offset": 5_000}, by="name")),
    Case("fetch fenced leader epoch", FETCH, 16, fetch({"current_leader_epoch": 0})),
    Case("fetch fenced leader epoch v12", FETCH, 12, fetch({"current_leader_epoch": 0}, by="name")),
    Case("fetch unknown leader epoch", FETCH, 16, fetch({"current_leader_epoch": 1_000})),
    Case("fetch diverging epoch", FETCH, 16, fetch({"fetch_offset": 8, "last_fetched_epoch": 0})),
    Case("fetch unknown session", FETCH, 16, fetch({}, session_id=12345, session_epoch=1)),
    # ListOffsets
    Case("list offsets unknown topic", LIST_OFFSETS, 10, list_offsets(NO_TOPIC)),
    Case("list offsets unknown partition", LIST_OFFSETS, 10, list_offsets(TOPIC, partition_index=7)),
    Case("list offsets fenced epoch", LIST_OFFSETS, 10, list_offsets(TOPIC, current_leader_epoch=0)),
    Case("list offsets unknown epoch", LIST_OFFSETS, 10, list_offsets(TOPIC, current_leader_epoch=1_000)),
    Case("list offsets of a future time", LIST_OFFSETS, 10, list_offsets(TOPIC, timestamp=4_000_000_000_000)),
    Case("list offsets unknown topic v1", LIST_OFFSETS, 1, list_offsets(NO_TOPIC)),
    # OffsetForLeaderEpoch
    Case("epochs unknown topic", OFFSET_FOR_LEADER_EPOCH, 4, epochs(NO_TOPIC)),
    Case("epochs unknown partition", OFFSET_FOR_LEADER_EPOCH, 4, epochs(TOPIC, partition=7)),
    Case("epochs fenced", OFFSET_FOR_LEADER_EPOCH, 4, epochs(TOPIC, current_leader_epoch=0)),
    Case(
        "epochs unknown current epoch", OFFSET_FOR_LEADER_EPOCH, 4, epochs(TOPIC, current_leader_epoch=1_000)
    ),
    Case("epochs of an epoch not in the log", OFFSET_FOR_LEADER_EPOCH, 4, epochs(TOPIC, leader_epoch=1_000)),
    Case("epochs unknown topic v2", OFFSET_FOR_LEADER_EPOCH, 2, epochs(NO_TOPIC)),
    # Metadata
    Case("metadata unknown topic", METADATA, 12, metadata(name=NO_TOPIC)),
    Case("metadata unknown topic id", METADATA, 12, metadata(name=None, topic_id=UNKNOWN_ID)),
    Case("metadata unknown topic v4", METADATA, 4, metadata(name=NO_TOPIC)),
    Case("metadata invalid topic name", METADATA, 12, metadata(name="bad/name")),
    # Produce
    Case("produce unknown topic", PRODUCE, 12, produce_to(NO_TOPIC)),
    Case("produce unknown partition", PRODUCE, 12, produce_to(TOPIC, 7)),
    Case(
        "produce unknown topic id",
        PRODUCE,
        13,
        lambda s: {
            **produce_to(TOPIC)(s),
            "topic_data": [
                {"topic_id": UNKNOWN_ID, "partition_data": [{"index": 0, "records": batch(range(1))}]}
            ],
        },
    ),
    Case("produce unknown topic v3", PRODUCE, 3, produce_to(NO_TOPIC)),
    Case("produce bad acks", PRODUCE, 12, produce_to(TOPIC, acks=2)),
    Case("produce bad acks v3", PRODUCE, 3, produce_to(TOPIC, acks=2)),
    Case("produce records too short", PRODUCE, 12, produce_to(TOPIC, records=b"\0" * 70)),
    Case(
        "produce records with a bad crc",
        PRODUCE,
        12,
        produce_to(TOPIC, records=with_bad_crc(batch(range(2)))),
    ),
    Case(
        "produce records of magic 1", PRODUCE, 12, produce_to(TOPIC, records=with_magic(batch(range(2)), 1))
    ),
    Case("produce to the offsets topic", PRODUCE, 12, produce_to(OFFSETS_TOPIC)),
    # CreateTopics
    Case("create existing topic", CREATE_TOPICS, 7, create_topic(TOPIC)),
    Case("create existing topic v4", CREATE_TOPICS, 4, create_topic(TOPIC)),
    Case(
        "create with an invalid config value",
        CREATE_TOPICS,
        7,
        create_topic("t1", configs={"cleanup.policy": "bogus"}),
    ),
    Case(
        "create with an unknown config", CREATE_TOPICS, 7, create_topic("t2", configs={"no.such.config": "1"})
    ),
    Case("create with too high a replication factor", CREATE_TOPICS, 7, create_topic("t3", rf=5)),
    Case("create with no partitions", CREATE_TOPICS, 7, create_topic("t4", partitions=0)),
    Case("create with a replication factor of 0", CREATE_TOPICS, 7, create_topic("t5", rf=0)),
    Case("create an invalid name", CREATE_TOPICS, 7, create_topic("bad/name")),
    Case(
        "create with an assignment and a partition count",
        CREATE_TOPICS,
        7,
        lambda side: {
            **create_topic("t6", partitions=2)(side),
            "topics": [
                {
                    "name": "t6",
                    "num_partitions": 2,
                    "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": [1]}],
                    "configs": [],
                }
            ],
        },
    ),
    # DeleteTopics
    Case(
        "delete unknown topic",
        DELETE_TOPICS,
        6,
        fixed(topics=[{"name": NO_TOPIC, "topic_id": ZERO_UUID}], timeout=10_000),
    ),
    Case(
        "delete unknown topic id",
        DELETE_TOPICS,
        6,
        fixed(topics=[{"name": None, "topic_id": UNKNOWN_ID}], timeout=10_000),
    ),
    Case("delete unknown topic v1", DELETE_TOPICS, 1, fixed(topic_names=[NO_TOPIC], timeout=10_000)),
    # Configs and partitions
    Case("describe configs of an unknown topic", DESCRIBE_CONFIGS, 4, describe_configs(2, NO_TOPIC)),
    Case("describe configs of an unknown topic v1", DESCRIBE_CONFIGS, 1, describe_configs(2, NO_TOPIC)),
    Case(
        "describe configs of the topic",
        DESCRIBE_CONFIGS,
        4,
        describe_configs(2, TOPIC),
        view=only_errors("results"),
    ),
    Case("describe configs of another broker", DESCRIBE_CONFIGS, 4, describe_configs(4, "999")),
    Case("describe configs of a broker named badly", DESCRIBE_CONFIGS, 4, describe_configs(4, "abc")),
    Case("describe configs of an unknown resource type", DESCRIBE_CONFIGS, 4, describe_configs(9, "x")),
    Case(
        "alter configs of an unknown topic",
        INCREMENTAL_ALTER_CONFIGS,
        1,
        alter_config(NO_TOPIC, "retention.ms", "1000"),
    ),
    Case(
        "alter configs with an invalid value",
        INCREMENTAL_ALTER_CONFIGS,
        1,
        alter_config(TOPIC, "cleanup.policy", "bogus"),
    ),
    Case(
        "alter configs with an unknown operation",
        INCREMENTAL_ALTER_CONFIGS,
        1,
        alter_config(TOPIC, "retention.ms", "1000", operation=9),
        deliberate=((".responses.0.error_code", "invalid_request"), (".responses.0.error_message", "<own>")),
    ),
    Case(
        "legacy alter configs of an unknown topic",
        ALTER_CONFIGS,
        2,
        legacy_alter(2, NO_TOPIC, {"retention.ms": "1000"}),
    ),
    Case("legacy alter configs v0", ALTER_CONFIGS, 0, legacy_alter(2, NO_TOPIC, {"retention.ms": "1000"})),
    Case(
        "legacy alter configs with an invalid value",
        ALTER_CONFIGS,
        2,
        legacy_alter(2, TOPIC, {"cleanup.policy": "bogus"}),
    ),
    Case(
        "create partitions of an unknown topic",
        CREATE_PARTITIONS,
        3,
        fixed(
            topics=[{"name": NO_TOPIC, "count": 3, "assignments": None}], timeout=10_000, validate_only=False
        ),
    ),
    Case(
        "create partitions fewer than there are",
        CREATE_PARTITIONS,
        3,
        fixed(topics=[{"name": TOPIC, "count": 1, "assignments": None}], timeout=10_000, validate_only=False),
    ),
    # Groups
    Case(
        "find coordinator of an invalid key type",
        FIND_COORDINATOR,
        6,
        fixed(key_type=5, coordinator_keys=["g"]),
    ),
    Case("find coordinator of an invalid key type v3", FIND_COORDINATOR, 3, fixed(key="g", key_type=5)),
    group_case("join with an unknown member id", JOIN_GROUP, 9, join("bogus")),
    group_case("join with a session timeout too short", JOIN_GROUP, 9, join("", session_ms=1)),
    group_case("join without protocols", JOIN_GROUP, 9, join("", protocols=0)),
    group_case("join without a member id", JOIN_GROUP, 9, join("")),
    group_case(
        "heartbeat unknown group",
        HEARTBEAT,
        4,
        lambda g: {"group_id": g, "generation_id": 1, "member_id": "m"},
    ),
    group_case(
        "sync unknown group",
        SYNC_GROUP,
        5,
        lambda g: {
            "group_id": g,
            "generation_id": 1,
            "member_id": "m",
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [],
        },
    ),
    group_case(
        "leave unknown group", LEAVE_GROUP, 5, lambda g: {"group_id": g, "members": [{"member_id": "m"}]}
    ),
    group_case("commit to an unknown topic", OFFSET_COMMIT, 9, commit(NO_TOPIC)),
    group_case("commit to an unknown topic v2", OFFSET_COMMIT, 2, commit(NO_TOPIC)),
    group_case(
        "commit in a generation of an unknown group",
        OFFSET_COMMIT,
        9,
        commit(TOPIC, generation=3, member="m"),
    ),
    group_case(
        "commit in a generation of an unknown group v8",
        OFFSET_COMMIT,
        8,
        commit(TOPIC, generation=3, member="m"),
    ),
    group_case(
        "offset fetch of an unknown group",
        OFFSET_FETCH,
        9,
        lambda g: {
            "groups": [{"group_id": g, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}],
            "require_stable": False,
        },
    ),
    group_case(
        "offset fetch of an unknown topic",
        OFFSET_FETCH,
        9,
        lambda g: {
            "groups": [{"group_id": g, "topics": [{"name": NO_TOPIC, "partition_indexes": [0]}]}],
            "require_stable": False,
        },
    ),
    group_case(
        "offset fetch of all topics of an unknown group",
        OFFSET_FETCH,
        9,
        lambda g: {"groups": [{"group_id": g, "topics": None}], "require_stable": False},
    ),
    group_case(
        "offset fetch of an unknown group v7",
        OFFSET_FETCH,
        7,
        lambda g: {
            "group_id": g,
            "topics": [{"name": TOPIC, "partition_indexes": [0]}],
            "require_stable": False,
        },
    ),
    group_case(
        "describe unknown group v5",
        DESCRIBE_GROUPS,
        5,
        lambda g: {"groups": [g], "include_authorized_operations": False},
    ),
    group_case(
        "describe unknown group",
        DESCRIBE_GROUPS,
        6,
        lambda g: {"groups": [g], "include_authorized_operations": False},
    ),
    group_case("delete unknown group", DELETE_GROUPS, 2, lambda g: {"groups_names": [g]}),
    group_case(
        "describe a group after a refused join",
        DESCRIBE_GROUPS,
        6,
        lambda g: {"groups": [g], "include_authorized_operations": False},
        before=((JOIN_GROUP, 9, join("bogus")),),
    ),
    group_case(
        "describe a group after a refused commit",
        DESCRIBE_GROUPS,
        6,
        lambda g: {"groups": [g], "include_authorized_operations": False},
        before=((OFFSET_COMMIT, 9, commit(NO_TOPIC)),),
    ),
    group_case(
        "list groups",
        16,
        5,
        lambda g: {"states_filter": ["Dead"], "types_filter": []},
    ),
    group_case(
        "delete offsets of an unknown group",
        OFFSET_DELETE,
        0,
        lambda g: {"group_id": g, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]},
    ),
    # Cluster, users, log dirs, reassignments
    Case(
        "describe the controllers",
        DESCRIBE_CLUSTER,
        2,
        fixed(include_cluster_authorized_operations=False, endpoint_type=2, include_fenced_brokers=False),
    ),
    Case(
        "describe an unknown endpoint type",
        DESCRIBE_CLUSTER,
        2,
        fixed(include_cluster_authorized_operations=False, endpoint_type=7, include_fenced_brokers=False),
    ),
    Case("describe an unknown user", DESCRIBE_SCRAM, 0, fixed(users=[{"name": "nobody"}])),
    Case("describe every user", DESCRIBE_SCRAM, 0, fixed(users=None), view=only_errors()),
    Case(
        "find a coordinator",
        FIND_COORDINATOR,
        6,
        fixed(key_type=0, coordinator_keys=["g-found"]),
        view=only_errors("coordinators"),
    ),
    Case("find a coordinator v3", FIND_COORDINATOR, 3, fixed(key="g-found", key_type=0), view=only_errors()),
    Case(
        "describe the cluster",
        DESCRIBE_CLUSTER,
        1,
        fixed(include_cluster_authorized_operations=False, endpoint_type=1),
        view=only_errors(),
    ),
    Case("describe client quotas", 48, 1, fixed(components=[], strict=False), view=only_errors()),
    Case("list every reassignment", LIST_REASSIGNMENTS, 0, fixed(timeout=10_000, topics=None)),
    Case(
        "delete an unknown user's credential",
        ALTER_SCRAM,
        0,
        fixed(deletions=[{"name": "nobody", "mechanism": 2}], upsertions=[]),
    ),
    Case(
        "describe log dirs of an unknown topic",
        DESCRIBE_LOG_DIRS,
        4,
        fixed(topics=[{"topic": NO_TOPIC, "partitions": [0]}]),
        view=first_result,
    ),
    Case(
        "move a replica to an unknown dir",
        ALTER_REPLICA_LOG_DIRS,
        2,
        fixed(dirs=[{"path": "/nowhere", "topics": [{"name": TOPIC, "partitions": [0]}]}]),
    ),
    Case(
        "list reassignments of an unknown topic",
        LIST_REASSIGNMENTS,
        0,
        fixed(timeout=10_000, topics=[{"name": NO_TOPIC, "partition_indexes": [0]}]),
    ),
    Case(
        "reassign an unknown topic",
        ALTER_REASSIGNMENTS,
        0,
        fixed(
            timeout=10_000,
            topics=[{"name": NO_TOPIC, "partitions": [{"partition_index": 0, "replicas": [1]}]}],
        ),
    ),
    # Authorization: alice may do nothing (as Kafka's StandardAuthorizer without an ACL for her)
    alice("metadata of the topic", METADATA, 12, metadata(name=TOPIC)),
    alice("metadata of the topic by id", METADATA, 12, lambda s: metadata(name=None, topic_id=s.topic_id)(s)),
    alice(
        "metadata of every topic",
        METADATA,
        12,
        fixed(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False),
    ),
    alice("fetch", FETCH, 16, fetch({})),
    alice("fetch by name", FETCH, 12, fetch({}, by="name")),
    alice("produce", PRODUCE, 12, produce_to(TOPIC)),
    alice("list offsets", LIST_OFFSETS, 10, list_offsets(TOPIC)),
    alice("epochs", OFFSET_FOR_LEADER_EPOCH, 4, epochs(TOPIC)),
    alice("create a topic", CREATE_TOPICS, 7, create_topic("t-alice")),
    alice(
        "delete the topic",
        DELETE_TOPICS,
        6,
        fixed(topics=[{"name": TOPIC, "topic_id": ZERO_UUID}], timeout=10_000),
    ),
    alice("describe the topic's configs", DESCRIBE_CONFIGS, 4, describe_configs(2, TOPIC)),
    alice("describe a broker's configs", DESCRIBE_CONFIGS, 4, describe_configs(4, "1")),
    alice(
        "alter the topic's configs", INCREMENTAL_ALTER_CONFIGS, 1, alter_config(TOPIC, "retention.ms", "1000")
    ),
    alice(
        "legacy alter the topic's configs", ALTER_CONFIGS, 2, legacy_alter(2, TOPIC, {"retention.ms": "1000"})
    ),
    alice(
        "legacy alter a broker's configs",
        ALTER_CONFIGS,
        2,
        legacy_alter(4, "1", {"leader.replication.throttled.rate": "1000"}),
    ),
    alice(
        "create partitions",
        CREATE_PARTITIONS,
        3,
        fixed(topics=[{"name": TOPIC, "count": 3, "assignments": None}], timeout=10_000, validate_only=False),
    ),
    alice("find a coordinator", FIND_COORDINATOR, 6, fixed(key_type=0, coordinator_keys=["g-alice"])),
    alice("find a coordinator v3", FIND_COORDINATOR, 3, fixed(key="g-alice", key_type=0)),
    group_case("alice: join", JOIN_GROUP, 9, join(""), as_alice=True),
    group_case(
        "alice: heartbeat",
        HEARTBEAT,
        4,
        lambda g: {"group_id": g, "generation_id": 1, "member_id": "m"},
        as_alice=True,
    ),
    group_case("alice: commit", OFFSET_COMMIT, 9, commit(TOPIC), as_alice=True),
    group_case(
        "alice: offset fetch",
        OFFSET_FETCH,
        9,
        lambda g: {
            "groups": [{"group_id": g, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}],
            "require_stable": False,
        },
        as_alice=True,
    ),
    group_case(
        "alice: describe a group",
        DESCRIBE_GROUPS,
        6,
        lambda g: {"groups": [g], "include_authorized_operations": False},
        as_alice=True,
    ),
    group_case("alice: delete a group", DELETE_GROUPS, 2, lambda g: {"groups_names": [g]}, as_alice=True),
    group_case(
        "alice: delete offsets",
        OFFSET_DELETE,
        0,
        lambda g: {"group_id": g, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]},
        as_alice=True,
    ),
    alice("list groups", 16, 5, fixed(states_filter=[], types_filter=[])),
    alice(
        "init a producer id",
        22,
        5,
        fixed(transactional_id=None, transaction_timeout=60_000, producer_id=-1, producer_epoch=-1),
    ),
    Case("describe a transaction nowhere coordinated", 65, 0, fixed(transactional_ids=["tx-nowhere"])),
    Case(
        "end a transaction nowhere coordinated",
        26,
        4,
        fixed(transactional_id="tx-nowhere", producer_id=7, producer_epoch=0, committed=True),
    ),
    Case(
        "init a producer id with a transaction timeout too long",
        22,
        5,
        fixed(transactional_id="tx-nowhere", transaction_timeout=900_001, producer_id=-1, producer_epoch=-1),
    ),
    alice(
        "init a transactional producer id",
        22,
        5,
        fixed(transactional_id="tx-alice", transaction_timeout=60_000, producer_id=-1, producer_epoch=-1),
    ),
    alice(
        "add partitions to a transaction v3",
        24,
        3,
        fixed(
            v3_and_below_transactional_id="tx-alice",
            v3_and_below_producer_id=7,
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=[{"name": TOPIC, "partitions": [0]}],
        ),
    ),
    alice(
        "add offsets to a transaction",
        25,
        4,
        fixed(transactional_id="tx-alice", producer_id=7, producer_epoch=0, group_id="g-alice"),
    ),
    alice(
        "end a transaction",
        26,
        4,
        fixed(transactional_id="tx-alice", producer_id=7, producer_epoch=0, committed=True),
    ),
    alice("describe a transaction", 65, 0, fixed(transactional_ids=["tx-alice"])),
    alice(
        "list transactions",
        66,
        2,
        fixed(state_filters=[], producer_id_filters=[], duration_filter=-1, transactional_id_pattern=None),
    ),
    # (users=None: Kafka 4.3.1 never answers an unauthorized DescribeUserScramCredentials of all)
    alice("describe users", DESCRIBE_SCRAM, 0, fixed(users=[{"name": "nobody"}])),
    alice(
        "delete a user's credential",
        ALTER_SCRAM,
        0,
        fixed(deletions=[{"name": "nobody", "mechanism": 2}], upsertions=[]),
    ),
    alice("describe log dirs", DESCRIBE_LOG_DIRS, 4, fixed(topics=None)),
    alice(
        "move a replica",
        ALTER_REPLICA_LOG_DIRS,
        2,
        fixed(dirs=[{"path": "/nowhere", "topics": [{"name": TOPIC, "partitions": [0]}]}]),
    ),
    alice("list reassignments", LIST_REASSIGNMENTS, 0, fixed(timeout=10_000, topics=None)),
    alice(
        "reassign",
        ALTER_REASSIGNMENTS,
        0,
        fixed(
            timeout=10_000, topics=[{"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": [1]}]}]
        ),
    ),
    alice("describe client quotas", 48, 1, fixed(components=[], strict=False)),
    alice("describe ACLs", 29, 3, fixed(**acl_filter())),
    alice("create an ACL", 30, 3, fixed(creations=[acl()])),
    alice("delete ACLs", 31, 3, fixed(filters=[acl_filter()])),
    # ACLs (admin)
    Case("describe ACLs matching none", 29, 3, fixed(**acl_filter())),
    Case("describe ACLs of an unknown resource type", 29, 3, fixed(**acl_filter(resource_type_filter=0))),
    Case("describe ACLs of an unknown operation", 29, 3, fixed(**acl_filter(operation=0))),
    Case("create an ACL of a principal without a type", 30, 3, fixed(creations=[acl(principal="bob")])),
    Case(
        "create an ACL of any resource type",
        30,
        3,
        fixed(creations=[acl(resource_type=1)]),
        deliberate=((".results.0.error_code", "invalid_request"), (".results.0.error_message", "<own>")),
    ),
    Case(
        "create an ACL of any operation",
        30,
        3,
        fixed(creations=[acl(operation=1)]),
        deliberate=((".results.0.error_code", "invalid_request"), (".results.0.error_message", "<own>")),
    ),
    Case("create an ACL of an unknown resource type", 30, 3, fixed(creations=[acl(resource_type=0)])),
    Case("create an ACL of resource type 99", 30, 3, fixed(creations=[acl(resource_type=99)])),
    Case("describe ACLs of resource type 99", 29, 3, fixed(**acl_filter(resource_type_filter=99))),
    Case("delete ACLs of resource type 99", 31, 3, fixed(filters=[acl_filter(resource_type_filter=99)])),
    Case(
        "create an ACL on a cluster not kafka-cluster",
        30,
        3,
        fixed(creations=[acl(resource_type=4, resource_name="c", operation=4)]),
    ),
    Case("delete ACLs matching none", 31, 3, fixed(filters=[acl_filter()])),
    Case("delete ACLs of an unknown pattern type", 31, 3, fixed(filters=[acl_filter(pattern_type_filter=0)])),
    # SASL
    Case("handshake with an unsupported mechanism", SASL_HANDSHAKE, 1, fixed(mechanism="NOPE"), login=False),
    Case(
        "handshake v0 with an unsupported mechanism", SASL_HANDSHAKE, 0, fixed(mechanism="NOPE"), login=False
    ),
    Case("handshake after login", SASL_HANDSHAKE, 1, fixed(mechanism="SCRAM-SHA-512")),
    Case(
        "authenticate without a handshake",
        SASL_AUTHENTICATE,
        2,
        fixed(auth_bytes=b"n,,n=admin,r=abc"),
        login=False,
    ),
    Case("authenticate after login", SASL_AUTHENTICATE, 2, fixed(auth_bytes=b"n,,n=admin,r=abc")),
    Case(
        "metadata after an authenticate after login",
        METADATA,
        12,
        metadata(name=NO_TOPIC),
        before=(Sent(SASL_AUTHENTICATE, 2, fixed(auth_bytes=b"n,,n=admin,r=abc")),),
    ),
    Case(
        "handshake during an exchange",
        SASL_HANDSHAKE,
        1,
        fixed(mechanism="SCRAM-SHA-512"),
        login=False,
        before=(Sent(SASL_HANDSHAKE, 1, fixed(mechanism="SCRAM-SHA-512")),),
    ),
    Case(
        "metadata before login",
        METADATA,
        12,
        fixed(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False),
        login=False,
    ),
]


def assert_same(case: str, mine: Any, theirs: Any) -> None:
    found = differences(mine, theirs)
    assert not found, "\n".join([f"{case}: where ours differs from Kafka's", *found, f"Kafka: {theirs}"])


@pytest.mark.parametrize("case", CASES, ids=[c.name if isinstance(c, Case) else c.id for c in CASES])
def test_the_error_response_is_kafkas(case: Case, ours: Side, kafka: Side) -> None:
    assert_same(case.name, case.answer(ours), case.as_we_answer(case.answer(kafka)))


def test_fetch_from_a_broker_that_does_not_lead_names_the_leader_as_kafka_does_for_a_fenced_epoch(
    ours: Side, kafka: Side
) -> None:
    """NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH both carry the current leader and its
    endpoint (KIP-951); a single Kafka node cannot answer the first, so ours is compared with
    Kafka's second, the error code aside."""
    assert ours.other is not None
    sent = fetch({})
    with ours.connect(ours.other) as conn:
        mine = normalised(
            conn.request(FETCH, 16, protocol.build(protocol.request_type(FETCH, 16), **sent(ours)))
        )
    fenced = fetch({"current_leader_epoch": 0})
    with kafka.connect() as conn:
        theirs = normalised(
            conn.request(FETCH, 16, protocol.build(protocol.request_type(FETCH, 16), **fenced(kafka)))
        )
    [[answered]] = [t["partitions"] for t in mine["responses"]]
    assert answered["error_code"] == "not_leader_or_follower"
    answered["error_code"] = "fenced_leader_epoch"
    assert_same("fetch from a broker that does not lead", mine, theirs)
    with ours.connect(ours.other) as conn:
        raw = conn.request(FETCH, 16, protocol.build(protocol.request_type(FETCH, 16), **sent(ours)))
    leader = raw.responses[0].partitions[0].current_leader
    assert (int(leader.leader_id), int(leader.leader_epoch)) == (1, leader_epoch(ours))
    assert [f"{e.host}:{int(e.port)}" for e in raw.node_endpoints if int(e.node_id) == 1] == [ours.leader]


def api_versions_of_a_future_version(side: Side) -> Any:
    """ApiVersions v3's body sent as a version no broker knows: the broker answers v0 (KIP-511)."""
    body = protocol.build(
        protocol.request_type(API_VERSIONS, 3), client_software_name="jbod-test", client_software_version="1"
    )
    frame = bytearray(encode_request(API_VERSIONS, 3, body, correlation_id=7))
    struct.pack_into(">h", frame, 2, 99)
    with RawConnection(side.leader) as conn:
        conn.send_frame(bytes(frame))
        answer = conn.read_frame()
    assert answer is not None, f"{side.name} closed the connection"
    assert struct.unpack_from(">i", answer) == (7,)
    response, _size = entity_reader(protocol.response_type(API_VERSIONS, 0))(answer, 4)
    return response


def test_api_versions_of_a_version_not_served_is_answered_as_kafka_does(ours: Side, kafka: Side) -> None:
    mine, theirs = api_versions_of_a_future_version(ours), api_versions_of_a_future_version(kafka)

    def versions(answer: Any) -> dict[int, tuple[int, int]]:
        return {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in answer.api_keys}

    assert int(mine.error_code) == int(theirs.error_code) == 35  # UNSUPPORTED_VERSION
    assert sorted(versions(mine)) == sorted(versions(theirs)), "the APIs listed"
    assert versions(mine)[API_VERSIONS] == versions(theirs)[API_VERSIONS]


def failed_login(side: Side) -> Any:
    """The SaslAuthenticate answer to a SCRAM login with the wrong password."""
    with side.connect(login=False) as conn:
        return normalised(conn.authenticate_scram(side.user, "wrong-password"))


def test_a_failed_login_is_answered_as_kafka_does(ours: Side, kafka: Side) -> None:
    assert_same("a SCRAM login with the wrong password", failed_login(ours), failed_login(kafka))


def test_produce_to_a_broker_that_does_not_lead_names_the_leader(ours: Side) -> None:
    """Produce v10+ answers NOT_LEADER_OR_FOLLOWER with the current leader and its endpoint, as
    Kafka's KafkaApis does (KIP-951; a single Kafka node cannot be asked, so this is ours alone);
    before v10 the response has no such fields."""
    assert ours.other is not None
    with ours.connect(ours.other) as conn:
        answer = request(conn, PRODUCE, 12, **produce_to(TOPIC)(ours))
    [partition] = answer.responses[0].partition_responses
    assert int(partition.error_code) == 6  # NOT_LEADER_OR_FOLLOWER
    assert partition.error_message is None
    leader = partition.current_leader
    assert (int(leader.leader_id), int(leader.leader_epoch)) == (1, leader_epoch(ours))
    assert [(int(e.node_id), f"{e.host}:{int(e.port)}") for e in answer.node_endpoints] == [(1, ours.leader)]
