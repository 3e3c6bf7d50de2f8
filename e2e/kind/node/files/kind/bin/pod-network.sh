#!/bin/bash
# The pod network across nodes, as kindnetd does it, without an image: once the controller manager
# has given this node its pod subnet (spec.podCIDR, a /24 of @POD_SUBNET@), write the CNI config
# for it (the kubelet reports the node Ready only then, so no pod starts before), and keep a
# route to every other node's pod subnet through that node's address on the kind network.
set -o nounset -o pipefail
mkdir -p /etc/cni/net.d
kubeconfig=/etc/kubernetes/kubelet.conf
conf=/etc/cni/net.d/10-jbod-ptp.conflist
node=$(hostname)
query='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}'
while true; do
  nodes=""
  if [[ -s $kubeconfig ]]; then
    nodes=$(kubectl --kubeconfig "$kubeconfig" get nodes -o jsonpath="$query" 2>/dev/null) || nodes=""
  fi
  while read -r name cidr address; do
    [[ -n "${cidr:-}" && -n "${address:-}" ]] || continue
    if [[ "$name" == "$node" ]]; then
      if [[ ! -f $conf ]]; then
        sed "s#NODE_POD_SUBNET#$cidr#" /kind/cni-ptp.conflist >"$conf.tmp" && mv "$conf.tmp" "$conf"
        echo "pod subnet $cidr"
      fi
    elif [[ "$(ip -4 route show "$cidr")" != *"via $address "* ]]; then
      ip route replace "$cidr" via "$address" && echo "route $cidr via $address ($name)"
    fi
  done <<<"$nodes"
  # Quick until this node has its config, then only to notice nodes that join later.
  if [[ -f $conf ]]; then sleep 10; else sleep 1; fi
done
