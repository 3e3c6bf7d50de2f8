"""What the hand-written response codecs' tests share: generated KIP-951 leader hints (a
partition's current leader, the response's node endpoints) and the same values in the shape
`protocol.build` takes for kio, which the codecs are compared with."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from jbod_kafka import flexible

#: A partition's current leader: none, or (leader id, leader epoch) with Kafka's default (-1, -1).
current_leaders = st.none() | st.tuples(st.integers(-1, 100), st.integers(-1, 2**31 - 1))

node_endpoints = st.lists(
    st.builds(
        flexible.NodeEndpoint,
        node_id=st.integers(0, 100),
        host=st.text(max_size=20),
        port=st.integers(0, 65535),
        rack=st.none() | st.text(max_size=20),
    ),
    max_size=3,
)


def kio_current_leader(leader: tuple[int, int] | None) -> dict[str, Any]:
    """The partition fields for `leader` (none when there is no leader to name)."""
    if not leader:
        return {}
    return {"current_leader": {"leader_id": leader[0], "leader_epoch": leader[1]}}


def kio_node_endpoints(nodes: list[flexible.NodeEndpoint]) -> list[dict[str, Any]]:
    return [{"node_id": n.node_id, "host": n.host, "port": n.port, "rack": n.rack} for n in nodes]
