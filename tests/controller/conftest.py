"""Helpers for the controller's real-process tests: ids, a thin HTTP client and a record replayer.

Guarantees:
* `Api` wraps one running `ControllerProcess`; every helper asserts the HTTP status it expects, so
  a test reads as the protocol steps it drives.
* `replay_records` rebuilds the cluster state from `/v1/metadata` records with its own small rules
  (independent of `jbod_core`), so tests can check that the log and the read API agree.
* `Heartbeater` keeps brokers' sessions alive from a background thread and is always stopped.
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness import ControllerProcess

UNASSIGNED = "AAAAAAAAAAAAAAAAAAAAAA"
LOST = "AAAAAAAAAAAAAAAAAAAAAQ"
MIGRATING = "AAAAAAAAAAAAAAAAAAAAAg"


def random_uuid() -> str:
    """A fresh Uuid text: base64url of 16 random bytes, not reserved, not starting with '-'."""
    while True:
        raw = os.urandom(16)
        if raw[:8] == bytes(8) and int.from_bytes(raw[8:], "big") < 100:
            continue
        text = base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


def uuid_key(text: str) -> tuple[int, int]:
    """The contract's Uuid order: msb then lsb, both signed."""
    raw = base64.urlsafe_b64decode(text + "==")
    return int.from_bytes(raw[:8], "big", signed=True), int.from_bytes(raw[8:], "big", signed=True)


