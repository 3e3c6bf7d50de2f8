"""The controller's topic defaults (`--default-replication-factor`, `--default-min-insync-replicas`).

A create that leaves the replication factor out takes the default; one that sets it, or gives an
assignment, keeps its own; a topic's own `min.insync.replicas` wins over the default. Without the
flags the field stays required (400/42 and nothing written).
"""

from __future__ import annotations

from typing import Any

from tests.controller.conftest import Api, bring_up


def test_defaults_fill_what_the_create_leaves_out(make_controller: Any) -> None:
    proc = make_controller(
        extra_args=["--default-replication-factor", "2", "--default-min-insync-replicas", "2"]
    )
    api = Api(proc)
    try:
        bring_up(api, [1, 2, 3], dirs_per_broker=1)
        created = api.create_topic("defaulted", numPartitions=2)
        assert created["replicationFactor"] == 2
        described = api.topic("defaulted")
        assert described["configs"] == {"min.insync.replicas": "2"}
        assert all(len(p["replicas"]) == 2 for p in described["partitions"])

        api.create_topic(
            "explicit", numPartitions=1, replicationFactor=3, configs={"min.insync.replicas": "1"}
        )
        explicit = api.topic("explicit")
        assert explicit["configs"] == {"min.insync.replicas": "1"}
        assert len(explicit["partitions"][0]["replicas"]) == 3

        api.create_topic("assigned", replicaAssignment=[[3]])
        assert api.topic("assigned")["partitions"][0]["replicas"] == [3]
        # The default min.insync.replicas is capped at the topic's replication factor.
        assert api.topic("assigned")["configs"] == {"min.insync.replicas": "1"}
    finally:
        api.close()


def test_without_defaults_the_replication_factor_is_required(make_controller: Any) -> None:
    api = Api(make_controller())
    try:
        bring_up(api, [1], dirs_per_broker=1)
        before = api.end_offset()
        reply = api.admin.post("/v1/topics", json={"name": "t", "numPartitions": 1})
        assert reply.status_code == 400
        assert reply.json()["errorCode"] == 42
        assert "replicationFactor" in reply.json()["errorMessage"]
        assert api.end_offset() == before
    finally:
        api.close()
