#!/usr/bin/env bash
# Install Debian's headless Chromium for the report's browser test (tests/unit/report/test_browser.py):
#   scripts/browser.sh          # installs chromium-headless-shell when no Chromium is on PATH; else a no-op
#   scripts/browser.sh --check  # exit 1 if none is installed, install nothing
# `make test` runs it (target `browser`). It needs apt-get and root (or sudo); where neither is
# available it says so and exits 0, and the browser test then skips, naming why.
set -euo pipefail

log() { printf '[browser] %s\n' "$*" >&2; }
found() { command -v chromium-headless-shell || command -v chromium || [[ -x /usr/lib/chromium/chromium-headless-shell ]]; }

if found >/dev/null; then
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  log "no Chromium installed"
  exit 1
fi
if ! command -v apt-get >/dev/null; then
  log "no apt-get here: install Chromium yourself; the browser test skips meanwhile"
  exit 0
fi
sudo=()
if [[ "$(id -u)" != 0 ]]; then
  if ! command -v sudo >/dev/null || ! sudo -n true 2>/dev/null; then
    log "not root and no passwordless sudo: run 'apt-get install chromium-headless-shell' as root; the browser test skips meanwhile"
    exit 0
  fi
  sudo=(sudo -n)
fi
log "installing chromium-headless-shell (Debian's package, about 100 MB)"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium-headless-shell fonts-dejavu-core >/dev/null
found >/dev/null || { log "installed, yet no Chromium binary found"; exit 1; }
