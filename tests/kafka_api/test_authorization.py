"""Every Kafka API a broker answers is authorized as Kafka's KafkaApis authorizes it (issue 25):
raw requests (kio-encoded) from a SCRAM user with no ACL get Kafka's per-resource code — topic
29, group 30, cluster 31 — and the same requests succeed once the matching ACL is granted."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from jbod_core.messages import AlterScramCredentialsRequest, ScramCredentialUpsertion
from jbod_core.scram import salted_password
from jbod_kafka import protocol
from tests.kafka_api.conftest import KafkaCluster
from tests.kafka_api.raw_client import RawConnection

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TRANSACTIONAL_ID_DENIED = 29, 30, 31, 53
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


def _request(key: int, version: int, **fields: Any) -> tuple[int, int, Any]:
    return key, version, protocol.build(protocol.request_type(key, version), **fields)


def _cases(topic: str, group: str) -> list[tuple[str, tuple[int, int, Any], Callable[[Any], int], int]]:
    """(what, request, the error code in its response, the code without an ACL)."""
    return [
        (
            "Fetch",
            _request(
                1, 12, max_wait=0, min_bytes=0, topics=[{"topic": topic, "partitions": [
                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}],
                forgotten_topics_data=[],
            ),
            lambda r: int(r.responses[0].partitions[0].error_code),
            TOPIC_DENIED,
        ),
        (
            # A follower's fetch (a replica id): CLUSTER_ACTION, else every partition 29 (Kafka's
            # KafkaApis.handleFetchRequest), never CLUSTER_AUTHORIZATION_FAILED.
            "Fetch as a replica",
            _request(
                1, 12, replica_id=2, max_wait=0, min_bytes=0, topics=[{"topic": topic, "partitions": [
                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}],
                forgotten_topics_data=[],
            ),
            lambda r: int(r.responses[0].partitions[0].error_code),
            TOPIC_DENIED,
        ),
        (
            "ListOffsets",
            _request(2, 7, replica_id=-1, isolation_level=0, topics=[
                {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]),
            lambda r: int(r.topics[0].partitions[0].error_code),
            TOPIC_DENIED,
        ),
        (
            "OffsetCommit",
            _request(8, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
                {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                                "committed_metadata": None}]}]),
            lambda r: int(r.topics[0].partitions[0].error_code),
            GROUP_DENIED,
        ),
        (
            "OffsetFetch",
            _request(9, 7, group_id=group, topics=None),
            lambda r: int(r.error_code),
            GROUP_DENIED,
        ),
        (
            "DescribeGroups",
            _request(15, 5, groups=[group], include_authorized_operations=False),
            lambda r: int(r.groups[0].error_code),
            GROUP_DENIED,
        ),
        (
            "DeleteGroups",
            _request(42, 2, groups_names=[group]),
            lambda r: int(r.results[0].error_code),
            GROUP_DENIED,
        ),
        (
            "DeleteTopics",
            _request(20, 6, topics=[{"name": topic, "topic_id": None}], timeout=5000),
            lambda r: int(r.responses[0].error_code),
            TOPIC_DENIED,
        ),
        (
            "CreatePartitions",
            _request(37, 3, topics=[{"name": topic, "count": 2, "assignments": None}], timeout=5000,
                     validate_only=True),
            lambda r: int(r.results[0].error_code),
            TOPIC_DENIED,
        ),
        (
            "DescribeConfigs topic",
            _request(32, 4, resources=[{"resource_type": TOPIC_RESOURCE, "resource_name": topic}]),
            lambda r: int(r.results[0].error_code),
            TOPIC_DENIED,
        ),
        (
            "DescribeConfigs broker",
            _request(32, 4, resources=[{"resource_type": BROKER_RESOURCE, "resource_name": "1"}]),
            lambda r: int(r.results[0].error_code),
            CLUSTER_DENIED,
        ),
        (
            "IncrementalAlterConfigs topic",
            _request(44, 1, validate_only=True, resources=[
                {"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configs": [
                    {"name": "retention.ms", "config_operation": 0, "value": "60000"}]}]),
            lambda r: int(r.responses[0].error_code),
            TOPIC_DENIED,
        ),
        (
            "IncrementalAlterConfigs broker",
            _request(44, 1, validate_only=True, resources=[
                {"resource_type": BROKER_RESOURCE, "resource_name": "1", "configs": [
                    {"name": "leader.replication.throttled.rate", "config_operation": 0, "value": "1000"}]}]),
            lambda r: int(r.responses[0].error_code),
            CLUSTER_DENIED,
        ),
        (
            "InitProducerId",
            _request(22, 4, transactional_id=None, transaction_timeout=60000),
            lambda r: int(r.error_code),
            CLUSTER_DENIED,
        ),
        (
            # WRITE on the transactional id is checked before READ on the group (Kafka's KafkaApis).
            "TxnOffsetCommit",
            _request(28, 3, transactional_id=f"txn-{group}", group_id=group, producer_id=1, producer_epoch=0,
                     generation_id=-1, member_id="", group_instance_id=None, topics=[
                         {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                         "committed_leader_epoch": -1, "committed_metadata": ""}]}]),
            lambda r: int(r.topics[0].partitions[0].error_code),
            TRANSACTIONAL_ID_DENIED,
        ),
        (
            "DescribeLogDirs",
            _request(35, 4, topics=None),
            lambda r: int(r.error_code),
            CLUSTER_DENIED,
        ),
        (
            "AlterReplicaLogDirs",
            _request(34, 2, dirs=[{"path": "/nowhere", "topics": [{"name": topic, "partitions": [0]}]}]),
            lambda r: int(r.results[0].partitions[0].error_code),
            CLUSTER_DENIED,
        ),
        (
            "ListPartitionReassignments",
            _request(46, 0, timeout=5000, topics=None),
            lambda r: int(r.error_code),
            CLUSTER_DENIED,
        ),
        (
            "DescribeClientQuotas",
            _request(48, 1, components=[], strict=False),
            lambda r: int(r.error_code),
            CLUSTER_DENIED,
        ),
        (
            "DescribeUserScramCredentials",
            _request(50, 0, users=None),
            lambda r: int(r.error_code),
            CLUSTER_DENIED,
        ),
        (
            "DescribeAcls",
            _request(29, 3, resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                     principal_filter=None, host_filter=None, operation=1, permission_type=1),
            lambda r: int(r.error_code),
            CLUSTER_DENIED,
        ),
        (
            "DeleteAcls",
            _request(31, 3, filters=[{"resource_type_filter": 1, "resource_name_filter": None,
                                      "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                      "operation": 1, "permission_type": 1}]),
            lambda r: int(r.filter_results[0].error_code),
            CLUSTER_DENIED,
        ),
    ]  # fmt: skip


def _user(kafka: KafkaCluster, user: str, password: str) -> None:
    salt = b"authorization-test"
    upsertion = ScramCredentialUpsertion(
        name=user,
        mechanism=2,
        iterations=4096,
        salt=salt,
        salted_password=salted_password(password.encode(), salt, 4096, mechanism=2),
    )
    reply = kafka.cluster.admin.alter_scram_credentials(AlterScramCredentialsRequest(upsertions=[upsertion]))
    assert reply.results[0].error_code == 0
    kafka.cluster.wait_until_applied()  # the brokers learn of it from the metadata log


def _leader_address(kafka: KafkaCluster, topic: str) -> str:
    leader = kafka.cluster.admin.describe_topic(topic)["partitions"][0]["leader"]
    address = kafka.cluster.brokers[leader].kafka
    assert address is not None
    return address["SASL_PLAINTEXT"]


def test_every_api_refuses_a_user_without_acls_with_kafkas_code(kafka_cluster: KafkaCluster) -> None:
    suffix = uuid.uuid4().hex[:6]
    user, topic, group = f"nobody-{suffix}", f"authz-{suffix}", f"g-{suffix}"
    _user(kafka_cluster, user, "pw")
    kafka_cluster.cluster.admin.create_topic(topic, partitions=1, replication_factor=3)
    with RawConnection(_leader_address(kafka_cluster, topic)) as conn:
        assert int(conn.authenticate(user, "pw").error_code) == 0
        for what, (key, version, body), code_of, expected in _cases(topic, group):
            assert code_of(conn.request(key, version, body)) == expected, what
    leader = kafka_cluster.cluster.admin.describe_topic(topic)["partitions"][0]["leader"]
    leader_log = kafka_cluster.cluster.brokers[leader].log_path.read_text()
    assert "Refused a replica fetch as broker 2 from 127.0.0.1" in leader_log
    assert f"(User:{user}): CLUSTER_ACTION is not allowed" in leader_log
    # Nothing was changed by the refused requests.
    described = kafka_cluster.cluster.admin.describe_topic(topic)
    assert len(described["partitions"]) == 1 and described["configs"] == {}


def test_the_same_requests_pass_once_their_acls_are_granted(kafka_cluster: KafkaCluster) -> None:
    suffix = uuid.uuid4().hex[:6]
    user, topic, group = f"granted-{suffix}", f"authz-ok-{suffix}", f"g-ok-{suffix}"
    _user(kafka_cluster, user, "pw")
    kafka_cluster.cluster.admin.create_topic(topic, partitions=1, replication_factor=3)
    principal = f"User:{user}"

    def allow(kind: str, name: str, operation: str) -> dict[str, str]:
        return {
            "resourceType": kind,
            "resourceName": name,
            "principal": principal,
            "operation": operation,
            "permissionType": "ALLOW",
        }

    granted = [
        allow("TOPIC", topic, "ALL"),
        allow("GROUP", group, "ALL"),
        allow("CLUSTER", "kafka-cluster", "ALL"),
        allow("TRANSACTIONAL_ID", f"txn-{group}", "WRITE"),
    ]
    assert [r["errorCode"] for r in kafka_cluster.cluster.admin.create_acls(granted)] == [0, 0, 0, 0]
    kafka_cluster.cluster.wait_until_applied()
    with RawConnection(_leader_address(kafka_cluster, topic)) as conn:
        assert int(conn.authenticate(user, "pw").error_code) == 0
        for what, (key, version, body), code_of, denied in _cases(topic, group):
            if key in (20, 31):  # DeleteTopics and DeleteAcls would undo the test's own setup
                continue
            assert code_of(conn.request(key, version, body)) not in (denied, TOPIC_DENIED, GROUP_DENIED), what
