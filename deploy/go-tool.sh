#!/usr/bin/env bash
# go-tool.sh NAME PACKAGE VERSION: builds a Go program the tests need, once per version,
# with `go install` from the Go module proxy, into .cache/NAME/VERSION/ (git ignores
# .cache), and prints the binary's path. Idempotent. ensure-helm.sh and
# ensure-versitygw.sh name their tool through it.
set -euo pipefail

name=$1 pkg=$2 version=$3
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.cache/$name/$version
bin=$dir/$(basename "$pkg")

if [ ! -x "$bin" ]; then
  # One build at a time: make test starts one in the background (test/prebuild.sh), and a
  # second caller waits for it rather than building the same tool beside it.
  mkdir -p "$dir"
  exec 9>"$dir.lock"
  if ! flock -n 9; then
    echo "$name: waiting for the build under way (test/prebuild.sh)" >&2
    flock 9
  fi
  if [ ! -x "$bin" ]; then
    echo "$name: building $pkg@$version (a few minutes, once)" >&2
    GOBIN=$dir go install "$pkg@$version"
  fi
fi
echo "$bin"
