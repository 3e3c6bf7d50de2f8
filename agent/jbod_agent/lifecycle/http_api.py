"""The broker's own HTTP API (protocol §4.4, §4.5): what is not a Kafka client's business — log
dirs and moves (the operator, jbodctl), metadata reads, probes, metrics, and the followers'
replica fetch. Records are produced and consumed on the Kafka listeners only (`kafka/`): this
API serves no produce or fetch route.

Guarantees: `/healthz`, `/readyz` and `/metrics` need no token; everything else accepts the
cluster or the admin token (401 + 31 otherwise); `/readyz` is 200 only while the broker is
registered and unfenced and its own image shows it so (`AgentState.serves_clients`). Metrics are computed from the agent's state when scraped.
* A body or query that does not match the schema is answered HTTP 400 with errorCode 42 and a
  message naming the field, before anything is appended or changed.
* The `jbod_replica_fetch_*` metrics count the fetch sessions this broker holds as a leader and
  the follower fetches it served by kind (followers fetch over the Kafka listener, issue 31).
* Limits (docs/operations.md, "Limits"): a body is never buffered past its endpoint's limit — a
  body over it gets HTTP 413 with errorCode 42, refused from its Content-Length before it is
  read. Connections obey `connections.max.idle.ms` and `request.read.timeout.ms`
  (`jbod_runtime.http_server`).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import BaseModel, ValidationError

from jbod_agent import dynamic_configs
from jbod_agent.config import BrokerConfig
from jbod_agent.disks import block_stats, probe
from jbod_agent.lifecycle import views
from jbod_agent.lifecycle.agent import Agent
from jbod_agent.partitions.log_cleaning import CleanerState
from jbod_agent.placement import DirHealth
from jbod_core import views as core_views
from jbod_core.broker_messages import MoveReplicaRequest
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid
from jbod_core.messages import validation_message
from jbod_runtime import http_server

log = logging.getLogger("jbod_agent.http")

M = TypeVar("M", bound=BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_PROBE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def _json(body: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


class BadRequestError(Exception):
    """Answered HTTP 400 with errorCode 42 (INVALID_REQUEST)."""


def _error(status: int, code: ErrorCode, message: str) -> web.Response:
    return _json({"errorCode": int(code), "errorMessage": message}, status)


def _bad(message: str) -> web.Response:
    return _error(400, ErrorCode.INVALID_REQUEST, message)


# Bodies of a few fields (a move names one partition and one dir).
SMALL_BODY_BYTES = 64 * 1024


def limits(config: BrokerConfig) -> http_server.ConnectionLimits:
    return http_server.ConnectionLimits(
        idle_timeout_s=config.connections_max_idle_ms / 1000,
        read_timeout_s=config.request_read_timeout_ms / 1000,
    )


class _AgentCollector(Collector):
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        agent = self.agent
        yield GaugeMetricFamily(
            "jbod_queued_replica_to_dir_assignments",
            "Placements queued or in flight to the controller (AssignReplicasToDirs)",
            value=agent.queue.size,
        )
        offline = [s for s in agent.state.dirs.values() if s.health is DirHealth.OFFLINE]
        yield GaugeMetricFamily(
            "jbod_offline_log_directory_count",
            "Configured log dirs that are offline",
            value=len(offline) + len(agent.state.startup_offline),
        )
        yield GaugeMetricFamily(
            "jbod_offline_replica_count",
            "Replicas hosted in offline log dirs",
            value=agent.state.offline_replica_count(),
        )
        yield GaugeMetricFamily(
            "jbod_metadata_last_applied_offset",
            "Offset of the last metadata log record this broker applied (Kafka's last-applied-record-offset)",
            value=agent.state.applied_offset,
        )
        yield from _log_dir_metrics(agent)
        replica_fetch = agent.replica_fetch
        sessions = replica_fetch.sessions.sessions
        yield GaugeMetricFamily(
            "jbod_replica_fetch_sessions",
            "Incremental fetch sessions this broker holds for its followers",
            value=len(sessions),
        )
        yield GaugeMetricFamily(
            "jbod_replica_fetch_session_partitions",
            "Partitions held in those sessions",
            value=sum(len(s.partitions) for s in sessions.values()),
        )
        requests = CounterMetricFamily(
            "jbod_replica_fetch_requests",
            "Follower fetches served, by kind (rejected: unknown session or wrong epoch)",
            labels=["kind"],
        )
        for kind, count in replica_fetch.requests.items():
            requests.add_metric([kind], count)
        yield requests
        listed = CounterMetricFamily(
            "jbod_replica_fetch_request_partitions",
            "Partitions listed in the follower fetches served, by kind",
            labels=["kind"],
        )
        for kind, count in replica_fetch.request_partitions.items():
            listed.add_metric([kind], count)
        yield listed
        throttled = CounterMetricFamily(
            "jbod_replication_throttled_bytes",
            "Bytes of throttled replicas moved (Kafka's replication throttles), by side",
            labels=["side"],
        )
        skips = CounterMetricFamily(
            "jbod_replication_throttle_skips",
            "Times a throttled partition was left out of a fetch because its quota was exceeded",
            labels=["side"],
        )
        rates = GaugeMetricFamily(
            "jbod_replication_throttle_rate_bytes_per_second",
            "The replication throttle's rate, by side (absent: unthrottled)",
            labels=["side"],
        )
        for side, quota in (("leader", agent.leader_quota), ("follower", agent.follower_quota)):
            throttled.add_metric([side], quota.throttled_bytes)
            skips.add_metric([side], quota.skipped)
            if quota.rate is not None:
                rates.add_metric([side], quota.rate)
        yield throttled
        yield skips
        yield rates
        yield CounterMetricFamily(
            "jbod_fetch_follower_bytes",
            "Record bytes served to consumers from follower replicas (KIP-392 follower fetching)",
            value=agent.client_fetch.follower_bytes_served,
        )
        client_throttle = CounterMetricFamily(
            "jbod_kafka_client_throttle_seconds",
            "Seconds clients were throttled by their quotas (Kafka's throttle-time), by quota type "
            "(produce, fetch, request, controller_mutation), user and client id; connection: "
            "connections held unread over an ip's connection_creation_rate (no user or client id)",
            labels=["quota_type", "user", "client_id"],
        )
        for (kind, user, client_id), seconds in sorted(agent.state.client_throttle_seconds.items()):
            client_throttle.add_metric([kind, user, client_id], seconds)
        yield client_throttle
        yield from _cleaner_metrics(agent)
        yield from _block_device_metrics(agent)
        yield _mover_metric(agent)


def _log_dir_metrics(agent: Agent) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """Each log dir's health, space, cordon (by reason) and time until full."""
    per_dir = GaugeMetricFamily(
        "jbod_log_directory_offline", "1 if the log dir is offline", labels=["directory_id", "path"]
    )
    full = GaugeMetricFamily(
        "jbod_log_directory_full", "1 if the log dir is full", labels=["directory_id", "path"]
    )
    usable = GaugeMetricFamily(
        "jbod_log_dir_usable_bytes", "Usable bytes in the log dir (last probe)", labels=["directory_id"]
    )
    total = GaugeMetricFamily(
        "jbod_log_dir_total_bytes", "Size of the log dir's volume (last probe)", labels=["directory_id"]
    )
    cordoned = GaugeMetricFamily(
        "jbod_log_directory_cordoned",
        "1 if the log dir takes no new replicas, by reason: config (cordoned.log.dirs) or space "
        "(log.dir.cordon.threshold reached, or full)",
        labels=["directory_id", "path", "reason"],
    )
    slow = GaugeMetricFamily(
        "jbod_log_directory_slow",
        "1 if the log dir is slow: its median write-and-fsync latency over its last 5 probes and "
        "log flushes reached log.dir.slow.threshold.ms",
        labels=["directory_id", "path"],
    )
    stalled = GaugeMetricFamily(
        "jbod_log_directory_stalled",
        "1 if the log dir is stalled: its pulse went unanswered for log.dir.stall.timeout.ms while "
        "the broker's other dirs answered (it is reported slow until its pulses answer again)",
        labels=["directory_id", "path"],
    )
    stalls = CounterMetricFamily(
        "jbod_log_directory_stalls",
        "How often the log dir stalled since the broker started",
        labels=["directory_id", "path"],
    )
    latency = GaugeMetricFamily(
        "jbod_log_dir_latency_seconds",
        "Median write-and-fsync latency of the log dir's last 5 probes and log flushes",
        labels=["directory_id"],
    )
    to_full = GaugeMetricFamily(
        "jbod_log_dir_seconds_to_full",
        "Seconds until the log dir is full at its fill rate of the last 10 minutes (absent: not filling)",
        labels=["directory_id"],
    )
    paths = {d: s.path for d, s in agent.state.dirs.items()}
    by_config = set(dynamic_configs.cordoned_dirs(agent.state.config, agent.state.image, paths))
    for directory, state in agent.state.dirs.items():
        labels = [str(directory), str(state.path)]
        per_dir.add_metric(labels, 1 if state.health is DirHealth.OFFLINE else 0)
        full.add_metric(labels, 1 if state.health is DirHealth.FULL else 0)
        usable.add_metric([str(directory)], state.usable_bytes)
        total.add_metric([str(directory)], state.total_bytes)
        cordoned.add_metric([*labels, "config"], 1 if directory in by_config else 0)
        cordoned.add_metric([*labels, "space"], 1 if state.cordoned_for_space else 0)
        slow.add_metric(labels, 1 if state.slow else 0)
        stalled.add_metric(labels, 1 if state.stalled else 0)
        stalls.add_metric(labels, state.stalls)
        median = state.latency.median()
        if median is not None:
            latency.add_metric([str(directory)], median)
        left = state.fill.seconds_to_full()
        if left is not None:
            to_full.add_metric([str(directory)], left)
    for path, _reason in agent.state.startup_offline:
        per_dir.add_metric(["", str(path)], 1)
    yield per_dir
    yield full
    yield usable
    yield total
    yield cordoned
    yield to_full
    yield slow
    yield stalled
    yield stalls
    yield latency


