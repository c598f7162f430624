#!/usr/bin/env bash
# A single-node Kubernetes for kiln's tests, built from the Go module proxy alone: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and kubelet v1.34.4 driving a
# containerd of its own (Debian's) through CRI. Pods get no network (the tap CNI plugin gives
# them an eth0 that stays down), and the host keeps its sysctls, iptables and mounts: `down`
# undoes everything `up` did.
#
#   deploy/k8s/cluster.sh up               build what is missing, start it, wait until the node is Ready
#   deploy/k8s/cluster.sh down [--purge]   stop it and undo every host change (--purge: images and PKI too)
#   deploy/k8s/cluster.sh status           exit 0 when it is up and the node Ready, else say why
#   deploy/k8s/cluster.sh env              export lines for eval: KUBECONFIG, the node, the API server
#   deploy/k8s/cluster.sh import IMAGE...  copy local Docker images into it, for imagePullPolicy: Never
#   deploy/k8s/cluster.sh build            only build the binaries and the pause image
#
# Binaries are cached in .cache/k8s/v1.34.4/ of the repository, which down keeps; the run folder
# is .cache/k8s/run or KILN_K8S_DIR. Ports, all on 127.0.0.1: API server 16443, etcd 23790 and
# 23800, kubelet 20250 (healthz 20248), controller-manager 20257, scheduler 20259.
# Needs root and Go; installs Debian's containerd, runc, openssl, curl and jq when missing;
# Docker builds the pause image once.
set -euo pipefail
export LC_ALL=C

K8S_VERSION=v1.34.4
STAGING_VERSION=v0.34.4 # the k8s.io/* staging modules published with K8S_VERSION
ETCD_VERSION=v3.6.4
CNI_VERSION=v1.10.0 # github.com/containernetworking/plugins, for the tap plugin
API_PORT=16443
ETCD_PORT=23790
ETCD_PEER_PORT=23800
KUBELET_PORT=20250
KUBELET_HEALTHZ_PORT=20248
KCM_PORT=20257
SCHED_PORT=20259
SERVICE_RANGE=10.254.0.0/24
SERVICE_IP=10.254.0.1
POD_RANGE=169.254.123.0/24 # link-local: an address for eth0, never a route
CGROUP=kiln-k8s            # the kubelet's cgroup root, in every hierarchy
PAUSE_IMAGE=kiln-k8s-pause:1
PAUSE_REF=docker.io/library/$PAUSE_IMAGE
REQUIRED="etcd kube-apiserver kubelet"
OPTIONAL="kube-controller-manager kube-scheduler"
# What the kubelet writes at start unless it already reads these values; it is shown them.
KUBELET_SYSCTLS="vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1
kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000"
# Host sysctls compared between up and down.
WATCHED_SYSCTLS="vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
kernel/keys/root_maxkeys kernel/keys/root_maxbytes net/ipv4/ip_forward net/ipv4/conf/all/route_localnet
net/ipv4/ip_unprivileged_port_start net/bridge/bridge-nf-call-iptables"

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=$repo/.cache/k8s/$K8S_VERSION
bin=$cache/bin
cni=$cache/cni
run=${KILN_K8S_DIR:-$repo/.cache/k8s/run}
export PATH=/usr/local/go/bin:$PATH

say() { echo "k8s: $*"; }
die() {
  echo "k8s: $*" >&2
  exit 1
}
now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
timed() { printf 'k8s: %-36s %6s s\n' "$1" "$(since "$2")"; }

