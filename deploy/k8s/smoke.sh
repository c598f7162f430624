#!/usr/bin/env bash
# Smoke check of the test Kubernetes (deploy/k8s/cluster.sh up first), through the API server
# with curl and the admin's client certificate:
#  1. imports IMAGE (default kiln-python:latest) from Docker;
#  2. runs the REPL in a Pod hardened as kiln's sandboxes are (uid 10001, read-only root, no
#     capability, no privilege escalation, seccomp RuntimeDefault, no ServiceAccount token, no
#     service links, tmpfs /tmp and /mnt/data with a size, limits, stdin open, no tty), waits
#     until it runs, prints the time from create to Running, its log and how the host sees the
#     container, then deletes it with grace 0;
#  3. creates and deletes a NetworkPolicy that denies kiln's pods all traffic;
#  4. with a controller-manager and a scheduler: a ServiceAccount token that authenticates, and
#     a Deployment whose Pod is scheduled and runs.
# Every object it creates is deleted on exit, also on failure.
set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
image=${IMAGE:-kiln-python:latest}
ns=default
name=kiln-smoke-$$

say() { echo "smoke: $*"; }
die() {
  echo "smoke: FAIL: $*" >&2
  exit 1
}
now() { echo "$EPOCHREALTIME"; }
ms() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", (b - a) * 1000 }'; }

"$here/cluster.sh" status >/dev/null || die "the cluster is not up: run deploy/k8s/cluster.sh up"
eval "$("$here/cluster.sh" env)"

# api METHOD PATH [CONTENT-TYPE]: one call as the admin; with a content type the body is stdin.
api() {
  local args=(-sS --fail-with-body --max-time 30 --cacert "$KILN_K8S_CA" --cert "$KILN_K8S_CLIENT_CERT"
    --key "$KILN_K8S_CLIENT_KEY" -X "$1")
  [ -n "${3:-}" ] && args+=(-H "Content-Type: $3" --data-binary @-)
  curl "${args[@]}" "$KILN_K8S_SERVER$2"
}
code() {
  curl -s -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$KILN_K8S_CA" --cert "$KILN_K8S_CLIENT_CERT" \
    --key "$KILN_K8S_CLIENT_KEY" "$KILN_K8S_SERVER$1"
}
has() { case " $KILN_K8S_COMPONENTS " in *" $1 "*) return 0 ;; esac; return 1; }
ctr_() { ctr --address "$KILN_K8S_CONTAINERD" -n k8s.io "$@"; }

cleanup() {
  api DELETE "/api/v1/namespaces/$ns/pods/$name?gracePeriodSeconds=0" >/dev/null 2>&1 || true
  api DELETE "/apis/networking.k8s.io/v1/namespaces/$ns/networkpolicies/$name" >/dev/null 2>&1 || true
  api DELETE "/apis/apps/v1/namespaces/$ns/deployments/$name" >/dev/null 2>&1 || true
  api DELETE "/api/v1/namespaces/$ns/pods?labelSelector=kiln.smoke%3D$name&gracePeriodSeconds=0" >/dev/null 2>&1 || true
}
trap cleanup EXIT

ref=$("$here/cluster.sh" import "$image" | tee /dev/stderr | sed -n 's/.* as \([^ ]*\) .*/\1/p')
say "image $image is $ref in the cluster's containerd"

# pod_spec: kiln's sandbox as a pod spec (YAML, indented for a Pod or a Deployment's template).
pod_spec() {
  local node=""
  has kube-scheduler || node="nodeName: $KILN_K8S_NODE"
  cat <<EOF
restartPolicy: ${1:-Never}
$node
automountServiceAccountToken: false
enableServiceLinks: false
terminationGracePeriodSeconds: 1
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  seccompProfile: {type: RuntimeDefault}
containers:
- name: sandbox
  image: $image
  imagePullPolicy: Never
  command: [python3, /opt/kiln/repl_server.py, --once]
  stdin: true
  tty: false
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    capabilities: {drop: [ALL]}
    seccompProfile: {type: RuntimeDefault}
  resources:
    requests: {cpu: 100m, memory: 256Mi}
    limits: {cpu: "1", memory: 512Mi}
  volumeMounts:
  - {name: tmp, mountPath: /tmp}
  - {name: data, mountPath: /mnt/data}
volumes:
- name: tmp
  emptyDir: {medium: Memory, sizeLimit: 64Mi}
- name: data
  emptyDir: {medium: Memory, sizeLimit: 128Mi}
EOF
}

