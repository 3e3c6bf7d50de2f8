"""An internal topic a coordinator lives on (`__consumer_offsets`, `__transaction_state`), as
FindCoordinator sees it: where a key's coordinator is, and the topic's creation on demand.

Guarantees:
* `find_coordinator` answers one FindCoordinator entry for a key of the topic's partition
  `partition`: the partition leader's id and its endpoint on the listener the client came
  through; COORDINATOR_NOT_AVAILABLE (which clients retry) while the topic does not exist — then
  its creation is started — or while the partition has no leader reachable on that listener.
* The creation runs in the background through the active controller (`Forwarder.create_topic`,
  the admin token), one at a time, never awaited by a request; its request is the owner's
  (`topic_request`, given the number of active brokers). An existing topic is success; another
  error, or no controller, is a WARNING (the next FindCoordinator tries again); a failure of the
  task an ERROR. `aclose` stops a creation still waiting for the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from jbod_agent.kafka.context import BrokerContext
from jbod_agent.kafka.forwarding import Forwarder
from jbod_agent.kafka.listener import Connection
from jbod_agent.ports import ControllerCallError
from jbod_core.messages import CreateTopicRequest


class InternalTopic:
    """One coordinator's internal topic (the module's guarantees)."""

    def __init__(  # noqa: PLR0913  what differs between the coordinators
        self,
        ctx: BrokerContext,
        forwarder: Forwarder,
        name: str,
        *,
        topic_request: Callable[[int], CreateTopicRequest],
        key_owner: str,
        log: logging.Logger,
    ) -> None:
        self.ctx = ctx
        self.forwarder = forwarder
        self.name = name
        self._topic_request = topic_request
        self._key_owner = key_owner
        self._log = log
        self._creating: asyncio.Task[None] | None = None

    def find_coordinator(self, conn: Connection, key: str, partition: int) -> dict[str, Any]:
        """The FindCoordinator entry of `key`, whose coordinator leads partition `partition`."""
        missing: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1}
        image = self.ctx.state.image
        topic_id = image.topic_ids_by_name.get(self.name)
        if topic_id is None:
            self.create()
            return {
                **missing,
                "error_code": KafkaError.coordinator_not_available,
                "error_message": f"{self.name} does not exist yet: it is being created",
            }
        part = image.partition((topic_id, partition))
        leader = image.brokers.get(part.leader) if part is not None else None
        endpoint = self.ctx.endpoint(leader, conn.listener.name) if leader is not None else None
        if endpoint is None or part is None:
            return {
                **missing,
                "error_code": KafkaError.coordinator_not_available,
                "error_message": f"the {self._key_owner}'s partition has no leader reachable on this listener",
            }
        return {
            "key": key,
            "node_id": part.leader,
            "host": endpoint.host,
            "port": endpoint.port,
            "error_code": KafkaError.none,
            "error_message": None,
        }

    def create(self) -> None:
        """Start creating the topic in the background, unless a creation is running."""
        if self._creating is None or self._creating.done():
            self._creating = asyncio.create_task(self._create(), name=f"create-{self.name}")
            self._creating.add_done_callback(self._log_failure)

    async def aclose(self) -> None:
        """Stop a creation still waiting for the controller."""
        if self._creating is not None:
            self._creating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._creating

    async def _create(self) -> None:
        active = sum(1 for reg in self.ctx.state.image.brokers.values() if reg.is_active)
        request = self._topic_request(active)
        try:
            reply = await self.forwarder.create_topic(request)
        except ControllerCallError as exc:
            self._log.warning("Could not create %s: %s", self.name, exc)
            return
        code = reply.error_code
        if code not in (0, int(KafkaError.topic_already_exists)):
            self._log.warning("Could not create %s: errorCode %d %s", self.name, code, reply.error_message)
        elif code == 0:
            self._log.info(
                "Created %s: %d partitions, replication factor %d",
                self.name,
                request.num_partitions,
                request.replication_factor,
            )

    def _log_failure(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._log.error("Could not create %s", self.name, exc_info=task.exception())
