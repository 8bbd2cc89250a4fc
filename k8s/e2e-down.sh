#!/usr/bin/env bash
# Stop the KubeRay operator and delete the kwok cluster (its etcd data goes with it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
pidfile="${STATE_DIR}/ray-operator.pid"
if [[ -f "$pidfile" ]] && grep -q ray-operator "/proc/$(cat "$pidfile")/cmdline" 2>/dev/null; then
  kill "$(cat "$pidfile")"
  for _ in $(seq 20); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.5; done
fi
rm -f "$pidfile"
if [[ -x "${KWOK_BIN}/kwokctl" && -d "$STATE_DIR" ]]; then
  KWOK_KUBECTL_BINARY="${KUBECTL_BIN}/kubectl" "${KWOK_BIN}/kwokctl" --name "$DAY0_CLUSTER" delete cluster \
    >"${KWOK_WORKDIR}/delete-${DAY0_CLUSTER}.log" 2>&1 || { cat "${KWOK_WORKDIR}/delete-${DAY0_CLUSTER}.log" >&2; exit 1; }
fi
echo "[k8s/e2e-down] cluster ${DAY0_CLUSTER} deleted" >&2
