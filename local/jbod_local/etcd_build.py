"""Build etcd from its published Go modules, once per user, for a local quorum that has no safe etcd
(`jbod_local.etcd_binary` decides when; this module only builds).

Guarantees:
* The binary is `<cache>/etcd-<ETCD_VERSION>/etcd`, where `<cache>` is `$XDG_CACHE_HOME/jbod` (only
  an absolute `$XDG_CACHE_HOME`, as the XDG spec says) or `~/.cache/jbod`. It is there whole or
  not at all: go writes a temporary file next to it, which is renamed into place only once its
  `--version` printed `ETCD_VERSION`.
* One build at a time per cache: `flock` on `<cache>/etcd-<version>/.lock`. A second caller says
  through `report` that it waits, then uses the first one's binary; nothing is built twice.
* What is built is `go.etcd.io/etcd/server/v3`'s own `etcdmain.Main` at `ETCD_VERSION`, from a
  wrapper module that requires it (its go.mod has replace directives, so `go install mod@version`
  refuses it): the same build and the same pin as the e2e toolchain's (`e2e/toolchain.py`; a test
  holds the two pins equal). It is kubeadm's etcd for Kubernetes 1.36, the one the operator runs.
* Modules come from wherever the machine's go fetches them (the user's GOPROXY, GOSUMDB,
  GOPRIVATE, GOFLAGS: `go env`). The installed go builds it and no toolchain is downloaded
  (`GOTOOLCHAIN=local`: a go too old for the module fails, saying which go it needs); a `go.work`
  around the cache is ignored (`GOWORK=off`); the binary is static (`CGO_ENABLED=0`).
* Everything go prints goes to `<cache>/etcd-<version>/build.log`. A failed build raises
  `ClientError` with one line: the step that failed, go's last line, and the log's path; the next
  call tries again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from jbod_client.controller import ClientError

# The etcd kubeadm v1.36 deploys (its DefaultEtcdVersion): the e2e toolchain's pin too.
ETCD_VERSION = "v3.6.8"
MODULE = "go.etcd.io/etcd/server/v3"
BUILD_TIMEOUT = 1800.0  # seconds; a cold Go cache on 2 cores takes a few minutes

Report = Callable[[str], None]

_MAIN = """// Command etcd is go.etcd.io/etcd/server/v3's own main, built from the published module.
package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
\tetcdmain.Main(os.Args)
}
"""


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CACHE_HOME/jbod` (if absolute) or `~/.cache/jbod`."""
    xdg = (os.environ if environ is None else environ).get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "jbod"


def build_dir(version: str = ETCD_VERSION) -> Path:
    return cache_root() / f"etcd-{version}"


def cached_binary(version: str = ETCD_VERSION) -> Path:
    """Where the build puts etcd `version` (it may not be built yet)."""
    return build_dir(version) / "etcd"


def build_log(version: str = ETCD_VERSION) -> Path:
    return build_dir(version) / "build.log"


def go_available() -> bool:
    return shutil.which("go") is not None


def go_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The user's environment (and so their module proxy settings) with the build's three pins."""
    env = dict(os.environ if base is None else base)
    env.update(GOTOOLCHAIN="local", GOWORK="off", CGO_ENABLED="0")
    return env


@contextlib.contextmanager
def _exclusive(lock_path: Path, report: Report) -> Iterator[None]:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            report(f"Waiting for another jbodctl building etcd {ETCD_VERSION} in {lock_path.parent}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _run(command: list[str], *, cwd: Path, log: Path, step: str, deadline: float) -> None:
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        try:
            result = subprocess.run(
                command,
                cwd=cwd,
                env=go_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=max(1.0, deadline - time.monotonic()),
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ClientError(
                f"building etcd {ETCD_VERSION} failed: {step} took longer than {BUILD_TIMEOUT:.0f} s; "
                f"see {log}"
            ) from None
        except OSError as error:
            raise ClientError(f"building etcd {ETCD_VERSION} failed: cannot run go: {error}") from None
    if result.returncode != 0:
        tail = _last_line(log.read_text(encoding="utf-8", errors="replace"))
        raise ClientError(
            f"building etcd {ETCD_VERSION} failed: {step} exited with {result.returncode}: {tail} "
            f"(full log: {log})"
        )


def _prints_version(binary: Path) -> bool:
    try:
        result = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return f"etcd Version: {ETCD_VERSION.removeprefix('v')}\n" in result.stdout


def build_etcd(*, report: Report) -> Path:
    """Build etcd `ETCD_VERSION` into `cached_binary()` unless it is there; return its path.

    `report` hears one line before a build starts (what, where, the log) and one when it is done."""
    target = cached_binary()
    directory = target.parent
    directory.mkdir(parents=True, exist_ok=True)
    with _exclusive(directory / ".lock", report):
        if os.access(target, os.X_OK):  # built by another caller while this one waited
            return target
        log = build_log()
        log.write_text("")
        report(
            f"Building etcd {ETCD_VERSION} from Go modules into {directory} (once; a few minutes "
            f"with a cold Go cache; log: {log})"
        )
        started = time.monotonic()
        deadline = started + BUILD_TIMEOUT
        source = directory / "src"
        source.mkdir(exist_ok=True)
        (source / "go.mod").write_text(
            f"module jbod.dev/local/etcd\n\ngo 1.24\n\nrequire {MODULE} {ETCD_VERSION}\n"
        )
        (source / "main.go").write_text(_MAIN)
        (source / "go.sum").unlink(missing_ok=True)
        _run(["go", "mod", "tidy"], cwd=source, log=log, step="go mod tidy", deadline=deadline)
        partial = directory / f".etcd.{os.getpid()}.tmp"
        try:
            _run(
                ["go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", str(partial), "."],
                cwd=source,
                log=log,
                step="go build",
                deadline=deadline,
            )
            if not _prints_version(partial):
                raise ClientError(
                    f"building etcd {ETCD_VERSION} failed: the binary built does not print "
                    f"'etcd Version: {ETCD_VERSION.removeprefix('v')}' (full log: {log})"
                )
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        report(f"Built etcd {ETCD_VERSION} in {time.monotonic() - started:.0f} s: {target}")
    return target
