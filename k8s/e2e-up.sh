#!/usr/bin/env bash
# Bring up the day0 test control plane (idempotent: reuses a healthy cluster and operator).
#   k8s/e2e-up.sh && export KUBECONFIG=$(k8s/e2e-up.sh --kubeconfig)
# kwokctl runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok as local
# processes (--runtime binary); the KubeRay operator runs beside them; fake GPU node pools are
# kwok nodes. Nothing is downloaded: every binary comes from k8s/build.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
if [[ "${1:-}" == "--kubeconfig" ]]; then echo "$KUBECONFIG_PATH"; exit; fi
log() { printf '[k8s/e2e-up] %s\n' "$*" >&2; }

"${K8S_DIR}/build.sh"
export KWOK_KUBECTL_BINARY="${KUBECTL_BIN}/kubectl"  # kwokctl has no flag for it; unset, it downloads
KWOKCTL=("${KWOK_BIN}/kwokctl" -c "${K8S_DIR}/kwokctl.yaml" --name "$DAY0_CLUSTER")
kubectl() { "${KUBECTL_BIN}/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }
# Healthy: the API server answers and every component kwokctl started is still alive.
alive() { local f; for f in "${STATE_DIR}"/pids/*.pid; do kill -0 "$(cat "$f")" 2>/dev/null || return 1; done; }
healthy() { [[ -f "$KUBECONFIG_PATH" ]] && alive && kubectl get --raw /readyz >/dev/null 2>&1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

if ! healthy; then
  if [[ -d "$STATE_DIR" ]]; then
    log "restarting cluster ${DAY0_CLUSTER}"
    "${KWOKCTL[@]}" stop cluster >&2 || true
    "${KWOKCTL[@]}" start cluster --wait 3m >&2 || { "${KWOKCTL[@]}" delete cluster >&2 || true; }
  fi
  if ! healthy; then
    log "creating cluster ${DAY0_CLUSTER} (kube ${KUBE_VERSION}, kwok ${KWOK_VERSION}, etcd ${ETCD_VERSION})"
    KWOK_KUBE_VERSION="${KUBE_VERSION}" "${KWOKCTL[@]}" create cluster --runtime binary \
      --kube-apiserver-binary "${KUBE_BIN}/kube-apiserver" \
      --kube-controller-manager-binary "${KUBE_BIN}/kube-controller-manager" \
      --kube-scheduler-binary "${KUBE_BIN}/kube-scheduler" \
      --kwok-controller-binary "${KWOK_BIN}/kwok" \
      --etcd-binary "${ETCD_BIN}/etcd" \
      --disable-qps-limits --wait 3m >&2
  fi
fi

log "KubeRay ${KUBERAY_VERSION} CRDs (server-side apply from the module cache)"
kubectl apply --server-side --force-conflicts -f "$("${K8S_DIR}/build.sh" --crd-dir)" >/dev/null
kubectl wait --for condition=established --timeout=60s crd/rayclusters.ray.io crd/rayjobs.ray.io >/dev/null
kubectl apply --server-side -f "${K8S_DIR}/manifests/" >/dev/null

# Base node pools: CPU nodes for Ray heads, a fixed and an elastic GPU pool. Tests add their own.
nodes() { python3 "${K8S_DIR}/fake_nodes.py" "$@" | kubectl apply --server-side -f - >/dev/null; }
nodes --pool cpu --count 2 --cpus 32 --memory-gib 128 --label day0.io/role=cpu
nodes --pool gpu-fixed --count 4 --gpus 8 --taint nvidia.com/gpu=present:NoSchedule
nodes --pool gpu-elastic --count 2 --gpus 8 --taint nvidia.com/gpu=present:NoSchedule --taint day0.io/elastic=true:NoSchedule

pidfile="${STATE_DIR}/ray-operator.pid"
if ! { [[ -f "$pidfile" ]] && grep -q ray-operator "/proc/$(cat "$pidfile")/cmdline" 2>/dev/null; }; then
  probe=$(free_port)
  log "starting the KubeRay operator (health on 127.0.0.1:${probe})"
  KUBECONFIG="$KUBECONFIG_PATH" setsid nohup "${KUBERAY_BIN}/ray-operator" \
    --metrics-addr "127.0.0.1:$(free_port)" --health-probe-bind-address "127.0.0.1:${probe}" \
    --enable-leader-election=false --qps 500 --burst 1000 --reconcile-concurrency 4 \
    --log-stdout-encoder console >"${STATE_DIR}/ray-operator.log" 2>&1 </dev/null &
  echo $! >"$pidfile"; echo "$probe" >"${STATE_DIR}/ray-operator.probe"
  for _ in $(seq 60); do
    curl -fs "127.0.0.1:${probe}/readyz" >/dev/null 2>&1 && break
    kill -0 "$(cat "$pidfile")" 2>/dev/null || { tail -20 "${STATE_DIR}/ray-operator.log" >&2; exit 1; }
    sleep 1
  done
fi
log "ready: export KUBECONFIG=${KUBECONFIG_PATH}"
