"""Typed HTTP links to the metadata controller (protocol §3): `ControllerClient` (blocking, for
`jbodctl` and the operator) and `ControllerLink` (asyncio, for the broker agent).

Guarantees:
* Requests are built from the shared wire models (`jbod_core.messages`), so no caller can send a
  body the controller's schema would reject for its shape; in both links the broker calls'
  replies are validated into the reply models (`RegisterBrokerReply`, `BrokerHeartbeatReply`, …).
* Transport failures (refused, timeout, DNS) raise `ControllerUnreachableError` with one line naming
  the URL; HTTP errors that carry the contract's `{errorCode, errorMessage}` raise `ApiError`; a
  body that is not JSON, or a reply that does not fit its model, raises `ClientError`. Both links
  map errors through the same two functions (`transport_error`, `decode_answer`).
  Protocol outcomes (HTTP 200 with a non-zero `errorCode`) are returned, not raised: callers
  decide what a code means for them.
* `ControllerLink` takes a list of controller URLs and sends every call to the current one; after
  a transport failure the next call goes to the next URL. It is the one place that will follow
  a moved active controller (errorCode 41, contract §3.8).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import orjson
from pydantic import ValidationError

from jbod_core.messages import (
    AlterPartitionReply,
    AlterPartitionRequest,
    AssignReplicasToDirsReply,
    AssignReplicasToDirsRequest,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    CreateTopicRequest,
    Message,
    RegisterBrokerReply,
    RegisterBrokerRequest,
    validation_message,
)

DEFAULT_URL = "http://127.0.0.1:9093"


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


class ControllerClient:
    def __init__(self, url: str = DEFAULT_URL, *, token: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout, trust_env=False
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
        try:
            response = self._http.request(
                method,
                path,
                json=payload,
                params=params,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, self.url, method, path) from exc
        return decode_answer(response.status_code, response.content, self.url, method, path)

    # -- broker calls -------------------------------------------------------------------------

    def register(self, request: RegisterBrokerRequest) -> RegisterBrokerReply:
        return _reply(
            RegisterBrokerReply,
            self._call("POST", "/v1/brokers/register", body=request),
            self.url,
            "POST",
            "/v1/brokers/register",
        )

    def heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply:
        return _reply(
            BrokerHeartbeatReply,
            self._call("POST", "/v1/brokers/heartbeat", body=request),
            self.url,
            "POST",
            "/v1/brokers/heartbeat",
        )

    def assign_replicas_to_dirs(self, request: AssignReplicasToDirsRequest) -> AssignReplicasToDirsReply:
        return _reply(
            AssignReplicasToDirsReply,
            self._call("POST", "/v1/assignments", body=request),
            self.url,
            "POST",
            "/v1/assignments",
        )

    def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionReply:
        return _reply(
            AlterPartitionReply,
            self._call("POST", "/v1/partitions/alter", body=request),
            self.url,
            "POST",
            "/v1/partitions/alter",
        )

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


def _path(segment: str) -> str:
    return quote(segment, safe="")


def transport_error(exc: httpx.HTTPError, url: str, method: str, path: str) -> ControllerUnreachableError:
    """The one mapping of a transport failure to the error a caller sees."""
    if isinstance(exc, httpx.TimeoutException):
        return ControllerUnreachableError(f"controller at {url} did not answer {method} {path} in time")
    return ControllerUnreachableError(f"cannot reach the controller at {url}: {exc or type(exc).__name__}")


def decode_answer(status: int, content: bytes, url: str, method: str, path: str) -> Any:
    """The JSON body of an answer, or the error it stands for (one mapping for both links)."""
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        data = None
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


class ControllerLink:
    """The broker agent's asyncio link to the controller: typed broker calls, one error mapping.

    `urls` lists the controllers; calls go to the current one and move to the next after a
    transport failure. `metadata` returns the page as parsed JSON (its records are decoded one by
    one by the caller: the hot path of a restart stays free of model validation).
    """

    def __init__(self, urls: Sequence[str], *, token: str, timeout: float = 10.0, read_timeout: float = 40.0):
        if not urls:
            raise ValueError("a controller link needs at least one controller URL")
        self.urls = [u.rstrip("/") for u in urls]
        self._current = 0
        self._http = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            timeout=httpx.Timeout(timeout, read=read_timeout),
            trust_env=False,
        )

    @property
    def url(self) -> str:
        return self.urls[self._current]

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(
        self, method: str, path: str, *, content: bytes | None = None, params: Mapping[str, Any] | None = None
    ) -> Any:
        url = self.url
        try:
            response = await self._http.request(method, url + path, content=content, params=params)
        except httpx.HTTPError as exc:
            self._current = (self._current + 1) % len(self.urls)
            raise transport_error(exc, url, method, path) from exc
        return decode_answer(response.status_code, response.content, url, method, path)

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
