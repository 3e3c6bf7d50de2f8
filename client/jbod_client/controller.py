"""A typed HTTP client of the metadata controller (protocol §3).

Guarantees:
* Requests are built from the shared wire models (`jbod_core.messages`), so the client cannot
  send a body the controller's schema would reject for its shape.
* Transport failures (refused, timeout, DNS) raise `ControllerUnreachableError` with one line naming
  the URL; HTTP errors that carry the contract's `{errorCode, errorMessage}` raise `ApiError`.
  Protocol outcomes (HTTP 200 with a non-zero `errorCode`) are returned, not raised: callers
  decide what a code means for them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from jbod_core.messages import (
    AlterPartitionRequest,
    AssignReplicasToDirsRequest,
    BrokerHeartbeatRequest,
    CreateTopicRequest,
    Message,
    RegisterBrokerRequest,
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
        except httpx.TimeoutException as exc:
            raise ControllerUnreachableError(
                f"controller at {self.url} did not answer {method} {path} in time"
            ) from exc
        except httpx.HTTPError as exc:
            raise ControllerUnreachableError(f"cannot reach the controller at {self.url}: {exc}") from exc
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code >= 400:
            if isinstance(data, dict) and "errorCode" in data:
                raise ApiError(
                    response.status_code, int(data["errorCode"]), str(data.get("errorMessage", ""))
                )
            raise ApiError(response.status_code, -1, f"{method} {path} failed")
        if data is None:
            raise ClientError(
                f"controller at {self.url} answered {method} {path} with a body that is not JSON"
            )
        return data

    # -- broker calls -------------------------------------------------------------------------

    def register(self, request: RegisterBrokerRequest) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "/v1/brokers/register", body=request)
        return result

    def heartbeat(self, request: BrokerHeartbeatRequest) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "/v1/brokers/heartbeat", body=request)
        return result

    def assign_replicas_to_dirs(self, request: AssignReplicasToDirsRequest) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "/v1/assignments", body=request)
        return result

    def alter_partition(self, request: AlterPartitionRequest) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "/v1/partitions/alter", body=request)
        return result

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
