"""A little fuzzing of a real controller process: random JSON on every POST endpoint (protocol §2).

Bodies mix well-typed fields that name real brokers, dirs and topics (so many requests pass
validation and reach the decisions) with arbitrary JSON values, missing fields and non-object
bodies. Every reply must be HTTP 200 with an error code the contract lists for that endpoint, or
HTTP 400 with errorCode 42 — never 500 — and afterwards the controller must be alive, ready, free
of tracebacks, and its read API must agree with a replay of its metadata log. A share of the
bodies must get past the validation to a decision (and, for the two per-partition endpoints, to
per-partition results), so that the checks of those replies run at all.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.controller.conftest import LOST, MIGRATING, UNASSIGNED, Api, assert_read_api_matches_log, bring_up
from tests.harness import ControllerProcess

EXAMPLES = 250

ALLOWED_CODES = {
    "/v1/brokers/register": {0, 42, 101, 104},
    "/v1/brokers/heartbeat": {0, 57, 77},
    "/v1/assignments": {0, 77},
    "/v1/partitions/alter": {0, 77},
    "/v1/topics": {0, 17, 36, 37, 38, 39, 40},
}
PARTITION_CODES = {
    "/v1/assignments": {0, 3, 6, 100},
    "/v1/partitions/alter": {0, 3, 6, 42, 74, 100, 107, 108},
}
FIELD_NAMES = [
    "brokerId",
    "brokerEpoch",
    "clusterId",
    "incarnationId",
    "logDirs",
    "hasOfflineLogDirs",
    "listeners",
    "rack",
    "previousBrokerEpoch",
    "currentMetadataOffset",
    "wantFence",
    "wantShutDown",
    "offlineLogDirs",
    "directories",
    "id",
    "topics",
    "topicId",
    "partitions",
    "partitionIndex",
    "leaderEpoch",
    "partitionEpoch",
    "newIsr",
    "name",
    "numPartitions",
    "replicationFactor",
    "replicaAssignment",
    "configs",
]

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=24)
    | st.sampled_from([UNASSIGNED, LOST, MIGRATING, "AAAAAAAAAAAAAAAAAAAAAB", "-" * 22, "_" * 22])
)
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=12,
)


class Known:
    """Ids the strategies draw from, read from the cluster the fuzzing runs against."""

    def __init__(self, api: Api) -> None:
        self.cluster_id = api.proc.cluster_id
        self.refresh(api)

    def refresh(self, api: Api) -> None:
        brokers = api.brokers()
        self.broker_ids = sorted({b["brokerId"] for b in brokers} | {0, 9})
        self.epochs = sorted({b["brokerEpoch"] for b in brokers} | {-1, 0})
        self.identities = sorted((b["brokerId"], b["brokerEpoch"]) for b in brokers)
        self.dirs = sorted({d for b in brokers for d in b["logDirs"] + b["offlineLogDirs"]})
        self.topic_ids = sorted({t["topicId"] for t in api.topics()}) or [UNASSIGNED]
        self.topic_names = sorted({t["name"] for t in api.topics()}) or ["t"]


def field(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a well-typed value, sometimes any JSON value."""
    return st.one_of(good, good, good, json_values)


@st.composite
def body(
    draw: st.DrawFn,
    fields: dict[str, st.SearchStrategy[Any]],
    identity: st.SearchStrategy[tuple[int, int]] | None = None,
) -> Any:
    """Half the time a well-typed body; else fields may be missing or any JSON value."""
    if draw(st.integers(0, 19)) == 0:
        return draw(json_values)  # not even an object, usually
    messy = draw(st.booleans())
    out = {}
    for name, strategy in fields.items():
        if messy and draw(st.integers(0, 9)) == 0:
            continue  # missing
        out[name] = draw(field(strategy) if messy else strategy)
    if identity is not None and draw(st.integers(0, 3)) > 0:
        out["brokerId"], out["brokerEpoch"] = draw(identity)  # a registered broker and its epoch
    if messy and draw(st.booleans()):
        out.update(
            draw(st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=8), json_values, max_size=2))
        )
    return out


