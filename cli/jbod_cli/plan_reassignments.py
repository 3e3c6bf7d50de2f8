"""The cross-broker part of a `jbod-pipeline plan --across-brokers` (plan.json's
`reassignments`), carried out by `jbodctl apply-plan` through partition reassignments.

Guarantees:
* `parse_reassignments` validates the list whole before anything is sent: each entry
  `{topic, partition, replicas, logDirs, originalReplicas}` with the right types, distinct
  brokers, one dir (a directory Uuid) per replica, and no partition twice; a bad entry is one
  `PlanError` line naming it.
* Before the reassignment, every new replica's dir is named to its broker in advance (the
  broker's move API, which remembers the dir for a replica it does not host yet, as Kafka's
  AlterReplicaLogDirs does), so the broker creates the replica in the planned dir.
* With a throttle, Kafka's throttle configs are set as `kafka-reassign-partitions.sh --throttle`
  sets them (the leader and follower rates on every broker involved, the throttled replicas of
  each topic: the original replicas as leaders, the new ones as followers) and deleted once the
  reassignments are over, whatever their outcome.
* A partition already on its planned replicas is `already-done` and is not sent; one whose
  replicas are neither the plan's original nor its target ones is `skipped` (the plan is stale);
  the others are started in one request per 10,000 and are `done` once the controller lists them
  no more and their replicas are the plan's, `failed` with the controller's error, or when the
  deadline passes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from jbod_client.controller import ClientError, ControllerLink
from jbod_client.metadata import ClusterMetadata
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid
from jbod_core.messages import (
    MAX_PARTITIONS_PER_REQUEST,
    AlterBrokerConfigsRequest,
    AlterConfigOp,
    AlterReassignmentsRequest,
    AlterTopicConfigsRequest,
    ReassignmentTarget,
)

RATE_KEYS: Final = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
REPLICA_KEYS: Final = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


class PlanError(ValueError):
    """A plan file that cannot be applied; `str()` is one line."""


@dataclass(frozen=True, slots=True)
class PlannedReassignment:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    log_dirs: tuple[str, ...]
    original: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def new_replicas(self) -> list[tuple[int, str]]:
        return [(b, d) for b, d in zip(self.replicas, self.log_dirs, strict=True) if b not in self.original]


@dataclass(slots=True)
class ReassignOutcome:
    plan: PlannedReassignment
    status: str = "pending"  # done | already-done | failed | skipped | pending
    detail: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        p = self.plan
        return {
            "kind": "reassignment",
            "topic": p.topic,
            "partition": p.partition,
            "originalReplicas": list(p.original),
            "replicas": list(p.replicas),
            "status": self.status,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
        }


def _brokers(value: Any, where: str, field: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not value or any(type(b) is not int or b < 0 for b in value):
        raise PlanError(f"{where}.{field} must be a non-empty list of broker ids")
    if len(set(value)) != len(value):
        raise PlanError(f"{where}.{field} lists a broker twice")
    return tuple(value)


def _entry(item: Any, where: str) -> PlannedReassignment:
    if not isinstance(item, dict):
        raise PlanError(f"{where} is not an object")
    topic, partition = item.get("topic"), item.get("partition")
    if not isinstance(topic, str) or not topic:
        raise PlanError(f"{where}.topic must be a topic name")
    if type(partition) is not int or partition < 0:
        raise PlanError(f"{where}.partition must be a partition index")
    replicas = _brokers(item.get("replicas"), where, "replicas")
    original = _brokers(item.get("originalReplicas"), where, "originalReplicas")
    dirs = item.get("logDirs")
    if not isinstance(dirs, list) or len(dirs) != len(replicas):
        raise PlanError(f"{where}.logDirs must list one directory id per replica")
    for d in dirs:
        try:
            Uuid.parse(d if isinstance(d, str) else "")
        except ValueError as exc:
            raise PlanError(f"{where}.logDirs: {exc}") from exc
    return PlannedReassignment(topic, partition, replicas, tuple(dirs), original)


def parse_reassignments(document: Mapping[str, Any]) -> list[PlannedReassignment]:
    """plan.json's `reassignments` (absent: none)."""
    items = document.get("reassignments", [])
    if not isinstance(items, list):
        raise PlanError("'reassignments' must be a list")
    out: list[PlannedReassignment] = []
    seen: set[tuple[str, int]] = set()
    for i, item in enumerate(items):
        planned = _entry(item, f"reassignments[{i}]")
        if (planned.topic, planned.partition) in seen:
            raise PlanError(f"reassignments[{i}] reassigns {planned.name} a second time")
        seen.add((planned.topic, planned.partition))
        out.append(planned)
    return out


