"""Shared plumbing of the benchmarks: a timed real controller process, a small HTTP client,
/proc readings, figures and their table.

Every benchmark starts its own `jbod-controller` child process (through `tests.harness`) on a
fresh temp data dir, listening on 127.0.0.1 on a free port, and removes both when it is done.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from jbod_core.ids import UNASSIGNED_DIR_TEXT, random_uuid
from jbod_local.processes import LISTENING_LINE
from tests.harness import ControllerProcess

if TYPE_CHECKING:
    from jbod_local.processes import LocalBroker

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
        if self.goal == float("inf"):
            return "(no goal)"  # a figure printed for reference: always "met"
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
            match = LISTENING_LINE.search(line)
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


# -- broker agents ----------------------------------------------------------------------------
#
# The agent benchmarks run real `jbod-agent` processes (`jbod_local.processes.LocalBroker`) against a
# `BenchController`. Their log dirs are plain directories or loop-mounted ext4 volumes
# (`tests.fs.loop_ext4`, root only) that can really fail. Every agent is stopped and every volume
# unmounted and detached when `agent_cluster` exits, also on an error, Ctrl-C or SIGTERM.

AGENT_LOG_TIME = "%Y-%m-%d %H:%M:%S,%f"  # logging's default asctime, as the agent writes it


def can_loop_mount() -> bool:
    """Root, and the tools `tests.fs.loop_ext4` needs."""
    tools = ("mkfs.ext4", "losetup", "mount", "umount", "blockdev")
    return os.geteuid() == 0 and all(shutil.which(t) for t in tools)


def wait_until(
    condition: Callable[[], Any], *, timeout: float = 60.0, interval: float = 0.02, what: str = "condition"
) -> Any:
    """Poll `condition` until it returns something truthy (returned); `BenchError` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@dataclass(frozen=True)
class LogLine:
    at: float  # unix time of the line (millisecond resolution)
    text: str


def agent_log(path: Path, *, offset: int = 0, contains: str = "") -> list[LogLine]:
    """The lines of an agent log from byte `offset` that contain `contains`, with their times."""
    out = []
    with open(path, "rb") as handle:
        handle.seek(offset)
        for raw in handle:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if contains not in line:
                continue
            try:
                at = datetime.datetime.strptime(line[:23], AGENT_LOG_TIME).timestamp()
            except ValueError:
                continue  # a continuation line (a traceback) has no time
            out.append(LogLine(at, line))
    return out


def log_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


