"""A small client of etcd's v3 JSON gateway (`/v3/kv/*`, `/v3/lease/*`, `/v3/watch`), sync and async.

Why the gateway: it is part of every etcd v3.5+ server, speaks JSON over HTTP with the httpx we
already use, and needs no generated gRPC stubs (`docs/decisions.md`, "The controller quorum on etcd").

Guarantees:
* Keys and values are bytes in, bytes out (the gateway's base64 is handled here); int64 fields
  come back as `int`; fields the gateway omits (proto3 defaults) read as 0 / False / empty.
* A transport failure (refused, reset, timeout) moves to the next endpoint and tries each once;
  when every endpoint failed, `EtcdUnavailableError` names them. An answer etcd refused raises
  `EtcdError` with etcd's gRPC code and message (e.g. `COMPACTED` for a compacted revision).
* The request bodies are built by pure functions shared by `EtcdGateway` (blocking, for worker
  threads) and `AsyncEtcdGateway` (for the event loop), so both speak exactly the same calls.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
import orjson

# gRPC status codes etcd answers with.
OUT_OF_RANGE: Final = 11  # "mvcc: required revision has been compacted"
INVALID_ARGUMENT: Final = 3  # e.g. "request is too large", "too many operations in txn request"
# etcd's default request limits (--max-request-bytes 1.5 MiB, --max-txn-ops 128), with room left for
# keys, compares and the gateway's framing.
MAX_TXN_BYTES: Final = 1024 * 1024
MAX_TXN_OPS: Final = 100


class EtcdUnavailableError(ConnectionError):
    """No etcd endpoint answered."""


class EtcdError(RuntimeError):
    """etcd refused a request."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"etcd: {message} (code {code})")
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


@dataclass(frozen=True, slots=True)
class RangeResult:
    kvs: list[KeyValue]
    revision: int
    more: bool


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int
    responses: list[dict[str, Any]]

    def ranged(self, index: int) -> list[KeyValue]:
        """The key-values of the `index`-th response when it was a range."""
        body = self.responses[index].get("response_range", {})
        return [_kv(item) for item in body.get("kvs", [])]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: str  # "PUT" or "DELETE"
    kv: KeyValue


@dataclass(slots=True)
class WatchBatch:
    revision: int
    events: list[WatchEvent] = field(default_factory=list)
    compact_revision: int = 0
    canceled: bool = False


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def prefix_end(prefix: bytes) -> bytes:
    """The range end that selects every key starting with `prefix`."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


def _kv(item: dict[str, Any]) -> KeyValue:
    return KeyValue(
        key=base64.b64decode(item.get("key", "")),
        value=base64.b64decode(item.get("value", "")),
        create_revision=int(item.get("create_revision", 0)),
        mod_revision=int(item.get("mod_revision", 0)),
        lease=int(item.get("lease", 0)),
    )


# -- request bodies (pure) ------------------------------------------------------------------------


def range_body(
    key: bytes, range_end: bytes | None = None, *, revision: int = 0, limit: int = 0, keys_only: bool = False
) -> dict[str, Any]:
    body: dict[str, Any] = {"key": b64(key)}
    if range_end is not None:
        body["range_end"] = b64(range_end)
    if revision:
        body["revision"] = str(revision)
    if limit:
        body["limit"] = str(limit)
    if keys_only:
        body["keys_only"] = True
    return body


def put_op(key: bytes, value: bytes, *, lease: int = 0) -> dict[str, Any]:
    request: dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease:
        request["lease"] = str(lease)
    return {"request_put": request}


def delete_op(key: bytes, range_end: bytes | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"key": b64(key)}
    if range_end is not None:
        request["range_end"] = b64(range_end)
    return {"request_delete_range": request}


def range_op(key: bytes, range_end: bytes | None = None) -> dict[str, Any]:
    return {"request_range": range_body(key, range_end)}


def compare_create(key: bytes, revision: int) -> dict[str, Any]:
    """True while `key` was created at `revision` (0: the key does not exist)."""
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": str(revision)}


def compare_mod(key: bytes, revision: int) -> dict[str, Any]:
    """True while `key` was last written at `revision` (0: the key does not exist)."""
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def _range_result(body: dict[str, Any]) -> RangeResult:
    return RangeResult(
        kvs=[_kv(item) for item in body.get("kvs", [])],
        revision=int(body.get("header", {}).get("revision", 0)),
        more=bool(body.get("more", False)),
    )


def _txn_result(body: dict[str, Any]) -> TxnResult:
    return TxnResult(
        succeeded=bool(body.get("succeeded", False)),
        revision=int(body.get("header", {}).get("revision", 0)),
        responses=list(body.get("responses", [])),
    )


def _decode(response: httpx.Response) -> dict[str, Any]:
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        body = None
    if response.status_code != 200 or not isinstance(body, dict) or "error" in body:
        code = int(body.get("code", -1)) if isinstance(body, dict) else -1
        message = str(body.get("message", body.get("error"))) if isinstance(body, dict) else response.text
        raise EtcdError(code, message[:300])
    return body


def watch_batch(line: bytes) -> WatchBatch | None:
    """One line of the gateway's watch stream; None for a line that carries nothing."""
    body = orjson.loads(line)
    if "error" in body:
        error = body["error"]
        raise EtcdError(int(error.get("grpc_code", error.get("code", -1))), str(error.get("message")))
    result = body.get("result")
    if not isinstance(result, dict):
        return None
    batch = WatchBatch(
        revision=int(result.get("header", {}).get("revision", 0)),
        compact_revision=int(result.get("compact_revision", 0)),
        canceled=bool(result.get("canceled", False)),
    )
    for event in result.get("events", []):
        batch.events.append(WatchEvent(kind=event.get("type", "PUT"), kv=_kv(event.get("kv", {}))))
    return batch


