"""Coordinators: the state a broker keeps for Kafka's clients in its internal topics while it
leads their partitions (Kafka's `kafka.coordinator`); today the consumer groups.

Guarantees:
* A coordinator follows leadership: it serves the groups of the __consumer_offsets partitions
  this broker leads, loaded from their logs, and drops them when it stops leading.
* Persistence first: what a decision writes is appended through the leader's produce path
  (`partitions.produce`, acks=-1) before the decision takes effect or is answered.
* The decisions are `jbod_core.groups`'; a coordinator is their I/O. It builds on `partitions`,
  `storage` and the agent's shared modules only; the Kafka listener's `kafka.group_api` is its
  wire side.

Modules:
* `group_coordinator` — the consumer groups of the __consumer_offsets partitions led here.
"""
