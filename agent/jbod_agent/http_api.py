"""The broker's own HTTP API (protocol §4.4, §4.5): log dirs, probes, metrics.

Guarantees: `/healthz`, `/readyz` and `/metrics` need no token; everything else accepts the
cluster or the admin token (401 + 31 otherwise); `/readyz` is 200 only while the broker is
registered and unfenced. Metrics are computed from the agent's state when scraped.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterator

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from jbod_agent import probe
from jbod_agent.agent import Agent
from jbod_agent.placement import DirHealth
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_PROBE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def _json(body: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


class _AgentCollector(Collector):
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self) -> Iterator[GaugeMetricFamily]:
        agent = self.agent
        yield GaugeMetricFamily(
            "jbod_queued_replica_to_dir_assignments",
            "Placements queued or in flight to the controller (AssignReplicasToDirs)",
            value=agent.queue.size,
        )
        offline = [s for s in agent.dirs.values() if s.health is DirHealth.OFFLINE]
        yield GaugeMetricFamily(
            "jbod_offline_log_directory_count",
            "Configured log dirs that are offline",
            value=len(offline) + len(agent.startup_offline),
        )
        yield GaugeMetricFamily(
            "jbod_offline_replica_count",
            "Replicas hosted in offline log dirs",
            value=agent.offline_replica_count(),
        )
        per_dir = GaugeMetricFamily(
            "jbod_log_directory_offline", "1 if the log dir is offline", labels=["directory_id", "path"]
        )
        full = GaugeMetricFamily(
            "jbod_log_directory_full", "1 if the log dir is full", labels=["directory_id", "path"]
        )
        usable = GaugeMetricFamily(
            "jbod_log_dir_usable_bytes", "Usable bytes in the log dir (last probe)", labels=["directory_id"]
        )
        for directory, state in agent.dirs.items():
            per_dir.add_metric(
                [str(directory), str(state.path)], 1 if state.health is DirHealth.OFFLINE else 0
            )
            full.add_metric([str(directory), str(state.path)], 1 if state.health is DirHealth.FULL else 0)
            usable.add_metric([str(directory)], state.usable_bytes)
        for path, _reason in agent.startup_offline:
            per_dir.add_metric(["", str(path)], 1)
        yield per_dir
        yield full
        yield usable


class AgentApi:
    def __init__(self, agent: Agent, tokens: tuple[str, ...]) -> None:
        self.agent = agent
        self.tokens = tokens
        self.registry = CollectorRegistry()
        self.probe_seconds = Histogram(
            "jbod_disk_probe_seconds",
            "Time of one disk health probe",
            ["directory_id"],
            registry=self.registry,
            buckets=_PROBE_BUCKETS,
        )
        self.registry.register(_AgentCollector(agent))
        agent.on_probe.append(self._observe_probe)

    def _observe_probe(self, directory: Uuid, result: probe.ProbeResult) -> None:
        self.probe_seconds.labels(directory_id=str(directory)).observe(result.seconds)

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
            return await handler(request)

        return wrapped

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/log-dirs", self._guarded(self.log_dirs))
        return app

    async def healthz(self, request: web.Request) -> web.Response:
        return _json({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        agent = self.agent
        ready = agent.registered and not agent.fenced
        body = {"registered": agent.registered, "fenced": agent.fenced, "brokerEpoch": agent.epoch}
        return _json(body, 200 if ready else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def log_dirs(self, request: web.Request) -> web.Response:
        return _json(self.agent.log_dirs_view())