# wait_running SELECTOR: poll every 50 ms until a pod it selects runs; prints its JSON.
wait_running() {
  local until=$((SECONDS + 120)) pods phase
  while [ $SECONDS -lt $until ]; do
    pods=$(api GET "/api/v1/namespaces/$ns/pods?$1")
    phase=$(jq -r '.items[0].status.phase // "none"' <<<"$pods")
    case $phase in
    Running)
      jq '.items[0]' <<<"$pods"
      return 0
      ;;
    Failed | Succeeded) die "pod ended: $(jq -c '.items[0].status.containerStatuses' <<<"$pods")" ;;
    esac
    sleep 0.05
  done
  die "no pod Running within 120 s: $(jq -c '.items[0].status' <<<"$pods")"
}

# --- the hardened pod ------------------------------------------------------------------------
t0=$(now)
{
  printf 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  labels: {kiln.managed: "true", kiln.smoke: %s}\nspec:\n' "$name" "$name"
  pod_spec | sed 's/^/  /'
} | api POST "/api/v1/namespaces/$ns/pods" application/yaml >/dev/null
created_ms=$(ms "$t0")
pod=$(wait_running "fieldSelector=metadata.name%3D$name")
running_ms=$(ms "$t0")
say "pod $name: $(jq -r .status.phase <<<"$pod") on $(jq -r .spec.nodeName <<<"$pod"); create call ${created_ms} ms, create to Running ${running_ms} ms"

log=$(api GET "/api/v1/namespaces/$ns/pods/$name/log?limitBytes=4096")
if [ -n "$log" ]; then
  say "log, first lines:"
  head -n 5 <<<"$log" | sed 's/^/    /'
else
  say "log: empty (the REPL says nothing until it is spoken to)"
fi

# How the host sees the container: its process and its mounts.
cid=$(jq -r '.status.containerStatuses[0].containerID' <<<"$pod" | sed 's|^containerd://||')
pid=$(ctr_ tasks ls | awk -v id="$cid" '$1 == id { print $2 }')
[ -n "$pid" ] || die "no task $cid in the cluster's containerd"
proc=/proc/$pid/status
say "host view of pid $pid: uid $(awk '/^Uid:/ { print $2 }' "$proc"), CapEff $(awk '/^CapEff:/ { print $2 }' "$proc")," \
  "NoNewPrivs $(awk '/^NoNewPrivs:/ { print $2 }' "$proc"), Seccomp $(awk '/^Seccomp:/ { print $2 }' "$proc")" \
  "(2 = filter), default route: $(awk 'NR > 1 && $2 == "00000000" { n++ } END { print n ? "yes" : "none" }' "/proc/$pid/net/route")"
awk '{ for (i = 7; $i != "-"; i++); split($6, o, ","); if ($5 == "/" || $5 == "/tmp" || $5 == "/mnt/data")
  printf "    %-10s %-8s %s %s\n", $5, $(i + 1), o[1], ($(i + 1) == "tmpfs" ? $(i + 3) : "") }' "/proc/$pid/mountinfo"
grep -q ' /tmp .* - tmpfs .*size=65536k' "/proc/$pid/mountinfo" || die "/tmp is not a 64 MiB tmpfs in the container"
awk '$5 == "/" { split($6, o, ","); exit !(o[1] == "ro") }' "/proc/$pid/mountinfo" || die "the root filesystem is writable"
[ "$(awk '/^CapEff:/ { print $2 }' "$proc")" = 0000000000000000 ] || die "the container has capabilities"
awk 'NR > 1 && $2 == "00000000" { exit 1 }' "/proc/$pid/net/route" || die "the pod has a default route"

