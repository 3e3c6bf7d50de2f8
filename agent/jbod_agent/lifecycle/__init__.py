"""The broker's life: the agent's loop (observe → decide → act), its calls to the controller, the
metadata it follows and the replicas it reconciles with it, and what it shows of itself (Kafka's
`BrokerServer`, `BrokerLifecycleManager`, `BrokerMetadataListener`).

Guarantees:
* One state owner: `agent.Agent` alone owns the `state.AgentState` on the event loop and wires
  the collaborators of every other subpackage, which get the state and narrow ports, never it.
* One decision: what the broker does next (shut down, register, become ready, heartbeat, send
  placements) is `decide.decide`, a pure function of one snapshot; the loop carries it out, and
  its controller calls run as single-flight tasks the loop never awaits.
* The replicas on this broker's disks follow the metadata image (`metadata_follower` replays it,
  `reconciler` applies the replica table of `placement` to what changed); the dirs of replicas
  reach the controller through one queue (`assignment_queue`).
* Lifecycle is the top of the agent's own work: it may import every other subpackage but the
  Kafka listener, and only the listener and the entry points (`cli`) import it.

Modules:
* `agent` — the loop: observe, decide, act; it starts and stops the broker's collaborators.
* `decide` — the agent's decisions (KIP-112 / KIP-858 on the broker side) as one pure function.
* `lifecycle` — registration, heartbeats, placements and the controlled shutdown, replies folded in.
* `controller_port` — the controller link behind `ports.ControllerCalls`; its errors made the port's.
* `assignment_queue` — the placement queue: replica → dir assignments waiting for the controller.
* `metadata_follower` — the controller's metadata log followed into the broker's image.
* `metadata_cache` — the image kept in `metadata.log.dir`, so a restart fetches only the tail.
* `reconciler` — the replicas on disk made to match the image: scan, create, place, retire.
* `http_api` — the broker's own HTTP API: log dirs and moves, metadata reads, probes, metrics.
* `views` — read-only views of the agent's state for the HTTP API.
* `telemetry` — one JSON line of disk telemetry per log dir per interval, for the pipeline.
"""
