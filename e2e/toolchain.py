"""Build and cache the e2e tier's binaries from Go modules (the Go module proxy only).

Guarantees:
* Every binary comes from `go build`/`go install` of a pinned module version fetched through
  `https://proxy.golang.org`, checksums verified against sum.golang.org *through the proxy*
  (`GOSUMDB=sum.golang.org https://proxy.golang.org/sumdb/sum.golang.org`); no `direct`
  fallback, no toolchain download (`GOTOOLCHAIN=local`), nothing fetched from any other host.
* Binaries land in `<cache>/<k8s-version>/bin/` where `<cache>` is `$JBOD_E2E_CACHE` or
  `~/.cache/jbod-e2e`; each build unit writes a stamp (`bin/.stamps/<unit>.json`) holding the
  versions it was built from, and a unit whose stamp matches and whose binaries exist is skipped.
* The Kubernetes binaries report their real version (`kube-apiserver --version`).
* Which binaries: `ALL_BINARIES` (the kind node image's Kubernetes, containerd, crictl, CoreDNS,
  etcd and local-path-provisioner; kind and helm for the host).

Run `python -m e2e.toolchain build` from the repo root (`status`, `path` also exist).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

K8S_VERSION = "v1.36.3"
# The etcd kubeadm v1.36 deploys (its DefaultEtcdVersion, image tag 3.6.8-0).
ETCD_VERSION = "v3.6.8"
HELM_VERSION = "v3.22.0"
# What the kind node image (`e2e/kind/`) is made of, besides the Kubernetes binaries and etcd.
KIND_VERSION = "v0.33.0"
CONTAINERD_VERSION = "v2.4.2"
CRICTL_VERSION = "v1.37.0"
COREDNS_VERSION = "v1.14.2"  # kubeadm v1.36's CoreDNSVersion
LOCAL_PATH_PROVISIONER_VERSION = "v0.0.30"

GOPROXY = "https://proxy.golang.org"
GOSUMDB = "sum.golang.org https://proxy.golang.org/sumdb/sum.golang.org"

K8S_COMMANDS = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "kubeadm",
    "kube-proxy",
)
CONTAINERD_COMMANDS = ("containerd", "ctr", "containerd-shim-runc-v2")
# No snapshotters the node does not use, no OpenTelemetry tracing plugin (its exporters are a large
# part of the build; the node configures no tracing).
CONTAINERD_TAGS = "no_btrfs no_devmapper no_zfs no_aufs no_tracing"
NODE_BINARIES = (*CONTAINERD_COMMANDS, "crictl", "coredns", "local-path-provisioner")
ALL_BINARIES = ("etcd", *K8S_COMMANDS, "helm", "kind", *NODE_BINARIES)

Log = Callable[[str], None]


def cache_root() -> Path:
    """The cache directory: `$JBOD_E2E_CACHE` or `~/.cache/jbod-e2e`."""
    override = os.environ.get("JBOD_E2E_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "jbod-e2e"


def go_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for every `go` command: proxy only, sumdb through the proxy, no cgo."""
    env = dict(os.environ if base is None else base)
    env.update(
        GOPROXY=GOPROXY,
        GOSUMDB=GOSUMDB,
        GONOSUMDB="",
        GOPRIVATE="",
        GONOPROXY="",
        GOFLAGS="-mod=mod -buildvcs=false",
        GOTOOLCHAIN="local",
        CGO_ENABLED="0",
        GOWORK="off",
    )
    return env


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """Paths of the cached binaries for one Kubernetes version."""

    root: Path
    k8s_version: str = K8S_VERSION

    @classmethod
    def default(cls) -> Toolchain:
        return cls(root=cache_root() / K8S_VERSION, k8s_version=K8S_VERSION)

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def src_dir(self) -> Path:
        return self.root / "src"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    @property
    def kubectl(self) -> Path:
        return self.binary("kubectl")

    @property
    def helm(self) -> Path:
        return self.binary("helm")

    def missing(self) -> list[str]:
        """Binaries not built (or whose unit stamp does not match the pinned versions)."""
        out: list[str] = []
        for unit in units(self):
            if not unit.is_current(self):
                out.extend(unit.binaries)
        return out

    def is_built(self) -> bool:
        return not self.missing()

    def require(self) -> Toolchain:
        """Return self, or raise `FileNotFoundError` naming the missing binaries."""
        missing = self.missing()
        if missing:
            raise FileNotFoundError(
                f"e2e toolchain not built in {self.bin_dir} (missing {', '.join(missing)}): "
                "run `python -m e2e.toolchain build`"
            )
        return self


