"""Produce to and fetch from one named broker over its Kafka listener, one request each (tests only).

A test names the broker: the leader, or a follower or an outsider to see its exact error code,
which a client library would never show (it goes to the leader by itself). So each call opens one
SASL/PLAIN connection as `admin` to that broker's Kafka listener (`tests.kafka_api.raw_client`)
and sends one Produce (v12) or Fetch (v12) of one partition.

* `produce` appends `values` (null keys) as one batch with `acks` and answers Kafka's error code
  and the base offset (`Produced`); acks=0 has no answer, so it returns once the broker answered a
  request sent after it on the same connection (it has read the produce).
* `fetch` answers Kafka's error code, the partition's high watermark and log start offset, and
  the records from `offset` on (`Fetched`: only records below the high watermark, as the leader
  serves a consumer), waiting up to `max_wait_ms` for one.
"""

from __future__ import annotations

import time
from typing import Any, Final, TypedDict

from jbod_client.controller import read_token
from jbod_kafka import protocol, record_batch
from tests.broker.conftest import KAFKA_LISTENER, Cluster, wait_for
from tests.kafka_api.raw_client import RawConnection

PRODUCE: Final = 0
FETCH: Final = 1
API_VERSIONS: Final = 18
VERSION: Final = 12  # of Produce and Fetch: topics by name


class Produced(TypedDict):
    errorCode: int  # Kafka's
    baseOffset: int  # -1 on an error and for acks=0


class FetchedRecord(TypedDict):
    offset: int
    key: bytes | None
    value: bytes


class Fetched(TypedDict):
    errorCode: int  # Kafka's
    highWatermark: int
    logStartOffset: int
    records: list[FetchedRecord]


def connect(cluster: Cluster, broker: int, *, timeout: float = 30.0) -> RawConnection:
    """A connection to `broker`'s Kafka listener, logged in as `admin` (SASL/PLAIN)."""
    conn = RawConnection(cluster.brokers[broker].kafka[KAFKA_LISTENER], timeout=timeout)
    answer = conn.authenticate("admin", read_token(cluster.controller.admin_token_file))
    assert int(answer.error_code) == 0, answer
    return conn


def _request(api_key: int, **fields: Any) -> Any:
    return protocol.build(protocol.request_type(api_key, VERSION), **fields)


def produce(
    cluster: Cluster,
    broker: int,
    topic: str,
    partition: int,
    values: list[bytes],
    *,
    acks: int = -1,
    timeout_ms: int = 10_000,
) -> Produced:
    """`values` as one batch to `broker` (see the module docstring)."""
    batch = record_batch.encode_batch(0, -1, time.time_ns() // 1_000_000, [(None, v) for v in values])
    body = _request(
        PRODUCE,
        acks=acks,
        timeout=timeout_ms,
        topic_data=[{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    )
    with connect(cluster, broker, timeout=timeout_ms / 1000 + 10) as conn:
        if acks == 0:
            conn.send(PRODUCE, VERSION, body)
            conn.request(API_VERSIONS, 0, protocol.build(protocol.request_type(API_VERSIONS, 0)))
            return {"errorCode": 0, "baseOffset": -1}
        answer = conn.request(PRODUCE, VERSION, body)
    [part] = answer.responses[0].partition_responses
    return {"errorCode": int(part.error_code), "baseOffset": int(part.base_offset)}


def fetch(
    cluster: Cluster, broker: int, topic: str, partition: int, offset: int, *, max_wait_ms: int = 0
) -> Fetched:
    """The records of one partition from `offset` on, as `broker` serves them (module docstring)."""
    body = _request(
        FETCH,
        replica_id=-1,
        max_wait=max_wait_ms,
        min_bytes=1 if max_wait_ms else 0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    with connect(cluster, broker, timeout=max_wait_ms / 1000 + 10) as conn:
        answer = conn.request(FETCH, VERSION, body)
    [part] = answer.responses[0].partitions
    data = bytes(part.records or b"")
    records: list[FetchedRecord] = [
        {"offset": r.offset, "key": r.key, "value": r.value or b""}
        for header in record_batch.iter_headers(data)
        for r in record_batch.decode_records(data[header.position : header.position + header.size])
        if r.offset >= offset
    ]
    return {
        "errorCode": int(part.error_code),
        "highWatermark": int(part.high_watermark),
        "logStartOffset": int(part.log_start_offset),
        "records": records,
    }


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
