"""Operator metrics: per-broker gauges are set from a status and dropped when the broker goes."""

from __future__ import annotations

from prometheus_client import REGISTRY

from jbod_operator import metrics


def _value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_broker_gauges_follow_the_status_and_are_forgotten() -> None:
    status = {"logDirs": [{"state": "Online"}, {"state": "Offline"}, {"state": "Online"}], "fenced": True}
    metrics.observe_broker("ns-a", "demo", 4, status)
    labels = {"namespace": "ns-a", "cluster": "demo", "broker": "4"}
    assert _value("jbod_operator_log_dirs", **labels, state="Online") == 2
    assert _value("jbod_operator_log_dirs", **labels, state="Offline") == 1
    assert _value("jbod_operator_log_dirs", **labels, state="Detached") == 0
    assert _value("jbod_operator_broker_fenced", **labels) == 1
    metrics.observe_broker("ns-b", "demo", 4, {"logDirs": [], "fenced": False})
    assert _value("jbod_operator_broker_fenced", namespace="ns-b", cluster="demo", broker="4") == 0
    metrics.forget_broker("ns-a", "demo", 4)
    assert _value("jbod_operator_log_dirs", **labels, state="Online") is None
    assert _value("jbod_operator_broker_fenced", **labels) is None
    assert _value("jbod_operator_broker_fenced", namespace="ns-b", cluster="demo", broker="4") == 0
