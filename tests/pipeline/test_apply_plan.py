"""`jbodctl apply-plan` against a fake controller and fake brokers on 127.0.0.1: validation,
bounded moves in flight, the throttle, completion by polling, and re-runs that skip done moves."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from jbod_cli import apply_plan
from jbod_cli.cli import main as jbodctl

A, B, C = "ECfE0cOGu8QeL-uJQUw0PA", "YS52lqbOzBs1v5ktyenGFg", "kbdYSiJlsfXNYT4w2PFq3w"


def _move(partition: int, *, broker: int = 1, src: str = A, dst: str = B) -> dict[str, Any]:
    return {
        "topic": "t",
        "partition": partition,
        "brokerId": broker,
        "fromDirectoryId": src,
        "toDirectoryId": dst,
        "bytes": 10,
    }


class FakeBroker:
    """Hosts replicas of topic `t`; a move shows a future replica for `polls` log-dir reads, then switches."""

    def __init__(self, placement: dict[int, str], *, polls: int = 2, refuse: set[int] | None = None) -> None:
        self.placement = placement
        self.moving: dict[int, list[Any]] = {}
        self.polls = polls
        self.refuse = refuse or set()
        self.requests: list[dict[str, Any]] = []
        self.max_in_flight = 0

    async def log_dirs(self, request: web.Request) -> web.Response:
        for partition, state in list(self.moving.items()):
            state[1] -= 1
            if state[1] < 0:
                self.placement[partition] = state[0]
                del self.moving[partition]
        dirs = []
        for d in (A, B, C):
            replicas = [
                {"topic": "t", "partition": p, "sizeBytes": 10, "future": False}
                for p, x in self.placement.items()
                if x == d
            ]
            replicas += [
                {"topic": "t", "partition": p, "sizeBytes": 5, "future": True}
                for p, s in self.moving.items()
                if s[0] == d
            ]
            dirs.append({"path": f"/{d}", "directoryId": d, "state": "online", "replicas": replicas})
        return web.json_response(dirs)

    async def move(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        if body["partition"] in self.refuse:
            return web.json_response({"errorCode": 56, "errorMessage": "log dir is offline"})
        self.moving[body["partition"]] = [body["directoryId"], self.polls]
        self.max_in_flight = max(self.max_in_flight, len(self.moving))
        return web.json_response({"errorCode": 0})


async def _serve(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


async def _cluster(
    broker: FakeBroker, moves: list[apply_plan.PlannedMove], **kw: Any
) -> list[apply_plan.MoveOutcome]:
    broker_app = web.Application()
    broker_app.router.add_get("/v1/log-dirs", broker.log_dirs)
    broker_app.router.add_post("/v1/log-dirs/move", broker.move)
    broker_runner, broker_port = await _serve(broker_app)

    async def brokers(request: web.Request) -> web.Response:
        return web.json_response(
            [{"brokerId": 1, "listeners": [{"name": "http", "host": "127.0.0.1", "port": broker_port}]}]
        )

    controller_app = web.Application()
    controller_app.router.add_get("/v1/brokers", brokers)
    controller_runner, controller_port = await _serve(controller_app)
    try:
        return await apply_plan.apply_plan(
            f"http://127.0.0.1:{controller_port}", "token", moves, poll_interval=0.01, timeout=20, **kw
        )
    finally:
        await broker_runner.cleanup()
        await controller_runner.cleanup()


def test_moves_run_throttled_with_a_bounded_number_in_flight_and_reruns_skip_them() -> None:
    broker = FakeBroker(dict.fromkeys(range(6), A))
    moves = apply_plan.parse_plan({"moves": [_move(p) for p in range(5)]})
    outcomes = asyncio.run(_cluster(broker, moves, max_in_flight=2, max_bytes_per_second=1000))
    assert [o.status for o in outcomes] == ["done"] * 5
    assert broker.max_in_flight == 2
    assert {r["maxBytesPerSecond"] for r in broker.requests} == {1000}
    assert all(broker.placement[p] == B for p in range(5)) and broker.placement[5] == A
    again = asyncio.run(_cluster(broker, moves, max_in_flight=2))
    assert [o.status for o in again] == ["already-done"] * 5
    assert len(broker.requests) == 5, "a re-run sends no move that is done"


def test_refused_and_stale_moves_are_reported() -> None:
    broker = FakeBroker({0: A, 1: A, 2: C}, refuse={1})
    moves = apply_plan.parse_plan({"moves": [_move(0), _move(1), _move(2), _move(3)]})
    outcomes = asyncio.run(_cluster(broker, moves))
    assert [o.status for o in outcomes] == ["done", "failed", "skipped", "skipped"]
    assert "KAFKA_STORAGE_ERROR" in outcomes[1].detail
    assert "not hosted" in outcomes[3].detail


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("{", "is not JSON"),
        (json.dumps([]), "a list 'moves'"),
        (json.dumps({"moves": [{**_move(0), "partition": "0"}]}), "moves[0].partition must be an integer"),
        (
            json.dumps({"moves": [{k: v for k, v in _move(0).items() if k != "bytes"}]}),
            "moves[0] is missing field bytes",
        ),
        (json.dumps({"moves": [_move(0, dst="nope")]}), "moves[0].toDirectoryId"),
        (json.dumps({"moves": [_move(0, dst=A)]}), "to the dir it is in"),
        (json.dumps({"moves": [_move(0), _move(0, dst=C)]}), "moves[1] moves t-0 on broker 1 a second time"),
        (
            json.dumps({"version": 2, "moves": [_move(0)], "reassignments": [{"topic": "t"}]}),
            "reassignments[0].partition must be a partition index",
        ),
        (
            json.dumps(
                {
                    "version": 2,
                    "moves": [],
                    "reassignments": [
                        {
                            "topic": "t",
                            "partition": 0,
                            "replicas": [1, 2],
                            "logDirs": [A],
                            "originalReplicas": [1],
                        }
                    ],
                }
            ),
            "reassignments[0].logDirs must list one directory id per replica",
        ),
        (
            json.dumps(
                {
                    "version": 2,
                    "moves": [],
                    "reassignments": [
                        {
                            "topic": "t",
                            "partition": 0,
                            "replicas": [2, 2],
                            "logDirs": [A, C],
                            "originalReplicas": [1],
                        }
                    ],
                }
            ),
            "reassignments[0].replicas lists a broker twice",
        ),
    ],
)
def test_a_bad_plan_is_one_line_and_a_non_zero_exit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: str, message: str
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(document)
    token = tmp_path / "token"
    token.write_text("secret")
    code = jbodctl(
        ["--token-file", str(token), "--controller", "http://127.0.0.1:9", "apply-plan", str(plan)]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("jbodctl: error: ")
    assert message in err
