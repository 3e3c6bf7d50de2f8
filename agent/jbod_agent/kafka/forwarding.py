"""What a broker asks the active controller for its Kafka clients: admin requests forwarded as
Kafka forwards them (KIP-590) with the admin token, and blocks of producer ids with the cluster
token. Clients never need the controller's address.

Guarantees:
* Every call follows the active controller (`jbod_client.controller.ControllerLink`, §3.8) and
  raises the agent port's `ControllerCallError` when none answers in time: the handlers turn it
  into a retriable Kafka error (a controller failover is a retry to clients).
* CreateTopics answers a typed `CreateTopicReply`, the controller's refusals (its HTTP error
  replies) included; a body that is not one is a `ControllerCallError`.
* Without an admin token the broker forwards nothing (`admin_enabled` is False): nobody can be
  the `admin` principal then either.
* `ProducerIds.next_id` hands out ids from the block the controller gave this broker (1000 at a
  time, durable in the metadata log before they are handed out, so never reused) and never waits
  for the controller (as Kafka's `RPCProducerIdManager`): with no id left it answers None and asks
  for the next block in the background, one request at a time; it asks ahead once 90% of a block
  is handed out, so a broker whose controller answers seldom runs out. A request that fails is
  logged and asked again by the next caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Sequence
from typing import Any, Final

from pydantic import ValidationError

from jbod_agent.lifecycle.controller_port import answer
from jbod_agent.ports import ControllerCallError
from jbod_agent.state import AgentState
from jbod_client.controller import ApiError, ClientError, ControllerLink
from jbod_core.errors import ErrorCode
from jbod_core.messages import (
    AllocateProducerIdsRequest,
    AlterBrokerConfigsReply,
    AlterBrokerConfigsRequest,
    AlterReassignmentsReply,
    AlterReassignmentsRequest,
    AlterScramCredentialsReply,
    AlterScramCredentialsRequest,
    AlterTopicConfigsReply,
    AlterTopicConfigsRequest,
    CreateAclsReply,
    CreateAclsRequest,
    CreatePartitionsReply,
    CreatePartitionsRequest,
    CreateTopicReply,
    CreateTopicRequest,
    DeleteAclsReply,
    DeleteAclsRequest,
    DescribeScramCredentialsResult,
    ElectLeadersReply,
    ElectLeadersRequest,
    validation_message,
)
from jbod_core.quota_messages import AlterClientQuotasReply, AlterClientQuotasRequest
from jbod_runtime.tls import ClientTls

log = logging.getLogger("jbod_agent.kafka")


async def _reply(call: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """The controller's JSON reply, its HTTP error replies (a 404 for an unknown topic) included;
    `ControllerCallError` when no active controller answered."""
    try:
        return await call
    except ApiError as exc:
        if exc.code == ErrorCode.NOT_CONTROLLER:
            raise ControllerCallError(str(exc)) from exc
        return {"errorCode": exc.code, "errorMessage": exc.message}
    except ClientError as exc:
        raise ControllerCallError(str(exc)) from exc


class Forwarder:
    """The admin calls of the Kafka APIs (the module's guarantees)."""

    def __init__(
        self, urls: Sequence[str], *, admin_token: str | None, timeout: float, tls: ClientTls | None = None
    ) -> None:
        self._link = (
            ControllerLink(urls, token=admin_token, failover_timeout=timeout, tls=tls)
            if admin_token
            else None
        )

    @property
    def admin_enabled(self) -> bool:
        return self._link is not None

    def _admin(self) -> ControllerLink:
        if self._link is None:
            raise ControllerCallError("this broker has no admin token: it forwards no admin request")
        return self._link

    async def create_topic(self, request: CreateTopicRequest) -> CreateTopicReply:
        data = await _reply(self._admin().create_topic(request))
        try:
            return CreateTopicReply.model_validate(data)
        except ValidationError as exc:
            raise ControllerCallError(
                f"the controller answered a create of {request.name} with an unexpected body: "
                f"{validation_message(exc)}"
            ) from exc

    async def delete_topic(self, name: str) -> dict[str, Any]:
        return await _reply(self._admin().delete_topic(name))

    async def alter_topic_configs(
        self, name: str, request: AlterTopicConfigsRequest
    ) -> AlterTopicConfigsReply:
        return await answer(self._admin().alter_topic_configs(name, request))

    async def create_partitions(self, name: str, request: CreatePartitionsRequest) -> CreatePartitionsReply:
        return await answer(self._admin().create_partitions(name, request))

    async def alter_reassignments(self, request: AlterReassignmentsRequest) -> AlterReassignmentsReply:
        return await answer(self._admin().alter_reassignments(request))

    async def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersReply:
        return await answer(self._admin().elect_leaders(request))

    async def alter_broker_configs(
        self, broker: str, request: AlterBrokerConfigsRequest
    ) -> AlterBrokerConfigsReply:
        return await answer(self._admin().alter_broker_configs(broker, request))

    async def alter_scram_credentials(
        self, request: AlterScramCredentialsRequest
    ) -> AlterScramCredentialsReply:
        return await answer(self._admin().alter_scram_credentials(request))

    async def describe_scram_credentials(
        self, users: Sequence[str] | None
    ) -> list[DescribeScramCredentialsResult]:
        return await answer(self._admin().describe_scram_credentials(users))

    async def alter_client_quotas(self, request: AlterClientQuotasRequest) -> AlterClientQuotasReply:
        return await answer(self._admin().alter_client_quotas(request))

    async def create_acls(self, request: CreateAclsRequest) -> CreateAclsReply:
        return await answer(self._admin().create_acls(request))

    async def delete_acls(self, request: DeleteAclsRequest) -> DeleteAclsReply:
        return await answer(self._admin().delete_acls(request))

    async def aclose(self) -> None:
        if self._link is not None:
            await self._link.aclose()


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("Could not get a block of producer ids", exc_info=task.exception())


#: The next block of producer ids is asked for once a tenth of the current one is left (Kafka's
#: RPCProducerIdManager asks at 90% used).
_LEFT_WHEN_ASKING_AHEAD: Final = 10


class ProducerIds:
    """Producer ids for InitProducerId, from blocks the controller allocates to this broker."""

    def __init__(self, state: AgentState, link: ControllerLink) -> None:
        self._state = state
        self._link = link
        self._current = range(0)  # the ids of this broker's block not handed out yet
        self._following: range | None = None  # the block asked for ahead of need
        self._block_size = 0  # of the current block
        self._asking: asyncio.Task[None] | None = None

    def next_id(self) -> int | None:
        """A new producer id, or None when this broker has none left (the next block is asked for:
        a client retries)."""
        if not self._current and self._following is not None:
            self._current, self._following = self._following, None
            self._block_size = len(self._current)
        if not self._current:
            self._ask()
            return None
        produced = self._current[0]
        self._current = self._current[1:]
        if self._following is None and len(self._current) <= self._block_size // _LEFT_WHEN_ASKING_AHEAD:
            self._ask()
        return produced

    def _ask(self) -> None:
        if self._asking is None or self._asking.done():
            self._asking = asyncio.create_task(self._next_block(), name="allocate-producer-ids")
            self._asking.add_done_callback(_log_failure)

    async def _next_block(self) -> None:
        request = AllocateProducerIdsRequest(broker_id=self._state.node_id, broker_epoch=self._state.epoch)
        try:
            reply = await answer(self._link.allocate_producer_ids(request))
        except ControllerCallError as exc:
            log.warning("Could not get a block of producer ids: %s", exc)
            return
        if reply.error_code != ErrorCode.NONE or reply.producer_id_len <= 0:
            log.warning(
                "Could not get a block of producer ids: the controller answered errorCode %d %s",
                reply.error_code,
                reply.error_message or "",
            )
            return
        self._following = range(reply.producer_id_start, reply.producer_id_start + reply.producer_id_len)

    async def aclose(self) -> None:
        if self._asking is not None:
            self._asking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._asking
        await self._link.aclose()
