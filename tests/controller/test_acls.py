"""ACLs on a real controller process (docs/api.md, "ACLs"): `POST /v1/acls`, `POST /v1/acls/delete`
and `GET /v1/acls`, through raw HTTP and `ControllerClient`. Each asserts the records written to
the metadata log, the per-item error codes (INVALID_REQUEST 42 with nothing written), 400 + 42 for
a body that does not fit (naming the field), the admin token, and that ACLs survive a snapshot and
a restart."""

from __future__ import annotations

import time
from typing import Any

import httpx

from jbod_client.controller import ApiError, ControllerClient
from tests.controller.conftest import Api
from tests.harness import ControllerProcess

WRITE_ORDERS = {
    "resourceType": "TOPIC",
    "resourceName": "orders-",
    "patternType": "PREFIXED",
    "principal": "User:alice",
    "host": "*",
    "operation": "WRITE",
    "permissionType": "ALLOW",
}
READ_GROUP = {
    **WRITE_ORDERS,
    "resourceType": "GROUP",
    "resourceName": "g1",
    "patternType": "LITERAL",
    "operation": "READ",
}
DENY_SECRET = {
    **WRITE_ORDERS,
    "resourceName": "orders-secret",
    "patternType": "LITERAL",
    "operation": "ALL",
    "permissionType": "DENY",
}


def _post(client: httpx.Client, path: str, body: Any, *, status: int = 200) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    reply: dict[str, Any] = response.json()
    return reply


def _acl_records(api: Api, since: int = 0) -> list[tuple[str, dict[str, Any]]]:
    records, _snapshot = api.all_records(since)
    return [(r["type"], r["data"]) for r in records if "AccessControlEntry" in r["type"]]


def test_create_describe_and_delete_acls_over_http(api: Api) -> None:
    reply = _post(api.admin, "/v1/acls", {"creations": [WRITE_ORDERS, READ_GROUP, WRITE_ORDERS]})
    assert reply == {"results": [{"errorCode": 0, "errorMessage": None}] * 3}
    written = _acl_records(api)
    assert [t for t, _ in written] == ["AccessControlEntryRecord"] * 2  # the duplicate adds nothing
    assert {(d["resourceType"], d["resourceName"], d["patternType"], d["operation"]) for _, d in written} == {
        (2, "orders-", 4, 4),
        (3, "g1", 3, 3),
    }
    end = api.end_offset()
    assert _post(api.admin, "/v1/acls", {"creations": [WRITE_ORDERS]})["results"][0]["errorCode"] == 0
    assert api.end_offset() == end

    listed = api.admin.get("/v1/acls").json()["acls"]
    assert listed == [WRITE_ORDERS, READ_GROUP]
    assert api.admin.get("/v1/acls", params={"resourceType": "GROUP"}).json()["acls"] == [READ_GROUP]
    matching = api.admin.get("/v1/acls", params={"resourceName": "orders-eu", "patternType": "MATCH"})
    assert matching.json()["acls"] == [WRITE_ORDERS]
    assert api.admin.get("/v1/acls", params={"principal": "User:bob"}).json()["acls"] == []

    deleted = _post(
        api.admin, "/v1/acls/delete", {"filters": [{"resourceType": "GROUP"}, {"operation": "ANY"}]}
    )
    assert deleted["results"] == [
        {"errorCode": 0, "errorMessage": None, "matchingAcls": [READ_GROUP]},
        {"errorCode": 0, "errorMessage": None, "matchingAcls": [WRITE_ORDERS, READ_GROUP]},
    ]
    removals = _acl_records(api, end)
    assert [t for t, _ in removals] == ["RemoveAccessControlEntryRecord"] * 2  # each removed once
    assert {d["id"] for _, d in removals} == {d["id"] for _, d in written}
    assert api.admin.get("/v1/acls").json() == {"acls": []}