@dataclass
class Api:
    """Protocol steps against one controller process (cluster token for broker calls)."""

    proc: ControllerProcess
    _admin: httpx.Client | None = None
    _broker: httpx.Client | None = None

    @property
    def admin(self) -> httpx.Client:
        if self._admin is None or self._admin.base_url != httpx.URL(self.proc.url):
            self._admin = self.proc.admin()
        return self._admin

    @property
    def broker(self) -> httpx.Client:
        if self._broker is None or self._broker.base_url != httpx.URL(self.proc.url):
            self._broker = self.proc.broker()
        return self._broker

    def close(self) -> None:
        for client in (self._admin, self._broker):
            if client is not None:
                client.close()

    # -- broker calls -------------------------------------------------------------------------

    def register(
        self,
        broker_id: int,
        dirs: list[str],
        *,
        incarnation: str | None = None,
        expect: int = 0,
        **extra: Any,
    ) -> int:
        body = {
            "brokerId": broker_id,
            "clusterId": self.proc.cluster_id,
            "incarnationId": incarnation or random_uuid(),
            "logDirs": dirs,
            **extra,
        }
        response = self.broker.post("/v1/brokers/register", json=body)
        assert response.status_code == 200, response.text
        reply = response.json()
        assert reply["errorCode"] == expect, reply
        return int(reply["brokerEpoch"])

    def heartbeat(
        self, broker_id: int, epoch: int, *, offset: int | None = None, **extra: Any
    ) -> dict[str, Any]:
        body = {
            "brokerId": broker_id,
            "brokerEpoch": epoch,
            "currentMetadataOffset": self.end_offset() if offset is None else offset,
            **extra,
        }
        response = self.broker.post("/v1/brokers/heartbeat", json=body)
        assert response.status_code == 200, response.text
        reply: dict[str, Any] = response.json()
        return reply

    def assign(
        self, broker_id: int, epoch: int, placements: dict[str, dict[str, list[int]]]
    ) -> dict[str, Any]:
        """placements: dir id -> topic id -> partition indexes."""
        body = {
            "brokerId": broker_id,
            "brokerEpoch": epoch,
            "directories": [
                {
                    "id": dir_id,
                    "topics": [
                        {"topicId": topic_id, "partitions": [{"partitionIndex": p} for p in parts]}
                        for topic_id, parts in topics.items()
                    ],
                }
                for dir_id, topics in placements.items()
            ],
        }
        response = self.broker.post("/v1/assignments", json=body)
        assert response.status_code == 200, response.text
        reply: dict[str, Any] = response.json()
        return reply

    def alter(
        self, broker_id: int, epoch: int, topic_id: str, partitions: list[dict[str, Any]]
    ) -> dict[str, Any]:
        body = {
            "brokerId": broker_id,
            "brokerEpoch": epoch,
            "topics": [{"topicId": topic_id, "partitions": partitions}],
        }
        response = self.broker.post("/v1/partitions/alter", json=body)
        assert response.status_code == 200, response.text
        reply: dict[str, Any] = response.json()
        return reply

    def metadata(self, from_offset: int = 0, **params: Any) -> dict[str, Any]:
        response = self.broker.get("/v1/metadata", params={"fromOffset": from_offset, **params})
        assert response.status_code == 200, response.text
        reply: dict[str, Any] = response.json()
        return reply

    def all_records(
        self, from_offset: int = 0, *, max_records: int = 10_000
    ) -> tuple[list[dict[str, Any]], bool]:
        """Every record from `from_offset`, paged; returns (records, whether a snapshot led)."""
        out: list[dict[str, Any]] = []
        snapshot = False
        offset = from_offset
        first = True
        while True:
            page = self.metadata(offset, maxRecords=max_records)
            assert page["errorCode"] == 0, page
            if first:
                snapshot = page["snapshot"]
                first = False
            else:
                assert page["snapshot"] is False
            out.extend(page["records"])
            if page["records"]:
                offset = page["records"][-1]["offset"] + 1
            if offset >= page["endOffset"]:
                return out, snapshot

    # -- admin calls --------------------------------------------------------------------------

    def end_offset(self) -> int:
        return int(self.cluster()["metadataEndOffset"])

    def cluster(self) -> dict[str, Any]:
        response = self.admin.get("/v1/cluster")
        assert response.status_code == 200, response.text
        reply: dict[str, Any] = response.json()
        return reply

    def create_topic(self, name: str, *, expect: int = 0, **body: Any) -> dict[str, Any]:
        response = self.admin.post("/v1/topics", json={"name": name, **body})
        assert response.status_code == 200, response.text
        reply: dict[str, Any] = response.json()
        assert reply["errorCode"] == expect, reply
        return reply

    def topic(self, name: str) -> dict[str, Any]:
        response = self.admin.get(f"/v1/topics/{name}")
        assert response.status_code == 200, response.text
        reply: dict[str, Any] = response.json()
        return reply

    def topics(self) -> list[dict[str, Any]]:
        response = self.admin.get("/v1/topics")
        assert response.status_code == 200, response.text
        reply: list[dict[str, Any]] = response.json()
        return reply

    def broker_info(self, broker_id: int) -> dict[str, Any]:
        response = self.admin.get(f"/v1/brokers/{broker_id}")
        assert response.status_code == 200, response.text
        reply: dict[str, Any] = response.json()
        return reply

    def brokers(self) -> list[dict[str, Any]]:
        response = self.admin.get("/v1/brokers")
        assert response.status_code == 200, response.text
        reply: list[dict[str, Any]] = response.json()
        return reply

    def state(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """What the read API says about brokers and topics (for before/after comparisons)."""
        return self.brokers(), self.topics()


@pytest.fixture
def api(controller: ControllerProcess) -> Iterator[Api]:
    client = Api(controller)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def make_controller(tmp_path: Path) -> Iterator[Any]:
    """Factory for controllers with custom flags; every process started is killed at the end."""
    started: list[ControllerProcess] = []

    def make(name: str = "controller", **kwargs: Any) -> ControllerProcess:
        proc = ControllerProcess(data_dir=tmp_path / name, **kwargs)
        started.append(proc)
        return proc.start()

    try:
        yield make
    finally:
        for proc in started:
            proc.kill()


# ---------------------------------------------------------------------------------------------
# Cluster bring-up


@dataclass
class Broker:
    broker_id: int
    dirs: list[str]
    incarnation: str
    epoch: int


def bring_up(api: Api, broker_ids: list[int], *, dirs_per_broker: int = 2) -> dict[int, Broker]:
    """Register the brokers and heartbeat each until it is unfenced (no replicas yet)."""
    out: dict[int, Broker] = {}
    for broker_id in broker_ids:
        dirs = [random_uuid() for _ in range(dirs_per_broker)]
        incarnation = random_uuid()
        epoch = api.register(broker_id, dirs, incarnation=incarnation)
        out[broker_id] = Broker(broker_id, dirs, incarnation, epoch)
    for broker in out.values():
        reply = api.heartbeat(broker.broker_id, broker.epoch)
        assert reply["errorCode"] == 0, reply
        assert reply["isCaughtUp"] is True
        assert reply["isFenced"] is False, reply
    return out


class Heartbeater:
    """Heartbeats the given brokers every `interval` seconds until stopped (a context manager)."""

    def __init__(self, proc: ControllerProcess, brokers: list[Broker], *, interval: float = 0.2) -> None:
        self.proc = proc
        self.brokers = brokers
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.errors: list[str] = []

    def _run(self) -> None:
        with self.proc.broker(timeout=5) as client:
            while not self._stop.is_set():
                for broker in self.brokers:
                    try:
                        reply = client.post(
                            "/v1/brokers/heartbeat",
                            json={
                                "brokerId": broker.broker_id,
                                "brokerEpoch": broker.epoch,
                                "currentMetadataOffset": 2**62,
                            },
                        ).json()
                        if reply["errorCode"] != 0:
                            self.errors.append(str(reply))
                    except httpx.HTTPError as exc:
                        self.errors.append(repr(exc))
                self._stop.wait(self.interval)

    def __enter__(self) -> Heartbeater:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


# ---------------------------------------------------------------------------------------------
# An independent replay of the metadata log


@dataclass
class ReplayedImage:
    brokers: dict[int, dict[str, Any]] = field(default_factory=dict)
    topics: dict[str, dict[str, Any]] = field(default_factory=dict)  # by topic id
    # The admin extensions: SCRAM credentials' data by (user, mechanism); the producer-id watermark.
    credentials: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    next_producer_id: int = 0
    # Dynamic broker configs by resource ("" = the cluster default).
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)

    def describe_brokers(self) -> list[dict[str, Any]]:
        """The registrations in the shape of `GET /v1/brokers` (without the derived
        `unassignedReplicas` and `acceptsNewReplicas`)."""
        out = []
        for broker_id in sorted(self.brokers):
            b = self.brokers[broker_id]
            out.append(
                {
                    "brokerId": broker_id,
                    "brokerEpoch": b["brokerEpoch"],
                    "incarnationId": b["incarnationId"],
                    "fenced": b["fenced"],
                    "inControlledShutdown": b["inControlledShutdown"],
                    "logDirs": sorted(b["logDirs"], key=uuid_key),
                    "offlineLogDirs": sorted(b.get("offlineLogDirs", []), key=uuid_key),
                    "hasOfflineLogDirs": b["hasOfflineLogDirs"],
                    "cordonedLogDirs": sorted(b.get("cordonedLogDirs", []), key=uuid_key),
                    "slowLogDirs": sorted(b.get("slowLogDirs", []), key=uuid_key),
                    "listeners": b["listeners"],
                    "rack": b["rack"],
                }
            )
        return out

    def describe_topics(self) -> list[dict[str, Any]]:
        """The topics in the shape of `GET /v1/topics` (without `offlineReplicas`)."""
        out = []
        for topic in sorted(self.topics.values(), key=lambda t: t["name"]):
            parts = []
            for index in sorted(topic["partitions"]):
                p = topic["partitions"][index]
                parts.append({"partitionIndex": index, **{k: p[k] for k in PARTITION_FIELDS}})
            out.append(
                {
                    "name": topic["name"],
                    "topicId": topic["topicId"],
                    "configs": topic["configs"],
                    "partitions": parts,
                }
            )
        return out


