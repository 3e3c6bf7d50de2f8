"""Shared plumbing of the benchmarks: a timed real controller process, a small HTTP client,
/proc readings, figures and their table.

Every benchmark starts its own `jbod-controller` child process (through `tests.harness`) on a
fresh temp data dir, listening on 127.0.0.1 on a free port, and removes both when it is done.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from tests.harness import _LISTENING, ControllerProcess

from jbod_core.ids import random_uuid

# Generous: a benchmark's setup can take minutes, and no broker should be fenced meanwhile
# unless a benchmark asks for it.
LONG_SESSION_MS = 3_600_000
CLK_TCK = os.sysconf("SC_CLK_TCK")
JSON = {"Content-Type": "application/json"}
ASSIGN_BATCH = 2250  # the agent's batch size (protocol §4.3)
MAX_PER_REQUEST = 10_000  # protocol §2


class BenchError(RuntimeError):
    """The controller answered something a benchmark did not expect."""


# -- figures ----------------------------------------------------------------------------------


@dataclass
class Figure:
    """One measured figure against its goal. `better` is "lower" or "higher"."""

    name: str
    measured: float
    unit: str
    goal: float
    better: str = "lower"
    detail: str = ""

    @property
    def met(self) -> bool:
        return self.measured < self.goal if self.better == "lower" else self.measured >= self.goal

    def goal_text(self) -> str:
        return f"{'<' if self.better == 'lower' else '>='} {fmt_value(self.goal, self.unit)}"

    def measured_text(self) -> str:
        return fmt_value(self.measured, self.unit)


def fmt_value(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"
    if unit == "bytes":
        return f"{value / 2**20:.0f} MiB"
    if unit == "/s":
        return f"{value:,.0f} /s"
    return f"{value:,.3g} {unit}".strip()


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for number, row in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if number == 0:
            print("  ".join("-" * w for w in widths))


def print_figures(figures: Sequence[Figure]) -> None:
    print_table(
        ["figure", "measured", "goal", "met?"],
        [[f.name, f.measured_text(), f.goal_text(), "yes" if f.met else "NO"] for f in figures],
    )


def summarise(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "max": ordered[-1], "min": ordered[0]}


def percentile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of an already sorted sequence (nearest rank)."""
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


# -- command line -----------------------------------------------------------------------------


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="scaled-down smoke run (< 60 s)")
    parser.add_argument("--results-json", type=Path, help="also write the figures here (for run_all)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dirs (for debugging)")
    return parser


def bench_main(
    title: str, parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace], list[Figure]]
) -> int:
    args = parser.parse_args()
    print(f"== {title}{' (quick)' if args.quick else ''} ({machine_load()})", flush=True)
    started = time.perf_counter()
    busy0, total0 = system_cpu()
    figures = run(args)
    busy1, total1 = system_cpu()
    print(
        f"\n{title}: done in {time.perf_counter() - started:.1f} s; machine CPU busy "
        f"{(busy1 - busy0) / (total1 - total0) * 100:.0f}% over the run (all processes), {machine_load()}"
    )
    print_figures(figures)
    if args.results_json:
        args.results_json.write_text(json.dumps([asdict(f) for f in figures], indent=2))
    return 0


# -- processes --------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (from /proc/<pid>/stat)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def system_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine, summed over cores (from /proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = values
    busy = user + nice + system + irq + softirq + steal
    return busy / CLK_TCK, (busy + idle + iowait) / CLK_TCK


def machine_load() -> str:
    """The load average and the busiest other processes, so readers can judge contention."""
    load = Path("/proc/loadavg").read_text().split()[:3]
    return f"load average {' '.join(load)} on {os.cpu_count()} cores"


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in bytes (from /proc/<pid>/status)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


