"""A first end-to-end check: a real controller process registers a broker and survives kill -9."""

from __future__ import annotations

from tests.harness import ControllerProcess


def test_register_heartbeat_and_recover_after_kill(controller: ControllerProcess) -> None:
    with controller.broker() as broker:
        reply = broker.post(
            "/v1/brokers/register",
            json={
                "brokerId": 1,
                "clusterId": controller.cluster_id,
                "incarnationId": "ws5vRH7U1Xt45RBhcxHYow",
                "logDirs": ["kbdYSiJlsfXNYT4w2PFq3w"],
            },
        ).json()
        assert reply == {"errorCode": 0, "brokerEpoch": 0}
        beat = broker.post(
            "/v1/brokers/heartbeat", json={"brokerId": 1, "brokerEpoch": 0, "currentMetadataOffset": 0}
        )
        assert beat.json()["isFenced"] is False
    controller.restart()
    with controller.admin() as admin:
        brokers = admin.get("/v1/brokers").json()
    assert [(b["brokerId"], b["fenced"], b["brokerEpoch"]) for b in brokers] == [(1, False, 0)]
