#!/usr/bin/env bash
# Builds kiln and its python sandbox image as they were at an older commit, then runs
# the benchmark's before/after comparison of that build against this tree, side by side.
#
# usage: test/bench/before.sh COMMIT [bench flags...]
#   the older build goes to bin/before/<commit>/kiln, its image to kiln-python:before-<commit>;
#   both are reused while they exist. Results go to test/results/bench-before/.
set -euo pipefail

commit=${1:?usage: test/bench/before.sh COMMIT [bench flags...]}
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
short=$(git rev-parse --short "$commit^{commit}")
out=$root/bin/before/$short
image=kiln-python:before-$short

if [ ! -x "$out/kiln" ] || ! docker image inspect "$image" >/dev/null 2>&1; then
  tree=$(mktemp -d)
  trap 'git worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"' EXIT
  git worktree add --detach "$tree" "$short" >/dev/null
  mkdir -p "$out"
  echo "before: building kiln at $short" >&2
  (cd "$tree" && go build -o "$out/kiln" ./cmd/kiln)
  echo "before: building $image" >&2
  "$tree/images/build.sh" python "$image"
  # Removed now: exec below replaces this shell, and its EXIT trap with it.
  git worktree remove --force "$tree"
  trap - EXIT
fi
exec go run ./test/bench -before "$out/kiln" -before-image "$image" -out "$root/test/results/bench-before" "$@"
