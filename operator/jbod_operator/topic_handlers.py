"""kopf handlers of `JbodTopic` (a Kafka topic as a resource) and the reconcile they call.

Observe the topic at the cluster's controller (`GET /v1/topics/{name}`), decide with
`topic_plan.decide`, act through the controller's admin API (`POST /v1/topics`,
`POST /v1/topics/{name}/partitions`, `POST /v1/topics/{name}/configs`, `DELETE /v1/topics/{name}`).

Guarantees:
* `reconcile` never raises: what it did and what it refused are in the status it returns
  (`topicName`, `topicId`, `configKeys`: the config keys the resource has set, one condition
  `Ready` with `True` or `False`, a reason and a message). A refused change (a lower partition
  count, a replication factor change, a config Kafka refuses, two resources for one topic) and an
  unreachable controller are `Ready: False` and the handler returns: kopf retries on the next
  change of the resource or on the drift timer (`TOPIC_INTERVAL`), never in an error loop.
* Only the topic a resource names (and owns, `topic_plan.owner`) is ever changed; topics without a
  JbodTopic are never read or written. One reconcile of a resource runs at a time (the timer and
  a change handler may fire together).
* Resources are those with the label `jbod.dev/cluster` (Strimzi's `strimzi.io/cluster`); with the
  annotation `jbod.dev/managed: "false"` the topic is left alone (condition `Unmanaged`) and
  deleting the resource leaves it. Deletion (kopf's finalizer) deletes a managed, owned topic the
  resource made or adopted; when the JbodCluster or its tokens are gone (or the JbodCluster is
  being deleted), the topic goes with the cluster and the resource is released at once; an
  unreachable controller is retried until `DELETE_TIMEOUT`, then kopf gives up and releases the
  resource (the topic may remain; logged). Removing the label also releases it (no handler
  matches it any more, so kopf drops its finalizer).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

import kopf

from jbod_client.controller import ApiError, ClientError, ControllerClient
from jbod_core.errors import ErrorCode
from jbod_core.messages import AlterConfigOp, AlterTopicConfigsRequest, CreatePartitionsRequest
from jbod_operator import cluster_access, kube, metrics, names, topic_plan
from jbod_operator.model import SpecError

log = logging.getLogger("jbod_operator")

TOPIC_INTERVAL: Final = 60.0  # the drift timer: a topic changed behind the operator's back is put back
DELETE_TIMEOUT: Final = 600.0  # how long a deletion waits for an unreachable controller
MANAGED_ANNOTATION: Final = "jbod.dev/managed"
# One reconcile at a time per resource: the drift timer and a change handler may fire together.
_LOCKS: dict[tuple[str, str], threading.Lock] = {}


def _condition(
    kind: str, ready: bool, reason: str | None, message: str | None, now: datetime
) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if ready else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _kafka_reason(code: int) -> str:
    """Kafka's error name as a condition reason: INVALID_CONFIG → InvalidConfig."""
    try:
        name = ErrorCode(code).name
    except ValueError:
        return "KafkaError"
    return "".join(part.capitalize() for part in name.split("_"))


def _describe(client: ControllerClient, topic: str) -> topic_plan.TopicState | None:
    try:
        return topic_plan.state_of(client.describe_topic(topic))
    except ApiError as exc:
        if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return None
        raise


def _act(
    client: ControllerClient, spec: topic_plan.TopicSpec, plan: topic_plan.Plan
) -> topic_plan.Refusal | None:
    """Carry out the plan's changes; the controller's refusal of one, or None."""
    topic = spec.topic_name
    if plan.create:
        reply = client.create_topic(
            topic, partitions=spec.partitions, replication_factor=spec.replicas, configs=spec.config
        )
        code = int(reply.get("errorCode") or 0)
        if code:
            return topic_plan.Refusal(_kafka_reason(code), str(reply.get("errorMessage") or ""))
        return None
    if plan.partitions is not None:
        made = client.create_partitions(topic, CreatePartitionsRequest(total_count=plan.partitions))
        if made.error_code:
            return topic_plan.Refusal(_kafka_reason(made.error_code), made.error_message or "")
    if plan.set_configs or plan.reset_configs:
        ops = [AlterConfigOp(name=k, op="SET", value=v) for k, v in plan.set_configs.items()]
        ops += [AlterConfigOp(name=k, op="DELETE") for k in plan.reset_configs]
        altered = client.alter_topic_configs(topic, AlterTopicConfigsRequest(configs=ops))
        if altered.error_code:
            return topic_plan.Refusal(_kafka_reason(altered.error_code), altered.error_message or "")
    return None


