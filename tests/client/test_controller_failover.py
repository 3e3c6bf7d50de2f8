"""Both controller links follow the active controller (contract §3.8), over real sockets.

Small aiohttp controllers on 127.0.0.1 play the parts: an active one (answers), a standby (HTTP 200,
errorCode 41 naming the active one on writes, serves reads), one still recovering (HTTP 503,
errorCode 41, `activeController: null`, then active), and a closed port (connection refused).
Covers: `ControllerClient` and `ControllerLink` end at the active controller from a standby, past
a refused URL and past a recovering one; the URL that answered is sticky and a named URL is
learnt; a deadline bounds the retries (errorCode 41 → `ApiError`, every URL refused →
`ControllerUnreachableError` naming them); one refused URL fails at once with today's message;
`parse_controller_urls` and its errors.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from jbod_client import controller as controller_module
from jbod_client.controller import (
    ApiError,
    ControllerClient,
    ControllerLink,
    ControllerUnreachableError,
    parse_controller_urls,
)
from jbod_core.messages import BrokerHeartbeatRequest

TOKEN = "t0ken"
HEARTBEAT = BrokerHeartbeatRequest(broker_id=1, broker_epoch=5, current_metadata_offset=7)


@dataclass
class FakeController:
    """One controller's behaviour: `active`, `standby` (41 naming `active_url` on writes) or
    `recovering` (503 + 41, `activeController: null`, on every call until `recovering_calls`
    calls were answered so, then active)."""

    name: str
    mode: str = "active"
    active_url: str | None = None
    recovering_calls: int = 0
    url: str = ""
    seen: list[str] = field(default_factory=list)

    def not_controller(self) -> dict[str, Any]:
        active = {"nodeId": 1, "url": self.active_url} if self.active_url else None
        return {
            "errorCode": 41,
            "errorMessage": f"{self.name} is not the active controller",
            "activeController": active,
        }

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(f"{request.method} {request.path}")
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        if self.mode == "recovering":
            if len(self.seen) <= self.recovering_calls:
                body = self.not_controller() | {"activeController": None}
                return web.json_response(body, status=503)
            self.mode = "active"
        write = request.method != "GET"
        if self.mode == "standby" and write:
            return web.json_response(self.not_controller())
        if request.path == "/v1/brokers/heartbeat":
            return web.json_response({"errorCode": 0, "isCaughtUp": True, "isFenced": False})
        return web.json_response({"errorCode": 0, "servedBy": self.name})


class Servers:
    """aiohttp servers on an event loop in a thread, so blocking clients can call them."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runners: list[web.AppRunner] = []

    def start(self, controller: FakeController) -> FakeController:
        async def serve() -> str:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", controller.handle)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.runners.append(runner)
            port = runner.addresses[0][1]
            return f"http://127.0.0.1:{port}"

        controller.url = asyncio.run_coroutine_threadsafe(serve(), self.loop).result(5)
        return controller

    def close(self) -> None:
        async def stop() -> None:
            for runner in self.runners:
                await runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def closed_url() -> str:
    """A 127.0.0.1 URL whose port was just closed: connections to it are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def servers() -> Iterator[Servers]:
    running = Servers()
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def active(servers: Servers) -> FakeController:
    return servers.start(FakeController("active"))


@pytest.fixture
def standby(servers: Servers, active: FakeController) -> FakeController:
    return servers.start(FakeController("standby", mode="standby", active_url=active.url + "/"))


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every wait of both links between two attempts of a call, in order (still waited)."""
    delays: list[float] = []

    def sleep(seconds: float) -> None:
        delays.append(seconds)
        time.sleep(seconds)  # fixed wait: the client's own backoff, recorded and still waited

    async def async_sleep(seconds: float) -> None:
        delays.append(seconds)
        await asyncio.sleep(seconds)  # fixed wait: the client's own backoff, recorded and still waited

    monkeypatch.setattr(controller_module, "time", SimpleNamespace(monotonic=time.monotonic, sleep=sleep))
    monkeypatch.setattr(controller_module, "asyncio", SimpleNamespace(sleep=async_sleep))
    return delays