# Runs the controller's own entry point (what the `jbod-controller` console script runs) with a
# `gc.callbacks` hook that logs every collection of the oldest generation, and any other one
# longer than 5 ms, to stderr: "BENCH-GC <generation> <seconds> <unix time at its end>".
GC_TRACE = """
import gc, sys, time
_started = [0.0]
def _trace(phase, info):
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    took = time.perf_counter() - _started[0]
    if info["generation"] == 2 or took > 0.005:
        sys.stderr.write(f"BENCH-GC {info['generation']} {took:.6f} {time.time():.6f}\\n")
gc.callbacks.append(_trace)
from jbod_controller.cli import main
sys.exit(main())
"""


@dataclass
class BenchController(ControllerProcess):
    """`tests.harness.ControllerProcess`, with the start timed closely (10 ms polls of /readyz)
    and, with `gc_trace`, the garbage collector's pauses logged (see `GC_TRACE`)."""

    started_at: float = 0.0
    listening_at: float = 0.0
    ready_at: float = 0.0
    log_level: str = "INFO"
    gc_trace: bool = False

    def command(self) -> list[str]:
        command = [*super().command(), "--log-level", self.log_level]
        if self.gc_trace:
            return [sys.executable, "-c", GC_TRACE, *command[1:]]
        return command

    def gc_pauses(self, since: float, until: float) -> list[tuple[int, float]]:
        """(generation, seconds) of the logged collections that ended between two `time.time()`s."""
        out = []
        for line in self.stderr().splitlines():
            if line.startswith("BENCH-GC "):
                _, generation, took, ended = line.split()
                if since <= float(ended) <= until:
                    out.append((int(generation), float(took)))
        return out

    def start(self, timeout: float = 600.0) -> BenchController:
        self.stderr_path = self.data_dir.parent / f"{self.data_dir.name}.stderr.log"
        with open(self.stderr_path, "a") as stderr:
            self.started_at = time.perf_counter()
            self.process = subprocess.Popen(
                self.command(),
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise BenchError(f"jbod-controller exited early ({self.process.wait()}): {self.stderr()}")
            match = _LISTENING.search(line)
            if match:
                self.url, self.port = match.group(1), int(match.group(2))
                self.listening_at = time.perf_counter()
                break
            if time.monotonic() > deadline:
                raise BenchError("jbod-controller did not print its address")
        with httpx.Client(base_url=self.url, timeout=5) as probe:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise BenchError(f"jbod-controller exited ({self.process.returncode}): {self.stderr()}")
                with contextlib.suppress(httpx.HTTPError):
                    if probe.get("/readyz").status_code == 200:
                        self.ready_at = time.perf_counter()
                        return self
                time.sleep(0.01)
        raise BenchError(f"jbod-controller not ready after {timeout} s: {self.stderr()[-2000:]}")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


@dataclass
class Workspace:
    """A temp dir that holds data dirs; removed on exit unless `keep`."""

    keep: bool = False
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="jbod-bench-")))
    controllers: list[BenchController] = field(default_factory=list)

    def controller(
        self,
        name: str,
        *,
        session_timeout_ms: int = LONG_SESSION_MS,
        extra_args: Sequence[str] = (),
        gc_trace: bool = False,
    ) -> BenchController:
        proc = BenchController(
            data_dir=self.root / name,
            cluster_id="bench",
            session_timeout_ms=session_timeout_ms,
            extra_args=list(extra_args),
            gc_trace=gc_trace,
        )
        self.controllers.append(proc)
        return proc

    def copy(self, source: str, target: str) -> None:
        shutil.copytree(self.root / source, self.root / target)
        (self.root / target / ".lock").unlink(missing_ok=True)

    def remove(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)
        (self.root / f"{name}.stderr.log").unlink(missing_ok=True)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: Any) -> None:
        for proc in self.controllers:
            proc.kill()
        if self.keep:
            print(f"(kept {self.root})")
        else:
            shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def running(proc: BenchController, timeout: float = 600.0) -> Iterator[BenchController]:
    proc.start(timeout=timeout)
    try:
        yield proc
    finally:
        proc.kill()


# -- HTTP -------------------------------------------------------------------------------------


def new_id(rng: random.Random) -> str:
    return str(random_uuid(rng))


