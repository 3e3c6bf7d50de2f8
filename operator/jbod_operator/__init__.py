"""The kopf operator for JBOD brokers: `JbodCluster` / `JbodBroker` custom resources (group `jbod.dev`).

Pure parts (no Kubernetes or HTTP I/O): `model` (spec parsing), `names`, `builders` (manifests),
`status` (per-disk health and decisions). I/O at the edges: `views` (controller and broker HTTP),
`kube` (API server calls), `handlers` (kopf), `cli` (`jbod-operator`).
"""
