"""`make test`'s tiers: the first pass and the kind tier side by side.

    python -m e2e.tiers [--workers N]

What runs, each step's duration printed as `==> <step>: <seconds> s`:

1. the host binaries the first pass needs from the e2e toolchain (etcd for local quorums, helm
   for the chart tests), built in the foreground when missing;
2. in the background, at the lowest CPU priority (`nice 19`), what only the kind tier needs: the
   rest of the toolchain (Kubernetes, containerd, crictl, CoreDNS, local-path-provisioner, kind)
   and the images (`python -m e2e.kind images --offline`), its output in a log file whose path is
   printed (as root only; otherwise the kind tier skips, as it does without root);
3. at the same time, the first pass: `pytest -m "not e2e"` on `--workers` xdist workers, its
   output on stdout;
4. the kind tier (`pytest -m e2e`) as soon as the background build has finished, while the first
   pass goes on: its output goes to a log file and is printed whole once it has ended (after the
   first pass's, never interleaved with it). It runs even when the first pass failed, so one run
   reports both.

Guarantees:
* The exit status is 0 only if every step succeeded; a failed background build prints the tail
  of its log and the kind tier is not run on a half-built toolchain.
* The background build is niced, so a core it would take is the first pass's whenever the tests
  want it. The kind tier is not niced: most of its time is spent waiting for Kubernetes (pods
  scheduled and started, probes, the operator's timers), which leaves the cores to the first
  pass; run after it, those waits added ~20 minutes to a run (docs/decisions.md, "CI time").
* The environment of both pytest runs has `JBOD_E2E_REQUIRED=1`: a missing prerequisite fails
  the run instead of skipping tests.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from e2e import toolchain

ROOT = Path(__file__).resolve().parents[1]
# The toolchain units the first pass uses (local etcd quorums; `helm template` in tests/chart).
FIRST_PASS_UNITS = ("etcd", "helm")
LOG_TAIL_LINES = 40


def _say(line: str) -> None:
    print(f"==> {line}", flush=True)


def _timed(name: str, cmd: Sequence[str], env: dict[str, str]) -> bool:
    started = time.monotonic()
    _say(name)
    code = subprocess.run(list(cmd), cwd=ROOT, env=env, check=False).returncode
    verdict = "" if code == 0 else f" (failed, exit {code})"
    _say(f"{name}: {time.monotonic() - started:.0f} s{verdict}")
    return code == 0


def _start_kind_preparation(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes] | None:
    """The rest of the toolchain and the images, niced, in the background; None when not root."""
    if os.geteuid() != 0:
        _say("kind tier's toolchain and images: skipped (needs root: debootstrap, its own dockerd)")
        return None
    log_path.parent.mkdir(parents=True, exist_ok=True)
    _say(f"kind tier's toolchain and images: started in the background (niced), log {log_path}")
    with log_path.open("wb") as log:
        return subprocess.Popen(
            ["nice", "-n", "19", sys.executable, "-m", "e2e.kind", "images", "--offline"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _note_end(proc: subprocess.Popen[bytes], ended: list[float]) -> None:
    proc.wait()
    ended.append(time.monotonic())


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


def first_pass(workers: int) -> list[str]:
    """The first pass's pytest arguments: every test but the kind tier, on `workers` xdist workers
    that keep each file on one worker (tests/conftest.py)."""
    return ["-m", "not e2e", "--numprocesses", str(workers), "--dist", "loadfile"]


def kind_pass() -> list[str]:
    """The second pass's pytest arguments: the kind tier alone, in one process."""
    return ["-m", "e2e"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.tiers", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3, help="xdist workers of the first pass (default 3)")
    args = parser.parse_args(argv)
    env = {**os.environ, "JBOD_E2E_REQUIRED": "1"}
    pytest = [sys.executable, "-m", "pytest"]
    total = time.monotonic()

    ok = _timed(
        "e2e toolchain for the first pass (" + ", ".join(FIRST_PASS_UNITS) + ")",
        [
            sys.executable,
            "-m",
            "e2e.toolchain",
            "build",
            *(arg for unit in FIRST_PASS_UNITS for arg in ("--only", unit)),
        ],
        env,
    )
    if not ok:
        return 1
    log_path = toolchain.cache_root() / "logs" / f"kind-images-{time.strftime('%Y%m%d-%H%M%S')}.log"
    preparing_started = time.monotonic()
    preparing = _start_kind_preparation(env, log_path)

    first_started = time.monotonic()
    _say(f"pytest, all but the kind tier ({args.workers} workers): started")
    first = subprocess.Popen([*pytest, *first_pass(args.workers)], cwd=ROOT, env=env)

    kind: subprocess.Popen[bytes] | None = None
    kind_started = 0.0
    kind_ended: list[float] = []  # when the kind tier's process exited (it may end first)
    kind_log = log_path.with_name(log_path.name.replace("kind-images", "kind-tier"))
    kind_ok = True
    if preparing is not None:
        code = preparing.wait()
        waited = time.monotonic() - preparing_started
        if code != 0:
            _say(f"kind tier's toolchain and images: failed (exit {code}) after {waited:.0f} s; log tail:")
            print(_tail(log_path, LOG_TAIL_LINES), flush=True)
            kind_ok = False
        else:
            _say(f"kind tier's toolchain and images: ready {waited:.0f} s after their start")
            _say(f"pytest, the kind tier: started beside the first pass, log {kind_log}")
            kind_started = time.monotonic()
            with kind_log.open("wb") as out:
                kind = subprocess.Popen(
                    [*pytest, *kind_pass()], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
                )
            threading.Thread(target=_note_end, args=(kind, kind_ended), daemon=True).start()

    first_code = first.wait()
    verdict = "" if first_code == 0 else f" (failed, exit {first_code})"
    _say(
        f"pytest, all but the kind tier ({args.workers} workers): {time.monotonic() - first_started:.0f} s{verdict}"
    )
    if kind is not None:
        kind_code = kind.wait()
        _say("pytest, the kind tier: its output")
        print(kind_log.read_text(errors="replace"), flush=True)
        verdict = "" if kind_code == 0 else f" (failed, exit {kind_code})"
        ended = kind_ended[0] if kind_ended else time.monotonic()
        _say(f"pytest, the kind tier: {ended - kind_started:.0f} s{verdict}")
        kind_ok = kind_code == 0
    _say(f"tiers: {time.monotonic() - total:.0f} s")
    return 0 if first_code == 0 and kind_ok else 1


if __name__ == "__main__":
    sys.exit(main())