def reconcile(  # noqa: PLR0913  the controller, the resource (name, spec, status, generation), who owns the topic, the clock
    client: ControllerClient,
    resource: str,
    spec: topic_plan.TopicSpec,
    status: Mapping[str, Any],
    *,
    owner_name: str | None,
    generation: int | None,
    now: datetime,
) -> dict[str, Any]:
    """Make the topic match the resource; the resource's new status (module docstring)."""
    previous_keys = list(status.get("configKeys") or [])
    previous_name = status.get("topicName")
    topic_id = status.get("topicId")
    try:
        state = _describe(client, spec.topic_name)
        plan = topic_plan.decide(
            spec,
            state,
            resource=resource,
            owner_name=owner_name,
            previous_keys=previous_keys,
            previous_topic_name=previous_name,
        )
        refused = None if plan.blocked else _act(client, spec, plan)
        if not plan.blocked and plan.changes:
            state = _describe(client, spec.topic_name)
    except ClientError as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return {
            **{k: status.get(k) for k in ("topicName", "topicId", "configKeys") if k in status},
            "conditions": [_condition(topic_plan.READY, False, "ControllerUnreachable", message, now)],
            "observedGeneration": generation,
        }
    refusals = list(plan.refusals) + ([refused] if refused is not None else [])
    if plan.blocked:
        keys = previous_keys
    elif refused is not None:
        keys = sorted(set(previous_keys) | set(spec.config))  # not known which were set: keep both
    else:
        keys = sorted(spec.config)
    made = not plan.blocked and state is not None
    condition = (
        _condition(topic_plan.READY, False, refusals[0].reason, "; ".join(r.message for r in refusals), now)
        if refusals
        else _condition(topic_plan.READY, True, None, None, now)
    )
    return {
        "topicName": spec.topic_name if made else previous_name,
        "topicId": state.topic_id if made and state is not None else topic_id,
        "configKeys": keys,
        "conditions": [condition],
        "observedGeneration": generation,
    }


def delete(client: ControllerClient, topic: str) -> str | None:
    """Delete the topic; None when it is gone (or was), else the controller's refusal."""
    try:
        reply = client.delete_topic(topic)
    except ApiError as exc:
        if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return None
        raise
    code = int(reply.get("errorCode") or 0)
    return None if code in (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) else str(reply.get("errorMessage"))


# ---------------------------------------------------------------------------------------------
# kopf


def _cluster(labels: Mapping[str, str]) -> str:
    return str(labels.get(names.LABEL_CLUSTER) or "")


def _managed(annotations: Mapping[str, str]) -> bool:
    return str(annotations.get(MANAGED_ANNOTATION, "true")).lower() != "false"


def _claims(index: Any, key: tuple[str, str, str]) -> Iterable[topic_plan.Claim]:
    return list(index.get(key, ())) if index is not None else []


def _client(cluster: str, namespace: str, token: str) -> ControllerClient:
    return ControllerClient(
        cluster_access.controller_url(cluster, namespace),
        token=token,
        timeout=10.0,
        failover_timeout=10.0,
        map_url=cluster_access.ENDPOINTS.resolve,
        ca_file=cluster_access.TRUST_FILES.get((namespace, cluster)),
    )


def _token(cluster: str, namespace: str) -> str | None:
    """The cluster's admin token, or None when the JbodCluster is missing or being deleted, or
    its Secret is missing (its topics go with it)."""
    body = kube.get(names.API_VERSION, "JbodCluster", cluster, namespace)
    if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
        return None
    return (cluster_access.tokens(cluster, namespace) or {}).get(names.SECRET_ADMIN_TOKEN)


@kopf.index(names.GROUP, names.VERSION, names.TOPICS, labels={names.LABEL_CLUSTER: kopf.PRESENT})
def topics_index(
    namespace: str | None, name: str, spec: kopf.Spec, meta: kopf.Meta, labels: Mapping[str, str], **_: Any
) -> Any:
    """(namespace, cluster, topic name) → the JbodTopics naming it, for `topic_plan.owner`."""
    topic = str(spec.get("topicName") or name)
    key = (namespace or "default", _cluster(labels), topic)
    return {key: topic_plan.Claim(name, str(meta.get("creationTimestamp") or ""))}


