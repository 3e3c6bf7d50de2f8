"""Real-process harness: start `jbod-controller` as a child process on a free loopback port.

Guarantees:
* `ControllerProcess.start()` returns once `/readyz` answers 200 (or raises with the process's
  stderr); the port is the one the process printed, so tests never race for ports.
* `kill()` sends SIGKILL (a crash); `stop()` sends SIGTERM and waits; `restart()` starts a new
  process on the same data dir and port.
* Every process started is killed when the context exits, even on test failure.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from jbod_local.processes import await_listening, await_ready, spawn

CONTROLLER = shutil.which("jbod-controller", path=str(Path(sys.executable).parent)) or "jbod-controller"


@dataclass
class ControllerProcess:
    data_dir: Path
    cluster_id: str = "test-cluster"
    session_timeout_ms: int = 9000
    extra_args: list[str] = field(default_factory=list)
    port: int = 0
    url: str = ""
    process: subprocess.Popen[str] | None = None
    stderr_path: Path | None = None

    @property
    def admin_token(self) -> str:
        return (self.data_dir / "admin.token").read_text().strip()

    @property
    def cluster_token(self) -> str:
        return (self.data_dir / "cluster.token").read_text().strip()

    def admin(self, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.admin_token}"}, timeout=timeout
        )

    def broker(self, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.cluster_token}"}, timeout=timeout
        )

    def command(self) -> list[str]:
        return [
            CONTROLLER,
            "--data-dir",
            str(self.data_dir),
            "--cluster-id",
            self.cluster_id,
            "--listen",
            f"127.0.0.1:{self.port}",
            "--broker-session-timeout-ms",
            str(self.session_timeout_ms),
            *self.extra_args,
        ]

    def start(self, timeout: float = 60.0) -> ControllerProcess:
        self.stderr_path = self.data_dir.parent / f"{self.data_dir.name}.stderr.log"
        self.process = spawn(self.command(), log_path=self.stderr_path)
        deadline = time.monotonic() + timeout
        self.url, self.port = await_listening(
            self.process, name="jbod-controller", log_path=self.stderr_path, deadline=deadline
        )
        await_ready(
            self.process, self.url, name="jbod-controller", log_path=self.stderr_path, deadline=deadline
        )
        return self

    def stderr(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path and self.stderr_path.exists() else ""

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def restart(self, timeout: float = 60.0) -> ControllerProcess:
        self.kill()
        return self.start(timeout=timeout)

    def __enter__(self) -> ControllerProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.kill()
