#!/usr/bin/env bash
# test.sh GO_TEST_ARGS...: the suites against kiln on the test Kubernetes. Brings the cluster up
# (building it on first use), imports the sandbox images, makes the suites' namespace, runs
# `go test` with KILN_TEST_RUNTIME=kubernetes, and stops the cluster again whatever happened,
# so that the host is left as it was found.
set -euo pipefail
cd "$(dirname "$0")/../.."
cluster=deploy/k8s/cluster.sh
images=(${K8S_IMAGES:-kiln-python:latest kiln-polyglot:latest})

keep=${KEEP_K8S:-0}
was_up=0
"$cluster" status >/dev/null 2>&1 && was_up=1
down() {
  # A cluster that was up before (make k8s-up) stays up; one this run started goes.
  if [ "$keep" != 1 ] && [ "$was_up" = 0 ]; then "$cluster" down; fi
}
trap down EXIT

"$cluster" up
"$cluster" import "${images[@]}"
eval "$("$cluster" env)"
"$KILN_K8S_KUBECTL" get namespace kiln-test >/dev/null 2>&1 ||
  "$KILN_K8S_KUBECTL" create namespace kiln-test >/dev/null
# As in production: the namespace admits only Pods that pass the restricted Pod Security
# Standard, which kiln checks at start (KUBE_REQUIRE_RESTRICTED).
"$KILN_K8S_KUBECTL" label namespace kiln-test --overwrite >/dev/null \
  pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=latest
KILN_TEST_RUNTIME=kubernetes "$@"
