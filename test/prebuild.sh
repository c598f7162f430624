#!/usr/bin/env bash
# Builds, in the background, what a later step of make test needs and only Go compiles, so
# that its compiling fills the time the steps before spend waiting on containers:
#
#   test/prebuild.sh tools   versitygw and Helm (the Go packages' step needs them), while
#                            the images build
#   test/prebuild.sh later   the test Kubernetes (deploy/k8s/cluster.sh build) and the fuzz
#                            targets' instrumented test binaries, while the images' tests and
#                            the Go packages run
#
# It returns at once. Each build takes a lock of its own (deploy/go-tool.sh, cluster.sh
# build), so the step that needs a tool waits for the build under way rather than building
# it beside it; a build already done is skipped. It never installs a package (apt is the
# foreground's): `later` runs once make test's dependencies are in. What it did, with each
# part's time, goes to .cache/prebuild-PART.log, which make test prints at its end
# (test/prebuild.sh report). A build that fails here is only reported: the step that
# needs it builds again and fails there, with its own log.
#
# usage: test/prebuild.sh tools | later | report
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
mkdir -p .cache

# The packages of the fuzz targets (the Makefile's FUZZ_TARGETS): go test -fuzz builds each
# with every package it imports instrumented, std included, so a cold build cache costs the
# fuzz step minutes of compiling; go test -c -fuzz fills the cache for it.
FUZZ_PACKAGES="protocol docker executor session store api egress"

step() { # step LABEL COMMAND...: run it, log its time and outcome
  local label=$1 t0 rc
  shift
  t0=$(date +%s)
  "$@"
  rc=$?
  echo "prebuild: $label: $(($(date +%s) - t0))s, $([ "$rc" -eq 0 ] && echo ok || echo "failed ($rc)")"
}

fuzz_binaries() {
  local p rc=0
  for p in $FUZZ_PACKAGES; do
    go test -c -fuzz . -o /dev/null "./$p" || rc=1
  done
  return "$rc"
}

run() {
  case $1 in
    tools)
      step versitygw deploy/ensure-versitygw.sh
      step helm deploy/ensure-helm.sh
      ;;
    later)
      step "the test Kubernetes" deploy/k8s/cluster.sh build
      step "the fuzz targets' binaries" fuzz_binaries
      ;;
  esac
}

case ${1:-} in
  tools | later)
    log=.cache/prebuild-$1.log
    # setsid: the build is not part of make's process group, and outlives this script; it
    # ends on its own once built.
    setsid "$0" run "$1" >"$log" 2>&1 </dev/null &
    echo "prebuild: $1 building in the background (pid $!, log $log)" >&2
    ;;
  run) run "$2" ;; # the background part itself
  report)
    for part in tools later; do
      [ -f ".cache/prebuild-$part.log" ] && grep -h '^prebuild: ' ".cache/prebuild-$part.log" >&2
    done
    exit 0
    ;;
  *)
    echo "usage: $0 tools | later | report" >&2
    exit 2
    ;;
esac