class AgentCluster:
    """One `BenchController` and `jbod-agent` processes; see `agent_cluster`."""

    def __init__(self, ws: Workspace, controller: BenchController, stack: contextlib.ExitStack) -> None:
        from jbod_client.controller import ControllerClient

        self.ws = ws
        self.controller = controller
        self.stack = stack
        self.admin = ControllerClient(controller.url, token=controller.admin_token, timeout=600)
        stack.callback(self.admin.close)
        self.brokers: dict[int, LocalBroker] = {}
        self.mounts: dict[tuple[int, int], Any] = {}  # (node, dir index) -> tests.fs.LoopMount
        self._mount_stacks: dict[tuple[int, int], contextlib.ExitStack] = {}

    # -- volumes ------------------------------------------------------------------------------

    def _mount(self, key: tuple[int, int], path: Path, size_mb: int) -> None:
        from tests.fs import loop_ext4

        own = contextlib.ExitStack()
        self.mounts[key] = own.enter_context(loop_ext4(path, size_mb=size_mb))
        self._mount_stacks[key] = own

    def _unmount(self, key: tuple[int, int]) -> None:
        own = self._mount_stacks.pop(key, None)
        self.mounts.pop(key, None)
        if own is not None:
            own.close()

    def unmount_all(self) -> None:
        for key in list(self._mount_stacks):
            self._unmount(key)

    def replace_volume(self, node_id: int, index: int, *, size_mb: int = 32) -> Path:
        """Pull a loop volume out (lazy unmount, detach) and mount a new, empty one at its path."""
        path = Path(self.mounts[(node_id, index)].path)
        self._unmount((node_id, index))
        self._mount((node_id, index), path, size_mb)
        return path

    # -- brokers ------------------------------------------------------------------------------

    def add_broker(
        self,
        node_id: int,
        *,
        dirs: int,
        loop: bool = False,
        size_mb: int = 32,
        start: bool = True,
        settings: dict[str, str] | None = None,
    ) -> LocalBroker:
        """A broker whose `dirs` log dirs are loop ext4 volumes (`loop`) or plain directories,
        formatted, and started unless `start` is false. `settings` override `LocalBroker`'s
        defaults (heartbeat 500 ms, probe interval 250 ms) by Kafka key name."""
        from jbod_local.processes import LocalBroker

        work = self.ws.root / f"broker-{node_id}"
        paths = []
        for index in range(dirs):
            path = work / f"d{index}"
            if loop:
                self._mount((node_id, index), path, size_mb)
            else:
                path.mkdir(parents=True, exist_ok=True)
            paths.append(path)
        broker = LocalBroker(
            node_id=node_id,
            work_dir=work,
            log_dirs=paths,
            controller_url=self.controller.url,
            cluster_token_file=self.controller.data_dir / "cluster.token",
            cluster_id=self.controller.cluster_id,
            settings=dict(settings or {}),
        )
        self.brokers[node_id] = broker
        broker.format()
        if start:
            broker.start()
        return broker

    def stop_broker(self, node_id: int) -> int | None:
        """SIGTERM (the agent does a controlled shutdown), SIGKILL after 30 s; the exit code."""
        return self.brokers[node_id].stop(grace=30)

    def stop_all(self) -> None:
        for broker in self.brokers.values():
            with contextlib.suppress(Exception):
                broker.stop(grace=10)
            broker.kill()

    def pid(self, node_id: int) -> int:
        process = self.brokers[node_id].process
        assert process is not None
        return process.pid

    def token(self) -> str:
        return self.controller.cluster_token

    # -- the controller's view ----------------------------------------------------------------

    def broker_info(self, node_id: int) -> dict[str, Any]:
        return self.admin.broker(node_id)

    def unfenced(self, node_id: int, *, not_incarnation: str | None = None) -> dict[str, Any] | None:
        """The broker's registration if it is registered and unfenced (and, with
        `not_incarnation`, a newer incarnation than that one), else None."""
        from jbod_client.controller import ApiError

        try:
            info = self.broker_info(node_id)
        except ApiError:
            return None
        if info["fenced"] or (not_incarnation is not None and info["incarnationId"] == not_incarnation):
            return None
        return info

    def wait_unfenced(self, *nodes: int, timeout: float = 120.0) -> None:
        for node in nodes:
            wait_until(
                functools.partial(self.unfenced, node), timeout=timeout, what=f"broker {node} unfenced"
            )

    def placed(self, topic: str) -> bool:
        parts = self.admin.describe_topic(topic)["partitions"]
        return all(d != UNASSIGNED_DIR_TEXT for p in parts for d in p["directories"])

    def log_dirs(self, node_id: int) -> list[dict[str, Any]]:
        reply = httpx.get(
            f"{self.brokers[node_id].url}/v1/log-dirs",
            headers={"Authorization": f"Bearer {self.token()}"},
            timeout=120,
            trust_env=False,
        )
        if reply.status_code != 200:
            raise BenchError(f"GET /v1/log-dirs of broker {node_id}: HTTP {reply.status_code}")
        result: list[dict[str, Any]] = reply.json()
        return result

    def create_topics(self, prefix: str, assignment: Sequence[Sequence[int]]) -> list[str]:
        """Topics `<prefix>-0`, `<prefix>-1`, ... of at most 10,000 partitions each (one create
        request each) that together hold `assignment`; returns their names."""
        names = []
        for start in range(0, len(assignment), MAX_PER_REQUEST):
            name = f"{prefix}-{start // MAX_PER_REQUEST}"
            reply = self.admin.create_topic(
                name, replica_assignment=assignment[start : start + MAX_PER_REQUEST]
            )
            if reply.get("errorCode", 0) != 0:
                raise BenchError(f"create topic {name}: {reply}")
            names.append(name)
        return names