PARTITION_FIELDS = ("leader", "leaderEpoch", "partitionEpoch", "replicas", "isr", "directories")


def replay_records(records: list[dict[str, Any]]) -> ReplayedImage:
    image = ReplayedImage()
    for record in records:
        kind, data = record["type"], record["data"]
        if kind == "RegisterBrokerRecord":
            image.brokers[data["brokerId"]] = dict(data)
        elif kind == "BrokerRegistrationChangeRecord":
            broker = image.brokers[data["brokerId"]]
            assert broker["brokerEpoch"] == data["brokerEpoch"], record
            broker.update({k: v for k, v in data.items() if k not in ("brokerId", "brokerEpoch")})
        elif kind == "UnregisterBrokerRecord":
            del image.brokers[data["brokerId"]]
        elif kind == "TopicRecord":
            image.topics[data["topicId"]] = {
                "name": data["name"],
                "topicId": data["topicId"],
                "configs": data.get("configs", {}),
                "partitions": {},
            }
        elif kind == "PartitionRecord":
            assert data["isr"], record
            assert len(data["directories"]) == len(data["replicas"]), record
            image.topics[data["topicId"]]["partitions"][data["partitionId"]] = {
                k: data[k] for k in PARTITION_FIELDS
            }
        elif kind == "PartitionChangeRecord":
            part = image.topics[data["topicId"]]["partitions"][data["partitionId"]]
            assert data["partitionEpoch"] == part["partitionEpoch"] + 1, record
            if "leader" in data:
                # §3.6: a change that sets the leader bumps the leader epoch by exactly one.
                assert data.get("leaderEpoch", part["leaderEpoch"] + 1) == part["leaderEpoch"] + 1, record
                part["leaderEpoch"] += 1
            if data.get("isr") == []:
                raise AssertionError(f"an ISR became empty: {record}")
            if "replicas" in data and "directories" not in data:
                old = dict(zip(part["replicas"], part["directories"], strict=True))
                part["directories"] = [old.get(b, UNASSIGNED) for b in data["replicas"]]
            part.update({k: data[k] for k in PARTITION_FIELDS if k in data})
        elif kind == "RemoveTopicRecord":
            del image.topics[data["topicId"]]
        else:
            _replay_extension(image, record)
    return image


