#!/usr/bin/env bash
# A real Kubernetes control plane for Paceline's kubernetes provider: etcd,
# kube-apiserver, kube-controller-manager and kwok (fake nodes that "run"
# pods), built once per machine from the Go module proxy and run on loopback;
# kube-scheduler on request. No kubelet, no containers, no network.
#
#   deploy/kubernetes/kubernetes.sh build                 build the pinned binaries into the cache (once per machine)
#   deploy/kubernetes/kubernetes.sh start  [DIR]          build if needed, start the plane in DIR, wait for /readyz,
#                                                         apply manifests/rbac.yaml, write the two kubeconfigs
#   deploy/kubernetes/kubernetes.sh start-scheduler [DIR] also start kube-scheduler (default-scheduler pods get bound)
#   deploy/kubernetes/kubernetes.sh stop-scheduler [DIR]  stop only kube-scheduler (the rest keeps running)
#   deploy/kubernetes/kubernetes.sh stop   [DIR]          stop everything started in DIR (by pid files), scheduler included
#   deploy/kubernetes/kubernetes.sh stop-apiserver [DIR]  stop only kube-apiserver (an outage: its clients keep retrying)
#   deploy/kubernetes/kubernetes.sh start-apiserver [DIR] start it again (what `start` does on a plane missing it)
#   deploy/kubernetes/kubernetes.sh status [DIR]          exit 0 and print the API server URL if /readyz answers
#   deploy/kubernetes/kubernetes.sh env    [DIR]          print the `export PACELINE_KUBE…=` lines below (never a token)
#   deploy/kubernetes/kubernetes.sh nodes N [DIR] [--prefix P] [--cpu C] [--memory M] [--gpus G] [--pods P]
#                                          [--labels k=v,...]   create or update N kwok nodes P0 … P(N-1)
#
# Every command is idempotent: `start` on a running plane only checks it (and
# restarts a component that died), `stop` on a stopped one does nothing.
# DIR defaults to KUBERNETES_DIR or /tmp/paceline-kubernetes; etcd's data
# lives there, so `stop` then `start` keeps every object (nodes, pods, tokens)
# and takes seconds.
#
# Versions (pinned; bumping one rebuilds): k8s.io/kubernetes v1.37.2 (kube-apiserver,
# kube-controller-manager, kube-scheduler; a module of our own requiring it with
# a replace line per staging module k8s.io/* => v0.37.2), go.etcd.io/etcd/server/v3
# v3.7.3, sigs.k8s.io/kwok v0.8.0. `build` needs Go 1.26 and the module proxy
# (GOPROXY as the machine has it; GOFLAGS gets -mod=mod) and nothing else; it
# runs niced (nice -n 10) with -trimpath -ldflags='-s -w', prints each binary's
# build time, and keeps the go.mod files it writes in CACHE/src. Cold: about
# 16 min on 2 cores busy with other builds (etcd 56 s, kube-apiserver 566 s,
# kube-controller-manager 177 s, kube-scheduler 15 s, kwok 147 s), 1.2 GB of
# Go module cache and 4.5 GB of Go build cache; the binaries take 395 MB. A
# build is reused when every binary is there and CACHE/bin/VERSIONS names
# these versions (otherwise `build` rebuilds only the binaries whose Go build
# info names another version); concurrent builds wait on a lock. kubectl:
# one of 1.24 or later on PATH is used (for `kubectl create token`; 1.32 talks
# to this 1.37 server fine); without one (Debian's kubernetes-client is 1.20,
# too old) `start` builds kubectl from the same module into CACHE/bin (about
# a minute more with the Go caches warm), so a machine with Go and Debian's
# packages alone runs the plane. `env` names the one in use.
#
# What `start` runs (127.0.0.1 only; log files in DIR/logs, pids in DIR/*.pid):
#   etcd                     --unsafe-no-fsync (a test plane: a machine crash may lose the last writes)
#   kube-apiserver           TLS (certificate for IP:127.0.0.1 and DNS:localhost from the CA in DIR/pki),
#                            token authentication (DIR/pki/tokens.csv), --authorization-mode=Node,RBAC,
#                            service-account tokens signed with DIR/pki/sa.key, --endpoint-reconciler-type=none,
#                            every default admission plugin but TaintNodesByCondition (ServiceAccount stays on:
#                            the controller-manager makes each namespace's `default` ServiceAccount)
#   kube-controller-manager  every controller but node-lifecycle-controller and ttl-controller: Deployments,
#                            ReplicaSets, Jobs, StatefulSets, DaemonSets, garbage collection, ServiceAccounts and
#                            their tokens work; nodes never go NotReady by themselves and nothing evicts pods
#                            from a silent node (kwok renews no node Lease; tests that want a node to fail patch
#                            its Ready condition or delete it); the ttl-controller would patch every node (a
#                            kubelet cache hint) each time the cluster crosses a size step
#   kwok                     manages Nodes annotated kwok.x-k8s.io/node=fake (and only those) and their pods,
#                            with the Stages in DIR/kwok.yaml (below); no node Leases (with Leases, kwok
#                            manages a node only while it holds its Lease under an identity new in each
#                            process, so a restarted kwok would wait for the old ones to expire, and
#                            5,000 nodes would renew 5,000 Leases; nothing here reads them)
#   kube-scheduler           only with `start-scheduler` (--kube-api-qps/--kube-api-burst 5000 by default)
# The controller-manager, scheduler and kwok authenticate with tokens of their own
# (system:kube-controller-manager, system:kube-scheduler with their bootstrap
# roles; kwok in system:masters). Ports: the API server's is KUBERNETES_API_PORT,
# else the one recorded in DIR/ports, else 6443 when free, else a free one; the
# others are free ports picked on the first start and recorded in DIR/ports.
#
# Credentials, in DIR (DIR and DIR/pki mode 700, the files below 600):
#   pki/                 ca.crt/ca.key (the plane's CA), apiserver.crt/.key, sa.key/sa.pub, tokens.csv
#                        (random tokens: admin in system:masters, the controller-manager, the scheduler, kwok)
#   admin.kubeconfig     the admin token and the CA (embedded): everything
#   paceline.kubeconfig  a token of ServiceAccount paceline-system/paceline (TokenRequest, 1 year; minted
#                        again by `start` when it no longer works) and the CA: what manifests/rbac.yaml grants
# `env` prints (a contract with the provider and its tests; the names do not change):
#   export PACELINE_KUBECONFIG=DIR/paceline.kubeconfig
#   export PACELINE_KUBECONFIG_ADMIN=DIR/admin.kubeconfig
#   export PACELINE_KUBERNETES_API=https://127.0.0.1:PORT
#   export PACELINE_KUBECTL=PATH (the kubectl `start` uses: PATH's, or the one it built)
#
# Namespaces and RBAC (manifests/rbac.yaml, applied by every `start`):
#   paceline-system   ServiceAccount `paceline` (what `paceline server` runs as), its election Leases
#   paceline-tasks    where Paceline creates its task pods; its `default` ServiceAccount mounts no token
# paceline may: read nodes; read pods in every namespace (what else runs on a node, for capacity);
# create/delete/patch pods, bind them (pods/binding), evict them (pods/eviction), read their logs,
# create/get/delete/patch secrets (no list), create/patch events, all only in paceline-tasks; and
# get/create/update/patch leases in paceline-system. Nothing else (no secrets in kube-system, no pods
# written elsewhere, no node writes); manifests/rbac.yaml says why.
#
# kwok's Stages (kwok-stages.yaml beside this script, written to DIR/kwok.yaml by `start`), for pods on kwok nodes:
#   node-initialize   a kwok node without Ready=True gets Ready, addresses, nodeInfo, phase Running
#                     (`nodes` creates them Ready already)
#   node-heartbeat    refreshes the conditions every 120–240 s (KUBERNETES_KWOK_HEARTBEAT_SECONDS)
#   pod-ready         a Pending pod bound to a kwok node becomes Running and Ready at once
#                     (containers running, a pod IP from 10.128.0.0/9)
#   pod-exit          Paceline's convention for pods whose containers end (batch tasks are bare pods):
#                     annotation  paceline.io/kwok-exit-code: "N"       the containers exit with code N once
#                                 Running: phase Succeeded when N is 0, else Failed (reason Completed/Error)
#                     annotation  paceline.io/kwok-run-for: "DURATION"  optional: how long it runs first, a Go
#                                 duration ("1500ms", "30s", "5m"; default 0 = at once) or an RFC 3339 time
#                     A pod without paceline.io/kwok-exit-code runs until it is deleted (a service);
#                     a value that is not a number counts as 0. Set it when creating the pod, or later
#                     (a patch, `kubectl annotate`) to end a running pod on demand.
#   pod-complete      kwok's own: a Running pod owned by a Job succeeds (exit 0) after 1–5 s
#   pod-delete        a pod being deleted (deletionTimestamp) is removed at once, as a kubelet would
#
# `nodes` applies (server-side apply, field manager paceline-nodes) N Node objects with
# annotation kwok.x-k8s.io/node=fake, labels type=kwok, kubernetes.io/hostname, kubernetes.io/os=linux
# and the --labels, capacity = allocatable = cpu (default 32), memory (128Gi), pods (110) and
# nvidia.com/gpu when --gpus > 0, condition Ready=True, phase Running, an InternalIP from 10.64.0.0/10;
# for nodes that already existed, a second pass applies their status. It uses curl --parallel (one
# process, KUBERNETES_NODES_PARALLEL requests in flight, the token on its stdin): 5,000 new nodes took
# 17–22 s on 2 cores busy with other builds, updating 5,000 existing ones ~60 s. Nodes beyond N are kept;
# delete them with kubectl (`kubectl delete node NAME`, or `-l type=kwok` for all).
#
# Environment (all optional):
#   KUBERNETES_CACHE          binaries and go.mod files (default ~/.cache/paceline/kubernetes-v1.37.2)
#   KUBERNETES_DIR            plane directory when DIR is not given (default /tmp/paceline-kubernetes)
#   KUBERNETES_API_PORT       the API server's port (see Ports above)
#   KUBERNETES_START_TIMEOUT  seconds to wait for each component (default 120)
#   KUBERNETES_SCHEDULER_QPS, KUBERNETES_SCHEDULER_BURST   kube-scheduler's client limits (5000, 5000)
#   KUBERNETES_CONTROLLER_QPS, KUBERNETES_CONTROLLER_BURST the controller-manager's (200, 400)
#   KUBERNETES_KWOK_HEARTBEAT_SECONDS  node heartbeat period, jittered up to twice it (default 120)
#   KUBERNETES_NODES_PARALLEL requests in flight in `nodes` (default 64)
#   KUBERNETES_KWOK_LOG_LEVEL kwok's log level (default WARN; INFO logs every pod it touches)
#   KUBERNETES_APISERVER_V    the API server's log verbosity (default 0); 1 logs each watch it closes ("Forcing")
#   KUBERNETES_AUDIT          1: the API server writes an audit log, one JSON line per request at level
#                             Metadata (user, verb, resource, subresource), to DIR/logs/audit.log (appended
#                             across restarts): counts requests per client, e.g.
#                             jq -r '[.user.username,.verb,.objectRef.resource,.objectRef.subresource]|@tsv' \
#                               DIR/logs/audit.log | sort | uniq -c
#                             It costs the API server CPU: not for rate figures.
#
# What it is not: no kubelet, so no container runs, `kubectl logs`/`exec` on
# a pod fail (pods/log is granted for real clusters), and no pod networking;
# pod IPs are made up. A namespace a test creates gets its `default`
# ServiceAccount from the controller-manager within about a second; a pod
# created in it before then is refused ("serviceaccount default not found"):
# retry, or use paceline-tasks (made by `start`). Objects persist in DIR
# between runs: tests clean up their pods, or use a DIR of their own.
#
# This is a test and development plane on one machine (one etcd, no fsync, no
# HA, a 10-year CA of its own). Production Paceline uses a real cluster's API
# server with manifests/rbac.yaml and manifests/paceline.yaml applied.
set -euo pipefail

