"""Unit tests of the e2e infrastructure's own pieces: the toolchain's units and staging pins, and
the runc wrapper the kind tier runs privileged containers through. No cluster, no Docker."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from e2e import toolchain
from e2e.kind import cluster, images
from e2e.kind.docker import CAPFILTER

CAP_NAMES = [
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
    "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
    "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
    "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
    "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
    "CHECKPOINT_RESTORE",
]  # fmt: skip


def test_staging_replaces_only_required_staging_modules() -> None:
    mod = """module k8s.io/kubernetes
require (
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
\tgithub.com/x/y v1.0.0
)
replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tk8s.io/sample-cli-plugin => ./staging/src/k8s.io/sample-cli-plugin
)
"""
    assert toolchain.staging_replaces(mod, "v1.36.3") == {
        "k8s.io/api": "v0.36.3",
        "k8s.io/client-go": "v0.36.3",
    }


def test_every_binary_comes_from_exactly_one_unit(tmp_path: Path) -> None:
    tc = toolchain.Toolchain(root=tmp_path)
    produced = [b for unit in toolchain.units(tc) for b in unit.binaries]
    assert sorted(produced) == sorted(toolchain.ALL_BINARIES)
    assert len(produced) == len(set(produced))
    assert sorted(tc.missing()) == sorted(toolchain.ALL_BINARIES)  # nothing built in an empty cache


def test_a_unit_is_current_only_with_its_stamp_and_every_binary(tmp_path: Path) -> None:
    tc = toolchain.Toolchain(root=tmp_path)
    unit = next(u for u in toolchain.units(tc) if u.name == "containerd")
    tc.bin_dir.mkdir(parents=True)
    for name in unit.binaries:
        path = tc.binary(name)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    assert not unit.is_current(tc)
    unit.write_stamp(tc, 1.0)
    assert unit.is_current(tc)
    tc.binary(unit.binaries[0]).unlink()
    assert not unit.is_current(tc)


def test_image_parts() -> None:
    assert cluster._image_parts("jbod:dev") == ("jbod", "dev")
    assert cluster._image_parts("localhost:5000/jbod") == ("localhost:5000/jbod", "latest")
    assert cluster._image_parts("ghcr.io/jbod-dev/jbod:0.1.0") == ("ghcr.io/jbod-dev/jbod", "0.1.0")


def _bounding_set() -> set[str]:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            mask = int(line.split()[1], 16)
            return {f"CAP_{name}" for i, name in enumerate(CAP_NAMES) if mask >> i & 1}
    raise AssertionError("no CapBnd in /proc/self/status")


@pytest.mark.skipif(shutil.which("jq") is None, reason="runc-capfilter needs jq")
@pytest.mark.parametrize("form", ["create", "exec"])
def test_runc_capfilter_keeps_only_capabilities_the_machine_can_grant(tmp_path: Path, form: str) -> None:
    every = [f"CAP_{name}" for name in CAP_NAMES]
    caps = {key: list(every) for key in ("bounding", "effective", "permitted")}
    fake_runc = tmp_path / "runc"
    fake_runc.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/args"\n')
    fake_runc.chmod(fake_runc.stat().st_mode | stat.S_IXUSR)
    if form == "create":
        bundle = tmp_path / "bundle"
        bundle.mkdir()
        spec = bundle / "config.json"
        spec.write_text(
            json.dumps({"ociVersion": "1.0.2", "process": {"capabilities": caps, "args": ["sh"]}})
        )
        args = ["--root", "/run/x", "create", "--bundle", str(bundle), "--pid-file", "p", "ctr1"]
        read = lambda: json.loads(spec.read_text())["process"]["capabilities"]  # noqa: E731
    else:
        spec = tmp_path / "process.json"
        spec.write_text(json.dumps({"capabilities": caps, "args": ["sh"]}))
        args = ["exec", "--process", str(spec), "--detach", "ctr1"]
        read = lambda: json.loads(spec.read_text())["capabilities"]  # noqa: E731
    proc = subprocess.run(
        [str(CAPFILTER), *args],
        env={**os.environ, "RUNC_CAPFILTER_RUNC": str(fake_runc)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "args").read_text().split() == args  # the real runc gets the same arguments
    allowed = _bounding_set()
    for key, kept in read().items():
        assert set(kept) == allowed & set(every), key  # exactly the grantable ones, none missing


def _readme_kind_block() -> list[list[str]]:
    text = (cluster.ROOT / "README.md").read_text()
    section = text[text.index("## On Kubernetes") :]
    block = section[section.index("```sh\n") + 6 : section.index("```\n", section.index("```sh\n") + 6)]
    return [shlex.split(line) for line in block.splitlines() if line.strip()]


def _is_subsequence(needle: list[str], haystack: list[str]) -> bool:
    it = iter(haystack)
    return all(token in it for token in needle)


def test_readme_kind_commands_are_what_make_kind_up_runs(tmp_path: Path) -> None:
    """The README's first Kubernetes lines are the commands `python -m e2e.kind up` runs (it may add
    flags, such as its own kubeconfig and a wait): one code path for users and for CI."""
    readme = _readme_kind_block()
    kind = cluster.KindCluster(docker=None, tc=toolchain.Toolchain(root=tmp_path))  # type: ignore[arg-type]
    ours = [
        kind.create_command(),
        images.project_build_command(),
        kind.load_command(images.PROJECT_IMAGE),
        kind.install_command(images.PROJECT_IMAGE),
    ]
    assert len(readme) >= len(ours)
    for line, command in zip(readme, ours, strict=False):
        assert _is_subsequence(line, command), (
            f"README `{' '.join(line)}` is not what e2e.kind runs: {command}"
        )
    assert (cluster.ROOT / readme[0][readme[0].index("--config") + 1]).is_file()


def test_node_files_render_every_placeholder_from_one_source(tmp_path: Path) -> None:
    """The node image names its images and subnets once: images.py's tags and kind-config.yaml."""
    files = tmp_path / "files"
    shutil.copytree(images.HERE / "node" / "files", files)
    images.render_node_files(files)
    rendered = {str(p.relative_to(files)): p.read_text() for p in files.rglob("*") if p.is_file()}
    assert not [name for name, text in rendered.items() if images.PLACEHOLDER.search(text)]
    values = images.node_file_values()
    assert values["@POD_SUBNET@"] == "10.244.0.0/16" and values["@SERVICE_SUBNET@"] == "10.96.0.0/16"
    assert f'sandbox_image = "{values["@PAUSE_IMAGE@"]}"' in rendered["etc/containerd/config.toml"]
    assert '"subnet": "NODE_POD_SUBNET"' in rendered["kind/cni-ptp.conflist"]  # pod-network.sh's
    assert f"podSubnet: {values['@POD_SUBNET@']}" in rendered["kind/manifests/default-cni.yaml"]
    assert f"-d {values['@SERVICE_SUBNET@']} " in rendered["usr/local/bin/entrypoint"]
    storage = rendered["kind/manifests/default-storage.yaml"]
    assert f"image: {images.PROVISIONER_IMAGE}" in storage and storage.count(images.HELPER_IMAGE) == 2
    broken = files / "etc" / "extra.conf"
    broken.write_text("x = @NO_SUCH_VALUE@\n")
    with pytest.raises(RuntimeError, match="NO_SUCH_VALUE"):
        images.render_node_files(files)


