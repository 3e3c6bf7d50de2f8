"""The partitions this broker hosts, and the jobs done on them as leader (Kafka's
`ReplicaManager` and `Partition`, without the fetchers).

Guarantees:
* `replica_manager.ReplicaManager` is the one owner of the hosted-partition set and its roles
  (from the metadata image); every other part works on the `HostedPartition`s it finds there,
  and re-checks after an await that the partition is still hosted as it was.
* A partition is served only while its replica sits in an online dir, and only by its leader; an
  I/O error from a log takes the dir offline through `ReplicaManager.storage_error`.
* Partitions know no followers' fetch loops, moves, controller calls or Kafka listener: they
  import only `storage` and the agent's shared modules; `replication` and the listeners build on
  them.

Modules:
* `replica_manager` — the hosted partitions and their roles; `HostedPartition`, the high watermark.
* `produce` — produce on a leader: admission, the idempotent producers' verdict, append, acks.
* `client_fetch` — the consumers' fetches waiting on their leaders for data.
* `log_upkeep` — the hosted logs' flush, retention and producer snapshots in the background.
"""
