#!/usr/bin/env bash
# Build and smoke-test the day0 container image (k8s/image/Dockerfile) with podman: no Docker
# engine, and no container registry needed. See docs/operations/image.md.
#   scripts/image.sh build   # `make image`: the image IMAGE (default day0:<version from pyproject.toml>)
#   scripts/image.sh test    # `make image-test`: its checks as uid 10001 on a read-only root filesystem
#   scripts/image.sh base    # only the debootstrap base (what `build` uses when BASE is empty)
#   scripts/image.sh flags   # print the podman flags chosen for this machine
# Environment:
#   IMAGE          image name (default day0:<version>; podman stores it as localhost/day0:<version>)
#   BASE           base image (e.g. python:3.11-slim-bookworm, pulled by podman); empty: build one
#                  from Debian's packages with debootstrap, cached in $DAY0_CACHE/image
#   DEBIAN_SUITE   suite of that base (default bookworm: its python3 is 3.11)
#   DEBIAN_MIRROR  mirror debootstrap fetches from (default: debootstrap's own default)
#   DAY0_CACHE     cache root (default ~/.cache/day0)
#   DAY0_PODMAN_FLAGS, DAY0_PODMAN_RUN_FLAGS
#                  podman's global flags and `podman run`'s extra flags; set either to skip the
#                  probe that picks them (e.g. DAY0_PODMAN_FLAGS="--runtime runc")
# Installs podman, runc and (for the base) debootstrap from Debian's packages when missing (root or
# passwordless sudo). Build steps use the host's network (`--network host`: no CNI/netavark needed);
# the host's CA bundle goes in as a build secret, so pip trusts a TLS-intercepting proxy without the
# bundle entering a layer.
set -euo pipefail

# Bump when the base's contents change (package list, cleanup): the cached base is keyed by it.
SCRIPT_VERSION=1
BASE_PACKAGES=python3,python3-venv,ca-certificates,wget

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${DAY0_CACHE:-$HOME/.cache/day0}/image
SUITE=${DEBIAN_SUITE:-bookworm}
DOCKERFILE=$ROOT/k8s/image/Dockerfile