def _cleaner_metrics(agent: Agent) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """Each dir's log cleaner (Kafka's `kafka.log:type=LogCleaner*` metrics, per dir)."""
    labels = ["directory_id"]
    state = GaugeMetricFamily(
        "jbod_log_cleaner_running", "1 while the dir's cleaner is cleaning a log", labels=labels
    )
    failed = GaugeMetricFamily(
        "jbod_log_cleaner_failed", "1 once the dir's cleaner stopped on an I/O error", labels=labels
    )
    read = CounterMetricFamily("jbod_log_cleaner_read_bytes", "Bytes the dir's cleaner read", labels=labels)
    written = CounterMetricFamily(
        "jbod_log_cleaner_written_bytes", "Bytes of cleaned segments the dir's cleaner wrote", labels=labels
    )
    removed = CounterMetricFamily(
        "jbod_log_cleaner_removed_records", "Records the dir's cleaner removed", labels=labels
    )
    last = GaugeMetricFamily(
        "jbod_log_cleaner_last_run_timestamp_seconds",
        "When the dir's cleaner last cleaned a log (wall clock)",
        labels=labels,
    )
    freed = CounterMetricFamily(
        "jbod_log_cleaner_freed_bytes",
        "Bytes the dir's cleaner freed (log sizes before less after)",
        labels=labels,
    )
    dirty = GaugeMetricFamily(
        "jbod_log_cleaner_max_dirty_ratio", "The largest dirty ratio the dir's cleaner cleaned", labels=labels
    )
    for directory, cleaner in agent.log_cleaning.cleaners.items():
        label = [str(directory)]
        state.add_metric(label, 1 if cleaner.state is CleanerState.CLEANING else 0)
        failed.add_metric(label, 1 if cleaner.state is CleanerState.FAILED else 0)
        read.add_metric(label, cleaner.bytes_read)
        written.add_metric(label, cleaner.bytes_written)
        removed.add_metric(label, cleaner.records_removed)
        freed.add_metric(label, cleaner.bytes_freed)
        if cleaner.last_run_ms is not None:
            last.add_metric(label, cleaner.last_run_ms / 1000)
        dirty.add_metric(label, cleaner.max_dirty_ratio)
    yield from (state, failed, read, written, removed, freed, last, dirty)


