"""A controller's place in a quorum on etcd (contract §3.8): lease, election, following the log.

Guarantees:
* Each controller holds one etcd lease (`--lease-ms`, rounded up to whole seconds, etcd's unit),
  kept alive by its own thread, so a busy event loop never lets it lapse. The lease carries the
  controller's entry under `P/controllers/` and, while it is active, the leader key.
* `lease_deadline()` is the monotonic time before which the lease certainly still holds (the send
  time of the last successful keep-alive plus its TTL). The active controller refuses to decide
  anything at or past it: a controller that was paused (SIGSTOP) past its lease answers no write
  after it resumes, even one that would write nothing.
* Campaigning is one transaction: create the leader key if it does not exist. The winner's fence
  is that key's create revision; every append compares it (`EtcdRecordLog`).
* A standby follows the log with one watch on the whole prefix: log keys are replayed in order
  (a gap, a compaction or a broken stream re-reads the log), snapshots are adopted, and changes of
  the leader key and of the membership are tracked for `activeController` and `controllers`.
  A deleted leader key starts a campaign at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from jbod_controller.etcd_gateway import (
    AsyncEtcdGateway,
    EtcdError,
    EtcdGateway,
    EtcdTls,
    EtcdUnavailableError,
    WatchBatch,
    compare_create,
    delete_op,
    prefix_end,
    put_op,
    range_op,
)
from jbod_controller.etcd_log import EtcdRecordLog, Keys, StagedBatch, decode_log_value

log = logging.getLogger("jbod_controller.quorum")

_RESYNC_PAUSE_S = 0.2


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    node_id: int
    url: str  # where clients reach this controller
    endpoints: tuple[str, ...]
    prefix: str
    lease_ms: int = 2000
    tls: EtcdTls | None = None

    @property
    def lease_ttl_s(self) -> int:
        return max(1, math.ceil(self.lease_ms / 1000))


@dataclass(frozen=True, slots=True)
class ControllerInfo:
    node_id: int
    url: str

    def to_json(self) -> dict[str, Any]:
        return {"nodeId": self.node_id, "url": self.url}


def _info(value: bytes) -> ControllerInfo | None:
    try:
        body = orjson.loads(value)
        return ControllerInfo(int(body["nodeId"]), str(body["url"]))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


class LeaseKeeper:
    """Grants this controller's lease and keeps it alive from a thread of its own."""

    def __init__(
        self,
        config: QuorumConfig,
        keys: Keys,
        on_lost: Callable[[], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.keys = keys
        self.clock = clock
        self._gateway = EtcdGateway(
            config.endpoints, timeout=max(0.5, config.lease_ms / 2000), tls=config.tls
        )
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lease_id = 0
        self._valid_until = 0.0

    def lease_deadline(self) -> float:
        return self._valid_until

    def start(self) -> None:
        """Grant the lease and register this controller (blocking); then keep it alive."""
        self._grant()
        self._thread = threading.Thread(target=self._run, name="etcd-lease", daemon=True)
        self._thread.start()

    def _grant(self) -> None:
        sent = self.clock()
        self.lease_id = self._gateway.lease_grant(self.config.lease_ttl_s)
        self._valid_until = sent + self.config.lease_ttl_s
        me = orjson.dumps({"nodeId": self.config.node_id, "url": self.config.url})
        self._gateway.put(self.keys.controllers + str(self.config.node_id).encode(), me, lease=self.lease_id)

    def _run(self) -> None:
        period = self.config.lease_ttl_s / 4
        while not self._stop.wait(period):
            sent = self.clock()
            try:
                ttl = self._gateway.lease_keepalive(self.lease_id)
            except (EtcdUnavailableError, EtcdError) as exc:
                log.warning("Could not renew the etcd lease: %s", exc)
                continue
            if ttl > 0:
                self._valid_until = sent + ttl
                continue
            log.warning("The etcd lease expired; granting a new one")
            self._valid_until = 0.0
            self._on_lost()
            try:
                self._grant()
            except (EtcdUnavailableError, EtcdError) as exc:
                log.warning("Could not grant a new etcd lease: %s", exc)

    def stop(self, *, revoke: bool) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if revoke and self.lease_id:
            with contextlib.suppress(EtcdUnavailableError, EtcdError):
                self._gateway.lease_revoke(self.lease_id)
        self._gateway.close()


class Role(Protocol):
    """What the quorum asks of the controller service; implemented by `ControllerService`."""

    async def apply_committed(self, first_offset: int, payloads: list[bytes], revision: int) -> None: ...

    async def resync(self) -> None: ...

    async def promote(self, fence: int) -> None: ...

    async def step_down(self, why: str) -> None: ...

    @property
    def active(self) -> bool: ...


class Quorum:
    """Campaigns for the election and follows the log on behalf of one controller."""

    def __init__(self, config: QuorumConfig, record_log: EtcdRecordLog, role: Role) -> None:
        self.config = config
        self.keys = record_log.keys
        self.record_log = record_log
        self.role = role
        self.me = ControllerInfo(config.node_id, config.url)
        self.gateway = AsyncEtcdGateway(
            config.endpoints, timeout=max(1.0, config.lease_ms / 1000), tls=config.tls
        )
        self.keeper: LeaseKeeper | None = None
        self.active_controller: ControllerInfo | None = None
        self.members: dict[int, ControllerInfo] = {}
        self.elections = 0
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.apply_lock = asyncio.Lock()
        self.following_log = True
        self._background: set[asyncio.Task[None]] = set()

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Grant the lease (the log has been recovered by the caller), then follow and campaign."""
        self._loop = asyncio.get_running_loop()
        self.keeper = LeaseKeeper(
            self.config, self.keys, self._lease_lost_from_thread, clock=self.record_log.clock
        )
        await self._loop.run_in_executor(None, self.keeper.start)
        await self._load_membership()
        self._tasks.append(self._loop.create_task(self._follow_forever(), name="quorum-follow"))
        self._tasks.append(self._loop.create_task(self._campaign_forever(), name="quorum-campaign"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.role.active:
            await self.resign()
        if self.keeper is not None:
            keeper = self.keeper
            await asyncio.get_running_loop().run_in_executor(None, lambda: keeper.stop(revoke=True))
        await self.gateway.aclose()

    def lease_deadline(self) -> float:
        return self.keeper.lease_deadline() if self.keeper is not None else 0.0

    def controllers(self) -> list[dict[str, Any]]:
        members = dict(self.members)
        members.setdefault(self.me.node_id, self.me)
        active = self.active_controller
        return [
            {**info.to_json(), "active": active is not None and active.node_id == info.node_id}
            for info in sorted(members.values(), key=lambda i: i.node_id)
        ]

    # -- election ----------------------------------------------------------------------------------

    def _lease_lost_from_thread(self) -> None:
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self.spawn, self.role.step_down("the etcd lease expired"))

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` as a task that is kept referenced until it ends."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _campaign_forever(self) -> None:
        period = self.config.lease_ms / 2000
        while True:
            if not self.role.active and self.active_controller == self.me:
                # Stepped down while etcd kept our leader key (e.g. etcd was down): give it back.
                await self.resign()
                self.active_controller = None
            if not self.role.active:
                try:
                    if self.active_controller is not None:
                        # Do not rely on the watch alone to learn that the leader key is gone.
                        leader = await self.gateway.range(self.keys.leader)
                        self.active_controller = _info(leader.kvs[0].value) if leader.kvs else None
                    if self.active_controller is None:
                        await self._campaign()
                except (EtcdUnavailableError, EtcdError) as exc:
                    log.warning("Could not campaign: %s", exc)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), period)

    async def _campaign(self) -> None:
        keeper = self.keeper
        if keeper is None or self.record_log.clock() >= keeper.lease_deadline():
            return
        me = orjson.dumps(self.me.to_json())
        result = await self.gateway.txn(
            [compare_create(self.keys.leader, 0)],
            [put_op(self.keys.leader, me, lease=keeper.lease_id)],
            [range_op(self.keys.leader)],
        )
        if not result.succeeded:
            holders = result.ranged(0)
            self.active_controller = _info(holders[0].value) if holders else None
            return
        self.elections += 1
        self.active_controller = self.me
        log.info("Won the election (fence %d); taking over", result.revision)
        try:
            await self.role.promote(result.revision)
        except Exception as exc:  # promotion failed half-way: give the election back
            log.warning("Could not take over: %s", exc)
            await self.role.step_down(f"taking over failed: {exc}")
            await self.resign()
            self.active_controller = None
            # The catch-up applied committed records only, but it may have stopped short (a
            # standby behind a snapshot): read the log again, then follow it.
            self.resume_following()
            await self._resync()

    async def resign(self) -> None:
        """Delete the leader key if it is still ours, so a standby need not wait for the lease."""
        keeper = self.keeper
        if keeper is None:
            return
        me = orjson.dumps(self.me.to_json())
        with contextlib.suppress(EtcdUnavailableError, EtcdError):
            current = await self.gateway.range(self.keys.leader)
            if current.kvs and current.kvs[0].value == me:
                await self.gateway.txn(
                    [compare_create(self.keys.leader, current.kvs[0].create_revision)],
                    [delete_op(self.keys.leader)],
                )

    # -- following ---------------------------------------------------------------------------------

    async def _load_membership(self) -> None:
        found = await self.gateway.range(self.keys.controllers, prefix_end(self.keys.controllers))
        self.members = {i.node_id: i for i in (_info(kv.value) for kv in found.kvs) if i is not None}
        leader = await self.gateway.range(self.keys.leader)
        self.active_controller = _info(leader.kvs[0].value) if leader.kvs else None

    async def _follow_forever(self) -> None:
        prefix = self.keys.prefix + b"/"
        while True:
            start = self.record_log.revision + 1
            try:
                async for batch in self.gateway.watch(prefix, prefix_end(prefix), start_revision=start):
                    if batch.compact_revision or batch.canceled:
                        log.warning("The log watch was compacted or cancelled; re-reading the log")
                        await self._resync()
                        break
                    await self._apply(batch)
            except (EtcdUnavailableError, EtcdError, ValueError) as exc:
                log.warning("Following the log failed (%s); re-reading it", exc)
                await asyncio.sleep(_RESYNC_PAUSE_S)
                with contextlib.suppress(EtcdUnavailableError, EtcdError, ValueError):
                    await self._resync()
                continue
            await asyncio.sleep(_RESYNC_PAUSE_S)

    async def _resync(self) -> None:
        if self.role.active:
            return
        await self.role.resync()
        await self._load_membership()

    async def _apply(self, batch: WatchBatch) -> None:
        keys = self.keys
        for event in batch.events:
            key = event.kv.key
            if key == keys.leader:
                self.active_controller = _info(event.kv.value) if event.kind == "PUT" else None
                if event.kind == "DELETE":
                    self._wake.set()
            elif key.startswith(keys.controllers):
                node = key[len(keys.controllers) :]
                if event.kind == "PUT":
                    info = _info(event.kv.value)
                    if info is not None:
                        self.members[info.node_id] = info
                elif node.isdigit():
                    self.members.pop(int(node), None)
            elif event.kind == "PUT" and self.following_log and not self.role.active:
                await self._apply_log_event(key, event.kv.value, event.kv.mod_revision)
        # Resume after the last event seen; a batch without events is a progress notification,
        # whose header revision says every event up to it was sent.
        seen = max((e.kv.mod_revision for e in batch.events), default=batch.revision)
        self.record_log.revision = max(self.record_log.revision, seen)

    async def _apply_log_event(self, key: bytes, value: bytes, revision: int) -> None:
        loop = asyncio.get_running_loop()
        keys = self.keys
        if key == keys.snapshot:
            snapshot = await loop.run_in_executor(None, self.record_log.load_snapshot, value, 0)
            self.record_log.adopt_snapshot(snapshot)
            return
        first = keys.log_offset(key)
        if first is None:
            return
        async with self.apply_lock:
            if first < self.record_log.committed_offset or not self.following_log:
                return
            decoded = decode_log_value(first, value)
            if isinstance(decoded, StagedBatch):
                decoded = await loop.run_in_executor(None, self.record_log.read_staged, decoded, 0)
            await self.role.apply_committed(first, decoded, revision)

    async def catch_up(self, apply: Callable[[int, list[bytes], int], Awaitable[None]]) -> None:
        """Apply every log key past the copy's end (a new active controller, before writing)."""
        loop = asyncio.get_running_loop()
        record_log = self.record_log
        async with self.apply_lock:
            self.following_log = False
            head = await loop.run_in_executor(None, record_log.gateway.range, self.keys.head)
            record_log.head_revision = head.kvs[0].mod_revision if head.kvs else 0
            end = int(orjson.loads(head.kvs[0].value)["endOffset"]) if head.kvs else 0
            while record_log.committed_offset < end:
                first = record_log.committed_offset
                found = await self.gateway.range(self.keys.log(first), prefix_end(self.keys.logs), limit=16)
                if not found.kvs:
                    raise ValueError(f"the log has no key at offset {first} below its head {end}")
                for kv in found.kvs:
                    offset = self.keys.log_offset(kv.key)
                    if offset is None or offset < record_log.committed_offset:
                        continue
                    if offset > record_log.committed_offset:
                        raise ValueError(
                            f"the log continues at {offset}, after this copy's end "
                            f"{record_log.committed_offset} (behind a snapshot)"
                        )
                    decoded = decode_log_value(offset, kv.value)
                    if isinstance(decoded, StagedBatch):
                        decoded = await loop.run_in_executor(None, record_log.read_staged, decoded, 0)
                    await apply(offset, decoded, kv.mod_revision)

    def resume_following(self) -> None:
        self.following_log = True