def client(*urls: str, failover_timeout: float = 5.0) -> ControllerClient:
    return ControllerClient(",".join(urls), token=TOKEN, timeout=5.0, failover_timeout=failover_timeout)


# -- parse_controller_urls ----------------------------------------------------------------------


def test_parse_strips_spaces_slashes_empties_and_repeats() -> None:
    assert parse_controller_urls(" http://a:1/ ,, http://b:2,http://a:1") == ["http://a:1", "http://b:2"]
    assert parse_controller_urls(["http://a:1", "http://b:2/,http://c:3"]) == [
        "http://a:1",
        "http://b:2",
        "http://c:3",
    ]
    assert parse_controller_urls("http://a:1") == ["http://a:1"]


@pytest.mark.parametrize("text", ["", " ", ",", " , ,", "/"])
def test_parse_refuses_an_empty_list(text: str) -> None:
    with pytest.raises(ValueError, match="no controller URL"):
        parse_controller_urls(text)


def test_links_refuse_an_empty_list() -> None:
    with pytest.raises(ValueError):
        ControllerClient("", token=TOKEN)
    with pytest.raises(ValueError, match="at least one controller URL"):
        ControllerLink([], token=TOKEN)


# -- ControllerClient (blocking) ----------------------------------------------------------------


def test_a_write_to_a_standby_goes_to_the_active_controller_and_stays_there(
    active: FakeController, standby: FakeController
) -> None:
    with client(standby.url) as admin:
        assert admin.heartbeat(HEARTBEAT).error_code == 0
        assert standby.seen == ["POST /v1/brokers/heartbeat"]
        assert active.seen == ["POST /v1/brokers/heartbeat"]
        # The named URL was learnt and is sticky: the next call (a read) starts there.
        assert admin.urls == [standby.url, active.url]
        assert admin.url == active.url
        assert admin.cluster()["servedBy"] == "active"
        assert admin.create_topic("t", partitions=1, replication_factor=1)["servedBy"] == "active"
    assert standby.seen == ["POST /v1/brokers/heartbeat"]


def test_a_read_is_served_by_a_standby(active: FakeController, standby: FakeController) -> None:
    with client(standby.url, active.url) as admin:
        assert admin.cluster()["servedBy"] == "standby"
        assert admin.url == standby.url


def test_a_refused_url_moves_on_to_the_next_one(active: FakeController) -> None:
    down = closed_url()
    with client(down, active.url) as admin:
        assert admin.heartbeat(HEARTBEAT).error_code == 0
        assert admin.url == active.url
        assert admin.list_topics() == {"errorCode": 0, "servedBy": "active"}
    assert active.seen == ["POST /v1/brokers/heartbeat", "GET /v1/topics"]


def test_a_recovering_controller_is_retried_after_a_backoff(servers: Servers, slept: list[float]) -> None:
    recovering = servers.start(FakeController("recovering", mode="recovering", recovering_calls=3))
    with client(recovering.url) as admin:
        assert admin.create_topic("t", partitions=1)["servedBy"] == "recovering"
    assert len(recovering.seen) == 4
    assert slept == [0.1, 0.2, 0.2]  # a backoff before each of the three retries, no spinning


def test_41_with_no_active_controller_gives_up_at_the_deadline(servers: Servers, slept: list[float]) -> None:
    recovering = servers.start(FakeController("recovering", mode="recovering", recovering_calls=10**6))
    started = time.monotonic()
    with client(recovering.url, failover_timeout=0.6) as admin, pytest.raises(ApiError) as info:
        admin.create_topic("t", partitions=1)
    assert info.value.code == 41
    assert info.value.status == 503
    assert "recovering is not the active controller" in str(info.value)
    assert recovering.url in str(info.value)
    # Retried after every answer until the deadline, never waiting past it, then given up.
    assert len(recovering.seen) == len(slept) + 1 >= 2, slept
    assert all(0 < delay <= 0.2 for delay in slept) and sum(slept) <= 0.6, slept
    assert time.monotonic() - started >= 0.6  # not before the deadline


