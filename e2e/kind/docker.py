"""A Docker engine for the kind tier: the one already running, or a dockerd of this project's own.

Guarantees:
* `engine()` returns a `Docker` whose `host` answers `docker version`: `$DOCKER_HOST` when set, else
  this project's own dockerd when it runs, else the system socket `/var/run/docker.sock` when a
  daemon answers there, else (with `start=True`) a dockerd started here (root only) with its data root under the e2e cache (`<cache>/docker`, so images survive
  between runs), its exec root under /run and its API on the unix socket `/run/jbod-e2e/docker.sock`
  only (no TCP listener), and `runc-capfilter` as its default runtime (privileged containers on
  hosts whose root lacks a capability). That dockerd keeps running after this process ends (CI and later runs
  reuse it); `stop_own_engine()` stops it.
* Missing Debian packages (`docker.io`, `debootstrap`) are installed with apt-get when running as
  root on a Debian-like machine; otherwise `DockerUnavailableError` says what is missing, in one line.
* Every `docker` command runs with `DOCKER_HOST` pointing at that engine and the legacy builder
  (`DOCKER_BUILDKIT=0`: a client without the buildx plugin still builds); nothing else is changed
  in the caller's environment.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from e2e import toolchain

OWN_SOCKET = Path("/run/jbod-e2e/docker.sock")
OWN_PIDFILE = Path("/run/jbod-e2e/docker.pid")
SYSTEM_SOCKET = Path("/var/run/docker.sock")
PACKAGES = {
    "dockerd": "docker.io",
    "docker": "docker.io",
    "debootstrap": "debootstrap",
    "jq": "jq",
    "gcc": "gcc",
}
# runc minus the capabilities the host cannot grant (see the script); our dockerd's default runtime.
CAPFILTER = Path(__file__).resolve().parent / "node" / "files" / "usr" / "local" / "bin" / "runc-capfilter"


class DockerUnavailableError(RuntimeError):
    """No Docker engine can be used or started here."""


@dataclasses.dataclass(frozen=True)
class Docker:
    """A docker client bound to one engine (`host` is a `unix://` URL)."""

    host: str

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(DOCKER_HOST=self.host, DOCKER_BUILDKIT="0")
        env.update(extra or {})
        return env

    def run(
        self, *args: str, check: bool = True, capture: bool = True, input_bytes: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["docker", *args],
            env=self.env(),
            capture_output=capture,
            text=True,
            check=False,
            input=input_bytes.decode() if input_bytes is not None else None,
        )
        if check and proc.returncode != 0:
            detail = (proc.stderr or proc.stdout or "").strip()[-4000:]
            raise RuntimeError(f"docker {' '.join(args[:3])} ... failed (exit {proc.returncode}): {detail}")
        return proc

    def answers(self) -> bool:
        try:
            return self.run("version", "--format", "{{.Server.Version}}", check=False).returncode == 0
        except FileNotFoundError:
            return False

    def image_label(self, image: str, label: str) -> str | None:
        """The value of `label` on a local image, or None when the image is absent."""
        proc = self.run(
            "image", "inspect", "--format", f'{{{{index .Config.Labels "{label}"}}}}', image, check=False
        )
        return proc.stdout.strip() if proc.returncode == 0 else None


def ensure_packages(commands: Sequence[str] = ("docker", "dockerd", "debootstrap")) -> None:
    """Install the Debian packages providing `commands` when some are missing (root + apt only)."""
    missing = sorted({PACKAGES[c] for c in commands if shutil.which(c) is None})
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise DockerUnavailableError(
            f"missing {', '.join(missing)}: install them (Debian: apt-get install {' '.join(missing)})"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise DockerUnavailableError(
                f"{' '.join(cmd)} failed: {(proc.stderr or proc.stdout).strip()[-2000:]}"
            )


def data_root() -> Path:
    return toolchain.cache_root() / "docker"


def _start_own_engine(timeout: float = 60.0) -> Docker:
    if os.geteuid() != 0:
        raise DockerUnavailableError("no Docker engine answers and starting dockerd needs root")
    ensure_packages(("docker", "dockerd", "jq"))
    OWN_SOCKET.parent.mkdir(parents=True, exist_ok=True)
    root = data_root()
    root.mkdir(parents=True, exist_ok=True)
    capfilter = root / "runc-capfilter"  # a copy: the daemon outlives the checkout it came from
    shutil.copy2(CAPFILTER, capfilter)
    log = (root / "dockerd.log").open("ab")
    subprocess.Popen(
        [
            "dockerd",
            "--data-root",
            str(root / "data"),
            "--exec-root",
            "/run/jbod-e2e/exec",
            "--host",
            f"unix://{OWN_SOCKET}",
            "--pidfile",
            str(OWN_PIDFILE),
            "--storage-driver",
            "overlay2",
            "--add-runtime",
            f"runc-capfilter={capfilter}",
            "--default-runtime",
            "runc-capfilter",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    docker = Docker(f"unix://{OWN_SOCKET}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if OWN_SOCKET.exists() and docker.answers():
            return docker
        time.sleep(0.5)
    tail = (root / "dockerd.log").read_text(errors="replace")[-2000:]
    raise DockerUnavailableError(f"dockerd did not answer on {OWN_SOCKET} within {timeout:.0f} s:\n{tail}")


def engine(*, start: bool = True) -> Docker:
    """A Docker engine that answers (see the module docstring for which one)."""
    ensure_packages(("docker",))
    if os.environ.get("DOCKER_HOST"):
        docker = Docker(os.environ["DOCKER_HOST"])
        if not docker.answers():
            raise DockerUnavailableError(f"DOCKER_HOST={docker.host} does not answer `docker version`")
        return docker
    for socket in (OWN_SOCKET, SYSTEM_SOCKET):
        docker = Docker(f"unix://{socket}")
        if socket.exists() and docker.answers():
            return docker
    if not start:
        raise DockerUnavailableError("no Docker engine answers (make kind-up starts one)")
    return _start_own_engine()


def stop_own_engine(timeout: float = 30.0) -> bool:
    """Stop the dockerd `engine()` started (True if one was running)."""
    try:
        pid = int(OWN_PIDFILE.read_text().strip())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    return True
