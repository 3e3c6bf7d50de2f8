"""The admin extensions in a controller quorum on etcd (§3.8): standbys replay config changes,
SCRAM credentials and producer-id blocks from the committed log and serve them, refuse the new
writes with errorCode 41, and a new active controller after `kill -9` hands out producer ids above
every block acknowledged before."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.controller.conftest import Api, bring_up
from tests.controller.quorum_support import ADMIN_TOKEN, Quorum
from tests.controller.test_quorum import records_of, wait_for_end

pytestmark = pytest.mark.quorum

HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _upsertion(user: str) -> dict[str, Any]:
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", b"salt", 4096)
    return {
        "name": user,
        "mechanism": 2,
        "iterations": 4096,
        "salt": base64.b64encode(b"salt").decode(),
        "saltedPassword": base64.b64encode(salted).decode(),
    }


def _post(url: str, path: str, body: Any) -> dict[str, Any]:
    response = httpx.post(url + path, json=body, headers=HEADERS, timeout=10)
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


def test_standbys_replay_and_serve_the_extensions_and_a_failover_keeps_the_watermark(tmp_path: Path) -> None:
    with Quorum(tmp_path, controllers=2) as quorum:
        first = quorum.active()
        url = quorum.nodes[first].url
        api = Api(quorum.nodes[first])
        brokers = bring_up(api, [1, 2, 3])
        api.create_topic("t", numPartitions=1, replicationFactor=3)
        api.close()
        change = {"configs": [{"name": "retention.ms", "op": "SET", "value": "60000"}]}
        assert _post(url, "/v1/topics/t/configs", change)["errorCode"] == 0
        assert _post(url, "/v1/topics/t/partitions", {"totalCount": 2})["errorCode"] == 0
        assert _post(url, "/v1/scram-credentials", {"upsertions": [_upsertion("alice")]})["errorCode"] == 0
        block = {"brokerId": 1, "brokerEpoch": brokers[1].epoch}
        assert _post(url, "/v1/producer-ids", block)["producerIdStart"] == 0
        end = quorum.cluster(first)["metadataEndOffset"]  # type: ignore[index]

        [standby] = [n for n in quorum.nodes if n != first]
        wait_for_end(quorum, standby, end)
        standby_url = quorum.nodes[standby].url
        topic = httpx.get(standby_url + "/v1/topics/t", headers=HEADERS, timeout=10).json()
        assert (topic["configs"], len(topic["partitions"])) == ({"retention.ms": "60000"}, 2)
        described = httpx.get(standby_url + "/v1/scram-credentials", headers=HEADERS, timeout=10).json()
        assert described == [
            {"user": "alice", "errorCode": 0, "credentialInfos": [{"mechanism": 2, "iterations": 4096}]}
        ]
        for path, body in [
            ("/v1/topics/t/configs", change),
            ("/v1/topics/t/partitions", {"totalCount": 3}),
            ("/v1/scram-credentials", {"deletions": [{"name": "alice", "mechanism": 2}]}),
            ("/v1/producer-ids", block),
        ]:
            reply = _post(standby_url, path, body)
            assert reply["errorCode"] == 41 and reply["activeController"]["url"] == url, (path, reply)
        assert records_of(quorum, standby) == records_of(quorum, first)

        quorum.nodes[first].kill()
        second = quorum.active(other_than=first)
        assert second == standby
        assert _post(standby_url, "/v1/producer-ids", block)["producerIdStart"] == 1000
        deletion = {"deletions": [{"name": "alice", "mechanism": 2}]}
        assert _post(standby_url, "/v1/scram-credentials", deletion)["results"] == [
            {"user": "alice", "errorCode": 0}
        ]
