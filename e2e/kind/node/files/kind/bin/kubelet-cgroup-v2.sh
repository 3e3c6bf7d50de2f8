#!/bin/bash
# cgroup v2: the kubelet's cgroup root /kubelet (and /kubelet.slice) with every controller enabled.
set -o errexit -o nounset -o pipefail
enable() { sed -e 's/ / +/g' -e 's/^/+/' <"/sys/fs/cgroup/$1/cgroup.controllers" >"/sys/fs/cgroup/$1/cgroup.subtree_control"; }
enable /
for group in kubelet kubelet.slice; do
  mkdir -p "/sys/fs/cgroup/$group"
  enable "/$group"
done
