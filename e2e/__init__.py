"""End-to-end infrastructure: real Kubernetes on kind, everything built from registries this project reaches.

* `e2e.toolchain` builds and caches, from the Go module proxy only, the Kubernetes binaries
  (control plane, kubelet, kubeadm, kube-proxy, kubectl), etcd, containerd, crictl, CoreDNS,
  local-path-provisioner, kind and helm.
* `e2e.kind` makes the kind node image and the project image offline, creates the kind cluster,
  installs the chart and detaches volumes; `python -m e2e.kind` is its command line.
* `e2e.wait` polls with a deadline.
"""
