"""End-to-end harness: a real Kubernetes control plane (built from Go modules) plus a local kubelet.

* `e2e.toolchain` builds and caches etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
  kubectl, kwok, kwokctl and helm from the Go module proxy only.
* `e2e.cluster` starts a kwokctl "binary runtime" cluster on 127.0.0.1 from those binaries, with
  fake nodes whose pods are left to `e2e.kubelet`, and a local-volume provisioner
  (`e2e.provisioner`) that backs every PVC with a real loop-mounted ext4 image.
* `e2e.kubelet` runs the pods bound to the fake nodes as local processes, each pod in its own
  mount namespace (`e2e.podshim`), with ports remapped through `e2e.endpoints`.
* `e2e.fixtures` holds pytest fixtures built on those.
"""
