"""`metadata_api.controller_id`: the controller id a Metadata or DescribeCluster answer gives is
always one of the brokers it lists (this broker once it lists itself), or -1 when it lists none:
a broker that just started, whose image does not show it unfenced yet, never names itself, which
librdkafka could not connect to until its next periodic metadata refresh (an AdminClient's
CreateTopics then waited 30 s in CI)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from jbod_agent.kafka.metadata_api import controller_id


def _listed(*ids: int) -> list[dict[str, Any]]:
    return [{"node_id": i, "host": "127.0.0.1", "port": 9092 + i, "rack": None} for i in ids]


def test_the_controller_given_to_clients_is_always_a_listed_broker() -> None:
    me = cast(Any, SimpleNamespace(node_id=2))
    assert controller_id(me, _listed(1, 2, 3)) == 2
    assert controller_id(me, _listed(1, 3)) == 1  # not unfenced in its own image yet
    assert controller_id(me, _listed()) == -1