# resolve_run makes $run absolute and physical (it is matched against /proc/mounts) and refuses
# folders the kubelet's namespace hides or that cannot be matched.
resolve_run() {
  [ -d "$run" ] && run=$(cd "$run" && pwd -P)
  case "$run" in
  /*) ;;
  *) run=$(pwd -P)/$run ;;
  esac
  case "$run" in
  *[[:space:]]*) die "KILN_K8S_DIR must not contain spaces: $run" ;;
  /var/lib | /var/lib/* | /var/log | /var/log/* | /proc/* | /sys/*)
    die "KILN_K8S_DIR must be outside /var/lib, /var/log, /proc and /sys: $run"
    ;;
  esac
  pki=$run/pki
  sock=$run/containerd/containerd.sock
}

need_root() { [ "$(id -u)" = 0 ] || die "needs root (containerd, mounts, cgroups)"; }

# ensure installs Debian's package for a missing command, as the other deploy scripts do.
ensure() { "$repo/deploy/ensure-package.sh" "$@"; }

# --- processes -------------------------------------------------------------------------------

pidfile() { echo "$run/pids/$1.pid"; }

# ours PID: the process lives and is this cluster's (its command line names the run folder), so
# that a reused PID is never signalled.
ours() {
  local c
  [ -n "${1:-}" ] && c=$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") || return 1
  case "$c" in *"$run/"*) return 0 ;; esac
  return 1
}

alive() { ours "$(cat "$(pidfile "$1")" 2>/dev/null)"; }

# gone NAME: NAME is not alive, nor a moment later. A process that is exec'ing its next
# program reads an empty cmdline for an instant, and the kubelet's launch execs five times.
gone() {
  alive "$1" && return 1
  sleep 0.3
  ! alive "$1"
}

# launch NAME CMD...: start CMD in a session of its own, detached from the caller, with its
# output in logs/NAME.log, and record its PID. The lock's descriptor is not passed on.
launch() {
  local name=$1
  shift
  : >"$run/logs/$name.log"
  rm -f "$(pidfile "$name")"
  # shellcheck disable=SC2016 # $$ and "$@" are the inner shell's
  (cd "$run" && exec env -u TMPDIR setsid bash -c 'echo $$ >"$0"; exec "$@"' "$(pidfile "$name")" "$@") \
    </dev/null >>"$run/logs/$name.log" 2>&1 9>&- &
  disown $!
  for _ in $(seq 50); do
    [ -s "$(pidfile "$name")" ] && return 0
    sleep 0.02
  done
}

# stop SECONDS NAME...: SIGTERM to each recorded PID that is still ours, SIGKILL to those alive
# after SECONDS. The API server, for one, waits up to a minute for its clients to hang up.
stop() {
  local grace=$1 name pid pids=""
  shift
  for name in "$@"; do
    pid=$(cat "$(pidfile "$name")" 2>/dev/null) || continue
    if ours "$pid"; then
      kill "$pid" 2>/dev/null || true
      pids="$pids $pid"
    fi
  done
  # shellcheck disable=SC2086 # a list of PIDs
  pids=$(await_exit $((grace * 5)) $pids)
  for pid in $pids; do kill -9 "$pid" 2>/dev/null || true; done
  # shellcheck disable=SC2086
  await_exit 25 $pids >/dev/null
  for name in "$@"; do rm -f "$(pidfile "$name")"; done
}

# await_exit POLLS PID...: wait until each PID has exited, polling every 0.2 s; prints those
# that have not. A process has closed its files and sockets only when it is gone or a zombie.
await_exit() {
  local n=$1 pid left state
  shift
  for _ in $(seq "$n"); do
    [ $# -eq 0 ] && break
    left=""
    for pid in "$@"; do
      state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1)
      case "$state" in "" | Z | X) ;; *) left="$left $pid" ;; esac
    done
    # shellcheck disable=SC2086 # a list of PIDs
    set -- $left
    [ $# -eq 0 ] || sleep 0.2
  done
  echo "$@"
}

# fail_log NAME WHAT: the component did not come up; show why and stop.
fail_log() {
  echo "k8s: $1 $2; last lines of $run/logs/$1.log:" >&2
  tail -n 15 "$run/logs/$1.log" >&2 || true
  exit 1
}

# wait_for NAME SECONDS CHECK...: poll CHECK until it passes; fail early if NAME died.
wait_for() {
  local name=$1 secs=$2
  shift 2
  local until=$((SECONDS + secs))
  while ! "$@" >/dev/null 2>&1; do
    if gone "$name"; then fail_log "$name" "exited"; fi
    [ $SECONDS -lt $until ] || fail_log "$name" "was not ready within $secs s"
    sleep 0.1
  done
}

# our_processes: PIDs of this cluster's processes: its binaries, its containerd and the shims that
# containerd started, the kubelet's wrapper, and whatever runs in its cgroups.
our_processes() {
  local p c d argv
  {
    for p in /proc/[0-9]*; do # builtins only: this runs for every process
      mapfile -d '' -t argv 2>/dev/null <"$p/cmdline" || continue
      c="${argv[*]} "
      case "$c" in
      "$bin/"* | *"--config $run/containerd/config.toml "* | *"-address $sock "* | *" $run/kubelet/run.sh "*)
        echo "${p#/proc/}"
        ;;
      esac
    done
    for d in $(cgroup_dirs); do
      [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
    done
  } | grep -vx -e "$$" -e "$BASHPID" | sort -u || true
}

# --- host state: mounts, cgroups, shared folders ---------------------------------------------

our_mounts() { awk -v r="$run/" 'index($2, r) == 1 { print $2 }' /proc/self/mounts | sort -r; }

unmount_all() {
  local m
  for _ in 1 2 3; do
    [ -z "$(our_mounts)" ] && return 0
    for m in $(our_mounts); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  done
}

# cgroup_dirs: the kubelet's cgroup root in each hierarchy (cgroup v1), or the one of v2.
cgroup_dirs() {
  if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
    echo "/sys/fs/cgroup/$CGROUP"
    return
  fi
  local h
  for h in /sys/fs/cgroup/*/; do
    case $(stat -fc %T "$h") in cgroupfs | cgroup2fs) echo "$(realpath "$h")/$CGROUP" ;; esac
  done | sort -u
}

