#!/usr/bin/env bash
# Makes sure a command is on PATH, or that Debian's python3 imports a module: as root on Debian
# it installs the package that has it, retrying once after an apt-get update; elsewhere it says
# what to install and fails.
#
# usage: deploy/ensure-package.sh COMMAND [PACKAGE]      (PACKAGE defaults to COMMAND)
#        deploy/ensure-package.sh python3:MODULE PACKAGE
set -euo pipefail

cmd=$1
pkg=${2:-$1}
log() { echo "ensure-package: $*" >&2; }

present() {
  case $cmd in
    python3:*) /usr/bin/python3 -c "import ${cmd#python3:}" >/dev/null 2>&1 ;;
    *) command -v "$cmd" >/dev/null 2>&1 ;;
  esac
}

if present; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || [ ! -f /etc/debian_version ]; then
  log "$cmd is missing: install it (on Debian: apt-get install $pkg)"
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
log "installing Debian's $pkg"
apt-get install -y -q "$pkg" >/dev/null ||
  { apt-get update -q >/dev/null && apt-get install -y -q "$pkg" >/dev/null; }
