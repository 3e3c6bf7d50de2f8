"""Consumer lag of a cluster's consumer groups, per group, topic and partition, as Prometheus
gauges on the operator's `/metrics` (docs/decisions.md, "Consumer lag").

The operator computes it (not the brokers): a group's committed offsets live with its
coordinator, but the log end offsets of partitions that broker does not lead are not local, so a
broker alone cannot say every partition's lag. The operator asks the cluster as a Kafka client
would (`kafka-consumer-groups.sh --describe`): ListGroups, OffsetFetch per group, ListOffsets
(latest, the high watermark) for every partition a group committed to, logged in as the Kafka
admin (`User:admin`, the admin token) through the bootstrap Service. OffsetFetch goes to the
broker that listed the group, in one request for all of its groups.

Guarantees:
* `partition_lags` (pure) gives one `PartitionLag` per partition a group has a committed offset
  for and whose log end offset is known; lag = log end offset - committed offset, never below 0
  (a committed offset past the end, after a truncation, is no lag). Sorted by group, topic, partition.
* `fetch_lags` asks the cluster once, through this project's Kafka protocol client
  (`jbod_client.group_offsets`), not librdkafka's admin, which crashed the operator (SIGSEGV)
  while group coordinators moved (docs/decisions.md, "The operator asks for consumer lag with
  its own Kafka client"). It raises `ClientError` only when no bootstrap server gives Metadata;
  a group or partition that cannot be had is left out.
* `LagMetrics.publish` sets the three gauges of a cluster's partitions and removes the series of
  the partitions and groups no longer there; `forget` removes a cluster's series.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from prometheus_client import Gauge

from jbod_client.group_offsets import group_offsets
from jbod_client.kafka_admin import KafkaAdmin
from jbod_client.kafka_config import KafkaSecurity
from jbod_operator import names

LABELS: Final = ("namespace", "cluster", "group", "topic", "partition")
# Names as kafka-lag-exporter's (kafka_consumergroup_group_lag, ..._group_offset) and kminion's.
LAG = Gauge(
    "jbod_consumergroup_lag",
    "Records a consumer group has yet to read: log end offset - committed offset",
    LABELS,
)
COMMITTED_OFFSET = Gauge(
    "jbod_consumergroup_committed_offset", "The offset a consumer group committed", LABELS
)
LOG_END_OFFSET = Gauge(
    "jbod_consumergroup_log_end_offset",
    "The partition's log end offset (high watermark) when the group's lag was computed",
    LABELS,
)
Partition = tuple[str, int]


@dataclass(frozen=True, order=True)
class PartitionLag:
    group: str
    topic: str
    partition: int
    committed_offset: int
    log_end_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.log_end_offset - self.committed_offset)


def partition_lags(
    committed: Mapping[str, Mapping[Partition, int]], log_end: Mapping[Partition, int]
) -> list[PartitionLag]:
    """Group → (topic, partition) → committed offset (negative: none), and each partition's log
    end offset: the lag of every partition with both."""
    out = [
        PartitionLag(group, topic, partition, offset, log_end[(topic, partition)])
        for group, offsets in committed.items()
        for (topic, partition), offset in offsets.items()
        if offset >= 0 and (topic, partition) in log_end
    ]
    return sorted(out)


def security(admin_token: str, ca_file: Path | None) -> KafkaSecurity:
    """How the operator logs in for lag: as the Kafka admin (SCRAM), over TLS when the cluster
    has a trust bundle."""
    return KafkaSecurity.admin(admin_token, truststore=ca_file)


def bootstrap(cluster: str, namespace: str) -> list[str]:
    """The cluster's bootstrap Service."""
    return [names.kafka_bootstrap_servers(cluster, namespace)]


async def fetch_lags(
    servers: Sequence[str], login: KafkaSecurity, *, timeout: float = 10.0
) -> list[PartitionLag]:
    """Every consumer group's lag, asked of the cluster once (`ClientError` when no bootstrap
    server answers Metadata)."""
    async with KafkaAdmin(servers, login, timeout=timeout) as admin:
        offsets = await group_offsets(admin)
    return partition_lags(offsets.committed, offsets.log_end)


class LagMetrics:
    """The gauges' series of each cluster, so that vanished partitions and groups are removed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str], set[tuple[str, ...]]] = {}

    def publish(self, namespace: str, cluster: str, lags: Iterable[PartitionLag]) -> None:
        current: set[tuple[str, ...]] = set()
        for item in lags:
            labels = (namespace, cluster, item.group, item.topic, str(item.partition))
            current.add(labels)
            LAG.labels(*labels).set(item.lag)
            COMMITTED_OFFSET.labels(*labels).set(item.committed_offset)
            LOG_END_OFFSET.labels(*labels).set(item.log_end_offset)
        with self._lock:
            gone = self._series.get((namespace, cluster), set()) - current
            self._series[(namespace, cluster)] = current
        self._remove(gone)

    def forget(self, namespace: str, cluster: str) -> None:
        with self._lock:
            gone = self._series.pop((namespace, cluster), set())
        self._remove(gone)

    @staticmethod
    def _remove(series: Iterable[tuple[str, ...]]) -> None:
        for labels in series:
            for gauge in (LAG, COMMITTED_OFFSET, LOG_END_OFFSET):
                try:
                    gauge.remove(*labels)
                except KeyError:
                    continue


METRICS = LagMetrics()