t0=$(now)
api DELETE "/api/v1/namespaces/$ns/pods/$name?gracePeriodSeconds=0" >/dev/null
while [ "$(code "/api/v1/namespaces/$ns/pods/$name")" != 404 ]; do sleep 0.02; done
gone_ms=$(ms "$t0")
until [ -z "$(ctr_ tasks ls -q | grep -x "$cid" || true)" ]; do sleep 0.05; done
say "deleted with grace 0: object gone in ${gone_ms} ms, container gone in $(ms "$t0") ms"

# --- NetworkPolicy ---------------------------------------------------------------------------
api POST "/apis/networking.k8s.io/v1/namespaces/$ns/networkpolicies" application/yaml >/dev/null <<EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: $name}
spec:
  podSelector: {matchLabels: {kiln.managed: "true"}}
  policyTypes: [Ingress, Egress]
EOF
api GET "/apis/networking.k8s.io/v1/namespaces/$ns/networkpolicies/$name" |
  jq -e '.spec.policyTypes == ["Ingress", "Egress"] and (.spec.ingress == null) and (.spec.egress == null)' >/dev/null ||
  die "the NetworkPolicy reads back differently"
api DELETE "/apis/networking.k8s.io/v1/namespaces/$ns/networkpolicies/$name" >/dev/null
say "NetworkPolicy denying kiln.managed=true pods all ingress and egress: created, read back, deleted"

# --- ServiceAccount token and Deployment (controller-manager and scheduler) ------------------
if ! has kube-controller-manager || ! has kube-scheduler; then
  say "skipped the ServiceAccount token and the Deployment: components are '$KILN_K8S_COMPONENTS'"
  say "OK"
  exit 0
fi
token=$(api POST "/api/v1/namespaces/$ns/serviceaccounts/default/token" application/json <<<'{"spec": {"expirationSeconds": 600}}' |
  jq -r .status.token)
user=$(curl -sS --fail-with-body --cacert "$KILN_K8S_CA" -H "Authorization: Bearer $token" -X POST \
  -H 'Content-Type: application/json' -d '{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}' \
  "$KILN_K8S_SERVER/apis/authentication.k8s.io/v1/selfsubjectreviews" | jq -r .status.userInfo.username)
[ "$user" = system:serviceaccount:default:default ] || die "a ServiceAccount token authenticates as '$user'"
say "ServiceAccount token: issued, authenticates as $user"

t0=$(now)
{
  cat <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: $name}
spec:
  replicas: 1
  selector: {matchLabels: {kiln.smoke: $name}}
  template:
    metadata:
      labels: {kiln.smoke: $name}
    spec:
EOF
  pod_spec Always | sed 's/^/      /'
} | api POST "/apis/apps/v1/namespaces/$ns/deployments" application/yaml >/dev/null
pod=$(wait_running "labelSelector=kiln.smoke%3D$name")
say "Deployment $name: pod $(jq -r .metadata.name <<<"$pod") scheduled on $(jq -r .spec.nodeName <<<"$pod") and Running" \
  "$(ms "$t0") ms after the Deployment was created (owner: $(jq -r '.metadata.ownerReferences[0].kind' <<<"$pod"))"
t0=$(now)
api DELETE "/apis/apps/v1/namespaces/$ns/deployments/$name" application/json <<<'{"propagationPolicy": "Foreground"}' >/dev/null
api DELETE "/api/v1/namespaces/$ns/pods?labelSelector=kiln.smoke%3D$name&gracePeriodSeconds=0" >/dev/null
until [ "$(api GET "/api/v1/namespaces/$ns/pods?labelSelector=kiln.smoke%3D$name" | jq '.items | length')" = 0 ] &&
  [ "$(code "/apis/apps/v1/namespaces/$ns/deployments/$name")" = 404 ]; do sleep 0.1; done
say "Deployment, ReplicaSet and pod deleted in $(ms "$t0") ms"
say "OK"