def _replay_extension(image: ReplayedImage, record: dict[str, Any]) -> None:
    """The admin extensions' records (docs/api.md), each checked as the image's replay checks it."""
    kind, data = record["type"], record["data"]
    if kind == "ConfigRecord":
        configs = dict(image.topics[data["topicId"]]["configs"])
        if data["value"] is None:
            del configs[data["name"]]
        else:
            configs[data["name"]] = data["value"]
        image.topics[data["topicId"]]["configs"] = configs
    elif kind == "UserScramCredentialRecord":
        image.credentials[(data["name"], data["mechanism"])] = dict(data)
    elif kind == "RemoveUserScramCredentialRecord":
        del image.credentials[(data["name"], data["mechanism"])]
    elif kind == "ProducerIdsRecord":
        assert data["nextProducerId"] > image.next_producer_id, record
        image.next_producer_id = data["nextProducerId"]
    elif kind == "BrokerConfigRecord":
        configs = image.broker_configs.setdefault(data["broker"], {})
        if data["value"] is None:
            del configs[data["name"]]
        else:
            configs[data["name"]] = data["value"]
    else:
        raise AssertionError(f"record type outside the contract and its extensions: {record}")


def assert_read_api_matches_log(api: Api) -> list[dict[str, Any]]:
    """Replay the whole log and compare with `GET /v1/brokers` and `GET /v1/topics`."""
    records, _snapshot = api.all_records()
    image = replay_records(records)
    derived = ("unassignedReplicas", "acceptsNewReplicas")
    brokers = [{k: v for k, v in b.items() if k not in derived} for b in api.brokers()]
    assert brokers == image.describe_brokers()
    topics = api.topics()
    for topic in topics:
        for part in topic["partitions"]:
            del part["offlineReplicas"]
    assert topics == image.describe_topics()
    return records
