"""`jbod-controller` command-line errors (protocol §5): one line, non-zero exit, no traceback.

Covers: bad flags and values, a cluster id that differs from the stored one, unreadable or
unusable token files, a port already in use, an unusable or already-locked data dir, a damaged
`meta.properties`, a metadata log that cannot be recovered; and the happy path of creating missing
token files (mode 0600, path printed).
"""

from __future__ import annotations

import socket
import stat
import struct
import subprocess
import zlib
from pathlib import Path

import orjson
import pytest

from tests.harness import CONTROLLER, ControllerProcess

PREFIX = "jbod-controller: error:"


def run_controller(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen([CONTROLLER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        pytest.fail(f"jbod-controller kept running with {args}: {stderr}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {result.stderr!r}"
    [line] = lines
    assert line.startswith(PREFIX), line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


def base_args(data_dir: Path, cluster_id: str = "cli-cluster") -> list[str]:
    return ["--data-dir", str(data_dir), "--cluster-id", cluster_id, "--listen", "127.0.0.1:0"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "--data-dir"),
        (["--data-dir", "{data}"], "--cluster-id"),
        (["{base}", "--bogus"], "--bogus"),
        (["{base}", "--listen", "nope"], "--listen"),
        (["{base}", "--listen", "127.0.0.1:99999"], "--listen"),
        (["{base}", "--listen", ":9093"], "--listen"),
        (["{base}", "--broker-session-timeout-ms", "soon"], "--broker-session-timeout-ms"),
        (["{base}", "--broker-session-timeout-ms", "0"], "--broker-session-timeout-ms"),
        (["{base}", "--broker-session-timeout-ms", "-5"], "--broker-session-timeout-ms"),
        (["{base}", "--default-replication-factor", "0"], "--default-replication-factor"),
        (["{base}", "--default-min-insync-replicas", "three"], "--default-min-insync-replicas"),
        (["{base}", "--snapshot-interval-records", "0"], "--snapshot-interval-records"),
        (["{base}", "--snapshot-interval-records", "1.5"], "--snapshot-interval-records"),
        (["{base}", "--log-retention-bytes", "lots"], "--log-retention-bytes"),
        (["{base}", "--log-level", "CHATTY"], "--log-level"),
        (["--data-dir", "{data}", "--cluster-id", "has spaces"], "--cluster-id"),
        (["--data-dir", "{data}", "--cluster-id", ""], "--cluster-id"),
        (["--data-dir", "{data}", "--cluster-id", "x" * 65], "--cluster-id"),
        (["{base}", "--node-id", "1"], "--node-id needs --etcd-endpoints"),
        (["{base}", "--etcd-prefix", "/x"], "--etcd-prefix needs --etcd-endpoints"),
        (["{base}", "--etcd-endpoints", "http://127.0.0.1:2379"], "needs --node-id"),
        (["{base}", "--etcd-endpoints", "127.0.0.1:2379", "--node-id", "1"], "--etcd-endpoints"),
        (["{base}", "--etcd-endpoints", " , ", "--node-id", "1"], "--etcd-endpoints"),
        (["{base}", "--etcd-endpoints", "http://127.0.0.1:2379", "--node-id", "0"], "--node-id"),
        (["{base}", "--etcd-endpoints", "http://127.0.0.1:2379", "--node-id", "c-x"], "--node-id"),
        (
            ["{base}", "--etcd-endpoints", "http://127.0.0.1:2379", "--node-id", "1", "--lease-ms", "10"],
            "--lease-ms",
        ),
        (
            ["{base}", "--etcd-endpoints", "http://127.0.0.1:2379", "--node-id", "1", "--etcd-prefix", "x"],
            "--etcd-prefix",
        ),
        (["{base}", "--advertised-url", "nope"], "--advertised-url"),
    ],
)
def test_bad_flags(tmp_path: Path, args: list[str], needle: str) -> None:
    data_dir = tmp_path / "data"
    expanded: list[str] = []
    for arg in args:
        if arg == "{base}":
            expanded.extend(base_args(data_dir))
        else:
            expanded.append(arg.replace("{data}", str(data_dir)))
    assert_one_line_error(run_controller(*expanded), needle)


def test_cluster_id_different_from_the_stored_one(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with ControllerProcess(data_dir=data_dir, cluster_id="first-cluster"):
        pass
    result = run_controller(*base_args(data_dir, "second-cluster"))
    assert_one_line_error(result, "first-cluster", "second-cluster")
    # The stored id is untouched: the first cluster still starts.
    with ControllerProcess(data_dir=data_dir, cluster_id="first-cluster") as proc, proc.admin() as admin:
        assert admin.get("/v1/cluster").json()["clusterId"] == "first-cluster"


def test_token_file_that_is_a_directory(tmp_path: Path) -> None:
    token_dir = tmp_path / "token-dir"
    token_dir.mkdir()
    result = run_controller(*base_args(tmp_path / "data"), "--cluster-token-file", str(token_dir))
    assert_one_line_error(result, str(token_dir))


def test_token_file_that_is_not_utf8(tmp_path: Path) -> None:
    token = tmp_path / "binary.token"
    token.write_bytes(b"\xff\xfe\x00garbage\n")
    result = run_controller(*base_args(tmp_path / "data"), "--admin-token-file", str(token))
    assert_one_line_error(result, str(token))


def test_empty_token_file(tmp_path: Path) -> None:
    token = tmp_path / "empty.token"
    token.write_text("\n")
    result = run_controller(*base_args(tmp_path / "data"), "--cluster-token-file", str(token))
    assert_one_line_error(result, str(token))


def test_token_file_that_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a dir")
    token = blocker / "cluster.token"
    result = run_controller(*base_args(tmp_path / "data"), "--cluster-token-file", str(token))
    assert_one_line_error(result, str(token))


def test_port_already_in_use(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        args = ["--data-dir", str(tmp_path / "data"), "--cluster-id", "c", "--listen", f"127.0.0.1:{port}"]
        result = run_controller(*args)
    assert_one_line_error(result, str(port))


def test_data_dir_that_is_a_file(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.write_text("not a dir")
    assert_one_line_error(run_controller(*base_args(data_dir)), str(data_dir))


def test_data_dir_in_use_by_another_controller(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with ControllerProcess(data_dir=data_dir, cluster_id="cli-cluster"):
        assert_one_line_error(run_controller(*base_args(data_dir)), str(data_dir))


@pytest.mark.parametrize(
    "content",
    [b"version=1\nnode.id=zero\n", b"\xff\xfecluster.id=x\n", b"", None],
    ids=["bad-value", "not-utf8", "empty", "a-dir"],
)
def test_damaged_meta_properties(tmp_path: Path, content: bytes | None) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    if content is None:
        (data_dir / "meta.properties").mkdir()
    else:
        (data_dir / "meta.properties").write_bytes(content)
    assert_one_line_error(run_controller(*base_args(data_dir)), "meta.properties")


def test_metadata_log_that_cannot_be_recovered(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with ControllerProcess(data_dir=data_dir, cluster_id="cli-cluster") as proc, proc.broker() as client:
        reply = client.post(
            "/v1/brokers/register",
            json={
                "brokerId": 1,
                "clusterId": "cli-cluster",
                "incarnationId": "ws5vRH7U1Xt45RBhcxHYow",
                "logDirs": ["kbdYSiJlsfXNYT4w2PFq3w"],
            },
        ).json()
        assert reply["errorCode"] == 0
    # A whole, checksummed frame whose record skips offsets is damage, not a torn tail.
    payload = orjson.dumps(
        {"offset": 99, "type": "RemoveTopicRecord", "data": {"topicId": "ws5vRH7U1Xt45RBhcxHYow"}}
    )
    [segment] = sorted((data_dir / "metadata").glob("*.log"))
    with segment.open("ab") as handle:
        handle.write(struct.pack(">II", len(payload), zlib.crc32(payload)) + payload)
    assert_one_line_error(run_controller(*base_args(data_dir, "cli-cluster")), "offset")


def test_missing_token_files_are_created_private_and_printed(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    cluster_token = tmp_path / "tokens" / "cluster.token"
    proc = ControllerProcess(data_dir=data_dir, extra_args=["--cluster-token-file", str(cluster_token)])
    proc.start()
    try:
        assert proc.process is not None
        assert stat.S_IMODE(cluster_token.stat().st_mode) == 0o600
        admin_token = data_dir / "admin.token"
        assert stat.S_IMODE(admin_token.stat().st_mode) == 0o600
        assert cluster_token.read_text().strip()
        assert cluster_token.read_text().strip() != admin_token.read_text().strip()
    finally:
        proc.kill()
    fresh = tmp_path / "fresh"
    process = subprocess.Popen(
        [CONTROLLER, *base_args(fresh, "c")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(3)]
    finally:
        process.kill()
        process.communicate()
    assert any(str(fresh / "cluster.token") in line for line in lines), lines
    assert any(str(fresh / "admin.token") in line for line in lines), lines


def test_an_etcd_that_does_not_answer_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    result = run_controller(*base_args(data_dir), "--etcd-endpoints", "http://127.0.0.1:1", "--node-id", "1")
    assert_one_line_error(result, "no etcd endpoint answered")
    assert not data_dir.exists()
