# Sourced by deploy/kubernetes/kubernetes.sh (see its header): building the
# pinned etcd, Kubernetes and kwok binaries once per machine into CACHE/bin.
# It uses the script's variables (CACHE, BIN, BINARIES, STAMP, the versions)
# and its log and die.
# shellcheck shell=bash

STAGING_MODULES=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
    cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api cri-client
    cri-streaming csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator
    kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission
    sample-apiserver streaming)

built() {
    local b
    for b in "${BINARIES[@]}"; do
        [[ -x "$BIN/$b" ]] || return 1
    done
    [[ -f "$BIN/VERSIONS" && "$(cat "$BIN/VERSIONS")" == "$STAMP" ]]
}

# has_version NAME MODULE VERSION: CACHE/bin/NAME exists and was built
# from MODULE at VERSION (Go's build info, kept by -trimpath and -s -w).
has_version() {
    [[ -x "$BIN/$1" ]] && go version -m "$BIN/$1" 2>/dev/null | grep -Eq "^[[:space:]](mod|dep)[[:space:]]+$2[[:space:]]+$3[[:space:]]"
}

# go_build NAME COMMAND...: one niced go command, timed.
go_build() {
    local name="$1" t0=$SECONDS
    shift
    log "building $name"
    nice -n 10 "$@" >&2 || die "building $name failed ($*)"
    log "built $name in $((SECONDS - t0)) s ($(du -h "$BIN/$name" | cut -f1))"
}

build() {
    if built; then
        return 0
    fi
    command -v go >/dev/null || die "go is not on PATH (Go 1.26 builds these: https://go.dev/dl)"
    mkdir -p "$CACHE/src/kubernetes" "$CACHE/src/etcd" "$BIN"
    # One build at a time per cache: a second caller waits, then finds it done.
    local fd
    exec {fd}>>"$CACHE/.build.lock"
    flock "$fd"
    if built; then
        flock -u "$fd"
        exec {fd}>&-
        return 0
    fi
    rm -f "$BIN/VERSIONS"
    local t0=$SECONDS m b
    # The module proxy only (GOPROXY as the machine has it); -mod=mod lets the
    # commands below update the go.mod files they own.
    export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
    # A build cache of its own, removed once the binaries are built: Go's
    # default (~/.cache/go-build) kept 4.4 GB of Kubernetes objects per
    # machine that nothing reads again (measured on a fresh machine).
    export GOCACHE="$CACHE/go-build.tmp"

    # etcd: a main package calling etcdmain.Main, its sibling modules pinned.
    local src="$CACHE/src/etcd"
    if ! has_version etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"; then
        printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' >"$src/main.go"
        {
            echo 'module paceline.dev/deploy/etcd'
            echo
            echo 'go 1.26.0'
            echo
            echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
            echo
            echo 'replace ('
            for m in api/v3 client/pkg/v3 client/v3 pkg/v3; do
                printf '\tgo.etcd.io/etcd/%s => go.etcd.io/etcd/%s %s\n' "$m" "$m" "$ETCD_VERSION"
            done
            echo ')'
        } >"$src/go.mod"
        (cd "$src" && nice -n 10 go mod tidy >"$CACHE/src/etcd.tidy.log" 2>&1) \
            || { tail -n 20 "$CACHE/src/etcd.tidy.log" >&2; die "go mod tidy failed for etcd"; }
        (cd "$src" && go_build etcd go build -trimpath -ldflags='-s -w' -o "$BIN/etcd" .)
    fi

    # Kubernetes: k8s.io/kubernetes is not meant to be required (its go.mod
    # points the staging modules at ./staging), so a module of our own
    # requires it and replaces each staging module by its published v0 tag.
    src="$CACHE/src/kubernetes"
    if [[ ! -f "$src/go.mod" ]] || ! grep -q "k8s.io/kubernetes $K8S_VERSION" "$src/go.mod"; then
        cat >"$src/tools.go" <<'GO'
//go:build tools

// Package tools pins the commands deploy/kubernetes/kubernetes.sh builds.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO
        {
            echo 'module paceline.dev/deploy/kubernetes'
            echo
            echo 'go 1.26.0'
            echo
            echo 'godebug default=go1.26'
            echo
            echo "require k8s.io/kubernetes $K8S_VERSION"
            echo
            echo 'replace ('
            for m in "${STAGING_MODULES[@]}"; do
                printf '\tk8s.io/%s => k8s.io/%s %s\n' "$m" "$m" "$STAGING_VERSION"
            done
            echo ')'
        } >"$src/go.mod"
        (cd "$src" && nice -n 10 go mod tidy >"$CACHE/src/kubernetes.tidy.log" 2>&1) \
            || { tail -n 20 "$CACHE/src/kubernetes.tidy.log" >&2; die "go mod tidy failed for kubernetes"; }
    fi
    # The version the binaries report (kubectl version, /version).
    local v=k8s.io/component-base/version minor="${K8S_VERSION#v1.}"
    minor="${minor%%.*}"
    local ld="-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
    for b in kube-apiserver kube-controller-manager kube-scheduler; do
        has_version "$b" k8s.io/kubernetes "$K8S_VERSION" && continue
        (cd "$src" && go_build "$b" go build -trimpath -ldflags="$ld" -o "$BIN/$b" "k8s.io/kubernetes/cmd/$b")
    done

    # kwok: `go install module@version` builds it with kwok's own go.mod
    # (there is no main module, so no go.mod of ours and no -mod).
    if ! has_version kwok sigs.k8s.io/kwok "$KWOK_VERSION"; then
        GOFLAGS="${GOFLAGS//-mod=mod/}" GOBIN="$BIN" \
            go_build kwok go install -trimpath -ldflags='-s -w' "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
    fi

    echo "$STAMP" >"$BIN/VERSIONS"
    rm -rf "$GOCACHE"
    flock -u "$fd"
    exec {fd}>&-
    log "build complete in $((SECONDS - t0)) s: $BIN"
}
