"""The racks scenario of tests/kafka_api/test_follower_fetching.py against a real Apache Kafka 4.3.1
of three brokers in racks a, b, c with the RackAwareReplicaSelector: the same client code sees the
same placement rules and the same follower fetching (librdkafka fetches from the follower of its
`client.rack`, and from the leader without one)."""

from __future__ import annotations

import pytest

from e2e.kafka_tools import KafkaInstall, KafkaNodesCluster
from jbod_core.replica_selector import RACK_AWARE_SELECTOR
from tests.kafka_api.test_follower_fetching import RACKS, placement_and_follower_fetching
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_kafka_places_and_serves_followers_alike(install: KafkaInstall) -> None:  # noqa: F811
    settings = {
        b: {
            "broker.rack": rack,
            "replica.selector.class": RACK_AWARE_SELECTOR,
            "offsets.topic.replication.factor": "1",
        }
        for b, rack in RACKS.items()
    }
    with KafkaNodesCluster(install, brokers=3, log_dir_count=1, broker_settings=settings) as kafka:
        seen = placement_and_follower_fetching({"bootstrap.servers": kafka.bootstrap})
    assert (seen.with_rack["leader"], seen.with_rack["broker"]) == (seen.leader, seen.follower)
    assert seen.without_rack["broker"] == seen.leader
