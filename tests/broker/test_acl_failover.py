"""ACLs survive a controller failover (issue 25): a quorum of three controllers on etcd, one broker
with a SASL_PLAINTEXT listener. A SCRAM user granted WRITE on a prefix produces with librdkafka
(acks=all); the active controller is killed with SIGKILL; the new active one lists the same ACLs,
decides on them (a deletion finds them), and the broker keeps authorizing by them: the user still
produces where allowed and is refused where the deleted ACL allowed it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from jbod_core.messages import AlterScramCredentialsRequest, ScramCredentialUpsertion
from jbod_core.scram import salted_password
from tests.broker.conftest import Cluster, start_cluster, wait_for
from tests.kafka_api.conftest import KAFKA_LISTENERS

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SALT = b"acl-failover-salt"


def _acl(name: str, pattern: str = "PREFIXED") -> dict[str, str]:
    return {
        "resourceType": "TOPIC",
        "resourceName": name,
        "patternType": pattern,
        "principal": "User:dave",
        "host": "*",
        "operation": "WRITE",
        "permissionType": "ALLOW",
    }


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with contextlib.ExitStack() as stack:
        cluster = start_cluster(stack, tmp_path, quorum=True, admin_timeout=10)
        cluster.add_broker(
            1,
            properties={
                "listeners": KAFKA_LISTENERS,
                "admin.token.file": str(cluster.controller.admin_token_file),
            },
        )
        wait_for(lambda: cluster.all_unfenced(1), timeout=60, what="an unfenced broker")
        yield cluster


def _produce(cluster: Cluster, topic: str) -> KafkaError | None:
    broker = cluster.brokers[1]
    assert broker.kafka is not None
    config: dict[str, Any] = {
        "bootstrap.servers": broker.kafka["SASL_PLAINTEXT"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "dave",
        "sasl.password": "dave-pw",
        "acks": "all",
        "enable.idempotence": True,
        "message.timeout.ms": 20_000,
    }
    producer = Producer(config)
    outcome: list[KafkaError | None] = []
    producer.produce(topic, value=b"v", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(40)
    assert len(outcome) == 1
    return outcome[0]


def test_acls_survive_a_controller_failover(cluster: Cluster) -> None:
    upsertion = ScramCredentialUpsertion(
        name="dave",
        mechanism=2,
        iterations=4096,
        salt=SALT,
        salted_password=salted_password(b"dave-pw", SALT, 4096, mechanism=2),
    )
    assert (
        cluster.admin.alter_scram_credentials(AlterScramCredentialsRequest(upsertions=[upsertion]))
        .results[0]
        .error_code
        == 0
    )
    for topic in ("events-a", "audit"):
        cluster.admin.create_topic(topic, partitions=1, replication_factor=1)
    results = cluster.admin.create_acls([_acl("events-"), _acl("audit", "LITERAL")])
    assert [r["errorCode"] for r in results] == [0, 0]
    before = cluster.admin.describe_acls()
    assert len(before) == 2
    wait_for(lambda: _produce(cluster, "events-a") is None, timeout=30, what="dave may write events-a")

    active = cluster.active_controller()
    cluster.controllers[active].kill()
    cluster.active_controller(other_than=active, timeout=60)

    assert cluster.admin.describe_acls() == before
    assert _produce(cluster, "events-a") is None
    # The new active controller decides on the ACLs it recovered: the deletion finds the one ACL.
    deleted = cluster.admin.delete_acls([{"resourceName": "audit"}])
    assert deleted == [{"errorCode": 0, "errorMessage": None, "matchingAcls": [_acl("audit", "LITERAL")]}]
    wait_for(
        lambda: (
            (err := _produce(cluster, "audit")) is not None
            and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        ),
        timeout=30,
        what="dave refused on audit once its ACL is deleted",
    )
    assert cluster.admin.describe_acls() == [_acl("events-")]
