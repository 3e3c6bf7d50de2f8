"""Benchmark 2: sustained heartbeats per second from 1,000 simulated brokers.

1,000 brokers register (one dir each) and are unfenced. Then several load-generator processes
(multiprocessing, spawn), each with one aiohttp `ClientSession` and a keep-alive connection per
broker, drive heartbeats for the measurement window (after a warm-up):

* phase "closed loop": every broker heartbeats back to back (the controller's maximum rate);
* phase "fixed rate": the brokers together offer `--rate` heartbeats/s (default 3,000, the goal),
  each broker on its own evenly spaced schedule; latency at that load.

Counted: heartbeats completed inside the window with HTTP 200 and errorCode 0, their latency
(request sent to reply read) p50/p99, errors; the controller's CPU (utime+stime from /proc) and
the load generators' CPU over the window. The machine's cores are shared by the controller and the
load generators, so read the figures with those CPU numbers.

    python -m bench.heartbeats [--quick] [--brokers 1000] [--load-processes 2] [--duration 15]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import time
from typing import Any

import orjson

from bench.common import (
    Figure,
    Workspace,
    base_parser,
    bench_main,
    cpu_seconds,
    log,
    new_id,
    percentile,
    print_table,
    running,
    system_cpu,
)

HEARTBEAT = "/v1/brokers/heartbeat"


def _worker(
    url: str,
    token: str,
    brokers: list[tuple[int, int]],
    offset: int,
    begin: float,
    warmup: float,
    duration: float,
    rate: float,
    out: Any,
) -> None:
    """One load-generator process: `brokers` heartbeat until `begin + warmup + duration`."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    out.send(asyncio.run(_drive(url, token, brokers, offset, begin, warmup, duration, rate)))
    out.close()


async def _drive(
    url: str,
    token: str,
    brokers: list[tuple[int, int]],
    offset: int,
    begin: float,
    warmup: float,
    duration: float,
    rate: float,
) -> dict[str, Any]:
    import aiohttp

    window_start = begin + warmup
    window_end = window_start + duration
    latencies: list[float] = []
    errors: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=len(brokers), force_close=False)
    # In fixed-rate mode each broker heartbeats every `per_broker` seconds (0 = back to back).
    per_broker = len(brokers) / rate if rate > 0 else 0.0
    async with aiohttp.ClientSession(base_url=url, connector=connector, headers=headers) as session:

        async def broker(number: int, broker_id: int, epoch: int, per_broker_period: float) -> None:
            body = orjson.dumps(
                {"brokerId": broker_id, "brokerEpoch": epoch, "currentMetadataOffset": offset}
            )
            clock = time.time
            # Open this broker's keep-alive connection before the run (not counted).
            async with session.post(HEARTBEAT, data=body) as reply:
                await reply.read()
            due = begin + (number * per_broker_period / len(brokers) if per_broker_period else 0.0)
            while True:
                now = clock()
                if per_broker_period:
                    if due > now:
                        await asyncio.sleep(due - now)
                    # Keep the schedule through small delays; after a long stall restart it
                    # from now instead of sending a catch-up burst.
                    due = max(due + per_broker_period, clock())
                elif now < begin:
                    await asyncio.sleep(begin - now)
                sent = clock()
                if sent >= window_end:
                    return
                try:
                    async with session.post(HEARTBEAT, data=body) as reply:
                        data = await reply.read()
                        status = reply.status
                    done = clock()
                    code = orjson.loads(data).get("errorCode") if status == 200 else None
                    outcome = "ok" if code == 0 else f"HTTP {status} errorCode {code}"
                except (aiohttp.ClientError, TimeoutError) as exc:
                    done = clock()
                    outcome = type(exc).__name__
                if window_start <= done < window_end:
                    if outcome == "ok":
                        latencies.append(done - sent)
                    else:
                        errors[outcome] = errors.get(outcome, 0) + 1

        cpu0 = time.process_time()
        wall0 = 0.0
        tasks = [asyncio.create_task(broker(n, b, e, per_broker)) for n, (b, e) in enumerate(brokers)]

        async def window_cpu() -> tuple[float, float]:
            nonlocal cpu0, wall0
            await asyncio.sleep(max(0.0, window_start - time.time()))
            cpu0, wall0 = time.process_time(), time.time()
            await asyncio.sleep(max(0.0, window_end - time.time()))
            return time.process_time() - cpu0, time.time() - wall0

        cpu, wall = await window_cpu()
        await asyncio.gather(*tasks)
    return {"latencies": latencies, "errors": errors, "cpu": cpu, "wall": wall, "pid": os.getpid()}


