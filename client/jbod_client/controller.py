"""Typed HTTP links to the metadata controller (protocol §3): `ControllerClient` (blocking, for
`jbodctl`, the operator and the local supervisor) and `ControllerLink` (asyncio, for the broker
agent).

Guarantees:
* Requests are built from the shared wire models (`jbod_core.messages`), so no caller can send a
  body the controller's schema would reject for its shape; in both links the replies of the
  broker calls and of the admin extensions (config changes, CreatePartitions, SCRAM credentials,
  producer ids: docs/api.md) are validated into the reply models (`RegisterBrokerReply`,
  `AlterTopicConfigsReply`, …).
* Transport failures (refused, timeout, DNS) raise `ControllerUnreachableError` with one line naming
  the URL; HTTP errors that carry the contract's `{errorCode, errorMessage}` raise `ApiError`; a
  body that is not JSON, or a reply that does not fit its model, raises `ClientError`. Both links
  map errors through the same two functions (`transport_error`, `decode_answer`).
  Protocol outcomes (HTTP 200 with a non-zero `errorCode`) are returned, not raised: callers
  decide what a code means for them — except errorCode 41 (NOT_CONTROLLER), which the links
  handle themselves (below).
* Several controllers (contract §3.8): both links take a list of controller URLs — a sequence, or
  one string with commas (`parse_controller_urls`: `"http://a:9093,http://b:9093"`). One policy,
  `Failover`, decides for both links where each attempt of a call goes:
  - a transport failure moves to the next URL and retries; once every known URL failed in a row
    the call raises `ControllerUnreachableError` (with one URL: the very error it raised before
    there were several, at once);
  - a reply with errorCode 41 (HTTP 200 from a standby, or HTTP 503 from a controller that is
    not ready) that names `activeController.url` sends the retry there (the URL is added to the
    list if it is new); with `activeController: null` the retry goes to the next URL after a
    short backoff (100 to 200 ms);
  - no attempt starts after the call's deadline (`failover_timeout`, default 15 s, from the
    call's start); a call that met errorCode 41 then raises `ApiError` (errorCode 41, the
    controller's message), one that met only transport failures `ControllerUnreachableError`;
  - the URL that last answered is sticky: the next call starts there;
  - a `map_url` given to `ControllerClient` is applied to every URL it dials, the listed ones
    and those learnt from errorCode 41 replies alike (an operator outside the cluster maps the
    controllers' advertised names to addresses it can reach).
* Retrying is safe for every call the links make, because a write may be retried after an
  unknown outcome (a lost reply, a controller that died after committing): the controller's
  decisions for register (same incarnation), heartbeat, assignments and alter-partition are
  idempotent (a repeat leaves the same state, at worst answering an error code the caller already
  handles for a stale request, such as 108 for an ISR change already applied); a create-topic retried after a lost reply may answer 36 (topic already exists), a
  delete 3 (unknown topic) or an unregister 102 (not registered). Of the admin extensions, a
  config change and a SCRAM upsertion are idempotent; a retried CreatePartitions may answer 37
  (not an increase), a SCRAM deletion 91 (no such credential); a retried producer-id allocation
  gets a fresh block (the lost one is never handed out again). Only 41 replies and transport
  failures are retried; the controller changed nothing when it answered 41.
* `GET /v1/metadata` long polls keep their longer read timeout on every attempt.
* https (issue 25): `ca_file` is the PEM CA bundle https controllers are verified against, with
  their host name (None: the system's CAs); a `ClientTls` given as `tls` instead (the agent's:
  its truststore, and its keystore as client certificate) is refreshed before each request, so a
  renewed truststore is used for new connections without a restart.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import quote

import httpx
import orjson
from pydantic import ValidationError

from jbod_core.errors import ErrorCode
from jbod_core.messages import (
    AllocateProducerIdsReply,
    AllocateProducerIdsRequest,
    AlterBrokerConfigsReply,
    AlterBrokerConfigsRequest,
    AlterPartitionReply,
    AlterPartitionRequest,
    AlterReassignmentsReply,
    AlterReassignmentsRequest,
    AlterScramCredentialsReply,
    AlterScramCredentialsRequest,
    AlterTopicConfigsReply,
    AlterTopicConfigsRequest,
    AssignReplicasToDirsReply,
    AssignReplicasToDirsRequest,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    CreateAclsReply,
    CreateAclsRequest,
    CreatePartitionsReply,
    CreatePartitionsRequest,
    CreateTopicRequest,
    DeleteAclsReply,
    DeleteAclsRequest,
    DescribeAclsReply,
    DescribeScramCredentialsResult,
    ElectLeadersReply,
    ElectLeadersRequest,
    ListReassignmentsReply,
    Message,
    RegisterBrokerReply,
    RegisterBrokerRequest,
    validation_message,
)
from jbod_core.quota_messages import (
    AlterClientQuotasReply,
    AlterClientQuotasRequest,
    DescribeClientQuotasReply,
)
from jbod_runtime.tls import ClientTls, client_context

DEFAULT_URL = "http://127.0.0.1:9093"
DEFAULT_FAILOVER_TIMEOUT: Final = 15.0
# Waits before retrying after a 41 that names no (new) active controller: the first, then every later.
FAILOVER_BACKOFF: Final = (0.1, 0.2)


class ClientError(Exception):
    """A failure to get an answer; `str()` is one line for a user."""


class ControllerUnreachableError(ClientError):
    pass


class ApiError(ClientError):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(f"{message} (HTTP {status}, errorCode {code})")
        self.status = status
        self.code = code
        self.message = message


def read_token(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ClientError(f"cannot read token file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ClientError(f"cannot read token file {path}: not UTF-8 text") from exc
    if not token:
        raise ClientError(f"token file {path} is empty")
    return token


def parse_controller_urls(text: str | Sequence[str]) -> list[str]:
    """Controller URLs from a comma-separated string (or a sequence of such strings): each one
    stripped, without a trailing '/', empties and repeats dropped. `ValueError` if none is left."""
    items = text.split(",") if isinstance(text, str) else [part for t in text for part in t.split(",")]
    urls: list[str] = []
    for item in items:
        url = item.strip().rstrip("/")
        if url and url not in urls:
            urls.append(url)
    if not urls:
        raise ValueError(f"no controller URL in {text!r}: expected URL[,URL...]")
    return urls


class ControllerEndpoints:
    """The controller URLs a link knows, and the one its next call starts at (sticky); `map_url`
    turns each URL, listed or learnt, into the one to dial (identity by default)."""

    def __init__(self, urls: str | Sequence[str], *, map_url: Callable[[str], str] | None = None) -> None:
        self.map_url: Callable[[str], str] = map_url or _same_url
        self.urls = list(dict.fromkeys(self.map_url(url) for url in parse_controller_urls(urls)))
        self.current = 0

    @property
    def url(self) -> str:
        return self.urls[self.current]

    def use(self, url: str) -> None:
        """Start the next call at `url` (learnt from a 41 reply if it is not listed yet)."""
        if url not in self.urls:
            self.urls.append(url)
        self.current = self.urls.index(url)

    def after(self, url: str) -> str:
        return self.urls[(self.urls.index(url) + 1) % len(self.urls)]

    def failover(self, method: str, path: str, *, timeout: float, now: float) -> Failover:
        return Failover(self, method, path, deadline=now + timeout)


@dataclass(frozen=True, slots=True)
class Retry:
    """Send the call again to `Failover.url`, after `delay` seconds."""

    delay: float


class Failover:
    """Where the attempts of one call go (contract §3.8): the one retry policy of both links.

    Pure bookkeeping, no I/O: a link sends to `url`, then reports the outcome to `answered` (the
    decoded answer, or `Retry`) or `failed` (`Retry`, or the error to raise). The clock is
    passed in, so the policy reads no time itself.
    """

    def __init__(self, endpoints: ControllerEndpoints, method: str, path: str, *, deadline: float) -> None:
        self._endpoints = endpoints
        self._method = method
        self._path = path
        self._deadline = deadline
        self.url = endpoints.url
        self._tried: list[str] = []
        self._not_controller_seen: tuple[int, str] | None = None  # the last 41: HTTP status, message
        self._unreachable_in_row = 0
        self._followed: set[str] = set()
        self._waits = 0

    def answered(self, status: int, content: bytes, *, now: float) -> Any:
        """The answer's JSON (or the error it stands for), or `Retry` after an errorCode 41."""
        data = _json(content)
        if isinstance(data, dict) and data.get("errorCode") == ErrorCode.NOT_CONTROLLER:
            return self._not_controller(status, data, now)
        self._endpoints.use(self.url)
        return _decode(status, data, self.url, self._method, self._path)

    def failed(self, exc: httpx.HTTPError, *, now: float) -> Retry:
        """`Retry` at the next URL, or raise once every URL failed in a row or time is up."""
        error = transport_error(exc, self.url, self._method, self._path)
        error.__cause__ = exc
        self._tried.append(self.url)
        self._unreachable_in_row += 1
        self._move(self._endpoints.after(self.url))
        if self._unreachable_in_row < len(self._endpoints.urls) and now < self._deadline:
            return Retry(0.0)
        if self._not_controller_seen is not None and self._unreachable_in_row < len(self._endpoints.urls):
            raise self._gave_up(*self._not_controller_seen)
        if len(self._tried) == 1:
            raise error
        raise ControllerUnreachableError(
            f"no controller answered {self._method} {self._path} (tried {self._tried_text()}): {error}"
        ) from error

    def _not_controller(self, status: int, data: dict[str, Any], now: float) -> Retry:
        self._tried.append(self.url)
        self._unreachable_in_row = 0
        self._not_controller_seen = (status, str(data.get("errorMessage") or "not the active controller"))
        if now >= self._deadline:
            raise self._gave_up(*self._not_controller_seen)
        active = _active_url(data)
        if active is not None:
            active = self._endpoints.map_url(active)
        if active is not None and active != self.url and active not in self._followed:
            self._followed.add(active)
            self._move(active)
            return Retry(0.0)
        self._move(active if active is not None and active != self.url else self._endpoints.after(self.url))
        delay = FAILOVER_BACKOFF[min(self._waits, len(FAILOVER_BACKOFF) - 1)]
        self._waits += 1
        return Retry(min(delay, self._deadline - now))

    def _gave_up(self, status: int, message: str) -> ApiError:
        """The error of a call that found no active controller before its deadline."""
        return ApiError(
            status,
            int(ErrorCode.NOT_CONTROLLER),
            f"{message} (no active controller answered {self._method} {self._path} in time; "
            f"tried {self._tried_text()})",
        )

    def _move(self, url: str) -> None:
        self._endpoints.use(url)
        self.url = url

    def _tried_text(self) -> str:
        return ", ".join(dict.fromkeys(self._tried))


