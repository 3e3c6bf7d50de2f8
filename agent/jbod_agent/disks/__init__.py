"""Disk health: whether each log dir can still be used, found out by probing it (KIP-112's failed
log dirs; Kafka's `LogDirFailureChannel` and its log dir checks).

Guarantees:
* One rule classifies an I/O error, whether a probe or real work (an append, a read) met it:
  ENOSPC / EDQUOT is a full dir, anything else a failed disk (`probe.classify_io_error`).
* A dir's health changes only here (`dir_health`): the rest of the agent reports its I/O errors
  through the `ports.DirFailures` port and reads the health from the state.
* Disks know no partitions, replication, controller or Kafka listener: they import only the
  agent's shared modules (`state`, `ports`, `placement`).

Modules:
* `dir_health` — a running broker's probe loops; a dir goes full, back online, or offline.
* `probe` — one synchronous probe of a log dir, and the classification of its outcome.
"""
