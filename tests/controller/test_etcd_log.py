"""`EtcdRecordLog` against a real one-member etcd: fencing, large batches, lost replies, snapshots.

What is checked: an append commits only while the writer's fence holds and leaves etcd unchanged
otherwise; a batch larger than one etcd request is staged and committed whole (a second log reads
exactly the same records); a retried append after a lost reply commits once; a snapshot lets the
log below it go and a fresh reader starts from it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from jbod_controller.etcd_gateway import (
    MAX_TXN_BYTES,
    EtcdGateway,
    compare_create,
    delete_op,
    prefix_end,
    put_op,
)
from jbod_controller.etcd_log import EtcdRecordLog, Keys
from jbod_controller.record_log import NotActiveError
from jbod_core import frames
from jbod_local.etcd import EtcdCluster

pytestmark = pytest.mark.quorum


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with EtcdCluster(tmp_path_factory.mktemp("etcd"), 1) as cluster:
        yield cluster


@pytest.fixture
def gateway(etcd: EtcdCluster) -> Iterator[EtcdGateway]:
    client = EtcdGateway(etcd.client_urls)
    yield client
    client.close()


_prefixes = iter(range(10_000))


@pytest.fixture
def keys() -> Keys:
    return Keys.under(f"/test/{next(_prefixes)}-{time.monotonic_ns()}")


def elect(gateway: EtcdGateway, keys: Keys, node: int) -> int:
    """Make `node` the leader (replacing any other); its fence."""
    gateway.txn([], [delete_op(keys.leader)])
    result = gateway.txn(
        [compare_create(keys.leader, 0)], [put_op(keys.leader, orjson.dumps({"nodeId": node, "url": "x"}))]
    )
    assert result.succeeded
    return result.revision


def writer(gateway: EtcdGateway, keys: Keys, fence: int) -> EtcdRecordLog:
    log = EtcdRecordLog(gateway, keys)
    log.recover()
    log.take_over(fence, lambda: time.monotonic() + 60)
    return log


def entry(offset: int, size: int = 40) -> bytes:
    return frames.encode_entry(offset, "TopicRecord", {"name": f"t{offset}", "pad": "x" * size})


def append(log: EtcdRecordLog, count: int, size: int = 40) -> None:
    start = log.end_offset
    for offset in range(start, start + count):
        log.append_one(entry(offset, size))
    log.flush()


def head(gateway: EtcdGateway, keys: Keys) -> tuple[int, int]:
    found = gateway.range(keys.head)
    return int(orjson.loads(found.kvs[0].value)["endOffset"]), found.kvs[0].mod_revision


def test_appends_are_readable_by_another_log_at_the_same_offsets(gateway: EtcdGateway, keys: Keys) -> None:
    log = writer(gateway, keys, elect(gateway, keys, 1))
    append(log, 5)
    append(log, 3)
    assert log.committed_offset == 8
    reader = EtcdRecordLog(gateway, keys)
    recovery = reader.recover()
    assert recovery.entries == [entry(n) for n in range(8)]
    assert reader.read(2, 3) == [entry(n) for n in range(2, 5)]
    assert reader.checksum_at(7) == frames.checksum(entry(7))


def test_a_deposed_writer_cannot_append(gateway: EtcdGateway, keys: Keys) -> None:
    old = writer(gateway, keys, elect(gateway, keys, 1))
    append(old, 2)
    new = writer(gateway, keys, elect(gateway, keys, 2))
    before = head(gateway, keys)
    old.append_one(entry(2))
    with pytest.raises(NotActiveError):
        old.flush()
    assert head(gateway, keys) == before
    assert old.committed_offset == 2 and old.check_writable is not None
    with pytest.raises(NotActiveError):
        old.check_writable()
    append(new, 1)
    assert EtcdRecordLog(gateway, keys).recover().entries == [entry(n) for n in range(3)]


def test_an_expired_lease_deadline_refuses_before_any_call(gateway: EtcdGateway, keys: Keys) -> None:
    log = EtcdRecordLog(gateway, keys)
    log.recover()
    log.take_over(elect(gateway, keys, 1), lambda: time.monotonic() - 0.001, give_up_s=0.3)
    assert not log.writable_now()
    log.append_one(entry(0))
    with pytest.raises(NotActiveError, match="lease was not renewed"):
        log.flush()
    assert not gateway.range(keys.head).kvs


def test_a_renewed_lease_lets_a_waiting_append_through(gateway: EtcdGateway, keys: Keys) -> None:
    log = EtcdRecordLog(gateway, keys)
    log.recover()
    renewed_at = time.monotonic() + 0.3  # the deadline passed; the lease keeper renews it later
    log.take_over(
        elect(gateway, keys, 1),
        lambda: time.monotonic() + 2 if time.monotonic() >= renewed_at else time.monotonic() - 1,
        give_up_s=5,
    )
    log.append_one(entry(0))
    log.flush()
    assert head(gateway, keys)[0] == 1 and time.monotonic() >= renewed_at


def test_a_batch_larger_than_an_etcd_request_is_committed_whole(gateway: EtcdGateway, keys: Keys) -> None:
    log = writer(gateway, keys, elect(gateway, keys, 1))
    append(log, 2)
    count = 30_000  # ~4.5 MB of records: several staged chunks
    append(log, count, size=100)
    total = count + 2
    staged = gateway.range(keys.stagings, prefix_end(keys.stagings), keys_only=True)
    assert len(staged.kvs) >= 4
    assert all(
        len(kv.value) <= MAX_TXN_BYTES for kv in gateway.range(keys.stagings, prefix_end(keys.stagings)).kvs
    )
    assert head(gateway, keys)[0] == total
    reader = EtcdRecordLog(gateway, keys)
    recovery = reader.recover()
    assert len(recovery.entries) == total
    assert recovery.entries[2] == entry(2, 100) and recovery.entries[-1] == entry(total - 1, 100)


def test_a_batch_whose_writer_was_deposed_while_staging_never_appears(
    gateway: EtcdGateway, keys: Keys
) -> None:
    log = writer(gateway, keys, elect(gateway, keys, 1))
    append(log, 1)
    before = head(gateway, keys)

    class DeposeAfterFirstChunk(EtcdGateway):
        calls = 0

        def txn(self, compare, success, failure=None):  # type: ignore[no-untyped-def]
            self.calls += 1
            if self.calls == 3:  # the clear, one chunk, then a new leader is elected
                elect(gateway, keys, 2)
            return super().txn(compare, success, failure)

    log.gateway = DeposeAfterFirstChunk(gateway.endpoints.urls)
    for offset in range(1, 20_001):
        log.append_one(entry(offset, 100))
    with pytest.raises(NotActiveError):
        log.flush()
    assert head(gateway, keys) == before
    assert EtcdRecordLog(gateway, keys).recover().entries == [entry(0)]


def test_a_retry_after_a_lost_reply_commits_once(gateway: EtcdGateway, keys: Keys) -> None:
    log = writer(gateway, keys, elect(gateway, keys, 1))
    append(log, 1)

    class LoseFirstReply(EtcdGateway):
        lost = False

        def txn(self, compare, success, failure=None):  # type: ignore[no-untyped-def]
            result = super().txn(compare, success, failure)
            if not self.lost:
                self.lost = True
                from jbod_controller.etcd_gateway import EtcdUnavailableError

                raise EtcdUnavailableError("reply lost after the commit")
            return result

    log.gateway = LoseFirstReply(gateway.endpoints.urls)
    append(log, 2)
    assert log.committed_offset == 3
    assert EtcdRecordLog(gateway, keys).recover().entries == [entry(n) for n in range(3)]
    append(log, 1)  # the head revision the log keeps is the committed one: appends go on
    assert head(gateway, keys)[0] == 4


def test_a_snapshot_lets_the_log_below_it_go(gateway: EtcdGateway, keys: Keys) -> None:
    log = writer(gateway, keys, elect(gateway, keys, 1))
    append(log, 10)
    image = [frames.encode_snapshot_entry("TopicRecord", {"name": f"s{n}"}) for n in range(4)]
    log.write_snapshot(10, iter(image), count=4)
    deleted = log.delete_segments_before(10, keep_bytes=0)
    assert deleted == 1
    assert not gateway.range(keys.logs, keys.log(10)).kvs
    append(log, 2)
    reader = EtcdRecordLog(gateway, keys)
    recovery = reader.recover()
    assert recovery.snapshot is not None and recovery.snapshot.offset == 10
    assert recovery.snapshot.entries == image
    assert recovery.entries == [entry(10), entry(11)]
    assert reader.start_offset == 10 and reader.read(0, 5) == []
    with pytest.raises(ValueError, match="expected"):
        log.write_snapshot(12, iter(image), count=5)


def test_keys_of_one_cluster_do_not_reach_into_another(tmp_path: Path) -> None:
    a, b = Keys.under("/jbod/a"), Keys.under("/jbod/ab")
    assert not b.log(0).startswith(a.logs)
    assert compare_create(a.leader, 0)["key"] != compare_create(b.leader, 0)["key"]