def client_tls(ca_file: Path | None, tls: ClientTls | None) -> ClientTls | None:
    """The TLS of a link: `tls` as given, else one verifying against `ca_file`, else None (the
    system's CAs)."""
    if tls is not None:
        return tls
    if ca_file is None:
        return None
    try:
        return ClientTls(ca_file)
    except ValueError as exc:  # TlsConfigError: the file names itself
        raise ClientError(str(exc)) from None


def https_verify(ca_file: Path | None) -> ssl.SSLContext | bool:
    """httpx's `verify` for https servers signed by `ca_file` (True: the system's CAs)."""
    if ca_file is None:
        return True
    try:
        return client_context(ca_file)
    except ValueError as exc:  # TlsConfigError: the file names itself
        raise ClientError(str(exc)) from None


def _same_url(url: str) -> str:
    return url


def _active_url(data: Mapping[str, Any]) -> str | None:
    """`activeController.url` of a 41 reply, normalized; None when absent or not a URL."""
    active = data.get("activeController")
    url = active.get("url") if isinstance(active, dict) else None
    if not isinstance(url, str) or not url.strip().startswith(("http://", "https://")):
        return None
    return url.strip().rstrip("/")


class _ControllerList:
    """What both links show of the controllers they follow."""

    _endpoints: ControllerEndpoints

    @property
    def url(self) -> str:
        """The controller the next call goes to first (the last one that answered)."""
        return self._endpoints.url

    @property
    def urls(self) -> list[str]:
        return list(self._endpoints.urls)