create_cgroups() {
  local d parent
  for d in $(cgroup_dirs); do
    [ -d "$d" ] && continue
    mkdir "$d"
    parent=${d%/*}
    if [ -f "$parent/cpuset.cpus" ]; then # v1 cpuset: a new cgroup starts with no CPU at all
      cat "$parent/cpuset.cpus" >"$d/cpuset.cpus"
      cat "$parent/cpuset.mems" >"$d/cpuset.mems"
    fi
  done
}

count_cgroups() {
  local n=0 d
  for d in $(cgroup_dirs); do [ -d "$d" ] && n=$((n + 1)); done
  echo $n
}

remove_cgroups() {
  local d
  for _ in $(seq 20); do
    for d in $(cgroup_dirs); do
      [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    [ "$(count_cgroups)" = 0 ] && return 0
    sleep 0.25
  done
}

# host_snapshot: what must be the same after down as before up.
host_snapshot() {
  local k
  for k in $WATCHED_SYSCTLS; do
    [ -r "/proc/sys/$k" ] && echo "$k=$(cat "/proc/sys/$k")"
  done
  return 0
}

kube_chains() {
  local n=0 t
  for t in iptables-save ip6tables-save; do
    command -v $t >/dev/null && n=$((n + $($t 2>/dev/null | grep -c 'KUBE-' || true)))
  done
  echo $n
}

# --- build -----------------------------------------------------------------------------------

# build: everything the cluster runs, each piece only when missing from the cache.
build() {
  local t0
  t0=$(now)
  command -v go >/dev/null || die "needs Go (>= 1.24) on PATH or in /usr/local/go"
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
  mkdir -p "$bin" "$cni" "$cache/logs"
  # One build at a time: make test starts one in the background (test/prebuild.sh), and
  # up waits for it rather than building beside it.
  exec 8>"$cache/build.lock"
  if ! flock -n 8; then
    say "waiting for the build under way (test/prebuild.sh; log: ${cache#"$repo"/}/logs/build.log)"
    flock 8
  fi
  local b todo=""
  for b in $REQUIRED $OPTIONAL; do
    [ -x "$bin/$b" ] || [ -f "$bin/$b.failed" ] || todo="$todo $b"
  done
  [ -n "$todo" ] && build_kube
  [ -x "$bin/kubectl" ] || build_kubectl
  [ -x "$cni/tap" ] || build_tap
  if [ ! -x "$cni/loopback" ] || [ ! -x "$cni/host-local" ]; then unpack_debian_cni; fi
  [ -f "$cache/pause.tar" ] || build_pause
  exec 8>&- # the daemons up starts must not hold the build's lock
  timed "build (cache: ${cache#"$repo"/})" "$t0"
}

# build_kube: the binaries missing from $bin. k8s.io/kubernetes cannot be built by `go install` (its staging modules
# are replaced by folders that are not in its module zip), so a module of our own replaces each
# of them by its published version and lists the commands as tools.
build_kube() {
  local src=$cache/src log=$cache/logs/build.log t0 b
  if [ ! -f "$src/.fetched" ]; then
    t0=$(now)
    write_module "$src"
    say "fetching k8s.io/kubernetes $K8S_VERSION and etcd $ETCD_VERSION (log: ${log#"$repo"/})"
    (cd "$src" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" &&
      go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" "k8s.io/kubernetes/cmd/kubelet@$K8S_VERSION") \
      >>"$log" 2>&1 || fail_build "go get" "$log"
    for b in $OPTIONAL; do
      (cd "$src" && go get -tool "k8s.io/kubernetes/cmd/$b@$K8S_VERSION") >>"$log" 2>&1 ||
        echo "go get k8s.io/kubernetes/cmd/$b failed: see $log" >"$bin/$b.failed"
    done
    (cd "$src" && go mod tidy) >>"$log" 2>&1 || fail_build "go mod tidy" "$log"
    touch "$src/.fetched"
    timed "modules fetched" "$t0"
  fi
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION
    -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34
    -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  local pkgs=""
  for b in $REQUIRED; do
    [ -x "$bin/$b" ] && continue
    if [ "$b" = etcd ]; then pkgs="$pkgs ./cmd/etcd"; else pkgs="$pkgs k8s.io/kubernetes/cmd/$b"; fi
  done
  if [ -n "$pkgs" ]; then
    t0=$(now)
    say "building$pkgs"
    # shellcheck disable=SC2086 # word splitting of the package list is meant
    (cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$bin/" $pkgs) >>"$log" 2>&1 ||
      fail_build "go build" "$log"
    timed "built $REQUIRED" "$t0"
  fi
  for b in $OPTIONAL; do
    [ -x "$bin/$b" ] || [ -f "$bin/$b.failed" ] && continue
    t0=$(now)
    if (cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$bin/$b" "k8s.io/kubernetes/cmd/$b") >"$cache/logs/$b.log" 2>&1; then
      timed "built $b" "$t0"
    else
      { echo "go build failed:"; tail -n 20 "$cache/logs/$b.log"; } >"$bin/$b.failed"
      say "$b did not build (the cluster runs without it): see $bin/$b.failed"
    fi
  done
}

# build_kubectl: kubectl, from the same module, for the tests that look at sandbox Pods from
# outside kiln (as others do with the docker command line).
build_kubectl() {
  local src=$cache/src log=$cache/logs/kubectl.log t0
  t0=$(now)
  [ -f "$src/.fetched" ] || build_kube
  if ! grep -q 'k8s.io/kubernetes/cmd/kubectl' "$src/go.mod"; then
    (cd "$src" && go get -tool "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION" && go mod tidy) >>"$log" 2>&1 ||
      fail_build "go get kubectl" "$log"
  fi
  (cd "$src" && go build -trimpath -ldflags "-s -w -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION
    -X k8s.io/component-base/version.gitVersion=$K8S_VERSION" -o "$bin/kubectl" k8s.io/kubernetes/cmd/kubectl) >>"$log" 2>&1 ||
    fail_build "go build kubectl" "$log"
  timed "built kubectl" "$t0"
}

fail_build() {
  echo "k8s: $1 failed; last lines of $2:" >&2
  tail -n 20 "$2" >&2
  exit 1
}

write_module() {
  local src=$1 m
  rm -rf "$src"
  mkdir -p "$src/cmd/etcd"
  {
    echo "// Generated by deploy/k8s/cluster.sh: the Kubernetes and etcd binaries of kiln's test cluster."
    echo "module kiln.test/k8s"
    echo
    echo "go 1.24.0"
    echo
    echo "replace ("
    for m in api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider \
      cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api \
      cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms \
      kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics \
      mount-utils pod-security-admission sample-apiserver; do
      printf '\tk8s.io/%s => k8s.io/%s %s\n' "$m" "$m" "$STAGING_VERSION"
    done
    echo ")"
  } >"$src/go.mod"
  cat >"$src/cmd/etcd/main.go" <<'EOF'
// Command etcd is the etcd server, from the same entry point as upstream's.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
}

build_tap() {
  local t0
  t0=$(now)
  (cd "$cache" && GOBIN=$cni go install -trimpath -ldflags '-s -w' \
    "github.com/containernetworking/plugins/plugins/main/tap@$CNI_VERSION") >>"$cache/logs/build.log" 2>&1 ||
    fail_build "go install tap" "$cache/logs/build.log"
  timed "built the tap CNI plugin" "$t0"
}

# unpack_debian_cni: loopback and host-local from Debian's package, unpacked, not installed.
unpack_debian_cni() {
  local d=$cache/debs
  rm -rf "$d" && mkdir -p "$d"
  (cd "$d" && { apt-get download containernetworking-plugins || { apt-get update -q && apt-get download containernetworking-plugins; }; }) \
    >>"$cache/logs/build.log" 2>&1 || fail_build "apt-get download containernetworking-plugins" "$cache/logs/build.log"
  dpkg -x "$d"/containernetworking-plugins_*.deb "$d/root"
  cp "$d/root/usr/lib/cni/loopback" "$d/root/usr/lib/cni/host-local" "$cni/"
}

# build_pause: the sandbox's pause container, a static Go program in an image FROM scratch,
# kept as a tarball in the cache (the Docker image is removed again).
build_pause() {
  local d=$cache/pause
  if ! docker info >/dev/null 2>&1; then die "the pause image needs Docker once: run 'make docker'"; fi
  rm -rf "$d" && mkdir -p "$d"
  printf 'module pause\n\ngo 1.24\n' >"$d/go.mod"
  cat >"$d/main.go" <<'EOF'
// Command pause holds a pod's namespaces: it sleeps until told to stop and reaps the children
// it inherits when the pod shares its PID namespace.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, _ := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 {
				break
			}
		}
	}
}
EOF
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$d/Dockerfile"
  (cd "$d" && go build -trimpath -ldflags '-s -w' -o pause .) >>"$cache/logs/build.log" 2>&1 ||
    fail_build "go build pause" "$cache/logs/build.log"
  docker build -q -t "$PAUSE_IMAGE" "$d" >/dev/null 2>>"$cache/logs/build.log"
  docker save -o "$cache/pause.tar.tmp" "$PAUSE_IMAGE"
  docker rmi "$PAUSE_IMAGE" >/dev/null
  mv "$cache/pause.tar.tmp" "$cache/pause.tar"
}

# --- configuration ---------------------------------------------------------------------------

# default_node: the kubelet's node name, which the API server dials as a host name; this host's
# name when it resolves to loopback, else localhost.
default_node() {
  local h
  h=$(hostname)
  case "$(getent ahostsv4 "$h" 2>/dev/null | awk 'NR == 1 { print $1 }')" in
  127.*) echo "$h" ;;
  *) echo localhost ;;
  esac
}

pki_current() {
  [ "$(cat "$pki/stamp" 2>/dev/null)" = "$node $API_PORT" ] || return 1
  local c
  for c in ca front-proxy-ca apiserver admin kubelet front-proxy-client; do
    openssl x509 -checkend 86400 -noout -in "$pki/$c.crt" >/dev/null 2>&1 || return 1
  done
}

# make_pki: a CA of its own, valid 90 days, and a certificate per client; EC keys (fast). The
# front proxy's CA is another: what it signs may assert any user in request headers.
make_pki() {
  rm -rf "$pki" && mkdir -p "$pki" && chmod 700 "$pki"
  (
    cd "$pki"
    ca ca /CN=kiln-k8s-ca
    ca front-proxy-ca /CN=kiln-k8s-front-proxy-ca
    leaf ca apiserver /CN=kube-apiserver "DNS:localhost,DNS:$node,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:$SERVICE_IP"
    leaf ca admin /O=system:masters/CN=kiln-k8s-admin
    leaf ca kubelet "/O=system:nodes/CN=system:node:$node"
    leaf ca apiserver-kubelet-client /O=system:masters/CN=kube-apiserver-kubelet-client
    leaf ca controller-manager /CN=system:kube-controller-manager
    leaf ca scheduler /CN=system:kube-scheduler
    leaf front-proxy-ca front-proxy-client /CN=front-proxy-client
    openssl ecparam -name prime256v1 -genkey -noout -out sa.key 2>/dev/null
    openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ./*.srl
  )
  local u
  for u in kubelet controller-manager scheduler; do kubeconfig "$u" >"$pki/$u.kubeconfig"; done
  kubeconfig admin >"$run/admin.kubeconfig"
  chmod 600 "$run/admin.kubeconfig"
  echo "$node $API_PORT" >"$pki/stamp"
}

ca() {
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 90 \
    -keyout "$1.key" -out "$1.crt" -subj "$2" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}

# leaf CA NAME SUBJECT [SAN]: a client certificate, or a server one when it has names.
leaf() {
  local ca=$1 name=$2 subj=$3 san=${4:-}
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$name.key" \
    -subj "$subj" -out "$name.csr" 2>/dev/null
  {
    echo "keyUsage=critical,digitalSignature"
    if [ -n "$san" ]; then
      echo "subjectAltName=$san"
      echo "extendedKeyUsage=serverAuth,clientAuth"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -days 90 \
    -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

# kubeconfig NAME: a self-contained kubeconfig for the client certificate NAME.
kubeconfig() {
  cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kiln-k8s
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 <"$pki/ca.crt")
users:
- name: $1
  user:
    client-certificate-data: $(base64 -w0 <"$pki/$1.crt")
    client-key-data: $(base64 -w0 <"$pki/$1.key")
contexts:
- name: kiln-k8s
  context: {cluster: kiln-k8s, user: $1}
current-context: kiln-k8s
EOF
}

write_containerd_config() {
  local runc
  runc=$(command -v runc)
  mkdir -p "$run/containerd"/{root,state,opt,runc} "$run/cni"/{net.d,ipam}
  cat >"$run/containerd/config.toml" <<EOF
# containerd of kiln's test cluster: its own root, state and sockets; Docker's is never touched.
version = 2
root = "$run/containerd/root"
state = "$run/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$run/containerd/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_REF"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    disable_apparmor = true
    netns_mounts_under_state_dir = true
    tolerate_missing_hugetlb_controller = true
    # Root here cannot lower an OOM score (no CAP_SYS_RESOURCE): runc would fail on the -998
    # the kubelet asks for the pause container.
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          BinaryName = "$runc"
          Root = "$run/containerd/runc"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$cni"
      conf_dir = "$run/cni/net.d"
      max_conf_num = 1
EOF
  # containerd 1.6 wants an eth0 with an address, and this kernel has no dummy links: tap makes
  # one inside the pod's network namespace only; it stays down, with no route.
  cat >"$run/cni/net.d/10-kiln-k8s.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "kiln-k8s",
  "plugins": [{
    "type": "tap", "owner": 0, "group": 0,
    "ipam": {"type": "host-local", "dataDir": "$run/cni/ipam", "ranges": [[{"subnet": "$POD_RANGE"}]]}
  }]
}
EOF
}

write_kubelet_config() {
  mkdir -p "$run/kubelet"/{root,pki,volume-plugins,fakesysctl} "$run/podlogs" "$run/varlog" "$run/varlib"
  cat >"$run/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$sock
imageServiceEndpoint: unix://$sock
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
podLogsDir: $run/podlogs
volumePluginDir: $run/kubelet/volume-plugins
resolvConf: ""
makeIPTablesUtilChains: false
# Imported images are never collected: nothing could pull them back.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 5%, nodefs.inodesFree: 5%, imagefs.available: 5%}
# A Pod has no process limit of its own: the kubelet's is the sandboxes' (kiln's default
# SANDBOX_PIDS_LIMIT), as docs/operations.md asks of a cluster that runs kiln.
podPidsLimit: ${KILN_K8S_POD_PIDS:-128}
# Room for the pools and the live sessions of the suites' kilns.
maxPods: 250
EOF
  local kv binds=""
  for kv in $KUBELET_SYSCTLS; do
    mkdir -p "$run/kubelet/fakesysctl/$(dirname "${kv%%=*}")"
    echo "${kv#*=}" >"$run/kubelet/fakesysctl/${kv%%=*}"
    binds="$binds
[ -e /proc/sys/${kv%%=*} ] && private_bind $run/kubelet/fakesysctl/${kv%%=*} /proc/sys/${kv%%=*}"
  done
  # The kubelet runs in a mount namespace of its own (unshare -m, propagation unchanged). There
  # it is shown the sysctl values it wants and private /var/lib and /var/log; the mounts those
  # need are made on mounts turned private first, so none reaches the host. Its root dir is a
  # shared mount (made by cluster.sh), so the tmpfs it mounts for emptyDir and projected volumes
  # reach the host, where containerd starts the containers.
  cat >"$run/kubelet/run.sh" <<EOF
#!/bin/bash
set -euo pipefail
private_bind() {
  mount --make-private "\$(findmnt -no TARGET -T "\$2" | head -n 1)"
  mount --bind "\$1" "\$2"
}
$binds
private_bind "$run/varlog" /var/log
private_bind "$run/varlib" /var/lib
exec "$bin/kubelet" "\$@"
EOF
  chmod +x "$run/kubelet/run.sh"
}

# --- the cluster -----------------------------------------------------------------------------

ctr_() { ctr --address "$sock" -n k8s.io "$@"; }

api() {
  local path=$1
  shift
  curl -sS --max-time 10 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    "https://127.0.0.1:$API_PORT$path" "$@"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
etcd_healthy() { curl -s --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
apiserver_ready() { [ "$(api /readyz 2>/dev/null)" = ok ]; }
healthz() { [ "$(curl -sk --max-time 2 "https://127.0.0.1:$1/healthz")" = ok ]; }
node_ready() {
  api "/api/v1/nodes/$node" 2>/dev/null |
    jq -e 'any(.status.conditions[]?; .type == "Ready" and .status == "True")' >/dev/null
}
default_sa() { [ "$(api /api/v1/namespaces/default/serviceaccounts/default -o /dev/null -w '%{http_code}')" = 200 ]; }

components() { cat "$run/components" 2>/dev/null; }

# check_health: 0 when up and the node Ready, else 1 with $reason set.
check_health() {
  reason=""
  [ -s "$run/components" ] || {
    reason="not started"
    return 1
  }
  local c
  for c in $(components); do
    alive "$c" || {
      reason="$c is not running (log: $run/logs/$c.log)"
      return 1
    }
  done
  apiserver_ready || {
    reason="the API server is not ready"
    return 1
  }
  node_ready || {
    reason="node $node is not Ready"
    return 1
  }
}

start_apiserver() {
  local admission=(--enable-admission-plugins NodeRestriction)
  # Without a controller-manager no ServiceAccount is ever created, so that admission would
  # refuse every pod, and no one would lift the not-ready taint put on the new node.
  [ "$1" = with-controller-manager ] || admission+=(--disable-admission-plugins "ServiceAccount,TaintNodesByCondition")
  launch kube-apiserver "$bin/kube-apiserver" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
    --secure-port "$API_PORT" --etcd-servers "http://127.0.0.1:$ETCD_PORT" --endpoint-reconciler-type none \
    --service-cluster-ip-range "$SERVICE_RANGE" --allow-privileged=false \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" --client-ca-file "$pki/ca.crt" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" --kubelet-preferred-address-types Hostname \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$pki/sa.pub" \
    --service-account-signing-key-file "$pki/sa.key" --authorization-mode Node,RBAC "${admission[@]}" \
    --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
    --cert-dir "$run/apiserver" --enable-priority-and-fairness=false --profiling=false
}

# start_optional NAME: start the controller-manager or the scheduler when it was built; 1 when not.
start_optional() {
  local name=$1
  if [ ! -x "$bin/$name" ]; then
    say "$name: not built, the cluster runs without it: $(head -n 1 "$bin/$name.failed" 2>/dev/null)"
    return 1
  fi
  local common=(--kubeconfig "$pki/$2.kubeconfig" --authentication-kubeconfig "$pki/$2.kubeconfig"
    --authorization-kubeconfig "$pki/$2.kubeconfig" --bind-address 127.0.0.1 --leader-elect=false --profiling=false)
  case $name in
  kube-controller-manager)
    launch "$name" "$bin/$name" "${common[@]}" --secure-port "$KCM_PORT" --cluster-name kiln-k8s \
      --use-service-account-credentials --service-account-private-key-file "$pki/sa.key" --kube-api-qps 200 --kube-api-burst 400 \
      --root-ca-file "$pki/ca.crt" --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key"
    ;;
  kube-scheduler) launch "$name" "$bin/$name" "${common[@]}" --secure-port "$SCHED_PORT" ;;
  esac
}

# wait_optional NAME PORT: 0 when it is healthy within 60 s; else stop it, say why, 1.
wait_optional() {
  local name=$1 port=$2 t0 until=$((SECONDS + 60))
  t0=$(now)
  while ! healthz "$port"; do
    if gone "$name" || [ $SECONDS -ge $until ]; then
      say "$name did not come up, the cluster runs without it; last lines of $run/logs/$name.log:"
      tail -n 5 "$run/logs/$name.log" | sed 's/^/    /'
      stop 2 "$name"
      return 1
    fi
    sleep 0.1
  done
  timed "$name healthy" "$t0"
}

cmd_up() {
  need_root
  mkdir -p "$run"
  resolve_run
  exec 9>"$run/lock"
  flock 9
  node=$(cat "$run/node" 2>/dev/null || true)
  if [ -n "$node" ] && check_health; then
    say "already up: node $node Ready, API server https://127.0.0.1:$API_PORT ($(components | tr '\n' ' ' | sed 's/ $//'))"
    return 0
  fi
  if [ -s "$run/components" ] || [ -n "$(our_processes)" ] || [ -n "$(our_mounts)" ]; then
    say "not healthy (${reason:-leftovers}): taking it down first"
    do_down
  fi
  local t_up t0
  t_up=$(now)
  build
  ensure containerd containerd
  ensure runc runc
  ensure openssl openssl
  ensure curl curl
  ensure jq jq
  local p
  for p in $API_PORT $ETCD_PORT $ETCD_PEER_PORT $KUBELET_PORT $KUBELET_HEALTHZ_PORT $KCM_PORT $SCHED_PORT; do
    port_free "$p" || die "port $p on 127.0.0.1 is in use: is another cluster running?"
  done
  node=${KILN_K8S_NODE:-$(default_node)}
  echo "$node" >"$run/node"
  mkdir -p "$run"/{pids,logs,host,images}
  # Remember what the host was like, and which shared folders this cluster creates.
  [ -f "$run/host/before" ] || host_snapshot >"$run/host/before"
  [ -e /var/lib/cni ] || touch "$run/host/created-var-lib-cni"
  [ -e /run/containerd ] || touch "$run/host/created-run-containerd"
  : >"$run/components"

  t0=$(now)
  pki_current || make_pki
  write_containerd_config
  write_kubelet_config
  timed "pki and configuration" "$t0"

  t0=$(now)
  launch containerd containerd --config "$run/containerd/config.toml" --log-level warn
  echo containerd >>"$run/components"
  launch etcd "$bin/etcd" --name kiln-k8s --data-dir "$run/etcd" --log-level warn --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "kiln-k8s=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls ""
  echo etcd >>"$run/components"
  wait_for containerd 30 ctr_ version
  if ! ctr_ images ls -q | grep -qx "$PAUSE_REF"; then
    ctr_ images import "$cache/pause.tar" >/dev/null
  fi
  timed "containerd (pause image in)" "$t0"
  wait_for etcd 30 etcd_healthy
  timed "etcd healthy" "$t0"

  local with_kcm=no
  [ -x "$bin/kube-controller-manager" ] && with_kcm=yes
  t0=$(now)
  start_apiserver "$([ $with_kcm = yes ] && echo with-controller-manager || echo without-controller-manager)"
  echo kube-apiserver >>"$run/components"
  wait_for kube-apiserver 90 apiserver_ready
  timed "kube-apiserver ready" "$t0"

  start_optional kube-controller-manager controller-manager && echo kube-controller-manager >>"$run/components"
  start_optional kube-scheduler scheduler && echo kube-scheduler >>"$run/components"
  if [ $with_kcm = yes ] && ! wait_optional kube-controller-manager "$KCM_PORT"; then
    sed -i '/^kube-controller-manager$/d' "$run/components"
    say "restarting kube-apiserver without ServiceAccount and TaintNodesByCondition admission"
    stop 0 kube-apiserver
    start_apiserver without-controller-manager
    wait_for kube-apiserver 90 apiserver_ready
  fi
  if alive kube-scheduler && ! wait_optional kube-scheduler "$SCHED_PORT"; then
    sed -i '/^kube-scheduler$/d' "$run/components"
  fi

  # The kubelet's cgroup root, made by hand in each hierarchy; its root dir, a shared mount.
  create_cgroups
  mountpoint -q "$run/kubelet/root" || mount --bind "$run/kubelet/root" "$run/kubelet/root"
  mount --make-shared "$run/kubelet/root"
  t0=$(now)
  launch kubelet unshare -m --propagation unchanged "$run/kubelet/run.sh" --config "$run/kubelet/config.yaml" \
    --kubeconfig "$pki/kubelet.kubeconfig" --root-dir "$run/kubelet/root" --cert-dir "$run/kubelet/pki" \
    --hostname-override "$node" --v 1
  echo kubelet >>"$run/components"
  wait_for kubelet 120 node_ready
  timed "node $node Ready (kubelet started)" "$t0"
  if alive kube-controller-manager; then
    t0=$(now)
    wait_for kube-controller-manager 60 default_sa
    timed "ServiceAccount default/default" "$t0"
  fi
  timed "up: $(components | tr '\n' ' ')" "$t_up"
  say "eval \"\$($0 env)\" for KUBECONFIG; $0 down stops it"
}

# do_down: stop everything, undo every host change, wipe the cluster's state (images, PKI and
# the build cache stay). Needs the lock.
do_down() {
  stop 10 kube-scheduler kube-controller-manager kubelet
  local id tasks ids
  # Task bundles name the ids even when containerd is gone.
  ids=$(ls "$run/containerd/state/io.containerd.runtime.v2.task/k8s.io" 2>/dev/null || true)
  if [ -S "$sock" ] && ctr_ version >/dev/null 2>&1; then
    ids="$ids $(ctr_ containers ls -q 2>/dev/null || true)"
    tasks=$(ctr_ tasks ls -q 2>/dev/null || true)
    for id in $tasks; do ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    for id in $tasks; do ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true; done
    for id in $ids; do ctr_ containers delete "$id" >/dev/null 2>&1 || true; done
  fi
  stop 2 kube-apiserver etcd # their state goes
  stop 10 containerd            # its image store stays
  # Whatever is left: shims whose containerd is gone, processes in the cluster's cgroups.
  local pid
  for pid in $(our_processes); do kill -9 "$pid" 2>/dev/null || true; done
  for _ in $(seq 25); do
    [ -z "$(our_processes)" ] && break
    sleep 0.2
  done
  unmount_all
  remove_cgroups
  if [ -z "$(our_mounts)" ]; then
    # The cluster's state; containerd's images, the PKI, the logs and the import stamps stay.
    rm -rf --one-file-system "$run"/{etcd,apiserver,kubelet,podlogs,varlog,varlib,cni/ipam,containerd/state,containerd/runc} \
      "$run/containerd/root/io.containerd.grpc.v1.cri"/{sandboxes,containers}
  fi
  # What outlives a pod that is not torn down through CRI: libcni's cache of its networks and,
  # had its shim been killed, the shim's socket (named after containerd's address and the id).
  for id in $ids; do
    rm -f /var/lib/cni/results/*-"$id"-* "/run/containerd/s/$(printf '%s' "$sock/k8s.io/$id" | sha256sum | cut -d' ' -f1)"
  done
  if [ -f "$run/host/created-var-lib-cni" ]; then
    rm -rf /var/lib/cni && rm -f "$run/host/created-var-lib-cni"
  fi
  if [ -f "$run/host/created-run-containerd" ]; then
    rmdir /run/containerd/s /run/containerd 2>/dev/null || true
    [ -e /run/containerd ] || rm -f "$run/host/created-run-containerd"
  fi
  rm -f "$run/components"
}

cmd_down() {
  need_root
  local purge=no
  [ "${1:-}" = --purge ] && purge=yes
  if [ ! -d "$run" ]; then
    say "down: nothing to stop ($run does not exist)"
    return 0
  fi
  resolve_run
  exec 9>"$run/lock"
  flock 9
  local t0
  t0=$(now)
  do_down
  local changed=0
  if [ -f "$run/host/before" ]; then
    changed=$(diff <(host_snapshot) "$run/host/before" | grep -c '^<' || true)
    [ "$changed" = 0 ] && rm -f "$run/host/before"
  fi
  local mounts procs cgroups chains
  mounts=$(our_mounts | wc -l)
  procs=$(our_processes | wc -l)
  cgroups=$(count_cgroups)
  chains=$(kube_chains)
  if [ $purge = yes ] && [ "$mounts" = 0 ]; then
    rm -rf --one-file-system "$run"
    say "purged $run"
  fi
  timed "down" "$t0"
  say "left: mounts $mounts, cgroups $cgroups, processes $procs, sysctls changed $changed, iptables KUBE- rules $chains"
  [ "$mounts$cgroups$procs$changed$chains" = 00000 ] || exit 1
}

cmd_status() {
  [ -d "$run" ] || die "down: not started"
  resolve_run
  node=$(cat "$run/node" 2>/dev/null || true)
  if ! check_health; then
    echo "k8s: down: $reason" >&2
    exit 1
  fi
  say "up: node $node Ready, API server https://127.0.0.1:$API_PORT ($(components | tr '\n' ' ' | sed 's/ $//'))"
}

cmd_env() {
  [ -d "$run" ] && resolve_run
  [ -f "$run/admin.kubeconfig" ] || die "no kubeconfig yet: run $0 up"
  printf 'export KUBECONFIG=%q\n' "$run/admin.kubeconfig"
  printf 'export KILN_K8S_NODE=%q\n' "$(cat "$run/node")"
  printf 'export KILN_K8S_SERVER=%q\n' "https://127.0.0.1:$API_PORT"
  printf 'export KILN_K8S_CA=%q KILN_K8S_CLIENT_CERT=%q KILN_K8S_CLIENT_KEY=%q\n' \
    "$pki/ca.crt" "$pki/admin.crt" "$pki/admin.key"
  printf 'export KILN_K8S_CONTAINERD=%q\n' "$sock"
  printf 'export KILN_K8S_COMPONENTS=%q\n' "$(components | tr '\n' ' ' | sed 's/ $//')"
  printf 'export KILN_K8S_KUBECTL=%q\n' "$bin/kubectl"
}

# cmd_import IMAGE...: docker save | ctr import, skipped when the stamp says this Docker image
# ID is in already. Prints the name containerd records, which pods may use as is.
cmd_import() {
  need_root
  [ $# -gt 0 ] || die "usage: $0 import IMAGE..."
  [ -d "$run" ] || die "not started: run $0 up"
  resolve_run
  exec 9>"$run/lock"
  flock 9
  ctr_ version >/dev/null 2>&1 || die "containerd is not running: run $0 up"
  mkdir -p "$run/images"
  local img id stamp name old t0
  for img in "$@"; do
    t0=$(now)
    id=$(docker image inspect -f '{{.Id}}' "$img" 2>/dev/null) || die "no Docker image $img"
    stamp=$run/images/$(echo "$img" | tr '/:@' '___')
    name=$(awk '{ print $2 }' "$stamp" 2>/dev/null || true)
    if [ "$(awk '{ print $1 }' "$stamp" 2>/dev/null)" = "$id" ] && [ -n "$name" ] &&
      ctr_ images ls -q | grep -qx "$name"; then
      say "import: $img is in already as $name (${id:7:12})"
      continue
    fi
    old=$(awk '{ print $1 }' "$stamp" 2>/dev/null || true)
    name=$(docker save "$img" | ctr_ images import - | sed -n 's/^unpacking \([^ ]*\) .*/\1/p' | head -n 1)
    [ -n "$name" ] || die "import of $img failed"
    echo "$id $name" >"$stamp"
    # CRI names every image by its ID too; the ID this name had is dropped unless another uses it.
    if [ -n "$old" ] && [ "$old" != "$id" ] && ! grep -qs "^$old " "$run"/images/*; then
      ctr_ images rm "$old" >/dev/null 2>&1 || true
    fi
    say "import: $img as $name (${id:7:12}) in $(since "$t0") s"
  done
}

case "${1:-}" in
up) cmd_up ;;
down)
  shift
  cmd_down "$@"
  ;;
status) cmd_status ;;
env) cmd_env ;;
import)
  shift
  cmd_import "$@"
  ;;
build)
  resolve_run
  build
  ;;
*)
  echo "usage: $0 up | down [--purge] | status | env | import IMAGE... | build" >&2
  exit 2
  ;;
esac