@kopf.on.resume(names.GROUP, names.VERSION, names.TOPICS, labels={names.LABEL_CLUSTER: kopf.PRESENT})
@kopf.on.create(names.GROUP, names.VERSION, names.TOPICS, labels={names.LABEL_CLUSTER: kopf.PRESENT})
@kopf.on.update(names.GROUP, names.VERSION, names.TOPICS, labels={names.LABEL_CLUSTER: kopf.PRESENT})
@kopf.timer(
    names.GROUP,
    names.VERSION,
    names.TOPICS,
    id="topics",
    interval=TOPIC_INTERVAL,
    initial_delay=TOPIC_INTERVAL / 2,
    labels={names.LABEL_CLUSTER: kopf.PRESENT},
)
def reconcile_topic(  # noqa: PLR0913  kopf handler: one parameter per kwarg kopf passes
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    **kwargs: Any,
) -> None:
    """The topic the resource names, made to match it (`reconcile`); refusals go to the status."""
    topics_index: kopf.Index[Any, Any] = kwargs["topics_index"]
    namespace = namespace or "default"
    if meta.get("deletionTimestamp"):
        return
    with metrics.reconcile("JbodTopic"):
        now = cluster_access.now()
        generation = meta.get("generation")
        if not _managed(meta.annotations):
            message = f"{MANAGED_ANNOTATION} is false: the topic is left as it is"
            patch.status["conditions"] = [_condition(topic_plan.UNMANAGED, True, "Unmanaged", message, now)]
            patch.status["observedGeneration"] = generation
            return
        try:
            parsed = topic_plan.parse_topic(name, dict(spec))
        except SpecError as exc:
            patch.status["conditions"] = [
                _condition(topic_plan.READY, False, "InvalidResource", str(exc), now)
            ]
            patch.status["observedGeneration"] = generation
            return
        cluster = _cluster(meta.labels)
        token = _token(cluster, namespace)
        if not token:
            message = f"JbodCluster {cluster} not found or without its admin token yet"
            patch.status["conditions"] = [
                _condition(topic_plan.READY, False, "ClusterNotReady", message, now)
            ]
            patch.status["observedGeneration"] = generation
            return
        owner_name = topic_plan.owner(_claims(topics_index, (namespace, cluster, parsed.topic_name)))
        lock = _LOCKS.setdefault((namespace, name), threading.Lock())
        with lock, _client(cluster, namespace, token) as client:
            new = reconcile(
                client, name, parsed, dict(status), owner_name=owner_name, generation=generation, now=now
            )
        for condition in new["conditions"]:
            old = next(
                (c for c in status.get("conditions") or [] if c.get("type") == condition["type"]), None
            )
            if old and old.get("status") == condition["status"] and old.get("lastTransitionTime"):
                condition["lastTransitionTime"] = old["lastTransitionTime"]
        patch.status.update(new)


@kopf.on.delete(
    names.GROUP,
    names.VERSION,
    names.TOPICS,
    labels={names.LABEL_CLUSTER: kopf.PRESENT},
    timeout=DELETE_TIMEOUT,
)
def delete_topic(
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    status: kopf.Status,
    **kwargs: Any,
) -> None:
    """kopf's finalizer holds the JbodTopic until its topic is deleted (or released: module docstring)."""
    topics_index: kopf.Index[Any, Any] = kwargs["topics_index"]
    namespace = namespace or "default"
    cluster = _cluster(meta.labels)
    topic = str(spec.get("topicName") or name)
    token = _token(cluster, namespace)
    claims = _claims(topics_index, (namespace, cluster, topic))
    action = topic_plan.delete_action(
        managed=_managed(meta.annotations),
        owns=topic_plan.owner(claims) in (None, name),
        made=bool(status.get("topicId")) and status.get("topicName") == topic,
        cluster_present=bool(token),
    )
    _LOCKS.pop((namespace, name), None)
    if action == "release" or token is None:
        log.info("JbodTopic %s/%s deleted: topic %s left as it is", namespace, name, topic)
        return
    try:
        with _client(cluster, namespace, token) as client:
            error = delete(client, topic)
    except ClientError as exc:
        raise kopf.TemporaryError(f"topic {topic} not deleted yet: {exc}", delay=15) from None
    if error is not None:
        raise kopf.TemporaryError(f"deleting topic {topic} refused: {error}", delay=30)
    log.info("JbodTopic %s/%s deleted: topic %s deleted", namespace, name, topic)