@dataclasses.dataclass(frozen=True)
class Unit:
    """One build step producing `binaries`; `key` is what its stamp must hold to be current."""

    name: str
    binaries: tuple[str, ...]
    key: Mapping[str, str]
    build: Callable[[Toolchain, Log], None]

    def stamp_path(self, tc: Toolchain) -> Path:
        return tc.bin_dir / ".stamps" / f"{self.name}.json"

    def is_current(self, tc: Toolchain) -> bool:
        try:
            stamp = json.loads(self.stamp_path(tc).read_text())
        except (OSError, ValueError):
            return False
        return stamp.get("key") == dict(self.key) and all(
            os.access(tc.binary(b), os.X_OK) for b in self.binaries
        )

    def write_stamp(self, tc: Toolchain, seconds: float) -> None:
        path = self.stamp_path(tc)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": dict(self.key), "seconds": round(seconds, 1)}, indent=2))
        tmp.replace(path)


def _run(cmd: list[str], *, cwd: Path, log: Log, label: str, env: Mapping[str, str] | None = None) -> None:
    log(f"[{label}] $ {' '.join(cmd)}")
    proc = subprocess.run(
        cmd,
        check=False,
        cwd=cwd,
        env=dict(env) if env is not None else go_env(),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-6000:]
        raise RuntimeError(f"[{label}] {' '.join(cmd)} failed with exit {proc.returncode}:\n{tail}")