def _mover_metric(agent: Agent) -> CounterMetricFamily:
    """The bytes replica moves between this broker's dirs copied, out of and into each dir."""
    moved = CounterMetricFamily(
        "jbod_log_dir_moved_bytes",
        "Bytes replica moves between the broker's dirs (AlterReplicaLogDirs, drains) copied out of "
        "(direction out) or into (in) the dir since the broker started",
        labels=["directory_id", "direction"],
    )
    mover = agent.mover
    for direction, counts in (("out", mover.copied_out), ("in", mover.copied_in)):
        for directory, copied in sorted(counts.items()):
            moved.add_metric([str(directory), direction], copied)
    return moved


def _block_device_metrics(agent: Agent) -> Iterator[CounterMetricFamily]:
    """Each dir's block device as the kernel counts its I/O (`block_stats`; absent for a dir
    without one). Dirs on one device show the same counters."""
    labels = ["directory_id"]
    read = CounterMetricFamily("jbod_log_dir_read_bytes", "Bytes the dir's block device read", labels=labels)
    written = CounterMetricFamily(
        "jbod_log_dir_written_bytes", "Bytes the dir's block device wrote", labels=labels
    )
    reads = CounterMetricFamily(
        "jbod_log_dir_reads", "Read requests the dir's block device completed", labels=labels
    )
    writes = CounterMetricFamily(
        "jbod_log_dir_writes", "Write requests the dir's block device completed", labels=labels
    )
    read_time = CounterMetricFamily(
        "jbod_log_dir_read_seconds", "Time the dir's block device spent on reads (summed)", labels=labels
    )
    write_time = CounterMetricFamily(
        "jbod_log_dir_write_seconds", "Time the dir's block device spent on writes (summed)", labels=labels
    )
    busy = CounterMetricFamily(
        "jbod_log_dir_busy_seconds", "Time the dir's block device had requests in flight", labels=labels
    )
    for directory, state in agent.state.dirs.items():
        stats = block_stats.read_block_stats(state.device)
        if stats is None:
            continue
        label = [str(directory)]
        read.add_metric(label, stats.read_bytes)
        written.add_metric(label, stats.written_bytes)
        reads.add_metric(label, stats.reads)
        writes.add_metric(label, stats.writes)
        read_time.add_metric(label, stats.read_ms / 1000)
        write_time.add_metric(label, stats.write_ms / 1000)
        busy.add_metric(label, stats.busy_ms / 1000)
    yield from (read, written, reads, writes, read_time, write_time, busy)


