"""The Kafka listeners: where Kafka's clients (producers, consumers, admin tools, other brokers'
fetchers) reach a broker (Kafka's `SocketServer` and `KafkaApis`).

Guarantees:
* The network side and what a request means are apart: `listener` frames, limits, gates on
  authentication and answers in order; the handlers decide, one module per group of APIs.
* Every handler reads the agent through `context` and asks its authorizer (`context.allows`);
  what only the active controller may decide is forwarded to it (`forwarding`, KIP-590).
* The listener sits over the rest of the agent and is imported only by the entry points.

Modules:
* `server` — the listeners wired to the agent at start, with the group coordinator's timer.
* `listener` — one asyncio server per listener: framing, limits, authentication gating, order.
* `apis` — the table of APIs, ApiVersions and the SASL exchange.
* `auth` — SCRAM and PLAIN over the image's users, and the reserved users.
* `context` — what every handler reads of the agent, and the authorizer.
* `metadata_api` — Metadata and DescribeCluster from the broker's image.
* `topic_creator` — the topics a Metadata request creates, forwarded to the controller.
* `produce_api` — Produce: checked, appended by the leader, acknowledged as acks asks.
* `fetch_api` — Fetch (consumers' and followers'), ListOffsets, OffsetForLeaderEpoch.
* `delete_records_api` — DeleteRecords: the leader moves its log start.
* `fetch_sessions` — consumers' incremental fetch sessions (KIP-227).
* `admin_api` — topics, partitions, configs, SCRAM users, producer ids.
* `acl_api` — DescribeAcls from the image; CreateAcls and DeleteAcls forwarded.
* `reassign_api` — partition reassignment (KIP-455).
* `log_dirs_api` — DescribeLogDirs and AlterReplicaLogDirs (KIP-113).
* `group_api` — the consumer-group APIs, over the group coordinator.
* `forwarding` — what a broker asks the active controller for its clients.
"""
