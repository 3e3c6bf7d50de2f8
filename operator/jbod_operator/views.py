"""What the metadata controller and the brokers say about a cluster, fetched over the wire contract.

`poll_cluster` asks the controller for its brokers and partitions and every registered broker for
its log dirs, and returns one immutable `ClusterView`. Failures never raise: an unreachable
controller gives `reachable=False` (callers then leave readiness gates and volumes alone); an
unreachable broker gives `None` for its log dirs. A broker is asked over its HTTP API
(`GET /v1/log-dirs`), not its Kafka listener: the operator needs each dir's id, state and error,
which Kafka's DescribeLogDirs does not carry (docs/decisions.md, "jbodctl on Kafka clients").

Addresses: the operator dials the controller Service's DNS name (or a comma-separated list of
controller URLs, followed like every `ControllerClient`'s) and the listeners brokers registered.
An operator running outside the cluster (development, the e2e tests) maps those to reachable
addresses with `JBOD_ENDPOINTS_FILE`: a JSON object `{"host:port": "host2:port2"}`,
re-read whenever it changes. The map applies to every address dialled: the controller URLs it
was given, the active controller a standby names in an errorCode 41 reply, and the brokers'
listeners.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from jbod_client.broker import BrokerClient
from jbod_client.controller import ClientError, ControllerClient, parse_controller_urls
from jbod_core import messages
from jbod_operator import drain, health

ENDPOINTS_ENV = "JBOD_ENDPOINTS_FILE"


@dataclass(frozen=True)
class ClusterView:
    reachable: bool
    ready: bool = False
    registrations: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    placements: Mapping[int, Mapping[str, health.DirPlacements]] = field(default_factory=dict)
    log_dirs: Mapping[int, list[dict[str, Any]] | None] = field(default_factory=dict)
    error: str | None = None

    def hosted(self) -> dict[int, int] | None:
        """Replicas per broker id, or None when the controller could not be reached."""
        if not self.reachable:
            return None
        return health.hosted_replicas(self.placements)


class Endpoints:
    """Maps `host:port` to where the operator can actually reach it (identity without a map file)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = (
            Path(path)
            if path
            else (Path(os.environ[ENDPOINTS_ENV]) if os.environ.get(ENDPOINTS_ENV) else None)
        )
        self._mtime: float | None = None
        self._map: dict[str, str] = {}
        self._ca_files: dict[str, Path] = {}

    def trust(self, domain: str, ca_file: Path | None) -> None:
        """Verify https servers whose host ends with `domain` against `ca_file` (None: forget)."""
        if ca_file is None:
            self._ca_files.pop(domain, None)
        else:
            self._ca_files[domain] = ca_file

    def ca_file(self, url: str) -> Path | None:
        """The CA bundle for an https `url` (a list: its first URL), None for the system default."""
        host = urlsplit(parse_controller_urls(url)[0] if "," in url else url).hostname or ""
        return next(
            (
                path
                for domain, path in self._ca_files.items()
                if host == domain or host.endswith(f".{domain}")
            ),
            None,
        )

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            mtime = self.path.stat().st_mtime
            if mtime == self._mtime:
                return
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(data, dict):
            self._map = {str(k): str(v) for k, v in data.items()}
            self._mtime = mtime

    def resolve(self, url: str) -> str:
        """`url` mapped; a comma-separated list of controller URLs is mapped URL by URL."""
        self._load()
        if "," in url:
            return ",".join(self.resolve(u) for u in parse_controller_urls(url))
        parts = urlsplit(url)
        target = self._map.get(parts.netloc)
        if target is None:
            return url
        return urlunsplit((parts.scheme, target, parts.path, parts.query, parts.fragment))


def listener_url(registration: Mapping[str, Any]) -> str | None:
    """The broker's HTTP API: its listener named `http` or `https` (a registration from before
    the Kafka listeners has one unnamed listener, the HTTP API)."""
    for listener in registration.get("listeners") or []:
        host, port, name = listener.get("host"), listener.get("port"), listener.get("name")
        if host and port and name in (None, "", "http", "https"):
            return f"{name or 'http'}://{host}:{port}"
    return None


