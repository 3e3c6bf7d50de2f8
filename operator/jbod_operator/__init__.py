"""The kopf operator for JBOD brokers: `JbodCluster` / `JbodBroker` custom resources (group `jbod.dev`).

Pure parts (no Kubernetes or HTTP I/O): `model` (spec parsing), `names`, `builders` (manifests),
`plan` (what a cluster should consist of, and its status), `health` (per-disk health of a broker
and what to do about it). I/O at the edges: `views` (controller and broker HTTP), `kube` (API
server calls), `handlers` (kopf), `metrics` (Prometheus), `cli` (`jbod-operator`).
"""