def test_invalid_creations_are_42_each_and_write_nothing(api: Api) -> None:
    end = api.end_offset()
    bad = [
        {**WRITE_ORDERS, "resourceType": "ANY"},
        {**WRITE_ORDERS, "patternType": "MATCH"},
        {**WRITE_ORDERS, "operation": "ANY"},
        {**WRITE_ORDERS, "principal": "alice"},
        {**WRITE_ORDERS, "principal": ""},
        {**WRITE_ORDERS, "resourceType": "CLUSTER", "resourceName": "c", "patternType": "LITERAL"},
    ]
    results = _post(api.admin, "/v1/acls", {"creations": bad})["results"]
    assert [r["errorCode"] for r in results] == [42] * len(bad)
    assert "resourceType" in results[0]["errorMessage"]
    assert "principal" in results[3]["errorMessage"]
    assert "kafka-cluster" in results[5]["errorMessage"]
    assert api.end_offset() == end
    # A filter with an unknown enum value, a creation with a missing field: 400 naming the field.
    reply = _post(
        api.admin, "/v1/acls", {"creations": [{**WRITE_ORDERS, "operation": "READ_ALL"}]}, status=400
    )
    assert reply["errorCode"] == 42 and reply["errorMessage"].startswith("creations[0].operation")
    missing = {k: v for k, v in WRITE_ORDERS.items() if k != "principal"}
    reply = _post(api.admin, "/v1/acls", {"creations": [missing]}, status=400)
    assert reply["errorMessage"] == "creations[0].principal: required field is missing"
    reply = _post(api.admin, "/v1/acls/delete", {"filters": [{"permissionType": "MAYBE"}]}, status=400)
    assert reply["errorMessage"].startswith("filters[0].permissionType")
    response = api.admin.get("/v1/acls", params={"operation": "FLY"})
    assert response.status_code == 400 and response.json()["errorMessage"].startswith("operation")
    assert api.end_offset() == end


def test_acls_need_the_admin_token(api: Api) -> None:
    assert api.broker.post("/v1/acls", json={"creations": [WRITE_ORDERS]}).status_code == 401
    assert api.broker.get("/v1/acls").status_code == 401
    assert api.broker.post("/v1/acls/delete", json={"filters": [{}]}).status_code == 401
    assert api.admin.get("/v1/acls").json() == {"acls": []}


def test_controller_client_acl_methods(api: Api) -> None:
    with ControllerClient(api.proc.url, token=api.proc.admin_token) as client:
        assert client.create_acls([WRITE_ORDERS, DENY_SECRET]) == [{"errorCode": 0, "errorMessage": None}] * 2
        assert client.describe_acls(permissionType="DENY") == [DENY_SECRET]
        assert client.describe_acls(resourceName="orders-secret", patternType="MATCH") == [
            WRITE_ORDERS,
            DENY_SECRET,
        ]
        results = client.delete_acls([{"resourceName": "orders-secret", "patternType": "LITERAL"}])
        assert results == [{"errorCode": 0, "errorMessage": None, "matchingAcls": [DENY_SECRET]}]
        assert client.describe_acls() == [WRITE_ORDERS]
        try:
            client.create_acls([{"resourceType": "TOPIC"}])
        except ApiError as exc:
            assert exc.status == 400 and exc.code == 42
        else:
            raise AssertionError("a creation without its fields was accepted")


def test_acls_survive_a_snapshot_and_a_restart(make_controller: Any) -> None:
    proc: ControllerProcess = make_controller(extra_args=["--snapshot-interval-records", "20"])
    api = Api(proc)
    try:
        creations = [{**WRITE_ORDERS, "resourceName": f"orders-{n}-"} for n in range(25)]
        assert _post(api.admin, "/v1/acls", {"creations": creations})["results"][0]["errorCode"] == 0
        end = api.end_offset()
        snapshot = proc.data_dir / "metadata" / f"{end:020d}.snapshot"
        deadline = time.monotonic() + 30
        while not snapshot.exists():
            assert time.monotonic() < deadline, "no snapshot was cut at the end offset"
            time.sleep(0.05)
        _post(api.admin, "/v1/acls", {"creations": [DENY_SECRET]})
        before = api.admin.get("/v1/acls").json()["acls"]
        assert len(before) == 26
        proc.restart()
        assert f"after a snapshot at {end}" in proc.stderr()
        assert api.admin.get("/v1/acls").json()["acls"] == before
        # Decisions after recovery see them: a delete finds every one.
        deleted = _post(api.admin, "/v1/acls/delete", {"filters": [{}]})
        assert len(deleted["results"][0]["matchingAcls"]) == 26
        assert api.admin.get("/v1/acls").json() == {"acls": []}
    finally:
        api.close()
