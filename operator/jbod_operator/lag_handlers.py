"""The consumer-lag poller: a kopf daemon per `JbodCluster` publishing `lag.fetch_lags` every
`SETTINGS["lag_seconds"]` (0: off) as the `jbod_consumergroup_*` gauges.

Guarantees: the daemon never raises for a cluster it cannot reach (no tokens yet, brokers down,
a login refused): it logs at DEBUG, drops the cluster's series rather than leave stale values,
and tries again on the next tick. It logs in afresh every tick (the admin token or the
trust bundle may have changed), with this project's Kafka protocol client (`lag.fetch_lags`).
Its series are removed when the cluster is deleted or the operator stops.
The brokers are reached at their advertised per-pod DNS names, so lag needs the operator to run
in the cluster (as the chart deploys it).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from jbod_client.controller import ClientError
from jbod_operator import cluster_access, lag, names

log = logging.getLogger("jbod_operator.lag")

SETTINGS: dict[str, float] = {"lag_seconds": 30.0, "timeout_seconds": 10.0}


@kopf.daemon(names.GROUP, names.VERSION, names.CLUSTERS, cancellation_timeout=5.0)
async def poll_consumer_lag(name: str, namespace: str | None, stopped: kopf.DaemonStopped, **_: Any) -> None:
    namespace = namespace or "default"
    try:
        while not stopped and SETTINGS["lag_seconds"] > 0:
            tokens = await asyncio.to_thread(cluster_access.tokens, name, namespace)
            token = (tokens or {}).get(names.SECRET_ADMIN_TOKEN)
            if token:
                login = lag.security(token, cluster_access.TRUST_FILES.get((namespace, name)))
                try:
                    lags = await lag.fetch_lags(
                        lag.bootstrap(name, namespace), login, timeout=SETTINGS["timeout_seconds"]
                    )
                except ClientError as exc:
                    log.debug("Could not compute the consumer lag of %s/%s: %s", namespace, name, exc)
                    lag.METRICS.forget(namespace, name)
                else:
                    lag.METRICS.publish(namespace, name, lags)
            await stopped.wait(SETTINGS["lag_seconds"] or 1.0)
    finally:
        lag.METRICS.forget(namespace, name)
