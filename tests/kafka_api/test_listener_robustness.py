"""The Kafka listener of a real broker under bad input: oversized, negative, truncated and garbage
frames, unknown APIs and versions, requests before authentication, and a protocol fuzz of every
answered request type (structurally valid random requests from Kafka's schemas, then mutated
bytes). Each is answered as Kafka answers or the connection is closed; the broker never logs an
unhandled error and keeps serving everyone else."""

from __future__ import annotations

import dataclasses
import datetime
import os
import random
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as KafkaError
from kio.static.primitive import Records

from jbod_kafka import protocol, record_batch
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster
from tests.kafka_api.raw_client import RawConnection, encode_request

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUP_WAIT_MS = 2000
JOIN_GROUP = 11


@pytest.fixture(scope="module")
def one_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    import contextlib

    with contextlib.ExitStack() as stack:
        # A JoinGroup waits up to the group's rebalance timeout (its session timeout in v0), as in
        # Kafka; both are kept within 2 s so every fuzzed request is answered within the
        # connection's timeout (`test_fuzz_every_request_type` bounds the timeouts a JoinGroup asks for).
        yield start_kafka_cluster(
            stack,
            tmp_path_factory.mktemp("fuzz"),
            brokers=1,
            group_initial_rebalance_delay_ms="100",
            group_min_session_timeout_ms="1",
            group_max_session_timeout_ms=str(GROUP_WAIT_MS),
        )


def address(kafka: KafkaCluster) -> str:
    return kafka.bootstrap.split(",")[0]


def api_versions(conn: RawConnection, version: int = 3) -> dict[int, tuple[int, int]]:
    body = protocol.build(
        protocol.request_type(18, version), client_software_name="raw", client_software_version="1"
    )
    response = conn.request(18, version, body)
    assert int(response.error_code) == 0
    return {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in response.api_keys}


def still_serving(kafka: KafkaCluster) -> None:
    with RawConnection(address(kafka)) as conn:
        assert api_versions(conn)
        assert int(conn.authenticate("admin", kafka.admin_password).error_code) == 0


def agent_log(kafka: KafkaCluster) -> str:
    return Path(kafka.cluster.brokers[1].log_path).read_text()


def test_api_versions_lists_kafkas_floors_and_produce_from_v0(one_broker: KafkaCluster) -> None:
    with RawConnection(address(one_broker)) as conn:
        listed = api_versions(conn)
    assert listed[0] == (0, 13)  # KAFKA-18659: librdkafka compresses only with Produce v0 listed
    assert listed[1][0] == 4 and listed[3] == (0, 13) and listed[18] == (0, 4)
    for key, (low, high) in listed.items():
        api = protocol.APIS[key]
        assert (low, high) == (api.advertised_min, api.max_version)


def test_an_unknown_api_versions_version_gets_v0_with_unsupported_version(one_broker: KafkaCluster) -> None:
    with RawConnection(address(one_broker)) as conn:
        # v127: parsed as flexible (header v2, an empty tagged-field byte), answered with v0.
        frame = struct.pack(">hhi", 18, 127, 42) + struct.pack(">h", 3) + b"raw" + b"\0"
        conn.send_frame(frame)
        answer = conn.read_frame()
    assert answer is not None
    (correlation_id, error_code, count) = struct.unpack_from(">ihi", answer)
    assert (correlation_id, error_code) == (42, 35)
    # As Kafka 4.3.1 (tests/kafka_tools/test_error_responses.py): only ApiVersions' own versions.
    assert count == 1
    assert struct.unpack_from(">hhh", answer, 10) == (18, 0, protocol.APIS[18].max_version)


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">hhi", 9999, 0, 1) + b"\0\0",  # unknown API key
        struct.pack(">hhi", 0, 2, 1) + b"\0\0",  # Produce v2: listed for librdkafka, refused
        struct.pack(">hhi", 3, 99, 1) + b"\0\0",  # Metadata v99
        b"\xff" * 3,  # shorter than a header
    ],
    ids=["unknown-api", "produce-v2", "metadata-v99", "short"],
)
def test_unanswerable_requests_close_the_connection(one_broker: KafkaCluster, frame: bytes) -> None:
    with RawConnection(address(one_broker)) as conn:
        conn.send_frame(frame)
        assert conn.closed_by_peer()
    still_serving(one_broker)


