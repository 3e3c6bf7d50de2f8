"""Synchronous produce / fetch helpers over the brokers' real HTTP API (tests only)."""

from __future__ import annotations

import base64
from typing import Any

import httpx

from tests.broker.conftest import Cluster, wait_for


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def produce(
    cluster: Cluster,
    broker: int,
    topic: str,
    partition: int,
    values: list[bytes],
    *,
    acks: int = -1,
    timeout_ms: int = 10_000,
) -> dict[str, Any]:
    body = {
        "topic": topic,
        "partition": partition,
        "acks": acks,
        "records": [{"key": None, "value": b64(v)} for v in values],
        "timeoutMs": timeout_ms,
    }
    reply = httpx.post(
        f"{cluster.brokers[broker].url}/v1/produce",
        json=body,
        headers={"Authorization": f"Bearer {cluster.cluster_token}"},
        timeout=timeout_ms / 1000 + 10,
    )
    assert reply.status_code == 200, reply.text
    result: dict[str, Any] = reply.json()
    return result


def fetch(
    cluster: Cluster, broker: int, topic: str, partition: int, offset: int, *, max_wait_ms: int = 0
) -> dict[str, Any]:
    reply = httpx.get(
        f"{cluster.brokers[broker].url}/v1/fetch",
        params={"topic": topic, "partition": partition, "offset": offset, "maxWaitMs": max_wait_ms},
        headers={"Authorization": f"Bearer {cluster.cluster_token}"},
        timeout=max_wait_ms / 1000 + 10,
    )
    assert reply.status_code == 200, reply.text
    result: dict[str, Any] = reply.json()
    for record in result.get("records", []):
        record["value"] = base64.b64decode(record["value"])
    return result


def fetch_all(cluster: Cluster, broker: int, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """Every record below the high watermark, from offset 0."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        reply = fetch(cluster, broker, topic, partition, offset)
        assert reply["errorCode"] == 0, reply
        if not reply["records"]:
            return out
        for record in reply["records"]:
            out.append((record["offset"], record["value"]))
        offset = out[-1][0] + 1


def leader(cluster: Cluster, topic: str, partition: int) -> int:
    leader_id: int = cluster.admin.describe_topic(topic)["partitions"][partition]["leader"]
    return leader_id


def isr(cluster: Cluster, topic: str, partition: int) -> list[int]:
    members: list[int] = cluster.admin.describe_topic(topic)["partitions"][partition]["isr"]
    return members


def wait_for_isr(
    cluster: Cluster, topic: str, partition: int, expected: set[int], *, timeout: float = 20
) -> None:
    wait_for(
        lambda: set(isr(cluster, topic, partition)) == expected,
        timeout=timeout,
        what=f"ISR of {topic}-{partition} to become {sorted(expected)}",
    )
