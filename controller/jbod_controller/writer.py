"""The controller's one writer: decide → append durably → replay → reply.

Guarantees:
* Every mutation runs inside the writer task, one command at a time, so decisions never race;
  there are no locks.
* Commands are taken in batches: each is decided against the image (which already holds the
  effect of the commands before it), its records are replayed at once, and the batch is then
  written and fsync'd together (group commit). Every reply of a batch is released only after the
  batch is durable, so no reply reports (or depends on) state that a crash could lose.
* The metadata readers (`wait_for_commit`, the log's `read`) only ever see fsync'd records.
* Every unclean leader election written (`jbod_core.election.is_unclean`) is logged as a WARNING.
* A record that cannot be replayed or a log that cannot be written is fatal: the process exits
  rather than run with an image the log does not hold.
* In a controller quorum (§3.8) nothing is decided while the log cannot say that this controller
  still holds the election (its lease deadline passed: `wait_writable` waits for the renewal); the
  log refuses appends once this controller lost the election (`NotActiveError`): every command of the batch and every queued one fails with that error, the
  writer stops for good and `on_deposed` is called, so the service can drop its image (it may
  hold records that were never committed) and follow the log again as a standby.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from jbod_controller.record_log import NotActiveError, RecordLog
from jbod_core import election, frames, records
from jbod_core.image import ClusterImage
from jbod_runtime import gc_policy

log = logging.getLogger("jbod_controller.writer")

Reply = TypeVar("Reply")
Decision = Callable[[ClusterImage], tuple[list[records.Record], Reply]]

MAX_BATCH_COMMANDS = 2048


@dataclass(slots=True)
class _Command(Generic[Reply]):
    decide: Decision[Reply]
    future: asyncio.Future[Reply]
    name: str


class FatalWriterError(RuntimeError):
    """The writer cannot go on without risking an image the log does not hold."""


class CommitSignal:
    """Wakes the metadata long polls when the committed end of the log moves."""

    def __init__(self, committed: Callable[[], int]) -> None:
        self._committed = committed
        self._condition = asyncio.Condition()
        self.closing = False

    async def notify(self) -> None:
        async with self._condition:
            self._condition.notify_all()

    async def close(self) -> None:
        self.closing = True
        await self.notify()

    async def wait_beyond(self, beyond: int, timeout: float) -> None:
        """Return once a record at offset `beyond` is committed, or after `timeout` seconds."""
        if self._committed() > beyond or timeout <= 0 or self.closing:
            return
        async with self._condition:
            try:
                await asyncio.wait_for(
                    self._condition.wait_for(lambda: self.closing or self._committed() > beyond), timeout
                )
            except TimeoutError:
                return


class Writer:
    def __init__(
        self,
        image: ClusterImage,
        record_log: RecordLog,
        *,
        on_fatal: Callable[[BaseException], None],
        commits: CommitSignal | None = None,
        on_deposed: Callable[[NotActiveError], None] | None = None,
    ) -> None:
        self.image = image
        self.record_log = record_log
        self._queue: asyncio.Queue[_Command[Any]] = asyncio.Queue()
        self.commits = commits or CommitSignal(lambda: record_log.committed_offset)
        self._task: asyncio.Task[None] | None = None
        self._on_fatal = on_fatal
        self._on_deposed = on_deposed
        self._deposed: NotActiveError | None = None
        self._in_flight: list[_Command[Any]] = []
        self.records_since_snapshot = 0
        self.batches = 0
        self.after_commit: list[Callable[[], None]] = []

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller-writer")

    async def release_waiters(self) -> None:
        """Wake every long-poll waiter now (used at shutdown so no request holds it up)."""
        await self.commits.close()

    async def stop(self) -> None:
        await self.release_waiters()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def submit(self, decide: Decision[Reply], *, name: str = "command") -> Reply:
        if self._deposed is not None:
            raise self._deposed
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Command(decide=decide, future=future, name=name))
        return await future

    @property
    def committed_offset(self) -> int:
        return self.record_log.committed_offset

    async def wait_for_commit(self, beyond: int, timeout: float) -> None:
        """Return once a record at offset `beyond` is committed, or after `timeout` seconds."""
        await self.commits.wait_beyond(beyond, timeout)

    async def stop_writing(self, exc: NotActiveError) -> None:
        """Deposed from outside (the lease was lost): fail what is queued or in flight, stop."""
        if self._deposed is None:
            self._deposed = exc
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._depose([], exc, notify=False)

    def _depose(self, batch: list[_Command[Any]], exc: NotActiveError, *, notify: bool = True) -> None:
        """Fail the batch and everything queued with `exc`; no command runs after this."""
        self._deposed = exc
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except asyncio.QueueEmpty:
                break
        for command in batch + self._in_flight:
            if not command.future.done():
                command.future.set_exception(exc)
        self._in_flight = []
        if notify and self._on_deposed is not None:
            self._on_deposed(exc)

    async def _run(self) -> None:
        while True:
            batch = await self._next_batch()
            self._in_flight = batch
            try:
                outcomes, written = await self._write_batch(batch)
            except NotActiveError as exc:
                log.warning("Stopped writing the metadata log: %s", exc)
                self._depose(batch, exc)
                return
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError):
                    raise
                self._on_fatal(exc)
                raise FatalWriterError(str(exc)) from exc
            if written:
                await self._announce_commit(written)
            self._in_flight = []
            for command, reply, error in outcomes:
                if command.future.done():
                    continue
                if error is not None:
                    command.future.set_exception(error)
                else:
                    command.future.set_result(reply)

    async def _next_batch(self) -> list[_Command[Any]]:
        """Wait for a command, then take every queued one with it (up to `MAX_BATCH_COMMANDS`)."""
        batch = [await self._queue.get()]
        while len(batch) < MAX_BATCH_COMMANDS:
            try:
                batch.append(self._queue.get_nowait())
            except asyncio.QueueEmpty:
                break
        return batch

    async def _write_batch(
        self, batch: list[_Command[Any]]
    ) -> tuple[list[tuple[_Command[Any], Any, BaseException | None]], int]:
        """Decide, append and replay each command of the batch, then fsync them all (group commit).

        Returns each decided command with its reply or error, and the number of records written.
        """
        loop = asyncio.get_running_loop()
        if not self.record_log.writable_now():
            await loop.run_in_executor(None, self.record_log.wait_writable)
        outcomes: list[tuple[_Command[Any], Any, BaseException | None]] = []
        written = 0
        for command in batch:
            if command.future.cancelled():
                # The caller went away before its command was decided: nothing to do.
                continue
            reply, error, count = self._apply(command)
            outcomes.append((command, reply, error))
            written += count
        if written:
            started = time.perf_counter()
            await loop.run_in_executor(None, self.record_log.flush)
            self.records_since_snapshot += written
            self.batches += 1
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "Committed %d records in %.1f ms",
                    written,
                    (time.perf_counter() - started) * 1000,
                )
        return outcomes, written

    def _apply(self, command: _Command[Any]) -> tuple[Any, BaseException | None, int]:
        """Decide one command, then append and replay its records: (reply, error, records appended).

        A failed decision is the command's error; a failed append or replay propagates (fatal).
        """
        try:
            produced, reply = command.decide(self.image)
        except Exception as exc:  # a decision bug must not stop the writer
            log.exception("Failed deciding %s", command.name)
            return None, exc, 0
        append = self.record_log.append_one
        encode_entry = frames.encode_entry
        for record in produced:
            offset = self.image.end_offset
            append(encode_entry(offset, record.TYPE, record.to_data()))
            if type(record) is records.PartitionChangeRecord and record.leader is not None:
                self._log_unclean(record)
            self.image.replay(record, offset)
        return reply, None, len(produced)

    def _log_unclean(self, record: records.PartitionChangeRecord) -> None:
        """A WARNING for a leader elected outside the ISR (Kafka's controller logs it too)."""
        before = self.image.partition((record.topic_id, record.partition_id))
        if before is not None and election.is_unclean(before, record):
            topic = self.image.topics[record.topic_id].name
            log.warning(
                "Unclean leader election: broker %d leads %s-%d (leader epoch %d), outside the ISR %s; "
                "records only the old ISR had are lost",
                record.leader,
                topic,
                record.partition_id,
                before.leader_epoch + 1 if record.leader_epoch is None else record.leader_epoch,
                list(before.isr),
            )

    async def _announce_commit(self, written: int) -> None:
        """After a durable batch: wake the metadata readers and run the after-commit hooks."""
        if written >= gc_policy.FREEZE_AFTER_RECORDS:
            gc_policy.freeze()
        await self.commits.notify()
        for hook in self.after_commit:
            hook()


def exit_on_fatal(exc: BaseException) -> None:
    log.critical("Stopped the controller: the metadata log could not be written or replayed: %s", exc)
    logging.shutdown()
    os._exit(70)
