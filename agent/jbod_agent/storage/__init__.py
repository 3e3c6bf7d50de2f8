"""The broker's storage: the formats of what it keeps in its log dirs, and each replica's log
(Kafka's `kafka.log`, and its storage tool).

Guarantees:
* Each on-disk format of a log dir has one module here (below). A replica's segments, indexes,
  leader-epoch checkpoint and producer snapshot are read and written only through them; callers
  see a replica's log through `partition_log.PartitionLog`, which composes the local log and the
  epoch cache.
* Storage knows no roles, replication, controller or Kafka listener: it imports no other module
  of `jbod_agent` (a `lint-imports` contract).

Modules:
* `storage` — log dir identity: `jbod-storage format` and the startup load (`meta.properties`).
* `replicas` — the replica dirs of a log dir: `partition.metadata`, scan, marked deletion.
* `partition_log` — one replica's log: appends, reads, truncation, retention, flush.
* `local_log` — its segments as one log: roll, append, read, truncation, log start, recovery.
* `log_segments` — one segment's `.log` and `.index` files: format, sparse index, recovery.
* `epoch_cache` — the leader-epoch cache and its checkpoint file, with its repair.
* `producers` — the producer state snapshot of a log (the state itself is `partition_log`'s).
* `log_format` — which record format a replica holds; the conversion of legacy frames.
* `legacy_batch` — jbod's own record frames from before RecordBatch v2 (read only).
"""