def throttle_configs(plans: Sequence[PlannedReassignment]) -> dict[str, dict[str, str]]:
    """topic → Kafka's throttled-replicas configs for `plans` (what the reassign tool writes)."""
    out: dict[str, dict[str, list[str]]] = {}
    for p in plans:
        lists = out.setdefault(p.topic, {key: [] for key in REPLICA_KEYS})
        lists[REPLICA_KEYS[0]].extend(f"{p.partition}:{b}" for b in p.original)
        lists[REPLICA_KEYS[1]].extend(f"{p.partition}:{b}" for b, _ in p.new_replicas)
    return {topic: {k: ",".join(v) for k, v in lists.items() if v} for topic, lists in out.items()}


@dataclass(frozen=True, slots=True)
class Pacing:
    rate: int | None
    poll_interval: float
    deadline: float


class Runner:
    """One apply-plan run of the reassignments (the module's guarantees)."""

    def __init__(  # noqa: PLR0913 - the controller, token and outcomes, then keyword-only settings
        self,
        controller_url: str,
        token: str,
        outcomes: list[ReassignOutcome],
        *,
        pacing: Pacing,
        report: Callable[[ReassignOutcome], None],
        ca_file: Path | None = None,
    ) -> None:
        self.ca_file = ca_file  # verifies https controllers and brokers
        self.controller_url = controller_url
        self.token = token
        self.outcomes = outcomes
        self.pacing = pacing
        self.report = report
        self.started = time.monotonic()

    def _finish(self, outcome: ReassignOutcome, status: str, detail: str = "") -> None:
        outcome.status, outcome.detail = status, detail
        outcome.seconds = time.monotonic() - self.started
        self.report(outcome)

    async def run(self) -> None:
        link = ControllerLink(self.controller_url, token=self.token, ca_file=self.ca_file)
        try:
            async with ClusterMetadata(
                self.controller_url, token=self.token, ca_file=self.ca_file
            ) as metadata:
                todo = await self._still_to_do(metadata)
                if not todo:
                    return
                await self._name_dirs(metadata, todo)
            throttled = self.pacing.rate is not None
            try:
                if throttled:
                    await self._throttle(link, [o.plan for o in todo])
                started = await self._start(link, todo)
                await self._wait(link, started)
            finally:
                if throttled:
                    await self._unthrottle(link, [o.plan for o in todo])
        finally:
            await link.aclose()

    async def _still_to_do(self, metadata: ClusterMetadata) -> list[ReassignOutcome]:
        todo = []
        for outcome in self.outcomes:
            plan = outcome.plan
            try:
                described = await metadata.describe_topic(plan.topic)
            except ClientError as exc:
                self._finish(outcome, "failed", str(exc))
                continue
            part = next((p for p in described["partitions"] if p["partitionIndex"] == plan.partition), None)
            replicas = tuple(part["replicas"]) if part is not None else None
            if replicas == plan.replicas:
                self._finish(outcome, "already-done")
            elif replicas is None or set(replicas) - set(plan.original) - set(plan.replicas):
                self._finish(
                    outcome,
                    "skipped",
                    f"its replicas are {list(replicas or [])}, not the plan's original {list(plan.original)}: "
                    "the plan is stale",
                )
            else:
                todo.append(outcome)
        return todo

    async def _name_dirs(self, metadata: ClusterMetadata, todo: list[ReassignOutcome]) -> None:
        """Tell each new replica's broker its planned dir (REPLICA_NOT_AVAILABLE: remembered)."""
        for outcome in todo:
            for broker_id, directory in outcome.plan.new_replicas:
                try:
                    client = await metadata.broker(broker_id)
                    reply = await client.move(outcome.plan.topic, outcome.plan.partition, directory)
                except ClientError as exc:
                    outcome.detail = f"dir not named in advance on broker {broker_id}: {exc}"
                    continue
                code = int(reply.get("errorCode", 0))
                if code not in (0, ErrorCode.REPLICA_NOT_AVAILABLE):
                    outcome.detail = (
                        f"dir not named in advance on broker {broker_id}: {reply.get('errorMessage')}"
                    )

    async def _throttle(self, link: ControllerLink, plans: list[PlannedReassignment]) -> None:
        rate = str(self.pacing.rate)
        brokers = sorted({b for p in plans for b in (*p.original, *p.replicas)})
        for broker_id in brokers:
            ops = [AlterConfigOp(name=key, op="SET", value=rate) for key in RATE_KEYS]
            await link.alter_broker_configs(str(broker_id), AlterBrokerConfigsRequest(configs=ops))
        for topic, configs in throttle_configs(plans).items():
            ops = [AlterConfigOp(name=k, op="SET", value=v) for k, v in configs.items()]
            await link.alter_topic_configs(topic, AlterTopicConfigsRequest(configs=ops))

    async def _unthrottle(self, link: ControllerLink, plans: list[PlannedReassignment]) -> None:
        brokers = sorted({b for p in plans for b in (*p.original, *p.replicas)})
        with_errors: list[str] = []
        for broker_id in brokers:
            ops = [AlterConfigOp(name=key, op="DELETE") for key in RATE_KEYS]
            try:
                await link.alter_broker_configs(str(broker_id), AlterBrokerConfigsRequest(configs=ops))
            except ClientError as exc:
                with_errors.append(f"broker {broker_id}: {exc}")
        for topic in sorted({p.topic for p in plans}):
            ops = [AlterConfigOp(name=key, op="DELETE") for key in REPLICA_KEYS]
            try:
                await link.alter_topic_configs(topic, AlterTopicConfigsRequest(configs=ops))
            except ClientError as exc:
                with_errors.append(f"topic {topic}: {exc}")
        if with_errors:
            raise ClientError("could not clear the throttles of " + "; ".join(with_errors))

    async def _start(self, link: ControllerLink, todo: list[ReassignOutcome]) -> list[ReassignOutcome]:
        started: list[ReassignOutcome] = []
        for first in range(0, len(todo), MAX_PARTITIONS_PER_REQUEST):
            chunk = todo[first : first + MAX_PARTITIONS_PER_REQUEST]
            request = AlterReassignmentsRequest(
                partitions=[
                    ReassignmentTarget(
                        topic=o.plan.topic, partition=o.plan.partition, replicas=list(o.plan.replicas)
                    )
                    for o in chunk
                ]
            )
            try:
                reply = await link.alter_reassignments(request)
            except ClientError as exc:
                for outcome in chunk:
                    self._finish(outcome, "failed", str(exc))
                continue
            for outcome, result in zip(chunk, reply.results, strict=True):
                if result.error_code != 0:
                    self._finish(outcome, "failed", f"{result.error_message} (errorCode {result.error_code})")
                else:
                    outcome.detail = "started"
                    started.append(outcome)
        return started

    async def _wait(self, link: ControllerLink, started: list[ReassignOutcome]) -> None:
        waiting = {(o.plan.topic, o.plan.partition): o for o in started}
        while waiting:
            try:
                listed = await link.list_reassignments()
            except ClientError as exc:
                if time.monotonic() > self.pacing.deadline:
                    for outcome in waiting.values():
                        self._finish(outcome, "failed", str(exc))
                    return
                await asyncio.sleep(self.pacing.poll_interval)
                continue
            running = {(r.topic, r.partition) for r in listed.reassignments}
            for key in [k for k in waiting if k not in running]:
                self._finish(waiting.pop(key), "done")
            if not waiting:
                return
            if time.monotonic() > self.pacing.deadline:
                for outcome in waiting.values():
                    self._finish(outcome, "failed", "timed out waiting for the reassignment")
                return
            await asyncio.sleep(self.pacing.poll_interval)