@contextlib.contextmanager
def agent_cluster(
    ws: Workspace, name: str = "controller", *, session_timeout_ms: int = 9000
) -> Iterator[AgentCluster]:
    """A running controller for agents; on exit every agent is stopped (SIGTERM, then SIGKILL),
    every loop volume unmounted and detached, and the controller killed. SIGTERM to the benchmark
    is turned into KeyboardInterrupt meanwhile, so that the clean-up runs."""

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        with contextlib.ExitStack() as stack:
            controller = ws.controller(name, session_timeout_ms=session_timeout_ms)
            stack.callback(controller.kill)
            controller.start()
            cluster = AgentCluster(ws, controller, stack)
            stack.callback(cluster.unmount_all)  # runs after the agents are stopped (LIFO)
            stack.callback(cluster.stop_all)
            yield cluster
    finally:
        signal.signal(signal.SIGTERM, previous)


class Responsiveness:
    """Polls `GET <url>/healthz` (every 50 ms, in a thread) and keeps the longest time between two
    answers: how long the agent's event loop was blocked, at most, while it ran."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.longest = 0.0
        self.answers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="responsiveness", daemon=True)

    def _run(self) -> None:
        last = time.perf_counter()
        with httpx.Client(timeout=120, trust_env=False) as client:
            while not self._stop.is_set():
                with contextlib.suppress(httpx.HTTPError):
                    client.get(f"{self.url}/healthz")
                    now = time.perf_counter()
                    self.longest = max(self.longest, now - last)
                    self.answers += 1
                    last = now
                self._stop.wait(0.05)

    def __enter__(self) -> Responsiveness:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=130)


# -- data plane -------------------------------------------------------------------------------
#
# Helpers of the data-plane benchmarks (produce_throughput, failover, replica_move): where a
# replica sits, the brokers' Kafka listeners, and a light producer that times every record.


def admin_token_setting(cluster: AgentCluster) -> dict[str, str]:
    """The broker setting that makes agents accept the controller's admin token: the `admin`
    principal's password on their Kafka listeners (and a token of their HTTP API)."""
    return {"admin.token.file": str(cluster.controller.data_dir / "admin.token")}


def kafka_config(cluster: AgentCluster, **extra: Any) -> dict[str, Any]:
    """librdkafka's configuration of the `admin` principal (SASL/SCRAM-SHA-512, the admin token)
    for every broker's SASL_PLAINTEXT listener (`LocalBroker`'s default listeners), with `extra`
    on top. The brokers need `admin_token_setting`."""
    from jbod_client.kafka_config import KafkaSecurity

    return {
        "bootstrap.servers": ",".join(
            b.kafka["SASL_PLAINTEXT"] for b in cluster.brokers.values() if "SASL_PLAINTEXT" in b.kafka
        ),
        **KafkaSecurity.admin(cluster.controller.admin_token).librdkafka_config(),
        **extra,
    }


def create_topic(
    cluster: AgentCluster, name: str, *, partitions: int, rf: int, configs: dict[str, str] | None = None
) -> dict[str, Any]:
    """Create a topic, wait until every replica is placed and every ISR is full; its description."""
    reply = cluster.admin.create_topic(name, partitions=partitions, replication_factor=rf, configs=configs)
    if reply.get("errorCode", 0) != 0:
        raise BenchError(f"create topic {name}: {reply}")
    wait_until(lambda: cluster.placed(name), timeout=120, what=f"placements of {name}")
    return full_isr(cluster, name, timeout=120)