@dataclass(frozen=True, slots=True)
class EtcdTls:
    """TLS toward etcd: the CA that signed its certificate, and this client's certificate and key
    (for an etcd started with `--client-cert-auth`); etcdctl's `--cacert`, `--cert`, `--key`."""

    cacert: str | None = None
    cert: str | None = None
    key: str | None = None

    def context(self) -> ssl.SSLContext:
        """An SSL context for httpx; `ssl.SSLError`/`OSError` name an unreadable or bad file."""
        context = ssl.create_default_context(cafile=self.cacert)
        if self.cert is not None:
            context.load_cert_chain(self.cert, self.key)
        return context


def _verify(tls: EtcdTls | None) -> ssl.SSLContext | bool:
    return tls.context() if tls is not None else True


class _Endpoints:
    def __init__(self, endpoints: Sequence[str]) -> None:
        cleaned = [e.strip().rstrip("/") for e in endpoints if e.strip()]
        if not cleaned:
            raise ValueError("no etcd endpoint given")
        self.urls = cleaned
        self.current = 0

    def order(self) -> list[str]:
        return self.urls[self.current :] + self.urls[: self.current]

    def worked(self, url: str) -> None:
        self.current = self.urls.index(url)

    def unavailable(self, path: str, errors: list[str]) -> EtcdUnavailableError:
        return EtcdUnavailableError(f"no etcd endpoint answered {path}: {'; '.join(errors)}")


