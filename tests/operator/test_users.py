"""JbodUser specs and the ACLs they become (`users`, pure).

Covers: Strimzi's KafkaUser shape parses; bad specs name the field in one line; rules become the
controller's ACL creations with Kafka's enum names, one per operation, without duplicates;
replacing a user's ACLs creates only the missing ones and deletes only the others; the default
client user may read, write and describe every topic, use every group and write idempotently;
the CRD describes what the model reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from jbod_operator import model, users

ROOT = Path(__file__).resolve().parents[2]

ALICE: dict[str, Any] = {
    "cluster": "demo",
    "authentication": {"type": "scram-sha-512"},
    "authorization": {
        "type": "simple",
        "acls": [
            {
                "resource": {"type": "topic", "name": "orders-", "patternType": "prefix"},
                "operations": ["Write", "Describe"],
            },
            {
                "resource": {"type": "group", "name": "billing"},
                "operations": ["Read"],
                "type": "deny",
                "host": "10.0.0.1",
            },
            {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite", "DescribeConfigs"]},
            {
                "resource": {"type": "topic", "name": "orders-", "patternType": "prefix"},
                "operations": ["Write"],
            },
        ],
    },
}


def test_the_example_users_parse() -> None:
    for document in yaml.safe_load_all((ROOT / "examples" / "jbodusers.yaml").read_text()):
        spec = users.parse_user(document["metadata"]["name"], document["spec"])
        assert spec.cluster == "demo"
        if document["metadata"]["name"] == "orders-writer":
            assert spec.quotas.producer_byte_rate == 1048576


def test_rules_become_acl_creations_with_kafkas_names() -> None:
    spec = users.parse_user("alice", ALICE)
    bindings = [users.to_wire(b) for b in users.acl_bindings("alice", spec.authorization.acls)]
    assert bindings == [
        {
            "resourceType": "TOPIC",
            "resourceName": "orders-",
            "patternType": "PREFIXED",
            "principal": "User:alice",
            "host": "*",
            "operation": "WRITE",
            "permissionType": "ALLOW",
        },
        {
            "resourceType": "TOPIC",
            "resourceName": "orders-",
            "patternType": "PREFIXED",
            "principal": "User:alice",
            "host": "*",
            "operation": "DESCRIBE",
            "permissionType": "ALLOW",
        },
        {
            "resourceType": "GROUP",
            "resourceName": "billing",
            "patternType": "LITERAL",
            "principal": "User:alice",
            "host": "10.0.0.1",
            "operation": "READ",
            "permissionType": "DENY",
        },
        {
            "resourceType": "CLUSTER",
            "resourceName": "kafka-cluster",
            "patternType": "LITERAL",
            "principal": "User:alice",
            "host": "*",
            "operation": "IDEMPOTENT_WRITE",
            "permissionType": "ALLOW",
        },
        {
            "resourceType": "CLUSTER",
            "resourceName": "kafka-cluster",
            "patternType": "LITERAL",
            "principal": "User:alice",
            "host": "*",
            "operation": "DESCRIBE_CONFIGS",
            "permissionType": "ALLOW",
        },
    ]
    assert [users.from_wire(b) for b in bindings] == users.acl_bindings("alice", spec.authorization.acls)


def test_replacing_acls_touches_only_the_difference() -> None:
    before = users.acl_bindings("alice", users.parse_user("alice", ALICE).authorization.acls)
    changed = {**ALICE, "authorization": {"acls": [ALICE["authorization"]["acls"][0]]}}
    after = users.acl_bindings("alice", users.parse_user("alice", changed).authorization.acls)
    create, delete = users.acl_changes(after, before)
    assert create == []
    assert set(delete) == set(before) - set(after) and len(delete) == 3
    create, delete = users.acl_changes(before, after)
    assert set(create) == set(before) - set(after) and delete == []
    assert users.acl_changes(before, before) == ([], [])


def test_the_client_user_may_use_every_topic_and_group() -> None:
    wire = {(b[0], b[1], b[5]) for b in users.client_user_bindings("client")}
    assert wire == {
        ("TOPIC", "*", "READ"),
        ("TOPIC", "*", "WRITE"),
        ("TOPIC", "*", "DESCRIBE"),
        ("TOPIC", "*", "DESCRIBE_CONFIGS"),
        ("GROUP", "*", "READ"),
        ("GROUP", "*", "DESCRIBE"),
        ("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE"),
    }
    assert all(b[3] == "User:client" and b[6] == "ALLOW" for b in users.client_user_bindings("client"))


@pytest.mark.parametrize(
    ("name", "patch", "needle"),
    [
        ("Alice", {}, "metadata.name"),
        ("alice", {"authentication": {"type": "plain"}}, "spec.authentication.type"),
        ("alice", {"cluster": ""}, "spec.cluster"),
        (
            "alice",
            {"authorization": {"acls": [{"resource": {"type": "topic"}, "operations": ["Fly"]}]}},
            "'Fly' is not one of",
        ),
        (
            "alice",
            {
                "authorization": {
                    "acls": [{"resource": {"type": "cluster", "name": "x"}, "operations": ["All"]}]
                }
            },
            "kafka-cluster",
        ),
        (
            "alice",
            {"authorization": {"acls": [{"resource": {"type": "topic"}, "operations": []}]}},
            "operations",
        ),
    ],
)
def test_bad_user_specs_name_the_field(name: str, patch: dict[str, Any], needle: str) -> None:
    with pytest.raises(model.SpecError) as raised:
        users.parse_user(name, {**ALICE, **patch})
    assert needle in str(raised.value) and "\n" not in str(raised.value)


def test_the_crd_describes_what_the_model_reads() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "jbod.dev_jbodusers.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(spec) == set(users.UserSpec.model_fields)
    rule = spec["authorization"]["properties"]["acls"]["items"]["properties"]
    assert set(rule["operations"]["items"]["enum"]) == set(users.OPERATIONS)
    assert {f.alias or n for n, f in users.AclResource.model_fields.items()} == set(
        rule["resource"]["properties"]
    )


def test_quotas_map_strimzi_fields_to_kafka_keys_and_replace_the_set() -> None:
    spec = users.parse_user(
        "alice", {**ALICE, "quotas": {"producerByteRate": 1024, "controllerMutationRate": 0.5}}
    )
    wanted = users.quota_values(spec.quotas)
    assert wanted == {"producer_byte_rate": 1024.0, "controller_mutation_rate": 0.5}
    # Only what differs: a new value set, a key no longer wanted removed, a right one left alone.
    existing = {"producer_byte_rate": 1024.0, "controller_mutation_rate": 2.0, "request_percentage": 50.0}
    assert users.quota_changes(wanted, existing) == [
        ("controller_mutation_rate", 0.5),
        ("request_percentage", None),
    ]
    assert users.quota_changes(wanted, wanted) == []
    assert users.quota_changes({}, existing) == [
        ("controller_mutation_rate", None),
        ("producer_byte_rate", None),
        ("request_percentage", None),
    ]
    assert users.quota_values(users.parse_user("alice", ALICE).quotas) == {}
    with pytest.raises(model.SpecError, match=r"spec\.quotas\.producerByteRate"):
        users.parse_user("alice", {**ALICE, "quotas": {"producerByteRate": 0}})
    crd = yaml.safe_load((ROOT / "crds" / "jbod.dev_jbodusers.yaml").read_text())
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(spec_schema["quotas"]["properties"]) == {f.alias for f in users.Quotas.model_fields.values()}
