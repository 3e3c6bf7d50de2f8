"""The controller's admin extensions (docs/api.md, "Admin extensions") over the HTTP API of a real
controller process: topic config changes, CreatePartitions, SCRAM credentials and producer-id
blocks. Each asserts the exact records in `/v1/metadata`, the read API after them (the log
replayed independently by `replay_records`), every error code with nothing written, the token
each call needs, and that credentials, configs and the producer-id watermark survive a snapshot
and a restart.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from jbod_client.controller import ApiError, ControllerClient, ControllerLink
from jbod_core.messages import (
    AllocateProducerIdsRequest,
    AlterConfigOp,
    AlterScramCredentialsRequest,
    AlterTopicConfigsRequest,
    CreatePartitionsRequest,
    ScramCredentialUpsertion,
)
from tests.controller.conftest import Api, assert_read_api_matches_log, bring_up, replay_records
from tests.harness import ControllerProcess

SALT = b"NaCl-0123456789"


def _post(client: httpx.Client, path: str, body: Any, *, status: int = 200) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    reply: dict[str, Any] = response.json()
    return reply


def _new_records(api: Api, since: int) -> list[tuple[str, dict[str, Any]]]:
    records, _snapshot = api.all_records(since)
    return [(r["type"], r["data"]) for r in records]


def _unchanged(api: Api, end: int) -> None:
    assert api.end_offset() == end


# -- topic config changes ----------------------------------------------------------------------


def _set(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "op": "SET", "value": value}


def test_config_changes_are_config_records_and_show_in_the_topic(api: Api) -> None:
    bring_up(api, [1, 2, 3])
    topic_id = api.create_topic("t", numPartitions=2, replicationFactor=3, configs={"retention.ms": "1000"})[
        "topicId"
    ]
    end = api.end_offset()
    body = {
        "configs": [
            _set("min.insync.replicas", "2"),
            {"name": "retention.ms", "op": "DELETE"},
            _set("segment.bytes", "1048576"),
        ]
    }
    effective = {"min.insync.replicas": "2", "segment.bytes": "1048576"}
    assert _post(api.admin, "/v1/topics/t/configs", body) == {
        "errorCode": 0,
        "topicId": topic_id,
        "configs": effective,
    }
    assert _new_records(api, end) == [
        ("ConfigRecord", {"topicId": topic_id, "name": "min.insync.replicas", "value": "2"}),
        ("ConfigRecord", {"topicId": topic_id, "name": "retention.ms", "value": None}),
        ("ConfigRecord", {"topicId": topic_id, "name": "segment.bytes", "value": "1048576"}),
    ]
    assert api.topic("t")["configs"] == effective
    assert_read_api_matches_log(api)
    # The same change again changes nothing and writes nothing.
    end = api.end_offset()
    assert _post(api.admin, "/v1/topics/t/configs", body)["errorCode"] == 0
    _unchanged(api, end)
    # validateOnly answers as the change would, and writes nothing.
    reply = _post(
        api.admin, "/v1/topics/t/configs", {"configs": [_set("retention.ms", "5")], "validateOnly": True}
    )
    assert reply == {"errorCode": 0, "topicId": topic_id, "configs": {**effective, "retention.ms": "5"}}
    _unchanged(api, end)
    assert api.topic("t")["configs"] == effective


@pytest.mark.parametrize(
    ("name", "ops", "code", "naming"),
    [
        ("nope", [_set("retention.ms", "1")], 3, "nope"),
        ("t", [_set("cleanup.policy", "compacted")], 40, "cleanup.policy"),
        ("t", [_set("retention.ms", "1"), _set("segment.bytes", "12")], 40, "segment.bytes"),
        ("t", [_set("min.insync.replicas", "4")], 40, "min.insync.replicas"),
        ("t", [{"name": "retention.ms", "op": "APPEND", "value": "1"}], 40, "retention.ms"),
        ("t", [_set("retention.ms", "1"), {"name": "retention.ms", "op": "DELETE"}], 42, "retention.ms"),
    ],
)
def test_refused_config_changes_write_nothing(
    api: Api, name: str, ops: list[dict[str, Any]], code: int, naming: str
) -> None:
    bring_up(api, [1, 2, 3])
    api.create_topic("t", numPartitions=1, replicationFactor=3)
    end = api.end_offset()
    reply = _post(api.admin, f"/v1/topics/{name}/configs", {"configs": ops})
    assert reply["errorCode"] == code, reply
    assert naming in reply["errorMessage"]
    _unchanged(api, end)
    assert api.topic("t")["configs"] == {}


@pytest.mark.parametrize(
    ("body", "naming"),
    [
        ({"configs": [{"name": "retention.ms", "op": "set", "value": "1"}]}, "configs[0].op"),
        ({"configs": [{"name": "retention.ms", "op": "SET"}]}, "value"),
        ({"configs": [{"name": "retention.ms", "op": "SET", "value": 1}]}, "configs[0].value"),
        ({}, "configs"),
    ],
)
def test_malformed_config_changes_are_400(api: Api, body: dict[str, Any], naming: str) -> None:
    bring_up(api, [1])
    api.create_topic("t", numPartitions=1, replicationFactor=1)
    end = api.end_offset()
    reply = _post(api.admin, "/v1/topics/t/configs", body, status=400)
    assert reply["errorCode"] == 42 and naming in reply["errorMessage"], reply
    _unchanged(api, end)


# -- CreatePartitions --------------------------------------------------------------------------


def test_create_partitions_adds_records_placed_as_at_create(api: Api) -> None:
    brokers = bring_up(api, [1, 2, 3], dirs_per_broker=1)
    topic_id = api.create_topic("t", numPartitions=1, replicationFactor=2)["topicId"]
    end = api.end_offset()
    reply = _post(api.admin, "/v1/topics/t/partitions", {"totalCount": 3, "assignment": [[3, 1], [1, 2]]})
    assert reply == {"errorCode": 0, "topicId": topic_id, "totalCount": 3}

    def partition(index: int, replicas: list[int]) -> tuple[str, dict[str, Any]]:
        return (
            "PartitionRecord",
            {
                "topicId": topic_id,
                "partitionId": index,
                "replicas": replicas,
                "isr": replicas,
                "leader": replicas[0],
                "leaderEpoch": 0,
                "partitionEpoch": 0,
                "directories": [brokers[b].dirs[0] for b in replicas],
            },
        )

    assert _new_records(api, end) == [partition(1, [3, 1]), partition(2, [1, 2])]
    # Without an assignment: the topic's replication factor, spread over the active brokers.
    end = api.end_offset()
    assert _post(api.admin, "/v1/topics/t/partitions", {"totalCount": 6})["errorCode"] == 0
    added = _new_records(api, end)
    assert [data["partitionId"] for _type, data in added] == [3, 4, 5]
    for _type, data in added:
        assert len(set(data["replicas"])) == 2 and data["isr"] == data["replicas"]
    assert [p["partitionIndex"] for p in api.topic("t")["partitions"]] == list(range(6))
    assert_read_api_matches_log(api)
    # validateOnly writes nothing.
    end = api.end_offset()
    assert _post(api.admin, "/v1/topics/t/partitions", {"totalCount": 7, "validateOnly": True}) == {
        "errorCode": 0,
        "topicId": topic_id,
        "totalCount": 7,
    }
    _unchanged(api, end)


def test_refused_create_partitions_write_nothing(api: Api) -> None:
    brokers = bring_up(api, [1, 2, 3])
    api.create_topic("t", numPartitions=2, replicationFactor=3)
    assert api.heartbeat(3, brokers[3].epoch, wantFence=True)["isFenced"] is True
    end = api.end_offset()
    for name, body, code in [
        ("nope", {"totalCount": 3}, 3),
        ("t", {"totalCount": 2}, 37),
        ("t", {"totalCount": 1}, 37),
        ("t", {"totalCount": 10_003}, 37),
        ("t", {"totalCount": 3}, 38),  # replication factor 3, two active brokers
        ("t", {"totalCount": 4, "assignment": [[1, 2, 3]]}, 39),
        ("t", {"totalCount": 3, "assignment": [[1, 2, 9]]}, 39),
        ("t", {"totalCount": 3, "assignment": [[1, 2]]}, 39),
        ("t", {"totalCount": 3, "assignment": [[1, 1, 2]]}, 39),
    ]:
        reply = _post(api.admin, f"/v1/topics/{name}/partitions", body)
        assert reply["errorCode"] == code, (body, reply)
        assert reply["errorMessage"] and "topicId" not in reply
    _unchanged(api, end)
    assert len(api.topic("t")["partitions"]) == 2
    reply = _post(api.admin, "/v1/topics/t/partitions", {"totalCount": "3"}, status=400)
    assert reply["errorCode"] == 42 and "totalCount" in reply["errorMessage"]


# -- SCRAM credentials -------------------------------------------------------------------------


def _salted(password: str, mechanism: int = 2, iterations: int = 4096) -> bytes:
    return hashlib.pbkdf2_hmac("sha512" if mechanism == 2 else "sha256", password.encode(), SALT, iterations)


def _upsertion(user: str, password: str, *, mechanism: int = 2, iterations: int = 4096) -> dict[str, Any]:
    return {
        "name": user,
        "mechanism": mechanism,
        "iterations": iterations,
        "salt": base64.b64encode(SALT).decode(),
        "saltedPassword": base64.b64encode(_salted(password, mechanism, iterations)).decode(),
    }


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_scram_credentials_are_stored_as_rfc5802_keys_and_described_without_them(
    api: Api, controller: ControllerProcess
) -> None:
    end = api.end_offset()
    body = {"upsertions": [_upsertion("alice", "wonderland"), _upsertion("bob", "builder", mechanism=1)]}
    assert _post(api.admin, "/v1/scram-credentials", body) == {
        "errorCode": 0,
        "results": [{"user": "alice", "errorCode": 0}, {"user": "bob", "errorCode": 0}],
    }
    salted = _salted("wonderland")
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    [(kind, alice), (_kind, bob)] = _new_records(api, end)
    assert (kind, alice) == (
        "UserScramCredentialRecord",
        {
            "name": "alice",
            "mechanism": 2,
            "salt": _b64(SALT),
            "storedKey": _b64(hashlib.sha512(client_key).digest()),
            "serverKey": _b64(hmac.new(salted, b"Server Key", "sha512").digest()),
            "iterations": 4096,
        },
    )
    assert (bob["name"], bob["mechanism"], len(base64.b64decode(bob["storedKey"]))) == ("bob", 1, 32)
    # The salted passwords are nowhere in the controller's files.
    for secret in (salted, _salted("builder", 1)):
        for path in Path(controller.data_dir).rglob("*"):
            if path.is_file():
                content = path.read_bytes()
                assert secret not in content and _b64(secret).encode() not in content, path

    response = api.admin.get("/v1/scram-credentials")
    assert response.status_code == 200, response.text
    assert response.json() == [
        {"user": "alice", "errorCode": 0, "credentialInfos": [{"mechanism": 2, "iterations": 4096}]},
        {"user": "bob", "errorCode": 0, "credentialInfos": [{"mechanism": 1, "iterations": 4096}]},
    ]
    named = api.admin.get("/v1/scram-credentials", params=[("user", "nobody"), ("user", "alice")]).json()
    assert [(r["user"], r["errorCode"]) for r in named] == [("nobody", 91), ("alice", 0)]
    assert "storedKey" not in str(named) and "serverKey" not in str(named)

    end = api.end_offset()
    body = {"deletions": [{"name": "bob", "mechanism": 1}]}
    assert _post(api.admin, "/v1/scram-credentials", body)["results"] == [{"user": "bob", "errorCode": 0}]
    assert _new_records(api, end) == [("RemoveUserScramCredentialRecord", {"name": "bob", "mechanism": 1})]
    assert [r["user"] for r in api.admin.get("/v1/scram-credentials").json()] == ["alice"]
    records, _ = api.all_records()
    assert set(replay_records(records).credentials) == {("alice", 2)}


def test_refused_scram_changes_are_per_user_with_kafkas_codes(api: Api) -> None:
    _post(api.admin, "/v1/scram-credentials", {"upsertions": [_upsertion("alice", "x")]})
    end = api.end_offset()
    body = {
        "deletions": [{"name": "ghost", "mechanism": 2}, {"name": "alice", "mechanism": 1}],
        "upsertions": [
            _upsertion("admin", "token?"),
            _upsertion("carol", "x", iterations=100),
            _upsertion("dave", "x", iterations=20_000),
            {**_upsertion("erin", "x"), "mechanism": 3},
            _upsertion("", "x"),
            _upsertion("frank", "x"),
            _upsertion("frank", "y"),
        ],
    }
    results = _post(api.admin, "/v1/scram-credentials", body)["results"]
    assert [(r["user"], r["errorCode"]) for r in results] == [
        ("ghost", 91),
        ("alice", 91),
        ("admin", 93),
        ("carol", 93),
        ("dave", 93),
        ("erin", 33),
        ("", 93),
        ("frank", 92),
    ]
    assert all(r["errorMessage"] for r in results)
    _unchanged(api, end)
    bad = {"upsertions": [{**_upsertion("g", "x"), "salt": "***"}]}
    reply = _post(api.admin, "/v1/scram-credentials", bad, status=400)
    assert reply["errorCode"] == 42 and "upsertions[0].salt" in reply["errorMessage"]
    _unchanged(api, end)


def test_admin_calls_need_the_admin_token_and_producer_ids_the_cluster_token(api: Api) -> None:
    brokers = bring_up(api, [1])
    api.create_topic("t", numPartitions=1, replicationFactor=1)
    for method, path, body in [
        ("POST", "/v1/topics/t/configs", {"configs": []}),
        ("POST", "/v1/topics/t/partitions", {"totalCount": 2}),
        ("POST", "/v1/scram-credentials", {}),
        ("GET", "/v1/scram-credentials", None),
    ]:
        response = api.broker.request(method, path, json=body)
        assert (response.status_code, response.json()["errorCode"]) == (401, 31), path
    with httpx.Client(base_url=api.proc.url) as anonymous:
        response = anonymous.post("/v1/producer-ids", json={"brokerId": 1, "brokerEpoch": brokers[1].epoch})
        assert (response.status_code, response.json()["errorCode"]) == (401, 31)
    assert (
        _post(api.admin, "/v1/producer-ids", {"brokerId": 1, "brokerEpoch": brokers[1].epoch})["errorCode"]
        == 0
    )


# -- producer ids ------------------------------------------------------------------------------


def test_producer_id_blocks_are_durable_and_never_handed_out_twice(
    api: Api, controller: ControllerProcess
) -> None:
    brokers = bring_up(api, [1, 2])
    end = api.end_offset()

    def allocate(broker_id: int, epoch: int) -> dict[str, Any]:
        return _post(api.broker, "/v1/producer-ids", {"brokerId": broker_id, "brokerEpoch": epoch})

    assert allocate(1, brokers[1].epoch) == {"errorCode": 0, "producerIdStart": 0, "producerIdLen": 1000}
    assert allocate(2, brokers[2].epoch) == {"errorCode": 0, "producerIdStart": 1000, "producerIdLen": 1000}
    assert _new_records(api, end) == [
        ("ProducerIdsRecord", {"brokerId": 1, "brokerEpoch": brokers[1].epoch, "nextProducerId": 1000}),
        ("ProducerIdsRecord", {"brokerId": 2, "brokerEpoch": brokers[2].epoch, "nextProducerId": 2000}),
    ]
    end = api.end_offset()
    stale = allocate(1, brokers[1].epoch + 1)
    assert (stale["errorCode"], stale["producerIdStart"], stale["producerIdLen"]) == (77, -1, 0)
    assert allocate(7, 0)["errorCode"] == 102
    _unchanged(api, end)

    controller.restart()  # kill -9: the blocks were acknowledged, so they are in the log
    assert allocate(1, brokers[1].epoch)["producerIdStart"] == 2000


# -- snapshots ---------------------------------------------------------------------------------


def test_configs_credentials_and_the_producer_id_watermark_survive_a_snapshot(make_controller: Any) -> None:
    proc: ControllerProcess = make_controller(extra_args=["--snapshot-interval-records", "40"])
    api = Api(proc)
    try:
        brokers = bring_up(api, [1, 2, 3])
        api.create_topic("t", numPartitions=2, replicationFactor=3, configs={"retention.ms": "1000"})
        body = {"configs": [_set("segment.bytes", "2097152"), {"name": "retention.ms", "op": "DELETE"}]}
        assert _post(api.admin, "/v1/topics/t/configs", body)["errorCode"] == 0
        assert _post(api.admin, "/v1/topics/t/partitions", {"totalCount": 4})["errorCode"] == 0
        upsertions = {"upsertions": [_upsertion("alice", "a"), _upsertion("bob", "b", mechanism=1)]}
        assert _post(api.admin, "/v1/scram-credentials", upsertions)["errorCode"] == 0
        for _ in range(2):
            _post(api.broker, "/v1/producer-ids", {"brokerId": 1, "brokerEpoch": brokers[1].epoch})
        # One batch of 51 records after everything above: the snapshot is cut at the end.
        api.create_topic("filler", numPartitions=50, replicationFactor=1)
        end = api.end_offset()
        snapshot = proc.data_dir / "metadata" / f"{end:020d}.snapshot"
        deadline = time.monotonic() + 30
        while not snapshot.exists():
            assert time.monotonic() < deadline, "no snapshot was cut at the end offset"
            time.sleep(0.05)
        topic_before = api.topic("t")
        credentials_before = api.admin.get("/v1/scram-credentials").json()

        proc.restart()
        # Recovery started from that snapshot: nothing before it was replayed from the log.
        assert f"after a snapshot at {end}" in proc.stderr()
        assert api.topic("t") == topic_before
        assert topic_before["configs"] == {"segment.bytes": "2097152"}
        assert len(topic_before["partitions"]) == 4
        assert api.admin.get("/v1/scram-credentials").json() == credentials_before
        assert [r["user"] for r in credentials_before] == ["alice", "bob"]
        reply = _post(api.broker, "/v1/producer-ids", {"brokerId": 2, "brokerEpoch": brokers[2].epoch})
        assert reply["producerIdStart"] == 2000
        # Decisions after recovery see the credentials (a deletion finds them).
        deletion = {"deletions": [{"name": "bob", "mechanism": 1}]}
        assert _post(api.admin, "/v1/scram-credentials", deletion)["results"][0]["errorCode"] == 0
        assert_read_api_matches_log(api)
    finally:
        api.close()


# -- the wire clients ------------------------------------------------------------------------


def test_controller_client_round_trips(api: Api) -> None:
    brokers = bring_up(api, [1, 2])
    topic_id = api.create_topic("t", numPartitions=1, replicationFactor=2)["topicId"]
    with ControllerClient(api.proc.url, token=api.proc.admin_token) as client:
        configs = client.alter_topic_configs(
            "t",
            AlterTopicConfigsRequest(configs=[AlterConfigOp(name="retention.ms", op="SET", value="60000")]),
        )
        assert (configs.error_code, str(configs.topic_id), configs.configs) == (
            0,
            topic_id,
            {"retention.ms": "60000"},
        )
        unknown = client.alter_topic_configs("nope", AlterTopicConfigsRequest(configs=[]))
        assert unknown.error_code == 3  # a protocol outcome is returned, not raised
        added = client.create_partitions("t/", CreatePartitionsRequest(total_count=2))
        assert added.error_code == 3  # the name is one path segment: "t/" is not "t"
        added = client.create_partitions("t", CreatePartitionsRequest(total_count=2))
        assert (added.error_code, added.total_count) == (0, 2)
        upsertion = ScramCredentialUpsertion(
            name="alice", mechanism=2, iterations=4096, salt=SALT, salted_password=_salted("pw")
        )
        altered = client.alter_scram_credentials(AlterScramCredentialsRequest(upsertions=[upsertion]))
        assert [(r.user, r.error_code) for r in altered.results] == [("alice", 0)]
        described = client.describe_scram_credentials(["alice", "bob"])
        assert [
            (r.user, r.error_code, [(i.mechanism, i.iterations) for i in r.credential_infos])
            for r in described
        ] == [
            ("alice", 0, [(2, 4096)]),
            ("bob", 91, []),
        ]
        assert [r.user for r in client.describe_scram_credentials()] == ["alice"]
        block = client.allocate_producer_ids(
            AllocateProducerIdsRequest(broker_id=1, broker_epoch=brokers[1].epoch)
        )
        assert (block.error_code, block.producer_id_start, block.producer_id_len) == (0, 0, 1000)
    assert api.topic("t")["configs"] == {"retention.ms": "60000"}
    assert len(api.topic("t")["partitions"]) == 2


@pytest.mark.asyncio
async def test_controller_link_round_trips(api: Api) -> None:
    brokers = bring_up(api, [1, 2])
    api.create_topic("t", numPartitions=1, replicationFactor=2)
    link = ControllerLink(api.proc.url, token=api.proc.admin_token)
    try:
        request = AlterTopicConfigsRequest(
            configs=[AlterConfigOp(name="segment.bytes", op="SET", value="1048576")]
        )
        assert (await link.alter_topic_configs("t", request)).configs == {"segment.bytes": "1048576"}
        refused = await link.create_partitions("t", CreatePartitionsRequest(total_count=1))
        assert refused.error_code == 37
        added = await link.create_partitions(
            "t", CreatePartitionsRequest(total_count=3, assignment=[[2, 1], [1, 2]])
        )
        assert (added.error_code, added.total_count) == (0, 3)
        upsertion = ScramCredentialUpsertion(
            name="bob", mechanism=1, iterations=8192, salt=SALT, salted_password=_salted("pw", 1, 8192)
        )
        altered = await link.alter_scram_credentials(AlterScramCredentialsRequest(upsertions=[upsertion]))
        assert [(r.user, r.error_code) for r in altered.results] == [("bob", 0)]
        [bob] = await link.describe_scram_credentials(["bob"])
        assert [(i.mechanism, i.iterations) for i in bob.credential_infos] == [(1, 8192)]
        request_ids = AllocateProducerIdsRequest(broker_id=2, broker_epoch=brokers[2].epoch)
        first, second = (
            await link.allocate_producer_ids(request_ids),
            await link.allocate_producer_ids(request_ids),
        )
        assert (first.producer_id_start, second.producer_id_start) == (0, 1000)
        stale = await link.allocate_producer_ids(AllocateProducerIdsRequest(broker_id=2, broker_epoch=0))
        assert stale.error_code == 77
    finally:
        await link.aclose()
    # The broker's own token is not enough for the admin calls it forwards.
    cluster_link = ControllerLink(api.proc.url, token=api.proc.cluster_token)
    try:
        with pytest.raises(ApiError) as refused_token:
            await cluster_link.describe_scram_credentials()
        assert (refused_token.value.status, refused_token.value.code) == (401, 31)
    finally:
        await cluster_link.aclose()
    assert [p["partitionIndex"] for p in api.topic("t")["partitions"]] == [0, 1, 2]


# -- bad input ---------------------------------------------------------------------------------

NEW_WRITES = ["/v1/topics/t/configs", "/v1/topics/t/partitions", "/v1/scram-credentials", "/v1/producer-ids"]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b"null",
        b'{"configs": 5, "totalCount": "x", "upsertions": 5, "brokerId": "1"}',
        b'{"configs": [{"name": 1, "op": "SET"}], "totalCount": 2147483648, "deletions": [{"name": "a"}],'
        b' "brokerId": 1, "brokerEpoch": 9223372036854775808}',
        b'{"upsertions": [{"name": "a", "mechanism": 300, "iterations": 4096, "salt": "", "saltedPassword": ""}],'
        b' "configs": [null], "totalCount": 3, "assignment": [[1, "2"]], "brokerId": -2147483649, "brokerEpoch": 0}',
    ],
)
def test_malformed_bodies_are_400_and_change_nothing(api: Api, body: bytes) -> None:
    bring_up(api, [1])
    api.create_topic("t", numPartitions=1, replicationFactor=1)
    end = api.end_offset()
    for path in NEW_WRITES:
        response = api.admin.post(path, content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 400, (path, response.text)
        assert response.json()["errorCode"] == 42 and response.json()["errorMessage"], path
    _unchanged(api, end)


def test_oversized_bodies_are_413(api: Api) -> None:
    for path, size in [("/v1/producer-ids", 64 * 1024 + 1), ("/v1/scram-credentials", 1024 * 1024 + 1)]:
        response = api.admin.post(path, content=b" " * size, headers={"Content-Type": "application/json"})
        assert (response.status_code, response.json()["errorCode"]) == (413, 42), path
