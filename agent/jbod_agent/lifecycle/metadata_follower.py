"""Following the controller's metadata log into the broker's `ClusterImage`.

Guarantees:
* Long-polls `GET /v1/metadata` from the next offset and replays each record into the image with
  the controller's own replay code (`ClusterImage.replay`).
* Changes are remembered across pages; once caught up, everything that changed is reconciled in
  one go (everything this broker hosts after a snapshot, a rebuild, its own registration, or on the
  first catch-up). A topic config change, or a change of a topic default of this broker (its
  own dynamic broker configs or the cluster default's), reconciles the topics' hosted partitions so
  their settings follow.
* Each fetch sends the checksum of the last applied record (`lastChecksum`). When the controller
  answers OFFSET_OUT_OF_RANGE (its log ends before what this broker applied, or holds another
  record at that offset: restored from a backup or cut back), the broker logs a WARNING naming
  both offsets and replays the log from offset 0 into a fresh image, which replaces the live one
  once caught up, followed by a full reconcile (never silently skipping reused offsets).
* A restart starts from the image saved in `metadata.log.dir` at the last clean shutdown
  (`metadata_cache`) and fetches only the tail; the first fetch's `lastChecksum` makes the
  controller refuse a copy that is not a prefix of its log (then the log is replayed from 0).
* Every applied page wakes the agent's loop (readiness, failure-timeout checks see the new image).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from jbod_agent.lifecycle import metadata_cache
from jbod_agent.lifecycle.reconciler import Reconciler
from jbod_agent.ports import Clock, ControllerCallError, ControllerCalls
from jbod_agent.state import AgentState
from jbod_core import broker_configs, records
from jbod_core.errors import ErrorCode
from jbod_core.image import ClusterImage, PartitionKey

log = logging.getLogger("jbod_agent")

FETCH_MAX_WAIT_MS = 5000
FETCH_MAX_RECORDS = 10_000
RETRY_DELAY = 0.5


class MetadataFollower:
    def __init__(
        self,
        state: AgentState,
        *,
        link: ControllerCalls,
        reconciler: Reconciler,
        clock: Clock,
        wake: Callable[[], None],
    ) -> None:
        self.state = state
        self.link = link
        self.reconciler = reconciler
        self.clock = clock
        self.wake = wake
        self.rebuilding: ClusterImage | None = None  # replayed from offset 0 after the log went back
        self.changed: set[PartitionKey] = set()
        self.full_reconcile = False
        self.recheck = asyncio.Event()  # set when registration may have made the broker caught up

    async def load_cache(self) -> None:
        """Start from the local copy of the image, if there is a usable one (read off the loop)."""
        state = self.state
        cached = await asyncio.to_thread(
            metadata_cache.load, state.metadata_dir.path, cluster_id=state.cluster_id
        )
        if cached is None or state.applied_offset >= 0:
            return
        state.image = cached.image
        state.applied_offset = cached.offset
        state.applied_checksum = cached.checksum
        state.metadata_end = cached.offset + 1
        self.full_reconcile = True
        log.info("Loaded the metadata image up to offset %d from %s", cached.offset, metadata_cache.FILE)

    async def save_cache(self) -> None:
        """Keep the image for the next start (at shutdown; never a half-rebuilt image)."""
        state = self.state
        if state.applied_offset < 0 or self.rebuilding is not None or state.metadata_dir_error is not None:
            return  # nothing yet, a half-rebuilt image, or a failed (maybe hung) metadata dir
        data = metadata_cache.encode(
            state.image,
            cluster_id=state.cluster_id,
            offset=state.applied_offset,
            checksum=state.applied_checksum,
        )
        try:
            await asyncio.to_thread(metadata_cache.save, state.metadata_dir.path, data)
        except OSError as exc:
            log.warning("Could not save the metadata cache in %s: %s", state.metadata_dir.path, exc)

    async def follow_forever(self) -> None:
        state = self.state
        await self.load_cache()
        while not state.stopping.is_set():
            fetch = asyncio.ensure_future(
                self.link.metadata(
                    from_offset=state.applied_offset + 1,
                    max_wait_ms=FETCH_MAX_WAIT_MS,
                    max_records=FETCH_MAX_RECORDS,
                    last_checksum=state.applied_checksum,
                )
            )
            try:
                await self._recheck_while_waiting(fetch)
                reply = fetch.result()
            except ControllerCallError as exc:
                log.warning("Failed fetching metadata: %s", exc)
                await self.clock.sleep(RETRY_DELAY)
                continue
            finally:
                fetch.cancel()
            code = reply.get("errorCode", 0)
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                self.restart(reply)
                continue
            if code != 0:
                log.warning("Metadata fetch failed: %s", reply)
                await self.clock.sleep(RETRY_DELAY)
                continue
            self.apply(reply)
            await self.reconcile_if_caught_up()
            self.wake()

    async def _recheck_while_waiting(self, fetch: asyncio.Future[dict[str, Any]]) -> None:
        """Wait for the fetch; meanwhile, whenever `recheck` is set (the broker just registered),
        reconcile if that made it caught up. The page holding the broker's own registration may
        have been applied before the registration's reply arrived: without this the first
        reconcile would wait for the next page, up to a whole long poll."""
        while not fetch.done():
            self.recheck.clear()
            rechecked: asyncio.Future[Any] = asyncio.ensure_future(self.recheck.wait())
            waiting: set[asyncio.Future[Any]] = {fetch, rechecked}
            try:
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            finally:
                rechecked.cancel()
            if not fetch.done() and self.recheck.is_set():
                await self.reconcile_if_caught_up()
                self.wake()

    def restart(self, reply: dict[str, Any]) -> None:
        """The controller's log went backwards: replay it from offset 0 into a fresh image."""
        state = self.state
        log.warning(
            "The controller's metadata log went backwards: this broker applied up to offset %d, the "
            "controller's log ends at offset %s (%s); replaying it from offset 0 into a fresh image",
            state.applied_offset,
            reply.get("endOffset"),
            reply.get("errorMessage"),
        )
        state.applied_offset = -1
        state.applied_checksum = None
        state.metadata_end = int(reply.get("endOffset") or 0)
        self.rebuilding = ClusterImage()
        self.changed = set()
        self.full_reconcile = True
        self.reconciler.keep_strays = True

    def apply(self, reply: dict[str, Any]) -> None:
        """Replay a page of records, remembering what changed for `reconcile_if_caught_up`."""
        state = self.state
        if reply.get("snapshot"):
            if self.rebuilding is not None:
                self.rebuilding = ClusterImage()
            else:
                state.image = ClusterImage()
            self.full_reconcile = True
        image = self.rebuilding if self.rebuilding is not None else state.image
        removed = self.reconciler.removed_topics
        for entry in reply["records"]:
            record = records.decode(entry["type"], entry["data"])
            image.replay(record, entry["offset"])
            state.applied_offset = entry["offset"]
            if isinstance(record, records.PartitionRecord | records.PartitionChangeRecord):
                self.changed.add((record.topic_id, record.partition_id))
            elif isinstance(record, records.RemoveTopicRecord):
                removed.add(record.topic_id)
                self.changed.update(k for k in state.local if k[0] == record.topic_id)
            elif isinstance(record, records.ConfigRecord):
                self.changed.update(k for k in state.local if k[0] == record.topic_id)  # its settings
            elif (
                isinstance(record, records.BrokerConfigRecord)
                and record.broker in (broker_configs.CLUSTER_DEFAULT, str(state.node_id))
                and record.name in broker_configs.TOPIC_DEFAULT_KEYS
            ):
                self.changed.update(state.local)  # a topic default of this broker: every topic's settings
            elif isinstance(record, records.RegisterBrokerRecord) and record.broker_id == state.node_id:
                self.full_reconcile = True
            elif (
                isinstance(record, records.BrokerRegistrationChangeRecord)
                and record.broker_id == state.node_id
                and (record.log_dirs is not None or record.offline_log_dirs is not None)
            ):
                self.full_reconcile = True  # its dirs changed; fencing alone changes no placement
        if reply["records"]:
            checksum = reply.get("lastChecksum")
            state.applied_checksum = int(checksum) if checksum is not None else None
        state.metadata_end = int(reply["endOffset"])
        if self.rebuilding is not None and state.applied_offset + 1 >= state.metadata_end:
            state.image, self.rebuilding = self.rebuilding, None
            log.warning(
                "Rebuilt the metadata image from the controller's log, up to offset %d", state.applied_offset
            )

    async def reconcile_if_caught_up(self) -> None:
        """Once caught up (and the local replicas are known), reconcile everything that changed."""
        state = self.state
        if not state.caught_up():
            return
        await self.reconciler.scanned.wait()
        if self.full_reconcile or not state.reconciled_once:
            keys = set(state.image.replicas_by_broker.get(state.node_id, ())) | set(state.local)
        else:
            keys = self.changed
        self.changed = set()
        self.full_reconcile = False
        self.reconciler.reconcile(keys)
        state.reconciled_once = True
