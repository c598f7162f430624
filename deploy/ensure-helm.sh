#!/usr/bin/env bash
# Makes sure Helm v3 is built for the chart's tests (lint, render, install into the test
# cluster): once per version, with `go install` from the Go module proxy, under
# .cache/helm/<version>/ (git ignores .cache). Idempotent; prints the binary's path.
set -euo pipefail

VERSION=${HELM_VERSION:-v3.22.0}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.cache/helm/$VERSION
bin=$dir/helm

if [ ! -x "$bin" ]; then
  echo "ensure-helm: building helm $VERSION (a few minutes, once)" >&2
  mkdir -p "$dir"
  GOBIN=$dir go install "helm.sh/helm/v3/cmd/helm@$VERSION"
fi
echo "$bin"
