"""The broker's storage: what it keeps on disk in its log dirs, and the only code that reads or
writes those files (Kafka's `kafka.log` and its storage tool).

Guarantees:
* Every file a broker keeps for its log dirs and replicas is read and written here: the dir's
  `meta.properties`, each replica dir's `partition.metadata`, segments and indexes,
  `leader-epoch-checkpoint` and producer snapshot. Each file format has one module.
* Storage knows no roles, replication, controller or Kafka listener: it imports no other module
  of `jbod_agent` (a `lint-imports` contract), and its callers see a replica's log only through
  `partition_log.PartitionLog`.

Modules:
* `storage` — log dir identity: `jbod-storage format` and the startup load (`meta.properties`).
* `replicas` — the replica dirs of a log dir: `partition.metadata`, scan, marked deletion.
* `partition_log` — one replica's log: appends, reads, truncation, retention, flush.
* `log_segments` — one segment's `.log` and `.index` files: format, sparse index, recovery.
* `epoch_cache` — the leader-epoch cache and its checkpoint file, with its repair.
* `producers` — the idempotent producers' state of a log, rebuilt from it and its snapshot.
* `log_format` — which record format a replica holds; the conversion of legacy frames.
* `legacy_batch` — jbod's own record frames from before RecordBatch v2 (read only).
"""
