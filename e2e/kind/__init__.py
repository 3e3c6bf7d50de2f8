"""The e2e tier on kind: a real Kubernetes cluster in Docker, built and run without any registry.

* `e2e.kind.docker` finds or starts a Docker engine (its data root in the e2e cache).
* `e2e.kind.images` builds the Debian base, the kind node image (from the e2e toolchain's Go-built
  binaries and Debian packages, every node image preloaded) and the project image.
* `e2e.kind.cluster` creates the kind cluster, loads the project image, installs the chart with helm
  and detaches a broker's volume the way docs/operations.md tells users to.
* `python -m e2e.kind` is the command line over those, used by users, `make`, and the tests alike.
"""
