#!/usr/bin/env bash
# Runs the REPL server's tests inside the image, under the same hardening as production
# containers. Builds the image first (images/build.sh skips that when it is up to date).
# Every image runs the REPL's own tests (images/python/tests); an image with tests of its own
# (images/<name>/tests, such as polyglot's languages) runs those too, in the same container.
#
# usage: images/test.sh [name] [tag]      (defaults: python kiln-python:latest)
#        images/test.sh polyglot kiln-polyglot:latest
#        extra unittest arguments can follow after --, e.g. images/test.sh -- -k Bash
set -euo pipefail

name=python
tag=kiln-python:latest
if [ $# -gt 0 ] && [ "$1" != "--" ]; then name=$1; shift; fi
if [ $# -gt 0 ] && [ "$1" != "--" ]; then tag=$1; shift; fi
if [ "${1:-}" = "--" ]; then shift; fi

here=$(cd "$(dirname "$0")" && pwd)
"$here/build.sh" "$name" "$tag"

args=(-v)
if [ $# -gt 0 ]; then args=("$@"); fi

mounts=(-v "$here/python/tests:/tests:ro")
suites=/tests
if [ "$name" != python ] && [ -d "$here/$name/tests" ]; then
  mounts+=(-v "$here/$name/tests:/tests-$name:ro")
  suites="/tests /tests-$name"
fi

# Each suite is one unittest run; the image's own imports the REPL's client from /tests (and
# keeps the image's PYTHONPATH behind it). A suite in which -k or -p selected nothing (unittest's
# exit code 5) does not fail the whole.
# The REPL's own tests expect its defaults: an image may set KILN_PRELOAD (polyglot sets none).
runner='unset KILN_PRELOAD
rc=0
for suite in $KILN_SUITES; do
  if [ "$suite" = /tests ]; then path=${PYTHONPATH:-}; else path=/tests${PYTHONPATH:+:$PYTHONPATH}; fi
  PYTHONPATH=$path python3 -m unittest discover -s "$suite" -t "$suite" "$@" || {
    code=$?; if [ "$code" != 5 ]; then rc=$code; fi; }
done
exit $rc'

exec docker run --rm -i --init --network none --read-only \
  --tmpfs /tmp:rw,nosuid,nodev,noexec,size=256m \
  --tmpfs /mnt/data:rw,exec,nosuid,nodev,size=256m,mode=1777 \
  --cap-drop ALL --security-opt no-new-privileges --pids-limit 256 --memory 1g \
  --user 10001:10001 -e KILN_SUITES="$suites" \
  "${mounts[@]}" -w /tests \
  --entrypoint sh "$tag" -c "$runner" kiln-tests "${args[@]}"
