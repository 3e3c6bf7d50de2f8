#!/usr/bin/env bash
# The e2e scenarios of tests/e2e/test_operator.py on kind, for users who have Docker.
# NOT run in this project's CI (its machines have no Docker engine; CI runs the same scenarios on a
# control plane built from Go modules, see e2e/README.md).
#
#   e2e/kind/scenarios.sh up        # kind cluster, image build + load, helm install
#   e2e/kind/scenarios.sh cluster   # apply a JbodCluster and wait for 3 Ready brokers
#   e2e/kind/scenarios.sh detach    # detach a leader's volume (umount inside the pod) and watch
#                                   # the operator replace it (diskFailurePolicy: Automatic)
#   e2e/kind/scenarios.sh remove-disk   # removing a disk that holds replicas is refused
#   e2e/kind/scenarios.sh scale     # scale to 4 brokers and back
#   e2e/kind/scenarios.sh down
set -euo pipefail
cd "$(dirname "$0")/../.."

KIND_CLUSTER=${KIND_CLUSTER:-jbod}
NS=${NS:-jbod-e2e}
IMAGE=${IMAGE:-jbod:dev}
CLUSTER=demo

say() { printf '\n== %s\n' "$*"; }

cluster_yaml() {
  local brokers=${1:-3} disks=${2:-"d0 d1"}
  cat <<YAML
apiVersion: jbod.dev/v1alpha1
kind: JbodCluster
metadata: {name: ${CLUSTER}, namespace: ${NS}}
spec:
  brokers: ${brokers}
  image: ${IMAGE}
  imagePullPolicy: Never
  disks:
$(for d in ${disks}; do echo "    - {name: ${d}, size: 1Gi, storageClass: standard}"; done)
  metadataDisk: {size: 256Mi, storageClass: standard}
  controller: {storage: {size: 256Mi, storageClass: standard}}
  config: {heartbeatIntervalMs: 500, sessionTimeoutMs: 4000, logDirProbeIntervalMs: 250,
           minInsyncReplicas: 2, defaultReplicationFactor: 3}
  diskFailurePolicy: Automatic
YAML
}

admin_token() { kubectl -n "$NS" get secret "${CLUSTER}-tokens" -o jsonpath='{.data.admin-token}' | base64 -d; }

with_controller() {  # run jbodctl against the controller through a port-forward
  kubectl -n "$NS" port-forward "svc/${CLUSTER}-controller" 19093:9093 >/dev/null 2>&1 &
  local pf=$!
  sleep 2
  local token_file
  token_file=$(mktemp)
  admin_token >"$token_file"
  jbodctl --controller http://127.0.0.1:19093 --token-file "$token_file" "$@" || true
  rm -f "$token_file"
  kill "$pf"
}

case "${1:-}" in
  up)
    say "kind cluster ${KIND_CLUSTER}"
    kind create cluster --name "$KIND_CLUSTER" --config e2e/kind/kind-config.yaml
    say "image ${IMAGE}"
    docker build -t "$IMAGE" .
    kind load docker-image "$IMAGE" --name "$KIND_CLUSTER"
    say "helm install"
    helm install jbod charts/jbod --namespace jbod-system --create-namespace \
      --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never --wait
    ;;
  cluster)
    kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
    cluster_yaml 3 | kubectl apply -f -
    say "waiting for 3 Ready brokers (each turns Ready only once the controller unfenced it)"
    for i in 0 1 2; do
      until kubectl -n "$NS" get pod "${CLUSTER}-broker-$i" >/dev/null 2>&1; do sleep 2; done
      kubectl -n "$NS" wait --for=condition=Ready "pod/${CLUSTER}-broker-$i" --timeout=300s
    done
    kubectl -n "$NS" get jbodclusters,jbodbrokers
    with_controller topics create orders --partitions 6
    ;;
  detach)
    pod=${CLUSTER}-broker-0
    say "detaching disk d0 of ${pod}: umount inside the pod's mount namespace, on its kind node"
    node=$(kubectl -n "$NS" get pod "$pod" -o jsonpath='{.spec.nodeName}')
    cid=$(kubectl -n "$NS" get pod "$pod" -o jsonpath='{.status.containerStatuses[0].containerID}' | sed 's#.*://##')
    pid=$(docker exec "$node" crictl inspect --output go-template --template '{{.info.pid}}' "$cid")
    docker exec "$node" nsenter -t "$pid" -m umount -l /var/lib/jbod/disks/d0
    say "the dir goes Offline, leadership moves, the operator replaces the volume"
    for _ in $(seq 1 60); do
      kubectl -n "$NS" get jbodbroker "$pod" \
        -o jsonpath='{range .status.logDirs[*]}{.name}={.state} {.pvc} {.directoryId}{"\n"}{end}'
      sleep 5
    done
    kubectl -n "$NS" get events --field-selector involvedObject.name="$pod"
    ;;
  remove-disk)
    say "removing d1, which holds replicas: refused, d1 stays Draining"
    cluster_yaml 3 "d0" | kubectl apply -f -
    sleep 10
    kubectl -n "$NS" get jbodcluster "$CLUSTER" -o jsonpath='{.status.conditions[?(@.type=="Progressing")].message}{"\n"}'
    cluster_yaml 3 | kubectl apply -f -
    ;;
  scale)
    cluster_yaml 4 | kubectl apply -f -
    kubectl -n "$NS" wait --for=condition=Ready "pod/${CLUSTER}-broker-3" --timeout=300s
    cluster_yaml 3 | kubectl apply -f -
    sleep 15
    kubectl -n "$NS" get jbodbrokers
    ;;
  down)
    kind delete cluster --name "$KIND_CLUSTER"
    ;;
  *)
    sed -n '2,16p' "$0"
    exit 2
    ;;
esac