def strategies(known: Known, *, junk: bool) -> dict[str, st.SearchStrategy[Any]]:
    """The bodies per endpoint; with `junk`, any nested field may also be any JSON value (without,
    a well-typed body is well-typed all through, so it reaches the per-partition decisions)."""

    def nested(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return field(good) if junk else good

    least = 0 if junk else 1  # well-typed bodies name at least one partition (empty lists: junk's)
    broker_id = st.sampled_from(known.broker_ids) | st.integers(-(2**31), 2**31 - 1)
    epoch = st.sampled_from(known.epochs) | st.integers(-(2**63), 2**63 - 1)
    a_dir = st.sampled_from([*known.dirs, UNASSIGNED, LOST, MIGRATING]) | st.uuids().map(
        lambda u: base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")
    )
    topic_id = st.sampled_from(known.topic_ids) | a_dir
    index = st.integers(-1, 5)
    small_ints = st.lists(st.sampled_from(known.broker_ids) | st.integers(-2, 12), max_size=4)
    identity = st.sampled_from(known.identities)
    return {
        "/v1/brokers/register": body(
            {
                "brokerId": st.integers(0, 12),
                "clusterId": st.sampled_from([known.cluster_id, "other"]),
                "incarnationId": a_dir,
                "logDirs": st.lists(a_dir, max_size=3),
                "hasOfflineLogDirs": st.booleans(),
                "listeners": st.lists(
                    st.fixed_dictionaries(
                        {
                            "name": st.text(max_size=5),
                            "host": st.text(max_size=5),
                            "port": st.integers(-1, 70_000),
                        }
                    ),
                    max_size=2,
                ),
                "rack": st.none() | st.text(max_size=8),
                "previousBrokerEpoch": epoch,
            }
        ),
        "/v1/brokers/heartbeat": body(
            {
                "brokerId": broker_id,
                "brokerEpoch": epoch,
                "currentMetadataOffset": st.integers(-1, 10_000) | epoch,
                "wantFence": st.booleans(),
                "wantShutDown": st.booleans(),
                "offlineLogDirs": st.lists(a_dir, max_size=2),
            },
            identity,
        ),
        "/v1/assignments": body(
            {
                "brokerId": broker_id,
                "brokerEpoch": epoch,
                "directories": st.lists(
                    st.fixed_dictionaries(
                        {
                            "id": nested(a_dir),
                            "topics": st.lists(
                                st.fixed_dictionaries(
                                    {
                                        "topicId": nested(topic_id),
                                        "partitions": st.lists(
                                            st.fixed_dictionaries({"partitionIndex": nested(index)}),
                                            min_size=least,
                                            max_size=3,
                                        ),
                                    }
                                ),
                                min_size=least,
                                max_size=2,
                            ),
                        }
                    ),
                    min_size=least,
                    max_size=2,
                ),
            },
            identity,
        ),
        "/v1/partitions/alter": body(
            {
                "brokerId": broker_id,
                "brokerEpoch": epoch,
                "topics": st.lists(
                    st.fixed_dictionaries(
                        {
                            "topicId": nested(topic_id),
                            "partitions": st.lists(
                                st.fixed_dictionaries(
                                    {
                                        "partitionIndex": nested(index),
                                        "leaderEpoch": nested(st.integers(-1, 4)),
                                        "partitionEpoch": nested(st.integers(-1, 6)),
                                        "newIsr": nested(small_ints),
                                    }
                                ),
                                min_size=least,
                                max_size=3,
                            ),
                        }
                    ),
                    min_size=least,
                    max_size=2,
                ),
            },
            identity,
        ),
        "/v1/topics": body(
            {
                "name": st.sampled_from(known.topic_names)
                | st.text(max_size=12)
                | st.from_regex(r"[a-z]{1,8}", fullmatch=True),
                "numPartitions": st.integers(-1, 12),
                "replicationFactor": st.integers(-1, 5),
                "replicaAssignment": st.none() | st.none() | st.lists(small_ints, max_size=3),
                "configs": st.dictionaries(
                    st.sampled_from(["min.insync.replicas", "retention.ms"]) | st.text(max_size=5),
                    st.sampled_from(["1", "2", "0", "-1", "x"]) | st.text(max_size=5),
                    max_size=2,
                ),
            }
        ),
    }


@pytest.fixture(scope="module")
def fuzz_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, Known]]:
    proc = ControllerProcess(
        data_dir=tmp_path_factory.mktemp("fuzz") / "controller", session_timeout_ms=600_000
    )
    with proc:
        api = Api(proc)
        try:
            brokers = bring_up(api, [1, 2, 3])
            topic_id = api.create_topic("fuzzed", numPartitions=4, replicationFactor=3)["topicId"]
            for broker in brokers.values():
                api.assign(broker.broker_id, broker.epoch, {broker.dirs[0]: {topic_id: [0, 1, 2, 3]}})
            api.create_topic("single", replicaAssignment=[[2]])
            yield api, Known(api)
        finally:
            api.close()


