"""A broker's connections to its peers' inter-broker listeners, one per peer, for the requests a
broker sends on its own (WriteTxnMarkers, the partition leaders' AddPartitionsToTxn verification).

Guarantees:
* `link(node)` is an open `PeerConnection` to broker `node`'s `inter.broker.listener.name`
  listener (TLS and SASL as that listener asks, logged in as the inter-broker user), opened on
  first use and reopened when the one before was closed; None when the broker has no such
  listener in the image. It raises `PeerError` (or OSError for the client TLS files) when the
  connection or login fails. A caller that saw a request fail calls `drop(node)`.
* `close` closes every connection.
"""

from __future__ import annotations

from typing import Final

from jbod_agent.replication.peer_link import INTER_BROKER_USER, PeerConnection, PeerLogin
from jbod_agent.state import AgentState
from jbod_runtime.tls import ClientTls

TIMEOUT_S: Final = 30.0


class InterBrokerLinks:
    """One connection per peer broker (the module's guarantees)."""

    def __init__(self, state: AgentState, token: str, *, client_id: str) -> None:
        self._state = state
        self._token = token
        self._client_id = client_id
        self._links: dict[int, PeerConnection] = {}
        self._tls: ClientTls | None = None

    async def link(self, node: int) -> PeerConnection | None:
        link = self._links.get(node)
        if link is not None and not link.closed:
            return link
        config = self._state.config
        reg = self._state.image.brokers.get(node)
        endpoint = next(
            (
                (listener.host, listener.port)
                for listener in (() if reg is None else reg.listeners)
                if listener.name == config.inter_broker_listener_name
            ),
            None,
        )
        if endpoint is None:
            return None
        listener = config.inter_broker_listener
        tls = None
        if listener.tls:
            if self._tls is None:
                self._tls = config.client_tls()
            self._tls.refresh()
            tls = self._tls.context
        link = await PeerConnection.open(
            *endpoint,
            tls=tls,
            login=PeerLogin(
                config.sasl_mechanism_inter_broker_protocol if listener.authenticates else None,
                INTER_BROKER_USER,
                self._token,
            ),
            client_id=f"broker-{self._state.node_id}-{self._client_id}",
            timeout=TIMEOUT_S,
        )
        self._links[node] = link
        return link

    def drop(self, node: int) -> None:
        link = self._links.pop(node, None)
        if link is not None:
            link.close()

    def close(self) -> None:
        for node in list(self._links):
            self.drop(node)