def _register_all(url: str, token: str, count: int, rng: random.Random) -> list[tuple[int, int]]:
    import aiohttp

    async def go() -> list[tuple[int, int]]:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        out: list[tuple[int, int]] = []
        semaphore = asyncio.Semaphore(100)
        async with aiohttp.ClientSession(base_url=url, headers=headers) as session:

            async def one(broker_id: int) -> None:
                body = {
                    "brokerId": broker_id,
                    "clusterId": "bench",
                    "incarnationId": new_id(rng),
                    "logDirs": [new_id(rng)],
                }
                async with semaphore, session.post("/v1/brokers/register", data=orjson.dumps(body)) as r:
                    reply = orjson.loads(await r.read())
                if reply["errorCode"] != 0:
                    raise RuntimeError(f"register {broker_id}: {reply}")
                out.append((broker_id, reply["brokerEpoch"]))

            await asyncio.gather(*(one(b) for b in range(1, count + 1)))
            end = max(e for _, e in out) + 1

            async def unfence(broker_id: int, epoch: int) -> None:
                body = {"brokerId": broker_id, "brokerEpoch": epoch, "currentMetadataOffset": end}
                async with semaphore, session.post(HEARTBEAT, data=orjson.dumps(body)) as r:
                    reply = orjson.loads(await r.read())
                if reply["errorCode"] != 0 or reply["isFenced"]:
                    raise RuntimeError(f"unfence {broker_id}: {reply}")

            await asyncio.gather(*(unfence(b, e) for b, e in out))
        return sorted(out)

    return asyncio.run(go())


def run_phase(
    url: str,
    token: str,
    brokers: list[tuple[int, int]],
    offset: int,
    controller_pid: int,
    *,
    processes: int,
    warmup: float,
    duration: float,
    rate: float,
) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    # Time for the spawned interpreters to start and open their connections.
    begin = time.time() + 3.0 + 0.5 * processes + len(brokers) / 1000
    slices = [brokers[i::processes] for i in range(processes)]
    pipes, workers = [], []
    for part in slices:
        receive, send = ctx.Pipe(duplex=False)
        share = rate * len(part) / len(brokers) if rate > 0 else 0.0
        worker = ctx.Process(
            target=_worker, args=(url, token, part, offset, begin, warmup, duration, share, send), daemon=True
        )
        worker.start()
        send.close()
        pipes.append(receive)
        workers.append(worker)
    time.sleep(max(0.0, begin + warmup - time.time()))
    cpu_start, wall_start, system_start = cpu_seconds(controller_pid), time.time(), system_cpu()
    time.sleep(max(0.0, begin + warmup + duration - time.time()))
    wall = time.time() - wall_start
    controller_cpu = (cpu_seconds(controller_pid) - cpu_start) / wall
    system_end = system_cpu()
    machine_cpu = (system_end[0] - system_start[0]) / wall
    results = [p.recv() for p in pipes]
    for worker in workers:
        worker.join(timeout=30)
    latencies = sorted(x for r in results for x in r["latencies"])
    errors: dict[str, int] = {}
    for r in results:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    return {
        "ok": len(latencies),
        "rate": len(latencies) / duration,
        "p50": percentile(latencies, 0.5),
        "p99": percentile(latencies, 0.99),
        "max": latencies[-1] if latencies else float("nan"),
        "errors": errors,
        "controller_cpu": controller_cpu,
        "load_cpu": sum(r["cpu"] / r["wall"] for r in results),
        "other_cpu": max(0.0, machine_cpu - controller_cpu - sum(r["cpu"] / r["wall"] for r in results)),
        "per_core": len(latencies) / duration / max(controller_cpu, 1e-9),
    }