log() { printf '[image] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

version() {
  python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' \
    "$ROOT/pyproject.toml" 2>/dev/null \
    || sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/pyproject.toml" | head -n1
}
VERSION=$(version)
IMAGE=${IMAGE:-day0:$VERSION}

# --- tools -----------------------------------------------------------------------------------
apt_install() {  # apt_install PACKAGE...: Debian's packages, as root or through passwordless sudo
  local sudo=()
  command -v apt-get >/dev/null || die "no apt-get here: install $* yourself"
  if [[ "$(id -u)" != 0 ]]; then
    if ! command -v sudo >/dev/null || ! sudo -n true 2>/dev/null; then
      die "not root and no passwordless sudo: run 'apt-get install $*' as root"
    fi
    sudo=(sudo -n)
  fi
  log "installing $* (Debian's packages)"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_tools() {  # ensure_tools COMMAND...: each command's package of the same name
  local missing=() c
  for c in "$@"; do command -v "$c" >/dev/null || missing+=("$c"); done
  if ((${#missing[@]})); then apt_install "${missing[@]}"; fi
}

# --- podman flags for this machine -----------------------------------------------------------
# Defaults first; then what a VM with hybrid cgroups (v1 controllers, an empty v2 hierarchy) and no
# CAP_SYS_RESOURCE needs: crun refuses hybrid cgroups, so runc; podman asks for rlimits above the
# host's hard limits (nofile 1048576), so the host's own (nproc at most 32768, conmon's limit there).
PODMAN=(podman)
RUN_FLAGS=()
pick_flags() {  # pick_flags IMAGE: the first flag set under which `podman run IMAGE true` works
  if [[ -n "${DAY0_PODMAN_FLAGS:-}${DAY0_PODMAN_RUN_FLAGS:-}" ]]; then
    local g r
    read -r -a g <<<"${DAY0_PODMAN_FLAGS:-}"
    read -r -a r <<<"${DAY0_PODMAN_RUN_FLAGS:-}"
    PODMAN=(podman "${g[@]}")
    RUN_FLAGS=("${r[@]}")
    return
  fi
  local nofile nproc ulimits candidates i err g r
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  [[ "$nofile" == unlimited ]] && nofile=1048576
  [[ "$nproc" == unlimited || "$nproc" -gt 32768 ]] && nproc=32768
  ulimits="--ulimit nofile=$nofile:$nofile --ulimit nproc=$nproc:$nproc"
  candidates=("|" "--runtime runc|$ulimits" "|$ulimits" "--runtime runc|")
  for i in "${candidates[@]}"; do
    read -r -a g <<<"${i%%|*}"
    read -r -a r <<<"${i#*|}"
    if err=$(podman "${g[@]}" run --rm --network none "${r[@]}" "$1" true 2>&1); then
      PODMAN=(podman "${g[@]}")
      RUN_FLAGS=("${r[@]}")
      log "podman flags: global [${g[*]}] run [${r[*]}]"
      return
    fi
    log "podman [${g[*]}] run [${r[*]}] fails here: ${err##*$'\n'}"
  done
  die "no podman flags found under which a container starts (set DAY0_PODMAN_FLAGS / DAY0_PODMAN_RUN_FLAGS)"
}

# --- the debootstrap base --------------------------------------------------------------------
base_tag() { echo "localhost/day0-base:$SUITE-v$SCRIPT_VERSION"; }

build_base() {
  local tag arch dir tarball tmp t0
  tag=$(base_tag)
  if podman image exists "$tag"; then
    return
  fi
  arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
  dir=$CACHE/base-$SUITE-$arch-v$SCRIPT_VERSION
  tarball=$dir/rootfs.tar
  if [[ ! -s "$tarball" ]]; then
    [[ "$(id -u)" == 0 ]] || die "debootstrap needs root: run as root, or give a base image (make image BASE=python:3.11-slim-bookworm)"
    ensure_tools debootstrap
    mkdir -p "$dir"
    tmp=$(mktemp -d "$dir/debootstrap.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    log "debootstrap $SUITE (minbase + $BASE_PACKAGES) into $tmp"
    t0=$SECONDS
    # shellcheck disable=SC2086  # DEBIAN_MIRROR: empty means debootstrap's default
    debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$tmp/rootfs" ${DEBIAN_MIRROR:-} \
      >"$tmp/debootstrap.log" 2>&1 || { tail -n 20 "$tmp/debootstrap.log" >&2; die "debootstrap failed"; }
    chroot "$tmp/rootfs" apt-get clean
    rm -rf "$tmp/rootfs"/var/lib/apt/lists/* "$tmp/rootfs"/var/log/*.log "$tmp/rootfs"/var/cache/debconf/*-old
    tar --numeric-owner -C "$tmp/rootfs" -cf "$tarball.part" .
    mv "$tarball.part" "$tarball"
    rm -rf "$tmp"
    trap - EXIT
    log "base rootfs: $tarball ($(du -h "$tarball" | cut -f1), $((SECONDS - t0)) s)"
  fi
  podman import -q \
    --change 'ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV=LANG=C.UTF-8' \
    --change 'CMD=["/bin/bash"]' \
    "$tarball" "$tag" >/dev/null
  log "imported $tarball as $tag"
}

# --- commands --------------------------------------------------------------------------------
revision() {
  local rev
  rev=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null) || { echo unknown; return; }
  [[ -z "$(git -C "$ROOT" status --porcelain 2>/dev/null)" ]] || rev+=-dirty
  echo "$rev"
}

cmd_build() {
  local base=${BASE:-} ca secret=() t0 previous
  ensure_tools podman runc
  if [[ -z "$base" ]]; then
    build_base
    base=$(base_tag)
  elif ! podman image exists "$base"; then
    podman pull "$base"
  fi
  pick_flags "$base"
  ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
  [[ -s "$ca" ]] && secret=(--secret "id=cacert,src=$ca")
  log "building $IMAGE from $base (version $VERSION, revision $(revision))"
  previous=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
  t0=$SECONDS
  "${PODMAN[@]}" build \
    --network host \
    --layers \
    -f "$DOCKERFILE" \
    --ignorefile "$ROOT/k8s/image/Dockerfile.dockerignore" \
    --build-arg "BASE=$base" \
    --build-arg "VERSION=$VERSION" \
    --build-arg "REVISION=$(revision)" \
    "${secret[@]}" \
    -t "$IMAGE" \
    "$ROOT"
  log "built $IMAGE in $((SECONDS - t0)) s: $(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.2f GB", $1 / 1e9}')"
  # The image this one replaced, now untagged: its own layers (the source, a few MB) go; the
  # layers it shares with the new one, and the build cache, stay.
  if [[ -n "$previous" && "$previous" != "$(podman image inspect --format '{{.Id}}' "$IMAGE")" ]]; then
    podman rmi "$previous" >/dev/null 2>&1 || true
  fi
}

SERVER_CHECK=$(cat <<'EOF'
set -u
prefect server start --host 127.0.0.1 --port 4200 >/tmp/server.log 2>&1 &
python - <<'PY' || { tail -n 30 /tmp/server.log; exit 1; }
import http.client, sys, time

def get(path):
    c = http.client.HTTPConnection("127.0.0.1", 4200, timeout=5)
    c.request("GET", path, headers={"Accept": "text/html"})
    r = c.getresponse()
    return r.status, r.read()

deadline = time.monotonic() + 120
while True:
    try:
        status, body = get("/api/health")
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("no answer from the server in 120 s")
        time.sleep(1)
print("/api/health", status, body.decode())
status, body = get("/dashboard")
print("/dashboard", status, len(body), "bytes")
sys.exit(0 if status == 200 and b"<html" in body.lower() else 1)
PY
! grep -E "ERROR|Read-only file system" /tmp/server.log
EOF
)
RAY_CHECK=$(cat <<'EOF'
set -eu
ray start --head --num-cpus 1 --disable-usage-stats --include-dashboard false >/tmp/ray.log 2>&1 || { tail -n 30 /tmp/ray.log; exit 1; }
ray status | head -n 8
ray stop >/dev/null
EOF
)

cmd_test() {
  local failed=() name labels
  command -v podman >/dev/null || die "no podman: run 'make image' first"
  podman image exists "$IMAGE" || die "no image $IMAGE: run 'make image' first"
  pick_flags "$IMAGE"
  # As the chart runs it: uid/gid 10001, read-only root, a writable /tmp (an emptyDir there), HOME
  # and PREFECT_HOME on it; no network.
  run() {
    "${PODMAN[@]}" run --rm --read-only --user 10001:10001 --network none \
      --tmpfs /tmp:rw,exec,mode=1777 -e HOME=/tmp -e PREFECT_HOME=/tmp/prefect \
      -e PREFECT_SERVER_ANALYTICS_ENABLED=false "${RUN_FLAGS[@]}" "$IMAGE" "$@"
  }
  check() {  # check NAME COMMAND...
    name=$1
    shift
    log "check: $name"
    if run "$@"; then log "ok: $name"; else log "FAILED: $name"; failed+=("$name"); fi
  }
  check "day0 --version" day0 --version
  check "prefect version" prefect version
  check "ray --version" ray --version
  check "import day0.steps.inference, prefect_kubernetes" python -c "import day0.steps.inference, prefect_kubernetes"
  check "login shell (KubeRay's bash -l) finds ray and day0" bash -lc 'command -v ray && command -v day0'
  # shellcheck disable=SC2016  # expanded in the container
  check "uid 10001 in /opt/day0, root filesystem read-only" sh -c \
    'test "$(id -u):$(id -g)" = 10001:10001 && test "$PWD" = /opt/day0 && test -f flows/adapt.py && test -f prefect.yaml && ! touch /opt/day0/x 2>/dev/null'
  # The chart's long-running pods, briefly: the Prefect server answers its API and serves its UI,
  # a Ray head starts (what KubeRay's `ray start --head` does), both with the root read-only.
  check "prefect server start: /api/health and the UI" bash -c "$SERVER_CHECK"
  check "ray start --head, ray status, ray stop" bash -c "$RAY_CHECK"
  labels=$(podman image inspect --format '{{index .Labels "org.opencontainers.image.version"}} {{index .Labels "org.opencontainers.image.revision"}}' "$IMAGE")
  log "labels: version and revision: $labels"
  [[ "$labels" == "$VERSION "?* ]] || failed+=("OCI labels")
  if ((${#failed[@]})); then
    die "$IMAGE: ${#failed[@]} check(s) failed: $(IFS=';'; echo "${failed[*]}")"
  fi
  log "$IMAGE: all checks passed"
}

case "${1:-}" in
  build) cmd_build ;;
  test) cmd_test ;;
  base)
    ensure_tools podman
    build_base
    base_tag
    ;;
  flags)
    ensure_tools podman runc
    if [[ -n "${BASE:-}" ]]; then pick_flags "$BASE"; else build_base; pick_flags "$(base_tag)"; fi
    echo "global: ${PODMAN[*]:1}"
    echo "run: ${RUN_FLAGS[*]}"
    ;;
  *)
    sed -n '2,7p' "$0" >&2
    exit 2
    ;;
esac
