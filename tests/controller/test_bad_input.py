"""Bad input on every endpoint of a real controller process (protocol §2): 400/42, 401/31, 404s.

Covers, for each POST endpoint: bodies that are not JSON or not an object, wrong types (string for
int, int for bool, ...), missing required fields, int32/int64 out of range, Uuids that do not
parse, more than 10,000 partitions in one request; for the GET endpoints: bad query and path
parameters. Every rejection is HTTP 400 with errorCode 42 and a message naming the field, and
leaves the metadata log untouched. Missing or wrong tokens get 401/31 on every authenticated
endpoint (a valid body is not applied), the cluster token is refused on admin endpoints and the
admin token is accepted on broker endpoints. Unknown topic → 404/3, unknown broker → 404/102.
No request ever yields HTTP 500.
"""

from __future__ import annotations

import copy
import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.controller.conftest import Api, Broker, bring_up, random_uuid
from tests.harness import ControllerProcess

NOT_A_UUID: list[Any] = [
    "xyz",
    "A" * 21,
    "A" * 23,
    "A" * 30,
    "!!!!!!!!!!!!!!!!!!!!!!",
    "AAAAAAAAAAAAAAAAAAAA+A",
    "AAAAAAAAAAAAAAAAAAAAAB",  # trailing bits beyond the 16 bytes: not canonical
    "",
    12,
    None,
    ["AAAAAAAAAAAAAAAAAAAAAA"],
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, dict[int, Broker], str]]:
    """One controller for the whole module: two brokers and a topic the bodies can name."""
    proc = ControllerProcess(data_dir=tmp_path_factory.mktemp("bad-input") / "controller")
    with proc:
        api = Api(proc)
        try:
            brokers = bring_up(api, [1, 2])
            topic_id = api.create_topic("existing", replicaAssignment=[[1, 2]])["topicId"]
            yield api, brokers, topic_id
        finally:
            api.close()


def valid_bodies(api: Api, brokers: dict[int, Broker], topic_id: str) -> dict[str, dict[str, Any]]:
    """A body per POST endpoint that the controller would accept (and apply)."""
    b1 = brokers[1]
    return {
        "/v1/brokers/register": {
            "brokerId": 7,
            "clusterId": api.proc.cluster_id,
            "incarnationId": random_uuid(),
            "logDirs": [random_uuid(), random_uuid()],
            "hasOfflineLogDirs": False,
            "listeners": [{"name": "PLAINTEXT", "host": "localhost", "port": 9092}],
            "rack": None,
            "previousBrokerEpoch": -1,
        },
        "/v1/brokers/heartbeat": {
            "brokerId": 1,
            "brokerEpoch": b1.epoch,
            "currentMetadataOffset": 0,
            "wantFence": True,
            "wantShutDown": False,
            "offlineLogDirs": [b1.dirs[0]],
        },
        "/v1/assignments": {
            "brokerId": 1,
            "brokerEpoch": b1.epoch,
            "directories": [
                {"id": b1.dirs[1], "topics": [{"topicId": topic_id, "partitions": [{"partitionIndex": 0}]}]}
            ],
        },
        "/v1/partitions/alter": {
            "brokerId": 1,
            "brokerEpoch": b1.epoch,
            "topics": [
                {
                    "topicId": topic_id,
                    "partitions": [
                        {"partitionIndex": 0, "leaderEpoch": 0, "partitionEpoch": 0, "newIsr": [1]}
                    ],
                }
            ],
        },
        "/v1/topics": {
            "name": "created-by-bad-input",
            "numPartitions": 1,
            "replicationFactor": 1,
            "configs": {"min.insync.replicas": "1"},
        },
    }


def test_the_valid_bodies_are_accepted_and_applied(api: Api) -> None:
    """What the checks below rest on: each body they break one field of (and send with a wrong
    token, to see it not applied) is accepted and writes to the log when sent as it is. Run on a
    controller of its own set up like the module's, in an order where every body changes something."""
    brokers = bring_up(api, [1, 2])
    topic_id = api.create_topic("existing", replicaAssignment=[[1, 2]])["topicId"]
    bodies = valid_bodies(api, brokers, topic_id)
    order = ["/v1/partitions/alter", "/v1/assignments", "/v1/brokers/register", "/v1/topics"]
    order.append("/v1/brokers/heartbeat")  # last: it fences broker 1
    assert sorted(order) == POST_ENDPOINTS
    for endpoint in order:
        end = api.end_offset()
        response = post_raw(api, endpoint, json.dumps(bodies[endpoint]).encode())
        assert response.status_code == 200, f"{endpoint}: HTTP {response.status_code} {response.text}"
        reply = response.json()
        assert reply["errorCode"] == 0, f"{endpoint}: {reply}"
        assert api.end_offset() > end, f"{endpoint}: the valid body changed nothing: {reply}"


