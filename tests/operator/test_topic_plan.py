"""JbodTopic specs and what they do to a topic (`topic_plan`, pure).

Covers every row of `topic_plan.decide`, in its order: a changed `spec.topicName`, a second
resource for the topic, a config Kafka refuses (each changes nothing); create; a replication
factor change and a lower partition count refused while the configs still converge; a higher
count; configs SET only where they differ (as Kafka reads them), keys the resource set before and
no longer sets DELETEd, keys it never set left alone; nothing to do. Also the spec's parsing, the
owner of a contested topic, what a deletion does, the controller's description read as a state,
the example manifest and the CRD.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from jbod_operator import model, topic_plan
from jbod_operator.topic_plan import Claim, Plan, Refusal, TopicState

ROOT = Path(__file__).resolve().parents[2]

SPEC = topic_plan.parse_topic(
    "orders",
    {"partitions": 3, "replicas": 2, "config": {"retention.ms": 7200000, "cleanup.policy": "delete"}},
)
SAME = TopicState("id", 3, 2, {"retention.ms": "7200000", "cleanup.policy": "delete"})


def _decide(state: TopicState | None, **kwargs: Any) -> Plan:
    return topic_plan.decide(SPEC, state, **{"resource": "orders", "owner_name": "orders", **kwargs})


def test_the_spec_parses_as_kafka_text() -> None:
    assert SPEC.topic_name == "orders"
    assert SPEC.config == {"retention.ms": "7200000", "cleanup.policy": "delete"}
    other = topic_plan.parse_topic(
        "x", {"topicName": "Orders_v1", "partitions": 1, "replicas": 1, "config": {"preallocate": True}}
    )
    assert (other.topic_name, other.config) == ("Orders_v1", {"preallocate": "true"})


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"topicName": "bad/name"}, "spec.topicName: 'bad/name' is not a Kafka topic name"),
        ({"topicName": ".."}, "not a Kafka topic name"),
        ({"partitions": 0}, "spec.partitions"),
        ({"replicas": None}, "spec.replicas"),
        ({"config": ["retention.ms"]}, "spec.config"),
    ],
)
def test_bad_specs_name_the_field(patch: dict[str, Any], needle: str) -> None:
    with pytest.raises(model.SpecError) as raised:
        topic_plan.parse_topic("orders", {"partitions": 1, "replicas": 1, **patch})
    assert needle in str(raised.value) and "\n" not in str(raised.value)


def test_the_oldest_resource_owns_a_topic() -> None:
    assert topic_plan.owner([]) is None
    claims = [
        Claim("b", "2026-01-02T00:00:00Z"),
        Claim("c", "2026-01-01T00:00:00Z"),
        Claim("a", "2026-01-02T00:00:00Z"),
    ]
    assert topic_plan.owner(claims) == "c"
    assert topic_plan.owner(claims[::2]) == "a"  # same time: the smaller name


def test_a_changed_topic_name_conflict_or_bad_config_changes_nothing() -> None:
    renamed = _decide(SAME, previous_topic_name="orders-old")
    assert renamed.blocked and not renamed.changes
    assert renamed.refusals[0].reason == "NotSupported" and "spec.topicName" in renamed.refusals[0].message

    conflict = _decide(None, owner_name="older")
    assert conflict.blocked and not conflict.changes and not conflict.create
    assert conflict.refusals[0].reason == "ResourceConflict" and "older" in conflict.refusals[0].message

    for config, message in [
        (
            {"retention.ms": "soon"},
            "Invalid value soon for configuration retention.ms: Not a number of type LONG",
        ),
        ({"no.such.key": "1"}, "Unknown topic config name: no.such.key"),
        ({"min.insync.replicas": "3"}, "3 is larger than the replication factor 2"),
    ]:
        bad = topic_plan.decide(
            SPEC.model_copy(update={"config": config}), SAME, resource="orders", owner_name="orders"
        )
        assert bad.blocked and not bad.changes
        assert bad.refusals[0].reason == "InvalidConfig" and message in bad.refusals[0].message


def test_an_absent_topic_is_created() -> None:
    assert _decide(None) == Plan(create=True)
    assert _decide(None, owner_name=None) == Plan(create=True)  # not indexed yet: nobody else claims it


def test_a_replication_factor_change_and_fewer_partitions_are_refused_but_configs_converge() -> None:
    plan = _decide(TopicState("id", 5, 3, {"retention.ms": "1"}))
    assert not plan.blocked and plan.partitions is None
    assert [r.reason for r in plan.refusals] == ["NotSupported", "NotSupported"]
    assert "replication factor from 3 to 2" in plan.refusals[0].message
    assert "reassignment" in plan.refusals[0].message
    assert "the topic has 5, spec.partitions is 3" in plan.refusals[1].message
    assert plan.set_configs == {"cleanup.policy": "delete", "retention.ms": "7200000"}


def test_more_partitions_are_made() -> None:
    assert _decide(TopicState("id", 1, 2, SAME.configs)) == Plan(partitions=3)


def test_configs_are_set_where_they_differ_and_reset_where_the_resource_no_longer_sets_them() -> None:
    state = TopicState(
        "id",
        3,
        2,
        {"retention.ms": " 7200000", "cleanup.policy": "compact", "segment.ms": "60000", "flush.ms": "5"},
    )
    plan = _decide(state, previous_keys=["segment.ms", "retention.ms", "max.message.bytes"])
    # retention.ms is the same number as Kafka reads it; cleanup.policy drifted; segment.ms was the
    # resource's and is no more (max.message.bytes too, but the topic no longer has it); flush.ms
    # was never the resource's.
    assert plan == Plan(set_configs={"cleanup.policy": "delete"}, reset_configs=("segment.ms",))


def test_a_topic_that_matches_needs_nothing() -> None:
    plan = _decide(SAME, previous_keys=["retention.ms", "cleanup.policy"])
    assert plan == Plan() and not plan.changes and not plan.refusals


def test_a_deleted_resource_deletes_only_a_topic_it_manages() -> None:
    assert topic_plan.delete_action(managed=True, owns=True, made=True, cluster_present=True) == "delete"
    for released in [
        {"managed": False},
        {"owns": False},
        {"made": False},
        {"cluster_present": False},
    ]:
        kwargs = {"managed": True, "owns": True, "made": True, "cluster_present": True, **released}
        assert topic_plan.delete_action(**kwargs) == "release", released


def test_the_controllers_description_is_read_as_a_state() -> None:
    described = {
        "name": "t",
        "topicId": "abc",
        "configs": {"retention.ms": "5"},
        "partitions": [
            {"partitionIndex": 0, "replicas": [1, 2, 3], "removingReplicas": [3]},
            {"partitionIndex": 1, "replicas": [2, 3]},
        ],
    }
    assert topic_plan.state_of(described) == TopicState("abc", 2, 2, {"retention.ms": "5"})
    assert Refusal("a", "b") == Refusal("a", "b")


def test_the_example_and_the_crd_agree_with_the_model() -> None:
    documents = list(yaml.safe_load_all((ROOT / "examples" / "jbodtopic.yaml").read_text()))
    assert documents
    for document in documents:
        assert document["kind"] == "JbodTopic"
        assert document["metadata"]["labels"]["jbod.dev/cluster"] == "demo"
        topic_plan.parse_topic(document["metadata"]["name"], document["spec"])
    crd = yaml.safe_load((ROOT / "crds" / "jbod.dev_jbodtopics.yaml").read_text())
    version = crd["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(spec) == {f.alias or n for n, f in topic_plan.TopicSpec.model_fields.items()}
    columns = {c["name"] for c in version["additionalPrinterColumns"]}
    assert {"Cluster", "Partitions", "Replicas", "Ready"} <= columns
