"""`jbod_local.etcd` with the real etcd binary: a local cluster starts, replicates, survives the
loss of a minority of members, and takes a restarted member back with its data."""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jbod_client.controller import ClientError
from jbod_local.etcd import EtcdCluster, EtcdMember, find_etcd_binary


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def put(url: str, key: str, value: str) -> None:
    reply = httpx.post(
        f"{url}/v3/kv/put", json={"key": _b64(key), "value": _b64(value)}, timeout=5, trust_env=False
    )
    reply.raise_for_status()


def get(url: str, key: str) -> str | None:
    reply = httpx.post(f"{url}/v3/kv/range", json={"key": _b64(key)}, timeout=5, trust_env=False)
    reply.raise_for_status()
    kvs = reply.json().get("kvs", [])
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


def revision(url: str) -> int:
    reply = httpx.post(f"{url}/v3/maintenance/status", json={}, timeout=5, trust_env=False)
    reply.raise_for_status()
    return int(reply.json()["header"]["revision"])


def wait_for_revision(cluster: EtcdCluster, member: int, wanted: int, timeout: float = 15.0) -> bool:
    """Whether `member` reached store revision `wanted` within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
            if revision(cluster.client_urls[member]) >= wanted:
                return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with EtcdCluster(tmp_path_factory.mktemp("etcd")) as etcd:
        yield etcd


@pytest.mark.integration
def test_three_members_start_healthy_on_loopback(cluster: EtcdCluster) -> None:
    assert cluster.healthy_members() == [0, 1, 2]
    assert len(cluster.client_urls) == 3
    assert all(url.startswith("http://127.0.0.1:") for url in cluster.client_urls)
    assert cluster.endpoints == ",".join(cluster.client_urls)
    assert len({m.client_port for m in cluster.members} | {m.peer_port for m in cluster.members}) == 6
    for member in cluster.members:
        assert member.log_path == cluster.data_dir / f"{member.name}.log"
        assert member.log_path.exists()
        assert member.data_dir.is_dir()
    assert cluster.leader() in {0, 1, 2}


@pytest.mark.integration
def test_a_put_on_one_member_is_read_on_another(cluster: EtcdCluster) -> None:
    first, second, third = cluster.client_urls
    put(first, "/jbod/test/a", "one")
    assert get(second, "/jbod/test/a") == "one"
    assert get(third, "/jbod/test/a") == "one"


@pytest.mark.integration
@pytest.mark.slow
def test_a_killed_member_leaves_quorum_and_rejoins_with_the_data(cluster: EtcdCluster) -> None:
    # The key written before the kill is written here: under xdist another worker may hold the
    # test that also writes it, so this test must not depend on that one having run first.
    put(cluster.client_urls[0], "/jbod/test/a", "one")
    victim = cluster.leader()
    assert victim is not None
    others = [i for i in range(3) if i != victim]
    cluster.kill_member(victim)
    assert cluster.pids()[victim] is None

    assert sorted(cluster.wait_healthy(timeout=15)) == others
    put(cluster.client_urls[others[0]], "/jbod/test/b", "two")
    assert get(cluster.client_urls[others[1]], "/jbod/test/b") == "two"

    cluster.start_member(victim, timeout=20)
    assert cluster.healthy_members() == [0, 1, 2]
    # Once the restarted member has applied what the others have, it holds both the key written
    # before it was killed and the one written while it was down (the message names its state).
    caught_up = wait_for_revision(cluster, victim, revision(cluster.client_urls[others[0]]))
    state = f"caught up: {caught_up}; log: {cluster.members[victim].log_path.read_text()[-2000:]}"
    assert get(cluster.client_urls[victim], "/jbod/test/b") == "two", state
    assert get(cluster.client_urls[victim], "/jbod/test/a") == "one", state


@pytest.mark.integration
@pytest.mark.slow
def test_a_stopped_member_restarts_on_its_ports(cluster: EtcdCluster) -> None:
    urls = cluster.client_urls
    cluster.stop_member(2)
    assert 2 not in cluster.healthy_members()
    put(urls[0], "/jbod/test/c", "three")
    cluster.start_member(2, timeout=20)
    assert cluster.client_urls == urls
    assert get(urls[2], "/jbod/test/c") == "three"


@pytest.mark.integration
def test_one_member_cluster(tmp_path: Path) -> None:
    with EtcdCluster(tmp_path / "etcd", members=1, name_prefix="solo") as etcd:
        assert etcd.wait_healthy(timeout=5) == [0]
        [url] = etcd.client_urls
        assert etcd.endpoints == url
        put(url, "k", "v")
        assert get(url, "k") == "v"
        assert (tmp_path / "etcd" / "solo-0.log").exists()
    assert etcd.pids() == [None]
    assert etcd.healthy_members() == []


def test_member_command_and_state_round_trip(tmp_path: Path) -> None:
    etcd = EtcdCluster(tmp_path, members=3)
    command = etcd.member_command(1)
    member = etcd.members[1]
    assert command[0] == str(etcd.binary)
    flags = dict(zip(command[1::2], command[2::2], strict=False))
    assert flags["--name"] == member.name == "etcd-1"
    assert flags["--listen-client-urls"] == flags["--advertise-client-urls"] == member.client_url
    assert flags["--listen-peer-urls"] == flags["--initial-advertise-peer-urls"] == member.peer_url
    assert flags["--initial-cluster"].count("=http://127.0.0.1:") == 3
    assert flags["--initial-cluster-state"] == "new"
    assert "--auto-compaction-retention" not in command
    assert ("--enable-v2=false" in command) == (etcd.version < (3, 6, 0))

    state = [m.to_dict() for m in etcd.members]
    rebuilt = EtcdCluster.from_members(tmp_path, [EtcdMember.from_dict(d) for d in state])
    assert rebuilt.members == etcd.members
    assert rebuilt.member_command(1) == command  # the same token and initial cluster


def test_jbod_etcd_bin_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    real = find_etcd_binary()
    assert os.access(real, os.X_OK)
    monkeypatch.setenv("JBOD_ETCD_BIN", str(real))
    assert find_etcd_binary() == real


def test_missing_binary_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "no-such-etcd"
    monkeypatch.setenv("JBOD_ETCD_BIN", str(missing))
    with pytest.raises(ClientError, match="JBOD_ETCD_BIN") as error:
        find_etcd_binary()
    assert str(missing) in str(error.value)
    with pytest.raises(ClientError, match="no-such-etcd"):
        EtcdCluster(tmp_path / "etcd", members=1).start(timeout=5)


@pytest.mark.integration
def test_a_port_taken_after_picking_makes_start_retry_with_new_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jbod_local import etcd as etcd_module

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    picks: list[list[int]] = []
    free_ports = etcd_module.free_ports

    def pick(count: int) -> list[int]:
        ports = free_ports(count)
        picks.append(ports if picks else [busy, *ports[1:]])
        return picks[-1]

    monkeypatch.setattr(etcd_module, "free_ports", pick)
    try:
        with EtcdCluster(tmp_path / "etcd", members=1) as etcd:
            assert len(picks) == 2
            assert etcd.members[0].client_port != busy
            assert etcd.healthy_members() == [0]
    finally:
        taken.close()