def set_path(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(body)
    target: Any = out
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return out


def drop_path(body: dict[str, Any], path: tuple[Any, ...]) -> dict[str, Any]:
    out = copy.deepcopy(body)
    target: Any = out
    for part in path[:-1]:
        target = target[part]
    del target[path[-1]]
    return out


def field_name(path: tuple[Any, ...]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


# (path, bad value) per endpoint; the error message must name the path.
FieldPath = tuple[Any, ...]
INT32_FIELDS: dict[str, list[FieldPath]] = {
    "/v1/brokers/register": [("brokerId",)],
    "/v1/brokers/heartbeat": [("brokerId",)],
    "/v1/assignments": [("brokerId",), ("directories", 0, "topics", 0, "partitions", 0, "partitionIndex")],
    "/v1/partitions/alter": [
        ("brokerId",),
        ("topics", 0, "partitions", 0, "partitionIndex"),
        ("topics", 0, "partitions", 0, "leaderEpoch"),
        ("topics", 0, "partitions", 0, "partitionEpoch"),
        ("topics", 0, "partitions", 0, "newIsr", 0),
    ],
    "/v1/topics": [("numPartitions",), ("replicationFactor",)],
}
INT64_FIELDS: dict[str, list[FieldPath]] = {
    "/v1/brokers/register": [("previousBrokerEpoch",)],
    "/v1/brokers/heartbeat": [("brokerEpoch",), ("currentMetadataOffset",)],
    "/v1/assignments": [("brokerEpoch",)],
    "/v1/partitions/alter": [("brokerEpoch",)],
    "/v1/topics": [],
}
BOOL_FIELDS: dict[str, list[FieldPath]] = {
    "/v1/brokers/register": [("hasOfflineLogDirs",)],
    "/v1/brokers/heartbeat": [("wantFence",), ("wantShutDown",)],
    "/v1/assignments": [],
    "/v1/partitions/alter": [],
    "/v1/topics": [],
}
UUID_FIELDS: dict[str, list[FieldPath]] = {
    "/v1/brokers/register": [("incarnationId",), ("logDirs", 1)],
    "/v1/brokers/heartbeat": [("offlineLogDirs", 0)],
    "/v1/assignments": [("directories", 0, "id"), ("directories", 0, "topics", 0, "topicId")],
    "/v1/partitions/alter": [("topics", 0, "topicId")],
    "/v1/topics": [],
}
STRING_FIELDS: dict[str, list[FieldPath]] = {
    "/v1/brokers/register": [("clusterId",), ("listeners", 0, "name"), ("listeners", 0, "host")],
    "/v1/brokers/heartbeat": [],
    "/v1/assignments": [],
    "/v1/partitions/alter": [],
    "/v1/topics": [("name",), ("configs", "min.insync.replicas")],
}
LIST_FIELDS: dict[str, list[FieldPath]] = {
    "/v1/brokers/register": [("logDirs",), ("listeners",)],
    "/v1/brokers/heartbeat": [("offlineLogDirs",)],
    "/v1/assignments": [
        ("directories",),
        ("directories", 0, "topics"),
        ("directories", 0, "topics", 0, "partitions"),
    ],
    "/v1/partitions/alter": [
        ("topics",),
        ("topics", 0, "partitions"),
        ("topics", 0, "partitions", 0, "newIsr"),
    ],
    "/v1/topics": [("replicaAssignment",)],
}
REQUIRED_FIELDS: dict[str, list[FieldPath]] = {
    "/v1/brokers/register": [
        ("brokerId",),
        ("clusterId",),
        ("incarnationId",),
        ("logDirs",),
        ("listeners", 0, "port"),
    ],
    "/v1/brokers/heartbeat": [("brokerId",), ("brokerEpoch",), ("currentMetadataOffset",)],
    "/v1/assignments": [
        ("brokerId",),
        ("brokerEpoch",),
        ("directories",),
        ("directories", 0, "id"),
        ("directories", 0, "topics"),
        ("directories", 0, "topics", 0, "topicId"),
        ("directories", 0, "topics", 0, "partitions"),
        ("directories", 0, "topics", 0, "partitions", 0, "partitionIndex"),
    ],
    "/v1/partitions/alter": [
        ("brokerId",),
        ("brokerEpoch",),
        ("topics",),
        ("topics", 0, "topicId"),
        ("topics", 0, "partitions"),
        ("topics", 0, "partitions", 0, "partitionIndex"),
        ("topics", 0, "partitions", 0, "leaderEpoch"),
        ("topics", 0, "partitions", 0, "partitionEpoch"),
        ("topics", 0, "partitions", 0, "newIsr"),
    ],
    "/v1/topics": [("name",), ("numPartitions",), ("replicationFactor",)],
}
POST_ENDPOINTS = sorted(INT32_FIELDS)


def bad_cases(body: dict[str, Any], endpoint: str) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(description, body, field the message must name)."""
    value: Any
    for path in INT32_FIELDS[endpoint]:
        name = field_name(path)
        # register's brokerId is non-negative; the other int32 fields go down to -2**31.
        below = -1 if (endpoint, path) == ("/v1/brokers/register", ("brokerId",)) else -(2**31) - 1
        for value in ("1", 1.5, True, None, [1], {"a": 1}, 2**31, below, 2**64, 10**30):
            yield f"{name}={value!r}", set_path(body, path, value), name
    for path in INT64_FIELDS[endpoint]:
        name = field_name(path)
        for value in ("5", 2.0, False, 2**63, -(2**63) - 1, 10**40):
            yield f"{name}={value!r}", set_path(body, path, value), name
    for path in BOOL_FIELDS[endpoint]:
        name = field_name(path)
        for value in (1, 0, "true", "false", None, []):
            yield f"{name}={value!r}", set_path(body, path, value), name
    for path in UUID_FIELDS[endpoint]:
        name = field_name(path)
        for value in NOT_A_UUID:
            yield f"{name}={value!r}", set_path(body, path, value), name
    for path in STRING_FIELDS[endpoint]:
        name = field_name(path)
        for value in (1, True, ["x"], {"x": "y"}):
            yield f"{name}={value!r}", set_path(body, path, value), name
    for path in LIST_FIELDS[endpoint]:
        name = field_name(path)
        for value in ("x", 1, {"a": 1}, True):
            yield f"{name}={value!r}", set_path(body, path, value), name
    for path in REQUIRED_FIELDS[endpoint]:
        name = field_name(path)
        yield f"missing {name}", drop_path(body, path), name


def post_raw(api: Api, endpoint: str, content: bytes) -> httpx.Response:
    token = api.proc.admin_token if endpoint == "/v1/topics" else api.proc.cluster_token
    client = api.admin if endpoint == "/v1/topics" else api.broker
    return client.post(
        endpoint,
        content=content,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )


def assert_invalid(response: httpx.Response, field: str | None, what: str) -> None:
    assert response.status_code == 400, f"{what}: HTTP {response.status_code} {response.text}"
    body = response.json()
    assert body["errorCode"] == 42, f"{what}: {body}"
    assert isinstance(body["errorMessage"], str) and body["errorMessage"], what
    if field is not None:
        assert field in body["errorMessage"], f"{what}: message does not name {field}: {body['errorMessage']}"


@pytest.mark.parametrize("endpoint", POST_ENDPOINTS)
def test_malformed_bodies(cluster: tuple[Api, dict[int, Broker], str], endpoint: str) -> None:
    api, _brokers, _topic_id = cluster
    end = api.end_offset()
    deep = b"[" * 10_000 + b"]" * 10_000
    nested_object = b'{"a":' * 5_000 + b"1" + b"}" * 5_000
    for content in (
        b"",
        b"   ",
        b"not json",
        b"{",
        b'{"brokerId": 1,}',
        b"[]",
        b"[1, 2]",
        b"null",
        b"42",
        b'"a string"',
        b"true",
        b"\xff\xfe\x00{}",
        b'{"name": "\xff\xfe"}',
        b"\xef\xbb\xbf{}",
        deep,
        nested_object,
        b"{" + b'"k":1,' * 100_000 + b'"k":2}',
        b'{"brokerId": NaN}',
        b'{"brokerId": Infinity}',
    ):
        response = post_raw(api, endpoint, content)
        assert_invalid(response, None, f"{endpoint} {content[:40]!r}")
    assert api.end_offset() == end


@pytest.mark.parametrize("endpoint", POST_ENDPOINTS)
def test_schema_violations_name_the_field(cluster: tuple[Api, dict[int, Broker], str], endpoint: str) -> None:
    api, brokers, topic_id = cluster
    body = valid_bodies(api, brokers, topic_id)[endpoint]
    end = api.end_offset()
    cases = list(bad_cases(body, endpoint))
    assert len(cases) >= 10
    for what, bad, field in cases:
        response = post_raw(api, endpoint, json.dumps(bad).encode())  # json: ints beyond 64 bits too
        assert_invalid(response, field, f"{endpoint} {what}")
    assert api.end_offset() == end, f"{endpoint}: a rejected request changed the metadata log"


def test_too_many_partitions_in_one_request(cluster: tuple[Api, dict[int, Broker], str]) -> None:
    api, brokers, topic_id = cluster
    end = api.end_offset()
    b1 = brokers[1]
    other_topic = random_uuid()
    half = [{"partitionIndex": i} for i in range(5_001)]
    response = api.broker.post(
        "/v1/assignments",
        json={
            "brokerId": 1,
            "brokerEpoch": b1.epoch,
            "directories": [
                {"id": b1.dirs[0], "topics": [{"topicId": topic_id, "partitions": half}]},
                {"id": b1.dirs[1], "topics": [{"topicId": other_topic, "partitions": half[:5_000]}]},
            ],
        },
    )
    assert_invalid(response, "directories", "assignments with 10,001 partitions")
    alter_part = {"leaderEpoch": 0, "partitionEpoch": 0, "newIsr": [1]}
    response = api.broker.post(
        "/v1/partitions/alter",
        json={
            "brokerId": 1,
            "brokerEpoch": b1.epoch,
            "topics": [
                {
                    "topicId": topic_id,
                    "partitions": [{"partitionIndex": i, **alter_part} for i in range(6_000)],
                },
                {
                    "topicId": other_topic,
                    "partitions": [{"partitionIndex": i, **alter_part} for i in range(4_001)],
                },
            ],
        },
    )
    assert_invalid(response, "topics", "alter-partition with 10,001 partitions")
    assert api.end_offset() == end

    # Exactly 10,000 is allowed (and answered per partition).
    response = api.broker.post(
        "/v1/assignments",
        json={
            "brokerId": 1,
            "brokerEpoch": b1.epoch,
            "directories": [
                {"id": b1.dirs[0], "topics": [{"topicId": other_topic, "partitions": half[:10_000]}]}
            ],
        },
    )
    assert response.status_code == 200
    [directory] = response.json()["directories"]
    assert len(directory["topics"][0]["partitions"]) == 5_001
    assert {p["errorCode"] for p in directory["topics"][0]["partitions"]} == {100}
    assert api.end_offset() == end


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"fromOffset": "abc"}, "fromOffset"),
        ({"fromOffset": "-1"}, "fromOffset"),
        ({"fromOffset": "1.5"}, "fromOffset"),
        ({"fromOffset": ""}, "fromOffset"),
        ({"fromOffset": str(2**63)}, "fromOffset"),
        ({"fromOffset": "9" * 5000}, "fromOffset"),
        ({"fromOffset": "0x10"}, "fromOffset"),
        ({"maxWaitMs": "soon"}, "maxWaitMs"),
        ({"maxWaitMs": "-1"}, "maxWaitMs"),
        ({"maxWaitMs": str(10**12)}, "maxWaitMs"),
        ({"maxRecords": "0"}, "maxRecords"),
        ({"maxRecords": "-3"}, "maxRecords"),
        ({"maxRecords": "many"}, "maxRecords"),
        ({"maxRecords": str(2**40)}, "maxRecords"),
    ],
)
def test_metadata_query_parameters(
    cluster: tuple[Api, dict[int, Broker], str], params: dict[str, str], field: str
) -> None:
    api, _brokers, _topic_id = cluster
    response = api.broker.get("/v1/metadata", params=params)
    assert_invalid(response, field, f"metadata {params}")


@pytest.mark.parametrize(
    "raw", ["abc", "-1", "2147483648", "1.0", "0x10", "1e3", " ", "99999999999999999999999"]
)
@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_bad_broker_id_in_path(cluster: tuple[Api, dict[int, Broker], str], raw: str, method: str) -> None:
    api, _brokers, _topic_id = cluster
    end = api.end_offset()
    response = api.admin.request(method, f"/v1/brokers/{raw}")
    assert_invalid(response, "brokerId", f"{method} /v1/brokers/{raw}")
    assert api.end_offset() == end


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_unknown_topics_and_brokers(cluster: tuple[Api, dict[int, Broker], str], method: str) -> None:
    api, _brokers, _topic_id = cluster
    end = api.end_offset()
    for name in ("no-such-topic", "bad name", "x" * 1000, "%ff", "...", "EXISTING"):
        response = api.admin.request(method, f"/v1/topics/{name}")
        assert response.status_code == 404, (name, response.text)
        assert response.json()["errorCode"] == 3
        assert response.json()["errorMessage"]
    for broker_id in (0, 3, 999, 2**31 - 1):
        response = api.admin.request(method, f"/v1/brokers/{broker_id}")
        assert response.status_code == 404, (broker_id, response.text)
        assert response.json()["errorCode"] == 102
    assert api.end_offset() == end
    assert api.topic("existing")["name"] == "existing"


def test_unknown_routes_and_methods_are_not_500(cluster: tuple[Api, dict[int, Broker], str]) -> None:
    api, _brokers, _topic_id = cluster
    for method, path in [
        ("GET", "/v1/nope"),
        ("PUT", "/v1/topics"),
        ("PATCH", "/v1/topics/existing"),
        ("GET", "/v1/brokers/register"),
        ("POST", "/v1/cluster"),
        ("DELETE", "/v1/metadata"),
        ("GET", "/v1/topics/a/b"),
    ]:
        response = api.admin.request(method, path)
        assert 400 <= response.status_code < 500, (method, path, response.status_code)
        assert response.json()["errorCode"] == 42


def test_oversized_body_is_rejected_not_500(cluster: tuple[Api, dict[int, Broker], str]) -> None:
    api, _brokers, _topic_id = cluster
    end = api.end_offset()
    content = b'{"name": "' + b"x" * (17 * 1024 * 1024) + b'"}'
    response = post_raw(api, "/v1/topics", content)
    assert response.status_code in (400, 413)
    assert response.json()["errorCode"] == 42
    assert api.end_offset() == end


# ---------------------------------------------------------------------------------------------
# Authentication


def authenticated_requests(
    api: Api, brokers: dict[int, Broker], topic_id: str
) -> list[tuple[str, str, Any, str]]:
    """(method, path, json body, role) for every authenticated endpoint; bodies are valid."""
    bodies = valid_bodies(api, brokers, topic_id)
    return [
        ("POST", "/v1/brokers/register", bodies["/v1/brokers/register"], "cluster"),
        ("POST", "/v1/brokers/heartbeat", bodies["/v1/brokers/heartbeat"], "cluster"),
        ("POST", "/v1/assignments", bodies["/v1/assignments"], "cluster"),
        ("POST", "/v1/partitions/alter", bodies["/v1/partitions/alter"], "cluster"),
        ("GET", "/v1/metadata", None, "cluster"),
        ("POST", "/v1/topics", bodies["/v1/topics"], "admin"),
        ("GET", "/v1/topics", None, "admin"),
        ("GET", "/v1/topics/existing", None, "admin"),
        ("DELETE", "/v1/topics/existing", None, "admin"),
        ("GET", "/v1/brokers", None, "admin"),
        ("GET", "/v1/brokers/1", None, "admin"),
        ("DELETE", "/v1/brokers/1", None, "admin"),
        ("GET", "/v1/cluster", None, "admin"),
    ]


def test_missing_or_wrong_token(cluster: tuple[Api, dict[int, Broker], str]) -> None:
    api, brokers, topic_id = cluster
    end = api.end_offset()
    state = api.state()
    wrong_headers: list[dict[str, str]] = [
        {},
        {"Authorization": ""},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": f"Bearer {api.proc.admin_token}x"},
        {"Authorization": f"Bearer {api.proc.admin_token[:-1]}"},
        {"Authorization": f"Basic {api.proc.admin_token}"},
        {"Authorization": api.proc.admin_token},
        {"X-Token": api.proc.admin_token},
    ]
    with httpx.Client(base_url=api.proc.url, timeout=30) as client:
        for method, path, body, role in authenticated_requests(api, brokers, topic_id):
            headers_list = [*wrong_headers]
            if role == "admin":
                headers_list.append({"Authorization": f"Bearer {api.proc.cluster_token}"})
            for headers in headers_list:
                response = client.request(method, path, json=body, headers=headers)
                what = f"{method} {path} with {headers}"
                assert response.status_code == 401, f"{what}: {response.status_code} {response.text}"
                assert response.json()["errorCode"] == 31, what
                assert response.json()["errorMessage"], what
        # The token is checked before the body: a malformed body without a token is still 401.
        for endpoint in POST_ENDPOINTS:
            response = client.post(endpoint, content=b"not json")
            assert (response.status_code, response.json()["errorCode"]) == (401, 31), endpoint
    assert api.end_offset() == end, "a request with a bad token changed the metadata log"
    assert api.state() == state


def test_admin_token_accepted_on_broker_endpoints(cluster: tuple[Api, dict[int, Broker], str]) -> None:
    api, brokers, _topic_id = cluster
    b2 = brokers[2]
    with api.proc.admin() as admin:
        reply = admin.post(
            "/v1/brokers/heartbeat",
            json={"brokerId": 2, "brokerEpoch": b2.epoch, "currentMetadataOffset": 10**6},
        )
        assert reply.status_code == 200
        assert reply.json()["errorCode"] == 0
        page = admin.get("/v1/metadata", params={"fromOffset": 0, "maxRecords": 1})
        assert page.status_code == 200
        assert page.json()["records"][0]["offset"] == 0
        registered = admin.post(
            "/v1/brokers/register",
            json={
                "brokerId": 5,
                "clusterId": api.proc.cluster_id,
                "incarnationId": random_uuid(),
                "logDirs": [random_uuid()],
            },
        )
        assert registered.status_code == 200
        assert registered.json()["errorCode"] == 0
        assigned = admin.post(
            "/v1/assignments", json={"brokerId": 2, "brokerEpoch": b2.epoch, "directories": []}
        )
        assert (assigned.status_code, assigned.json()["errorCode"]) == (200, 0)
        altered = admin.post(
            "/v1/partitions/alter", json={"brokerId": 2, "brokerEpoch": b2.epoch, "topics": []}
        )
        assert (altered.status_code, altered.json()["errorCode"]) == (200, 0)


def raw_request(proc: ControllerProcess, head: bytes) -> tuple[int, bytes]:
    """Send raw HTTP bytes (headers httpx would refuse to send) and return (status, body)."""
    with socket.create_connection(("127.0.0.1", proc.port), timeout=30) as sock:
        sock.sendall(head)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize("token", [b"\xff\xfe\xfd", b"\xc3\xa9t\xc3\xa9", b"\xed\xa0\x80", b"tok\x80en"])
@pytest.mark.parametrize("path", [b"/v1/cluster", b"/v1/metadata"])
def test_token_that_is_not_utf8_is_401_not_500(
    cluster: tuple[Api, dict[int, Broker], str], token: bytes, path: bytes
) -> None:
    api, _brokers, _topic_id = cluster
    status, body = raw_request(
        api.proc,
        b"GET "
        + path
        + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + token
        + b"\r\nConnection: close\r\n\r\n",
    )
    assert status == 401, body
    assert orjson.loads(body)["errorCode"] == 31


def test_min_insync_replicas_with_a_non_decimal_digit_names_the_field(
    cluster: tuple[Api, dict[int, Broker], str],
) -> None:
    # A config value that does not parse is INVALID_CONFIG (40, HTTP 200), not a schema error.
    api, _brokers, _topic_id = cluster
    end = api.end_offset()
    response = api.admin.post(
        "/v1/topics",
        json={
            "name": "odd-digits",
            "numPartitions": 1,
            "replicationFactor": 1,
            "configs": {"min.insync.replicas": "²"},
        },
    )
    assert api.end_offset() == end
    assert response.status_code == 200, response.text
    assert response.json()["errorCode"] == 40
    assert "min.insync.replicas" in response.json()["errorMessage"]


def test_server_is_healthy_after_bad_input(cluster: tuple[Api, dict[int, Broker], str]) -> None:
    api, _brokers, _topic_id = cluster
    assert api.proc.process is not None and api.proc.process.poll() is None
    assert httpx.get(f"{api.proc.url}/healthz").status_code == 200
    assert httpx.get(f"{api.proc.url}/readyz").status_code == 200
    assert "Traceback" not in api.proc.stderr(), api.proc.stderr()[-3000:]
