"""Where our brokers spend their CPU during a benchmark: py-spy (a sampling profiler that reads a
running Python process from outside, no code change) attached to each broker for the length of a
measured phase, and the collapsed stacks summed into the functions with the most samples.

Guarantees:
* `recording(pids, directory, tag)` records every pid at `RATE_HZ` while the block runs, only
  samples where the thread is active (not waiting in `select` / `epoll`), one collapsed-stack
  file per pid (`<tag>-<pid>.txt`, py-spy's `raw` format: `frame;frame;... count` per line); a
  missing py-spy binary raises `BenchError` before anything starts.
* `summary(files, top)` reads those files: per function (`name (file:line)` as py-spy writes its
  frames, the line dropped so one function is one row) its self samples (the leaf) and inclusive
  samples (anywhere on the stack, counted once per stack), as fractions of all samples.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import BenchError

RATE_HZ = 97
_LINE = re.compile(r"^(.*) (\d+)$")
_FRAME_LINE = re.compile(r":\d+\)$")


@contextlib.contextmanager
def recording(
    pids: Sequence[int], directory: Path, tag: str, *, subprocesses: bool = False
) -> Iterator[list[Path]]:
    """py-spy on every pid (and its child processes with `subprocesses`) while the block runs;
    yields the files it will have written."""
    beside = Path(sys.executable).with_name("py-spy")  # the venv's, whether or not it is on PATH
    binary = str(beside) if beside.exists() else shutil.which("py-spy")
    if binary is None:
        raise BenchError("py-spy is not installed (pip install py-spy): --profile needs it")
    directory.mkdir(parents=True, exist_ok=True)
    files = [directory / f"{tag}-{pid}.txt" for pid in pids]
    procs = [
        subprocess.Popen(
            [
                binary,
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(RATE_HZ),
                "--format",
                "raw",
                "--output",
                str(path),
                "--nonblocking",
                *(["--subprocesses"] if subprocesses else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid, path in zip(pids, files, strict=True)
    ]
    try:
        yield files
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _function(frame: str) -> str:
    return _FRAME_LINE.sub(")", frame.strip())


@dataclass(frozen=True)
class Hotspot:
    function: str
    self_share: float
    inclusive_share: float


def summary(files: Iterable[Path], *, top: int = 15) -> tuple[int, list[Hotspot]]:
    """(samples, the `top` functions by self samples) over the collapsed-stack `files`."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for path in files:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            match = _LINE.match(line)
            if match is None:
                continue
            stack, count = match.group(1), int(match.group(2))
            frames = [_function(f) for f in stack.split(";") if f]
            if not frames:
                continue
            total += count
            own[frames[-1]] += count
            for function in set(frames):
                inclusive[function] += count
    hotspots = [
        Hotspot(function, count / max(1, total), inclusive[function] / max(1, total))
        for function, count in own.most_common(top)
    ]
    return total, hotspots
