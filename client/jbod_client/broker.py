"""An async HTTP client of one broker's own API (protocol §4.4): its log dirs and replica moves.

Records are produced and consumed with Kafka clients on the brokers' Kafka listeners
(`jbod_client.rdkafka`); this client is for what the operator and jbodctl ask a broker besides.

Guarantees:
* One pooled `httpx.AsyncClient` per broker: connections are reused across requests, and many
  requests may be in flight at once.
* Transport failures (refused, reset, timeout) and 5xx answers without a contract body raise
  `BrokerUnreachableError` with one line naming the broker's URL; 4xx answers raise
  `controller.ApiError` carrying the reply's `errorCode` (-1 when the body has none). Protocol
  outcomes (HTTP 200 with a non-zero `errorCode`) are returned, not raised.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson

from jbod_client.controller import ApiError, ClientError, https_verify
from jbod_core.errors import ErrorCode

_JSON_HEADERS = {"Content-Type": "application/json"}


class BrokerUnreachableError(ClientError):
    """The broker did not answer (or answered with a server error); `str()` names its URL."""


def error_name(code: int) -> str:
    """The contract's name of an error code (`LOG_DIR_NOT_FOUND`), or a neutral label."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return "UNKNOWN_ERROR"


def describe_error(code: int, message: str | None = None) -> str:
    """One line for users: `KAFKA_STORAGE_ERROR (errorCode 56): <message>`."""
    text = f"{error_name(code)} (errorCode {code})"
    return f"{text}: {message}" if message else text


class BrokerClient:
    """Calls to one broker; every method is a single request (no retries here — callers decide)."""

    def __init__(self, url: str, *, token: str, timeout: float = 30.0, ca_file: Path | None = None) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            trust_env=False,
            verify=https_verify(ca_file),
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=512),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> BrokerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- plumbing -----------------------------------------------------------------------------

    async def _call(self, method: str, path: str, *, content: bytes | None = None) -> Any:
        try:
            response = await self._http.request(
                method, path, content=content, headers=_JSON_HEADERS if content is not None else None
            )
        except httpx.TimeoutException as exc:
            raise BrokerUnreachableError(
                f"broker at {self.url} did not answer {method} {path} in time"
            ) from exc
        except httpx.HTTPError as exc:
            raise BrokerUnreachableError(
                f"cannot reach the broker at {self.url}: {exc or type(exc).__name__}"
            ) from exc
        try:
            data = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            data = None
        status = response.status_code
        if status >= 400:
            if isinstance(data, dict) and "errorCode" in data:
                detail = str(data.get("errorMessage") or f"{method} {path} failed")
                raise ApiError(status, int(data["errorCode"]), f"broker at {self.url}: {detail}")
            if status >= 500:
                raise BrokerUnreachableError(
                    f"broker at {self.url} answered {method} {path} with HTTP {status}"
                )
            raise ApiError(status, -1, f"broker at {self.url} does not serve {method} {path}")
        if data is None:
            raise ClientError(f"broker at {self.url} answered {method} {path} with a body that is not JSON")
        return data

    # -- the broker's own API -----------------------------------------------------------------

    async def log_dirs(self) -> list[dict[str, Any]]:
        """The broker's log dirs with the replicas each hosts (future replicas of moves included)."""
        reply: list[dict[str, Any]] = await self._call("GET", "/v1/log-dirs")
        return reply

    async def move(
        self,
        topic: str,
        partition: int,
        directory_id: str,
        *,
        max_bytes_per_second: int | None = None,
    ) -> dict[str, Any]:
        """Ask the broker to move its replica of a partition to another of its dirs (runs in the background)."""
        body: dict[str, Any] = {"topic": topic, "partition": partition, "directoryId": directory_id}
        if max_bytes_per_second is not None:
            body["maxBytesPerSecond"] = max_bytes_per_second
        reply: dict[str, Any] = await self._call("POST", "/v1/log-dirs/move", content=orjson.dumps(body))
        return reply
