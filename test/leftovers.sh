#!/bin/sh
# Runs a command with TMPDIR set to a fresh, empty directory, and fails if the command
# left anything in it: a test run must clean up after itself, on failure too.
#
# usage: test/leftovers.sh command [arg...]
#   e.g. test/leftovers.sh go test -count=1 ./test/fault/
#
# The exit status is the command's when it failed, else 1 when something was left (the
# entries are listed on stderr, then removed), else 0. POSIX sh, so that it also runs
# inside the sandbox image (images/test.sh).
set -u

if [ $# -eq 0 ]; then
  echo "usage: $0 command [arg...]" >&2
  exit 2
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/kiln-leftovers-XXXXXX") || exit 2
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM

TMPDIR=$dir "$@"
rc=$?

if [ -n "$(ls -A "$dir")" ]; then
  echo "leftovers.sh: '$*' left these in its TMPDIR:" >&2
  (cd "$dir" && find . -mindepth 1 -maxdepth 2 | sort | head -n 50 | while read -r entry; do
    echo "  $(du -sh "$entry" | cut -f1)	${entry#./}"
  done) >&2
  if [ "$rc" -eq 0 ]; then rc=1; fi
fi
exit "$rc"