class AgentApi:
    def __init__(self, agent: Agent, tokens: tuple[str, ...]) -> None:
        self.agent = agent
        self.tokens = tokens
        self.config = agent.state.config
        self.limits = limits(agent.state.config)
        self.registry = CollectorRegistry()
        self.probe_seconds = Histogram(
            "jbod_disk_probe_seconds",
            "Time of one disk health probe",
            ["directory_id"],
            registry=self.registry,
            buckets=_PROBE_BUCKETS,
        )
        self.flush_seconds = Histogram(
            "jbod_log_dir_flush_seconds",
            "Time of one log flush (fsync of a log's appends) in the log dir",
            ["directory_id"],
            registry=self.registry,
            buckets=_PROBE_BUCKETS,
        )
        self.registry.register(_AgentCollector(agent))
        agent.monitor.on_probe.append(self._observe_probe)
        agent.monitor.on_flush.append(self._observe_flush)

    def runner(self, *, shutdown_timeout: float) -> web.AppRunner:
        """The app under the configured connection limits, ready for `web.TCPSite`."""
        return http_server.LimitedAppRunner(
            self.app(), limits=self.limits, logger=log, shutdown_timeout=shutdown_timeout
        )

    async def _body(self, request: web.Request, limit: int) -> bytes:
        return await http_server.read_body(request, limit=limit, timeout_s=self.limits.read_timeout_s)

    async def _parse(self, request: web.Request, model: type[M], *, limit: int) -> M:
        body = await self._body(request, limit)
        try:
            return model.model_validate_json(body)
        except ValidationError as exc:
            raise BadRequestError(validation_message(exc)) from exc

    def _observe_probe(self, directory: Uuid, result: probe.ProbeResult) -> None:
        self.probe_seconds.labels(directory_id=str(directory)).observe(result.seconds)

    def _observe_flush(self, directory: Uuid, seconds: float) -> None:
        self.flush_seconds.labels(directory_id=str(directory)).observe(seconds)

    def _authorized(self, request: web.Request) -> bool:
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            return False
        given = presented.strip().encode("utf-8", "surrogatepass")
        return any(hmac.compare_digest(given, t.encode("utf-8")) for t in self.tokens)

    def _guarded(self, handler: Handler) -> Handler:
        async def wrapped(request: web.Request) -> web.StreamResponse:
            if not self._authorized(request):
                return _json(
                    {
                        "errorCode": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                        "errorMessage": "Missing or wrong token",
                    },
                    401,
                )
            try:
                return await handler(request)
            except BadRequestError as exc:
                return _bad(str(exc))
            except http_server.BodyTooLargeError as exc:
                return _json({"errorCode": int(ErrorCode.INVALID_REQUEST), "errorMessage": str(exc)}, 413)
            except http_server.BodyTimeoutError as exc:
                response = _json({"errorCode": int(ErrorCode.INVALID_REQUEST), "errorMessage": str(exc)}, 408)
                response.force_close()
                return response

        return wrapped

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.socket_request_max_bytes)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/log-dirs", self._guarded(self.log_dirs))
        # Client metadata from this broker's replicated image (a contract extension: clients
        # bootstrap from brokers and keep working while no controller answers).
        app.router.add_get("/v1/topics", self._guarded(self.list_topics))
        app.router.add_get("/v1/topics/{name}", self._guarded(self.describe_topic))
        app.router.add_get("/v1/brokers", self._guarded(self.list_brokers))
        app.router.add_get("/v1/brokers/{id}", self._guarded(self.describe_broker))
        app.router.add_post("/v1/log-dirs/move", self._guarded(self.move))
        return app

    async def healthz(self, request: web.Request) -> web.Response:
        return _json({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        agent = self.agent
        ready = agent.state.serves_clients()
        body = {
            "registered": agent.state.registered,
            "fenced": agent.state.fenced,
            "brokerEpoch": agent.state.epoch,
            "servesClients": ready,
        }
        return _json(body, 200 if ready else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def list_topics(self, request: web.Request) -> web.Response:
        return _json(core_views.describe_topics(self.agent.state.image))

    async def describe_topic(self, request: web.Request) -> web.Response:
        image = self.agent.state.image
        name = request.match_info["name"]
        topic_id = image.topic_ids_by_name.get(name)
        if topic_id is None:
            return _error(404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unknown topic '{name}'")
        return _json(core_views.describe_topic(image, image.topics[topic_id]))

    async def list_brokers(self, request: web.Request) -> web.Response:
        return _json(core_views.describe_brokers(self.agent.state.image))

    async def describe_broker(self, request: web.Request) -> web.Response:
        try:
            broker_id = core_views.parse_broker_id(request.match_info["id"])
        except ValueError as exc:
            raise BadRequestError(str(exc)) from None
        image = self.agent.state.image
        reg = image.brokers.get(broker_id)
        if reg is None:
            return _error(404, ErrorCode.BROKER_ID_NOT_REGISTERED, f"Broker {broker_id} is not registered")
        return _json(core_views.describe_broker(image, reg))

    async def log_dirs(self, request: web.Request) -> web.Response:
        return _json(
            views.log_dirs_view(self.agent.state, self.agent.mover, self.agent.log_cleaning.cleaners)
        )

    async def move(self, request: web.Request) -> web.Response:
        move = await self._parse(request, MoveReplicaRequest, limit=SMALL_BODY_BYTES)
        return _json(self.agent.mover.request_move(move))
