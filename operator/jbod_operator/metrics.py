"""The operator's Prometheus metrics (served on `/metrics` by `jbod-operator`).

Names follow Prometheus conventions: `jbod_operator_` prefix, base units, `_total` for counters,
no per-partition labels.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge, Histogram

if TYPE_CHECKING:
    from jbod_operator import drain

RECONCILES = Counter("jbod_operator_reconciles_total", "Reconciliations run", ["kind", "result"])
RECONCILE_SECONDS = Histogram("jbod_operator_reconcile_seconds", "Time spent in one reconciliation", ["kind"])
REPLACEMENTS = Counter(
    "jbod_operator_volume_replacements_total", "Volumes replaced after a disk failure", ["cluster"]
)
VIEW_ERRORS = Counter(
    "jbod_operator_controller_unreachable_total",
    "Polls that could not reach a cluster's controller",
    ["cluster"],
)
LOG_DIRS = Gauge(
    "jbod_operator_log_dirs", "Log dirs of a broker by state", ["namespace", "cluster", "broker", "state"]
)
FENCED = Gauge(
    "jbod_operator_broker_fenced",
    "1 while the controller keeps the broker fenced",
    ["namespace", "cluster", "broker"],
)

DRAIN_REPLICAS = Gauge(
    "jbod_operator_drain_replicas",
    "Replicas still to move off the disks and brokers draining",
    ["namespace", "cluster"],
)
DRAIN_BYTES = Gauge(
    "jbod_operator_drain_bytes",
    "Bytes still to move off the disks and brokers draining",
    ["namespace", "cluster"],
)
DRAIN_REFUSED = Gauge(
    "jbod_operator_drain_refused",
    "1 while a drain the spec asks for is refused",
    ["namespace", "cluster"],
)

STATES = ("Online", "Offline", "Detached", "Full", "Draining", "Pending")


@contextlib.contextmanager
def reconcile(kind: str) -> Iterator[None]:
    started = time.perf_counter()
    result = "error"
    try:
        yield
        result = "ok"
    finally:
        RECONCILES.labels(kind=kind, result=result).inc()
        RECONCILE_SECONDS.labels(kind=kind).observe(time.perf_counter() - started)


def observe_broker(namespace: str, cluster: str, broker_id: int, status: Mapping[str, Any]) -> None:
    counts = dict.fromkeys(STATES, 0)
    for entry in status.get("logDirs") or []:
        counts[entry["state"]] = counts.get(entry["state"], 0) + 1
    for state, count in counts.items():
        LOG_DIRS.labels(namespace=namespace, cluster=cluster, broker=str(broker_id), state=state).set(count)
    FENCED.labels(namespace=namespace, cluster=cluster, broker=str(broker_id)).set(
        1 if status.get("fenced") else 0
    )


def forget_broker(namespace: str, cluster: str, broker_id: int) -> None:
    """Drop a deleted broker's series, so they do not linger as stale values."""
    for state in STATES:
        with contextlib.suppress(KeyError):
            LOG_DIRS.remove(namespace, cluster, str(broker_id), state)
    with contextlib.suppress(KeyError):
        FENCED.remove(namespace, cluster, str(broker_id))


def observe_drain(namespace: str, cluster: str, actions: drain.Actions) -> None:
    DRAIN_REPLICAS.labels(namespace=namespace, cluster=cluster).set(actions.replicas_left)
    DRAIN_BYTES.labels(namespace=namespace, cluster=cluster).set(actions.bytes_left)
    DRAIN_REFUSED.labels(namespace=namespace, cluster=cluster).set(1 if actions.refused else 0)