K8S_VERSION=v1.37.2
STAGING_VERSION=v0.37.2
ETCD_VERSION=v3.7.3
KWOK_VERSION=v0.8.0
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${KUBERNETES_CACHE:-${HOME:-/root}/.cache/paceline/kubernetes-$K8S_VERSION}"
BIN="$CACHE/bin"
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
STAMP="k8s.io/kubernetes $K8S_VERSION (staging $STAGING_VERSION), go.etcd.io/etcd/server/v3 $ETCD_VERSION, sigs.k8s.io/kwok $KWOK_VERSION"
START_TIMEOUT="${KUBERNETES_START_TIMEOUT:-120}"
SCHEDULER_QPS="${KUBERNETES_SCHEDULER_QPS:-5000}"
SCHEDULER_BURST="${KUBERNETES_SCHEDULER_BURST:-5000}"
CONTROLLER_QPS="${KUBERNETES_CONTROLLER_QPS:-200}"
CONTROLLER_BURST="${KUBERNETES_CONTROLLER_BURST:-400}"
HEARTBEAT_SECONDS="${KUBERNETES_KWOK_HEARTBEAT_SECONDS:-120}"
NODES_PARALLEL="${KUBERNETES_NODES_PARALLEL:-64}"
KWOK_LOG_LEVEL="${KUBERNETES_KWOK_LOG_LEVEL:-WARN}"
AUDIT="${KUBERNETES_AUDIT:-0}"