class EtcdGateway:
    """Blocking calls, for worker threads (the controller's appends and its lease keeper)."""

    def __init__(self, endpoints: Sequence[str], *, timeout: float = 5.0, tls: EtcdTls | None = None) -> None:
        self.endpoints = _Endpoints(endpoints)
        self._client = httpx.Client(timeout=timeout, verify=_verify(tls), trust_env=False)

    def close(self) -> None:
        self._client.close()

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        content = orjson.dumps(body)
        errors: list[str] = []
        for url in self.endpoints.order():
            try:
                response = self._client.post(url + path, content=content)
            except httpx.TransportError as exc:
                errors.append(f"{url}: {exc.__class__.__name__}")
                continue
            self.endpoints.worked(url)
            return _decode(response)
        raise self.endpoints.unavailable(path, errors)

    def range(self, key: bytes, range_end: bytes | None = None, **options: Any) -> RangeResult:
        return _range_result(self.call("/v3/kv/range", range_body(key, range_end, **options)))

    def txn(
        self,
        compare: list[dict[str, Any]],
        success: list[dict[str, Any]],
        failure: list[dict[str, Any]] | None = None,
    ) -> TxnResult:
        body = {"compare": compare, "success": success, "failure": failure or []}
        return _txn_result(self.call("/v3/kv/txn", body))

    def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        body = self.call("/v3/kv/put", put_op(key, value, lease=lease)["request_put"])
        return int(body.get("header", {}).get("revision", 0))

    def lease_grant(self, ttl_s: int) -> int:
        return int(self.call("/v3/lease/grant", {"TTL": str(ttl_s)})["ID"])

    def lease_keepalive(self, lease_id: int) -> int:
        """The lease's remaining TTL in seconds; 0 when it has expired."""
        body = self.call("/v3/lease/keepalive", {"ID": str(lease_id)})
        return int(body.get("result", {}).get("TTL", 0))

    def lease_revoke(self, lease_id: int) -> None:
        self.call("/v3/lease/revoke", {"ID": str(lease_id)})

    def compact(self, revision: int) -> None:
        self.call("/v3/kv/compaction", {"revision": str(revision)})


class AsyncEtcdGateway:
    """Event-loop calls: ranges and the watch stream of a following standby."""

    def __init__(self, endpoints: Sequence[str], *, timeout: float = 5.0, tls: EtcdTls | None = None) -> None:
        self.endpoints = _Endpoints(endpoints)
        self._client = httpx.AsyncClient(timeout=timeout, verify=_verify(tls), trust_env=False)
        self._timeout = timeout

    async def aclose(self) -> None:
        await self._client.aclose()

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        content = orjson.dumps(body)
        errors: list[str] = []
        for url in self.endpoints.order():
            try:
                response = await self._client.post(url + path, content=content)
            except httpx.TransportError as exc:
                errors.append(f"{url}: {exc.__class__.__name__}")
                continue
            self.endpoints.worked(url)
            return _decode(response)
        raise self.endpoints.unavailable(path, errors)

    async def range(self, key: bytes, range_end: bytes | None = None, **options: Any) -> RangeResult:
        return _range_result(await self.call("/v3/kv/range", range_body(key, range_end, **options)))

    async def txn(
        self,
        compare: list[dict[str, Any]],
        success: list[dict[str, Any]],
        failure: list[dict[str, Any]] | None = None,
    ) -> TxnResult:
        body = {"compare": compare, "success": success, "failure": failure or []}
        return _txn_result(await self.call("/v3/kv/txn", body))

    async def watch(self, key: bytes, range_end: bytes, *, start_revision: int) -> AsyncIterator[WatchBatch]:
        """Batches of events under [key, range_end) from `start_revision`, until the stream breaks.

        Tries the endpoints in turn for the connection; a broken stream ends the iteration (the
        caller resumes from the revision after its last batch, or re-reads on a compaction).
        """
        body = orjson.dumps(
            {
                "create_request": {
                    "key": b64(key),
                    "range_end": b64(range_end),
                    "start_revision": str(start_revision),
                    "progress_notify": True,
                }
            }
        )
        errors: list[str] = []
        timeout = httpx.Timeout(self._timeout, read=None)
        for url in self.endpoints.order():
            connected = False
            try:
                async with self._client.stream(
                    "POST", url + "/v3/watch", content=body, timeout=timeout
                ) as response:
                    if response.status_code != 200:
                        raise EtcdError(-1, f"watch answered HTTP {response.status_code}")
                    connected = True
                    self.endpoints.worked(url)
                    async for line in response.aiter_lines():
                        if not line.strip():
                            continue
                        batch = watch_batch(line.encode())
                        if batch is not None:
                            yield batch
                    return
            except httpx.TransportError as exc:
                if connected:
                    return  # the stream broke: the caller resumes after its last batch
                errors.append(f"{url}: {exc.__class__.__name__}")
        raise self.endpoints.unavailable("/v3/watch", errors)
