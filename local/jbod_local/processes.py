"""Local processes: start a `jbod-controller` and `jbod-agent` brokers on this machine (the
embedded default, no Kubernetes).

Guarantees:
* `LocalController.start()` returns once `/readyz` is 200, on the port the process printed (port
  0 asks for any free loopback port, so runs never collide); it raises `ClientError` with the
  process's last stderr lines if it exits or does not become ready in time.
* `LocalBroker.start()` returns once the agent printed its HTTP API's URL and the address of
  each of its Kafka listeners (`kafka`: listener name → "host:port"). Unless its settings name
  other `listeners`, a broker serves its HTTP API and one SASL_PLAINTEXT Kafka listener, both on
  a free loopback port (`DEFAULT_LISTENERS`): every broker started here takes Kafka clients, as
  `admin` too when given `admin_token_file`.
* `stop()` asks politely (SIGTERM) and kills after a grace period; `kill()` is a crash (SIGKILL).
* `spawn_detached` starts a process in its own session that outlives the caller (`jbodctl local up`);
  `process_alive(pid, marker)` knows such a process by pid *and* command line (a recycled pid is
  never taken for it), `stop_processes` stops several of them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from jbod_client.controller import ClientError
from jbod_runtime import tls

#: A broker's listeners unless its settings say otherwise: its HTTP API and a Kafka listener.
DEFAULT_LISTENERS = "http://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
LISTENING_LINE = re.compile(r"Listening on (https?://[0-9.]+:(\d+))")
KAFKA_LISTENING_LINE = re.compile(r"Listening on ([A-Z_]+)://([^\s:]+):(\d+)")


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


#: How long an empty command line (an exec under way) is read again before the pid counts as another
#: process's.
EXEC_SETTLE_S = 2.0

#: The processes this process started detached, by pid. Kept, not dropped: a `Popen` that is
#: garbage-collected is reaped by the next `Popen` anywhere in the process, and how it ended lost.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _ending(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit code {returncode}"


def exit_report(pid: int | None, log_path: Path, lines: int = 3) -> str:
    """Why a detached process is gone, in one line: how it ended (when this process started it),
    then its log's last `lines` lines (or that its log is empty)."""
    child = None if pid is None else _CHILDREN.get(pid)
    code = None if child is None else child.poll()
    ending = "" if code is None else f"({_ending(code)}) "
    return ending + (_tail(log_path, lines) or f"nothing in {log_path}")


def _stop(process: subprocess.Popen[str] | None, grace: float) -> int | None:
    """SIGTERM, then SIGKILL after `grace` seconds; the exit code (None if never started)."""
    if process is None:
        return None
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


def _kill(process: subprocess.Popen[str] | None) -> None:
    if process is not None and process.poll() is None:
        process.kill()
        process.wait()


def spawn(command: list[str], *, log_path: Path) -> subprocess.Popen[str]:
    """Start one of our commands: stdout piped (for its address), stderr appended to `log_path`."""
    with open(log_path, "a") as log:
        return subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )


