"""Replication: copies of a partition kept in step, between brokers and between the dirs of one
broker (Kafka's fetchers, `ReplicaFetcherThread` and `ReplicaAlterLogDirsThread`, and the ISR).

Guarantees:
* A follower never keeps records its leader's history does not hold: on a divergence it
  truncates first (`divergence`, the one place both sides apply the leader-epoch rules) and
  appends only what continues its log, at the leader and epoch it fetched from.
* Replication between brokers is Kafka's Fetch with a replica id on the inter-broker listener;
  `replica_wire` is the one module that knows the messages' shapes.
* Throttles hold back only replicas out of the ISR; produce traffic and in-sync replication never
  wait on them (`replication_quota`).
* Replication works on the hosted partitions of `partitions` and the logs of `storage`, and
  reaches the controller only through the agent's ports: it imports no lifecycle, coordinator or
  Kafka listener module.

Modules:
* `fetcher` — the follower side: one long-polling fetch loop per leader, with its fetch session.
* `replica_fetch` — the leader side of follower fetches, with incremental fetch sessions.
* `replica_wire` — follower fetches and their answers on Kafka's wire, both sides.
* `peer_link` — a broker's own Kafka connection to another broker's inter-broker listener.
* `divergence` — leader-epoch divergence: the leader's check and the follower's truncation.
* `isr_upkeep` — a leader's ISR shrink and expand through AlterPartition.
* `replication_quota` — the leader- and follower-side replication throttles (issue 24).
* `mover` — intra-broker moves: a future replica copied, throttled, switched after the controller.
"""
