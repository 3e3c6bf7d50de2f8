"""Rack-aware replica placement (KIP-36, KRaft's striped placer's documented behaviour): distinct
racks per partition, leaders spread over racks and brokers, rackless brokers as one rack; through
CreateTopics and CreatePartitions on an image whose brokers registered racks."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from jbod_core import records, topics
from jbod_core.messages import CreatePartitionsRequest, CreateTopicRequest
from tests.core.support import Cluster, d

_RACKS = st.sampled_from(["a", "b", "c", "d", None])


@given(
    racks=st.dictionaries(st.integers(0, 40), _RACKS, min_size=1, max_size=12),
    partitions=st.integers(1, 60),
    data=st.data(),
    seed=st.integers(0, 2**32),
)
def test_replicas_span_min_factor_racks_and_leaders_rotate(
    racks: dict[int, str | None], partitions: int, data: st.DataObject, seed: int
) -> None:
    factor = data.draw(st.integers(1, len(racks)))
    assignment = topics.stripe_replicas_by_rack(
        racks, partitions=partitions, replication_factor=factor, rng=random.Random(seed)
    )
    rack_names = set(racks.values())
    assert len(assignment) == partitions
    for replicas in assignment:
        assert len(replicas) == factor and len(set(replicas)) == factor
        assert set(replicas) <= set(racks)
        assert topics.distinct_racks(replicas, racks) == min(factor, len(rack_names))
    leaders = Counter(replicas[0] for replicas in assignment)
    if len(rack_names) > 1:
        by_rack = Counter(racks[b] for b in leaders.elements())
        counts = [by_rack.get(r, 0) for r in rack_names]
        assert max(counts) - min(counts) <= 1
        for rack in rack_names:
            members = [b for b in racks if racks[b] == rack]
            in_rack = [leaders.get(b, 0) for b in members]
            assert max(in_rack) - min(in_rack) <= 1
    else:  # one rack: Kafka's rack-unaware pattern, unchanged
        assert assignment == topics.stripe_replicas(
            sorted(racks), partitions=partitions, replication_factor=factor, rng=random.Random(seed)
        )


def test_equal_racks_share_replicas_and_leaders_evenly() -> None:
    racks = {b: "abc"[b % 3] for b in range(9)}
    assignment = topics.stripe_replicas_by_rack(
        racks, partitions=90, replication_factor=3, rng=random.Random(5)
    )
    replicas = Counter(b for r in assignment for b in r)
    leaders = Counter(r[0] for r in assignment)
    assert set(replicas.values()) == {30} and set(leaders.values()) == {10}
    assert len({tuple(sorted(r)) for r in assignment}) > 9  # replica sets vary, not 3 fixed triples


def _racked_cluster() -> Cluster:
    """Brokers 1..6 in racks a, b, c (two each); 7 without a rack; 8 in rack d but fenced."""
    cluster = Cluster()
    for broker_id in range(1, 7):
        cluster.add_broker(broker_id, [d(broker_id)], rack="abc"[(broker_id - 1) % 3])
    cluster.add_broker(7, [d(7)])
    cluster.add_broker(8, [d(8)], unfence=False, rack="d")
    return cluster


def test_create_topic_and_partitions_place_replicas_on_distinct_racks() -> None:
    cluster = _racked_cluster()
    racks = {b: reg.rack for b, reg in cluster.image.brokers.items()}
    request = CreateTopicRequest.model_validate({"name": "t", "numPartitions": 12, "replicationFactor": 3})
    produced, reply = topics.create_topic(cluster.image, request, rng=random.Random(1))
    assert reply.error_code == 0
    cluster.apply(produced)
    more, grown = topics.create_partitions(
        cluster.image, "t", CreatePartitionsRequest(name="t", total_count=20), rng=random.Random(2)
    )
    assert grown.error_code == 0
    parts = [r for r in [*produced, *more] if isinstance(r, records.PartitionRecord)]
    assert [p.partition_id for p in parts] == list(range(20))
    for part in parts:
        assert 8 not in part.replicas  # fenced: never placed
        assert topics.distinct_racks(part.replicas, racks) == 3
    # four racks (a, b, c and the rackless broker 7's): 12 leaders spread 3 per rack
    led = Counter(racks[p.leader] for p in parts[:12])
    assert sorted(led.values()) == [3, 3, 3, 3]