def full_isr(cluster: AgentCluster, name: str, *, timeout: float = 120.0) -> dict[str, Any]:
    """Wait until every partition of `name` has a leader and all its replicas in the ISR."""

    def check() -> dict[str, Any] | None:
        topic = cluster.admin.describe_topic(name)
        ok = all(p["leader"] >= 0 and set(p["isr"]) == set(p["replicas"]) for p in topic["partitions"])
        return topic if ok else None

    found: dict[str, Any] = wait_until(check, timeout=timeout, interval=0.05, what=f"full ISRs of {name}")
    return found


def replica_dir(topic: dict[str, Any], partition: int, broker: int) -> str:
    """The directory id the controller names for `broker`'s replica of a partition."""
    part = topic["partitions"][partition]
    directory: str = part["directories"][part["replicas"].index(broker)]
    return directory


def dir_index(cluster: AgentCluster, node_id: int, directory: str) -> int:
    """The index (in the broker's `log_dirs`) of the dir with this id, as the broker reports it."""
    paths = {str(p): i for i, p in enumerate(cluster.brokers[node_id].log_dirs)}
    for entry in cluster.log_dirs(node_id):
        if entry["directoryId"] == directory and entry["path"] in paths:
            return paths[entry["path"]]
    raise BenchError(f"broker {node_id} reports no log dir {directory}")


@dataclass(slots=True)
class TimedRecord:
    """One record of a `PacedProducer`: when it was sent and acknowledged (time.monotonic(); NaN
    while pending or when it failed), its offset, and its error (librdkafka's) if it failed."""

    sent_at: float
    acked_at: float = float("nan")
    offset: int = -1
    error: str | None = None


#: The paced producer's librdkafka settings beyond the cluster's: Kafka's producer defaults
#: (idempotent, acks=all), each record sent at once.
PACED_PRODUCER: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 0,
    "message.timeout.ms": 60_000,
}


class PacedProducer:
    """A confluent-kafka (librdkafka) producer (`PACED_PRODUCER`) in its own thread, sending one
    `record_bytes` record to one partition every `interval` seconds (open loop: a stall is not
    made up with a burst) and timing every record (`records`): sent when handed to librdkafka,
    acknowledged when its delivery report is served (the thread serves them while it waits)."""

    def __init__(
        self,
        cluster: AgentCluster,
        topic: str,
        partition: int,
        *,
        interval: float,
        record_bytes: int = 1024,
    ) -> None:
        self.config = kafka_config(cluster, **PACED_PRODUCER)
        self.topic = topic
        self.partition = partition
        self.interval = interval
        self.value = os.urandom(record_bytes)
        self.records: list[TimedRecord] = []
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="paced-producer", daemon=True)

    def start(self) -> PacedProducer:
        self._thread.start()
        if not self._ready.wait(60) or self.error is not None:
            raise BenchError(f"the producer did not start: {self.error!r}")
        return self

    def stop(self) -> None:
        """Stop sending, wait for the records in flight (at most the delivery timeout)."""
        self._stop.set()
        self._thread.join(timeout=120)

    def __enter__(self) -> PacedProducer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _run(self) -> None:
        from confluent_kafka import Producer

        def done(record: TimedRecord, err: Any, msg: Any) -> None:
            if err is not None:
                record.error = str(err)
                return
            record.acked_at = time.monotonic()
            record.offset = msg.offset()

        try:
            producer = Producer(self.config)
            producer.list_topics(self.topic, timeout=30)  # metadata (and a connection) before the clock
            self._ready.set()
            next_at = time.monotonic()
            while not self._stop.is_set():
                now = time.monotonic()
                if now < next_at:
                    producer.poll(next_at - now)  # serves delivery reports; returns early on one
                    continue
                next_at = max(next_at + self.interval, now)
                record = TimedRecord(sent_at=time.monotonic())
                self.records.append(record)
                producer.produce(
                    self.topic,
                    self.value,
                    partition=self.partition,
                    on_delivery=functools.partial(done, record),
                )
                producer.poll(0)
            producer.flush(PACED_PRODUCER["message.timeout.ms"] / 1000 + 10)
        except BaseException as exc:  # reported by `start` / the benchmark
            self.error = exc
            self._ready.set()

    def settled(self, start: float, end: float, *, timeout: float = 120.0) -> list[TimedRecord]:
        """The records sent in [start, end), once each is acknowledged or failed (waits for them:
        a record still in flight when a window ends is often the slowest one)."""
        wait_until(
            lambda: all(r.acked_at == r.acked_at or r.error is not None for r in self.window(start, end)),
            timeout=timeout,
            interval=0.01,
            what="the records of the window to be acknowledged",
        )
        return self.window(start, end)

    def window(self, start: float, end: float) -> list[TimedRecord]:
        """The records sent in [start, end) (time.monotonic())."""
        return [r for r in list(self.records) if start <= r.sent_at < end]


