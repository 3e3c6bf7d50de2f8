"""`metadata_api.controller_id`: the controller id a Metadata or DescribeCluster answer gives is
always one of the brokers it lists (this broker once it lists itself), or -1 when it lists none:
a broker that just started, whose image does not show it unfenced yet, never names itself, which
librdkafka could not connect to until its next periodic metadata refresh (an AdminClient's
CreateTopics then waited 30 s in CI); and `AgentState.serves_clients` (`/readyz`), which waits for
the image to list the broker, so that a ready single broker never answers -1."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from jbod_agent.kafka.metadata_api import controller_id
from jbod_agent.state import AgentState, LogDirState
from jbod_core.ids import Uuid
from jbod_core.image import BrokerRegistration
from tests.agent.test_config import parse


def _listed(*ids: int) -> list[dict[str, Any]]:
    return [{"node_id": i, "host": "127.0.0.1", "port": 9092 + i, "rack": None} for i in ids]


def test_the_controller_given_to_clients_is_always_a_listed_broker() -> None:
    me = cast(Any, SimpleNamespace(node_id=2))
    assert controller_id(me, _listed(1, 2, 3)) == 2
    assert controller_id(me, _listed(1, 3)) == 1  # not unfenced in its own image yet
    assert controller_id(me, _listed()) == -1


def _registration(epoch: int, *, fenced: bool) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id=2,
        broker_epoch=epoch,
        incarnation_id=Uuid(5, 5),
        log_dirs=(Uuid(1, 1),),
        offline_log_dirs=(),
        has_offline_log_dirs=False,
        fenced=fenced,
        in_controlled_shutdown=False,
        listeners=(),
        rack=None,
    )


def test_a_broker_serves_clients_only_once_its_own_image_lists_it_unfenced_at_its_epoch() -> None:
    """`/readyz`: a single broker whose heartbeat says unfenced but whose image does not show it yet
    answers Metadata with no broker and controller -1, on which librdkafka's admin requests wait
    their whole timeout (a CreateTopics waited 30 s in CI)."""
    state = AgentState(
        config=parse(node_id="2"),
        cluster_id="c",
        incarnation=Uuid(5, 5),
        dirs={},
        startup_offline=[],
        metadata_dir=LogDirState(path=Path("/meta"), directory_id=Uuid(9, 9), device=0),
    )
    assert not state.serves_clients()  # not registered
    state.registered, state.epoch, state.fenced = True, 7, False
    assert not state.serves_clients()  # the image does not know it yet
    state.image.brokers[2] = _registration(7, fenced=True)
    assert not state.serves_clients()  # the image still shows it fenced
    state.image.brokers[2] = _registration(3, fenced=False)
    assert not state.serves_clients()  # unfenced at an earlier epoch: a previous run's registration
    state.image.brokers[2] = _registration(7, fenced=False)
    assert state.serves_clients()
    state.fenced = True  # fenced by a heartbeat answer before the image shows it
    assert not state.serves_clients()