def run(args: argparse.Namespace) -> list[Figure]:
    count = args.brokers or (200 if args.quick else 1000)
    duration = args.duration or (3.0 if args.quick else 15.0)
    warmup = 1.0 if args.quick else 3.0
    processes = args.load_processes
    rng = random.Random(1000)
    rows = []
    with Workspace(keep=args.keep) as ws:
        proc = ws.controller("heartbeats")
        with running(proc):
            started = time.perf_counter()
            brokers = _register_all(proc.url, proc.cluster_token, count, rng)
            offset = max(e for _, e in brokers) + count + 1
            log(f"  registered and unfenced {count:,} brokers in {time.perf_counter() - started:.1f} s")
            phases = [
                ("closed loop (back to back)", 0.0),
                (f"fixed rate {args.rate:,.0f}/s offered", args.rate),
            ]
            results = {}
            for label, rate in phases:
                log(
                    f"  phase {label}: {count:,} brokers over {processes} load process(es), "
                    f"{warmup:.0f} s warm-up + {duration:.0f} s window"
                )
                result = run_phase(
                    proc.url,
                    proc.cluster_token,
                    brokers,
                    offset,
                    proc.pid,
                    processes=processes,
                    warmup=warmup,
                    duration=duration,
                    rate=rate,
                )
                results[label] = result
                rows.append(
                    [
                        label,
                        f"{result['rate']:,.0f}",
                        f"{result['p50'] * 1000:.1f} ms",
                        f"{result['p99'] * 1000:.1f} ms",
                        f"{result['max'] * 1000:.1f} ms",
                        sum(result["errors"].values()),
                        f"{result['controller_cpu'] * 100:.0f}%",
                        f"{result['load_cpu'] * 100:.0f}%",
                        f"{result['other_cpu'] * 100:.0f}%",
                        f"{result['per_core']:,.0f}",
                    ]
                )
                if result["errors"]:
                    log(f"    errors: {result['errors']}")
            fenced = sum(1 for b in _brokers(proc) if b["fenced"])
    print()
    print(
        f"{count:,} brokers, {processes} load-generator process(es), {os.cpu_count()} CPU cores shared "
        f"by the controller and the load generators (CPU: 100% = one core; 'other procs' = whatever "
        f"else ran on the machine meanwhile; 'hb per controller CPU-s' = what a dedicated core "
        f"would sustain at that CPU cost); {fenced} broker(s) fenced at the end"
    )
    print_table(
        [
            "phase",
            "ok hb/s",
            "p50",
            "p99",
            "max",
            "errors",
            "controller CPU",
            "load-gen CPU",
            "other procs CPU",
            "hb per controller CPU-s",
        ],
        rows,
    )
    closed = results[phases[0][0]]
    fixed = results[phases[1][0]]
    return [
        Figure(
            name=f"heartbeats/s, {count:,} brokers, closed loop ({processes} load procs)",
            measured=closed["rate"],
            unit="/s",
            goal=3000,
            better="higher",
            detail=f"p50 {closed['p50'] * 1000:.1f} ms, p99 {closed['p99'] * 1000:.1f} ms, "
            f"controller CPU {closed['controller_cpu'] * 100:.0f}%",
        ),
        Figure(
            name="heartbeats per controller CPU-second (closed loop)",
            measured=closed["per_core"],
            unit="/s",
            goal=3000,
            better="higher",
            detail="the rate one dedicated core would sustain at the measured CPU cost per heartbeat",
        ),
        Figure(
            name=f"heartbeats/s completed at {args.rate:,.0f}/s offered",
            measured=fixed["rate"],
            unit="/s",
            goal=3000 * 0.99 if args.rate >= 3000 else args.rate * 0.99,
            better="higher",
            detail=f"p50 {fixed['p50'] * 1000:.1f} ms, p99 {fixed['p99'] * 1000:.1f} ms",
        ),
    ]


def _brokers(proc: Any) -> list[dict[str, Any]]:
    with proc.admin() as admin:
        data: list[dict[str, Any]] = admin.get("/v1/brokers").json()
        return data


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=0, help="simulated brokers (default 1000)")
    parser.add_argument("--load-processes", type=int, default=2, help="load-generator processes")
    parser.add_argument("--duration", type=float, default=0, help="measurement window per phase, s")
    parser.add_argument(
        "--rate", type=float, default=3000, help="offered heartbeats/s of the fixed-rate phase"
    )
    return bench_main("sustained heartbeats", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