def _module_download(module: str, version: str) -> dict[str, str]:
    """`go mod download -json module@version` (through the proxy): its Dir, GoMod, Zip, ... paths."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            cwd=tmp,
            env={**go_env(), "GOFLAGS": "-buildvcs=false"},
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"go mod download {module}@{version} failed: {proc.stdout}{proc.stderr}")
    result: dict[str, str] = json.loads(proc.stdout)
    return result


def staging_replaces(kubernetes_go_mod: str, k8s_version: str) -> dict[str, str]:
    """`module -> version` for each staging module k8s.io/kubernetes both requires and replaces.

    k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with
    `./staging/...`; a dependent module ignores those replaces, so it must pin each one to the
    published `v0.<minor>.<patch>` itself.
    """
    _major, minor, patch = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", k8s_version).groups()  # type: ignore[union-attr]
    staging_version = f"v0.{minor}.{patch}"
    required = set(re.findall(r"^\s*(k8s\.io/[\w.-]+) v0\.0\.0\b", kubernetes_go_mod, re.M))
    replaced = set(re.findall(r"^\s*(k8s\.io/[\w.-]+) => \./staging/", kubernetes_go_mod, re.M))
    return dict.fromkeys(sorted(required & replaced), staging_version)


def k8s_module_dir(tc: Toolchain) -> Path:
    """Where `k8s.io/kubernetes@<version>` sits in the Go module cache (downloaded when missing)."""
    return Path(_module_download("k8s.io/kubernetes", tc.k8s_version)["Dir"])


def _build_kubernetes(tc: Toolchain, log: Log) -> None:
    version = tc.k8s_version
    major, minor = re.match(r"v(\d+)\.(\d+)", version).groups()  # type: ignore[union-attr]
    mod_text = Path(_module_download("k8s.io/kubernetes", version)["GoMod"]).read_text()
    go_line = re.search(r"^go (\S+)", mod_text, re.M)
    replaces = staging_replaces(mod_text, version)
    log(f"[kubernetes] pinning {len(replaces)} staging modules to v0.{minor}.x")
    work = tc.src_dir / "kubernetes"
    work.mkdir(parents=True, exist_ok=True)
    lines = [
        "module jbod.dev/e2e/kubernetes",
        "",
        f"go {go_line.group(1) if go_line else '1.26.0'}",
        "",
        f"require k8s.io/kubernetes {version}",
        "",
        "replace (",
        *(f"\t{m} => {m} {v}" for m, v in replaces.items()),
        ")",
        "",
    ]
    (work / "go.mod").write_text("\n".join(lines))
    (work / "doc.go").write_text("// Package e2e only anchors the wrapper module.\npackage e2e\n")
    pkg = "k8s.io/component-base/version"
    cgo = "k8s.io/client-go/pkg/version"
    build_date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    xs = []
    for p in (pkg, cgo):
        xs += [
            f"-X {p}.gitVersion={version}",
            f"-X {p}.gitMajor={major}",
            f"-X {p}.gitMinor={minor}",
            f"-X {p}.gitTreeState=clean",
            f"-X {p}.buildDate={build_date}",
        ]
    ldflags = " ".join(["-s", "-w", *xs])
    tc.bin_dir.mkdir(parents=True, exist_ok=True)
    _run(["go", "mod", "download", "k8s.io/kubernetes"], cwd=work, log=log, label="kubernetes")
    _run(
        [
            "go",
            "build",
            "-trimpath",
            "-ldflags",
            ldflags,
            "-o",
            str(tc.bin_dir) + "/",
            *(f"k8s.io/kubernetes/cmd/{c}" for c in K8S_COMMANDS),
        ],
        cwd=work,
        log=log,
        label="kubernetes",
    )


_ETCD_MAIN = """// Command etcd is go.etcd.io/etcd/server/v3's own main, built from the published module.
package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
\tetcdmain.Main(os.Args)
}
"""


def _build_etcd(tc: Toolchain, log: Log) -> None:
    # go.etcd.io/etcd/server/v3's go.mod has replace directives, so `go install mod@ver` refuses
    # it; a wrapper module requiring it (whose replaces are then ignored) builds the same main.
    work = tc.src_dir / "etcd"
    work.mkdir(parents=True, exist_ok=True)
    (work / "go.mod").write_text(
        f"module jbod.dev/e2e/etcd\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 {ETCD_VERSION}\n"
    )
    (work / "main.go").write_text(_ETCD_MAIN)
    _run(["go", "mod", "tidy"], cwd=work, log=log, label="etcd")
    _run(
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(tc.binary("etcd")), "."],
        cwd=work,
        log=log,
        label="etcd",
    )


# The plugins kubeadm's Corefile names (cmd/kubeadm/app/phases/addons/dns/manifests.go) plus `log`
# and `hosts` for debugging; CoreDNS's own main links all ~60 plugins, whose cloud SDKs (Route 53,
# Azure, Cloud DNS, Datadog tracing) made it the slowest unit to build after Kubernetes.
COREDNS_PLUGINS = (
    "errors",
    "health",
    "ready",
    "kubernetes",
    "metrics",  # the `prometheus` directive
    "forward",
    "cache",
    "loop",
    "reload",
    "loadbalance",
    "log",
    "hosts",
)


def _coredns_main() -> str:
    imports = "".join(f'\t_ "github.com/coredns/coredns/plugin/{name}"\n' for name in COREDNS_PLUGINS)
    return (
        "// Command coredns is CoreDNS's own main with only the plugins a kind node's Corefile uses.\n"
        "package main\n\nimport (\n"
        '\t"github.com/coredns/coredns/coremain"\n'
        f"{imports})\n\nfunc main() {{\n\tcoremain.Run()\n}}\n"
    )


def _build_coredns(tc: Toolchain, log: Log) -> None:
    work = tc.src_dir / "coredns"
    work.mkdir(parents=True, exist_ok=True)
    (work / "go.mod").write_text(
        f"module jbod.dev/e2e/coredns\n\ngo 1.25.0\n\nrequire github.com/coredns/coredns {COREDNS_VERSION}\n"
    )
    (work / "main.go").write_text(_coredns_main())
    # No `go mod tidy`: it fetches the test dependencies of every imported package too; `go build`
    # with -mod=mod (go_env) records only what the build needs.
    _run(
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(tc.binary("coredns")), "."],
        cwd=work,
        log=log,
        label="coredns",
    )


def _go_install(
    label: str, packages: list[str], ldflags: str = "-s -w", tags: str = ""
) -> Callable[[Toolchain, Log], None]:
    def build(tc: Toolchain, log: Log) -> None:
        tc.bin_dir.mkdir(parents=True, exist_ok=True)
        env = go_env()
        env["GOBIN"] = str(tc.bin_dir)
        env["GOFLAGS"] = "-buildvcs=false"  # -mod=mod is invalid outside a module for go install
        with tempfile.TemporaryDirectory() as tmp:
            _run(
                [
                    "go",
                    "install",
                    "-trimpath",
                    *(["-tags", tags] if tags else []),
                    "-ldflags",
                    ldflags,
                    *packages,
                ],
                cwd=Path(tmp),
                log=log,
                label=label,
                env=env,
            )

    return build


def units(tc: Toolchain) -> list[Unit]:
    """The build units, biggest first."""
    go = _go_version()
    helm_ldflags = f"-s -w -X helm.sh/helm/v3/internal/version.version={HELM_VERSION}"
    containerd_ldflags = f"-s -w -X github.com/containerd/containerd/v2/version.Version={CONTAINERD_VERSION}"
    crictl_ldflags = f"-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version={CRICTL_VERSION}"
    return [
        Unit("kubernetes", K8S_COMMANDS, {"k8s": tc.k8s_version, "go": go}, _build_kubernetes),
        Unit("etcd", ("etcd",), {"etcd": ETCD_VERSION, "go": go}, _build_etcd),
        Unit(
            "helm",
            ("helm",),
            {"helm": HELM_VERSION, "go": go, "ldflags": helm_ldflags},
            _go_install("helm", [f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"], helm_ldflags),
        ),
        Unit(
            "kind",
            ("kind",),
            {"kind": KIND_VERSION, "go": go},
            _go_install("kind", [f"sigs.k8s.io/kind@{KIND_VERSION}"]),
        ),
        Unit(
            "containerd",
            CONTAINERD_COMMANDS,
            {
                "containerd": CONTAINERD_VERSION,
                "go": go,
                "ldflags": containerd_ldflags,
                "tags": CONTAINERD_TAGS,
            },
            _go_install(
                "containerd",
                [
                    f"github.com/containerd/containerd/v2/cmd/{c}@{CONTAINERD_VERSION}"
                    for c in CONTAINERD_COMMANDS
                ],
                containerd_ldflags,
                tags=CONTAINERD_TAGS,
            ),
        ),
        Unit(
            "crictl",
            ("crictl",),
            {"crictl": CRICTL_VERSION, "go": go, "ldflags": crictl_ldflags},
            _go_install("crictl", [f"sigs.k8s.io/cri-tools/cmd/crictl@{CRICTL_VERSION}"], crictl_ldflags),
        ),
        Unit(
            "coredns",
            ("coredns",),
            {"coredns": COREDNS_VERSION, "go": go, "plugins": ",".join(COREDNS_PLUGINS)},
            _build_coredns,
        ),
        Unit(
            "local-path-provisioner",
            ("local-path-provisioner",),
            {"local-path-provisioner": LOCAL_PATH_PROVISIONER_VERSION, "go": go},
            _go_install(
                "local-path-provisioner",
                [f"github.com/rancher/local-path-provisioner@{LOCAL_PATH_PROVISIONER_VERSION}"],
            ),
        ),
    ]


_GO_VERSION: str | None = None


def _go_version() -> str:
    global _GO_VERSION
    if _GO_VERSION is None:
        if shutil.which("go") is None:
            _GO_VERSION = "missing"
        else:
            out = subprocess.run(
                ["go", "env", "GOVERSION"], check=False, capture_output=True, text=True, env=go_env()
            )
            _GO_VERSION = out.stdout.strip() or "unknown"
    return _GO_VERSION


def _dir_size(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except OSError:
            pass
    return total


def build(
    tc: Toolchain | None = None, *, log: Log = print, jobs: int = 2, only: list[str] | None = None
) -> Toolchain:
    """Build every unit not yet current (at most `jobs` `go` processes at once); return the toolchain."""
    tc = tc or Toolchain.default()
    if shutil.which("go") is None:
        raise RuntimeError("`go` is not on PATH: the e2e toolchain is built from Go modules")
    todo = [u for u in units(tc) if (only is None or u.name in only) and not u.is_current(tc)]
    if not todo:
        log(f"Toolchain current in {tc.bin_dir}")
        return tc
    log(f"Building {', '.join(u.name for u in todo)} into {tc.bin_dir} ({_go_version()})")
    started = time.monotonic()

    def run_unit(unit: Unit) -> float:
        t0 = time.monotonic()
        log(f"[{unit.name}] started")
        unit.build(tc, log)
        seconds = time.monotonic() - t0
        unit.write_stamp(tc, seconds)
        log(f"[{unit.name}] built {', '.join(unit.binaries)} in {seconds:.0f} s")
        return seconds

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(run_unit, u): u for u in todo}
        errors = []
        for fut in concurrent.futures.as_completed(futures):
            try:
                fut.result()
            except Exception as exc:  # report every failed unit, then fail
                errors.append(f"{futures[fut].name}: {exc}")
    if errors:
        raise RuntimeError("toolchain build failed:\n" + "\n".join(errors))
    log(
        f"Built toolchain in {time.monotonic() - started:.0f} s; "
        f"bin {_dir_size(tc.bin_dir) / 2**20:.0f} MiB in {tc.bin_dir}"
    )
    return tc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.toolchain", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the missing binaries")
    b.add_argument("--jobs", type=int, default=2, help="build units in parallel (default 2)")
    b.add_argument("--only", action="append", help="unit name (see `status`); repeatable")
    sub.add_parser("status", help="print which binaries are built")
    sub.add_parser("path", help="print the bin directory")
    args = parser.parse_args(argv)
    tc = Toolchain.default()

    def log(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    if args.cmd == "build":
        try:
            build(tc, log=log, jobs=args.jobs, only=args.only)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
    elif args.cmd == "status":
        for unit in units(tc):
            print(
                f"{unit.name:12} {'built' if unit.is_current(tc) else 'MISSING':8} {' '.join(unit.binaries)}"
            )
    else:
        print(tc.bin_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
