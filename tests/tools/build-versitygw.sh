#!/usr/bin/env bash
# Build the versitygw S3-compatible server used by the storage tests into a version-keyed cache
# outside the repo; reuse it when present. Prints the binary's path.
set -euo pipefail
VERSION="${VERSITYGW_VERSION:-v1.7.0}"
CACHE="${DAY0_CACHE:-$HOME/.cache/day0}/tools/versitygw-$VERSION"
BIN="$CACHE/versitygw"
if [[ ! -x "$BIN" ]]; then
  mkdir -p "$CACHE"
  echo "building versitygw $VERSION into $CACHE (first time only)" >&2
  GOBIN="$CACHE" go install "github.com/versity/versitygw/cmd/versitygw@$VERSION" >&2
fi
echo "$BIN"