def test_two_standbys_naming_each_other_give_up_at_the_deadline(servers: Servers) -> None:
    first = servers.start(FakeController("first", mode="standby"))
    second = servers.start(FakeController("second", mode="standby", active_url=first.url))
    first.active_url = second.url
    with client(first.url, failover_timeout=0.5) as admin, pytest.raises(ApiError) as info:
        admin.heartbeat(HEARTBEAT)
    assert info.value.code == 41
    # Backoffs between the repeated redirects: a handful of calls, no spinning.
    assert 2 <= len(first.seen) + len(second.seen) < 20


def test_every_url_refused_fails_at_once_naming_them(slept: list[float]) -> None:
    down = [closed_url(), closed_url()]
    with client(*down) as admin, pytest.raises(ControllerUnreachableError) as info:
        admin.brokers()
    assert sum(slept) == 0, slept  # each URL tried once, without a backoff
    message = str(info.value)
    assert message.startswith("no controller answered GET /v1/brokers")
    assert all(url in message for url in down)
    # The cause chain still ends at the refused connection (what jbodctl's hints read).
    assert isinstance(info.value.__cause__, ControllerUnreachableError)
    assert info.value.__cause__.__cause__ is not None


def test_one_refused_url_fails_as_before() -> None:
    down = closed_url()
    with client(down) as admin, pytest.raises(ControllerUnreachableError) as info:
        admin.cluster()
    assert str(info.value).startswith(f"cannot reach the controller at {down}: ")


# -- ControllerLink (asyncio) -------------------------------------------------------------------


@pytest.mark.asyncio
async def test_the_link_follows_a_standby_past_a_refused_url(
    active: FakeController, standby: FakeController
) -> None:
    down = closed_url()
    link = ControllerLink(f"{down},{standby.url}", token=TOKEN, timeout=5.0)
    try:
        reply = await link.heartbeat(HEARTBEAT)
        assert reply.error_code == 0 and not reply.is_fenced
        assert link.url == active.url
        assert link.urls == [down, standby.url, active.url]
        page = await link.metadata(from_offset=0, max_wait_ms=0, max_records=10)
        assert page["servedBy"] == "active"  # sticky
    finally:
        await link.aclose()
    assert standby.seen == ["POST /v1/brokers/heartbeat"]
    assert active.seen == ["POST /v1/brokers/heartbeat", "GET /v1/metadata"]


@pytest.mark.asyncio
async def test_the_link_waits_for_a_recovering_controller(servers: Servers) -> None:
    recovering = servers.start(FakeController("recovering", mode="recovering", recovering_calls=2))
    link = ControllerLink([recovering.url], token=TOKEN, timeout=5.0)
    try:
        assert (await link.heartbeat(HEARTBEAT)).error_code == 0
    finally:
        await link.aclose()
    assert len(recovering.seen) == 3


@pytest.mark.asyncio
async def test_the_link_gives_up_at_the_deadline(servers: Servers, slept: list[float]) -> None:
    recovering = servers.start(FakeController("recovering", mode="recovering", recovering_calls=10**6))
    down = closed_url()
    link = ControllerLink([down, recovering.url], token=TOKEN, timeout=5.0, failover_timeout=0.5)
    started = time.monotonic()
    try:
        with pytest.raises(ApiError) as info:
            await link.heartbeat(HEARTBEAT)
    finally:
        await link.aclose()
    assert info.value.code == 41
    # Past the refused URL at once, a backoff after a 41; never waiting past the deadline. How many
    # 41s fit in 0.5 s depends on the machine's load (a CI run saw one): repeated backoffs are
    # test_the_link_waits_for_a_recovering_controller's.
    assert recovering.seen and slept[0] == 0.0, slept
    assert 0 < max(slept) <= 0.2 and sum(slept) <= 0.5, slept
    assert time.monotonic() - started >= 0.5  # not before the deadline


@pytest.mark.asyncio
async def test_the_link_raises_unreachable_when_every_url_is_refused() -> None:
    down = [closed_url(), closed_url()]
    link = ControllerLink(down, token=TOKEN, timeout=5.0)
    try:
        with pytest.raises(ControllerUnreachableError, match="no controller answered POST"):
            await link.heartbeat(HEARTBEAT)
        # A transport failure still moves the next call on (as before there were several URLs).
        assert link.url in down
    finally:
        await link.aclose()
