"""The agent's controller port in production: `ControllerLink` behind `ports.ControllerCalls`.

Guarantees:
* `LinkedController` forwards each of the agent's controller calls to a
  `jbod_client.controller.ControllerLink` (which follows the active controller, §3.8) and returns
  its typed reply unchanged, a reply with a non-zero errorCode included.
* Every failure to get an answer (`jbod_client.controller.ClientError`: no controller reachable,
  an HTTP error, a body that is not the contract's) is raised as `ports.ControllerCallError`
  with the same one-line message, so no other module of the agent knows the wire client's
  exceptions.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

from jbod_agent.ports import ControllerCallError
from jbod_client.controller import ClientError, ControllerLink
from jbod_core.messages import (
    AlterPartitionReply,
    AlterPartitionRequest,
    AssignReplicasToDirsReply,
    AssignReplicasToDirsRequest,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    RegisterBrokerReply,
    RegisterBrokerRequest,
)

ReplyT = TypeVar("ReplyT")


async def answer(call: Awaitable[ReplyT]) -> ReplyT:
    """`call`'s reply; a `ClientError` raised as the port's `ControllerCallError` (same message)."""
    try:
        return await call
    except ClientError as exc:
        raise ControllerCallError(str(exc)) from exc


class LinkedController:
    """`ports.ControllerCalls` over a `ControllerLink` (the module's guarantees)."""

    def __init__(self, link: ControllerLink) -> None:
        self._link = link

    async def register(self, request: RegisterBrokerRequest) -> RegisterBrokerReply:
        return await answer(self._link.register(request))

    async def heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply:
        return await answer(self._link.heartbeat(request))

    async def assign_replicas_to_dirs(
        self, request: AssignReplicasToDirsRequest
    ) -> AssignReplicasToDirsReply:
        return await answer(self._link.assign_replicas_to_dirs(request))

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionReply:
        return await answer(self._link.alter_partition(request))

    async def metadata(
        self, *, from_offset: int, max_wait_ms: int, max_records: int, last_checksum: int | None = None
    ) -> dict[str, Any]:
        return await answer(
            self._link.metadata(
                from_offset=from_offset,
                max_wait_ms=max_wait_ms,
                max_records=max_records,
                last_checksum=last_checksum,
            )
        )

    async def aclose(self) -> None:
        await self._link.aclose()
