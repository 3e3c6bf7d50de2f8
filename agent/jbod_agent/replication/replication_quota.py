"""Replication throttles (issue 24), Kafka's semantics: a broker's leader side and follower side
each have a quota (`leader.replication.throttled.rate`, `follower.replication.throttled.rate`)
that applies only to the replicas their topic's `leader.replication.throttled.replicas` /
`follower.replication.throttled.replicas` name for this broker, and only while the fetching
follower is out of the ISR (catching up): produce traffic and in-sync replication never wait.

Guarantees:
* `ReplicationQuota.throttled(key, follower)` is True only when the rate is set, the topic's
  throttled-replicas config names (partition, this broker) (or is `*`), and `follower` is not
  in the partition's ISR as this broker's image has it.
* `exceeded()` / `record(n)` / `wait_s()` are the quota's token bucket (`jbod_core.token_bucket`)
  on the injected clock; the rate is re-read from the broker's configs (dynamic over static)
  whenever this broker's image shows a change of them, so a change applies from the first fetch
  after the broker replayed it (`kafka-reassign-partitions.sh --throttle` sets the rates
  milliseconds before the reassignment); no rate set: nothing is throttled and the bucket is
  dropped.
* `throttled_bytes` counts the bytes recorded (the `jbod_replication_throttled_bytes_total`
  metric); `skipped` counts the times a throttled partition was left out because the quota was
  exceeded.
"""

from __future__ import annotations

from typing import Final

from jbod_agent import dynamic_configs
from jbod_agent.ports import Clock
from jbod_agent.state import AgentState
from jbod_core import topic_configs
from jbod_core.image import PartitionKey
from jbod_core.token_bucket import TokenBucket

_PARSED_LIMIT: Final = 1024


class ReplicationQuota:
    def __init__(self, state: AgentState, *, clock: Clock, rate_key: str, replicas_key: str) -> None:
        self.state = state
        self.clock = clock
        self.rate_key = rate_key
        self.replicas_key = replicas_key
        self.bucket: TokenBucket | None = None
        self.throttled_bytes = 0
        self.skipped = 0
        self._seen: tuple[object, object, object] = (None, None, None)
        self._parsed: dict[str, topic_configs.ThrottledReplicas] = {}

    @property
    def rate(self) -> float | None:
        """The bytes per second applied now (None: unthrottled)."""
        self._refresh()
        return None if self.bucket is None else self.bucket.rate

    def _refresh(self) -> None:
        # The image replaces a resource's configs mapping on every change (never mutates it), so
        # a change shows as another object: the rate applies from the first fetch after it.
        image = self.state.image
        seen = (image, image.broker_configs.get(str(self.state.node_id)), image.broker_configs.get(""))
        if all(a is b for a, b in zip(seen, self._seen, strict=True)):
            return
        self._seen = seen
        now = self.clock.monotonic()
        rate = dynamic_configs.rate(self.state.config, self.state.image, self.rate_key)
        if rate is None or rate <= 0:
            # 0 in Kafka throttles everything to a stop; here 0 is taken as the smallest rate.
            self.bucket = None if rate is None else self._bucket(1, now)
        else:
            self.bucket = self._bucket(rate, now)

    def _bucket(self, rate: float, now: float) -> TokenBucket:
        if self.bucket is None:
            return TokenBucket.full(rate, now=now)
        if self.bucket.rate != rate:
            self.bucket.set_rate(rate, now=now)
        return self.bucket

    def _replicas(self, value: str | None) -> topic_configs.ThrottledReplicas:
        if value is None:
            return topic_configs.NOT_THROTTLED
        parsed = self._parsed.get(value)
        if parsed is None:
            if len(self._parsed) >= _PARSED_LIMIT:
                self._parsed.clear()
            parsed = self._parsed[value] = topic_configs.throttled_replicas(value)
        return parsed

    def throttled(self, key: PartitionKey, follower: int) -> bool:
        """Whether bytes of `key` fetched by (or for) `follower` count against this quota."""
        self._refresh()
        if self.bucket is None:
            return False
        image = self.state.image
        topic = image.topics.get(key[0])
        if topic is None:
            return False
        if not self._replicas(topic.configs.get(self.replicas_key)).covers(key[1], self.state.node_id):
            return False
        part = topic.partitions.get(key[1])
        return part is not None and follower not in part.isr

    def exceeded(self) -> bool:
        return self.bucket is not None and self.bucket.exceeded(self.clock.monotonic())

    def record(self, n: int) -> None:
        if self.bucket is not None and n > 0:
            self.bucket.record(n, self.clock.monotonic())
            self.throttled_bytes += n

    def wait_s(self) -> float:
        return 0.0 if self.bucket is None else self.bucket.wait_s(self.clock.monotonic())