class ControllerClient(_ControllerList):
    """Blocking link to the controller(s): `url` is one URL, a comma-separated list, or a sequence
    of URLs; calls follow the active controller (module docstring)."""

    def __init__(  # noqa: PLR0913 - the URLs, then keyword-only settings
        self,
        url: str | Sequence[str] = DEFAULT_URL,
        *,
        token: str,
        timeout: float = 30.0,
        failover_timeout: float = DEFAULT_FAILOVER_TIMEOUT,
        map_url: Callable[[str], str] | None = None,
        ca_file: Path | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        self._endpoints = ControllerEndpoints(url, map_url=map_url)
        self._failover_timeout = failover_timeout
        self._tls = client_tls(ca_file, tls)
        self._http = httpx.Client(
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            trust_env=False,
            verify=self._tls.context if self._tls is not None else True,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ControllerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -----------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        *,
        body: Message | Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        payload = body.to_wire() if isinstance(body, Message) else body
        failover = self._endpoints.failover(
            method, path, timeout=self._failover_timeout, now=time.monotonic()
        )
        while True:
            if self._tls is not None:
                self._tls.refresh()
            try:
                response = self._http.request(
                    method,
                    failover.url + path,
                    json=payload,
                    params=params,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.HTTPError as exc:
                outcome = failover.failed(exc, now=time.monotonic())
            else:
                outcome = failover.answered(response.status_code, response.content, now=time.monotonic())
            if not isinstance(outcome, Retry):
                return outcome
            time.sleep(outcome.delay)

    # -- broker calls -------------------------------------------------------------------------

    def _post(self, path: str, request: Message, reply_type: type[ReplyT]) -> ReplyT:
        return _reply(reply_type, self._call("POST", path, body=request), self.url, "POST", path)

    def register(self, request: RegisterBrokerRequest) -> RegisterBrokerReply:
        return self._post("/v1/brokers/register", request, RegisterBrokerReply)

    def heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply:
        return self._post("/v1/brokers/heartbeat", request, BrokerHeartbeatReply)

    def assign_replicas_to_dirs(self, request: AssignReplicasToDirsRequest) -> AssignReplicasToDirsReply:
        return self._post("/v1/assignments", request, AssignReplicasToDirsReply)

    def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionReply:
        return self._post("/v1/partitions/alter", request, AlterPartitionReply)

    def allocate_producer_ids(self, request: AllocateProducerIdsRequest) -> AllocateProducerIdsReply:
        return self._post(PRODUCER_IDS_PATH, request, AllocateProducerIdsReply)

    def metadata(
        self, *, from_offset: int, max_wait_ms: int = 0, max_records: int = 10_000
    ) -> dict[str, Any]:
        params = {"fromOffset": from_offset, "maxWaitMs": max_wait_ms, "maxRecords": max_records}
        result: dict[str, Any] = self._call(
            "GET", "/v1/metadata", params=params, timeout=max_wait_ms / 1000 + 30
        )
        return result

    def iter_metadata(self, *, from_offset: int = 0, page: int = 10_000) -> Iterator[dict[str, Any]]:
        """Every record from `from_offset` up to the end offset at the time of each page."""
        offset = from_offset
        while True:
            reply = self.metadata(from_offset=offset, max_records=page)
            if reply.get("errorCode", 0) != 0:
                raise ApiError(200, int(reply["errorCode"]), str(reply.get("errorMessage", "")))
            records: list[dict[str, Any]] = reply["records"]
            yield from records
            if records:
                offset = int(records[-1]["offset"]) + 1
            if not records or offset >= int(reply["endOffset"]):
                return

    # -- admin calls --------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        replication_factor: int | None = None,
        replica_assignment: Sequence[Sequence[int]] | None = None,
        configs: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        request = CreateTopicRequest(
            name=name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            replica_assignment=[list(r) for r in replica_assignment]
            if replica_assignment is not None
            else None,
            configs=dict(configs or {}),
        )
        result: dict[str, Any] = self._call("POST", "/v1/topics", body=request)
        return result

    def describe_topic(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/v1/topics/{_path(name)}")
        return result

    def list_topics(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/v1/topics")
        return result

    def delete_topic(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("DELETE", f"/v1/topics/{_path(name)}")
        return result

    def brokers(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/v1/brokers")
        return result

    def broker(self, broker_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/v1/brokers/{broker_id}")
        return result

    def unregister_broker(self, broker_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self._call("DELETE", f"/v1/brokers/{broker_id}")
        return result

    def cluster(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/v1/cluster")
        return result

    # -- admin extensions (docs/api.md): typed replies; protocol outcomes are returned ----------

    def alter_topic_configs(self, name: str, request: AlterTopicConfigsRequest) -> AlterTopicConfigsReply:
        return self._post(topic_configs_path(name), request, AlterTopicConfigsReply)

    def create_partitions(self, name: str, request: CreatePartitionsRequest) -> CreatePartitionsReply:
        return self._post(topic_partitions_path(name), request, CreatePartitionsReply)

    def alter_broker_configs(
        self, broker: str, request: AlterBrokerConfigsRequest
    ) -> AlterBrokerConfigsReply:
        """Dynamic configs of broker `broker` (a broker id, or "" for the cluster default)."""
        return self._post(broker_configs_path(broker), request, AlterBrokerConfigsReply)

    def alter_scram_credentials(self, request: AlterScramCredentialsRequest) -> AlterScramCredentialsReply:
        return self._post(SCRAM_CREDENTIALS_PATH, request, AlterScramCredentialsReply)

    def alter_reassignments(self, request: AlterReassignmentsRequest) -> AlterReassignmentsReply:
        return self._post(REASSIGNMENTS_PATH, request, AlterReassignmentsReply)

    def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersReply:
        return self._post(ELECT_LEADERS_PATH, request, ElectLeadersReply)

    def alter_client_quotas(self, request: AlterClientQuotasRequest) -> AlterClientQuotasReply:
        """`POST /v1/client-quotas`: Kafka's AlterClientQuotas, one result per entry."""
        return self._post(CLIENT_QUOTAS_PATH, request, AlterClientQuotasReply)

    def describe_client_quotas(self) -> DescribeClientQuotasReply:
        """`GET /v1/client-quotas`: every entity with a quota."""
        data = self._call("GET", CLIENT_QUOTAS_PATH)
        return _reply(DescribeClientQuotasReply, data, self.url, "GET", CLIENT_QUOTAS_PATH)

    def list_reassignments(self) -> ListReassignmentsReply:
        return _reply(
            ListReassignmentsReply, self._call("GET", REASSIGNMENTS_PATH), self.url, "GET", REASSIGNMENTS_PATH
        )

    def describe_scram_credentials(
        self, users: Sequence[str] | None = None
    ) -> list[DescribeScramCredentialsResult]:
        """Every named user's mechanisms and iterations (none named: every user with a credential)."""
        data = self._call("GET", SCRAM_CREDENTIALS_PATH, params={"user": list(users or ())})
        return _scram_results(data, self.url)

    # -- ACLs (docs/api.md, "ACLs"): Kafka's enum names as strings ---------------------------

    def create_acls(self, creations: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`POST /v1/acls`: one `{errorCode, errorMessage}` per creation, in order."""
        data = self._call("POST", ACLS_PATH, body={"creations": creations})
        return _acl_results(data, self.url, "POST", ACLS_PATH)

    def delete_acls(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`POST /v1/acls/delete`: per filter `{errorCode, errorMessage, matchingAcls}`."""
        path = ACLS_PATH + "/delete"
        return _acl_results(self._call("POST", path, body={"filters": filters}), self.url, "POST", path)

    def describe_acls(self, **acl_filter: str | None) -> list[dict[str, Any]]:
        """`GET /v1/acls`: the ACLs matching the filter (camelCase keys; None / ANY: any)."""
        params = {k: v for k, v in acl_filter.items() if v is not None}
        data = self._call("GET", ACLS_PATH, params=params)
        if not isinstance(data, dict) or not isinstance(data.get("acls"), list):
            raise ClientError(f"controller at {self.url} answered GET {ACLS_PATH} without an acls array")
        acls: list[dict[str, Any]] = data["acls"]
        return acls


ACLS_PATH: Final = "/v1/acls"


def _acl_results(data: Any, url: str, method: str, path: str) -> list[dict[str, Any]]:
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise ClientError(f"controller at {url} answered {method} {path} without a results array")
    results: list[dict[str, Any]] = data["results"]
    return results


def _path(segment: str) -> str:
    return quote(segment, safe="")


PRODUCER_IDS_PATH: Final = "/v1/producer-ids"
SCRAM_CREDENTIALS_PATH: Final = "/v1/scram-credentials"
REASSIGNMENTS_PATH: Final = "/v1/reassignments"
ELECT_LEADERS_PATH: Final = "/v1/elect-leaders"
CLIENT_QUOTAS_PATH: Final = "/v1/client-quotas"


def broker_configs_path(broker: str) -> str:
    """`POST /v1/brokers/{id}/configs`; the cluster default ("") is `default`."""
    return f"/v1/brokers/{_path(broker or 'default')}/configs"


def topic_configs_path(name: str) -> str:
    return f"/v1/topics/{_path(name)}/configs"


def topic_partitions_path(name: str) -> str:
    return f"/v1/topics/{_path(name)}/partitions"


def _scram_results(data: Any, url: str) -> list[DescribeScramCredentialsResult]:
    """The answer of `GET /v1/scram-credentials` as typed results (one validation for both links)."""
    if not isinstance(data, list):
        raise ClientError(
            f"controller at {url} answered GET {SCRAM_CREDENTIALS_PATH} with a body that is not an array"
        )
    return [_reply(DescribeScramCredentialsResult, item, url, "GET", SCRAM_CREDENTIALS_PATH) for item in data]


def transport_error(exc: httpx.HTTPError, url: str, method: str, path: str) -> ControllerUnreachableError:
    """The one mapping of a transport failure to the error a caller sees."""
    if isinstance(exc, httpx.TimeoutException):
        return ControllerUnreachableError(f"controller at {url} did not answer {method} {path} in time")
    return ControllerUnreachableError(f"cannot reach the controller at {url}: {exc or type(exc).__name__}")


def decode_answer(status: int, content: bytes, url: str, method: str, path: str) -> Any:
    """The JSON body of an answer, or the error it stands for (one mapping for both links)."""
    return _decode(status, _json(content), url, method, path)


def _json(content: bytes) -> Any:
    """The parsed body, or None when it is not JSON."""
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return None


def _decode(status: int, data: Any, url: str, method: str, path: str) -> Any:
    if status >= 400:
        if isinstance(data, dict) and "errorCode" in data:
            raise ApiError(status, int(data["errorCode"]), str(data.get("errorMessage") or ""))
        raise ApiError(status, -1, f"{method} {path} failed")
    if data is None:
        raise ClientError(f"controller at {url} answered {method} {path} with a body that is not JSON")
    return data


ReplyT = TypeVar("ReplyT", bound=Message)


def _reply(reply_type: type[ReplyT], data: Any, url: str, method: str, path: str) -> ReplyT:
    """A broker call's answer as its reply model (the one validation for both links)."""
    try:
        return reply_type.model_validate(data)
    except ValidationError as exc:
        raise ClientError(
            f"controller at {url} answered {method} {path} with an unexpected body: {validation_message(exc)}"
        ) from exc


class ControllerLink(_ControllerList):
    """The broker agent's asyncio link to the controller: typed broker calls, one error mapping.

    `urls` lists the controllers (a sequence, or one comma-separated string); calls follow the
    active controller like `ControllerClient`'s (module docstring). `metadata` returns the page as parsed JSON (its records are decoded one by
    one by the caller: the hot path of a restart stays free of model validation).
    """

    def __init__(  # noqa: PLR0913 - the URLs, then keyword-only settings
        self,
        urls: str | Sequence[str],
        *,
        token: str,
        timeout: float = 10.0,
        read_timeout: float = 40.0,
        failover_timeout: float = DEFAULT_FAILOVER_TIMEOUT,
        ca_file: Path | None = None,
        tls: ClientTls | None = None,
    ):
        try:
            self._endpoints = ControllerEndpoints(urls)
        except ValueError:
            raise ValueError("a controller link needs at least one controller URL") from None
        self._failover_timeout = failover_timeout
        self._tls = client_tls(ca_file, tls)
        self._http = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            timeout=httpx.Timeout(timeout, read=read_timeout),
            trust_env=False,
            verify=self._tls.context if self._tls is not None else True,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(
        self, method: str, path: str, *, content: bytes | None = None, params: Mapping[str, Any] | None = None
    ) -> Any:
        failover = self._endpoints.failover(
            method, path, timeout=self._failover_timeout, now=time.monotonic()
        )
        while True:
            if self._tls is not None:
                self._tls.refresh()
            try:
                response = await self._http.request(
                    method, failover.url + path, content=content, params=params
                )
            except httpx.HTTPError as exc:
                outcome = failover.failed(exc, now=time.monotonic())
            else:
                outcome = failover.answered(response.status_code, response.content, now=time.monotonic())
            if not isinstance(outcome, Retry):
                return outcome
            await asyncio.sleep(outcome.delay)

    async def _post(self, path: str, request: Message, reply_type: type[ReplyT]) -> ReplyT:
        data = await self._request("POST", path, content=orjson.dumps(request.to_wire()))
        return _reply(reply_type, data, self.url, "POST", path)

    async def register(self, request: RegisterBrokerRequest) -> RegisterBrokerReply:
        return await self._post("/v1/brokers/register", request, RegisterBrokerReply)

    async def heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply:
        return await self._post("/v1/brokers/heartbeat", request, BrokerHeartbeatReply)

    async def assign_replicas_to_dirs(
        self, request: AssignReplicasToDirsRequest
    ) -> AssignReplicasToDirsReply:
        return await self._post("/v1/assignments", request, AssignReplicasToDirsReply)

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionReply:
        return await self._post("/v1/partitions/alter", request, AlterPartitionReply)

    async def allocate_producer_ids(self, request: AllocateProducerIdsRequest) -> AllocateProducerIdsReply:
        return await self._post(PRODUCER_IDS_PATH, request, AllocateProducerIdsReply)

    # The admin requests a broker forwards to the active controller (Kafka's KIP-590); the link's
    # token must be the admin token for these.

    async def create_topic(self, request: CreateTopicRequest) -> dict[str, Any]:
        """`POST /v1/topics`: the reply's JSON (a non-zero errorCode is returned, not raised)."""
        data = await self._request("POST", "/v1/topics", content=orjson.dumps(request.to_wire()))
        if not isinstance(data, dict):
            raise ClientError(
                f"controller at {self.url} answered POST /v1/topics with a body that is not an object"
            )
        return data

    async def delete_topic(self, name: str) -> dict[str, Any]:
        """`DELETE /v1/topics/{name}`: the reply's JSON (errorCode 3 for an unknown topic)."""
        data = await self._request("DELETE", f"/v1/topics/{_path(name)}")
        if not isinstance(data, dict):
            raise ClientError(
                f"controller at {self.url} answered DELETE /v1/topics with a body that is not an object"
            )
        return data

    async def alter_topic_configs(
        self, name: str, request: AlterTopicConfigsRequest
    ) -> AlterTopicConfigsReply:
        return await self._post(topic_configs_path(name), request, AlterTopicConfigsReply)

    async def create_partitions(self, name: str, request: CreatePartitionsRequest) -> CreatePartitionsReply:
        return await self._post(topic_partitions_path(name), request, CreatePartitionsReply)

    async def alter_broker_configs(
        self, broker: str, request: AlterBrokerConfigsRequest
    ) -> AlterBrokerConfigsReply:
        return await self._post(broker_configs_path(broker), request, AlterBrokerConfigsReply)

    async def alter_scram_credentials(
        self, request: AlterScramCredentialsRequest
    ) -> AlterScramCredentialsReply:
        return await self._post(SCRAM_CREDENTIALS_PATH, request, AlterScramCredentialsReply)

    async def alter_reassignments(self, request: AlterReassignmentsRequest) -> AlterReassignmentsReply:
        return await self._post(REASSIGNMENTS_PATH, request, AlterReassignmentsReply)

    async def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersReply:
        return await self._post(ELECT_LEADERS_PATH, request, ElectLeadersReply)

    async def alter_client_quotas(self, request: AlterClientQuotasRequest) -> AlterClientQuotasReply:
        return await self._post(CLIENT_QUOTAS_PATH, request, AlterClientQuotasReply)

    async def list_reassignments(self) -> ListReassignmentsReply:
        data = await self._request("GET", REASSIGNMENTS_PATH)
        return _reply(ListReassignmentsReply, data, self.url, "GET", REASSIGNMENTS_PATH)

    async def describe_scram_credentials(
        self, users: Sequence[str] | None = None
    ) -> list[DescribeScramCredentialsResult]:
        data = await self._request("GET", SCRAM_CREDENTIALS_PATH, params={"user": list(users or ())})
        return _scram_results(data, self.url)

    async def create_acls(self, request: CreateAclsRequest) -> CreateAclsReply:
        return await self._post(ACLS_PATH, request, CreateAclsReply)

    async def delete_acls(self, request: DeleteAclsRequest) -> DeleteAclsReply:
        return await self._post(ACLS_PATH + "/delete", request, DeleteAclsReply)

    async def describe_acls(self, params: Mapping[str, str]) -> DescribeAclsReply:
        data = await self._request("GET", ACLS_PATH, params=params)
        return _reply(DescribeAclsReply, data, self.url, "GET", ACLS_PATH)

    async def metadata(
        self, *, from_offset: int, max_wait_ms: int, max_records: int, last_checksum: int | None = None
    ) -> dict[str, Any]:
        """One page of `GET /v1/metadata` (a non-zero errorCode is returned, not raised)."""
        params: dict[str, Any] = {
            "fromOffset": from_offset,
            "maxWaitMs": max_wait_ms,
            "maxRecords": max_records,
        }
        if last_checksum is not None:
            params["lastChecksum"] = last_checksum
        data = await self._request("GET", "/v1/metadata", params=params)
        if not isinstance(data, dict):
            raise ClientError(
                f"controller at {self.url} answered GET /v1/metadata with a body that is not an object"
            )
        return data
