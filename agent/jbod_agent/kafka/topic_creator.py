"""The creations a broker's Metadata requests start (`jbod_core.auto_create`): each a CreateTopics
forwarded to the active controller as a Kafka CreateTopics is (`Forwarder.create_topic`), run in
the background so that no Metadata answer waits for the controller.

Guarantees:
* At most one creation per topic name runs at a time on this broker: `start` of a name already
  being created does nothing, and `being_created` is true from `start` until the creation ended:
  for a topic created (or found created by another broker), once this broker's image shows it
  (at most `settle_s`); for a creation the controller refused or no controller answered,
  `retry_after_s` after that answer, so that a client retrying every 100 ms costs the controller
  at most one request per topic per `retry_after_s`.
* A creation neither raises nor blocks its caller: a refusal (INVALID_REPLICATION_FACTOR with too
  few brokers, INVALID_TOPIC_EXCEPTION for a name colliding in '.' and '_', ...) or an unreachable
  controller is logged with the topic's name; TOPIC_ALREADY_EXISTS (another broker created it
  first) is not an error.
* `aclose` cancels the creations still running; time is the agent's injected clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

from jbod_agent.kafka.forwarding import Forwarder
from jbod_agent.ports import Clock, ControllerCallError
from jbod_agent.state import AgentState
from jbod_core.errors import ErrorCode

log = logging.getLogger("jbod_agent.kafka.topic_creator")

SETTLE_S: Final = 5.0  # how long a created topic may take to reach this broker's image
RETRY_AFTER_S: Final = 1.0
_WAIT_STEP_S: Final = 0.02


class TopicCreator:
    """Background creations of the topics Metadata requests name (the module's guarantees)."""

    def __init__(
        self,
        state: AgentState,
        forwarder: Forwarder,
        clock: Clock,
        *,
        settle_s: float = SETTLE_S,
        retry_after_s: float = RETRY_AFTER_S,
    ) -> None:
        self._state = state
        self._forwarder = forwarder
        self._clock = clock
        self._settle_s = settle_s
        self._retry_after_s = retry_after_s
        self._running: dict[str, asyncio.Task[None]] = {}

    def being_created(self, name: str) -> bool:
        return name in self._running

    def start(self, name: str) -> None:
        """Create `name` with this broker's `num.partitions` and `default.replication.factor`,
        unless a creation of it is running."""
        if name in self._running:
            return
        task = asyncio.create_task(self._create(name), name=f"auto-create {name}")
        self._running[name] = task
        task.add_done_callback(lambda _done: self._running.pop(name, None))

    async def _create(self, name: str) -> None:
        settings = self._state.config.auto_create_settings
        try:
            reply = await self._forwarder.create_topic(settings.creation(name))
        except ControllerCallError as exc:
            log.warning("Could not auto-create topic %s: no controller answered: %s", name, exc)
            await self._clock.sleep(self._retry_after_s)
            return
        code = reply.error_code
        if code == ErrorCode.NONE:
            log.info(
                "Auto-created topic %s: %d partitions, replication factor %d",
                name,
                settings.num_partitions,
                settings.replication_factor,
            )
            await self._until_shown(name)
        elif code == ErrorCode.TOPIC_ALREADY_EXISTS:
            await self._until_shown(name)
        else:
            log.warning("Could not auto-create topic %s: errorCode %d %s", name, code, reply.error_message)
            await self._clock.sleep(self._retry_after_s)

    async def _until_shown(self, name: str) -> None:
        deadline = self._clock.monotonic() + self._settle_s
        while name not in self._state.image.topic_ids_by_name and self._clock.monotonic() < deadline:
            await self._clock.sleep(_WAIT_STEP_S)

    async def aclose(self) -> None:
        running = list(self._running.values())
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError):
                await task