def latency_stats(records: Sequence[TimedRecord]) -> dict[str, float]:
    """p50 / p99 / max send → ack seconds of the acknowledged records; counts of all and failed."""
    values = sorted(r.acked_at - r.sent_at for r in records if r.acked_at == r.acked_at)
    return {
        "p50": percentile(values, 0.5),
        "p99": percentile(values, 0.99),
        "max": values[-1] if values else float("nan"),
        "count": float(len(records)),
        "failed": float(sum(1 for r in records if r.error is not None)),
    }


PF_KTHREAD = 0x00200000  # the `flags` bit of a kernel thread in /proc/<pid>/stat


def all_process_cpu() -> dict[int, tuple[float, bool]]:
    """pid → (user + system CPU seconds so far, is a kernel thread) of every process on the machine."""
    out: dict[int, tuple[float, bool]] = {}
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                text = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue  # exited meanwhile
            fields = text[text.rindex(")") + 2 :].split()
            cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
            out[int(entry.name)] = (cpu, bool(int(fields[6]) & PF_KTHREAD))
    return out


class CpuMeter:
    """Where the machine's CPU went between `start` and `stop`: the named processes (the
    benchmark's own), every other process (other users' work on this shared machine), kernel
    threads (page-cache writeback, loop devices...), and the unattributed rest (interrupts, and
    processes that started or exited inside the window)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.used: dict[str, float] = {}
        self.other_processes = 0.0
        self.kernel_threads = 0.0
        self.unattributed = 0.0
        self.machine_busy = 0.0  # share of all cores
        self.seconds = 0.0

    def start(self) -> None:
        self._before = all_process_cpu()
        self._busy, self._total = system_cpu()
        self._at = time.monotonic()

    def stop(self) -> None:
        after = all_process_cpu()
        busy, total = system_cpu()
        self.seconds = time.monotonic() - self._at
        self.machine_busy = (busy - self._busy) / max(1e-9, total - self._total)
        ours = set(self.pids.values())
        self.used = {
            name: after.get(pid, (0.0, False))[0] - self._before.get(pid, (0.0, False))[0]
            for name, pid in self.pids.items()
        }
        self.other_processes = self.kernel_threads = 0.0
        for pid, (cpu, kthread) in after.items():
            if pid in ours or pid not in self._before:
                continue
            delta = cpu - self._before[pid][0]
            if kthread:
                self.kernel_threads += delta
            else:
                self.other_processes += delta
        accounted = sum(self.used.values()) + self.other_processes + self.kernel_threads
        self.unattributed = max(0.0, (busy - self._busy) - accounted)

    def share(self, seconds: float) -> str:
        """CPU seconds as a share of one core over the window."""
        return f"{seconds / max(1e-9, self.seconds) * 100:.0f}%"

    def text(self) -> str:
        parts = [f"{name} {used:.1f} s ({self.share(used)})" for name, used in self.used.items()]
        return (
            f"CPU over {self.seconds:.1f} s: {', '.join(parts)}; other processes {self.other_processes:.1f} s, "
            f"kernel threads {self.kernel_threads:.1f} s, unattributed {self.unattributed:.1f} s; "
            f"machine {self.machine_busy * 100:.0f}% busy"
        )
