"""The wait of consumers' fetches on partition leaders: until a partition has news, or a timeout.

The Kafka listener's Fetch (`kafka.fetch_api`) reads the records below the high watermark
itself; when it has nothing to return yet, it waits here.

Guarantees:
* `wait_for_data` returns as soon as any of the given partitions has news (an append, a high
  watermark or log start move, a leadership change, a removal: `HostedPartition.wake_data_waiters`),
  or after `timeout` seconds of the injected clock; it leaves no waiter registered behind.
* `follower_bytes_served` counts the record bytes the Kafka listener served to consumers from
  follower replicas (KIP-392; the `jbod_fetch_follower_bytes_total` metric).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from jbod_agent.partitions.replica_manager import HostedPartition
from jbod_agent.ports import Clock


class ClientFetch:
    """The wait for data of the Kafka listener's fetches over several partitions."""

    def __init__(self, *, clock: Clock) -> None:
        self.clock = clock
        self.follower_bytes_served = 0

    async def wait_for_data(self, hosted: Iterable[HostedPartition], timeout: float) -> None:
        """Return when any of `hosted` has new data (or a moved log start), or after `timeout` s."""
        waiter = asyncio.Event()
        parts = list(hosted)
        for h in parts:
            h.data_waiters.add(waiter)
        try:
            await self.clock.wait(waiter, timeout)
        finally:
            for h in parts:
                h.data_waiters.discard(waiter)