def check_reply(endpoint: str, response: httpx.Response, sent: bytes) -> str:
    """Checks one reply; says how far the request got: "rejected" (400/42), "refused" (a
    decision's error code), "accepted" (0) or "per-partition" (0 with partition results)."""
    what = f"{endpoint} {sent[:300]!r}"
    assert response.status_code in (200, 400), f"{what}: HTTP {response.status_code} {response.text}"
    reply = response.json()
    assert isinstance(reply, dict), what
    code = reply["errorCode"]
    if response.status_code == 400:
        assert code == 42, f"{what}: {reply}"
        assert isinstance(reply["errorMessage"], str) and reply["errorMessage"], what
        return "rejected"
    assert code in ALLOWED_CODES[endpoint], f"{what}: {reply}"
    if code != 0:
        assert reply.get("errorMessage"), f"{what}: {reply}"
        return "refused"
    if endpoint not in PARTITION_CODES:
        return "accepted"
    if endpoint == "/v1/assignments":
        nested = [p for d in reply["directories"] for t in d["topics"] for p in t["partitions"]]
    else:
        nested = [p for t in reply["topics"] for p in t["partitions"]]
    for result in nested:
        assert result["errorCode"] in PARTITION_CODES[endpoint], f"{what}: {reply}"
    return "per-partition" if nested else "accepted"


@pytest.mark.parametrize("endpoint", sorted(ALLOWED_CODES))
def test_random_bodies_never_500(fuzz_cluster: tuple[Api, Known], endpoint: str) -> None:
    api, known = fuzz_cluster
    known.refresh(api)
    token = api.proc.admin_token if endpoint == "/v1/topics" else api.proc.cluster_token
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    outcomes: Counter[str] = Counter()

    with httpx.Client(base_url=api.proc.url, timeout=60, headers=headers) as client:

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(st.one_of(strategies(known, junk=False)[endpoint], strategies(known, junk=True)[endpoint]))
        def run(value: Any) -> None:
            sent = json.dumps(value).encode()
            outcomes[check_reply(endpoint, client.post(endpoint, content=sent), sent)] += 1

        run()

    # The bodies are meant to reach the decisions, not only the validation: a controller that
    # answered every body with 400/42 (or refused every well-formed one) would pass the checks above.
    print(f"{endpoint}: {dict(outcomes)}")
    assert outcomes["rejected"] > 0, outcomes
    assert outcomes["refused"] + outcomes["accepted"] + outcomes["per-partition"] >= EXAMPLES // 5, outcomes
    if endpoint in PARTITION_CODES:
        assert outcomes["per-partition"] >= EXAMPLES // 20, outcomes
    assert api.proc.process is not None and api.proc.process.poll() is None, "the controller died"
    assert httpx.get(f"{api.proc.url}/healthz").status_code == 200
    assert httpx.get(f"{api.proc.url}/readyz").status_code == 200


def _parses_as_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def test_random_query_strings_and_paths(fuzz_cluster: tuple[Api, Known]) -> None:
    api, _known = fuzz_cluster
    texts = st.text(max_size=12)

    @settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.dictionaries(st.sampled_from(["fromOffset", "maxWaitMs", "maxRecords", "x"]), texts, max_size=3),
        texts,
    )
    def run(params: dict[str, str], segment: str) -> None:
        if _parses_as_int(params.get("maxWaitMs", "")):
            params["maxWaitMs"] = "0"  # keep a valid long poll short
        response = api.broker.get("/v1/metadata", params=params)
        assert response.status_code in (200, 400), (params, response.text)
        assert response.json()["errorCode"] in (0, 1, 42)
        quoted = urllib.parse.quote(segment, safe="")
        for path in (f"/v1/brokers/{quoted}", f"/v1/topics/{quoted}"):
            response = api.admin.get(path, params=params)
            assert response.status_code in (200, 400, 404, 405), (path, response.text)
            assert isinstance(response.json(), dict | list)

    run()


def test_after_fuzzing_the_controller_is_consistent(fuzz_cluster: tuple[Api, Known]) -> None:
    api, _known = fuzz_cluster
    proc: ControllerProcess = api.proc
    assert "Traceback" not in proc.stderr(), proc.stderr()[-3000:]
    assert_read_api_matches_log(api)
    # And it recovers the same state after a crash.
    state = api.state()
    proc.restart()
    assert api.state() == state
