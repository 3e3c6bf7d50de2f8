"""The broker agent (`jbod-agent`, `jbod-storage`): one JBOD broker's process, in subpackages by
concern as Kafka's broker is split.

Guarantees:
* The subpackages are layered, each importing only those below it (a `lint-imports` contract;
  `docs/architecture.md` draws it): the entry points over the Kafka listener, over the lifecycle
  and the coordinators, over replication, over the partitions, over disk health, over the shared
  modules, over storage. No two of them import each other.
* Callers import modules, not names re-exported by a package: `from jbod_agent.storage import
  partition_log`.

Subpackages, top down:
* `kafka` — the Kafka listeners: framing, authentication, one module per group of APIs.
* `lifecycle` — the agent's loop, its controller calls, metadata, reconciliation, HTTP API.
* `coordinators` — the consumer groups of the __consumer_offsets partitions led here.
* `replication` — followers' fetches both sides, the ISR, throttles, intra-broker moves.
* `partitions` — the hosted partitions and their roles; produce, consumers' waits, log upkeep.
* `disks` — disk health: the probe, and the probe loops where a dir goes full or offline.
* `storage` — the formats of the log dirs' files and each replica's log.

Modules at the root:
* `entry`, `cli` and `storage_cli` — the console scripts `jbod-agent` (lean imports, then `cli`) and
  `jbod-storage`.
* `config` — `server.properties` with Kafka's key names, parsed into a frozen `BrokerConfig`.
* `dynamic_configs` — what the broker applies of the dynamic broker configs over its static ones.
* `state` — the agent's one state: its dirs and their health, replicas, image, registration.
* `placement` — the dirs' health and the pure rules placing a replica in a dir (KIP-858).
* `ports` — the narrow ports between the agent's loop and its collaborators, and the clock.
"""
