"""The server.properties `e2e.kafka_tools.KafkaNodesCluster` gives its nodes (issue 23): a dedicated
controller that is the only voter, and brokers that reach it, replicate over the SCRAM listener
and keep their replicas in every one of their log dirs."""

from __future__ import annotations

from pathlib import Path

from e2e.kafka_tools import ScramUser, broker_properties, controller_properties, random_cluster_id


def test_the_controller_is_the_only_voter_on_its_own_listener() -> None:
    props = controller_properties(node_id=100, controller_port=9093, metadata_dir=Path("/k/meta"))
    assert props["process.roles"] == "controller"
    assert props["controller.quorum.voters"] == "100@127.0.0.1:9093"
    assert props["listeners"] == "CONTROLLER://127.0.0.1:9093"
    assert props["log.dirs"] == "/k/meta"


def test_a_broker_replicates_over_its_scram_listener_into_every_log_dir() -> None:
    user = ScramUser()
    props = broker_properties(
        node_id=2,
        port=9192,
        controller_id=100,
        controller_port=9093,
        log_dirs=[Path("/k/d0"), Path("/k/d1")],
        scram=user,
    )
    assert props["process.roles"] == "broker"
    assert props["controller.quorum.voters"] == "100@127.0.0.1:9093"
    assert props["listeners"] == props["advertised.listeners"] == "SASL_PLAINTEXT://127.0.0.1:9192"
    assert props["inter.broker.listener.name"] == "SASL_PLAINTEXT"
    assert props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert props["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"] == user.jaas_config
    assert props["log.dirs"] == "/k/d0,/k/d1"


def test_without_scram_a_broker_serves_plaintext() -> None:
    props = broker_properties(
        node_id=1, port=1, controller_id=100, controller_port=2, log_dirs=[Path("/d")], scram=None
    )
    assert props["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    assert not any(key.startswith("sasl.") for key in props)


def test_a_random_cluster_id_never_starts_with_a_dash() -> None:
    """`kafka-storage.sh format -t -abc...` reads such an id as an option and fails (one id in 64
    did: a module's Kafka then never started); Kafka's own `Uuid.randomUuid` skips them too."""
    ids = [random_cluster_id() for _ in range(2000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 22 for i in ids) and len(set(ids)) == len(ids)
