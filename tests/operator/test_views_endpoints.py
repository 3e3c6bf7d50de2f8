"""The operator outside the cluster maps every controller address it dials through
`JBOD_ENDPOINTS_FILE` (`jbod_operator.views.Endpoints`), the active controller a standby names in
an errorCode 41 reply included: over real sockets, with small aiohttp controllers on 127.0.0.1
standing in for a standby and the active controller of a quorum."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from jbod_operator import views
from tests.client.test_controller_failover import TOKEN, FakeController, Servers, closed_url


@pytest.fixture
def servers() -> Iterator[Servers]:
    running = Servers()
    try:
        yield running
    finally:
        running.close()


def test_the_active_controller_named_by_a_standby_is_dialled_through_the_map(
    servers: Servers, tmp_path: Path
) -> None:
    active = servers.start(FakeController("active"))
    # What the standby advertises for the active controller: an address the operator cannot reach
    # (a pod's; here a closed loopback port), mapped in the endpoints file to where it can.
    advertised = closed_url().replace("127.0.0.1", "127.0.0.2")
    standby = servers.start(FakeController("standby", mode="standby", active_url=advertised))
    standby_advertised = "http://ha-controller-0.ha-controller.jbod.svc:9093"
    mapping = tmp_path / "endpoints.json"
    mapping.write_text(
        json.dumps(
            {
                standby_advertised.removeprefix("http://"): standby.url.removeprefix("http://"),
                advertised.removeprefix("http://"): active.url.removeprefix("http://"),
            }
        )
    )
    endpoints = views.Endpoints(str(mapping))

    assert views.unregister(standby_advertised, TOKEN, endpoints, 3) is None
    assert standby.seen == ["DELETE /v1/brokers/3"]
    assert active.seen == ["DELETE /v1/brokers/3"]
