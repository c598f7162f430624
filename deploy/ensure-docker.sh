#!/usr/bin/env bash
# Makes sure a Docker daemon answers on this machine. On Debian as root it installs
# Debian's docker.io (and gVisor's runsc) when missing, registers runsc as a runtime
# and starts dockerd in the background. Elsewhere it says what to do. Idempotent.
set -euo pipefail

log() { echo "ensure-docker: $*" >&2; }

answers() { timeout 10 docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && answers; then
  exit 0
fi

if [ "$(id -u)" != 0 ] || [ ! -f /etc/debian_version ]; then
  log "no Docker daemon answers. Start Docker (e.g. 'sudo systemctl start docker' or Docker Desktop)"
  log "and make sure 'docker info' works for this user, then run this again."
  exit 1
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v runsc >/dev/null 2>&1; then
  log "installing Debian's docker.io and runsc"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q docker.io runsc >/dev/null
fi

# Register gVisor (used when SANDBOX_RUNTIME=runsc). Sandboxes run without network,
# which is what runsc supports here.
conf=/etc/docker/daemon.json
if command -v runsc >/dev/null 2>&1 && ! grep -q '"runsc"' "$conf" 2>/dev/null; then
  mkdir -p /etc/docker
  if [ -s "$conf" ]; then
    log "$conf exists without runsc; leaving it alone (add the runsc runtime yourself for SANDBOX_RUNTIME=runsc)"
  else
    cat >"$conf" <<JSON
{
  "runtimes": {
    "runsc": {"path": "$(command -v runsc)", "runtimeArgs": ["--network=none"]}
  }
}
JSON
  fi
fi

if answers; then exit 0; fi

# A systemd host starts the service; a container-like host (no systemd) gets dockerd
# started by hand, detached from this shell so that it outlives it.
if [ -d /run/systemd/system ] && systemctl start docker 2>/dev/null && answers; then
  exit 0
fi
# Only the default daemon counts as already starting: another dockerd with a socket and a
# pid file of its own (-H, --pidfile) does not answer here.
starting() {
  local pid
  pid=$(cat /var/run/docker.pid 2>/dev/null) || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]
}
if ! starting; then
  log "starting dockerd (log: /var/log/kiln-dockerd.log)"
  # The daemon outlives whatever started it (a test restarting it, for one): it gets
  # none of that caller's temporary directory, which goes away with the caller (runsc
  # then fails to start any sandbox), nor its working directory.
  # The redirections are the subshell's, so that nothing of it holds the caller's output
  # (a test reading this script's output would wait for the daemon to exit).
  (cd / && exec env -u TMPDIR setsid nohup dockerd) </dev/null >>/var/log/kiln-dockerd.log 2>&1 &
fi
for _ in $(seq 1 60); do
  if answers; then log "dockerd is up"; exit 0; fi
  sleep 1
done
log "dockerd did not answer within 60s; see /var/log/kiln-dockerd.log"
exit 1
