"""Topic creation and deletion (protocol §3.5): checks, placement, directory defaults, exact records."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jbod_core import ids, records, topics
from jbod_core.errors import ErrorCode
from jbod_core.ids import UNASSIGNED_DIR
from jbod_core.messages import CreateTopicReply, CreateTopicRequest
from tests.core.support import Cluster, d


def _create(cluster: Cluster, seed: int = 0, **fields: Any) -> tuple[list[records.Record], CreateTopicReply]:
    request = CreateTopicRequest.model_validate({"name": "t", **fields})
    return topics.create_topic(cluster.image, request, rng=random.Random(seed))


def _cluster() -> Cluster:
    """Brokers 1 (one dir), 2 (two dirs), 3 (one dir) unfenced; 4 fenced; 5 in controlled shutdown."""
    cluster = Cluster()
    cluster.add_broker(1, [d(1)])
    cluster.add_broker(2, [d(2), d(22)])
    cluster.add_broker(3, [d(3)])
    cluster.add_broker(4, [d(4)], unfence=False)
    cluster.add_broker(5, [d(5)])
    cluster.add_topic([([5], [5], 5, [d(5)])], name="led-by-5")
    cluster.apply(cluster.heartbeat(5, want_shut_down=True)[0])
    assert cluster.image.brokers[5].in_controlled_shutdown
    return cluster


def _rejected(cluster: Cluster, code: int, **fields: Any) -> None:
    before = cluster.image.canonical()
    produced, reply = _create(cluster, **fields)
    assert produced == []
    assert reply.error_code == code
    assert reply.error_message
    assert reply.topic_id is None
    assert cluster.image.canonical() == before


# -- rejections --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "a" * 250, "a b", "a/b", "ä", "t!", ".", "..", "a\n"])
def test_illegal_names_are_17(name: str) -> None:
    _rejected(_cluster(), ErrorCode.INVALID_TOPIC_EXCEPTION, name=name, numPartitions=1, replicationFactor=1)


@pytest.mark.parametrize("name", ["a" * 249, "a.b-c_D9", "...", "-", "_"])
def test_legal_names(name: str) -> None:
    produced, reply = _create(_cluster(), name=name, numPartitions=1, replicationFactor=1)
    assert reply.error_code == 0
    assert produced[0] == records.TopicRecord(name=name, topic_id=reply.topic_id, configs={})  # type: ignore[arg-type]


def test_existing_name_is_36() -> None:
    _rejected(
        _cluster(), ErrorCode.TOPIC_ALREADY_EXISTS, name="led-by-5", numPartitions=1, replicationFactor=1
    )


@pytest.mark.parametrize("partitions", [0, -1, 10_001])
def test_bad_partition_counts_are_37(partitions: int) -> None:
    _rejected(_cluster(), ErrorCode.INVALID_PARTITIONS, numPartitions=partitions, replicationFactor=1)


def test_too_many_manual_partitions_are_37() -> None:
    _rejected(_cluster(), ErrorCode.INVALID_PARTITIONS, replicaAssignment=[[1]] * 10_001)
    _rejected(_cluster(), ErrorCode.INVALID_PARTITIONS, replicaAssignment=[])


@pytest.mark.parametrize("factor", [0, -1, 4])
def test_bad_replication_factors_are_38(factor: int) -> None:
    # Three active brokers: 1, 2, 3 (4 is fenced, 5 is shutting down).
    _rejected(_cluster(), ErrorCode.INVALID_REPLICATION_FACTOR, numPartitions=1, replicationFactor=factor)


def test_no_active_broker_is_38() -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(1)], unfence=False)
    _rejected(cluster, ErrorCode.INVALID_REPLICATION_FACTOR, numPartitions=1, replicationFactor=1)


@pytest.mark.parametrize(
    "fields",
    [
        {"replicaAssignment": [[1, 9]]},  # unknown broker
        {"replicaAssignment": [[1, 1]]},  # duplicate
        {"replicaAssignment": [[1, 2], [3]]},  # uneven replication factors
        {"replicaAssignment": [[]]},
        {"replicaAssignment": [[1, 2]], "numPartitions": 2},
        {"replicaAssignment": [[1, 2]], "replicationFactor": 1},
        {"replicaAssignment": [[1, 2], [4, 5]]},  # partition 1 has no active replica
        {"replicaAssignment": [[4]]},
    ],
)
def test_bad_manual_assignments_are_39(fields: dict[str, Any]) -> None:
    _rejected(_cluster(), ErrorCode.INVALID_REPLICA_ASSIGNMENT, **fields)


def test_check_order() -> None:
    cluster = _cluster()
    _rejected(cluster, 17, name="", numPartitions=0, replicationFactor=0)
    _rejected(cluster, 36, name="led-by-5", numPartitions=0, replicationFactor=0)
    _rejected(cluster, 37, numPartitions=0, replicationFactor=0)
    _rejected(cluster, 38, numPartitions=1, replicationFactor=9, configs={"x": "y"})
    _rejected(cluster, 39, replicaAssignment=[[1, 1]], configs={"x": "y"})


@pytest.mark.parametrize(
    "configs",
    [
        {"retention.ms": "banana"},
        {"segment.bytes": "1"},
        {"retention.ms": "-2"},
        {"min.insync.replicas": "0"},
        {"cleanup.policy": "compacted"},
        {"min.insync.replicas": "3"},  # above the replication factor 2
    ],
)
def test_bad_configs_are_40_naming_the_key(configs: dict[str, str]) -> None:
    cluster = _cluster()
    _rejected(cluster, ErrorCode.INVALID_CONFIG, numPartitions=2, replicationFactor=2, configs=configs)
    _rejected(cluster, ErrorCode.INVALID_CONFIG, replicaAssignment=[[1, 2]], configs=configs)
    _produced, reply = _create(cluster, numPartitions=1, replicationFactor=2, configs=configs)
    assert next(iter(configs)) in (reply.error_message or "")


def _created_configs(default: int | None, **fields: Any) -> dict[str, str]:
    request = CreateTopicRequest.model_validate({"name": "t", **fields})
    produced, reply = topics.create_topic(
        _cluster().image, request, rng=random.Random(0), default_min_insync_replicas=default
    )
    assert reply.error_code == 0, reply
    topic = produced[0]
    assert isinstance(topic, records.TopicRecord)
    return dict(topic.configs)


def test_the_default_min_insync_replicas_is_capped_at_the_replication_factor() -> None:
    assert _created_configs(2, numPartitions=1, replicationFactor=3) == {"min.insync.replicas": "2"}
    assert _created_configs(2, replicaAssignment=[[3]]) == {"min.insync.replicas": "1"}
    assert _created_configs(2, replicaAssignment=[[3]], configs={"min.insync.replicas": "1"}) == {
        "min.insync.replicas": "1"
    }
    assert _created_configs(None, numPartitions=1, replicationFactor=1) == {}


# -- success -----------------------------------------------------------------------------------


def test_manual_assignment_records() -> None:
    cluster = _cluster()
    produced, reply = _create(
        cluster,
        name="orders",
        replicaAssignment=[[2, 1, 4], [4, 5, 3], [1, 3, 2]],
        configs={"min.insync.replicas": "2"},
    )
    assert (reply.error_code, reply.num_partitions, reply.replication_factor) == (0, 3, 3)
    topic_id = reply.topic_id
    assert topic_id is not None and not topic_id.is_reserved
    assert produced == [
        records.TopicRecord(name="orders", topic_id=topic_id, configs={"min.insync.replicas": "2"}),
        records.PartitionRecord(
            topic_id=topic_id,
            partition_id=0,
            replicas=(2, 1, 4),
            isr=(2, 1),  # 4 is fenced
            leader=2,
            leader_epoch=0,
            partition_epoch=0,
            directories=(UNASSIGNED_DIR, d(1), d(4)),  # multi-dir → UNASSIGNED; single → its dir
        ),
        records.PartitionRecord(
            topic_id=topic_id,
            partition_id=1,
            replicas=(4, 5, 3),
            isr=(3,),  # 4 fenced, 5 shutting down
            leader=3,
            leader_epoch=0,
            partition_epoch=0,
            directories=(d(4), d(5), d(3)),
        ),
        records.PartitionRecord(
            topic_id=topic_id,
            partition_id=2,
            replicas=(1, 3, 2),
            isr=(1, 3, 2),
            leader=1,
            leader_epoch=0,
            partition_epoch=0,
            directories=(d(1), d(3), UNASSIGNED_DIR),
        ),
    ]
    cluster.apply(produced)
    assert cluster.image.topic_ids_by_name["orders"] == topic_id
    assert cluster.image.topics[topic_id].configs == {"min.insync.replicas": "2"}
    assert cluster.image.unassigned_by_broker == {2: {(topic_id, 0), (topic_id, 2)}}
    assert cluster.image.offline_replicas(cluster.part(1, topic_id)) == [4]


def test_manual_assignment_with_matching_counts() -> None:
    produced, reply = _create(_cluster(), replicaAssignment=[[1], [3]], numPartitions=2, replicationFactor=1)
    assert (reply.error_code, len(produced)) == (0, 3)


def test_directory_of_a_multi_dir_broker_with_one_dir_left_online() -> None:
    cluster = Cluster()
    cluster.add_broker(1, [d(1), d(11)])
    cluster.apply(cluster.heartbeat(1, offline=[d(11)])[0])
    produced, _ = _create(cluster, numPartitions=1, replicationFactor=1)
    assert isinstance(produced[1], records.PartitionRecord)
    assert produced[1].directories == (d(1),)  # "the broker's only online dir"


def test_automatic_placement_records() -> None:
    cluster = _cluster()
    produced, reply = _create(cluster, seed=3, numPartitions=6, replicationFactor=2)
    assert (reply.error_code, reply.num_partitions, reply.replication_factor) == (0, 6, 2)
    assert isinstance(produced[0], records.TopicRecord)
    assert produced[0].topic_id == reply.topic_id
    parts = produced[1:]
    assert len(parts) == 6
    directory = {1: d(1), 2: UNASSIGNED_DIR, 3: d(3)}
    for index, part in enumerate(parts):
        assert isinstance(part, records.PartitionRecord)
        assert part.partition_id == index
        assert len(set(part.replicas)) == 2
        assert set(part.replicas) <= {1, 2, 3}
        assert part.isr == part.replicas
        assert part.leader == part.replicas[0]
        assert (part.leader_epoch, part.partition_epoch) == (0, 0)
        assert part.directories == tuple(directory[b] for b in part.replicas)
    leaders = [p.leader for p in parts if isinstance(p, records.PartitionRecord)]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]
    cluster.apply(produced)


def test_topic_ids_avoid_existing_ones() -> None:
    cluster = _cluster()
    produced, reply = _create(cluster, seed=11, numPartitions=1, replicationFactor=1)
    cluster.apply(produced)
    # The same seed draws the same id first: it is taken, so the next one is used.
    _, again = _create(cluster, seed=11, name="u", numPartitions=1, replicationFactor=1)
    assert again.error_code == 0
    assert again.topic_id is not None and again.topic_id != reply.topic_id
    rng = random.Random(11)
    topics.stripe_replicas([1, 2, 3], partitions=1, replication_factor=1, rng=rng)
    assert ids.random_uuid(rng) == reply.topic_id


@given(
    brokers=st.lists(st.integers(0, 50), min_size=1, max_size=8, unique=True).map(sorted),
    partitions=st.integers(1, 40),
    data=st.data(),
    seed=st.integers(0, 2**32),
)
def test_striping_puts_replicas_on_distinct_brokers_and_spreads_leaders(
    brokers: list[int], partitions: int, data: st.DataObject, seed: int
) -> None:
    factor = data.draw(st.integers(1, len(brokers)))
    assignment = topics.stripe_replicas(
        brokers, partitions=partitions, replication_factor=factor, rng=random.Random(seed)
    )
    assert len(assignment) == partitions
    for replicas in assignment:
        assert len(replicas) == factor
        assert len(set(replicas)) == factor
        assert set(replicas) <= set(brokers)
    leader_counts = [sum(1 for r in assignment if r[0] == b) for b in brokers]
    assert max(leader_counts) - min(leader_counts) <= 1


def test_active_brokers_and_default_directory() -> None:
    cluster = _cluster()
    assert topics.active_brokers(cluster.image) == [1, 2, 3]
    assert topics.default_directory(cluster.image, 1) == d(1)
    assert topics.default_directory(cluster.image, 2) == UNASSIGNED_DIR
    assert topics.default_directory(cluster.image, 4) == d(4)
    assert topics.default_directory(cluster.image, 99) == UNASSIGNED_DIR


# -- deletion ----------------------------------------------------------------------------------


def test_delete_topic() -> None:
    cluster = _cluster()
    produced, reply = _create(cluster, name="gone", numPartitions=3, replicationFactor=2)
    cluster.apply(produced)
    topic_id = reply.topic_id
    assert topic_id is not None
    produced, deleted = topics.delete_topic(cluster.image, "gone")
    assert produced == [records.RemoveTopicRecord(topic_id=topic_id)]
    assert (deleted.error_code, deleted.topic_id) == (0, topic_id)
    cluster.apply(produced)
    assert topic_id not in cluster.image.topics
    assert "gone" not in cluster.image.topic_ids_by_name
    assert all(topic_id not in {k[0] for k in keys} for keys in cluster.image.replicas_by_broker.values())


def test_delete_unknown_topic_is_3() -> None:
    produced, reply = topics.delete_topic(_cluster().image, "nope")
    assert produced == []
    assert reply.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
