"""What our broker advertises in ApiVersions beside a real Apache Kafka 4.3.1 (issue 22).

Both are asked the same ApiVersions v3 on a raw socket (before any authentication, as every client
asks first). For each API we list, Kafka lists it too, from the same lowest version (Kafka 4's
floors, KIP-896; Produce from v0 on both, KAFKA-18659), and we go no higher than Kafka does. The
APIs Kafka has that we lack, and those where we stop below Kafka's newest version, are printed as a
table (`pytest -s`) for the record; they are not failures.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from kio.schema.index import api_key_map

from e2e.kafka_tools import KAFKA_VERSION, KafkaInstall
from e2e.kafka_tools import KafkaCluster as RealKafka
from jbod_kafka import protocol
from tests.kafka_api.conftest import start_kafka_cluster
from tests.kafka_api.raw_client import RawConnection
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

PRODUCE = 0
Versions = dict[int, tuple[int, int]]


def api_versions(address: str) -> Versions:
    """ApiVersions v3 of the broker at `address`: API key → (min, max version)."""
    request = protocol.build(
        protocol.request_type(protocol.API_VERSIONS_KEY, 3),
        client_software_name="jbod-api-versions-test",
        client_software_version="1",
    )
    with RawConnection(address) as conn:
        response = conn.request(protocol.API_VERSIONS_KEY, 3, request)
    assert int(response.error_code) == 0, response
    return {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in response.api_keys}


def api_name(key: int) -> str:
    return api_key_map.get(key, f"(API {key}, unknown to kio)")


def difference_table(ours: Versions, kafka: Versions) -> str:
    """The APIs where we differ from Kafka: missing here, or answered only up to a lower version."""
    rows = [("key", "API", f"Kafka {KAFKA_VERSION}", "ours")]
    for key in sorted(kafka):
        low, high = kafka[key]
        if key not in ours:
            rows.append((str(key), api_name(key), f"{low}-{high}", "-"))
        elif ours[key] != kafka[key]:
            rows.append((str(key), api_name(key), f"{low}-{high}", "{}-{}".format(*ours[key])))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows)


@pytest.fixture(scope="module")
def kafka_versions(install: KafkaInstall) -> Versions:  # noqa: F811
    with RealKafka(install) as kafka:
        return api_versions(kafka.bootstrap)


@pytest.fixture(scope="module")
def our_versions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Versions]:
    with contextlib.ExitStack() as stack:
        ours = start_kafka_cluster(stack, tmp_path_factory.mktemp("api-versions"), brokers=1)
        yield api_versions(ours.bootstrap)


def test_every_api_we_list_is_kafkas_from_the_same_floor(
    our_versions: Versions, kafka_versions: Versions
) -> None:
    table = difference_table(our_versions, kafka_versions)
    print(f"\nApiVersions v3, where our broker differs from Kafka {KAFKA_VERSION}:\n{table}")
    assert our_versions[PRODUCE][0] == kafka_versions[PRODUCE][0] == 0
    assert sorted(set(our_versions) - set(kafka_versions)) == [], "APIs we list that Kafka does not"
    floors = {api_name(k): (low, kafka_versions[k][0]) for k, (low, _high) in our_versions.items()}
    assert {name: f for name, f in floors.items() if f[0] != f[1]} == {}, (
        "our min version ≠ Kafka's (ours, Kafka's)"
    )


def test_no_api_we_list_goes_above_kafkas_newest_version(
    our_versions: Versions, kafka_versions: Versions
) -> None:
    above = {
        api_name(k): (high, kafka_versions[k][1])
        for k, (_low, high) in our_versions.items()
        if k in kafka_versions and high > kafka_versions[k][1]
    }
    assert above == {}, "our max version > Kafka's (ours, Kafka's)"