log() { echo "kubernetes.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
NODES_COUNT=""
if [[ "$cmd" == nodes ]]; then
    NODES_COUNT="${1:-}"
    [[ $# -gt 0 ]] && shift
fi
DIR="${KUBERNETES_DIR:-/tmp/paceline-kubernetes}"
if [[ $# -gt 0 && "$1" != --* ]]; then
    DIR="$1"
    shift
fi
EXTRA=("$@")
if [[ "$cmd" != nodes && ${#EXTRA[@]} -gt 0 ]]; then
    die "unexpected arguments: ${EXTRA[*]}"
fi
[[ "$DIR" == /* ]] || DIR="$PWD/$DIR"
PKI="$DIR/pki"

# shellcheck source-path=SCRIPTDIR source=../lib/pidfile.sh
source "$HERE/../lib/pidfile.sh"

# --- build -------------------------------------------------------------------

# How the binaries are built once per machine: deploy/kubernetes/build.sh.
# shellcheck source-path=SCRIPTDIR source=build.sh
source "$HERE/build.sh"

# --- ports -------------------------------------------------------------------

declare -A PORTS=()

load_ports() {
    local k v
    if [[ -f "$DIR/ports" ]]; then
        while IFS='=' read -r k v; do
            [[ "$k" =~ ^[a-z_]+$ && "$v" =~ ^[0-9]+$ ]] && PORTS[$k]="$v"
        done <"$DIR/ports"
    fi
    if [[ -n "${KUBERNETES_API_PORT:-}" ]]; then
        if [[ ! "$KUBERNETES_API_PORT" =~ ^[0-9]+$ ]] || ((KUBERNETES_API_PORT == 0 || KUBERNETES_API_PORT > 65535)); then
            die "bad KUBERNETES_API_PORT '$KUBERNETES_API_PORT'"
        fi
        PORTS[api]="$KUBERNETES_API_PORT"
    fi
    return 0
}

save_ports() {
    local k
    for k in "${!PORTS[@]}"; do
        echo "$k=${PORTS[$k]}"
    done | sort >"$DIR/ports"
}

# Something listens on 127.0.0.1:PORT (or on every address).
port_busy() {
    timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# A port nothing listens on and no other component of ours was given, below
# the ephemeral range so outgoing connections do not take it meanwhile.
free_port() {
    local p k taken
    for _ in $(seq 1 200); do
        p=$((20000 + RANDOM % 12000))
        taken=0
        for k in "${!PORTS[@]}"; do
            [[ "${PORTS[$k]}" == "$p" ]] && taken=1
        done
        ((taken)) && continue
        port_busy "$p" || { echo "$p"; return 0; }
    done
    die "found no free port"
}

# Ports for the components about to start: the recorded one when it is
# free, else a new one (the API server: 6443 first).
assign_port() {
    local key="$1"
    if [[ -n "${PORTS[$key]:-}" ]]; then
        if ! port_busy "${PORTS[$key]}"; then
            return 0
        fi
        [[ "$key" == api && -n "${KUBERNETES_API_PORT:-}" ]] \
            && die "port ${PORTS[api]} (KUBERNETES_API_PORT) is taken by something not started in $DIR"
        log "port ${PORTS[$key]} recorded for $key is taken by another process; picking another"
    fi
    if [[ "$key" == api ]] && ! port_busy 6443; then
        PORTS[$key]=6443
    else
        PORTS[$key]="$(free_port)"
    fi
}

# --- credentials ---------------------------------------------------------------

random_token() {
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'
}

# The CA, the API server's certificate, the service-account key pair and the
# token file, made once (a later start reuses them, so tokens stay valid).
make_pki() {
    (umask 077 && mkdir -p "$PKI" && chmod 700 "$DIR" "$PKI")
    local f missing=0
    for f in ca.crt ca.key apiserver.crt apiserver.key sa.key sa.pub tokens.csv; do
        [[ -s "$PKI/$f" ]] || missing=1
    done
    ((missing)) || return 0
    command -v openssl >/dev/null || die "openssl is missing (apt-get install -y openssl)"
    log "making the plane's CA, certificates and tokens in $PKI"
    (
        umask 077
        cd "$PKI"
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
            -subj "/CN=paceline-kubernetes-ca" \
            -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
        printf '%s\n' 'basicConstraints=CA:FALSE' 'keyUsage=critical,digitalSignature,keyEncipherment' \
            'extendedKeyUsage=serverAuth' \
            'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1' \
            >apiserver.ext
        openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
            -subj "/CN=kube-apiserver" 2>/dev/null
        openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt \
            -days 3650 -extfile apiserver.ext 2>/dev/null
        openssl genrsa -out sa.key 2048 2>/dev/null
        openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
        rm -f apiserver.csr apiserver.ext ca.srl
        {
            echo "$(random_token),admin,paceline-admin,\"system:masters\""
            echo "$(random_token),system:kube-controller-manager,system:kube-controller-manager"
            echo "$(random_token),system:kube-scheduler,system:kube-scheduler"
            echo "$(random_token),kwok,paceline-kwok,\"system:masters\""
        } >tokens.csv
    ) || die "could not make the PKI in $PKI"
    chmod 600 "$PKI"/*
}

# token_of USER: its token from tokens.csv.
token_of() {
    awk -F, -v u="$1" '$2 == u { print $1 }' "$PKI/tokens.csv"
}

# write_kubeconfig FILE USER TOKEN: the CA embedded, mode 600.
write_kubeconfig() {
    local file="$1" user="$2" token="$3" ca
    ca="$(base64 -w0 <"$PKI/ca.crt")"
    (
        umask 077
        cat >"$file.tmp" <<KC
apiVersion: v1
kind: Config
clusters:
- name: paceline-kubernetes
  cluster:
    server: https://127.0.0.1:${PORTS[api]}
    certificate-authority-data: $ca
users:
- name: $user
  user:
    token: $token
contexts:
- name: $user@paceline-kubernetes
  context:
    cluster: paceline-kubernetes
    user: $user
current-context: $user@paceline-kubernetes
KC
    )
    mv "$file.tmp" "$file"
}

# api_code PATH [TOKEN]: the HTTP status of a GET (the token never on a command line).
api_code() {
    local path="$1" token="${2:-}"
    {
        echo "url = \"https://127.0.0.1:${PORTS[api]}$path\""
        [[ -n "$token" ]] && echo "header = \"Authorization: Bearer $token\""
        true
    } | curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$PKI/ca.crt" -K - 2>/dev/null || true
}

# --- process control -----------------------------------------------------------

alive() {
    pidfile_alive "$DIR/$1.pid"
}

# launch NAME COMMAND...: in its own session (it outlives this shell), log in DIR/logs.
launch() {
    local name="$1"
    shift
    log "starting $name (log $DIR/logs/$name.log)"
    # The DIR lock's descriptor stays here: a daemon holding it would keep
    # every later start/stop waiting.
    setsid "$@" >>"$DIR/logs/$name.log" 2>&1 </dev/null {LOCK_FD}>&- &
    echo $! >"$DIR/$name.pid"
}

# wait_for NAME CHECK...: until CHECK succeeds, the process dies, or the timeout.
wait_for() {
    local name="$1" t0=$SECONDS
    shift
    while ! "$@"; do
        if ! alive "$name"; then
            log "$name exited during startup; last lines of $DIR/logs/$name.log:"
            tail -n 30 "$DIR/logs/$name.log" >&2 || true
            rm -f "$DIR/$name.pid"
            exit 1
        fi
        if ((SECONDS - t0 > START_TIMEOUT)); then
            log "$name not ready within ${START_TIMEOUT}s; last lines of $DIR/logs/$name.log:"
            tail -n 30 "$DIR/logs/$name.log" >&2 || true
            exit 1
        fi
        sleep 0.1
    done
}

# etcd keeps every revision until compacted; the API server compacts after 5
# minutes up, which a plane restarted per bench run never reached: etcd grew
# until it refused writes (NOSPACE). Each start of etcd compacts, defragments
# and clears that alarm (etcd's JSON gateway; no etcdctl needed).
etcd_compact() {
    local url="http://127.0.0.1:${PORTS[etcd]}/v3" rev="" m i
    post() { curl -fs --max-time "$1" -X POST "$url/$2" -d "$3" 2>/dev/null || true; }
    for i in $(seq 1 100); do
        rev=$(post 2 kv/range '{"key":"AA=="}' | grep -o '"revision":"[0-9]*"' | grep -o '[0-9]\+' || true)
        [ -n "$rev" ] && break
        sleep 0.1
    done
    [ -n "$rev" ] || return 0
    post 60 kv/compaction "{\"revision\":\"$rev\",\"physical\":true}" >/dev/null
    post 300 maintenance/defragment '{}' >/dev/null
    for m in $(post 5 maintenance/alarm '{"action":"GET"}' | grep -o '"memberID":"[0-9]*"' | grep -o '[0-9]\+' || true); do
        post 5 maintenance/alarm "{\"action\":\"DEACTIVATE\",\"memberID\":\"$m\",\"alarm\":\"NOSPACE\"}" >/dev/null
    done
}

etcd_healthy() {
    curl -fs --max-time 2 "http://127.0.0.1:${PORTS[etcd]}/health" 2>/dev/null | grep -q '"health":"true"'
}

api_ready() {
    [[ "$(api_code /readyz)" == 200 ]]
}

# The API server started in DIR answers.
plane_up() {
    [[ -n "${PORTS[api]:-}" ]] && alive kube-apiserver && api_ready
}

# The controller-manager's and scheduler's own HTTPS port (self-signed).
healthz() {
    [[ "$(curl -ks -o /dev/null -w '%{http_code}' --max-time 2 "https://127.0.0.1:$1/healthz" 2>/dev/null)" == 200 ]]
}

kwok_healthy() {
    [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:${PORTS[kwok]}/healthz" 2>/dev/null)" == 200 ]]
}

# kwok's configuration: its Stages (see the header).
write_kwok_config() {
    local hb_ms=$((HEARTBEAT_SECONDS * 1000))
    sed -e "s/HEARTBEAT_MS/$hb_ms/" -e "s/HEARTBEAT_JITTER_MS/$((2 * hb_ms))/" \
        "$HERE/kwok-stages.yaml" >"$DIR/kwok.yaml"
}

kubectl_admin() {
    "$KUBECTL" --kubeconfig "$DIR/admin.kubeconfig" "$@"
}

# The paceline ServiceAccount's token, minted again when the kubeconfig is
# missing or its token no longer works (e.g. the PKI was remade).
paceline_kubeconfig() {
    local kc="$DIR/paceline.kubeconfig" token=""
    if [[ -s "$kc" ]]; then
        token="$(awk '$1 == "token:" { print $2 }' "$kc")"
        if [[ -n "$token" && "$(api_code /api/v1/nodes?limit=1 "$token")" == 200 ]]; then
            write_kubeconfig "$kc" paceline "$token" # the port may have changed
            return 0
        fi
    fi
    log "minting a token for ServiceAccount paceline-system/paceline"
    token="$(kubectl_admin create token paceline -n paceline-system --duration=8760h)" \
        || die "kubectl create token failed"
    write_kubeconfig "$kc" paceline "$token"
}

# The kubectl to use: PATH's when it is 1.24 or later (`kubectl create
# token`), else one built from the pinned module into CACHE/bin.
KUBECTL=""
kubectl_minor() {
    "$1" version --client -o json 2>/dev/null | grep -o '"minor": *"[0-9]*' | grep -o '[0-9]*$' || true
}
require_kubectl() {
    local minor
    if command -v kubectl >/dev/null; then
        minor="$(kubectl_minor kubectl)"
        if [[ -n "$minor" ]] && ((minor >= 24)); then
            KUBECTL="$(command -v kubectl)"
            return 0
        fi
        log "kubectl on PATH is too old ($(kubectl version --client 2>&1 | head -n 1)); using one built from $K8S_VERSION"
    fi
    if ! has_version kubectl k8s.io/kubernetes "$K8S_VERSION"; then
        local v=k8s.io/component-base/version minor="${K8S_VERSION#v1.}" fd
        minor="${minor%%.*}"
        exec {fd}>>"$CACHE/.build.lock"
        flock "$fd"
        if ! has_version kubectl k8s.io/kubernetes "$K8S_VERSION"; then
            (
                export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
                cd "$CACHE/src/kubernetes" \
                    && go_build kubectl go build -trimpath \
                        -ldflags="-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor" \
                        -o "$BIN/kubectl" k8s.io/kubernetes/cmd/kubectl
            )
        fi
        flock -u "$fd"
        exec {fd}>&-
    fi
    KUBECTL="$BIN/kubectl"
}

# One start/stop at a time per DIR (test binaries may call `start` at once):
# the second waits for the first, then finds the plane running.
lock_dir() {
    (umask 077 && mkdir -p "$DIR")
    exec {LOCK_FD}>>"$DIR/.lock"
    flock "$LOCK_FD"
}

start() {
    build
    require_kubectl
    command -v curl >/dev/null || die "curl is missing (apt-get install -y curl)"
    lock_dir
    local t0=$SECONDS
    mkdir -p "$DIR/logs"
    make_pki
    load_ports
    local started=0

    # etcd
    if ! alive etcd; then
        assign_port etcd
        assign_port etcd_peer
        save_ports
        mkdir -p "$DIR/etcd"
        chmod 700 "$DIR/etcd"
        launch etcd "$BIN/etcd" --name=paceline --data-dir="$DIR/etcd" \
            --listen-client-urls="http://127.0.0.1:${PORTS[etcd]}" \
            --advertise-client-urls="http://127.0.0.1:${PORTS[etcd]}" \
            --listen-peer-urls="http://127.0.0.1:${PORTS[etcd_peer]}" \
            --initial-advertise-peer-urls="http://127.0.0.1:${PORTS[etcd_peer]}" \
            --initial-cluster="paceline=http://127.0.0.1:${PORTS[etcd_peer]}" \
            --unsafe-no-fsync --log-level=warn
        etcd_compact
        started=1
    fi
    wait_for etcd etcd_healthy

    # kube-apiserver
    if ! alive kube-apiserver; then
        assign_port api
        save_ports
        local audit=()
        if [[ "$AUDIT" == 1 ]]; then
            # One line per request, at its end (ResponseComplete), no bodies.
            printf '%s\n' 'apiVersion: audit.k8s.io/v1' 'kind: Policy' \
                'omitStages: [RequestReceived, ResponseStarted]' 'rules:' '- level: Metadata' \
                >"$DIR/audit-policy.yaml"
            audit=(--audit-policy-file="$DIR/audit-policy.yaml" --audit-log-path="$DIR/logs/audit.log"
                --audit-log-format=json --audit-log-mode=blocking --audit-log-maxsize=0)
        fi
        launch kube-apiserver "$BIN/kube-apiserver" \
            --etcd-servers="http://127.0.0.1:${PORTS[etcd]}" \
            --bind-address=127.0.0.1 --secure-port="${PORTS[api]}" \
            --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
            --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
            --client-ca-file="$PKI/ca.crt" --token-auth-file="$PKI/tokens.csv" \
            --authorization-mode=Node,RBAC \
            --service-account-issuer=https://kubernetes.default.svc \
            --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
            --service-cluster-ip-range=10.96.0.0/16 \
            --disable-admission-plugins=TaintNodesByCondition \
            --profiling=false --v="${KUBERNETES_APISERVER_V:-0}" "${audit[@]}"
        started=1
    fi
    wait_for kube-apiserver api_ready
    log "API server ready at https://127.0.0.1:${PORTS[api]}"

    write_kubeconfig "$DIR/admin.kubeconfig" admin "$(token_of admin)"
    write_kubeconfig "$PKI/kube-controller-manager.kubeconfig" system:kube-controller-manager \
        "$(token_of system:kube-controller-manager)"
    write_kubeconfig "$PKI/kube-scheduler.kubeconfig" system:kube-scheduler "$(token_of system:kube-scheduler)"
    write_kubeconfig "$PKI/kwok.kubeconfig" kwok "$(token_of kwok)"
    kubectl_admin apply -f "$HERE/manifests/rbac.yaml" >"$DIR/logs/rbac-apply.log" 2>&1 \
        || { cat "$DIR/logs/rbac-apply.log" >&2; die "could not apply manifests/rbac.yaml"; }

    # kube-controller-manager
    if ! alive kube-controller-manager; then
        assign_port controller_manager
        save_ports
        (umask 077 && mkdir -p "$PKI/kube-controller-manager")
        launch kube-controller-manager "$BIN/kube-controller-manager" \
            --kubeconfig="$PKI/kube-controller-manager.kubeconfig" \
            --bind-address=127.0.0.1 --secure-port="${PORTS[controller_manager]}" \
            --cert-dir="$PKI/kube-controller-manager" \
            --leader-elect=false \
            --use-service-account-credentials=true \
            --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
            --controllers='*,-node-lifecycle-controller,-ttl-controller' \
            --kube-api-qps="$CONTROLLER_QPS" --kube-api-burst="$CONTROLLER_BURST" \
            --profiling=false
        started=1
    fi

    # kwok
    if ! alive kwok; then
        assign_port kwok
        save_ports
        write_kwok_config
        launch kwok "$BIN/kwok" --kubeconfig="$PKI/kwok.kubeconfig" --config="$DIR/kwok.yaml" \
            --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
            --node-ip=10.64.0.1 --cidr=10.128.0.0/9 \
            --server-address="127.0.0.1:${PORTS[kwok]}" --node-port="${PORTS[kwok]}" \
            --node-lease-duration-seconds=0 --v="$KWOK_LOG_LEVEL"
        started=1
    fi
    wait_for kube-controller-manager healthz "${PORTS[controller_manager]}"
    wait_for kwok kwok_healthy

    paceline_kubeconfig
    if ((started)); then
        log "ready in $((SECONDS - t0)) s: https://127.0.0.1:${PORTS[api]} (kubeconfigs in $DIR)"
    else
        log "already running in $DIR: https://127.0.0.1:${PORTS[api]}"
    fi
    echo "https://127.0.0.1:${PORTS[api]}"
}

start_scheduler() {
    lock_dir
    load_ports
    plane_up || die "the plane in $DIR is not running (deploy/kubernetes/kubernetes.sh start $DIR)"
    if ! alive kube-scheduler; then
        assign_port scheduler
        save_ports
        (umask 077 && mkdir -p "$PKI/kube-scheduler")
        launch kube-scheduler "$BIN/kube-scheduler" \
            --kubeconfig="$PKI/kube-scheduler.kubeconfig" \
            --bind-address=127.0.0.1 --secure-port="${PORTS[scheduler]}" \
            --cert-dir="$PKI/kube-scheduler" \
            --leader-elect=false \
            --kube-api-qps="$SCHEDULER_QPS" --kube-api-burst="$SCHEDULER_BURST" \
            --profiling=false
    fi
    wait_for kube-scheduler healthz "${PORTS[scheduler]}"
    log "kube-scheduler ready (pid $(cat "$DIR/kube-scheduler.pid"), client limits $SCHEDULER_QPS/$SCHEDULER_BURST)"
}

# stop_one NAME: SIGTERM, up to 10 s, then SIGKILL (deploy/lib/pidfile.sh).
stop_one() {
    if alive "$1"; then
        log "stopping $1"
        pidfile_stop "$DIR/$1.pid"
    else
        rm -f "$DIR/$1.pid"
    fi
}

# Only the API server: etcd, the controller-manager and kwok keep running
# (and retrying), as in an API server outage.
stop_apiserver() {
    [[ -d "$DIR" ]] || { log "not running in $DIR"; return 0; }
    lock_dir
    stop_one kube-apiserver
}

# The API server's clients together, then the API server, then etcd.
stop() {
    local name
    local -a waits=()
    [[ -d "$DIR" ]] || { log "not running in $DIR"; return 0; }
    lock_dir
    for name in kube-scheduler kwok kube-controller-manager; do
        stop_one "$name" &
        waits+=($!)
    done
    wait "${waits[@]}"
    stop_one kube-apiserver
    stop_one etcd
}

status() {
    load_ports
    local name
    for name in etcd kube-apiserver kube-controller-manager kwok kube-scheduler; do
        if alive "$name"; then
            log "$name: running (pid $(cat "$DIR/$name.pid"))"
        elif [[ "$name" != kube-scheduler ]]; then
            log "$name: not running"
        fi
    done
    if [[ -n "${PORTS[api]:-}" ]] && alive kube-apiserver; then
        if api_ready; then
            echo "https://127.0.0.1:${PORTS[api]}"
            return 0
        fi
        log "kube-apiserver alive, /readyz not answering 200 on 127.0.0.1:${PORTS[api]}"
        return 2
    fi
    log "not running in $DIR"
    return 3
}

env_lines() {
    load_ports
    echo "export PACELINE_KUBECONFIG=$DIR/paceline.kubeconfig"
    echo "export PACELINE_KUBECONFIG_ADMIN=$DIR/admin.kubeconfig"
    echo "export PACELINE_KUBERNETES_API=https://127.0.0.1:${PORTS[api]:-6443}"
    require_kubectl >&2
    echo "export PACELINE_KUBECTL=$KUBECTL"
}

# --- fake nodes ----------------------------------------------------------------

# node_requests PREFIX LABELS RESOURCES TOKEN SUFFIX: reads node indexes, one
# a line; applies Node PREFIX<i> (SUFFIX /status: its status) for each;
# prints "HTTP-CODE INDEX" lines.
node_requests() {
    local prefix="$1" labels="$2" res="$3" token="$4" suffix="$5" i name ip first=1
    local url="https://127.0.0.1:${PORTS[api]}/api/v1/nodes"
    while read -r i; do
        ((first)) || echo next
        first=0
        name="$prefix$i"
        ip="10.$((64 + i / 65536)).$((i / 256 % 256)).$((i % 256))"
        printf 'url = "%s/%s%s?fieldManager=paceline-nodes&force=true"\nrequest = "PATCH"\noutput = "/dev/null"\nwrite-out = "%%{http_code} %s\\n"\n' \
            "$url" "$name" "$suffix" "$i"
        printf 'header = "Authorization: Bearer %s"\nheader = "Content-Type: application/apply-patch+yaml"\ncacert = "%s"\n' \
            "$token" "$PKI/ca.crt"
        printf 'data-binary = "{\\"apiVersion\\":\\"v1\\",\\"kind\\":\\"Node\\",\\"metadata\\":{\\"name\\":\\"%s\\",\\"annotations\\":{\\"kwok.x-k8s.io/node\\":\\"fake\\"},\\"labels\\":{\\"type\\":\\"kwok\\",\\"kubernetes.io/hostname\\":\\"%s\\",\\"kubernetes.io/os\\":\\"linux\\",\\"kubernetes.io/arch\\":\\"amd64\\"%s}},\\"status\\":{\\"capacity\\":{%s},\\"allocatable\\":{%s},\\"phase\\":\\"Running\\",\\"conditions\\":[{\\"type\\":\\"Ready\\",\\"status\\":\\"True\\",\\"reason\\":\\"KubeletReady\\",\\"message\\":\\"kwok\\"}],\\"addresses\\":[{\\"type\\":\\"InternalIP\\",\\"address\\":\\"%s\\"},{\\"type\\":\\"Hostname\\",\\"address\\":\\"%s\\"}]}}"\n' \
            "$name" "$name" "$labels" "$res" "$res" "$ip" "$name"
    done | curl -s --parallel --parallel-max "$NODES_PARALLEL" -K - 2>/dev/null || true
}

nodes() {
    local n="$NODES_COUNT" prefix=kwok-node- cpu=32 memory=128Gi gpus=0 labels="" pods=110
    [[ "$n" =~ ^[0-9]+$ ]] || die "usage: nodes N [DIR] [--prefix P] [--cpu C] [--memory M] [--gpus G] [--pods P] [--labels k=v,...]"
    set -- "${EXTRA[@]}"
    while [[ $# -gt 0 ]]; do
        [[ $# -ge 2 ]] || die "$1 needs a value"
        case "$1" in
            --prefix) prefix="$2" ;;
            --cpu) cpu="$2" ;;
            --memory) memory="$2" ;;
            --gpus) gpus="$2" ;;
            --labels) labels="$2" ;;
            --pods) pods="$2" ;;
            *) die "unknown option $1" ;;
        esac
        shift 2
    done
    [[ "$prefix" =~ ^[a-z0-9]([-a-z0-9.]*)?$ ]] || die "bad --prefix '$prefix' (a DNS name prefix)"
    [[ "$cpu" =~ ^[0-9]+(m)?$ ]] || die "bad --cpu '$cpu' (e.g. 32 or 500m)"
    [[ "$memory" =~ ^[0-9]+(Ki|Mi|Gi|Ti|k|M|G|T)?$ ]] || die "bad --memory '$memory' (e.g. 128Gi)"
    [[ "$gpus" =~ ^[0-9]+$ ]] || die "bad --gpus '$gpus'"
    [[ "$pods" =~ ^[0-9]+$ ]] || die "bad --pods '$pods'"
    local extra_labels="" kv
    if [[ -n "$labels" ]]; then
        local -a pairs
        IFS=',' read -r -a pairs <<<"$labels"
        for kv in "${pairs[@]}"; do
            [[ "$kv" =~ ^([A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?)=([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$ ]] \
                || die "bad label '$kv' (key=value)"
            extra_labels+=",\\\"${BASH_REMATCH[1]}\\\":\\\"${BASH_REMATCH[3]}\\\""
        done
    fi
    load_ports
    plane_up || die "the plane in $DIR is not running (deploy/kubernetes/kubernetes.sh start $DIR)"
    ((n > 0)) || return 0
    local token res
    token="$(token_of admin)"
    res="\\\"cpu\\\":\\\"$cpu\\\",\\\"memory\\\":\\\"$memory\\\",\\\"pods\\\":\\\"$pods\\\""
    ((gpus > 0)) && res+=",\\\"nvidia.com/gpu\\\":\\\"$gpus\\\""
    local t0 codes updated
    t0="$(date +%s%N)"
    # Server-side apply through one curl process (requests in parallel, the
    # token on its standard input): the objects first (a node created so
    # keeps the status given), then the status subresource of the nodes that
    # already existed (an update of the object ignores its status).
    codes="$(seq 0 $((n - 1)) | node_requests "$prefix" "$extra_labels" "$res" "$token" "")"
    [[ "$(grep -Ec '^20[01] ' <<<"$codes")" == "$n" ]] \
        || die "$(grep -Evc '^20[01] ' <<<"$codes") of $n nodes not applied (codes: $(cut -d' ' -f1 <<<"$codes" | sort | uniq -c | tr -s ' \n' ' '))"
    updated="$(awk '$1 == 200 { print $2 }' <<<"$codes")"
    if [[ -n "$updated" ]]; then
        codes="$(node_requests "$prefix" "$extra_labels" "$res" "$token" /status <<<"$updated")"
        [[ "$(grep -c '^200 ' <<<"$codes")" == "$(wc -l <<<"$updated")" ]] \
            || die "the status of $(grep -vc '^200 ' <<<"$codes") nodes not applied"
    fi
    log "$n nodes ${prefix}0…${prefix}$((n - 1)) applied in $((($(date +%s%N) - t0) / 1000000)) ms"
}

case "$cmd" in
    build) build ;;
    start) start ;;
    start-scheduler) start_scheduler ;;
    stop-scheduler)
        [[ -d "$DIR" ]] || exit 0
        lock_dir
        stop_one kube-scheduler
        ;;
    stop) stop ;;
    stop-apiserver) stop_apiserver ;;
    start-apiserver) start ;;
    status) status ;;
    env) env_lines ;;
    nodes) nodes ;;
    *)
        sed -n '2,19p' "$0" >&2
        exit 64
        ;;
esac
