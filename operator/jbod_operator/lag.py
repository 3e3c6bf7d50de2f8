"""Consumer lag of a cluster's consumer groups, per group, topic and partition, as Prometheus
gauges on the operator's `/metrics` (docs/decisions.md, "Consumer lag").

The operator computes it (not the brokers): a group's committed offsets live with its
coordinator, but the log end offsets of partitions that broker does not lead are not local, so a
broker alone cannot say every partition's lag. The operator asks the cluster as a Kafka client
would (`kafka-consumer-groups.sh --describe`): ListGroups, OffsetFetch per group, ListOffsets
(latest, the high watermark) for every partition a group committed to, logged in as the Kafka
admin (`User:admin`, the admin token) through the bootstrap Service.

Guarantees:
* `partition_lags` (pure) gives one `PartitionLag` per partition a group has a committed offset
  for and whose log end offset is known; lag = log end offset - committed offset, never below 0
  (a committed offset past the end, after a truncation, is no lag). Sorted by group, topic, partition.
* `fetch_lags` asks the cluster once and raises `KafkaException` when it cannot list the groups;
  a group whose offsets cannot be fetched, or a partition whose end cannot, is left out.
* `LagClient` owns at most one `AdminClient` at a time. It builds it (or rebuilds it, when the
  configuration changed) in the thread that asks for lags, and destroys it with its context
  manager's exit, in a Python thread, never while another thread uses it: never left to the
  garbage collector, which can run in one of librdkafka's own threads, where destroying its
  handle crashes the process (confluent-kafka-python #2129; the operator died with SIGSEGV).
* `LagMetrics.publish` sets the three gauges of a cluster's partitions and removes the series of
  the partitions and groups no longer there; `forget` removes a cluster's series.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]  # not in its __all__
from prometheus_client import Gauge

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
ADMIN_USER: Final = names.ADMIN_PRINCIPAL.removeprefix("User:")
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


def client_config(cluster: str, namespace: str, admin_token: str, ca_file: Path | None) -> dict[str, Any]:
    """librdkafka's configuration of the Kafka admin on the cluster's bootstrap Service."""
    config: dict[str, Any] = {
        "bootstrap.servers": names.kafka_bootstrap_servers(cluster, namespace),
        "security.protocol": names.KAFKA_TLS_SECURITY_PROTOCOL if ca_file else names.KAFKA_SECURITY_PROTOCOL,
        "sasl.mechanism": names.KAFKA_SASL_MECHANISM,
        "sasl.username": ADMIN_USER,
        "sasl.password": admin_token,
        "client.id": "jbod-operator-lag",
    }
    if ca_file is not None:
        config["ssl.ca.location"] = str(ca_file)
    return config


def fetch_lags(admin: AdminClient, *, timeout: float = 10.0) -> list[PartitionLag]:
    """Every consumer group's lag, asked of the cluster once (`KafkaException` if it cannot)."""
    listed = admin.list_consumer_groups(request_timeout=timeout).result()
    if listed.errors:
        raise KafkaException(listed.errors[0])
    committed: dict[str, dict[Partition, int]] = {}
    for listing in listed.valid:
        # One group per OffsetFetch (librdkafka's admin API takes one at a time).
        [future] = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(listing.group_id)], request_timeout=timeout
        ).values()
        try:
            offsets = future.result()
        except KafkaException:
            continue  # a group deleted (or its coordinator moving) since ListGroups: next poll
        committed[listing.group_id] = {
            (tp.topic, tp.partition): tp.offset for tp in offsets.topic_partitions or [] if tp.error is None
        }
    wanted = {p for offsets in committed.values() for p, offset in offsets.items() if offset >= 0}
    log_end: dict[Partition, int] = {}
    if wanted:
        futures = admin.list_offsets(
            {
                TopicPartition(topic, partition): OffsetSpec.latest()  # type: ignore[no-untyped-call]
                for topic, partition in sorted(wanted)
            },
            request_timeout=timeout,
        )
        for tp, future in futures.items():
            try:
                log_end[(tp.topic, tp.partition)] = future.result().offset
            except KafkaException:
                continue  # a partition without a leader (or deleted): no lag said rather than a wrong one
    return partition_lags(committed, log_end)


class LagClient:
    """A cluster's Kafka admin for lag, owned: every call made in a Python thread, one at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._admin: tuple[dict[str, Any], AdminClient] | None = None

    def fetch(self, config: dict[str, Any], *, timeout: float) -> list[PartitionLag]:
        """`fetch_lags` with an admin of `config` (the previous one closed first if it differs)."""
        with self._lock:
            if self._admin is not None and self._admin[0] != config:
                self._close_locked()
            if self._admin is None:
                self._admin = (dict(config), AdminClient(config))
            return fetch_lags(self._admin[1], timeout=timeout)

    @property
    def open(self) -> bool:
        """An admin is built (and not destroyed yet)."""
        return self._admin is not None

    def close(self) -> None:
        """Destroy the admin, once a `fetch` running in another thread has returned."""
        with self._lock:
            self._close_locked()

    def close_in_background(self) -> None:
        """`close` in a thread of its own: for an event loop that must not wait for a fetch."""
        threading.Thread(target=self.close, name="jbod-lag-close", daemon=True).start()

    def _close_locked(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin[1], None
            admin.__exit__(None, None, None)


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
