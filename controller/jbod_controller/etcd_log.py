"""The metadata log kept in etcd (contract §3.8): the `RecordLog` of a controller quorum.

Key layout under the prefix P (`docs/decisions.md`, "The controller quorum on etcd"):
* `P/leader` — the active controller (`{"nodeId", "url"}`), put with its lease; its create revision
  is the holder's *fence*.
* `P/head` — `{"endOffset": n}`: the committed end of the log.
* `P/log/<first offset, 20 digits>` — consecutive records from that offset: `F` + frames
  (`jbod_core.frames`, the file log's framing), or `S` + `{"records", "chunks"}` for a batch
  larger than one etcd request, whose frames sit in `P/staging/<first offset>/<chunk>`.
* `P/snapshot` — `{"offset", "records", "chunks"}`; its frames in `P/snapshots/<offset>/<chunk>`.

Guarantees:
* An append is committed only by one etcd transaction that compares the leader key's create
  revision with this writer's fence and the head's mod revision with the last one it wrote: a
  deposed or paused controller can never commit, and offsets stay dense. Nothing is readable
  (`read`, `committed_offset`) before that transaction succeeded.
* A batch larger than one etcd request is staged in chunks first, each written only while the
  fence holds; it becomes part of the log with the one committing transaction, so a batch is
  committed whole or not at all.
* When etcd does not answer an append, it is retried until the lease deadline; a retry first
  checks whether the earlier attempt committed (the head moved to a log key holding these exact
  bytes), so a lost reply never commits a batch twice nor reports a committed one as failed.
  Failing that, `NotActiveError`: the caller must re-read the log.
* `recover()` reads the snapshot and the log at one etcd revision, so it never mixes two states.
* A snapshot is written in chunks under its own offset, then published by one transaction; the
  log keys below it are deleted and etcd's history compacted only after that.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

import orjson

from jbod_controller.etcd_gateway import (
    MAX_TXN_BYTES,
    EtcdGateway,
    EtcdUnavailableError,
    KeyValue,
    compare_create,
    compare_mod,
    delete_op,
    prefix_end,
    put_op,
)
from jbod_controller.record_log import NotActiveError, Recovery, Snapshot
from jbod_core import frames

INLINE: Final = b"F"
STAGED: Final = b"S"
_PAGE_KEYS: Final = 16
_RETRY_PAUSE_S: Final = 0.1
_CHUNK_WRITERS: Final = 4  # staged chunks and snapshot chunks written concurrently


@dataclass(frozen=True, slots=True)
class Keys:
    """The etcd keys of one cluster's log under `prefix`."""

    prefix: bytes

    @classmethod
    def under(cls, prefix: str) -> Keys:
        return cls(prefix.rstrip("/").encode())

    @property
    def leader(self) -> bytes:
        return self.prefix + b"/leader"

    @property
    def head(self) -> bytes:
        return self.prefix + b"/head"

    @property
    def snapshot(self) -> bytes:
        return self.prefix + b"/snapshot"

    @property
    def controllers(self) -> bytes:
        return self.prefix + b"/controllers/"

    @property
    def logs(self) -> bytes:
        return self.prefix + b"/log/"

    def log(self, offset: int) -> bytes:
        return b"%s/log/%020d" % (self.prefix, offset)

    def staging(self, offset: int) -> bytes:
        return b"%s/staging/%020d/" % (self.prefix, offset)

    @property
    def stagings(self) -> bytes:
        return self.prefix + b"/staging/"

    def snapshot_chunks(self, offset: int) -> bytes:
        return b"%s/snapshots/%020d/" % (self.prefix, offset)

    @property
    def snapshots(self) -> bytes:
        return self.prefix + b"/snapshots/"

    def log_offset(self, key: bytes) -> int | None:
        if not key.startswith(self.logs):
            return None
        try:
            return int(key[len(self.logs) :])
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class StagedBatch:
    """A log key that points at a batch's staged chunks."""

    first_offset: int
    records: int
    chunks: int


def split_frames(blob: bytes, limit: int) -> list[bytes]:
    """`blob` (whole frames) cut at frame boundaries into pieces of at most `limit` bytes.

    A single frame larger than `limit` is a piece of its own.
    """
    pieces: list[bytes] = []
    start = position = 0
    header = frames.HEADER.size
    while position < len(blob):
        length, _ = frames.HEADER.unpack_from(blob, position)
        end = position + header + length
        if end - start > limit and position > start:
            pieces.append(blob[start:position])
            start = position
        position = end
    if start < len(blob):
        pieces.append(blob[start:])
    return pieces


