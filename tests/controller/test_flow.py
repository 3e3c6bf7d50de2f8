"""The broker lifecycle of protocol §3.1-§3.6 driven over HTTP against a real controller process.

Covers: registration and unfencing of multi-dir brokers, topic creation with UNASSIGNED dirs, the
JBOD fencing gate for a new incarnation, AssignReplicasToDirs, AlterPartition, offline log dirs
moving leadership, leaderless partitions coming back through an assignment, controlled shutdown,
deletion of topics and brokers, and the cluster counts; after each step the read API must agree
with an independent replay of the metadata log.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.controller.conftest import (
    LOST,
    UNASSIGNED,
    Api,
    assert_read_api_matches_log,
    bring_up,
    random_uuid,
    uuid_key,
)


def records_between(api: Api, start: int, end: int) -> list[dict[str, Any]]:
    page = api.metadata(start, maxRecords=end - start) if end > start else {"records": []}
    records: list[dict[str, Any]] = page["records"]
    assert [r["offset"] for r in records] == list(range(start, end))
    return records


def partitions_by_index(api: Api, name: str) -> dict[int, dict[str, Any]]:
    return {p["partitionIndex"]: p for p in api.topic(name)["partitions"]}


def test_full_broker_lifecycle(api: Api) -> None:
    brokers = bring_up(api, [1, 2, 3])
    assert [b.epoch for b in brokers.values()] == [0, 1, 2]
    for broker in brokers.values():
        info = api.broker_info(broker.broker_id)
        assert info["fenced"] is False
        assert info["logDirs"] == sorted(broker.dirs, key=uuid_key)
        assert info["offlineLogDirs"] == []
        assert info["incarnationId"] == broker.incarnation
        assert info["unassignedReplicas"] == 0
    assert api.cluster()["brokers"] == 3
    assert api.cluster()["fencedBrokers"] == 0

    # -- create a topic: every replica of a multi-dir broker starts UNASSIGNED -------------------
    created = api.create_topic(
        "flow", numPartitions=3, replicationFactor=3, configs={"min.insync.replicas": "2"}
    )
    assert created["numPartitions"] == 3
    assert created["replicationFactor"] == 3
    topic_id = created["topicId"]
    topic = api.topic("flow")
    assert topic["topicId"] == topic_id
    assert topic["configs"] == {"min.insync.replicas": "2"}
    assert [p["partitionIndex"] for p in topic["partitions"]] == [0, 1, 2]
    for part in topic["partitions"]:
        assert sorted(part["replicas"]) == [1, 2, 3]
        assert part["isr"] == part["replicas"]
        assert part["leader"] == part["replicas"][0]
        assert (part["leaderEpoch"], part["partitionEpoch"]) == (0, 0)
        assert part["directories"] == [UNASSIGNED] * 3
        assert part["offlineReplicas"] == []
    for broker_id in (1, 2, 3):
        assert api.broker_info(broker_id)["unassignedReplicas"] == 3

    # -- brokers 2 and 3 report where their replicas live ------------------------------------------
    parts = partitions_by_index(api, "flow")
    led_by_2 = next(i for i, p in parts.items() if p["leader"] == 2)
    dir_a2, dir_b2 = brokers[2].dirs
    placements = {dir_a2: {topic_id: [led_by_2]}, dir_b2: {topic_id: [i for i in parts if i != led_by_2]}}
    reply = api.assign(2, brokers[2].epoch, placements)
    assert reply["errorCode"] == 0
    assert reply["throttleTimeMs"] == 0
    echoed = {
        d["id"]: {
            t["topicId"]: [(p["partitionIndex"], p["errorCode"]) for p in t["partitions"]]
            for t in d["topics"]
        }
        for d in reply["directories"]
    }
    assert echoed == {
        dir_id: {tid: [(i, 0) for i in indexes] for tid, indexes in topics.items()}
        for dir_id, topics in placements.items()
    }
    assert api.assign(3, brokers[3].epoch, {brokers[3].dirs[0]: {topic_id: [0, 1, 2]}})["errorCode"] == 0
    assert api.broker_info(2)["unassignedReplicas"] == 0
    assert api.broker_info(3)["unassignedReplicas"] == 0
    before = api.end_offset()
    assert api.assign(3, brokers[3].epoch, {brokers[3].dirs[0]: {topic_id: [0, 1, 2]}})["errorCode"] == 0
    assert api.end_offset() == before, "an unchanged placement must write nothing"

    # -- broker 1 restarts: a new incarnation is refused while its session is alive ---------------
    new_incarnation = random_uuid()
    before = api.end_offset()
    api.register(1, brokers[1].dirs, incarnation=new_incarnation, expect=101)
    assert api.end_offset() == before
    fenced = api.heartbeat(1, brokers[1].epoch, wantFence=True)
    assert (fenced["errorCode"], fenced["isFenced"], fenced["shouldShutDown"]) == (0, True, False)
    for part in api.topic("flow")["partitions"]:
        assert 1 not in part["isr"]
        assert part["leader"] not in (1, -1)
        assert part["offlineReplicas"] == [1]
    assert api.cluster()["fencedBrokers"] == 1

    expected_epoch = api.end_offset()
    epoch = api.register(1, brokers[1].dirs, incarnation=new_incarnation)
    assert epoch == expected_epoch, "a new incarnation's epoch is the offset of its RegisterBrokerRecord"
    [record] = records_between(api, expected_epoch, api.end_offset())
    assert record["type"] == "RegisterBrokerRecord"
    assert record["data"]["fenced"] is True
    assert record["data"]["incarnationId"] == new_incarnation
    stale = api.heartbeat(1, brokers[1].epoch)
    assert stale["errorCode"] == 77
    brokers[1].epoch, brokers[1].incarnation = epoch, new_incarnation

    behind = api.heartbeat(1, epoch, offset=epoch - 1)
    assert (behind["isCaughtUp"], behind["isFenced"]) == (False, True)
    gated = api.heartbeat(1, epoch)
    assert (gated["errorCode"], gated["isCaughtUp"], gated["isFenced"]) == (0, True, True), gated
    assert api.broker_info(1)["unassignedReplicas"] == 3

    # -- it stays fenced until every placement is confirmed -------------------------------------
    dir_a1, dir_b1 = brokers[1].dirs
    assert api.assign(1, epoch, {dir_a1: {topic_id: [0, 1]}})["errorCode"] == 0
    assert api.broker_info(1)["unassignedReplicas"] == 1
    assert api.heartbeat(1, epoch)["isFenced"] is True
    assert api.assign(1, epoch, {dir_b1: {topic_id: [2]}})["errorCode"] == 0
    assert api.broker_info(1)["unassignedReplicas"] == 0
    unfenced = api.heartbeat(1, epoch)
    assert (unfenced["isFenced"], unfenced["shouldShutDown"]) == (False, False), unfenced
    assert api.broker_info(1)["fenced"] is False
    assert api.cluster()["fencedBrokers"] == 0

    # -- leaders bring broker 1 back into their ISRs (AlterPartition) ---------------------------
    for index, part in partitions_by_index(api, "flow").items():
        leader = part["leader"]
        wanted = [*part["isr"], 1]
        stale_leader = api.alter(
            leader,
            brokers[leader].epoch,
            topic_id,
            [
                {
                    "partitionIndex": index,
                    "leaderEpoch": part["leaderEpoch"] - 1,
                    "partitionEpoch": part["partitionEpoch"],
                    "newIsr": wanted,
                }
            ],
        )
        assert stale_leader["topics"][0]["partitions"][0]["errorCode"] == 74
        stale_version = api.alter(
            leader,
            brokers[leader].epoch,
            topic_id,
            [
                {
                    "partitionIndex": index,
                    "leaderEpoch": part["leaderEpoch"],
                    "partitionEpoch": part["partitionEpoch"] + 5,
                    "newIsr": wanted,
                }
            ],
        )
        assert stale_version["topics"][0]["partitions"][0]["errorCode"] == 108
        follower = next(b for b in part["isr"] if b != leader)
        not_leader = api.alter(
            follower,
            brokers[follower].epoch,
            topic_id,
            [
                {
                    "partitionIndex": index,
                    "leaderEpoch": part["leaderEpoch"],
                    "partitionEpoch": part["partitionEpoch"],
                    "newIsr": wanted,
                }
            ],
        )
        assert not_leader["topics"][0]["partitions"][0]["errorCode"] == 6
        reply = api.alter(
            leader,
            brokers[leader].epoch,
            topic_id,
            [
                {
                    "partitionIndex": index,
                    "leaderEpoch": part["leaderEpoch"],
                    "partitionEpoch": part["partitionEpoch"],
                    "newIsr": wanted,
                }
            ],
        )
        assert reply["errorCode"] == 0
        [result] = reply["topics"][0]["partitions"]
        assert result == {
            "partitionIndex": index,
            "errorCode": 0,
            "leader": leader,
            "leaderEpoch": part["leaderEpoch"],
            "partitionEpoch": part["partitionEpoch"] + 1,
            "isr": wanted,
        }
    for part in api.topic("flow")["partitions"]:
        assert sorted(part["isr"]) == [1, 2, 3]
        assert part["offlineReplicas"] == []

    # -- broker 2 loses the dir holding the replica it leads ------------------------------------
    parts = partitions_by_index(api, "flow")
    assert parts[led_by_2]["leader"] == 2
    before = api.end_offset()
    beat = api.heartbeat(2, brokers[2].epoch, offlineLogDirs=[dir_a2])
    assert (beat["errorCode"], beat["isFenced"], beat["shouldShutDown"]) == (0, False, False)
    written = records_between(api, before, api.end_offset())
    assert [r["type"] for r in written] == ["BrokerRegistrationChangeRecord", "PartitionChangeRecord"]
    change = written[0]["data"]
    assert change["brokerId"] == 2
    assert change["brokerEpoch"] == brokers[2].epoch
    assert change["logDirs"] == [dir_b2]
    assert change["offlineLogDirs"] == [dir_a2]
    assert "fenced" not in change

    after = partitions_by_index(api, "flow")
    moved = after[led_by_2]
    old = parts[led_by_2]
    assert moved["leader"] == next(b for b in old["replicas"] if b != 2)
    assert 2 not in moved["isr"]
    assert moved["offlineReplicas"] == [2]
    assert moved["leaderEpoch"] == old["leaderEpoch"] + 1
    assert moved["partitionEpoch"] == old["partitionEpoch"] + 1
    for index, part in after.items():
        if index != led_by_2:
            assert part == parts[index], "partitions in the surviving dir must not change"
    info = api.broker_info(2)
    assert info["logDirs"] == [dir_b2]
    assert info["offlineLogDirs"] == [dir_a2]
    assert info["fenced"] is False

    # Repeating the same offline dir writes nothing; an unknown dir is rejected whole (57).
    before = api.end_offset()
    again = api.heartbeat(2, brokers[2].epoch, offlineLogDirs=[dir_a2])
    assert (again["errorCode"], again["isFenced"]) == (0, False)
    assert api.end_offset() == before
    unknown = api.heartbeat(2, brokers[2].epoch, offlineLogDirs=[dir_b2, random_uuid()])
    assert unknown["errorCode"] == 57
    assert api.end_offset() == before
    assert api.broker_info(2)["logDirs"] == [dir_b2]

    cluster = api.cluster()
    assert cluster == {
        "clusterId": api.proc.cluster_id,
        "metadataEndOffset": before,
        "brokers": 3,
        "fencedBrokers": 0,
        "offlinePartitions": 0,
    }
    assert_read_api_matches_log(api)


def test_leaderless_partition_recovers_through_an_assignment(api: Api) -> None:
    brokers = bring_up(api, [1, 2])
    dir_a, dir_b = brokers[2].dirs
    created = api.create_topic("solo", replicaAssignment=[[2], [2]])
    assert (created["numPartitions"], created["replicationFactor"]) == (2, 1)
    topic_id = created["topicId"]
    assert api.assign(2, brokers[2].epoch, {dir_a: {topic_id: [0]}, dir_b: {topic_id: [1]}})["errorCode"] == 0

    api.heartbeat(2, brokers[2].epoch, offlineLogDirs=[dir_a])
    parts = partitions_by_index(api, "solo")
    assert parts[0]["leader"] == -1
    assert parts[0]["isr"] == [2], "an ISR never becomes empty"
    assert parts[0]["offlineReplicas"] == [2]
    assert parts[1]["leader"] == 2
    assert api.cluster()["offlinePartitions"] == 1

    # The broker recreates the replica in its surviving dir: the partition gets its leader back.
    assert api.assign(2, brokers[2].epoch, {dir_b: {topic_id: [0]}})["errorCode"] == 0
    part = partitions_by_index(api, "solo")[0]
    assert part["leader"] == 2
    assert part["directories"] == [dir_b]
    assert part["offlineReplicas"] == []
    assert part["leaderEpoch"] == parts[0]["leaderEpoch"] + 1
    assert api.cluster()["offlinePartitions"] == 0

    # Assigning to LOST takes the replica offline again, and to another broker's dir likewise.
    assert api.assign(2, brokers[2].epoch, {LOST: {topic_id: [0]}})["errorCode"] == 0
    assert partitions_by_index(api, "solo")[0]["leader"] == -1
    assert api.assign(2, brokers[2].epoch, {brokers[1].dirs[0]: {topic_id: [1]}})["errorCode"] == 0
    assert partitions_by_index(api, "solo")[1]["leader"] == -1
    assert api.cluster()["offlinePartitions"] == 2
    assert_read_api_matches_log(api)


def test_assignment_errors_per_partition(api: Api) -> None:
    brokers = bring_up(api, [1, 2])
    topic_id = api.create_topic("on-one", replicaAssignment=[[1]])["topicId"]
    unknown_topic = random_uuid()
    before = api.end_offset()
    reply = api.assign(
        2,
        brokers[2].epoch,
        {brokers[2].dirs[0]: {topic_id: [0, 7], unknown_topic: [0]}},
    )
    assert reply["errorCode"] == 0
    [directory] = reply["directories"]
    codes = {
        (t["topicId"], p["partitionIndex"]): p["errorCode"]
        for t in directory["topics"]
        for p in t["partitions"]
    }
    assert codes == {(topic_id, 0): 6, (topic_id, 7): 3, (unknown_topic, 0): 100}
    stale = api.assign(2, brokers[2].epoch + 1000, {brokers[2].dirs[0]: {topic_id: [0]}})
    assert stale["errorCode"] == 77
    assert stale["directories"] == []
    assert api.end_offset() == before


def test_registration_rules(api: Api) -> None:
    brokers = bring_up(api, [1])
    before = api.end_offset()
    body = {"brokerId": 2, "clusterId": "another", "incarnationId": random_uuid(), "logDirs": [random_uuid()]}
    reply = api.broker.post("/v1/brokers/register", json=body).json()
    assert reply["errorCode"] == 104
    api.register(2, [], expect=42)
    api.register(2, [UNASSIGNED], expect=42)
    api.register(2, ["AAAAAAAAAAAAAAAAAAAAYw"], expect=42)  # (0, 99) is reserved too
    same = random_uuid()
    api.register(2, [same, same], expect=42)
    api.register(2, [random_uuid(), brokers[1].dirs[0]], expect=42)
    assert api.end_offset() == before

    # The same incarnation re-registering keeps its epoch and its unfenced state.
    again = api.register(1, brokers[1].dirs, incarnation=brokers[1].incarnation)
    assert again == brokers[1].epoch
    assert api.broker_info(1)["fenced"] is False
    [record] = records_between(api, before, api.end_offset())
    assert record["type"] == "RegisterBrokerRecord"
    assert (record["data"]["brokerEpoch"], record["data"]["fenced"]) == (brokers[1].epoch, False)

    # Defaults and optional fields are kept.
    epoch = api.register(
        3,
        [random_uuid()],
        hasOfflineLogDirs=True,
        listeners=[{"name": "PLAINTEXT", "host": "b3.local", "port": 9092}],
        rack="rack-a",
    )
    info = api.broker_info(3)
    assert info["brokerEpoch"] == epoch
    assert info["fenced"] is True
    assert info["hasOfflineLogDirs"] is True
    assert info["listeners"] == [{"name": "PLAINTEXT", "host": "b3.local", "port": 9092}]
    assert info["rack"] == "rack-a"
    # A single-dir broker unfences once caught up.
    assert api.heartbeat(3, epoch)["isFenced"] is False
    assert_read_api_matches_log(api)


def test_topic_creation_rules(api: Api) -> None:
    bring_up(api, [1, 2])
    before = api.end_offset()
    api.create_topic("", numPartitions=1, replicationFactor=1, expect=17)
    api.create_topic("x" * 250, numPartitions=1, replicationFactor=1, expect=17)
    api.create_topic("bad/name", numPartitions=1, replicationFactor=1, expect=17)
    api.create_topic("ok", numPartitions=0, replicationFactor=1, expect=37)
    api.create_topic("ok", numPartitions=10_001, replicationFactor=1, expect=37)
    api.create_topic("ok", numPartitions=1, replicationFactor=3, expect=38)
    api.create_topic("ok", numPartitions=1, replicationFactor=0, expect=38)
    api.create_topic("ok", replicaAssignment=[[1, 9]], expect=39)
    api.create_topic("ok", replicaAssignment=[[1, 1]], expect=39)
    api.create_topic("ok", replicaAssignment=[[1, 2]], numPartitions=2, expect=39)
    assert api.end_offset() == before
    api.create_topic("x" * 249, numPartitions=1, replicationFactor=2)
    api.create_topic("ok", replicaAssignment=[[2, 1], [1, 2]])
    api.create_topic("ok", numPartitions=1, replicationFactor=1, expect=36)
    parts = partitions_by_index(api, "ok")
    assert [parts[0]["replicas"], parts[1]["replicas"]] == [[2, 1], [1, 2]]
    assert [parts[0]["leader"], parts[1]["leader"]] == [2, 1]
    assert [t["name"] for t in api.topics()] == ["ok", "x" * 249]

    deleted = api.admin.delete("/v1/topics/ok")
    assert deleted.status_code == 200
    assert deleted.json()["errorCode"] == 0
    assert api.admin.get("/v1/topics/ok").status_code == 404
    again = api.admin.delete("/v1/topics/ok")
    assert (again.status_code, again.json()["errorCode"]) == (404, 3)
    assert_read_api_matches_log(api)


def test_unregister_broker(api: Api) -> None:
    brokers = bring_up(api, [1, 2])
    api.create_topic("t", replicaAssignment=[[1, 2]])
    response = api.admin.delete("/v1/brokers/1")
    assert response.status_code == 200
    assert response.json()["errorCode"] == 0
    assert api.admin.get("/v1/brokers/1").status_code == 404
    [part] = api.topic("t")["partitions"]
    assert part["leader"] == 2
    assert part["isr"] == [2]
    assert part["offlineReplicas"] == [1]
    assert api.heartbeat(1, brokers[1].epoch)["errorCode"] == 77
    # Its dirs are free again for a new registration.
    api.register(3, brokers[1].dirs)
    again = api.admin.delete("/v1/brokers/1")
    assert (again.status_code, again.json()["errorCode"]) == (404, 102)
    assert_read_api_matches_log(api)


def test_controlled_shutdown(api: Api) -> None:
    brokers = bring_up(api, [1, 2], dirs_per_broker=1)
    api.create_topic("t", replicaAssignment=[[1, 2], [2, 1]])
    first = api.heartbeat(1, brokers[1].epoch, wantShutDown=True)
    assert (first["isFenced"], first["shouldShutDown"]) == (False, False), first
    info = api.broker_info(1)
    assert info["inControlledShutdown"] is True
    for part in api.topic("t")["partitions"]:
        assert part["leader"] == 2
        assert part["isr"] == [2]
    # Broker 2 catches up with the shutdown record; broker 1 may then shut down.
    deadline_offset = api.end_offset()
    assert api.heartbeat(2, brokers[2].epoch, offset=deadline_offset)["isFenced"] is False
    final = api.heartbeat(1, brokers[1].epoch, wantShutDown=True)
    assert (final["isFenced"], final["shouldShutDown"]) == (True, True), final
    info = api.broker_info(1)
    assert (info["fenced"], info["inControlledShutdown"]) == (True, False)
    assert api.cluster()["fencedBrokers"] == 1
    assert_read_api_matches_log(api)


def test_fencing_state_machine_and_leaderless_elections(api: Api) -> None:
    brokers = bring_up(api, [1, 2, 3], dirs_per_broker=1)
    api.create_topic("pair", replicaAssignment=[[1, 2]])

    # UNFENCED + wantFence → FENCED: leadership moves, the ISR shrinks.
    assert api.heartbeat(1, brokers[1].epoch, wantFence=True)["isFenced"] is True
    [part] = api.topic("pair")["partitions"]
    assert (part["leader"], part["isr"], part["offlineReplicas"]) == (2, [2], [1])
    # Fencing the last ISR member leaves the partition leaderless, the ISR never empty.
    assert api.heartbeat(2, brokers[2].epoch, wantFence=True)["isFenced"] is True
    [part] = api.topic("pair")["partitions"]
    assert (part["leader"], part["isr"], part["offlineReplicas"]) == (-1, [2], [1, 2])
    assert api.cluster()["offlinePartitions"] == 1
    # Unfencing a broker outside the ISR elects nothing; unfencing the ISR member does.
    assert api.heartbeat(1, brokers[1].epoch)["isFenced"] is False
    assert api.topic("pair")["partitions"][0]["leader"] == -1
    assert api.heartbeat(2, brokers[2].epoch)["isFenced"] is False
    [after] = api.topic("pair")["partitions"]
    assert (after["leader"], after["isr"]) == (2, [2])
    assert after["leaderEpoch"] == part["leaderEpoch"] + 1
    assert api.cluster()["offlinePartitions"] == 0

    # FENCED + wantShutDown → shutdown now.
    assert api.heartbeat(1, brokers[1].epoch, wantFence=True)["isFenced"] is True
    fenced_stop = api.heartbeat(1, brokers[1].epoch, wantShutDown=True)
    assert (fenced_stop["isFenced"], fenced_stop["shouldShutDown"]) == (True, True)
    # UNFENCED + wantShutDown while leading nothing → shutdown now, fenced.
    idle_stop = api.heartbeat(3, brokers[3].epoch, wantShutDown=True)
    assert (idle_stop["isFenced"], idle_stop["shouldShutDown"]) == (True, True)
    assert api.broker_info(3)["fenced"] is True
    assert api.cluster()["fencedBrokers"] == 2
    assert_read_api_matches_log(api)


def test_alter_partition_rules(api: Api) -> None:
    brokers = bring_up(api, [1, 2, 3])
    topic_id = api.create_topic("isr", replicaAssignment=[[1, 2, 3], [1, 3, 2]])["topicId"]
    for broker in brokers.values():
        api.assign(broker.broker_id, broker.epoch, {broker.dirs[0]: {topic_id: [0, 1]}})
    e1 = brokers[1].epoch

    def alter_one(index: int, new_isr: list[int], *, topic: str = topic_id, **fields: Any) -> dict[str, Any]:
        part = partitions_by_index(api, "isr").get(index, {"leaderEpoch": 0, "partitionEpoch": 0})
        entry = {
            "partitionIndex": index,
            "leaderEpoch": part["leaderEpoch"],
            "partitionEpoch": part["partitionEpoch"],
            "newIsr": new_isr,
            **fields,
        }
        reply = api.alter(1, e1, topic, [entry])
        assert reply["errorCode"] == 0, reply
        [result] = reply["topics"][0]["partitions"]
        assert result["partitionIndex"] == index
        return result

    before = api.end_offset()
    assert alter_one(0, [2, 3])["errorCode"] == 42, "the new ISR must hold the leader"
    assert alter_one(0, [1, 4])["errorCode"] == 42, "the new ISR must be a subset of the replicas"
    assert alter_one(7, [1])["errorCode"] == 3
    assert alter_one(0, [1], topic=random_uuid())["errorCode"] == 100
    stale = api.alter(1, e1 + 100, topic_id, [])
    assert (stale["errorCode"], stale["topics"]) == (77, [])
    assert api.end_offset() == before

    shrunk = alter_one(0, [1])
    assert (shrunk["errorCode"], shrunk["isr"], shrunk["leader"]) == (0, [1], 1)
    assert api.end_offset() == before + 1
    unchanged = alter_one(0, [1])
    assert unchanged["errorCode"] == 0
    assert api.end_offset() == before + 1, "an unchanged ISR writes nothing"

    # Adding a fenced broker, or a replica whose dir is offline, is refused (107).
    api.heartbeat(2, brokers[2].epoch, wantFence=True)
    assert alter_one(0, [1, 2])["errorCode"] == 107
    api.heartbeat(3, brokers[3].epoch, offlineLogDirs=[brokers[3].dirs[0]])
    assert alter_one(0, [1, 3])["errorCode"] == 107
    # ...and an unregistered one too.
    api.admin.delete("/v1/brokers/2")
    assert alter_one(1, [1, 2])["errorCode"] == 107
    assert partitions_by_index(api, "isr")[0]["isr"] == [1]
    assert_read_api_matches_log(api)


def test_concurrent_creates_of_one_name_have_one_winner(api: Api) -> None:
    bring_up(api, [1, 2])

    def create(_: int) -> int:
        with api.proc.admin() as admin:
            reply = admin.post(
                "/v1/topics", json={"name": "race", "numPartitions": 2, "replicationFactor": 2}
            )
            assert reply.status_code == 200
            code: int = reply.json()["errorCode"]
            return code

    with ThreadPoolExecutor(max_workers=16) as pool:
        codes = list(pool.map(create, range(32)))
    assert sorted(codes) == [0] + [36] * 31
    assert [t["name"] for t in api.topics()] == ["race"]
    assert_read_api_matches_log(api)


def test_dirs_are_listed_in_signed_uuid_order_and_single_dirs_are_placed_at_once(api: Api) -> None:
    positive, negative = "AQEBAQEBAQEBAQEBAQEBAQ", "_wEBAQEBAQEBAQEBAQEBAQ"  # msb > 0, msb < 0
    epoch = api.register(1, [positive, negative])
    assert api.broker_info(1)["logDirs"] == [negative, positive], "signed msb order, not text order"
    assert api.heartbeat(1, epoch)["isFenced"] is False
    single = random_uuid()
    epoch2 = api.register(2, [single])
    assert api.heartbeat(2, epoch2)["isFenced"] is False
    # Broker 1 loses one of its two dirs: it now has exactly one online dir.
    api.heartbeat(1, epoch, offlineLogDirs=[positive])
    api.create_topic("placed", replicaAssignment=[[1, 2], [2, 1]])
    parts = partitions_by_index(api, "placed")
    assert parts[0]["directories"] == [negative, single]
    assert parts[1]["directories"] == [single, negative]
    assert api.broker_info(1)["unassignedReplicas"] == 0
    assert_read_api_matches_log(api)
