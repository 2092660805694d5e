#!/usr/bin/env bash
# Builds Paceline's Python, Go, Java and Node.js clients from proto/paceline/v1:
#
#   clients/build.sh [python|go|java|node|all]      (default: all)
#
# Generated code is never committed (it could drift from the protos); this
# script makes it, idempotently and quickly on a second run:
# - python: a virtualenv in clients/python/.venv with grpcio and grpcio-tools
#   (pinned in requirements.txt), stubs in clients/python/paceline_client/gen.
# - go: protoc-gen-go and protoc-gen-go-grpc installed into clients/go/.bin,
#   stubs in clients/go/gen, then `go build ./...` and `go vet ./...`.
#   protoc itself is grpcio-tools' (so nothing needs a system protoc).
# - java: `mvn package` in clients/java (protobuf-maven-plugin fetches protoc
#   and the grpc-java generator from Maven Central); the runtime classpath
#   goes to clients/java/target/classpath.txt for clients/java/submit.
# - node: `npm ci` in clients/node (@grpc/grpc-js and @grpc/proto-loader,
#   pinned in package.json and package-lock.json), skipped while
#   node_modules matches the lock file; the client loads the protos at run
#   time, so there is nothing to generate: the build checks that they load.
set -euo pipefail
cd "$(dirname "$0")"
CLIENTS="$PWD"
PROTO="$(cd .. && pwd)/proto"
PROTOS=(paceline/v1/types.proto paceline/v1/event.proto paceline/v1/job.proto paceline/v1/task.proto paceline/v1/pool.proto paceline/v1/host.proto paceline/v1/plugin.proto paceline/v1/watch.proto)

log() { echo "clients/build.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# One build at a time: two test processes (or a person and a test) building
# at once would delete each other's generated code mid-compile.
exec 9>"$CLIENTS/.build.lock"
flock 9

PY="$CLIENTS/python/.venv/bin/python"

python_env() {
    local stamp="$CLIENTS/python/.venv/requirements.stamp"
    if [[ -x "$PY" ]] && cmp -s "$stamp" python/requirements.txt; then
        return 0
    fi
    if [[ ! -x "$PY" ]]; then
        if ! python3 -m venv python/.venv 2>/dev/null; then
            rm -rf python/.venv
            log "python3-venv missing; installing Debian's python3-venv"
            local -a sudo=()
            [[ "$(id -u)" == 0 ]] || sudo=(sudo -n)
            "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2 || die "cannot install python3-venv"
            python3 -m venv python/.venv
        fi
    fi
    log "installing grpcio and grpcio-tools into clients/python/.venv"
    "$PY" -m pip install -q --disable-pip-version-check -r python/requirements.txt
    cp python/requirements.txt "$stamp"
}

protoc() {
    "$PY" -m grpc_tools.protoc -I "$PROTO" "$@"
}

build_python() {
    python_env
    local out=python/paceline_client/gen
    rm -rf "$out" && mkdir -p "$out"
    protoc --python_out="$out" --grpc_python_out="$out" --pyi_out="$out" "${PROTOS[@]}"
    "$PY" -c "import sys; sys.path.insert(0, 'python'); import paceline_client" || die "the generated Python client does not import"
    log "python: ok"
}

GO_PROTOBUF=v1.36.12
GO_GRPC_GEN=v1.6.2
MODULE=github.com/paceline/paceline/clients/go

build_go() {
    command -v go >/dev/null || die "go is not installed"
    python_env
    local bin="$CLIENTS/go/.bin"
    if [[ ! -x "$bin/protoc-gen-go" || ! -x "$bin/protoc-gen-go-grpc" || "$(cat "$bin/versions" 2>/dev/null)" != "$GO_PROTOBUF $GO_GRPC_GEN" ]]; then
        log "installing protoc-gen-go $GO_PROTOBUF and protoc-gen-go-grpc $GO_GRPC_GEN into clients/go/.bin"
        GOBIN="$bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$GO_PROTOBUF"
        GOBIN="$bin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$GO_GRPC_GEN"
        echo "$GO_PROTOBUF $GO_GRPC_GEN" >"$bin/versions"
    fi
    # The protos carry no go_package option: map each to the module's package.
    local -a maps=()
    local p
    for p in "${PROTOS[@]}"; do
        maps+=("--go_opt=M$p=$MODULE/gen/paceline/v1;pacelinev1" "--go-grpc_opt=M$p=$MODULE/gen/paceline/v1;pacelinev1")
    done
    rm -rf go/gen && mkdir -p go/gen
    protoc --plugin=protoc-gen-go="$bin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
        --go_out=go/gen --go_opt=paths=source_relative --go-grpc_out=go/gen --go-grpc_opt=paths=source_relative \
        "${maps[@]}" "${PROTOS[@]}"
    (cd go && go build -o .bin/submit ./cmd/submit && go vet ./...)
    log "go: ok"
}

build_java() {
    command -v mvn >/dev/null || die "maven is not installed"
    # One Maven run (each start costs seconds): package, then write the
    # runtime classpath for clients/java/submit.
    (cd java && mvn -q -B package dependency:build-classpath -DskipTests -Dmdep.outputFile=target/classpath.txt)
    log "java: ok"
}

build_node() {
    command -v node >/dev/null || die "node is not installed"
    command -v npm >/dev/null || die "npm is not installed"
    local stamp=node/node_modules/.paceline-lock.stamp
    if ! cmp -s "$stamp" node/package-lock.json; then
        log "installing @grpc/grpc-js and @grpc/proto-loader into clients/node/node_modules"
        # --prefer-offline: npm's cache (~/.npm) answers when it can, so a
        # reinstall needs no registry; ci: exactly the lock file, or fail.
        (cd node && npm ci --prefer-offline --no-audit --no-fund --loglevel=error) >&2
        cp node/package-lock.json "$stamp"
    fi
    # The protos are loaded at run time: load them now, so a .proto that
    # proto-loader cannot read (or a broken client) fails the build, not a
    # user's first call.
    (cd node && node --check submit.mjs && node -e 'import("./index.mjs").then((m) => m.loadApi())') ||
        die "the Node.js client does not load"
    log "node: ok"
}

case "${1:-all}" in
    python) build_python ;;
    go) build_go ;;
    java) build_java ;;
    node) build_node ;;
    all) build_python; build_go; build_java; build_node ;;
    *) echo "usage: $0 [python|go|java|node|all]" >&2; exit 2 ;;
esac
