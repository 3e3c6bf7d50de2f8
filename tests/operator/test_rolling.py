"""One rolling restart at a time per cluster: the token passes on only once the holder's pod is Ready."""

from __future__ import annotations

from jbod_operator.broker_handlers import _RollingRestarts

READY = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
NOT_READY = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}


def test_token_is_held_until_the_recreated_pod_is_ready() -> None:
    rolling = _RollingRestarts()
    assert rolling.acquire("ns", "c", 0) == 0
    assert rolling.acquire("ns", "c", 1) == 0
    assert rolling.acquire("ns", "other", 1) == 1, "clusters roll independently"
    rolling.release("ns", "c", 1, READY)  # not the holder: no effect
    rolling.release("ns", "c", 0, NOT_READY)
    assert rolling.acquire("ns", "c", 2) == 0
    rolling.release("ns", "c", 0, READY)
    assert rolling.acquire("ns", "c", 2) == 2


def test_a_silent_holder_loses_the_token() -> None:
    rolling = _RollingRestarts(timeout_s=0.0)
    assert rolling.acquire("ns", "c", 0) == 0
    assert rolling.acquire("ns", "c", 1) == 1