def spawn_detached(command: list[str], *, log_path: Path) -> int:
    """Start a process that outlives us: its own session, stdin closed, stdout and stderr
    appended to `log_path`; returns its pid."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
    _CHILDREN[process.pid] = process
    return process.pid


def await_listening(
    process: subprocess.Popen[str], *, name: str, log_path: Path, deadline: float
) -> tuple[str, int]:
    """The (url, port) the process printed; `ClientError` if it exits or stays silent too long."""
    assert process.stdout is not None
    for line in process.stdout:
        match = LISTENING_LINE.search(line)
        if match:
            return match.group(1), int(match.group(2))
        if time.monotonic() > deadline:
            break
    raise ClientError(f"{name} did not start (exit {process.poll()}): {_tail(log_path)}")


def await_kafka_listening(
    process: subprocess.Popen[str], *, count: int, name: str, log_path: Path, deadline: float
) -> dict[str, str]:
    """The `count` Kafka listeners the process printed after its HTTP one: name -> "host:port"."""
    assert process.stdout is not None
    found: dict[str, str] = {}
    while len(found) < count:
        line = process.stdout.readline()
        match = KAFKA_LISTENING_LINE.search(line)
        if match:
            found[match.group(1)] = f"{match.group(2)}:{match.group(3)}"
        elif not line or time.monotonic() > deadline:
            raise ClientError(
                f"{name} did not start its Kafka listeners (exit {process.poll()}): {_tail(log_path)}"
            )
    return found


def await_ready(  # noqa: PLR0913 - the process and URL, then keyword-only settings
    process: subprocess.Popen[str],
    url: str,
    *,
    name: str,
    log_path: Path,
    deadline: float,
    ca_file: Path | None = None,
) -> None:
    """Return once `url`/readyz answers 200; `ClientError` if the process exits or time runs out."""
    await_readyz(
        url,
        name=name,
        log_path=log_path,
        deadline=deadline,
        exited=lambda: None if process.poll() is None else f"exited with {process.returncode}",
        ca_file=ca_file,
    )


def await_readyz(  # noqa: PLR0913  the URL, then the name, log, deadline, exit check and error of its process
    url: str,
    *,
    name: str,
    log_path: Path,
    deadline: float,
    exited: Callable[[], str | None],
    error: type[ClientError] = ClientError,
    ca_file: Path | None = None,
) -> None:
    """Return once `url`/readyz answers 200; `error` (with the log's last lines) once `exited()`
    says why the process is gone, or when time runs out. For children and detached processes.
    An https `url` is verified against `ca_file` (default: the system's CAs)."""
    verify: ssl.SSLContext | bool = tls.client_context(ca_file) if ca_file is not None else True
    while time.monotonic() < deadline:
        if (why := exited()) is not None:
            raise error(f"{name} {why}: {_tail(log_path)}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2, trust_env=False, verify=verify).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise error(f"{name} did not become ready in time: {_tail(log_path)}")


class LocalClusterError(ClientError):
    """A user mistake or a cluster that does not behave; `str()` is one line."""


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def process_alive(pid: int | None, marker: Path) -> bool:
    """True iff `pid` runs and its command line names `marker` (a recycled pid does not)."""
    if pid is None:
        return False
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:  # reaped: its pid may be another's now
        return False
    # A process in the middle of its exec shows an empty command line for a moment (the kernel
    # sets the new one up after the exec closed the pipe `Popen` waits on): read it again.
    deadline = time.monotonic() + EXEC_SETTLE_S
    while True:
        args = _cmdline(pid)
        if args is None or _is_zombie(pid):
            return False
        if args or time.monotonic() > deadline:
            return str(marker) in args
        time.sleep(0.005)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def stop_processes(processes: Sequence[tuple[int, Path]], *, grace: float) -> None:
    """SIGTERM each (pid, marker) that is alive, SIGKILL those still alive after `grace` seconds,
    and return once all are gone."""
    alive = [(pid, marker) for pid, marker in processes if process_alive(pid, marker)]
    for pid, _marker in alive:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [(pid, marker) for pid, marker in alive if process_alive(pid, marker)]
    for pid, _marker in alive:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [(pid, marker) for pid, marker in alive if process_alive(pid, marker)]


def console_script(name: str) -> str:
    """The path of one of our console scripts, preferring the running interpreter's environment."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        raise ClientError(f"cannot find the {name} command; is the jbod-operator package installed?")
    return found


@dataclass
class LocalController:
    data_dir: Path
    cluster_id: str = "local"
    host: str = "127.0.0.1"
    port: int = 0
    extra_args: list[str] = field(default_factory=list)
    url: str = ""
    process: subprocess.Popen[str] | None = None
    ca_file: Path | None = None  # verifies an https controller (started with --ssl-keystore-location)

    @property
    def log_path(self) -> Path:
        return self.data_dir / "controller.log"

    @property
    def admin_token_file(self) -> Path:
        return self.data_dir / "admin.token"

    @property
    def cluster_token_file(self) -> Path:
        return self.data_dir / "cluster.token"

    def start(self, timeout: float = 60.0) -> LocalController:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [
            console_script("jbod-controller"),
            "--data-dir",
            str(self.data_dir),
            "--cluster-id",
            self.cluster_id,
            "--listen",
            f"{self.host}:{self.port}",
            *self.extra_args,
        ]
        self.process = spawn(command, log_path=self.log_path)
        deadline = time.monotonic() + timeout
        try:
            self.url, self.port = await_listening(
                self.process, name="jbod-controller", log_path=self.log_path, deadline=deadline
            )
            await_ready(
                self.process,
                self.url,
                name="jbod-controller",
                log_path=self.log_path,
                deadline=deadline,
                ca_file=self.ca_file,
            )
        except ClientError:
            self.kill()
            raise
        return self

    def stop(self, grace: float = 10.0) -> None:
        _stop(self.process, grace)

    def kill(self) -> None:
        _kill(self.process)


@dataclass
class LocalBroker:
    """A `jbod-agent` process with its own `server.properties` (dirs formatted before start)."""

    node_id: int
    work_dir: Path
    log_dirs: list[Path]
    controller_url: str
    cluster_token_file: Path
    cluster_id: str
    metadata_dir: Path | None = None
    admin_token_file: Path | None = None  # `admin.token.file`: the `admin` principal's password
    settings: dict[str, str] = field(default_factory=dict)
    url: str = ""
    process: subprocess.Popen[str] | None = None
    kafka: dict[str, str] = field(default_factory=dict)  # Kafka listener name -> "host:port", once started

    @property
    def config_path(self) -> Path:
        return self.work_dir / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "agent.log"

    def write_config(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        metadata_dir = self.metadata_dir or self.work_dir / "metadata"
        values = {
            "node.id": str(self.node_id),
            "log.dirs": ",".join(str(p) for p in self.log_dirs),
            "metadata.log.dir": str(metadata_dir),
            "controller.url": self.controller_url,
            "listeners": DEFAULT_LISTENERS,
            "cluster.token.file": str(self.cluster_token_file),
            **({} if self.admin_token_file is None else {"admin.token.file": str(self.admin_token_file)}),
            "broker.heartbeat.interval.ms": "500",
            "broker.session.timeout.ms": "9000",
            "log.dir.probe.interval.ms": "250",
            **self.settings,
        }
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))

    def format_command(self) -> list[str]:
        """`jbod-storage format` of this broker's dirs, keeping the dirs already formatted."""
        return [
            console_script("jbod-storage"),
            "format",
            "--config",
            str(self.config_path),
            "--cluster-id",
            self.cluster_id,
            "--ignore-formatted",
        ]

    def format(self) -> None:
        self.write_config()
        result = subprocess.run(
            self.format_command(),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise ClientError(
                f"jbod-storage format failed for broker {self.node_id}: {result.stderr.strip()}"
            )

    def start(self, timeout: float = 30.0) -> LocalBroker:
        if not self.config_path.exists():
            self.format()
        self.process = spawn(
            [console_script("jbod-agent"), "--config", str(self.config_path)], log_path=self.log_path
        )
        deadline = time.monotonic() + timeout
        try:
            self.url, _port = await_listening(
                self.process, name=f"jbod-agent {self.node_id}", log_path=self.log_path, deadline=deadline
            )
            kafka_listeners = [
                entry
                for entry in self.settings.get("listeners", DEFAULT_LISTENERS).split(",")
                if "://" in entry and not entry.startswith("http")
            ]
            self.kafka = await_kafka_listening(
                self.process,
                # Every broker has a Kafka listener: without one in `listeners`, one for replication.
                count=max(len(kafka_listeners), 1),
                name=f"jbod-agent {self.node_id}",
                log_path=self.log_path,
                deadline=deadline,
            )
        except ClientError:
            self.kill()
            raise
        return self

    def stop(self, grace: float = 10.0) -> int | None:
        return _stop(self.process, grace)

    def kill(self) -> None:
        _kill(self.process)