@pytest.mark.parametrize("size", [-1, 200 * 1024 * 1024], ids=["negative", "over-socket-request-max-bytes"])
def test_a_bad_frame_size_closes_the_connection(one_broker: KafkaCluster, size: int) -> None:
    with RawConnection(address(one_broker)) as conn:
        conn.sock.sendall(struct.pack(">i", size) + b"x" * 100)
        assert conn.closed_by_peer()
    still_serving(one_broker)


def test_a_truncated_request_disturbs_nothing(one_broker: KafkaCluster) -> None:
    with RawConnection(address(one_broker)) as conn:
        conn.sock.sendall(struct.pack(">i", 1000) + b"\0" * 10)
    still_serving(one_broker)


def test_nothing_but_the_sasl_exchange_before_authentication(one_broker: KafkaCluster) -> None:
    with RawConnection(address(one_broker)) as conn:
        api_versions(conn)
        metadata = protocol.build(
            protocol.request_type(3, 12),
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        conn.send_frame(encode_request(3, 12, metadata))
        assert conn.closed_by_peer()
    with RawConnection(address(one_broker)) as conn:
        refused = conn.authenticate("admin", "not-the-token")
        assert int(refused.error_code) == KafkaError.sasl_authentication_failed
        assert conn.closed_by_peer()  # as Kafka: closed after a failed authentication
    still_serving(one_broker)


PROBE = 2**31 - 7

# Records fields: real batches (so produce reaches the log) or arbitrary bytes.
st.register_type_strategy(
    Records,
    st.one_of(
        st.binary(max_size=120),
        st.lists(
            st.tuples(st.none() | st.binary(max_size=8), st.binary(max_size=30)), min_size=1, max_size=4
        ).map(lambda records: record_batch.encode_batch(0, -1, 1_700_000_000_000, records)),
    ),
)


def _valid_requests() -> st.SearchStrategy[tuple[int, int, object]]:
    """Random but well-typed requests of every answered API and version (kio's schemas register
    hypothesis strategies for Kafka's types)."""
    choices = [
        (key, version)
        for key, api in protocol.APIS.items()
        if key not in (17, 36)  # the SASL exchange has its own tests
        for version in range(api.min_version, api.max_version + 1)
    ]
    return st.sampled_from(choices).flatmap(
        lambda kv: st.builds(
            lambda body, kv=kv: (kv[0], kv[1], body), st.from_type(protocol.request_type(kv[0], kv[1]))
        )
    )


@settings(
    max_examples=int(os.environ.get("JBOD_FUZZ_EXAMPLES", "400")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    request=_valid_requests(),
    mutations=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
)
def test_fuzz_every_request_type(
    one_broker: KafkaCluster, request: tuple[int, int, object], mutations: list
) -> None:
    key, version, body = request
    if key == JOIN_GROUP:  # see `one_broker`; a negative timeout stays (refused or not waited for)
        bound = datetime.timedelta(milliseconds=GROUP_WAIT_MS)
        body = dataclasses.replace(body, session_timeout=min(body.session_timeout, bound))
        if version >= 1:
            body = dataclasses.replace(body, rebalance_timeout=min(body.rebalance_timeout, bound))
    try:
        frame = bytearray(encode_request(key, version, body))
    except Exception:  # a value kio's own writer refuses (a random string too long): not a request
        return
    for position, value in mutations:
        frame[position % len(frame)] = value
    probe = encode_request(
        18,
        3,
        protocol.build(protocol.request_type(18, 3), client_software_name="raw", client_software_version="1"),
        correlation_id=PROBE,
    )
    with RawConnection(address(one_broker)) as conn:
        assert int(conn.authenticate("admin", one_broker.admin_password).error_code) == 0
        conn.send_frame(bytes(frame))
        conn.send_frame(probe)  # answered after the fuzzed request (acks=0 gets no answer at all)
        sent_id = struct.unpack_from(">i", bytes(frame), 4)[0]
        while (answer := conn.read_frame()) is not None:  # answers, then the probe's, or a close
            (correlation_id,) = struct.unpack_from(">i", answer)
            if correlation_id == PROBE:
                break
            assert correlation_id == sent_id


def test_after_the_fuzz_no_request_failed_unhandled(one_broker: KafkaCluster) -> None:
    still_serving(one_broker)
    log = agent_log(one_broker)
    assert "Traceback" not in log and "the request failed" not in log, log[-3000:]


def test_random_garbage_frames(one_broker: KafkaCluster) -> None:
    rng = random.Random(7)
    for _ in range(200):
        with RawConnection(address(one_broker)) as conn:
            conn.send_frame(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64))))
            conn.read_frame()
    still_serving(one_broker)
    assert "Traceback" not in agent_log(one_broker)
