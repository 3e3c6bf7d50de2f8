"""A controller quorum on an etcd that demands TLS and client certificates (real etcd, real certs).

What is checked: with `--etcd-cacert/--etcd-cert/--etcd-key` two controllers elect one active and
commit writes through https; without a client certificate the controller stops with one line and
leaves nothing; bad TLS flags are refused before anything starts.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jbod_controller.etcd_gateway import EtcdTls
from jbod_local.etcd import find_etcd_binary, free_ports
from tests.controller.conftest import Api, bring_up
from tests.controller.quorum_support import ADMIN_TOKEN, CLUSTER_TOKEN
from tests.controller.test_cli import assert_one_line_error, base_args, run_controller
from tests.harness import ControllerProcess

pytestmark = pytest.mark.quorum


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(directory: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, in `directory`."""
    directory.mkdir(parents=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
            "-keyout", "ca.key", "-out", "ca.crt", cwd=directory)  # fmt: skip
    (directory / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n"
    )
    for name in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=directory)  # fmt: skip
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "1", "-extfile", "san.ext", "-out", f"{name}.crt", cwd=directory)  # fmt: skip
    return directory


@pytest.fixture
def tls_etcd(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    certs = make_certs(tmp_path / "certs")
    client_port, peer_port = free_ports(2)
    url = f"https://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    log = (tmp_path / "etcd.log").open("w")
    process = subprocess.Popen(
        [
            str(find_etcd_binary()),
            "--name=tls",
            f"--data-dir={tmp_path / 'etcd'}",
            f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=tls={peer}",
            f"--cert-file={certs / 'server.crt'}",
            f"--key-file={certs / 'server.key'}",
            f"--trusted-ca-file={certs / 'ca.crt'}",
            "--client-cert-auth",
            "--log-level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                tls = EtcdTls(str(certs / "ca.crt"), str(certs / "client.crt"), str(certs / "client.key"))
                httpx.get(url + "/health", verify=tls.context(), timeout=1)
                break
            except httpx.HTTPError:
                assert process.poll() is None and time.monotonic() < deadline, (
                    tmp_path / "etcd.log"
                ).read_text()
                time.sleep(0.1)
        yield url, certs
    finally:
        process.kill()
        process.wait()
        log.close()


def node(base: Path, node_id: int, url: str, certs: Path, *, client_cert: bool = True) -> ControllerProcess:
    data_dir = base / f"controller-{node_id}"
    data_dir.mkdir(parents=True)
    for name, token in (("cluster.token", CLUSTER_TOKEN), ("admin.token", ADMIN_TOKEN)):
        (data_dir / name).write_text(token + "\n")
        (data_dir / name).chmod(0o600)
    tls = ["--etcd-cacert", str(certs / "ca.crt")]
    if client_cert:
        tls += ["--etcd-cert", str(certs / "client.crt"), "--etcd-key", str(certs / "client.key")]
    return ControllerProcess(data_dir, extra_args=["--etcd-endpoints", url, "--node-id", str(node_id), *tls])


def test_a_quorum_on_an_etcd_with_client_certificates(tmp_path: Path, tls_etcd: tuple[str, Path]) -> None:
    url, certs = tls_etcd
    first = node(tmp_path, 1, url, certs).start()
    second = node(tmp_path, 2, url, certs).start()
    try:
        deadline = time.monotonic() + 30
        while True:
            described = Api(first).cluster()
            if described.get("activeController") and len(described["controllers"]) == 2:
                break
            assert time.monotonic() < deadline, described
            time.sleep(0.1)
        active = first if described["activeController"]["nodeId"] == 1 else second
        api = Api(active)
        bring_up(api, [1])
        api.create_topic("over-tls", numPartitions=1, replicationFactor=1)
        end = api.end_offset()
        standby = Api(second if active is first else first)
        deadline = time.monotonic() + 30
        while standby.end_offset() < end:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert [t["name"] for t in standby.topics()] == ["over-tls"]
    finally:
        first.kill()
        second.kill()


def test_without_a_client_certificate_the_controller_stops_in_one_line(
    tmp_path: Path, tls_etcd: tuple[str, Path]
) -> None:
    url, certs = tls_etcd
    data_dir = tmp_path / "data"
    result = run_controller(
        *base_args(data_dir),
        "--etcd-endpoints",
        url,
        "--node-id",
        "1",
        "--etcd-cacert",
        str(certs / "ca.crt"),
    )
    assert_one_line_error(result, "etcd")
    assert not data_dir.exists()


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--etcd-cert", "{certs}/client.crt"], "--etcd-cert and --etcd-key go together"),
        (["--etcd-cacert", "{certs}/missing.crt"], "not a readable file"),
        (["--etcd-cacert", "{certs}/client.key"], "cannot use the etcd TLS files"),
    ],
)
def test_bad_tls_flags(tmp_path: Path, flags: list[str], needle: str) -> None:
    certs = make_certs(tmp_path / "certs")
    expanded = [f.replace("{certs}", str(certs)) for f in flags]
    result = run_controller(
        *base_args(tmp_path / "data"), "--etcd-endpoints", "https://127.0.0.1:1", "--node-id", "1", *expanded
    )
    assert_one_line_error(result, needle)
    plain = run_controller(
        *base_args(tmp_path / "data"),
        "--etcd-endpoints",
        "http://127.0.0.1:1",
        "--node-id",
        "1",
        "--etcd-cacert",
        str(certs / "ca.crt"),
    )
    assert_one_line_error(plain, "need https://")
