#!/usr/bin/env bash
# Makes sure Helm v3 is built for the chart's tests (lint, render, install into the test
# cluster), under .cache/helm/<version>/. Idempotent; prints the binary's path.
exec "$(dirname "$0")/go-tool.sh" helm helm.sh/helm/v3/cmd/helm "${HELM_VERSION:-v3.22.0}"
