"""`GET /v1/metadata`, `/metrics` and the probes of a real controller process (protocol §3.5, §4.5).

Covers: paging with `maxRecords` (the first record has offset `fromOffset`), the closed list of
record types with gap-free offsets, long-polling that returns as soon as a record commits, a
quiet cluster whose end offset does not move, `fromOffset` past the end (errorCode 1), the
controller's metrics, and `/healthz` / `/readyz` without a token.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import httpx

from tests.controller.conftest import Api, bring_up

RECORD_TYPES = {
    "RegisterBrokerRecord",
    "BrokerRegistrationChangeRecord",
    "UnregisterBrokerRecord",
    "TopicRecord",
    "PartitionRecord",
    "PartitionChangeRecord",
    "RemoveTopicRecord",
}


def test_paging_and_offsets(api: Api) -> None:
    brokers = bring_up(api, [1, 2, 3])
    api.create_topic("paged", numPartitions=20, replicationFactor=2)
    api.heartbeat(2, brokers[2].epoch, offlineLogDirs=[brokers[2].dirs[0]])
    end = api.end_offset()
    # 3 registrations, 3 unfencings, a TopicRecord, 20 PartitionRecords, 1 dir-offline change (the
    # replicas are still UNASSIGNED, which counts as online, so no partition changes).
    assert end == 28

    whole = api.metadata(0)
    assert whole["errorCode"] == 0
    assert whole["snapshot"] is False
    assert whole["endOffset"] == end
    assert [r["offset"] for r in whole["records"]] == list(range(end))
    assert {r["type"] for r in whole["records"]} <= RECORD_TYPES
    assert whole["records"][0]["type"] == "RegisterBrokerRecord"

    for max_records in (1, 4, 7, end, end + 5):
        pages: list[dict[str, Any]] = []
        offset = 0
        while offset < end:
            page = api.metadata(offset, maxRecords=max_records)
            assert page["records"], page
            assert page["records"][0]["offset"] == offset
            assert len(page["records"]) == min(max_records, end - offset)
            pages.extend(page["records"])
            offset = page["records"][-1]["offset"] + 1
        assert pages == whole["records"]

    middle = api.metadata(9, maxRecords=3)
    assert [r["offset"] for r in middle["records"]] == [9, 10, 11]
    assert middle["endOffset"] == end

    at_end = api.metadata(end)
    assert (at_end["errorCode"], at_end["records"], at_end["endOffset"]) == (0, [], end)
    past = api.metadata(end + 1)
    assert past["errorCode"] == 1
    assert past["records"] == []
    assert past["errorMessage"]
    far = api.metadata(2**62)
    assert far["errorCode"] == 1


def test_quiet_cluster_end_offset_does_not_move(api: Api) -> None:
    brokers = bring_up(api, [1, 2])
    api.create_topic("quiet", numPartitions=2, replicationFactor=2)
    end = api.end_offset()
    for _ in range(5):
        for broker in brokers.values():
            assert api.heartbeat(broker.broker_id, broker.epoch)["isFenced"] is False
    api.topics()
    api.brokers()
    assert api.end_offset() == end
    assert api.metadata(0)["endOffset"] == end


def test_long_poll_returns_when_a_record_commits(api: Api) -> None:
    bring_up(api, [1])
    end = api.end_offset()
    result: dict[str, Any] = {}

    def poll() -> None:
        # The longest wait allowed (60 s): only the commit can end it within the join below.
        with api.proc.broker(timeout=90) as client:
            result["response"] = client.get("/v1/metadata", params={"fromOffset": end, "maxWaitMs": 60_000})

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    # fixed wait: lets the poll reach the server first, so it is the commit that answers it; a poll
    # that came later would be answered at once with the same record: the test cannot tell.
    time.sleep(0.3)
    created = api.create_topic("woken", numPartitions=1, replicationFactor=1)
    thread.join(timeout=30)
    assert not thread.is_alive(), "the long poll was not woken by the commit"
    response = result["response"]
    assert response.status_code == 200
    body = response.json()
    assert body["errorCode"] == 0
    assert body["records"], body
    first = body["records"][0]
    assert first["offset"] == end
    assert first["type"] == "TopicRecord"
    assert first["data"]["topicId"] == created["topicId"]


def test_long_poll_times_out_empty(api: Api) -> None:
    bring_up(api, [1])
    end = api.end_offset()
    started = time.monotonic()
    body = api.metadata(end, maxWaitMs=400)
    elapsed = time.monotonic() - started
    assert (body["errorCode"], body["records"], body["endOffset"]) == (0, [], end)
    assert elapsed >= 0.35, "with nothing new the fetch waits for maxWaitMs"
    # A fetch with records available never waits.
    assert api.metadata(0, maxWaitMs=60_000)["records"]


def parse_metrics(text: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        values[name] = float(value)
    return values


def test_metrics(api: Api) -> None:
    brokers = bring_up(api, [1, 2, 3])
    topic_id = api.create_topic("solo", replicaAssignment=[[3]])["topicId"]
    api.assign(3, brokers[3].epoch, {brokers[3].dirs[1]: {topic_id: [0]}})
    api.heartbeat(2, brokers[2].epoch, wantFence=True)
    # Every dir of broker 3 offline: an empty online list means its placed replicas are offline.
    api.heartbeat(3, brokers[3].epoch, offlineLogDirs=brokers[3].dirs)
    api.metadata(0)
    cluster = api.cluster()
    assert (cluster["fencedBrokers"], cluster["offlinePartitions"]) == (1, 1)

    response = httpx.get(f"{api.proc.url}/metrics")  # no token needed
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    values = parse_metrics(response.text)
    assert values["jbod_controller_fenced_brokers"] == 1
    assert values["jbod_controller_offline_partitions"] == 1
    assert values["jbod_controller_metadata_end_offset"] == cluster["metadataEndOffset"]
    assert "# TYPE jbod_controller_request_seconds histogram" in response.text
    for api_name in ("register", "heartbeat", "create-topic", "metadata", "cluster"):
        assert values[f'jbod_controller_request_seconds_count{{api="{api_name}"}}'] >= 1, api_name
    buckets = [n for n in values if n.startswith("jbod_controller_request_seconds_bucket")]
    assert buckets
    assert not [n for n in values if re.search(r"partition=|topic=", n)], "no partition-level labels"


def test_probes_need_no_token(api: Api) -> None:
    for path in ("/healthz", "/readyz"):
        response = httpx.get(f"{api.proc.url}{path}")
        assert response.status_code == 200, path
        assert response.headers["content-type"].startswith("application/json")


def test_default_page_is_10000_records(api: Api) -> None:
    bring_up(api, [1])
    api.create_topic("wide", numPartitions=10_000, replicationFactor=1)
    end = api.end_offset()
    assert end == 2 + 1 + 10_000
    first = api.metadata(0)
    assert len(first["records"]) == 10_000
    assert first["endOffset"] == end
    rest = api.metadata(first["records"][-1]["offset"] + 1)
    assert [r["offset"] for r in rest["records"]] == list(range(10_000, end))
