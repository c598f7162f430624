#!/usr/bin/env bash
# Runs one step of make test and prints how long it took and the time since make test began
# (TEST_STARTED, in epoch seconds, which the Makefile sets): where a run's time went, step
# by step, a failed step included.
#
# usage: test/timed.sh LABEL COMMAND [ARG...]
set -uo pipefail

label=$1
shift
start=$(date +%s)
"$@"
rc=$?
end=$(date +%s)
outcome=ok
[ "$rc" -eq 0 ] || outcome="failed ($rc)"
echo "make test [$((end - ${TEST_STARTED:-$start}))s]: $label: $((end - start))s, $outcome" >&2
exit "$rc"