class Api:
    """Blocking calls to one controller, checking every error code."""

    def __init__(self, proc: ControllerProcess, *, timeout: float = 600.0) -> None:
        self.proc = proc
        self.admin = proc.admin(timeout)
        self.broker = proc.broker(timeout)

    def close(self) -> None:
        self.admin.close()
        self.broker.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @staticmethod
    def _send(client: httpx.Client, path: str, body: Any) -> dict[str, Any]:
        reply = client.post(path, content=orjson.dumps(body), headers=JSON)
        if reply.status_code != 200:
            raise BenchError(f"POST {path}: HTTP {reply.status_code}: {reply.text[:500]}")
        data: dict[str, Any] = orjson.loads(reply.content)
        return data

    def post(self, path: str, body: Any, *, admin: bool = False, check: bool = True) -> dict[str, Any]:
        data = self._send(self.admin if admin else self.broker, path, body)
        if check and data.get("errorCode", 0) != 0:
            raise BenchError(f"POST {path}: errorCode {data['errorCode']}: {data.get('errorMessage')}")
        return data

    def get(self, path: str) -> Any:
        reply = self.admin.get(path)
        if reply.status_code != 200:
            raise BenchError(f"GET {path}: HTTP {reply.status_code}: {reply.text[:500]}")
        return orjson.loads(reply.content)

    def end_offset(self) -> int:
        value: int = self.get("/v1/cluster")["metadataEndOffset"]
        return value

    def register(self, broker_id: int, incarnation: str, dirs: Sequence[str]) -> int:
        reply = self.post(
            "/v1/brokers/register",
            {
                "brokerId": broker_id,
                "clusterId": "bench",
                "incarnationId": incarnation,
                "logDirs": list(dirs),
            },
        )
        epoch: int = reply["brokerEpoch"]
        return epoch

    def heartbeat(
        self, broker_id: int, epoch: int, offset: int | None = None, **extra: Any
    ) -> dict[str, Any]:
        body = {
            "brokerId": broker_id,
            "brokerEpoch": epoch,
            "currentMetadataOffset": self.end_offset() if offset is None else offset,
            **extra,
        }
        return self.post("/v1/brokers/heartbeat", body)

    def unfence(self, broker_id: int, epoch: int) -> None:
        reply = self.heartbeat(broker_id, epoch)
        if reply["isFenced"]:
            raise BenchError(f"broker {broker_id} stayed fenced: {reply}")

    def create_topic(self, name: str, assignment: list[list[int]]) -> str:
        reply = self.post("/v1/topics", {"name": name, "replicaAssignment": assignment}, admin=True)
        topic_id: str = reply["topicId"]
        return topic_id

    def assign(
        self,
        broker_id: int,
        epoch: int,
        placements: Sequence[tuple[str, str, int]],
        *,
        batch: int = ASSIGN_BATCH,
    ) -> int:
        """Send (dir, topicId, partition) placements in batches, one request in flight; returns requests."""
        requests = 0
        for start in range(0, len(placements), batch):
            body = assignment_body(broker_id, epoch, placements[start : start + batch])
            reply = self.post("/v1/assignments", body)
            bad = [
                (d["id"], t["topicId"], p)
                for d in reply["directories"]
                for t in d["topics"]
                for p in t["partitions"]
                if p["errorCode"] != 0
            ]
            if bad:
                raise BenchError(f"assignments of broker {broker_id} refused: {bad[:5]}")
            requests += 1
        return requests


def assignment_body(broker_id: int, epoch: int, placements: Sequence[tuple[str, str, int]]) -> dict[str, Any]:
    grouped: dict[str, dict[str, list[dict[str, int]]]] = {}
    for directory, topic_id, index in placements:
        grouped.setdefault(directory, {}).setdefault(topic_id, []).append({"partitionIndex": index})
    return {
        "brokerId": broker_id,
        "brokerEpoch": epoch,
        "directories": [
            {"id": d, "topics": [{"topicId": t, "partitions": parts} for t, parts in topics.items()]}
            for d, topics in grouped.items()
        ],
    }


def log(message: str) -> None:
    print(message, flush=True)


def python() -> str:
    return sys.executable
