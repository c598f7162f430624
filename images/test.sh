#!/usr/bin/env bash
# Runs the REPL server's tests inside the image, under the same hardening as production
# containers. Builds the image first (images/build.sh skips that when it is up to date).
#
# usage: images/test.sh [name] [tag]      (defaults: python kiln-python:latest)
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

exec docker run --rm -i --init --network none --read-only \
  --tmpfs /tmp:rw,nosuid,nodev,noexec,size=256m \
  --tmpfs /mnt/data:rw,nosuid,nodev,size=256m,mode=1777 \
  --cap-drop ALL --security-opt no-new-privileges --pids-limit 256 --memory 1g \
  --user 10001:10001 \
  -v "$here/$name/tests:/tests:ro" -w /tests \
  --entrypoint python3 "$tag" -m unittest discover -s /tests "${args[@]}"