def test_zoned_config_is_the_one_node_config_plus_workers() -> None:
    """kind-zones.yaml differs from kind-config.yaml only by its three zoned workers, so the node
    image (rendered from kind-config.yaml's subnets) serves both."""
    one = yaml.safe_load(cluster.CONFIG.read_text())
    zoned = yaml.safe_load(cluster.ZONES_CONFIG.read_text())
    workers = zoned.pop("nodes")
    assert {k: v for k, v in one.items() if k != "nodes"} == zoned
    assert workers[0] == {"role": "control-plane"} == one["nodes"][0]
    assert [(w["role"], w["labels"][cluster.ZONE_LABEL]) for w in workers[1:]] == [
        ("worker", "zone-a"),
        ("worker", "zone-b"),
        ("worker", "zone-c"),
    ]


def _kubernetes_source(path: str) -> str:
    """A file of the pinned k8s.io/kubernetes from Go's module cache (skips the test without it)."""
    if shutil.which("go") is None:
        pytest.skip("no go")
    modcache = subprocess.run(
        ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True
    ).stdout.strip()
    source = Path(modcache) / f"k8s.io/kubernetes@{toolchain.K8S_VERSION}" / path
    if not source.exists():
        pytest.skip("k8s.io/kubernetes not in the module cache (python -m e2e.toolchain build)")
    return source.read_text()


def test_node_images_carry_the_versions_kubeadm_pins() -> None:
    """kubeadm starts etcd, CoreDNS and pause by the tags it pins; the node image must hold those."""
    text = _kubernetes_source("cmd/kubeadm/app/constants/constants.go")
    assert f'PauseVersion = "{images.PAUSE_TAG}"' in text
    assert f'DefaultEtcdVersion = "{images.ETCD_TAG}"' in text
    assert f'CoreDNSVersion = "{toolchain.COREDNS_VERSION}"' in text


def test_the_coredns_build_has_every_plugin_of_kubeadms_corefile() -> None:
    """CoreDNS is built with only `COREDNS_PLUGINS`; kubeadm's Corefile must need no other one."""
    text = _kubernetes_source("cmd/kubeadm/app/phases/addons/dns/manifests.go")
    start = text.index("Corefile: |")
    corefile = text[start : text.index("`", start)]  # the Go raw string holding the ConfigMap
    directives = {
        line.split()[0]
        for line in corefile.splitlines()[2:]
        if line.strip() and line.startswith(" " * 8) and not line.startswith(" " * 9)
    } - {"}", "{{-"}
    packages = {"prometheus": "metrics"}  # the directive `prometheus` is the package plugin/metrics
    assert {"errors", "kubernetes", "forward", "cache", "loop", "reload"} <= directives
    assert {packages.get(d, d) for d in directives} <= set(toolchain.COREDNS_PLUGINS)
    assert "plugin/kubernetes" in toolchain._coredns_main()
