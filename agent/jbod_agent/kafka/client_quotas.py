"""Client quota enforcement on a broker (KIP-13, KIP-55, KIP-124, KIP-219, KIP-599): the rate of
each quota entity, measured as Kafka measures it, turned into `throttle_time_ms` in responses and a
muted connection.

Guarantees:
* Quotas come from this broker's metadata image (`ClusterImage.client_quotas`), resolved per
  request in KIP-55's order (`jbod_core.quotas.resolve`): a change applies to the next request.
  Without a quota for the key nothing is recorded for it.
* `producer_byte_rate` counts the size of each Produce request; `consumer_byte_rate` the size of
  each Fetch response of a consumer (a follower's fetch is not counted); `request_percentage` the
  time a handler takes (100 = one handler busy all the time); `controller_mutation_rate`
  the partitions created or deleted (`mutations_throttle_ms` / `record_mutations`). The rates are
  `jbod_core.quotas.SampledRate` over `quota.window.num` samples of `quota.window.size.seconds`;
  mutations use a token bucket of `window_num * window_s` seconds at the rate (KIP-599).
* A consumer's Fetch asks for at most `quota * (window_num - 1) * window_s` bytes (Kafka's cap);
  a Fetch above its quota is answered without records (its bytes taken back from the rate) with
  the throttle time, as Kafka's; the client fetches the same offsets again once it is unmuted.
* `connection_creation_rate` (KIP-612) counts each connection a listener accepts from an
  address with an `ip` quota (`admit_connection`); one over the quota is not counted and gets a
  throttle time (at most one `quota.window.size.seconds`), after which the listener closes it
  unread, as Kafka's acceptor does.
* The broker's own principal (`User:jbod-broker`) is never throttled.
* Every throttle a response carries is added once to `throttle_seconds` by (the quota type that
  gave it, user, client id) for the `jbod_kafka_client_throttle_seconds_total` metric (Kafka's
  `throttle-time`).
* Memory stays bounded by the clients seen lately, however many client ids come and go: a rate
  nothing was recorded to for `window_num * window_s` seconds and a mutation bucket full again
  are dropped (each then answers as a new one would: no throttle changes), and a throttle
  counter after `THROTTLE_COUNTER_EXPIRY_S` without a throttle (Kafka's sensor expiry, so a
  metric series is not cut short between scrapes). The sweep runs on a request, at most once
  per `window_num * window_s` seconds.
* Pure bookkeeping over the clock it is given: it sleeps nowhere; the listener mutes.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import time
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from jbod_agent.kafka.listener import Connection
from jbod_agent.ports import Clock
from jbod_agent.replication.peer_link import INTER_BROKER_USER
from jbod_core import quotas
from jbod_core.token_bucket import TokenBucket
from jbod_kafka import fetch_response, protocol

PRODUCE: Final = "produce"
FETCH: Final = "fetch"
REQUEST: Final = "request"
CONTROLLER_MUTATION: Final = "controller_mutation"
CONNECTION: Final = "connection"  # KIP-612: connections accepted per second, per address
_KEYS: Final[Mapping[str, str]] = {
    PRODUCE: quotas.PRODUCER_BYTE_RATE,
    FETCH: quotas.CONSUMER_BYTE_RATE,
    REQUEST: quotas.REQUEST_PERCENTAGE,
    CONTROLLER_MUTATION: quotas.CONTROLLER_MUTATION_RATE,
}
_EXEMPT: Final = f"User:{INTER_BROKER_USER}"
# How long a (quota type, user, client id) throttle counter stays without a throttle: Kafka's
# ClientQuotaManager drops an inactive quota sensor, its throttle-time metric with it, after 1 h.
THROTTLE_COUNTER_EXPIRY_S: Final = 3600.0


def user_of(conn: Connection) -> str:
    """The user name of the quota entity: the principal's name (`ANONYMOUS` unauthenticated)."""
    principal = conn.principal or "User:ANONYMOUS"
    return principal.split(":", 1)[1] if ":" in principal else principal


@dataclass(frozen=True, slots=True)
class Windows:
    num: int = 11  # quota.window.num
    size_s: float = 1.0  # quota.window.size.seconds


