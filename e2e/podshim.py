"""The pod sandbox: holds a private mount namespace with the pod's volumes at their mountPaths.

Run by the kubelet as `unshare --mount --propagation private -- python -m e2e.podshim <plan.json>`
(the "pause" process of the pod). It guarantees, inside its own mount namespace only:
* every `{"source", "target", "readOnly"}` of the plan is bind-mounted at `target`, parents before
  children, read-only where asked; sources are opened before anything is mounted, so a later mount
  cannot hide an earlier source;
* a missing mount point is created: inside an earlier mount (a volume) it is made there, as a
  container runtime would; otherwise the deepest existing ancestor (if it is neither `/`, nor holds
  other mounts, nor contains the pod directory) is covered by an overlayfs whose upper layer lives in
  the pod directory, so nothing is created on the host; failing that the directory is created on the
  host and listed in `<plan.created_file>` for the kubelet to remove later;
* the plan's `image` paths (interpreter, venv, source tree) stay visible: one that a volume hides
  (an emptyDir at /tmp over a checkout in /tmp) is bind-mounted back at its own path;
* it then prints `ready` on stdout and sleeps until SIGTERM/SIGINT; any failure is printed on
  stderr and exits with status 1 before `ready`.
Container processes join this namespace with `nsenter --mount=/proc/<shim pid>/ns/mnt`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any


def _mount_targets() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _mount(*args: str, pass_fds: tuple[int, ...] = ()) -> None:
    proc = subprocess.run(["mount", *args], check=False, capture_output=True, text=True, pass_fds=pass_fds)
    if proc.returncode != 0:
        raise RuntimeError(f"mount {' '.join(args)}: {proc.stderr.strip()}")


def _deepest_existing(path: str) -> str:
    p = Path(path)
    while not p.exists():
        p = p.parent
    return str(p)


def setup(plan: dict[str, Any]) -> list[str]:
    """Mount everything in `plan`; return the host paths that had to be created."""
    pod_dir = plan["pod_dir"]
    mounts = sorted(plan["mounts"], key=lambda m: (m["target"].count("/"), m["target"]))
    fds = [os.open(m["source"], os.O_PATH | os.O_CLOEXEC) for m in mounts]
    image = [
        (path, os.open(path, os.O_PATH | os.O_CLOEXEC))
        for path in plan.get("image", [])
        if os.path.isdir(path)
    ]
    mounted: list[str] = []
    overlays: list[str] = []
    created: list[str] = []
    for m, fd in zip(mounts, fds, strict=True):
        target, is_file = m["target"], not os.path.isdir(f"/proc/self/fd/{fd}")
        if not os.path.lexists(target):
            base = _deepest_existing(os.path.dirname(target) if is_file else target)
            in_volume = any(_under(base, t) for t in mounted + overlays)
            if (
                not in_volume
                and base != "/"
                and not _under(pod_dir, base)
                and not any(_under(t, base) and t != base for t in _mount_targets())
            ):
                layer = Path(pod_dir) / "overlay" / str(len(overlays))
                (layer / "upper").mkdir(parents=True, exist_ok=True)
                (layer / "work").mkdir(parents=True, exist_ok=True)
                _mount(
                    "-t",
                    "overlay",
                    "overlay",
                    "-o",
                    f"lowerdir={base},upperdir={layer / 'upper'},workdir={layer / 'work'}",
                    base,
                )
                overlays.append(base)
                in_volume = True
            if not in_volume:
                p = Path(os.path.dirname(target) if is_file else target)
                missing = []
                while not p.exists():
                    missing.append(str(p))
                    p = p.parent
                created.extend(reversed(missing))
            if is_file:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                Path(target).touch()
                if not in_volume:
                    created.append(target)
            else:
                os.makedirs(target, exist_ok=True)
        _mount("--bind", f"/proc/self/fd/{fd}", target, pass_fds=(fd,))
        if m.get("readOnly"):
            _mount("-o", "remount,bind,ro", target)
        mounted.append(target)
    for path, fd in image:
        # A volume mounted above a piece of the "image" hides it: bind that piece back in place.
        if any(_under(path, t) and path != t for t in mounted):
            os.makedirs(path, exist_ok=True)
            _mount("--no-canonicalize", "--bind", f"/proc/self/fd/{fd}", path, pass_fds=(fd,))
        os.close(fd)
    for fd in fds:
        os.close(fd)
    return created


def main(argv: list[str]) -> int:
    plan = json.loads(Path(argv[1]).read_text())
    try:
        created = setup(plan)
    except Exception as exc:
        print(f"podshim: {exc}", file=sys.stderr, flush=True)
        return 1
    Path(plan["created_file"]).write_text(json.dumps(created))
    stop = False

    def on_signal(_sig: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print("ready", flush=True)
    while not stop:
        signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
