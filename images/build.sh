#!/usr/bin/env bash
# Builds a sandbox image from images/<name>/ and tags it <tag>. Idempotent: the image is
# labelled with a content hash of its folder (except tests/), and nothing is rebuilt while
# that hash matches. When the base image debian:trixie-slim is missing and cannot be pulled (no
# registry reachable), it is created locally with mmdebstrap from this host's apt mirror.
# An image built on another of kiln's (`FROM kiln-<x>:<tag>` in its Dockerfile, as polyglot is
# on python) builds that one first, and its hash covers the base's hash: a change to the base
# rebuilds it too.
#
# usage: images/build.sh [name] [tag]      (defaults: python kiln-python:latest)
set -euo pipefail

name=${1:-python}
tag=${2:-kiln-python:latest}
here=$(cd "$(dirname "$0")" && pwd)
dir=$here/$name
base=debian:trixie-slim

log() { echo "build-image: $*" >&2; }

# The kiln image this one is built on, if any: "x kiln-x:tag" from its FROM line.
kiln_base=$(awk 'toupper($1) == "FROM" { if (match($2, /^kiln-[a-z0-9_-]+:/)) print substr($2, 6, RLENGTH - 6), $2; exit }' "$dir/Dockerfile")
base_hash=
if [ -n "$kiln_base" ]; then
  read -r base_name base_tag <<<"$kiln_base"
  "$here/build.sh" "$base_name" "$base_tag"
  base_hash=$(docker image inspect --format '{{ index .Config.Labels "kiln.image.hash" }}' "$base_tag")
fi

# The tests (tests/, run by images/test.sh) are not part of the image; .dockerignore keeps them
# out of the build context too.
hash=$( (cd "$dir" && find . -type f ! -name '*.pyc' ! -path '*/__pycache__/*' ! -path './tests/*' -print0 | LC_ALL=C sort -z |
  xargs -0 sha256sum; [ -z "$base_hash" ] || echo "base $base_hash") | sha256sum | cut -c1-16)

current=$(docker image inspect --format '{{ index .Config.Labels "kiln.image.hash" }}' "$tag" 2>/dev/null || true)
if [ "$current" = "$hash" ]; then
  log "$tag is up to date ($hash)"
  exit 0
fi

# host_mirror prints the Debian mirror this host's apt uses (never a fixed host).
host_mirror() {
  local uri
  uri=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' |
    grep -v -- '-security' | head -n1 || true)
  if [ -z "$uri" ]; then
    uri=$(grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk '{for (i=2;i<=NF;i++) if ($i !~ /^\[/) {print $i; exit}}' | grep -v -- '-security' | head -n1 || true)
  fi
  echo "$uri"
}

ensure_base() {
  if docker image inspect "$base" >/dev/null 2>&1; then return; fi
  log "pulling $base"
  if timeout 120 docker pull -q "$base" >/dev/null 2>&1; then return; fi
  "$here/../deploy/ensure-package.sh" mmdebstrap ||
    { log "cannot pull $base and mmdebstrap is missing: install mmdebstrap or make a registry reachable"; exit 1; }

  local mirror
  mirror=$(host_mirror)
  if [ -z "$mirror" ]; then
    log "no Debian mirror found in this host's apt configuration"
    exit 1
  fi
  log "creating $base with mmdebstrap from $mirror (a few minutes)"
  mmdebstrap --quiet --variant=minbase \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --aptopt='APT::Install-Recommends "false"' \
    trixie - "deb $mirror trixie main" "deb $mirror trixie-updates main" |
    docker import --change 'CMD ["bash"]' - "$base" >/dev/null
}

[ -n "$kiln_base" ] || ensure_base
log "building $tag from images/$name ($hash)"
docker build -q --label "kiln.image.hash=$hash" -t "$tag" -t "${tag%:*}:$hash" "$dir" >/dev/null
log "built $tag"