class ClientQuotas:
    """The rates of one broker's clients (the module's guarantees)."""

    def __init__(
        self,
        configured: Callable[[], Mapping[quotas.Entity, Mapping[str, float]]],
        *,
        clock: Clock,
        windows: Windows = Windows(),
        throttle_seconds: dict[tuple[str, str, str], float] | None = None,
    ) -> None:
        self._configured = configured
        self._clock = clock
        self._windows = windows
        self._rates: dict[tuple[str, quotas.SensorKey], quotas.SampledRate] = {}
        self._buckets: dict[quotas.SensorKey, TokenBucket] = {}
        self.throttle_seconds = {} if throttle_seconds is None else throttle_seconds
        self._throttled_at: dict[tuple[str, str, str], float] = {}  # a counter's last throttle
        self._next_sweep = -math.inf

    def _sweep(self, now: float) -> None:
        """Drops what no longer changes an answer (the module's guarantees), at most once a span."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + self._windows.num * self._windows.size_s
        for rate_key in [k for k, rate in self._rates.items() if rate.obsolete(now)]:
            del self._rates[rate_key]
        for sensor in [k for k, bucket in self._buckets.items() if bucket.refilled(now)]:
            del self._buckets[sensor]
        idle = [k for k, at in self._throttled_at.items() if now - at >= THROTTLE_COUNTER_EXPIRY_S]
        for counter in idle:
            del self._throttled_at[counter]
            self.throttle_seconds.pop(counter, None)

    def kept(self) -> int:
        """How many rates, mutation buckets and throttle counters are kept (bounded: the
        module's guarantees)."""
        return len(self._rates) + len(self._buckets) + len(self.throttle_seconds)

    def _resolve(self, kind: str, conn: Connection, client_id: str | None) -> quotas.AppliedQuota | None:
        if conn.principal == _EXEMPT:
            return None
        configured = self._configured()
        if not configured:
            return None
        return quotas.resolve(configured, _KEYS[kind], user=user_of(conn), client_id=client_id or "")

    def _rate(self, kind: str, sensor: quotas.SensorKey) -> quotas.SampledRate:
        rate = self._rates.get((kind, sensor))
        if rate is None:
            rate = quotas.SampledRate(self._windows.num, self._windows.size_s)
            self._rates[(kind, sensor)] = rate
        return rate

    def count_throttle(self, kind: str, conn: Connection, client_id: str | None, throttle_ms: int) -> None:
        """Add a throttle given to a response to the metric (by the quota that gave it)."""
        now = self._clock.monotonic()
        self._sweep(now)
        self._count((kind, user_of(conn), client_id or ""), throttle_ms, now)

    def _count(self, key: tuple[str, str, str], throttle_ms: int, now: float) -> None:
        self.throttle_seconds[key] = self.throttle_seconds.get(key, 0.0) + throttle_ms / 1000
        self._throttled_at[key] = now

    def record(self, kind: str, conn: Connection, client_id: str | None, value: float) -> int:
        """Count `value` (bytes, or percent-seconds for REQUEST) and answer the throttle time."""
        found = self._resolve(kind, conn, client_id)
        if found is None:
            return 0
        now = self._clock.monotonic()
        self._sweep(now)
        rate = self._rate(kind, found.sensor)
        rate.record(value, now)
        return rate.throttle_ms(found.quota, now)

    def admit_connection(self, address: str) -> int:
        """Count a connection accepted from `address`: 0 to serve it, or the milliseconds to hold
        it unread before closing it (over the address's `connection_creation_rate`; not counted)."""
        configured = self._configured()
        quota = quotas.ip_connection_rate(configured, address) if configured else None
        if quota is None:
            return 0
        now = self._clock.monotonic()
        self._sweep(now)
        rate = self._rate(CONNECTION, quotas.SensorKey(address, ""))
        rate.record(1.0, now)
        throttle = rate.throttle_ms(quota, now, most_s=self._windows.size_s)
        if throttle > 0:
            rate.unrecord(1.0, now)
            self._count((CONNECTION, "", ""), throttle, now)  # no user or client id yet: one series
        return throttle

    def meters(self, kind: str, conn: Connection, client_id: str | None) -> bool:
        """Is there a quota of this kind for the connection (anything to record)?"""
        return self._resolve(kind, conn, client_id) is not None

    def capped_fetch(self, request: protocol.Request, conn: Connection) -> protocol.Request:
        """A consumer's Fetch asking for at most what its quota allows in the rate's minimum span
        (`window_num - 1` windows), as Kafka caps it: a fetch that fits is never refused forever."""
        found = self._resolve(FETCH, conn, request.header.client_id)
        if found is None:
            return request
        most = max(1, int(found.quota * max(1, self._windows.num - 1) * self._windows.size_s))
        body = request.body
        if body.max_bytes <= most:
            return request
        capped = dataclasses.replace(body, max_bytes=type(body.max_bytes)(most))
        if body.min_bytes > most:
            capped = dataclasses.replace(capped, min_bytes=type(body.min_bytes)(most))
        return protocol.Request(request.header, capped)

    def unrecord(self, kind: str, conn: Connection, client_id: str | None, value: float) -> None:
        """Take back `value` just recorded (a fetch answered without its records)."""
        found = self._resolve(kind, conn, client_id)
        if found is not None:
            self._rate(kind, found.sensor).unrecord(value, self._clock.monotonic())

    def pending_throttle_ms(self, kind: str, conn: Connection, client_id: str | None) -> int:
        """The throttle time the rate recorded so far gives (nothing recorded)."""
        found = self._resolve(kind, conn, client_id)
        if found is None:
            return 0
        rate = self._rates.get((kind, found.sensor))
        if rate is None:
            return 0
        return rate.throttle_ms(found.quota, self._clock.monotonic())

    # -- controller mutations (KIP-599) -------------------------------------------------------

    def _bucket(self, conn: Connection, client_id: str | None) -> TokenBucket | None:
        found = self._resolve(CONTROLLER_MUTATION, conn, client_id)
        if found is None:
            return None
        now = self._clock.monotonic()
        self._sweep(now)
        burst_s = self._windows.num * self._windows.size_s
        bucket = self._buckets.get(found.sensor)
        if bucket is None:
            bucket = TokenBucket.full(found.quota, now=now, burst_s=burst_s)
            self._buckets[found.sensor] = bucket
        elif bucket.rate != found.quota:
            bucket.set_rate(found.quota, now=now, burst_s=burst_s)
        return bucket

    def mutations_throttle_ms(self, conn: Connection, client_id: str | None) -> int:
        """0 while the client may mutate; else how long until it may again."""
        bucket = self._bucket(conn, client_id)
        if bucket is None:
            return 0
        now = self._clock.monotonic()
        if not bucket.exceeded(now):
            return 0
        return round(bucket.wait_s(now) * 1000)

    def record_mutations(self, conn: Connection, client_id: str | None, partitions: int) -> None:
        bucket = self._bucket(conn, client_id)
        if bucket is not None and partitions > 0:
            bucket.record(partitions, self._clock.monotonic())


# -- around a handler ---------------------------------------------------------------------------

PRODUCE_KEY: Final = 0
FETCH_KEY: Final = 1
# Not counted toward request_percentage (as Kafka exempts them): ApiVersions and the SASL exchange.
_UNMETERED: Final = frozenset({17, 18, 36})
_MUTATIONS: Final = frozenset({19, 20, 37})  # CreateTopics, DeleteTopics, CreatePartitions
# The first version whose client throttles itself (KIP-219): before it, the broker delays the
# response instead. Other APIs: every version we answer.
_CLIENT_THROTTLES_FROM: Final[Mapping[int, int]] = {0: 6, 1: 8, 3: 6, 19: 3, 20: 2, 37: 1}


class _BusyTime:
    """Drives a coroutine and adds up the time its steps run on the event loop (the handler's own
    time, as Kafka's request time on its threads; time spent waiting is not counted)."""

    def __init__(self, awaitable: Awaitable[Any]) -> None:
        self._awaitable = awaitable
        self.seconds = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine = self._awaitable.__await__()
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = coroutine.send(sent) if thrown is None else coroutine.throw(thrown)
            except StopIteration as stop:
                self.seconds += time.perf_counter() - started
                return stop.value
            self.seconds += time.perf_counter() - started
            try:
                sent, thrown = (yield yielded), None
            except BaseException as exc:
                sent, thrown = None, exc


def _fetch_size(request: protocol.Request, response: Any) -> tuple[int, Any]:
    """The response's size on the wire, and the response (a kio body framed once, here)."""
    if isinstance(response, protocol.EncodedResponse):
        return sum(len(p) for p in response.pieces), response
    frame = protocol.encode_response(request.header, response)
    return len(frame), protocol.EncodedResponse([frame])


def _empty_fetch(request: protocol.Request, response: protocol.EncodedResponse, throttle_ms: int) -> Any:
    """The answer of a fetch over its quota: no records, the session kept, the throttle time."""
    version = request.header.api_version
    if version >= fetch_response.FIRST_VERSION:
        return protocol.EncodedResponse(
            fetch_response.encode(
                version,
                correlation_id=request.header.correlation_id,
                error_code=0,
                session_id=fetch_response.session_of(response.pieces),
                topics=[],
                throttle_ms=throttle_ms,
            )
        )
    return protocol.build(
        protocol.response_type(FETCH_KEY, version),
        throttle_time=throttle_ms,
        error_code=0,
        session_id=getattr(request.body, "session_id", 0),
        responses=[],
    )


def _with_throttle(request: protocol.Request, response: Any, throttle_ms: int) -> Any:
    if throttle_ms <= 0 or response is None:
        return response
    if isinstance(response, protocol.EncodedResponse):
        header = request.header
        if header.api_key == FETCH_KEY and header.api_version >= fetch_response.FIRST_VERSION:
            return protocol.EncodedResponse(fetch_response.with_throttle(response.pieces, throttle_ms))
        return response  # Produce: framed with `conn.throttle_ms`; an older Fetch: framed after
    if hasattr(response, "throttle_time"):
        return dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
    return response


async def throttled(
    client_quotas: ClientQuotas,
    handle: Callable[[protocol.Request], Awaitable[Any]],
    conn: Connection,
    request: protocol.Request,
    *,
    consumer_fetch: bool,
) -> Any:
    """The response of `handle()` with its throttle time, the connection set to be muted for it."""
    key = request.header.api_key
    client_id = request.header.client_id
    metered = key not in _UNMETERED
    by_kind = {REQUEST: client_quotas.pending_throttle_ms(REQUEST, conn, client_id) if metered else 0}
    if key == PRODUCE_KEY:
        by_kind[PRODUCE] = client_quotas.record(PRODUCE, conn, client_id, conn.request_bytes)
    throttle = max(by_kind.values())
    conn.throttle_ms = throttle
    if key == FETCH_KEY and consumer_fetch:
        request = client_quotas.capped_fetch(request, conn)
    try:
        if metered and client_quotas.meters(REQUEST, conn, client_id):
            timed = _BusyTime(handle(request))
            response = await timed
            client_quotas.record(REQUEST, conn, client_id, timed.seconds * 100)
        else:
            response = await handle(request)
    finally:
        conn.throttle_ms = 0
    if key == FETCH_KEY and consumer_fetch and client_quotas.meters(FETCH, conn, client_id):
        response = _with_throttle(request, response, throttle)  # a kio body: before it is framed
        size, response = _fetch_size(request, response)
        over = client_quotas.record(FETCH, conn, client_id, size)
        if over > 0:
            client_quotas.unrecord(FETCH, conn, client_id, size)
            by_kind[FETCH] = over
            throttle = max(throttle, over)
            response = _empty_fetch(request, response, throttle)
    if key in _MUTATIONS:
        by_kind[CONTROLLER_MUTATION] = client_quotas.mutations_throttle_ms(conn, client_id)
        throttle = max(throttle, by_kind[CONTROLLER_MUTATION])
    response = _with_throttle(request, response, throttle)
    if throttle > 0:
        client_quotas.count_throttle(max(by_kind, key=lambda k: by_kind[k]), conn, client_id, throttle)
        conn.mute_s = throttle / 1000
        conn.delay_response = request.header.api_version < _CLIENT_THROTTLES_FROM.get(key, 0)
    return response
