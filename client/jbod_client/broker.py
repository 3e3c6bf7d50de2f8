"""An async HTTP client of one broker's data-plane API (protocol §4.4 and its extensions).

Guarantees:
* One pooled `httpx.AsyncClient` per broker: connections are reused across requests, and many
  requests (one per partition) may be in flight at once.
* Request bodies are built by the pure functions `encode_record` / `produce_body` (base64 via
  `base64.b64encode`, JSON via orjson, sent as `content=` bytes), so what goes on the wire is
  testable without a broker.
* Transport failures (refused, reset, timeout) and 5xx answers without a contract body raise
  `BrokerUnreachableError` with one line naming the broker's URL; 4xx answers raise
  `controller.ApiError` carrying the reply's `errorCode` (-1 when the body has none). Protocol
  outcomes (HTTP 200 with a non-zero `errorCode`) are returned, not raised.
* `fetch` returns records with `key` / `value` decoded to bytes; a reply whose records are not
  valid base64 raises `ClientError` (never returns garbage).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson

from jbod_client.controller import ApiError, ClientError, https_verify
from jbod_core.errors import ErrorCode

#: Extra seconds the HTTP client waits beyond the time the broker may legitimately hold a request.
HTTP_GRACE_SECONDS = 5.0
_JSON_HEADERS = {"Content-Type": "application/json"}


class BrokerUnreachableError(ClientError):
    """The broker did not answer (or answered with a server error); `str()` names its URL."""


def error_name(code: int) -> str:
    """The contract's name of an error code (`NOT_LEADER_OR_FOLLOWER`), or a neutral label."""
    if code == -1:
        return "NETWORK_OR_TIMEOUT"
    try:
        return ErrorCode(code).name
    except ValueError:
        return "UNKNOWN_ERROR"


def describe_error(code: int, message: str | None = None) -> str:
    """One line for users: `NOT_ENOUGH_REPLICAS (errorCode 19): <message>`."""
    text = f"{error_name(code)} (errorCode {code})"
    return f"{text}: {message}" if message else text


def encode_record(key: bytes | None, value: bytes) -> dict[str, str | None]:
    """A record as the produce API wants it: key and value in standard base64 (key may be null)."""
    return {
        "key": None if key is None else base64.b64encode(key).decode("ascii"),
        "value": base64.b64encode(value).decode("ascii"),
    }


def produce_body(
    topic: str,
    partition: int,
    records: Sequence[Mapping[str, str | None]],
    *,
    acks: int,
    timeout_ms: int | None = None,
) -> bytes:
    """The JSON body of `POST /v1/produce` for already encoded records (`encode_record`)."""
    body: dict[str, Any] = {"topic": topic, "partition": partition, "acks": acks, "records": records}
    if timeout_ms is not None:
        body["timeoutMs"] = timeout_ms
    return orjson.dumps(body)


def decode_base64(text: str | None, *, what: str) -> bytes | None:
    """Strict standard-base64 decoding (`None` stays `None`); `ClientError` names `what` on failure."""
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise ClientError(f"{what} is not valid base64: {str(text)[:40]!r}") from exc


class BrokerClient:
    """Calls to one broker; every method is a single request (no retries here — callers decide)."""

    def __init__(self, url: str, *, token: str, timeout: float = 30.0, ca_file: Path | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
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

    async def _call(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        params: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        try:
            response = await self._http.request(
                method,
                path,
                content=content,
                params=params,
                headers=_JSON_HEADERS if content is not None else None,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
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

    # -- data plane ---------------------------------------------------------------------------

    async def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[tuple[bytes | None, bytes]],
        *,
        acks: int = -1,
        timeout_ms: int | None = None,
    ) -> dict[str, Any]:
        """Append `records` (key, value) to one partition; the reply `{errorCode, baseOffset}`."""
        body = produce_body(
            topic, partition, [encode_record(k, v) for k, v in records], acks=acks, timeout_ms=timeout_ms
        )
        wait = (
            self.timeout if timeout_ms is None else max(self.timeout, timeout_ms / 1000 + HTTP_GRACE_SECONDS)
        )
        return await self.produce_raw(body, timeout=wait)

    async def produce_raw(self, body: bytes, *, timeout: float | None = None) -> dict[str, Any]:
        """`POST /v1/produce` with a body from `produce_body` (the producer's fast path)."""
        reply: dict[str, Any] = await self._call("POST", "/v1/produce", content=body, timeout=timeout)
        return reply

    async def fetch(
        self, topic: str, partition: int, offset: int, *, max_bytes: int = 1 << 20, max_wait_ms: int = 0
    ) -> dict[str, Any]:
        """Records from `offset` on (below the high watermark), keys and values decoded to bytes."""
        params = {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "maxBytes": max_bytes,
            "maxWaitMs": max_wait_ms,
        }
        reply: dict[str, Any] = await self._call(
            "GET", "/v1/fetch", params=params, timeout=self.timeout + max_wait_ms / 1000
        )
        raw = reply.get("records") or []
        decoded = []
        for record in raw:
            offset_of = int(record["offset"])
            what = f"record {topic}-{partition}@{offset_of} from {self.url}"
            value = decode_base64(record.get("value") or "", what=f"value of {what}")
            decoded.append(
                {
                    "offset": offset_of,
                    "key": decode_base64(record.get("key"), what=f"key of {what}"),
                    "value": value if value is not None else b"",
                }
            )
        reply["records"] = decoded
        return reply

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
