#!/bin/bash
set -o errexit -o nounset -o pipefail
for _ in $(seq 1 60); do
  ctr version >/dev/null 2>&1 && break
  sleep 0.5
done
for archive in /kind/images/*.tar; do
  ctr --namespace k8s.io images import --all-platforms --no-unpack "$archive"
done
touch /var/lib/kind-images-imported
