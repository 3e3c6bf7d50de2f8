"""Dynamic broker configs through the controller's HTTP API (issue 24): `POST /v1/brokers/{id}/configs`
(`default` for the cluster default) writes BrokerConfigRecords, refuses bad input with nothing
written, needs the admin token, and the configs survive a restart (replayed from the log)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.controller.conftest import Api, assert_read_api_matches_log, bring_up
from tests.harness import ControllerProcess

RATE = "leader.replication.throttled.rate"


def _post(client: httpx.Client, path: str, body: Any, *, status: int = 200) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    reply: dict[str, Any] = response.json()
    return reply


def _records(api: Api, since: int) -> list[tuple[str, dict[str, Any]]]:
    records, _snapshot = api.all_records(since)
    return [(r["type"], r["data"]) for r in records]


def test_broker_configs_are_records_refusals_write_nothing_and_a_restart_keeps_them(
    api: Api, controller: ControllerProcess
) -> None:
    bring_up(api, [1])
    end = api.end_offset()
    body = {"configs": [{"name": RATE, "op": "SET", "value": "1000"}]}
    assert _post(api.admin, "/v1/brokers/1/configs", body) == {
        "errorCode": 0,
        "broker": "1",
        "configs": {RATE: "1000"},
    }
    default = {"configs": [{"name": "cordoned.log.dirs", "op": "SET", "value": "*"}]}
    assert _post(api.admin, "/v1/brokers/default/configs", default)["broker"] == ""
    assert _records(api, end) == [
        ("BrokerConfigRecord", {"broker": "1", "name": RATE, "value": "1000"}),
        ("BrokerConfigRecord", {"broker": "", "name": "cordoned.log.dirs", "value": "*"}),
    ]
    end = api.end_offset()
    for path, ops, code in (
        ("/v1/brokers/x/configs", body["configs"], 42),
        ("/v1/brokers/1/configs", [{"name": "num.io.threads", "op": "SET", "value": "8"}], 42),
        ("/v1/brokers/1/configs", [{"name": RATE, "op": "SET", "value": "fast"}], 42),
    ):
        assert _post(api.admin, path, {"configs": ops})["errorCode"] == code, (path, ops)
    response = api.broker.post("/v1/brokers/1/configs", json=body)  # the cluster token
    assert (response.status_code, response.json()["errorCode"]) == (401, 31)
    assert api.end_offset() == end
    controller.restart()
    again = _post(api.admin, "/v1/brokers/1/configs", body)
    assert again["configs"] == {RATE: "1000"}
    assert api.end_offset() == end  # replayed: the repeat changes nothing
    assert_read_api_matches_log(api)
