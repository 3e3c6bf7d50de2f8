"""A JbodCluster's drains: disks and brokers leaving the spec, the scale-up rebalance, and
replicas moved off full disks that cannot grow, as `drain.decide` plans them on a fresh snapshot.

Guarantees: one drain step at a time per cluster; what the operator sets (cordons, throttles) is
recorded in the cluster's annotation before it is set, so a restarted operator undoes it; a move
asked for is taken as running for a grace period, so a stale view never asks for it again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from jbod_operator import cluster_access, drain, kube, model, names, plan, views

log = logging.getLogger("jbod_operator")


def warn_new_refusals(body: kopf.Body, refused: Iterable[str], status: Mapping[str, Any]) -> None:
    """A warning event per refused drain the previous status did not already report."""
    previous_refusals = {
        c.get("message") for c in status.get("conditions") or [] if c.get("reason") == plan.DRAIN_REFUSED
    }
    for line in refused:
        if not any(line in (m or "") for m in previous_refusals):
            kopf.warn(body, reason=plan.DRAIN_REFUSED, message=line)


def drive(  # noqa: PLR0913  the cluster (body, name, namespace, meta), its spec, brokers and view
    body: kopf.Body,
    cluster: str,
    namespace: str,
    meta: kopf.Meta,
    spec: model.ClusterSpec,
    existing: Mapping[int, model.BrokerSpec],
    statuses: Mapping[int, Mapping[str, Any]],
    view: views.ClusterView,
) -> drain.Actions:
    """Drains of the disks and brokers leaving the spec, the scale-up rebalance, and replicas moved
    off full disks that cannot grow (`drain.decide` on a fresh snapshot; what the operator sets is
    recorded in an annotation before it is set). One at a time per cluster: the timer and the
    update handler may run together."""
    leaving_disks = plan.leaving_disks(spec, existing)
    relieve = {
        b: paths
        for b in existing
        if b < spec.brokers
        and (
            paths := frozenset(
                names.log_dir(str(e.get("name")))
                for e in (statuses.get(b) or {}).get("logDirs") or []
                if e.get("spaceCordoned") and e.get("notGrowable")
            )
        )
    }
    wanted = drain.Wanted(
        leaving=frozenset(b for b in existing if b >= spec.brokers),
        disks=leaving_disks.paths,
        spec_paths=leaving_disks.kept_paths,
        into=leaving_disks.into,
        relieve=relieve,
        max_bytes_per_second=spec.drain.max_bytes_per_second,
        max_partitions_in_flight=spec.drain.max_partitions_in_flight,
    )
    joining = frozenset(b for b in range(spec.brokers) if b not in existing) if existing else frozenset()
    joining = joining if spec.rebalance == "OnScaleUp" else frozenset()
    recorded = (meta.get("annotations") or {}).get(names.ANNOTATION_DRAIN_OWNED)
    if not (wanted.leaving or wanted.disks or wanted.relieve or joining or recorded):
        return drain.Actions(owned=drain.Owned())
    with _DRAINS.lock(namespace, cluster):
        fresh_body = kube.get(names.API_VERSION, "JbodCluster", cluster, namespace) or {}
        owned = _owned((fresh_body.get("metadata") or {}).get("annotations") or {})
        if joining - owned.rebalance:
            owned = dataclasses.replace(owned, rebalance=owned.rebalance | joining)
            _record_owned(cluster, namespace, owned)
        tokens = cluster_access.tokens(cluster, namespace) or {}
        token = tokens.get(names.SECRET_ADMIN_TOKEN, "")
        url = cluster_access.controller_url(cluster, namespace)
        fresh = views.drain_snapshot(url, token, cluster_access.ENDPOINTS, view.log_dirs)
        if fresh is None:
            raise kopf.TemporaryError("the controller cannot be reached to plan the drain", delay=5)
        snapshot, topic_configs = fresh
        snapshot = dataclasses.replace(
            snapshot,
            moving=snapshot.moving | _DRAINS.recent_moves(namespace, cluster, now=cluster_access.monotonic()),
        )
        actions = drain.decide(snapshot, wanted, owned, topic_configs)
        before = _union(owned, actions.owned)
        if before != owned:
            _record_owned(cluster, namespace, before)
        errors = views.apply_drain(
            url,
            token,
            cluster_access.ENDPOINTS,
            view.registrations,
            actions,
            rate=spec.drain.max_bytes_per_second,
        )
        _DRAINS.moved(namespace, cluster, actions.moves, now=cluster_access.monotonic())
        for line in errors:
            log.warning("Failed a drain step of %s/%s: %s", namespace, cluster, line)
        if errors:
            raise kopf.TemporaryError(f"drain: {errors[0]}", delay=5)
        if actions.owned != before:
            _record_owned(cluster, namespace, actions.owned)
    for line in actions.started:
        kopf.info(body, reason="DrainStarted", message=line)
    for line in actions.ended:
        kopf.info(body, reason="DrainCompleted", message=line)
    return actions


def _owned(annotations: Mapping[str, str]) -> drain.Owned:
    try:
        return drain.Owned.from_json(json.loads(annotations.get(names.ANNOTATION_DRAIN_OWNED) or "{}"))
    except (ValueError, TypeError, AttributeError):
        log.warning("Ignored an unreadable %s annotation", names.ANNOTATION_DRAIN_OWNED)
        return drain.Owned()


class _Drains:
    """Per cluster: a lock (one drain step at a time) and the moves asked for in the last
    `grace_s` seconds, taken as running until the brokers' polled log dirs show them (so a stale
    view never asks for the same move again, to another dir)."""

    def __init__(self, grace_s: float = 30.0) -> None:
        self._guard = threading.Lock()
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._moves: dict[tuple[str, str], dict[tuple[str, int, int], float]] = {}
        self.grace_s = grace_s

    def lock(self, namespace: str, cluster: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((namespace, cluster), threading.Lock())

    def recent_moves(self, namespace: str, cluster: str, *, now: float) -> frozenset[tuple[str, int, int]]:
        with self._guard:
            asked = self._moves.setdefault((namespace, cluster), {})
            for key in [k for k, at in asked.items() if now - at > self.grace_s]:
                del asked[key]
            return frozenset(asked)

    def moved(self, namespace: str, cluster: str, moves: Iterable[drain.Move], *, now: float) -> None:
        with self._guard:
            asked = self._moves.setdefault((namespace, cluster), {})
            for move in moves:
                asked[(move.topic, move.partition, move.broker_id)] = now


_DRAINS = _Drains()


def _union(a: drain.Owned, b: drain.Owned) -> drain.Owned:
    """Everything either records (what is written before acting)."""
    return drain.Owned(
        cordons={
            k: a.cordons.get(k, frozenset()) | b.cordons.get(k, frozenset()) for k in {*a.cordons, *b.cordons}
        },
        throttled_brokers=a.throttled_brokers | b.throttled_brokers,
        throttled_topics=a.throttled_topics | b.throttled_topics,
        rebalance=a.rebalance | b.rebalance,
    )


def _record_owned(cluster: str, namespace: str, owned: drain.Owned) -> None:
    empty = owned.to_json() == drain.Owned().to_json()
    kube.merge_patch(
        names.API_VERSION,
        "JbodCluster",
        cluster,
        namespace,
        {
            "metadata": {
                "annotations": {
                    names.ANNOTATION_DRAIN_OWNED: None
                    if empty
                    else json.dumps(owned.to_json(), sort_keys=True)
                }
            }
        },
    )