def controller_client(
    url: str, token: str, endpoints: Endpoints, *, timeout: float = 5.0
) -> ControllerClient:
    """A `ControllerClient` verifying an https controller against the cluster's CA bundle."""
    return ControllerClient(
        url, token=token, timeout=timeout, map_url=endpoints.resolve, ca_file=endpoints.ca_file(url)
    )


def _broker_client(url: str, token: str, ca_file: Path | None) -> BrokerClient:
    return BrokerClient(url, token=token, timeout=5.0, ca_file=ca_file)


def _controller_snapshot(
    url: str, token: str, endpoints: Endpoints
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    with controller_client(url, token, endpoints) as client:
        return client.cluster(), client.brokers(), client.list_topics()


async def _log_dirs(url: str, token: str, ca_file: Path | None = None) -> list[dict[str, Any]] | None:
    try:
        async with _broker_client(url, token, ca_file) as client:
            return await client.log_dirs()
    except ClientError:
        return None


async def poll_cluster(controller_url: str, token: str, endpoints: Endpoints) -> ClusterView:
    try:
        _cluster, brokers, topics = await asyncio.to_thread(
            _controller_snapshot, controller_url, token, endpoints
        )
    except ClientError as exc:
        return ClusterView(reachable=False, error=str(exc))
    registrations = {int(b["brokerId"]): b for b in brokers}
    urls = {b: listener_url(r) for b, r in registrations.items()}
    broker_ids = [b for b, u in urls.items() if u is not None]
    answers = await asyncio.gather(
        *(
            _log_dirs(endpoints.resolve(str(urls[b])), token, endpoints.ca_file(str(urls[b])))
            for b in broker_ids
        )
    )
    return ClusterView(
        reachable=True,
        ready=True,
        registrations=registrations,
        placements=health.placements_by_broker(topics),
        log_dirs=dict(zip(broker_ids, answers, strict=True)),
    )


def fresh_placements(
    controller_url: str, token: str, endpoints: Endpoints
) -> dict[int, dict[str, health.DirPlacements]] | None:
    """The controller's placements right now (None when it cannot be reached)."""
    try:
        with controller_client(controller_url, token, endpoints, timeout=5.0) as client:
            return health.placements_by_broker(client.list_topics())
    except ClientError:
        return None


def unregister(controller_url: str, token: str, endpoints: Endpoints, broker_id: int) -> str | None:
    """Unregister a removed broker; the error line, or None on success."""
    try:
        with controller_client(controller_url, token, endpoints, timeout=5.0) as client:
            reply = client.unregister_broker(broker_id)
    except ClientError as exc:
        return str(exc)
    code = int(reply.get("errorCode", 0))
    return None if code == 0 else f"errorCode {code}: {reply.get('errorMessage', '')}"


def drain_snapshot(
    controller_url: str, token: str, endpoints: Endpoints, log_dirs: Mapping[int, list[dict[str, Any]] | None]
) -> tuple[drain.Snapshot, dict[str, dict[str, str]]] | None:
    """The controller's brokers and partitions right now with the brokers' log dirs (the poller's),
    and each topic's configs; None when the controller cannot be reached."""
    try:
        with controller_client(controller_url, token, endpoints, timeout=5.0) as client:
            brokers, topics = client.brokers(), client.list_topics()
    except ClientError:
        return None
    configs = {str(t["name"]): {str(k): str(v) for k, v in (t.get("configs") or {}).items()} for t in topics}
    return drain.snapshot(brokers, topics, log_dirs), configs


def _ops(*ops: tuple[str, str, str | None]) -> list[messages.AlterConfigOp]:
    return [messages.AlterConfigOp(name=name, op=op, value=value) for name, op, value in ops]  # type: ignore[arg-type]


def _check(what: str, code: int, message: str | None, errors: list[str]) -> None:
    if code:
        errors.append(f"{what}: errorCode {code}: {message or ''}")


def _controller_actions(
    client: ControllerClient, actions: drain.Actions, rate: int, errors: list[str]
) -> None:
    """Cordons, throttles and reassignments first; then throttles cleared and cordons lifted."""
    for broker_id, entries in sorted(actions.cordon.items()):
        reply = client.alter_broker_configs(
            str(broker_id),
            messages.AlterBrokerConfigsRequest(
                configs=_ops((drain.CORDONED_LOG_DIRS, "APPEND", ",".join(entries)))
            ),
        )
        _check(f"cordon broker {broker_id}", reply.error_code, reply.error_message, errors)
    for broker_id in sorted(actions.broker_rates):
        reply = client.alter_broker_configs(
            str(broker_id),
            messages.AlterBrokerConfigsRequest(
                configs=_ops((drain.LEADER_RATE, "SET", str(rate)), (drain.FOLLOWER_RATE, "SET", str(rate)))
            ),
        )
        _check(f"throttle broker {broker_id}", reply.error_code, reply.error_message, errors)
    for topic, changes in sorted(actions.topic_configs.items()):
        ops = [(k, "DELETE" if v is None else "SET", v) for k, v in sorted(changes.items())]
        topic_reply = client.alter_topic_configs(topic, messages.AlterTopicConfigsRequest(configs=_ops(*ops)))
        _check(f"throttled replicas of {topic}", topic_reply.error_code, topic_reply.error_message, errors)
    if actions.reassignments:
        reassign = client.alter_reassignments(
            messages.AlterReassignmentsRequest(
                partitions=[
                    messages.ReassignmentTarget(
                        topic=r.topic, partition=r.partition, replicas=list(r.replicas)
                    )
                    for r in actions.reassignments
                ]
            )
        )
        for result in reassign.results:
            _check(
                f"reassign {result.topic}-{result.partition}", result.error_code, result.error_message, errors
            )
    for broker_id in sorted(actions.clear_rates):
        reply = client.alter_broker_configs(
            str(broker_id),
            messages.AlterBrokerConfigsRequest(
                configs=_ops((drain.LEADER_RATE, "DELETE", None), (drain.FOLLOWER_RATE, "DELETE", None))
            ),
        )
        _check(f"unthrottle broker {broker_id}", reply.error_code, reply.error_message, errors)
    for broker_id, entries in sorted(actions.uncordon.items()):
        reply = client.alter_broker_configs(
            str(broker_id),
            messages.AlterBrokerConfigsRequest(
                configs=_ops((drain.CORDONED_LOG_DIRS, "SUBTRACT", ",".join(entries)))
            ),
        )
        _check(f"uncordon broker {broker_id}", reply.error_code, reply.error_message, errors)


async def _moves(
    urls: Mapping[int, str], token: str, moves: tuple[drain.Move, ...], rate: int, errors: list[str]
) -> None:
    for move in moves:
        url = urls.get(move.broker_id)
        if url is None:
            errors.append(f"move {move.topic}-{move.partition}: broker {move.broker_id} has no HTTP listener")
            continue
        try:
            async with BrokerClient(url, token=token, timeout=10.0) as client:
                reply = await client.move(
                    move.topic, move.partition, move.directory_id, max_bytes_per_second=rate
                )
        except ClientError as exc:
            errors.append(f"move {move.topic}-{move.partition} on broker {move.broker_id}: {exc}")
            continue
        _check(
            f"move {move.topic}-{move.partition} on broker {move.broker_id}",
            int(reply.get("errorCode", 0)),
            reply.get("errorMessage"),
            errors,
        )


def apply_drain(  # noqa: PLR0913  where (controller, token, address map, registrations), what, how fast
    controller_url: str,
    token: str,
    endpoints: Endpoints,
    registrations: Mapping[int, Mapping[str, Any]],
    actions: drain.Actions,
    *,
    rate: int,
) -> list[str]:
    """Carry out `actions` (every call idempotent: a repeat changes nothing); the errors, one line each."""
    errors: list[str] = []
    try:
        with controller_client(controller_url, token, endpoints, timeout=10.0) as client:
            _controller_actions(client, actions, rate, errors)
    except ClientError as exc:
        errors.append(f"controller: {exc}")
    if actions.moves:
        urls = {
            b: endpoints.resolve(url)
            for b, r in registrations.items()
            if (url := listener_url(r)) is not None
        }
        asyncio.run(_moves(urls, token, actions.moves, rate, errors))
    return errors
