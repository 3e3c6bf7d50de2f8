"""Every image the kind tier needs, built locally: no registry is ever contacted.

Guarantees:
* `debian_base` is Debian bookworm made by `debootstrap --variant=minbase` and `docker import`; every
  other image here starts from it, from `scratch`, or from each other. Inside a build, only
  Debian's package mirror is reached (apt over http, as on the host).
* The node image (`NODE_IMAGE`) holds the Kubernetes, containerd and crictl binaries of the e2e
  toolchain (`e2e.toolchain`, built from Go modules), Debian's systemd, runc and CNI plugins, and
  one archive of every image a node runs, tagged exactly as kubeadm v1.36 and the node's manifests
  name them (pause, etcd, the control plane, kube-proxy, CoreDNS, local-path-provisioner and its
  helper); the node imports that archive into containerd before the kubelet starts.
* The project image (`PROJECT_IMAGE`) is the repository's own `Dockerfile`, built FROM a local
  Python 3.11 image and installed from a wheelhouse made on the host (`--no-index`), so no CA
  bundle ever enters a build or an image.
* Each image carries the label `LABEL` = a digest of its inputs (recipe, files, toolchain unit
  stamps, base image digest); an image whose label matches is not rebuilt, so a second run
  reuses everything (the engine's data root lives in the e2e cache); `all()` then removes the
  untagged images a rebuild left behind.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import yaml  # type: ignore[import-untyped]  # PyYAML, installed with the kubernetes client

from e2e import toolchain
from e2e.kind.docker import Docker, ensure_packages

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
LABEL = "dev.jbod.e2e.inputs"
K8S_VERSION = toolchain.K8S_VERSION
DEBIAN_IMAGE = "jbod-local/debian:bookworm"
PYTHON_IMAGE = "jbod-local/python:3.11-bookworm"
PYTHON_VERSION = (3, 11)  # Debian bookworm's python3
NODE_IMAGE = f"jbod-local/kind-node:{K8S_VERSION}"
PROJECT_IMAGE = "jbod:dev"
ETCD_TAG = toolchain.ETCD_VERSION.lstrip("v") + "-0"
PAUSE_TAG = "3.10.2"
HELPER_IMAGE = "jbod-local/local-path-helper:bookworm"
PROVISIONER_IMAGE = f"jbod-local/local-path-provisioner:{toolchain.LOCAL_PATH_PROVISIONER_VERSION}"
WHEELHOUSE = ROOT / ".wheelhouse"
# The sources the project image is built from (what .dockerignore admits).
PROJECT_INPUTS = (
    "pyproject.toml",
    "README.md",
    "Dockerfile",
    "core",
    "runtime",
    "kafka",
    "client",
    "controller",
    "agent",
    "operator",
    "pipeline",
)

Log = Callable[[str], None]


KIND_CONFIG = HERE / "kind-config.yaml"
PLACEHOLDER = re.compile(r"@[A-Z_]+@")


def node_file_values() -> dict[str, str]:
    """What the node image's files name by placeholder: images built here, the kind config's subnets."""
    networking = yaml.safe_load(KIND_CONFIG.read_text())["networking"]
    return {
        "@PAUSE_IMAGE@": f"registry.k8s.io/pause:{PAUSE_TAG}",
        "@PROVISIONER_IMAGE@": PROVISIONER_IMAGE,
        "@HELPER_IMAGE@": HELPER_IMAGE,
        "@POD_SUBNET@": str(networking["podSubnet"]),
        "@SERVICE_SUBNET@": str(networking["serviceSubnet"]),
    }


def render_node_files(files: Path) -> None:
    """Replace the placeholders in a copy of `node/files`; raise if one has no value."""
    values = node_file_values()
    for path in sorted(p for p in files.rglob("*") if p.is_file()):
        text = path.read_text()
        if "@" not in text:
            continue
        rendered = PLACEHOLDER.sub(lambda m: values.get(m.group(0), m.group(0)), text)
        left = PLACEHOLDER.findall(rendered)
        if left:
            raise RuntimeError(f"{path}: no value for {', '.join(sorted(set(left)))}")
        path.write_text(rendered)


def project_build_command(tag: str = PROJECT_IMAGE) -> list[str]:
    """`docker build` of the project image with registry access (run from the repository root)."""
    return ["docker", "build", "--target", "runtime", "-t", tag, "."]


def _digest(parts: Iterable[bytes | str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()[:24]


def _tree_bytes(paths: Iterable[Path]) -> list[bytes]:
    out: list[bytes] = []
    for path in paths:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            if "__pycache__" in f.parts or f.suffix in (".pyc", ".pyo") or ".egg-info" in str(f):
                continue
            out += [str(f.relative_to(ROOT)).encode(), f.read_bytes()]
    return out


def _stamps(tc: toolchain.Toolchain, units: Iterable[str]) -> list[str]:
    out = []
    for unit in toolchain.units(tc):
        if unit.name in units:
            out.append(json.dumps({"unit": unit.name, "key": dict(unit.key)}, sort_keys=True))
    return out


@dataclasses.dataclass
class Builder:
    docker: Docker
    tc: toolchain.Toolchain
    log: Log = print
    work: Path = dataclasses.field(default_factory=lambda: toolchain.cache_root() / "kind" / "build")

    def current(self, image: str, key: str) -> bool:
        return self.docker.image_label(image, LABEL) == key

    def image_id(self, image: str) -> str:
        return self.docker.run("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()

    def build(
        self,
        image: str,
        context: Path,
        key: str,
        *,
        args: dict[str, str] | None = None,
        target: str | None = None,
    ) -> None:
        started = time.monotonic()
        cmd = ["build", "--tag", image, "--label", f"{LABEL}={key}"]
        for name, value in (args or {}).items():
            cmd += ["--build-arg", f"{name}={value}"]
        if target:
            cmd += ["--target", target]
        self.docker.run(*cmd, str(context))
        self.log(f"Built image {image} in {time.monotonic() - started:.0f} s")

    # -- the Debian base -------------------------------------------------------------------------
    def debian_base(self) -> str:
        key = _digest(["debootstrap --variant=minbase bookworm http://deb.debian.org/debian", "1"])
        if self.current(DEBIAN_IMAGE, key):
            return key
        ensure_packages(("debootstrap",))
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="jbod-debootstrap-") as tmp:
            rootfs = Path(tmp) / "rootfs"
            proc = subprocess.run(
                ["debootstrap", "--variant=minbase", "bookworm", str(rootfs), "http://deb.debian.org/debian"],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"debootstrap failed: {(proc.stdout + proc.stderr)[-3000:]}")
            (rootfs / "etc/apt/apt.conf.d/99jbod-no-recommends").write_text(
                'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n'
            )
            tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
            assert tar.stdout is not None
            imported = subprocess.run(
                [
                    "docker",
                    "import",
                    "--change",
                    f"LABEL {LABEL}={key}",
                    "--change",
                    'CMD ["/bin/bash"]',
                    "-",
                    DEBIAN_IMAGE,
                ],
                stdin=tar.stdout,
                env=self.docker.env(),
                capture_output=True,
                text=True,
                check=False,
            )
            tar.stdout.close()  # tar gets SIGPIPE instead of blocking if the import ended early
            tar.wait()
            if imported.returncode != 0 or tar.returncode != 0:
                raise RuntimeError(f"docker import failed: {imported.stderr.strip()}")
        self.log(f"Built image {DEBIAN_IMAGE} (debootstrap) in {time.monotonic() - started:.0f} s")
        return key

    # -- images FROM scratch or the base, one binary each ------------------------------------------
    def _simple(self, image: str, dockerfile: str, files: dict[str, Path], *, base_key: str = "") -> str:
        key = _digest(
            [
                dockerfile,
                base_key,
                *(f"{n}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for n, p in sorted(files.items())),
            ]
        )
        if self.current(image, key):
            return key
        ctx = self.work / "ctx" / image.replace("/", "_").replace(":", "_")
        shutil.rmtree(ctx, ignore_errors=True)
        ctx.mkdir(parents=True)
        for name, src in files.items():
            shutil.copy2(src, ctx / name)
        (ctx / "Dockerfile").write_text(dockerfile)
        self.build(image, ctx, key)
        return key

    def _pause_binary(self) -> Path:
        """Kubernetes' own pause.c (from the k8s.io/kubernetes module), compiled statically."""
        source = toolchain.k8s_module_dir(self.tc) / "build" / "pause" / "linux" / "pause.c"
        flags = ["-Os", "-static", "-Wall", "-Werror", f"-DVERSION=v{PAUSE_TAG}-jbod"]
        out = self.work / "pause"
        stamp = out.with_suffix(".key")
        key = _digest([source.read_bytes(), *flags])
        if out.exists() and stamp.exists() and stamp.read_text() == key:
            return out
        ensure_packages(("gcc",))
        out.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            ["gcc", *flags, "-o", str(out), str(source)], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"gcc pause.c failed: {proc.stderr.strip()}")
        stamp.write_text(key)
        return out

    def node_images(self) -> dict[str, str]:
        """Build every image a node runs; return {image: key}."""
        bin_ = self.tc.binary
        debian_key = self.debian_base()
        path_env = "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
        out: dict[str, str] = {}
        for command in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            image = f"registry.k8s.io/{command}:{K8S_VERSION}"
            out[image] = self._simple(
                image,
                f"FROM scratch\n{path_env}COPY {command} /usr/local/bin/{command}\n",
                {command: bin_(command)},
            )
        out[f"registry.k8s.io/etcd:{ETCD_TAG}"] = self._simple(
            f"registry.k8s.io/etcd:{ETCD_TAG}",
            f"FROM scratch\n{path_env}COPY etcd /usr/local/bin/etcd\n",
            {"etcd": bin_("etcd")},
        )
        out[f"registry.k8s.io/pause:{PAUSE_TAG}"] = self._simple(
            f"registry.k8s.io/pause:{PAUSE_TAG}",
            'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n',
            {"pause": self._pause_binary()},
        )
        coredns = f"registry.k8s.io/coredns/coredns:{toolchain.COREDNS_VERSION}"
        out[coredns] = self._simple(
            coredns,
            'FROM scratch\nCOPY coredns /coredns\nEXPOSE 53 53/udp\nENTRYPOINT ["/coredns"]\n',
            {"coredns": bin_("coredns")},
        )
        out[PROVISIONER_IMAGE] = self._simple(
            PROVISIONER_IMAGE,
            f"FROM scratch\n{path_env}COPY local-path-provisioner /usr/local/bin/local-path-provisioner\n",
            {"local-path-provisioner": bin_("local-path-provisioner")},
        )
        out[HELPER_IMAGE] = self._simple(
            HELPER_IMAGE,
            f"FROM {DEBIAN_IMAGE} AS busybox\n"
            "RUN apt-get update && apt-get install -y busybox-static && rm -rf /var/lib/apt/lists/*\n"
            "FROM scratch\n"
            f"{path_env}COPY --from=busybox /bin/busybox /bin/busybox\n"
            'RUN ["/bin/busybox", "--install", "-s", "/bin"]\n',
            {},
            base_key=debian_key,
        )
        proxy = f"registry.k8s.io/kube-proxy:{K8S_VERSION}"
        out[proxy] = self._simple(
            proxy,
            f"FROM {DEBIAN_IMAGE}\n"
            "RUN apt-get update && apt-get install -y iptables nftables conntrack ipset kmod && rm -rf /var/lib/apt/lists/*\n"
            "COPY kube-proxy /usr/local/bin/kube-proxy\n",
            {"kube-proxy": bin_("kube-proxy")},
            base_key=debian_key,
        )
        return out

    # -- the node image --------------------------------------------------------------------------
    def node_image(self) -> str:
        images = self.node_images()
        node_dir = HERE / "node"
        key = _digest(
            [
                *_tree_bytes([node_dir, KIND_CONFIG]),
                json.dumps(node_file_values(), sort_keys=True),
                *_stamps(self.tc, ("kubernetes", "containerd", "crictl")),
                *(f"{image}={k}" for image, k in sorted(images.items())),
                self.image_id(DEBIAN_IMAGE),
            ]
        )
        if self.current(NODE_IMAGE, key):
            return key
        ctx = self.work / "node-context"
        shutil.rmtree(ctx, ignore_errors=True)
        shutil.copytree(node_dir, ctx)
        (ctx / "bin").mkdir()
        for name in ("kubelet", "kubeadm", "kubectl", *toolchain.CONTAINERD_COMMANDS, "crictl"):
            shutil.copy2(self.tc.binary(name), ctx / "bin" / name)
        (ctx / "files" / "kind" / "version").write_text(f"{K8S_VERSION}\n")
        render_node_files(ctx / "files")
        (ctx / "images").mkdir()
        started = time.monotonic()
        self.docker.run("save", "--output", str(ctx / "images" / "node-images.tar"), *sorted(images))
        self.log(f"Saved {len(images)} node images in {time.monotonic() - started:.0f} s")
        self.build(NODE_IMAGE, ctx, key, args={"BASE_IMAGE": DEBIAN_IMAGE})
        shutil.rmtree(ctx, ignore_errors=True)
        return key

    # -- the project image -----------------------------------------------------------------------
    def python_base(self) -> str:
        debian_key = self.debian_base()
        return self._simple(
            PYTHON_IMAGE,
            f"FROM {DEBIAN_IMAGE}\n"
            "RUN apt-get update && apt-get install -y python3 python3-venv python3-pip python-is-python3 "
            "&& rm -rf /var/lib/apt/lists/*\n",
            {},
            base_key=debian_key,
        )

    def wheelhouse(self) -> Path:
        """The project's wheel and every dependency's, made on the host (which trusts the proxy CA).

        The host's Python must be the image's minor version: binary wheels are per version.
        """
        if sys.version_info[:2] != PYTHON_VERSION:
            raise RuntimeError(
                f"the offline wheelhouse is made by the host's Python, which is "
                f"{sys.version_info[0]}.{sys.version_info[1]}; the image's is 3.11 (run with python3.11)"
            )
        WHEELHOUSE.mkdir(exist_ok=True)
        for cmd in (
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(WHEELHOUSE), str(ROOT)],
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--dest",
                str(WHEELHOUSE),
                "setuptools>=77",
                "wheel",
            ],
        ):
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
            if proc.returncode != 0:
                raise RuntimeError(
                    f"{' '.join(cmd[2:4])} failed: {(proc.stderr or proc.stdout).strip()[-3000:]}"
                )
        return WHEELHOUSE

    def project_image(self, tag: str = PROJECT_IMAGE) -> str:
        python_key = self.python_base()
        key = _digest([*_tree_bytes(ROOT / p for p in PROJECT_INPUTS), python_key])
        if self.current(tag, key):
            return key
        started = time.monotonic()
        shutil.rmtree(WHEELHOUSE, ignore_errors=True)
        self.wheelhouse()
        self.log(f"Made wheelhouse {WHEELHOUSE} in {time.monotonic() - started:.0f} s")
        self.build(
            tag,
            ROOT,
            key,
            args={"PYTHON_IMAGE": PYTHON_IMAGE, "WHEELHOUSE": WHEELHOUSE.name},
            target="runtime",
        )
        return key

    def prune(self) -> None:
        """Remove the images a rebuild left without a tag, so the cache holds one of each."""
        self.docker.run("image", "prune", "--force")

    def all(self) -> None:
        self.node_image()
        self.project_image()
        self.prune()
