"""Record codec (protocol §3.5 record table): round trips, change-record omissions, decode errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jbod_core import records
from jbod_core.ids import LOST_DIR, UNASSIGNED_DIR, Uuid
from jbod_core.records import RecordError

A, B, C = Uuid(0x11, 0x1), Uuid(-0x22, 0x2), Uuid(0x33, -0x3)
TOPIC = Uuid(0x4444, 0x5555)

EXAMPLES: list[records.Record] = [
    records.RegisterBrokerRecord(
        broker_id=1,
        broker_epoch=17,
        incarnation_id=Uuid(9, 9),
        log_dirs=(A, B),
        has_offline_log_dirs=True,
        fenced=False,
        in_controlled_shutdown=True,
        listeners=(records.Listener(name="PLAINTEXT", host="127.0.0.1", port=9092),),
        rack="r1",
        offline_log_dirs=(C,),
    ),
    records.RegisterBrokerRecord(broker_id=2, broker_epoch=0, incarnation_id=Uuid(9, 10), log_dirs=(A,)),
    records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=17),
    records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=17, fenced=True),
    records.BrokerRegistrationChangeRecord(
        broker_id=1, broker_epoch=17, fenced=False, in_controlled_shutdown=False
    ),
    records.BrokerRegistrationChangeRecord(
        broker_id=1, broker_epoch=17, log_dirs=(), offline_log_dirs=(A, B)
    ),
    records.UnregisterBrokerRecord(broker_id=1, broker_epoch=17),
    records.TopicRecord(name="orders", topic_id=TOPIC, configs={"min.insync.replicas": "2"}),
    records.TopicRecord(name="empty", topic_id=TOPIC),
    records.PartitionRecord(
        topic_id=TOPIC,
        partition_id=3,
        replicas=(1, 2, 3),
        isr=(1, 3),
        leader=1,
        leader_epoch=4,
        partition_epoch=9,
        directories=(A, UNASSIGNED_DIR, LOST_DIR),
    ),
    records.PartitionChangeRecord(topic_id=TOPIC, partition_id=0, partition_epoch=1),
    records.PartitionChangeRecord(
        topic_id=TOPIC, partition_id=0, partition_epoch=2, leader=-1, leader_epoch=3
    ),
    records.PartitionChangeRecord(
        topic_id=TOPIC,
        partition_id=0,
        partition_epoch=2,
        replicas=(1, 2),
        isr=(2,),
        leader=2,
        leader_epoch=7,
        directories=(B, A),
    ),
    records.RemoveTopicRecord(topic_id=TOPIC),
    records.ConfigRecord(topic_id=TOPIC, name="retention.ms", value="1000"),
    records.ConfigRecord(topic_id=TOPIC, name="retention.ms", value=None),
    records.UserScramCredentialRecord(
        name="alice",
        mechanism=2,
        salt=b"\x00salt",
        stored_key=b"\xff" * 64,
        server_key=b"k" * 64,
        iterations=4096,
    ),
    records.RemoveUserScramCredentialRecord(name="alice", mechanism=2),
    records.ProducerIdsRecord(broker_id=3, broker_epoch=2**40, next_producer_id=5000),
    records.BrokerConfigRecord(broker="", name="leader.replication.throttled.rate", value="1000"),
    records.BrokerConfigRecord(broker="2", name="cordoned.log.dirs", value=None),
    records.RegisterBrokerRecord(
        broker_id=3, broker_epoch=0, incarnation_id=Uuid(9, 11), log_dirs=(A, B), cordoned_log_dirs=(B,)
    ),
    records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=17, cordoned_log_dirs=()),
    records.AccessControlEntryRecord(
        id=Uuid(5, 6),
        resource_type=2,
        resource_name="orders-",
        pattern_type=4,
        principal="User:alice",
        host="*",
        operation=4,
        permission_type=3,
    ),
    records.RemoveAccessControlEntryRecord(id=Uuid(5, 6)),
    records.ClientQuotaRecord(
        entity=(("client-id", None), ("user", "u")), key="producer_byte_rate", value=1024.0
    ),
]


@pytest.mark.parametrize("record", EXAMPLES, ids=lambda r: r.TYPE)
def test_round_trip(record: records.Record) -> None:
    assert records.decode(record.TYPE, record.to_data()) == record


def test_every_record_type_is_covered() -> None:
    assert {r.TYPE for r in EXAMPLES} == set(records.RECORD_TYPES)
    assert set(records.RECORD_TYPES) == {
        "RegisterBrokerRecord",
        "BrokerRegistrationChangeRecord",
        "UnregisterBrokerRecord",
        "TopicRecord",
        "PartitionRecord",
        "PartitionChangeRecord",
        "RemoveTopicRecord",
        "ConfigRecord",
        "UserScramCredentialRecord",
        "RemoveUserScramCredentialRecord",
        "ProducerIdsRecord",
        "BrokerConfigRecord",
        "AccessControlEntryRecord",
        "RemoveAccessControlEntryRecord",
        "ClientQuotaRecord",
    }


def test_cordoned_dirs_are_an_extension_field_that_old_records_lack() -> None:
    plain = records.RegisterBrokerRecord(
        broker_id=2, broker_epoch=0, incarnation_id=Uuid(9, 10), log_dirs=(A,)
    )
    assert "cordonedLogDirs" not in plain.to_data()
    cordoned = records.RegisterBrokerRecord(
        broker_id=3, broker_epoch=0, incarnation_id=Uuid(9, 11), log_dirs=(A, B), cordoned_log_dirs=(B,)
    )
    assert cordoned.to_data()["cordonedLogDirs"] == [str(B)]
    change = records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=17)
    assert "cordonedLogDirs" not in change.to_data()
    cleared = records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=17, cordoned_log_dirs=())
    assert cleared.to_data()["cordonedLogDirs"] == []
    assert records.decode("BrokerConfigRecord", {"broker": "", "name": "x"}) == records.BrokerConfigRecord(
        broker="", name="x", value=None
    )


def test_extension_records_use_kraft_field_names() -> None:
    assert EXAMPLES[14].to_data() == {"topicId": str(TOPIC), "name": "retention.ms", "value": "1000"}
    assert EXAMPLES[15].to_data() == {"topicId": str(TOPIC), "name": "retention.ms", "value": None}
    assert EXAMPLES[16].to_data() == {
        "name": "alice",
        "mechanism": 2,
        "salt": "AHNhbHQ=",
        "storedKey": "/" * 85 + "w==",
        "serverKey": "a2tr" * 21 + "aw==",
        "iterations": 4096,
    }
    assert EXAMPLES[17].to_data() == {"name": "alice", "mechanism": 2}
    assert EXAMPLES[18].to_data() == {"brokerId": 3, "brokerEpoch": 2**40, "nextProducerId": 5000}
    # A ConfigRecord without `value` deletes (a typed Parquet export drops nulls).
    assert records.decode("ConfigRecord", {"topicId": str(TOPIC), "name": "retention.ms"}) == EXAMPLES[15]


def test_data_uses_contract_field_names() -> None:
    assert EXAMPLES[0].to_data() == {
        "brokerId": 1,
        "brokerEpoch": 17,
        "incarnationId": str(Uuid(9, 9)),
        "logDirs": [str(A), str(B)],
        "hasOfflineLogDirs": True,
        "fenced": False,
        "inControlledShutdown": True,
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092}],
        "rack": "r1",
        "offlineLogDirs": [str(C)],
    }
    assert EXAMPLES[9].to_data() == {
        "topicId": str(TOPIC),
        "partitionId": 3,
        "replicas": [1, 2, 3],
        "isr": [1, 3],
        "leader": 1,
        "leaderEpoch": 4,
        "partitionEpoch": 9,
        "directories": [str(A), "AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAQ"],
    }
    assert EXAMPLES[7].to_data() == {
        "name": "orders",
        "topicId": str(TOPIC),
        "configs": {"min.insync.replicas": "2"},
    }
    assert EXAMPLES[6].to_data() == {"brokerId": 1, "brokerEpoch": 17}
    assert EXAMPLES[13].to_data() == {"topicId": str(TOPIC)}


def test_change_records_omit_unchanged_fields() -> None:
    assert records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=17).to_data() == {
        "brokerId": 1,
        "brokerEpoch": 17,
    }
    assert records.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=17, fenced=False).to_data() == {
        "brokerId": 1,
        "brokerEpoch": 17,
        "fenced": False,
    }
    assert records.BrokerRegistrationChangeRecord(
        broker_id=1, broker_epoch=17, log_dirs=(), offline_log_dirs=(A,)
    ).to_data() == {"brokerId": 1, "brokerEpoch": 17, "logDirs": [], "offlineLogDirs": [str(A)]}
    assert records.PartitionChangeRecord(topic_id=TOPIC, partition_id=2, partition_epoch=5).to_data() == {
        "topicId": str(TOPIC),
        "partitionId": 2,
        "partitionEpoch": 5,
    }
    assert records.PartitionChangeRecord(
        topic_id=TOPIC, partition_id=2, partition_epoch=5, isr=(1,), leader=-1, leader_epoch=8
    ).to_data() == {
        "topicId": str(TOPIC),
        "partitionId": 2,
        "partitionEpoch": 5,
        "isr": [1],
        "leader": -1,
        "leaderEpoch": 8,
    }


def test_decode_ignores_unknown_fields_and_defaults_optional_ones() -> None:
    data: dict[str, Any] = {
        "brokerId": 4,
        "brokerEpoch": 2,
        "incarnationId": str(Uuid(1, 2)),
        "logDirs": [str(A)],
        "someFutureField": {"x": 1},
    }
    assert records.decode("RegisterBrokerRecord", data) == records.RegisterBrokerRecord(
        broker_id=4, broker_epoch=2, incarnation_id=Uuid(1, 2), log_dirs=(A,)
    )
    change = records.decode("PartitionChangeRecord", {**EXAMPLES[10].to_data(), "eligibleLeaderReplicas": []})
    assert change == EXAMPLES[10]


# -- decode errors -----------------------------------------------------------------------------


def _without(data: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != key}


@pytest.mark.parametrize(
    ("record_type", "data"),
    [
        ("NoSuchRecord", {}),
        ("FenceBrokerRecord", {"id": 1, "epoch": 1}),
        ("RegisterBrokerRecord", {}),
        ("RegisterBrokerRecord", _without(EXAMPLES[0].to_data(), "incarnationId")),
        ("RegisterBrokerRecord", {**EXAMPLES[0].to_data(), "brokerId": "1"}),
        ("RegisterBrokerRecord", {**EXAMPLES[0].to_data(), "brokerId": True}),
        ("RegisterBrokerRecord", {**EXAMPLES[0].to_data(), "brokerEpoch": 1.5}),
        ("RegisterBrokerRecord", {**EXAMPLES[0].to_data(), "incarnationId": "nope"}),
        ("RegisterBrokerRecord", {**EXAMPLES[0].to_data(), "incarnationId": 5}),
        ("RegisterBrokerRecord", {**EXAMPLES[0].to_data(), "logDirs": 5}),
        ("RegisterBrokerRecord", {**EXAMPLES[0].to_data(), "logDirs": ["AAAA"]}),
        ("RegisterBrokerRecord", {**EXAMPLES[0].to_data(), "logDirs": [None]}),
        ("RegisterBrokerRecord", {**EXAMPLES[0].to_data(), "listeners": [{"name": "x"}]}),
        (
            "RegisterBrokerRecord",
            {**EXAMPLES[0].to_data(), "listeners": [{"name": "x", "host": "h", "port": "p"}]},
        ),
        ("RegisterBrokerRecord", {**EXAMPLES[0].to_data(), "listeners": [7]}),
        ("BrokerRegistrationChangeRecord", {"brokerId": 1}),
        ("BrokerRegistrationChangeRecord", {"brokerId": 1, "brokerEpoch": 2, "fenced": 1}),
        ("BrokerRegistrationChangeRecord", {"brokerId": 1, "brokerEpoch": 2, "inControlledShutdown": "yes"}),
        ("BrokerRegistrationChangeRecord", {"brokerId": 1, "brokerEpoch": 2, "logDirs": ["x"]}),
        ("UnregisterBrokerRecord", {"brokerId": 1}),
        ("TopicRecord", {"name": "t"}),
        ("TopicRecord", {"name": "t", "topicId": str(TOPIC), "configs": ["a"]}),
        ("PartitionRecord", _without(EXAMPLES[9].to_data(), "directories")),
        ("PartitionRecord", {**EXAMPLES[9].to_data(), "replicas": [1, "2"]}),
        ("PartitionRecord", {**EXAMPLES[9].to_data(), "isr": 1}),
        ("PartitionRecord", {**EXAMPLES[9].to_data(), "leader": None}),
        ("PartitionChangeRecord", {"topicId": str(TOPIC), "partitionId": 0}),
        (
            "PartitionChangeRecord",
            {"topicId": str(TOPIC), "partitionId": 0, "partitionEpoch": 1, "isr": [True]},
        ),
        (
            "PartitionChangeRecord",
            {"topicId": str(TOPIC), "partitionId": 0, "partitionEpoch": 1, "leader": "1"},
        ),
        ("RemoveTopicRecord", {}),
        ("RemoveTopicRecord", {"topicId": "AAAAAAAAAAAAAAAAAAAAA+"}),
        ("RemoveTopicRecord", None),
        ("PartitionRecord", []),
        ("ConfigRecord", {"topicId": str(TOPIC)}),
        ("ConfigRecord", {"topicId": str(TOPIC), "name": "a", "value": 1}),
        ("ConfigRecord", {"topicId": str(TOPIC), "name": 5, "value": "1"}),
        ("UserScramCredentialRecord", _without(EXAMPLES[16].to_data(), "serverKey")),
        ("UserScramCredentialRecord", {**EXAMPLES[16].to_data(), "salt": "not base64!"}),
        ("UserScramCredentialRecord", {**EXAMPLES[16].to_data(), "storedKey": [1, 2]}),
        ("UserScramCredentialRecord", {**EXAMPLES[16].to_data(), "iterations": "4096"}),
        ("RemoveUserScramCredentialRecord", {"name": "a"}),
        ("ProducerIdsRecord", {"brokerId": 1, "brokerEpoch": 2}),
        ("ProducerIdsRecord", {"brokerId": 1, "brokerEpoch": 2, "nextProducerId": 1.5}),
    ],
)
def test_decode_errors_raise_record_error(record_type: str, data: Any) -> None:
    with pytest.raises(RecordError):
        records.decode(record_type, data)


def test_missing_field_is_named() -> None:
    with pytest.raises(RecordError, match="brokerEpoch"):
        records.decode("UnregisterBrokerRecord", {"brokerId": 1})


def test_record_error_is_a_value_error() -> None:
    assert issubclass(RecordError, ValueError)


# -- property-based round trips ---------------------------------------------------------------

uuids = st.builds(Uuid, st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1))
ints = st.integers(-(2**31), 2**31 - 1)
epochs = st.integers(-1, 2**62)
uuid_tuples = st.lists(uuids, max_size=4).map(tuple)
int_tuples = st.lists(ints, max_size=4).map(tuple)


def _opt(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


any_record = st.one_of(
    st.builds(
        records.RegisterBrokerRecord,
        broker_id=ints,
        broker_epoch=epochs,
        incarnation_id=uuids,
        log_dirs=uuid_tuples,
        has_offline_log_dirs=st.booleans(),
        fenced=st.booleans(),
        in_controlled_shutdown=st.booleans(),
        listeners=st.lists(
            st.builds(records.Listener, name=st.text(), host=st.text(), port=st.integers(0, 65535)),
            max_size=2,
        ).map(tuple),
        rack=_opt(st.text()),
        offline_log_dirs=uuid_tuples,
    ),
    st.builds(
        records.BrokerRegistrationChangeRecord,
        broker_id=ints,
        broker_epoch=epochs,
        fenced=_opt(st.booleans()),
        in_controlled_shutdown=_opt(st.booleans()),
        log_dirs=_opt(uuid_tuples),
        offline_log_dirs=_opt(uuid_tuples),
    ),
    st.builds(records.UnregisterBrokerRecord, broker_id=ints, broker_epoch=epochs),
    st.builds(
        records.TopicRecord,
        name=st.text(),
        topic_id=uuids,
        configs=st.dictionaries(st.text(), st.text(), max_size=3),
    ),
    st.builds(
        records.PartitionRecord,
        topic_id=uuids,
        partition_id=ints,
        replicas=int_tuples,
        isr=int_tuples,
        leader=ints,
        leader_epoch=ints,
        partition_epoch=ints,
        directories=uuid_tuples,
    ),
    st.builds(
        records.PartitionChangeRecord,
        topic_id=uuids,
        partition_id=ints,
        partition_epoch=ints,
        replicas=_opt(int_tuples),
        isr=_opt(int_tuples),
        leader=_opt(ints),
        leader_epoch=_opt(ints),
        directories=_opt(uuid_tuples),
    ),
    st.builds(records.RemoveTopicRecord, topic_id=uuids),
    st.builds(records.ConfigRecord, topic_id=uuids, name=st.text(), value=_opt(st.text())),
    st.builds(
        records.UserScramCredentialRecord,
        name=st.text(),
        mechanism=ints,
        salt=st.binary(),
        stored_key=st.binary(),
        server_key=st.binary(),
        iterations=ints,
    ),
    st.builds(records.RemoveUserScramCredentialRecord, name=st.text(), mechanism=ints),
    st.builds(records.ProducerIdsRecord, broker_id=ints, broker_epoch=epochs, next_producer_id=epochs),
    st.builds(records.BrokerConfigRecord, broker=st.text(), name=st.text(), value=_opt(st.text())),
    st.builds(
        records.AccessControlEntryRecord,
        id=uuids,
        resource_type=ints,
        resource_name=st.text(),
        pattern_type=ints,
        principal=st.text(),
        host=st.text(),
        operation=ints,
        permission_type=ints,
    ),
    st.builds(records.RemoveAccessControlEntryRecord, id=uuids),
)


@given(any_record)
def test_any_record_round_trips(record: records.Record) -> None:
    data = record.to_data()
    assert records.decode(record.TYPE, data) == record
    if isinstance(record, records.PartitionChangeRecord | records.BrokerRegistrationChangeRecord):
        assert None not in data.values()
