"""Every kopf handler of the operator, registered by importing this module: one module per
resource kind, each handler thin over the pure decisions (`plan`, `drain`, `health`,
`disk_growth`, `rotation`, `topic_plan`, ...) and acting through `kube`.

* `indexes`: kopf's settings and the indexes of the actual state (pods, claims, PVs,
  VolumeAttachments, JbodClusters, JbodBrokers).
* `cluster_handlers`: `JbodCluster` (with `cluster_tls` for its CA and certificates and
  `cluster_drains` for its drains); `broker_handlers`: `JbodBroker`; `user_handlers`: `JbodUser`;
  `topic_handlers`: `JbodTopic`; `lag_handlers`: consumer lag.
* `cluster_access`: what they share (settings, the polled views, credentials, trust files).
"""

from __future__ import annotations

from jbod_operator import (  # noqa: F401  importing a handler module registers its handlers with kopf
    broker_handlers,
    cluster_handlers,
    indexes,
    lag_handlers,
    topic_handlers,
    user_handlers,
)
