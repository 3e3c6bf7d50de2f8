"""`python -m e2e.kind`: the kind cluster of the README, docs/operations.md and the e2e tier.

    python -m e2e.kind up [--offline] [--zones]  # images, kind cluster, image loaded, chart installed
    python -m e2e.kind images [--offline]  # only build the images
    python -m e2e.kind detach --namespace NS --pod POD --disk DISK
    python -m e2e.kind env                 # export KUBECONFIG=... and PATH for kubectl/helm/kind
    python -m e2e.kind down
    python -m e2e.kind stop-engine         # stop the dockerd `up` started (images stay cached)

`--zones` creates the e2e tier's cluster (`kind-zones.yaml`: a control plane and three workers in
zones zone-a/b/c) instead of one node. `--offline` (or JBOD_KIND_OFFLINE=1) builds everything without a registry: the Debian base with
debootstrap, the kind node image from the e2e toolchain, the project image from a host-made
wheelhouse. Without it the project image is `docker build --target runtime .` and the node image
is kind's default (pulled from its registry). Errors are one line on stderr, exit status 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

from e2e import toolchain
from e2e.kind import images
from e2e.kind.cluster import CONFIG, DEFAULT_NAME, TOOLS, ZONES_CONFIG, KindCluster, KindError
from e2e.kind.docker import Docker, DockerUnavailableError, engine, stop_own_engine

OFFLINE_UNITS = [
    "kubernetes",
    "kind",
    "helm",
    "etcd",
    "containerd",
    "crictl",
    "coredns",
    "local-path-provisioner",
]


def _log(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


def build_images(docker: Docker, tc: toolchain.Toolchain, *, offline: bool) -> str | None:
    """Build the project image (and, offline, the node image); return the node image to use."""
    if offline:
        toolchain.build(tc, log=_log, only=OFFLINE_UNITS)
    else:  # only the tools found neither built nor on PATH
        missing = sorted(
            {
                unit
                for tool, unit in TOOLS.items()
                if not os.access(tc.binary(tool), os.X_OK) and shutil.which(tool) is None
            }
        )
        if missing:
            toolchain.build(tc, log=_log, only=missing)
    builder = images.Builder(docker, tc, log=_log)
    if offline:
        builder.all()
        return images.NODE_IMAGE
    started = time.monotonic()
    proc = subprocess.run(images.project_build_command(), cwd=images.ROOT, env=docker.env(), check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"docker build of {images.PROJECT_IMAGE} failed (exit {proc.returncode})")
    _log(f"Built image {images.PROJECT_IMAGE} in {time.monotonic() - started:.0f} s")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.kind", description=__doc__.splitlines()[0])
    parser.add_argument("--name", default=DEFAULT_NAME, help=f"kind cluster name (default {DEFAULT_NAME})")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for cmd in ("up", "images"):
        p = sub.add_parser(cmd)
        p.add_argument(
            "--offline",
            action="store_true",
            default=os.environ.get("JBOD_KIND_OFFLINE") == "1",
            help="build every image locally, no registry (default: $JBOD_KIND_OFFLINE=1)",
        )
        if cmd == "up":
            p.add_argument(
                "--zones",
                action="store_true",
                help="a control plane and three workers in zones zone-a/b/c (kind-zones.yaml), as the e2e tier",
            )
    detach = sub.add_parser("detach", help="unmount a broker's disk inside its pod (a disk failure)")
    detach.add_argument("--namespace", "-n", required=True)
    detach.add_argument("--pod", required=True)
    detach.add_argument("--disk", required=True)
    sub.add_parser("env", help="print the shell exports for this cluster's kubectl, helm and kind")
    sub.add_parser("down", help="delete the kind cluster (the dockerd and its image cache stay)")
    sub.add_parser("stop-engine", help="stop the dockerd this tool started (its image cache stays)")
    args = parser.parse_args(argv)
    tc = toolchain.Toolchain.default()
    if args.cmd == "stop-engine":
        print("Stopped the e2e dockerd" if stop_own_engine() else "No e2e dockerd was running")
        return 0
    try:
        docker = engine(start=args.cmd in ("up", "images"))
        config = ZONES_CONFIG if getattr(args, "zones", False) else CONFIG
        cluster = KindCluster(docker, tc, name=args.name, log=_log, config=config)
        if args.cmd == "images":
            build_images(docker, tc, offline=args.offline)
        elif args.cmd == "up":
            node_image = build_images(docker, tc, offline=args.offline)
            cluster.up(images.PROJECT_IMAGE, node_image)
            print(f"export KUBECONFIG={cluster.kubeconfig} DOCKER_HOST={docker.host} PATH={tc.bin_dir}:$PATH")
        elif args.cmd == "detach":
            cluster.ensure_kubeconfig()
            cluster.detach_volume(args.namespace, args.pod, args.disk)
        elif args.cmd == "env":
            cluster.ensure_kubeconfig()
            print(f"export KUBECONFIG={cluster.kubeconfig} DOCKER_HOST={docker.host} PATH={tc.bin_dir}:$PATH")
        else:
            cluster.delete()
    except (KindError, DockerUnavailableError, RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()] or [
            type(exc).__name__
        ]
        message = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
        print(f"error: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
