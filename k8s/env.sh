# Shared paths of the day0 test control plane. Sourced by build.sh, e2e-up.sh, e2e-down.sh.
# Binaries live outside the repo, one folder per component and version, so a version bump
# rebuilds only that component and `.ci/run` reuses everything else.
K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${K8S_DIR}/versions.env"
DAY0_CACHE="${DAY0_CACHE:-${HOME}/.cache/day0}"
CACHE_ROOT="${DAY0_CACHE}/k8s"
KUBE_BIN="${CACHE_ROOT}/kubernetes-${KUBE_VERSION}/bin"
ETCD_BIN="${CACHE_ROOT}/etcd-${ETCD_VERSION}/bin"
KWOK_BIN="${CACHE_ROOT}/kwok-${KWOK_VERSION}/bin"
KUBERAY_BIN="${CACHE_ROOT}/kuberay-${KUBERAY_VERSION}/bin"
HELM_BIN="${CACHE_ROOT}/helm-${HELM_VERSION}/bin"
KUBECTL_BIN="${CACHE_ROOT}/kubectl-${KUBECTL_VERSION}/bin"
# Cluster state (kwokctl workdir, operator log, kubeconfig) is per user, not per repo checkout.
DAY0_CLUSTER="${DAY0_CLUSTER:-day0-e2e}"
KWOK_WORKDIR="${KWOK_WORKDIR:-${DAY0_CACHE}/kwok-workdir}"
STATE_DIR="${KWOK_WORKDIR}/clusters/${DAY0_CLUSTER}"
KUBECONFIG_PATH="${STATE_DIR}/kubeconfig.yaml"
export KWOK_WORKDIR
