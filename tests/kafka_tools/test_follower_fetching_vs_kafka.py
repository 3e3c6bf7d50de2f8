"""The racks scenario of tests/kafka_api/test_follower_fetching.py against a real Apache Kafka 4.3.1
of three brokers in racks a, b, c with the RackAwareReplicaSelector: the same client code sees the
same placement rules and the same follower fetching (librdkafka fetches from the follower of its
`client.rack`, and from the leader without one); and Kafka's Java consumer on our racked cluster."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from e2e.kafka_tools import KafkaInstall, KafkaNodesCluster, run_tool
from jbod_client.controller import read_token
from jbod_core.replica_selector import RACK_AWARE_SELECTOR
from jbod_local.kafka_clients import client_properties
from tests.broker.conftest import wait_for
from tests.kafka_api.test_follower_fetching import (
    RACKS,
    RECORDS,
    SENT,
    follower_bytes,
    placement_and_follower_fetching,
    racked_cluster,
)
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


def test_kafkas_java_consumer_reads_from_our_follower_in_its_rack(
    install: KafkaInstall,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Kafka's own consumer (incremental fetch sessions, KIP-227) with `client.rack` on our racked
    cluster: every record once, in order, served by the follower of its rack."""
    with contextlib.ExitStack() as stack:
        cluster = racked_cluster(stack, tmp_path)
        config = cluster.kafka_config()
        admin = AdminClient(config)
        admin.create_topics([NewTopic("java", 1, 3)])["java"].result(30)
        producer = Producer({**config, "acks": "all"})
        for value in SENT:
            producer.produce("java", value, partition=0)
        assert producer.flush(30) == 0
        part = admin.list_topics("java", timeout=30).topics["java"].partitions[0]
        follower = next(b for b in part.replicas if b != part.leader)
        wait_for(
            lambda: (
                set(admin.list_topics("java", timeout=30).topics["java"].partitions[0].isrs)
                == set(part.replicas)
            ),
            what="every replica in sync",
        )
        before = follower_bytes(cluster, follower)
        properties = tmp_path / "admin.properties"
        properties.write_text(client_properties(read_token(cluster.controller.admin_token_file)))
        args = ["--topic", "java", "--partition", "0", "--offset", "earliest", "--max-messages", str(RECORDS),
                "--timeout-ms", "60000", "--command-property", f"client.rack={RACKS[follower]}"]  # fmt: skip
        read = run_tool(
            "kafka-console-consumer.sh",
            args,
            bootstrap=cluster.kafka_bootstrap,
            command_config=properties,
            install=install,
        )
        assert read.returncode == 0, read.stderr
        assert read.stdout.splitlines() == [v.decode() for v in SENT]
        assert follower_bytes(cluster, follower) - before >= sum(map(len, SENT))
