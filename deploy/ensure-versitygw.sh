#!/usr/bin/env bash
# Makes sure versitygw, an S3-compatible server that serves a folder, is built for the
# object store's tests: once per version, with `go install` from the Go module proxy,
# under .cache/versitygw/<version>/ (git ignores .cache). It never starts a server: the
# tests start their own on a free loopback port. Idempotent; prints the binary's path.
set -euo pipefail

VERSION=${VERSITYGW_VERSION:-v1.8.0}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.cache/versitygw/$VERSION
bin=$dir/versitygw

if [ ! -x "$bin" ]; then
  echo "ensure-versitygw: building versitygw $VERSION (a few minutes, once)" >&2
  mkdir -p "$dir"
  GOBIN=$dir go install "github.com/versity/versitygw/cmd/versitygw@$VERSION"
fi
echo "$bin"
