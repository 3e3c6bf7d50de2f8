"""What jbodctl knows about the cluster's topics and brokers, from the controller or brokers'
replicated images (protocol §3.5), and one `BrokerClient` per broker for their HTTP API.

Guarantees:
* `describe_topic(topic)` always asks; `brokers()` and `broker(id)` answer from a cache, and
  `refresh=True` (or a miss) asks again. Concurrent requests for the same thing share one
  request.
* One `BrokerClient` per broker id, reused by every caller. A broker whose advertised URL changed
  (it restarted on another port) gets a new client; the old one is closed by `aclose()`, never
  under a request still using it.
* Errors are one line: `UnknownTopicError` (404 / errorCode 3), `UnknownBrokerError` (not
  registered, or no listener), `ControllerUnreachableError` (transport), `ApiError` (any other
  error status).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from jbod_client.broker import BrokerClient
from jbod_client.controller import (
    ApiError,
    ClientError,
    ControllerUnreachableError,
    decode_answer,
    https_verify,
    parse_controller_urls,
    transport_error,
)
from jbod_core.errors import ErrorCode

T = TypeVar("T")


class UnknownTopicError(ClientError):
    def __init__(self, topic: str, message: str | None = None) -> None:
        super().__init__(
            message
            or f"unknown topic {topic} (UNKNOWN_TOPIC_OR_PARTITION, errorCode {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})"
        )
        self.topic = topic


class UnknownBrokerError(ClientError):
    def __init__(self, broker_id: int, message: str | None = None) -> None:
        super().__init__(
            message
            or f"broker {broker_id} is not registered "
            f"(BROKER_ID_NOT_REGISTERED, errorCode {ErrorCode.BROKER_ID_NOT_REGISTERED})"
        )
        self.broker_id = broker_id


def listener_url(broker: dict[str, Any]) -> str | None:
    """The base URL of a registered broker's first listener (`http://host:port`, or https:// when
    the listener is named https), if it has one."""
    listeners = broker.get("listeners") or []
    if not listeners:
        return None
    first = listeners[0]
    scheme = "https" if first.get("name") == "https" else "http"
    return f"{scheme}://{first['host']}:{int(first['port'])}"


def kafka_address(broker: Mapping[str, Any], listener: str) -> str | None:
    """`host:port` of a registered broker's Kafka listener named `listener` (Kafka names its
    listeners here by their security protocol: SASL_PLAINTEXT, PLAINTEXT), if it has one. It is
    what Metadata answers for that broker to a client connected through such a listener."""
    for entry in broker.get("listeners") or []:
        if str(entry.get("name", "")).upper() == listener.upper():
            host = str(entry["host"])
            return f"[{host}]:{int(entry['port'])}" if ":" in host else f"{host}:{int(entry['port'])}"
    return None


class ClusterMetadata:
    """Client metadata from the first source that answers.

    `bootstrap` lists broker URLs: every broker serves the topic and broker reads from its own
    replicated image, so a jbodctl given brokers keeps working while no controller answers. The controllers (`controller_url`, if given: one URL or a comma-separated list) are
    asked after the brokers. A source that cannot be reached, or that is not ready (HTTP 503: a
    controller still recovering answers errorCode 41), is skipped for the next one; the source
    that answered is asked first next time.
    """

    def __init__(
        self,
        controller_url: str | None,
        *,
        token: str,
        timeout: float = 30.0,
        bootstrap: Sequence[str] = (),
        ca_file: Path | None = None,
    ) -> None:
        self.bootstrap = [u.rstrip("/") for u in bootstrap]
        self.controller_url = controller_url.rstrip("/") if controller_url else None
        self.controller_urls = parse_controller_urls(controller_url) if controller_url else []
        self._sources = [*self.bootstrap, *self.controller_urls]
        if not self._sources:
            raise ValueError("cluster metadata needs a controller URL or bootstrap brokers")
        self._current = 0
        self._token = token
        self._ca_file = ca_file  # https controllers and brokers are verified against it
        self._http = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            trust_env=False,
            verify=https_verify(ca_file),
        )
        self._broker_urls: dict[int, str | None] | None = None
        self._brokers: list[dict[str, Any]] = []
        self._clients: dict[int, BrokerClient] = {}
        self._retired: list[BrokerClient] = []
        self._inflight: dict[str, asyncio.Task[Any]] = {}

    # -- plumbing -----------------------------------------------------------------------------

    async def _get(self, path: str) -> Any:
        failures: list[ControllerUnreachableError] = []
        count = len(self._sources)
        for step in range(count):
            index = (self._current + step) % count
            url = self._sources[index]
            try:
                response = await self._http.get(url + path)
            except httpx.HTTPError as exc:
                failures.append(self._unreachable(url, path, exc))
                continue
            if response.status_code == 503 and step + 1 < count:
                continue  # not ready (a controller still recovering answers 503, errorCode 41)
            self._current = index
            return decode_answer(response.status_code, response.content, url, "GET", path)
        if count == 1:
            raise failures[0]
        raise ControllerUnreachableError(
            f"no metadata source answered GET {path}: " + "; ".join(str(f) for f in failures)
        ) from failures[-1]

    def _unreachable(self, url: str, path: str, exc: httpx.HTTPError) -> ControllerUnreachableError:
        """The error for one source; its cause is the transport error (`jbodctl`'s hints read it)."""
        if url in self.controller_urls:
            error = transport_error(exc, url, "GET", path)
        elif isinstance(exc, httpx.TimeoutException):
            error = ControllerUnreachableError(f"broker at {url} did not answer GET {path} in time")
        else:
            error = ControllerUnreachableError(
                f"cannot reach the broker at {url}: {exc or type(exc).__name__}"
            )
        error.__cause__ = exc
        return error

    async def _shared(self, key: str, fetch: Callable[[], Awaitable[T]]) -> T:
        """Run `fetch` once for every concurrent caller asking for `key`."""
        task = self._inflight.get(key)
        if task is None:

            async def run() -> T:
                try:
                    return await fetch()
                finally:
                    self._inflight.pop(key, None)

            task = asyncio.get_running_loop().create_task(run())
            # A refresh nobody waits for any more must not log "exception never retrieved".
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._inflight[key] = task
        result: T = await asyncio.shield(task)
        return result

    # -- topics -------------------------------------------------------------------------------

    async def describe_topic(self, topic: str) -> dict[str, Any]:
        """The current view of a topic (always asks). `UnknownTopicError` for an unknown topic."""
        return await self._shared(f"topic:{topic}", lambda: self._describe(topic))

    async def _describe(self, topic: str) -> dict[str, Any]:
        try:
            data: dict[str, Any] = await self._get(f"/v1/topics/{quote(topic, safe='')}")
        except ApiError as exc:
            if exc.status == 404 or exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise UnknownTopicError(topic) from exc
            raise
        return data

    # -- brokers ------------------------------------------------------------------------------

    async def brokers(self, *, refresh: bool = False) -> list[dict[str, Any]]:
        """Every registered broker as the controller describes it (`GET /v1/brokers`)."""
        if self._broker_urls is None or refresh:
            await self._shared("brokers", self._load_brokers)
        return self._brokers

    async def _load_brokers(self) -> None:
        data: list[dict[str, Any]] = await self._get("/v1/brokers")
        self._brokers = data
        self._broker_urls = {int(b["brokerId"]): listener_url(b) for b in data}

    async def broker(self, broker_id: int, *, refresh: bool = False) -> BrokerClient:
        """The client of a broker (cached per id; its URL comes from its first listener)."""
        client = self._clients.get(broker_id)
        if client is not None and not refresh:
            return client
        if refresh or self._broker_urls is None or broker_id not in self._broker_urls:
            await self.brokers(refresh=True)
        assert self._broker_urls is not None
        if broker_id not in self._broker_urls:
            raise UnknownBrokerError(broker_id)
        url = self._broker_urls[broker_id]
        if url is None:
            raise UnknownBrokerError(broker_id, f"broker {broker_id} advertises no listener")
        client = self._clients.get(broker_id)
        if client is not None and client.url == url:
            return client
        if client is not None:
            self._retired.append(client)
        client = BrokerClient(url, token=self._token, ca_file=self._ca_file)
        self._clients[broker_id] = client
        return client

    async def aclose(self) -> None:
        for task in list(self._inflight.values()):
            task.cancel()
        clients = [*self._clients.values(), *self._retired]
        self._clients.clear()
        self._retired.clear()
        for client in clients:
            await client.aclose()
        await self._http.aclose()

    async def __aenter__(self) -> ClusterMetadata:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
