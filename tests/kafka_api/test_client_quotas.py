"""Client quotas on the wire (issue 34), what no client library sends: AlterClientQuotas with
`validate_only`, DescribeClientQuotas' filters (EXACT, DEFAULT, ANY, strict, a bad filter), and
`controller_mutation_rate` (KIP-599) — a CreateTopics over the quota is created and answered with
the throttle time (its connection muted), the next one at a strict version is refused with
THROTTLING_QUOTA_EXCEEDED (89) and creates nothing — and `request_percentage` (a tiny quota
throttles a later Metadata), with the broker's metric counting both.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from jbod_kafka import protocol
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster
from tests.kafka_api.raw_client import RawConnection

pytestmark = [pytest.mark.slow, pytest.mark.integration]

EXACT, DEFAULT, ANY = 0, 1, 2
THROTTLING_QUOTA_EXCEEDED = 89
RATE = 1.0  # partitions per second: a bucket of 11 (11 windows of 1 s)


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(stack, tmp_path_factory.mktemp("client-quotas"), brokers=1, dirs=1)


@contextlib.contextmanager
def _admin(cluster: KafkaCluster) -> Iterator[RawConnection]:
    with RawConnection(cluster.bootstrap) as conn:
        assert int(conn.authenticate("admin", cluster.admin_password).error_code) == 0
        yield conn


def _build(key: int, version: int, **fields: Any) -> Any:
    return protocol.build(protocol.request_type(key, version), **fields)


def _alter(
    conn: RawConnection,
    entity: list[tuple[str, str | None]],
    ops: list[tuple[str, float, bool]],
    *,
    validate_only: bool = False,
) -> list[tuple[int, str | None]]:
    body = _build(
        49,
        1,
        entries=[
            {
                "entity": [{"entity_type": k, "entity_name": n} for k, n in entity],
                "ops": [{"key": key, "value": value, "remove": remove} for key, value, remove in ops],
            }
        ],
        validate_only=validate_only,
    )
    return [(int(e.error_code), e.error_message) for e in conn.request(49, 1, body).entries]


def _describe(conn: RawConnection, components: list[tuple[str, int, str | None]], *, strict: bool) -> Any:
    body = _build(
        48,
        1,
        components=[{"entity_type": k, "match_type": m, "match": n} for k, m, n in components],
        strict=strict,
    )
    return conn.request(48, 1, body)


def _entities(response: Any) -> list[list[tuple[str, str | None]]]:
    return [[(e.entity_type, e.entity_name) for e in entry.entity] for entry in response.entries]


def _create_topic(conn: RawConnection, version: int, name: str, partitions: int) -> Any:
    body = _build(
        19,
        version,
        topics=[
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
        ],
        timeout=30_000,
        validate_only=False,
    )
    return conn.request(19, version, body)


def test_quotas_are_altered_described_and_mutations_throttled(kafka_cluster: KafkaCluster) -> None:
    with _admin(kafka_cluster) as conn:
        # validate_only checks and writes nothing; a bad value is Kafka's 42 with its message.
        assert _alter(
            conn, [("user", "admin")], [("controller_mutation_rate", RATE, False)], validate_only=True
        ) == [(0, None)]
        assert _entities(_describe(conn, [], strict=False)) == []
        assert _alter(conn, [("user", "admin")], [("producer_byte_rate", 1.5, False)]) == [
            (42, "producer_byte_rate cannot be a fractional value.")
        ]
        assert _alter(conn, [("user", "admin")], [("controller_mutation_rate", RATE, False)]) == [(0, None)]
        assert _alter(
            conn, [("user", None), ("client-id", None)], [("consumer_byte_rate", 4096e3, False)]
        ) == [(0, None)]
        # Filters: EXACT and strict, DEFAULT, ANY without strict, a filter Kafka refuses.
        exact = _describe(conn, [("user", EXACT, "admin")], strict=True)
        assert _entities(exact) == [[("user", "admin")]]
        assert [(v.key, v.value) for v in exact.entries[0].values] == [("controller_mutation_rate", RATE)]
        assert _entities(_describe(conn, [("user", DEFAULT, None)], strict=True)) == []
        assert _entities(_describe(conn, [("user", DEFAULT, None)], strict=False)) == [
            [("client-id", None), ("user", None)]
        ]
        assert len(_describe(conn, [("user", ANY, None)], strict=False).entries) == 2
        refused = _describe(conn, [("user", ANY, None), ("user", ANY, None)], strict=False)
        assert int(refused.error_code) == 42 and refused.entries is None

        # 30 partitions against a bucket of 11: created, then 19 s to wait.
        created = _create_topic(conn, 7, "mutated-1", 30)
        assert int(created.topics[0].error_code) == 0
        assert created.throttle_time.total_seconds() > 10
    with _admin(kafka_cluster) as other:  # the first connection is muted; the quota is the user's
        refused_topic = _create_topic(other, 7, "mutated-2", 1)
        assert int(refused_topic.topics[0].error_code) == THROTTLING_QUOTA_EXCEEDED
        assert refused_topic.throttle_time.total_seconds() > 10
    with _admin(kafka_cluster) as third:
        listed = third.request(
            3,
            12,
            _build(
                3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
            ),
        )
        names = {t.name for t in listed.topics}
        assert "mutated-1" in names and "mutated-2" not in names
        # Removing the quota lets the user mutate again at once.
        assert _alter(third, [("user", "admin")], [("controller_mutation_rate", 0.0, True)]) == [(0, None)]
        assert int(_create_topic(third, 7, "mutated-3", 1).topics[0].error_code) == 0
    # request_percentage: the handlers' own time, over a tiny quota, throttles a later request.
    with _admin(kafka_cluster) as fourth:
        assert _alter(fourth, [("user", "admin")], [("request_percentage", 0.001, False)]) == [(0, None)]
    with _admin(kafka_cluster) as metered:
        metadata = _build(
            3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        answers = []
        while len(answers) < 200 and not any(a.throttle_time.total_seconds() > 0 for a in answers):
            answers.append(metered.request(3, 12, metadata))
        assert answers[-1].throttle_time.total_seconds() > 0, f"no throttle after {len(answers)} requests"
    metrics = httpx.get(f"{kafka_cluster.cluster.brokers[1].url}/metrics", timeout=10).text
    counted = re.search(
        r'^jbod_kafka_client_throttle_seconds_total\{client_id="[^"]*",quota_type="controller_mutation",user="admin"\} (\S+)$',
        metrics,
        re.MULTILINE,
    )
    assert counted is not None and float(counted.group(1)) > 10, metrics[-2000:]
    assert 'quota_type="request",user="admin"' in metrics
