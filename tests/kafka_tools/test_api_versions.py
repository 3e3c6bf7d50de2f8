"""What our broker advertises in ApiVersions beside a real Apache Kafka 4.3.1 (issues 22, 30).

Both are asked the same ApiVersions v4 on a raw socket (before any authentication, as every client
asks first). For each API we list, Kafka lists it too, from the same lowest version (Kafka 4's
floors, KIP-896; Produce from v0 on both, KAFKA-18659), and we go no higher than Kafka does. The
APIs Kafka has that we lack, and those where we stop below Kafka's newest version, are printed as a
table (`pytest -s`) for the record; they are not failures.

docs/kafka-apis.md is kept true here: its API table's `ours` column is exactly what our broker
lists (a served API with its range, `—` for one it does not list), its `Kafka 4.3.1` column and
its features table exactly what the real Kafka lists (one Kafka for the module, started only for
the tests that compare with it), and each API's name is Kafka's for its key.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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
VERSION = 4  # ApiVersions' newest, ours and Kafka 4.3.1's
Versions = dict[int, tuple[int, int]]


DOC = Path(__file__).resolve().parents[2] / "docs" / "kafka-apis.md"
Features = dict[str, tuple[int, int]]


@dataclass(frozen=True)
class Advertised:
    """One ApiVersions answer: the APIs, and the features supported and finalized (KIP-584)."""

    apis: Versions
    supported: Features
    finalized: Features
    finalized_epoch: int


def advertised(address: str) -> Advertised:
    """ApiVersions v4 of the broker at `address` (v4: features of min version 0 too, KIP-1022)."""
    request = protocol.build(
        protocol.request_type(protocol.API_VERSIONS_KEY, VERSION),
        client_software_name="jbod-api-versions-test",
        client_software_version="1",
    )
    with RawConnection(address) as conn:
        response = conn.request(protocol.API_VERSIONS_KEY, VERSION, request)
    assert int(response.error_code) == 0, response
    return Advertised(
        apis={int(a.api_key): (int(a.min_version), int(a.max_version)) for a in response.api_keys},
        supported={f.name: (int(f.min_version), int(f.max_version)) for f in response.supported_features},
        finalized={
            f.name: (int(f.min_version_level), int(f.max_version_level)) for f in response.finalized_features
        },
        finalized_epoch=int(response.finalized_features_epoch),
    )


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
def kafka_advertised(install: KafkaInstall) -> Advertised:  # noqa: F811
    with RealKafka(install) as kafka:
        return advertised(kafka.bootstrap)


@pytest.fixture(scope="module")
def our_advertised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Advertised]:
    with contextlib.ExitStack() as stack:
        ours = start_kafka_cluster(stack, tmp_path_factory.mktemp("api-versions"), brokers=1)
        yield advertised(ours.bootstrap)


@pytest.fixture(scope="module")
def kafka_versions(kafka_advertised: Advertised) -> Versions:
    return kafka_advertised.apis


@pytest.fixture(scope="module")
def our_versions(our_advertised: Advertised) -> Versions:
    return our_advertised.apis


def test_every_api_we_list_is_kafkas_from_the_same_floor(
    our_versions: Versions, kafka_versions: Versions
) -> None:
    table = difference_table(our_versions, kafka_versions)
    print(f"\nApiVersions v{VERSION}, where our broker differs from Kafka {KAFKA_VERSION}:\n{table}")
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


# -- docs/kafka-apis.md ------------------------------------------------------------------------

NOT_SERVED = "—"


@dataclass(frozen=True)
class ApiRow:
    name: str
    ours: tuple[int, int] | None  # None: not served
    kafka: tuple[int, int]


def _range(cell: str) -> tuple[int, int]:
    """`3-13` or `0` (a single version) → (low, high)."""
    low, _, high = cell.partition("-")
    return int(low), int(high or low)


def _table(heading: str) -> list[list[str]]:
    """The cells of the markdown table whose header row starts with `heading`."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {heading} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


def doc_apis() -> dict[int, ApiRow]:
    table: dict[int, ApiRow] = {}
    for key, name, ours, kafka, _notes in _table("key"):
        assert int(key) not in table, f"API {key} has two rows"
        table[int(key)] = ApiRow(name, None if ours == NOT_SERVED else _range(ours), _range(kafka))
    return table


def doc_features() -> dict[str, tuple[tuple[int, int], int]]:
    """feature → (Kafka's supported range, its finalized level)."""
    return {
        name.strip("`"): (_range(supported), int(finalized))
        for name, supported, finalized, _gates in _table("feature")
    }


def kafka_name(key: int) -> str:
    """Kafka's name of an API (`describe_user_scram_credentials` → `DescribeUserScramCredentials`)."""
    return "".join(part.capitalize() for part in api_name(key).split("_"))


def test_the_api_doc_lists_what_our_broker_advertises(our_advertised: Advertised) -> None:
    """The doc's `ours` column is our broker's ApiVersions, no more and no less; the features are
    `transaction.version` only (supported 0-1, finalized 1: transaction version 1 only)."""
    documented = {key: row.ours for key, row in doc_apis().items() if row.ours is not None}
    assert documented == our_advertised.apis
    assert our_advertised.supported == {"transaction.version": (0, 1)}
    assert our_advertised.finalized == {"transaction.version": (1, 1)}
    assert our_advertised.finalized_epoch >= 0


def test_the_api_doc_lists_what_kafka_advertises(kafka_advertised: Advertised) -> None:
    """The doc's rows are Kafka 4.3.1's APIs with Kafka's ranges and names, and its features."""
    table = doc_apis()
    assert {key: row.kafka for key, row in table.items()} == kafka_advertised.apis
    assert {key: row.name for key, row in table.items()} == {key: kafka_name(key) for key in table}
    assert list(table) == sorted(table), "rows in key order"
    assert doc_features() == {
        name: (supported, kafka_advertised.finalized[name][1])
        for name, supported in kafka_advertised.supported.items()
    }
    assert set(kafka_advertised.finalized) <= set(kafka_advertised.supported)


def test_the_features_we_list_are_within_kafkas(
    our_advertised: Advertised, kafka_advertised: Advertised
) -> None:
    for name, (low, high) in our_advertised.supported.items():
        kafka_low, kafka_high = kafka_advertised.supported[name]
        assert kafka_low <= low <= high <= kafka_high, name
