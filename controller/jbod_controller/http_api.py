"""The controller's HTTP API (protocol §2, §3): routing, authentication, validation, replies.

Guarantees:
* Every endpoint but `/healthz`, `/readyz` and `/metrics` needs a bearer token: the cluster token
  (or the admin token) for broker calls, the admin token for everything else; tokens are
  compared in constant time; a missing or wrong token gets HTTP 401 and errorCode 31.
* A body that is not JSON or does not fit the schema gets HTTP 400, errorCode 42 and a message
  naming the field; nothing is decided or written. No input yields HTTP 500: an unexpected
  failure is logged and answered 500 only for a server bug, never for a request's content.
* Protocol outcomes are HTTP 200 with `errorCode` (and `errorMessage` when not 0).
* Reads (`GET`) are answered from the image without waiting for the writer.
* In a controller quorum (§3.8) a controller that is not the active one answers every write
  with HTTP 200, errorCode 41 and `activeController` (null while none is known) and changes
  nothing; a write whose controller was deposed while it waited gets the same answer.
* Bounded work per request (docs/operations.md, "Limits"): every endpoint has a body limit derived
  from the largest valid request (`BODY_LIMITS`); a larger body is refused with HTTP 413 and
  errorCode 42 from its Content-Length, before it is read, or as soon as the bytes read pass the
  limit, and never parsed. Bodies over `PARSE_INLINE_BYTES` are parsed on one worker thread, so a
  large bad body cannot stall heartbeats on the event loop.
* Connections obey `CONNECTION_LIMITS` (`jbod_runtime.http_server.LimitedAppRunner`): idle and read
  timeouts, and parser refusals answered 400/42 without echoing or logging the request.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError

from jbod_controller.metrics import ControllerMetrics
from jbod_controller.record_log import NotActiveError, log_divergence, page_checksum
from jbod_controller.service import ControllerService
from jbod_core import acls, frames, quota_messages, reassignment, scram, views
from jbod_core.errors import ErrorCode
from jbod_core.messages import (
    MAX_ACLS_PER_REQUEST,
    MAX_PARTITIONS_PER_REQUEST,
    AclFilterModel,
    AllocateProducerIdsRequest,
    AlterBrokerConfigsRequest,
    AlterPartitionRequest,
    AlterReassignmentsRequest,
    AlterScramCredentialsRequest,
    AlterTopicConfigsRequest,
    AssignReplicasToDirsRequest,
    BrokerHeartbeatRequest,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    DeleteAclsRequest,
    ElectLeadersRequest,
    Message,
    RegisterBrokerRequest,
    validation_message,
)
from jbod_core.quota_messages import AlterClientQuotasRequest
from jbod_runtime import http_server

log = logging.getLogger("jbod_controller.http")

M = TypeVar("M", bound=Message)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Body limits per endpoint, from the largest request the contract allows plus room for
# whitespace: broker calls listing partitions name at most 10,000 of them (§2), and one
# partition entry is ~100 bytes of compact JSON in the worst layout (its own directory and topic
# entry) — 256 bytes leave room for pretty-printed JSON; an alter-partition entry also carries
# its new ISR. Registrations and heartbeats list a broker's directories only (1 MiB is ~40,000).
# The admin extensions (docs/api.md): a config change or a SCRAM change names a few keys or users
# (1 MiB is thousands), an added-partitions assignment at most 10,000 partitions like a create, a
# producer-id request two numbers; a reassignment at most 10,000 partitions with their targets.
BROKER_BODY_BYTES = 1024 * 1024
PARTITION_BODY_BYTES = MAX_PARTITIONS_PER_REQUEST * 256 + 64 * 1024
ADMIN_BODY_BYTES = 1024 * 1024
SMALL_BODY_BYTES = 64 * 1024
# CreateAcls / DeleteAcls: at most 10,000 ACLs or filters of ~200 bytes (a long principal or
# resource name may take more; 512 bytes each leave room for pretty-printed JSON).
ACL_BODY_BYTES = MAX_ACLS_PER_REQUEST * 512 + 64 * 1024
BODY_LIMITS: dict[str, int] = {
    "register": BROKER_BODY_BYTES,
    "heartbeat": BROKER_BODY_BYTES,
    "assignments": PARTITION_BODY_BYTES,
    "alter-partition": 2 * PARTITION_BODY_BYTES,
    "create-topic": PARTITION_BODY_BYTES,
    "alter-configs": ADMIN_BODY_BYTES,
    "alter-broker-configs": ADMIN_BODY_BYTES,
    "create-partitions": PARTITION_BODY_BYTES,
    "alter-reassignments": PARTITION_BODY_BYTES,
    "elect-leaders": PARTITION_BODY_BYTES,
    "alter-scram-credentials": ADMIN_BODY_BYTES,
    "alter-client-quotas": ADMIN_BODY_BYTES,
    "create-acls": ACL_BODY_BYTES,
    "delete-acls": ACL_BODY_BYTES,
    "allocate-producer-ids": SMALL_BODY_BYTES,
}
MAX_BODY_BYTES = max(BODY_LIMITS.values())
# Bodies up to this size are parsed on the event loop (well under a millisecond); larger ones on
# the parse thread.
PARSE_INLINE_BYTES = 64 * 1024
# Kafka's connections.max.idle.ms default (600000); a request's headers and body within 30 s.
CONNECTION_LIMITS = http_server.ConnectionLimits(idle_timeout_s=600.0, read_timeout_s=30.0)
MAX_WAIT_MS = 60_000
MAX_RECORDS = 100_000
DEFAULT_MAX_RECORDS = 10_000


@dataclass(frozen=True, slots=True)
class Tokens:
    cluster: str
    admin: str


ACL_FILTER_PARAMETERS = acls.BINDING_FIELDS


class NotServingError(Exception):
    """The controller is recovering or re-reading its log: HTTP 503 with errorCode 41."""


class ApiError(Exception):
    def __init__(self, status: int, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def json_response(body: Any, *, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def reply_response(reply: Message) -> web.Response:
    return web.Response(
        body=orjson.dumps(reply.model_dump(by_alias=True, mode="json", exclude_none=True)),
        content_type="application/json",
    )


def error_body(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"errorCode": int(code), "errorMessage": message}


def _token_matches(presented: str, expected: str) -> bool:
    # A header that is not UTF-8 arrives with surrogate escapes; "surrogatepass" never raises and
    # yields bytes that are not UTF-8, so such a token never matches.
    return hmac.compare_digest(presented.encode("utf-8", "surrogatepass"), expected.encode("utf-8"))


class ControllerApi:
    def __init__(
        self,
        service: ControllerService,
        tokens: Tokens,
        metrics: ControllerMetrics,
        *,
        limits: http_server.ConnectionLimits = CONNECTION_LIMITS,
    ) -> None:
        self.service = service
        self.tokens = tokens
        self.metrics = metrics
        self.limits = limits
        # One thread: large bodies are parsed one after another, never several at once.
        self._parse_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parse")

    def runner(self, *, shutdown_timeout: float) -> web.AppRunner:
        """The app under this API's connection limits, ready for `web.TCPSite`."""
        return http_server.LimitedAppRunner(
            self.app(), limits=self.limits, logger=log, shutdown_timeout=shutdown_timeout
        )

    # -- plumbing -----------------------------------------------------------------------------

    def _authorize(self, request: web.Request, *, cluster_call: bool) -> None:
        header = request.headers.get("Authorization", "")
        scheme, _, presented = header.partition(" ")
        presented = presented.strip()
        if scheme.lower() != "bearer" or not presented:
            raise ApiError(401, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Missing bearer token")
        admin = _token_matches(presented, self.tokens.admin)
        cluster = _token_matches(presented, self.tokens.cluster)
        if admin or (cluster_call and cluster):
            return
        raise ApiError(
            401,
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "Wrong token" if cluster_call or not cluster else "This call needs the admin token",
        )

    def _require_ready(self) -> None:
        if not self.service.ready:
            raise NotServingError()

    def _not_controller(self, message: str, *, status: int = 200) -> web.Response:
        active = self.service.active_controller()
        body = error_body(ErrorCode.NOT_CONTROLLER, message)
        body["activeController"] = active.to_json() if active is not None else None
        return json_response(body, status=status)

    async def _body(self, request: web.Request, api: str) -> bytes:
        return await http_server.read_body(
            request, limit=BODY_LIMITS[api], timeout_s=self.limits.read_timeout_s
        )

    async def _parse(self, request: web.Request, api: str, model: type[M]) -> M:
        return await self._validate(await self._body(request, api), model)

    async def _validate(self, body: bytes, model: type[M]) -> M:
        try:
            if len(body) <= PARSE_INLINE_BYTES:
                return model.model_validate_json(body)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._parse_thread, model.model_validate_json, body)
        except ValidationError as exc:
            raise ApiError(400, ErrorCode.INVALID_REQUEST, validation_message(exc)) from exc

    def _timed(self, api: str, handler: Handler, *, auth: str | None) -> Handler:
        histogram = self.metrics.request_seconds.labels(api=api)

        async def wrapped(request: web.Request) -> web.StreamResponse:
            started = time.perf_counter()
            try:
                if auth is not None:
                    self._authorize(request, cluster_call=auth == "cluster")
                    self._require_ready()
                return await handler(request)
            finally:
                histogram.observe(time.perf_counter() - started)

        return wrapped

    @web.middleware
    async def _errors(  # noqa: PLR0911  the error middleware: one reply per exception class
        self, request: web.Request, handler: Handler
    ) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            return json_response(error_body(exc.code, exc.message), status=exc.status)
        except NotServingError:
            return self._not_controller("The controller is not serving yet (recovering its log)", status=503)
        except NotActiveError as exc:
            return self._not_controller(f"Not the active controller: {exc}")
        except http_server.BodyTooLargeError as exc:
            return json_response(error_body(ErrorCode.INVALID_REQUEST, str(exc)), status=413)
        except http_server.BodyTimeoutError as exc:
            response = json_response(error_body(ErrorCode.INVALID_REQUEST, str(exc)), status=408)
            response.force_close()
            return response
        except web.HTTPRequestEntityTooLarge:
            return json_response(
                error_body(ErrorCode.INVALID_REQUEST, f"Request body is larger than {MAX_BODY_BYTES} bytes"),
                status=413,
            )
        except web.HTTPException as exc:
            if exc.status >= 400:
                return json_response(
                    error_body(ErrorCode.INVALID_REQUEST, f"{exc.reason}: {request.method} {request.path}"),
                    status=exc.status,
                )
            raise
        except Exception:
            log.exception("Failed serving %s %s", request.method, request.path)
            return json_response(
                error_body(ErrorCode.INVALID_REQUEST, "Internal error; see the controller log"), status=500
            )

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._errors])
        r = app.router
        r.add_get("/healthz", self.healthz)
        r.add_get("/readyz", self.readyz)
        r.add_get("/metrics", self.metrics_endpoint)
        r.add_post("/v1/brokers/register", self._timed("register", self.register, auth="cluster"))
        r.add_post("/v1/brokers/heartbeat", self._timed("heartbeat", self.heartbeat, auth="cluster"))
        r.add_post("/v1/assignments", self._timed("assignments", self.assignments, auth="cluster"))
        r.add_post(
            "/v1/partitions/alter", self._timed("alter-partition", self.alter_partition, auth="cluster")
        )
        r.add_get("/v1/metadata", self._timed("metadata", self.metadata, auth="cluster"))
        r.add_post(
            "/v1/producer-ids",
            self._timed("allocate-producer-ids", self.allocate_producer_ids, auth="cluster"),
        )
        r.add_post("/v1/topics", self._timed("create-topic", self.create_topic, auth="admin"))
        r.add_get("/v1/topics", self._timed("list-topics", self.list_topics, auth="admin"))
        r.add_get("/v1/topics/{name}", self._timed("describe-topic", self.describe_topic, auth="admin"))
        r.add_delete("/v1/topics/{name}", self._timed("delete-topic", self.delete_topic, auth="admin"))
        r.add_post(
            "/v1/topics/{name}/configs", self._timed("alter-configs", self.alter_topic_configs, auth="admin")
        )
        r.add_post(
            "/v1/topics/{name}/partitions",
            self._timed("create-partitions", self.create_partitions, auth="admin"),
        )
        r.add_post(
            "/v1/reassignments",
            self._timed("alter-reassignments", self.alter_reassignments, auth="admin"),
        )
        r.add_post("/v1/elect-leaders", self._timed("elect-leaders", self.elect_leaders, auth="admin"))
        r.add_get(
            "/v1/reassignments",
            self._timed("list-reassignments", self.list_reassignments, auth="admin"),
        )
        r.add_post(
            "/v1/scram-credentials",
            self._timed("alter-scram-credentials", self.alter_scram_credentials, auth="admin"),
        )
        r.add_get(
            "/v1/scram-credentials",
            self._timed("describe-scram-credentials", self.describe_scram_credentials, auth="admin"),
        )
        r.add_post(
            "/v1/client-quotas", self._timed("alter-client-quotas", self.alter_client_quotas, auth="admin")
        )
        r.add_get(
            "/v1/client-quotas",
            self._timed("describe-client-quotas", self.describe_client_quotas, auth="admin"),
        )
        r.add_post("/v1/acls", self._timed("create-acls", self.create_acls, auth="admin"))
        r.add_post("/v1/acls/delete", self._timed("delete-acls", self.delete_acls, auth="admin"))
        r.add_get("/v1/acls", self._timed("describe-acls", self.describe_acls, auth="admin"))
        r.add_get("/v1/brokers", self._timed("list-brokers", self.list_brokers, auth="admin"))
        r.add_get("/v1/brokers/{id}", self._timed("describe-broker", self.describe_broker, auth="admin"))
        r.add_delete("/v1/brokers/{id}", self._timed("unregister", self.unregister, auth="admin"))
        r.add_post(
            "/v1/brokers/{id}/configs",
            self._timed("alter-broker-configs", self.alter_broker_configs, auth="admin"),
        )
        r.add_get("/v1/cluster", self._timed("cluster", self.cluster, auth="admin"))
        return app

    # -- probes -------------------------------------------------------------------------------

    async def healthz(self, request: web.Request) -> web.Response:
        return json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        if self.service.ready:
            return json_response(
                {"status": "ready", "metadataEndOffset": self.service.record_log.committed_offset}
            )
        return json_response({"status": "recovering"}, status=503)

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    # -- broker calls -------------------------------------------------------------------------

    async def register(self, request: web.Request) -> web.Response:
        parsed = await self._parse(request, "register", RegisterBrokerRequest)
        return reply_response(await self.service.register_broker(parsed))

    async def heartbeat(self, request: web.Request) -> web.Response:
        parsed = await self._parse(request, "heartbeat", BrokerHeartbeatRequest)
        return reply_response(await self.service.broker_heartbeat(parsed))

    async def assignments(self, request: web.Request) -> web.Response:
        parsed = await self._parse(request, "assignments", AssignReplicasToDirsRequest)
        return reply_response(await self.service.assign_replicas_to_dirs(parsed))

    async def alter_partition(self, request: web.Request) -> web.Response:
        parsed = await self._parse(request, "alter-partition", AlterPartitionRequest)
        return reply_response(await self.service.alter_partition(parsed))

    async def allocate_producer_ids(self, request: web.Request) -> web.Response:
        parsed = await self._parse(request, "allocate-producer-ids", AllocateProducerIdsRequest)
        return reply_response(await self.service.allocate_producer_ids(parsed))

    @staticmethod
    def _query_int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
        raw = request.query.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ApiError(
                400, ErrorCode.INVALID_REQUEST, f"{name}: must be an integer, got {raw!r}"
            ) from None
        if not low <= value <= high:
            raise ApiError(
                400, ErrorCode.INVALID_REQUEST, f"{name}: must be between {low} and {high}, got {value}"
            )
        return value

    async def metadata(self, request: web.Request) -> web.Response:
        from_offset = self._query_int(request, "fromOffset", 0, 0, 2**63 - 1)
        max_wait_ms = self._query_int(request, "maxWaitMs", 0, 0, MAX_WAIT_MS)
        max_records = self._query_int(request, "maxRecords", DEFAULT_MAX_RECORDS, 1, MAX_RECORDS)
        last_checksum = self._query_int(request, "lastChecksum", -1, 0, 2**32 - 1)
        record_log = self.service.record_log
        end = record_log.committed_offset
        diverged = log_divergence(record_log, from_offset, last_checksum)
        if diverged is not None:
            return json_response(
                {
                    "errorCode": int(ErrorCode.OFFSET_OUT_OF_RANGE),
                    "errorMessage": diverged,
                    "records": [],
                    "endOffset": end,
                    "snapshot": False,
                }
            )
        parts: list[bytes] = []
        snapshot = False
        if from_offset < record_log.start_offset:
            found = self.service.snapshot_entries()
            if found is not None:
                snapshot_offset, entries = found
                prefix = frames.log_entry_prefix(snapshot_offset - 1)
                parts.extend(prefix + entry[1:] for entry in entries)
                from_offset = snapshot_offset
                snapshot = True
        if not parts and from_offset == end and max_wait_ms > 0:
            await self.service.wait_for_commit(from_offset, max_wait_ms / 1000)
            end = record_log.committed_offset
        served = record_log.read(from_offset, max_records)
        parts.extend(served)
        end = record_log.committed_offset
        checksum = page_checksum(record_log, served, from_offset if snapshot else None)
        body = b"".join(
            [
                b'{"errorCode":0,"records":[',
                b",".join(parts),
                b'],"endOffset":%d,"snapshot":%s' % (end, b"true" if snapshot else b"false"),
                b"}" if checksum is None else b',"lastChecksum":%d}' % checksum,
            ]
        )
        return web.Response(body=body, content_type="application/json")

    # -- admin calls --------------------------------------------------------------------------

    async def create_topic(self, request: web.Request) -> web.Response:
        body = await self._body(request, "create-topic")
        try:
            raw = orjson.loads(body)
        except orjson.JSONDecodeError:
            raw = None  # the model reports the malformed body
        if isinstance(raw, dict):
            body = orjson.dumps(self._with_topic_defaults(raw))
        parsed = await self._validate(body, CreateTopicRequest)
        if parsed.replication_factor is None and parsed.replica_assignment is None:
            raise ApiError(
                400,
                ErrorCode.INVALID_REQUEST,
                "replicationFactor: required field is missing (no replicaAssignment given and no "
                "--default-replication-factor)",
            )
        return reply_response(await self.service.create_topic(parsed))

    def _with_topic_defaults(self, raw: dict[str, Any]) -> dict[str, Any]:
        """The create body with the controller's defaults filled in where the request left them out."""
        config = self.service.config
        filled = dict(raw)
        if (
            config.default_replication_factor is not None
            and raw.get("replicaAssignment") is None
            and raw.get("replicationFactor") is None
        ):
            filled["replicationFactor"] = config.default_replication_factor
        # The default min.insync.replicas is applied by `topics.create_topic` (capped at the RF).
        return filled

    def _topic(self, name: str) -> Any:
        image = self.service.image
        topic_id = image.topic_ids_by_name.get(name)
        if topic_id is None:
            raise ApiError(404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unknown topic '{name}'")
        return image.topics[topic_id]

    async def list_topics(self, request: web.Request) -> web.Response:
        return json_response(views.describe_topics(self.service.image))

    async def describe_topic(self, request: web.Request) -> web.Response:
        return json_response(
            views.describe_topic(self.service.image, self._topic(request.match_info["name"]))
        )

    async def delete_topic(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self._topic(name)
        reply = await self.service.delete_topic(name)
        if reply.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise ApiError(404, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, reply.error_message or "Unknown topic")
        return reply_response(reply)

    async def alter_topic_configs(self, request: web.Request) -> web.Response:
        parsed = await self._parse(request, "alter-configs", AlterTopicConfigsRequest)
        return reply_response(await self.service.alter_topic_configs(request.match_info["name"], parsed))

    async def alter_broker_configs(self, request: web.Request) -> web.Response:
        """`{id}` is a broker id, or `default` for the cluster-wide default (Kafka's `<default>`)."""
        parsed = await self._parse(request, "alter-broker-configs", AlterBrokerConfigsRequest)
        broker = request.match_info["id"]
        return reply_response(
            await self.service.alter_broker_configs("" if broker == "default" else broker, parsed)
        )

    async def create_partitions(self, request: web.Request) -> web.Response:
        parsed = await self._parse(request, "create-partitions", CreatePartitionsRequest)
        return reply_response(await self.service.create_partitions(request.match_info["name"], parsed))

    async def alter_reassignments(self, request: web.Request) -> web.Response:
        parsed = await self._parse(request, "alter-reassignments", AlterReassignmentsRequest)
        return reply_response(await self.service.alter_reassignments(parsed))

    async def elect_leaders(self, request: web.Request) -> web.Response:
        parsed = await self._parse(request, "elect-leaders", ElectLeadersRequest)
        return reply_response(await self.service.elect_leaders(parsed))

    async def list_reassignments(self, request: web.Request) -> web.Response:
        return reply_response(reassignment.list_reassignments(self.service.image))

    async def alter_scram_credentials(self, request: web.Request) -> web.Response:
        parsed = await self._parse(request, "alter-scram-credentials", AlterScramCredentialsRequest)
        return reply_response(await self.service.alter_scram_credentials(parsed))

    async def describe_scram_credentials(self, request: web.Request) -> web.Response:
        results = scram.describe_credentials(self.service.image, request.query.getall("user", []))
        return json_response([r.model_dump(by_alias=True, mode="json", exclude_none=True) for r in results])

    async def alter_client_quotas(self, request: web.Request) -> web.Response:
        parsed = await self._parse(request, "alter-client-quotas", AlterClientQuotasRequest)
        return json_response((await self.service.alter_client_quotas(parsed)).to_wire())

    async def describe_client_quotas(self, request: web.Request) -> web.Response:
        return json_response(quota_messages.describe_all(self.service.image.client_quotas).to_wire())

    async def create_acls(self, request: web.Request) -> web.Response:
        parsed = await self._parse(request, "create-acls", CreateAclsRequest)
        return json_response((await self.service.create_acls(parsed)).to_wire())

    async def delete_acls(self, request: web.Request) -> web.Response:
        parsed = await self._parse(request, "delete-acls", DeleteAclsRequest)
        return json_response((await self.service.delete_acls(parsed)).to_wire())

    async def describe_acls(self, request: web.Request) -> web.Response:
        """`GET /v1/acls`: the filter from the query (every parameter optional)."""
        fields = {name: request.query[name] for name in ACL_FILTER_PARAMETERS if name in request.query}
        try:
            acl_filter = AclFilterModel.model_validate(fields)
        except ValidationError as exc:
            raise ApiError(400, ErrorCode.INVALID_REQUEST, validation_message(exc)) from exc
        return json_response(acls.describe_acls_reply(self.service.image.acls, acl_filter).to_wire())

    @staticmethod
    def _broker_id(request: web.Request) -> int:
        try:
            return views.parse_broker_id(request.match_info["id"])
        except ValueError as exc:
            raise ApiError(400, ErrorCode.INVALID_REQUEST, str(exc)) from None

    async def list_brokers(self, request: web.Request) -> web.Response:
        return json_response(views.describe_brokers(self.service.image))

    async def describe_broker(self, request: web.Request) -> web.Response:
        broker_id = self._broker_id(request)
        reg = self.service.image.brokers.get(broker_id)
        if reg is None:
            raise ApiError(404, ErrorCode.BROKER_ID_NOT_REGISTERED, f"Broker {broker_id} is not registered")
        return json_response(views.describe_broker(self.service.image, reg))

    async def unregister(self, request: web.Request) -> web.Response:
        broker_id = self._broker_id(request)
        reply = await self.service.unregister_broker(broker_id)
        if reply.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED:
            raise ApiError(404, ErrorCode.BROKER_ID_NOT_REGISTERED, reply.error_message or "Unknown broker")
        return reply_response(reply)

    async def cluster(self, request: web.Request) -> web.Response:
        described = views.describe_cluster(
            self.service.image,
            cluster_id=self.service.config.cluster_id,
            metadata_end_offset=self.service.record_log.committed_offset,
        )
        if self.service.quorum is not None:  # §3.8: only a quorum names its controllers
            active = self.service.active_controller()
            described["activeController"] = active.to_json() if active is not None else None
            described["controllers"] = self.service.controllers()
        return json_response(described)