def payloads_of(blob: bytes, *, entries: bool = True) -> list[bytes]:
    """The payloads of whole frames (etcd holds only what was committed: no torn tails).

    `entries`: log entries (`{"offset", ...}`); False for snapshot records.
    """
    out: list[bytes] = []
    for item in frames.iter_frames(blob, entries=entries):
        if isinstance(item, frames.Damage):
            raise ValueError(f"a damaged frame in etcd at byte {item.position}")
        out.append(item)
    return out


def decode_log_value(first_offset: int, value: bytes) -> list[bytes] | StagedBatch:
    if value.startswith(INLINE):
        return payloads_of(value[1:])
    if value.startswith(STAGED):
        body = orjson.loads(value[1:])
        return StagedBatch(first_offset, int(body["records"]), int(body["chunks"]))
    raise ValueError(f"unknown log value at offset {first_offset}")


def _chunk_key(base: bytes, number: int) -> bytes:
    return base + b"%06d" % number


class EtcdRecordLog:
    """`RecordLog` in etcd, with an in-memory copy of the committed records since the snapshot.

    Appends (`append_one` + `flush`) are only allowed after `take_over(fence, deadline)`; a
    standby's copy grows through `extend_committed` as it follows the log.
    """

    def __init__(
        self, gateway: EtcdGateway, keys: Keys, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """`clock`: the monotonic clock the lease deadlines are on (the controller's)."""
        self.gateway = gateway
        self.keys = keys
        self.clock = clock
        self.directory = f"etcd {keys.prefix.decode()}"
        self._lock = threading.Lock()
        self._start = 0
        self._entries: list[bytes] = []
        self._crcs: list[int] = []
        self._snapshot: Snapshot | None = None
        self._pending = bytearray()
        self._pending_payloads: list[bytes] = []
        self._pending_crcs: list[int] = []
        self.head_revision = 0  # mod revision of P/head as last read or written
        self.revision = 0  # etcd revision the copy is current at
        self.fence = 0  # create revision of our leader key; 0 = not active
        self.lease_deadline: Callable[[], float] = lambda: 0.0
        self.give_up_s = 4.0  # how long appends wait for a lease renewal before stepping down
        self.appended_batches = 0

    # -- RecordLog: offsets ----------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def committed_offset(self) -> int:
        return self._start + len(self._entries)

    @property
    def end_offset(self) -> int:
        return self.committed_offset + len(self._pending_payloads)

    # -- recovery ----------------------------------------------------------------------------------

    def recover(self) -> Recovery:
        """Read the snapshot and the log at one revision into the copy (blocking)."""
        head = self.gateway.range(self.keys.head)
        revision = head.revision
        self.head_revision = head.kvs[0].mod_revision if head.kvs else 0
        end = int(orjson.loads(head.kvs[0].value)["endOffset"]) if head.kvs else 0
        snapshot = self._read_snapshot(revision)
        start = snapshot.offset if snapshot is not None else 0
        entries: list[bytes] = []
        for kv in self._range_all(self.keys.log(start), prefix_end(self.keys.logs), revision):
            first = self.keys.log_offset(kv.key)
            if first is None:
                continue
            decoded = decode_log_value(first, kv.value)
            if isinstance(decoded, StagedBatch):
                decoded = self.read_staged(decoded, revision)
            if first != start + len(entries):
                raise ValueError(f"log key at offset {first} where {start + len(entries)} was expected")
            entries.extend(decoded)
        if start + len(entries) != end:
            raise ValueError(f"the log ends at {start + len(entries)} but its head says {end}")
        with self._lock:
            self._snapshot = snapshot
            self._start = start
            self._entries = entries
            self._crcs = [frames.checksum(p) for p in entries]
            self._pending = bytearray()
            self._pending_payloads = []
            self._pending_crcs = []
            self.revision = revision
        return Recovery(snapshot=snapshot, entries=list(entries), start_offset=start, truncated_bytes=0)

    def _range_all(self, key: bytes, end: bytes, revision: int) -> Iterable[KeyValue]:
        while True:
            page = self.gateway.range(key, end, revision=revision, limit=_PAGE_KEYS)
            yield from page.kvs
            if not page.more or not page.kvs:
                return
            key = page.kvs[-1].key + b"\0"

    def _read_chunks(self, base: bytes, chunks: int, revision: int) -> bytes | None:
        found = list(self._range_all(base, prefix_end(base), revision))
        if len(found) != chunks:
            return None
        return b"".join(kv.value for kv in found)

    def read_staged(self, batch: StagedBatch, revision: int = 0) -> list[bytes]:
        blob = self._read_chunks(self.keys.staging(batch.first_offset), batch.chunks, revision)
        if blob is None:
            raise ValueError(f"the staged batch at offset {batch.first_offset} is incomplete")
        payloads = payloads_of(blob)
        if len(payloads) != batch.records:
            raise ValueError(f"the staged batch at offset {batch.first_offset} has {len(payloads)} records")
        return payloads

    def _read_snapshot(self, revision: int) -> Snapshot | None:
        pointer = self.gateway.range(self.keys.snapshot, revision=revision)
        if not pointer.kvs:
            return None
        return self.load_snapshot(pointer.kvs[0].value, revision)

    def load_snapshot(self, pointer: bytes, revision: int = 0) -> Snapshot:
        body = orjson.loads(pointer)
        offset, chunks = int(body["offset"]), int(body["chunks"])
        blob = self._read_chunks(self.keys.snapshot_chunks(offset), chunks, revision)
        if blob is None:
            raise ValueError(f"the snapshot at offset {offset} is incomplete")
        entries = payloads_of(blob, entries=False)
        if len(entries) != int(body["records"]):
            raise ValueError(f"the snapshot at offset {offset} has {len(entries)} records")
        return Snapshot(offset=offset, entries=entries)

    # -- following (standby) -----------------------------------------------------------------------

    def extend_committed(self, first_offset: int, payloads: list[bytes], revision: int) -> None:
        """Add records a standby read from etcd; they must follow the copy without a gap."""
        if first_offset != self.committed_offset:
            raise ValueError(f"log key at offset {first_offset}, the copy ends at {self.committed_offset}")
        with self._lock:
            self._entries.extend(payloads)
            self._crcs.extend(frames.checksum(p) for p in payloads)
            self.revision = max(self.revision, revision)

    def adopt_snapshot(self, snapshot: Snapshot) -> None:
        """A newer snapshot was published: serve it and drop the copy below it."""
        with self._lock:
            if snapshot.offset <= self._start or snapshot.offset > self.committed_offset:
                self._snapshot = snapshot if snapshot.offset <= self.committed_offset else self._snapshot
                return
            drop = snapshot.offset - self._start
            del self._entries[:drop]
            del self._crcs[:drop]
            self._start = snapshot.offset
            self._snapshot = snapshot

    # -- appends (active) --------------------------------------------------------------------------

    def take_over(self, fence: int, lease_deadline: Callable[[], float], *, give_up_s: float = 4.0) -> None:
        """Start writing as the holder of the leader key created at revision `fence`."""
        self.fence = fence
        self.lease_deadline = lease_deadline
        self.give_up_s = give_up_s

    def writable_now(self) -> bool:
        return self.fence != 0 and self.clock() < self.lease_deadline()

    def wait_writable(self) -> None:
        """Wait while the lease deadline has passed but the lease may live on (etcd electing a new
        leader, a pause shorter than the lease in etcd): a renewal proves the leader key is still
        ours. `NotActiveError` once the lease is known lost or after `give_up_s`."""
        give_up = self.clock() + self.give_up_s
        while True:
            if self.fence == 0:
                raise NotActiveError("this controller is a standby")
            now = self.clock()
            if now < self.lease_deadline():
                return
            if now >= give_up:
                raise NotActiveError(f"the etcd lease was not renewed within {self.give_up_s:.0f} s")
            time.sleep(_RETRY_PAUSE_S / 2)

    def check_writable(self) -> None:
        if self.fence == 0:
            raise NotActiveError("this controller is a standby")
        if self.clock() >= self.lease_deadline():
            self.wait_writable()

    def append(self, entries: list[bytes]) -> None:
        for payload in entries:
            self.append_one(payload)

    def append_one(self, payload: bytes) -> None:
        self._pending_crcs.append(frames.append_frame(self._pending, payload))
        self._pending_payloads.append(payload)

    def flush(self) -> None:
        """Commit the buffered records with one fenced transaction (blocking)."""
        if not self._pending_payloads:
            return
        blob, self._pending = bytes(self._pending), bytearray()
        payloads, self._pending_payloads = self._pending_payloads, []
        crcs, self._pending_crcs = self._pending_crcs, []
        first = self.committed_offset
        end = first + len(payloads)
        if len(blob) + 1 <= MAX_TXN_BYTES:
            value = INLINE + blob
        else:
            pieces = split_frames(blob, MAX_TXN_BYTES)
            self._write_chunks(self.keys.staging(first), pieces, "staging a large batch")
            value = STAGED + orjson.dumps({"records": len(payloads), "chunks": len(pieces)})
        fence = self.fence
        self._commit(first, end, value)
        with self._lock:
            if self.fence != fence:  # stepped down meanwhile: the copy is being re-read
                raise NotActiveError("stepped down while appending")
            self._entries.extend(payloads)
            self._crcs.extend(crcs)
        self.appended_batches += 1

    def _write_chunks(self, base: bytes, pieces: list[bytes], what: str) -> None:
        """Clear `base`, then put `pieces` as its numbered chunks, each only while the fence holds.

        The chunks are independent keys, so several transactions are in flight at once (etcd
        batches them into fewer raft rounds); any refused one raises `NotActiveError`.
        """
        self._fenced(what, [delete_op(base, prefix_end(base))])
        with ThreadPoolExecutor(max_workers=_CHUNK_WRITERS, thread_name_prefix="etcd-chunks") as pool:
            written = [
                pool.submit(self._fenced, what, [put_op(_chunk_key(base, number), piece)])
                for number, piece in enumerate(pieces)
            ]
            for future in written:
                future.result()

    def _fenced(self, what: str, ops: list[dict[str, object]]) -> int:
        """Run `ops` only while this controller holds the election; the revision written."""
        while True:
            self.check_writable()
            try:
                result = self.gateway.txn([compare_create(self.keys.leader, self.fence)], ops)
            except EtcdUnavailableError:
                time.sleep(_RETRY_PAUSE_S)
                continue
            if not result.succeeded:
                self.fence = 0
                raise NotActiveError(f"lost the election while {what}")
            return result.revision

    def _commit(self, first: int, end: int, value: bytes) -> None:
        compare = [
            compare_create(self.keys.leader, self.fence),
            compare_mod(self.keys.head, self.head_revision),
        ]
        ops = [put_op(self.keys.log(first), value), put_op(self.keys.head, orjson.dumps({"endOffset": end}))]
        attempted = False
        while True:
            if attempted and self._committed_earlier(first, value):
                return
            self.check_writable()
            attempted = True
            try:
                result = self.gateway.txn(compare, ops)
            except EtcdUnavailableError:
                time.sleep(_RETRY_PAUSE_S)
                continue
            if not result.succeeded:
                self.fence = 0
                raise NotActiveError("lost the election (or another controller wrote the log)")
            self.head_revision = result.revision
            self.revision = result.revision
            return

    def _committed_earlier(self, first: int, value: bytes) -> bool:
        """After a lost reply: did our transaction commit? (The head moved to our log key.)"""
        try:
            head = self.gateway.range(self.keys.head)
            if not head.kvs or head.kvs[0].mod_revision == self.head_revision:
                return False
            stored = self.gateway.range(self.keys.log(first))
        except EtcdUnavailableError:
            return False
        if (
            stored.kvs
            and stored.kvs[0].value == value
            and stored.kvs[0].mod_revision == head.kvs[0].mod_revision
        ):
            self.head_revision = head.kvs[0].mod_revision
            return True
        self.fence = 0
        raise NotActiveError("another controller wrote the log")

    # -- reads -------------------------------------------------------------------------------------

    def read(self, from_offset: int, max_records: int) -> list[bytes]:
        with self._lock:
            if from_offset < self._start:
                return []
            index = from_offset - self._start
            return self._entries[index : index + max_records]

    def checksum_at(self, offset: int) -> int | None:
        with self._lock:
            index = offset - self._start
            if 0 <= index < len(self._crcs):
                return self._crcs[index]
            return None

    # -- snapshots and retention -------------------------------------------------------------------

    def latest_snapshot(self) -> Snapshot | None:
        return self._snapshot

    def write_snapshot(self, offset: int, entries: Iterable[bytes], *, count: int) -> None:
        """Write the snapshot's chunks, then publish it with one fenced transaction (blocking)."""
        payloads = list(entries)
        if len(payloads) != count:
            raise ValueError(f"snapshot at {offset} produced {len(payloads)} records, expected {count}")
        blob = bytearray()
        for payload in payloads:
            frames.append_frame(blob, payload)
        pieces = split_frames(bytes(blob), MAX_TXN_BYTES) if blob else []
        self._write_chunks(self.keys.snapshot_chunks(offset), pieces, "writing a snapshot")
        pointer = orjson.dumps({"offset": offset, "records": count, "chunks": len(pieces)})
        self._fenced("publishing a snapshot", [put_op(self.keys.snapshot, pointer)])
        self.adopt_snapshot(Snapshot(offset=offset, entries=payloads))

    def delete_segments_before(self, offset: int, *, keep_bytes: int) -> int:
        """Delete the log keys, staged batches and older snapshots below `offset`; compact etcd.

        `keep_bytes` is the file log's retention; etcd keeps no log below the newest snapshot
        (brokers that far behind are served the snapshot).
        """
        keys = self.keys
        before = self.gateway.range(keys.logs, keys.log(offset), keys_only=True)
        revision = self._fenced(
            "deleting the log below a snapshot",
            [
                delete_op(keys.logs, keys.log(offset)),
                delete_op(keys.stagings, keys.staging(offset)),
                delete_op(keys.snapshots, keys.snapshot_chunks(offset)),
            ],
        )
        self.gateway.compact(revision)
        return len(before.kvs)

    def close(self) -> None:
        self.fence = 0
