#!/usr/bin/env bash
# Builds the Python and TypeScript plugins of this repository into
# components under target/plugins/examples/ (the Rust ones are built by
# plugins/artifacts/build.rs):
#
#   plugins/examples/build.sh          prints the output directory
#
# - plugins/examples/{binpack,priority-preempt}-{py,ts}, gpu-fgd-py: the ports;
# - plugins/test-guests/hostile-{py,ts}: hostile guests for the sandbox tests.
#
# Each component is rebuilt only when its sources, the SDK, wit/ or the
# pinned toolchain changed (a SHA-256 stamp beside it), so a second run with
# nothing changed takes about a second. Python and JS builds run side by side.
# The host's tests (host/plugin/tests/all/languages.rs, the live-swap test)
# run this script themselves; scripts/test runs it before them.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${PACELINE_EXAMPLES_OUT:-$ROOT/target/plugins/examples}"
mkdir -p "$OUT"
exec 7>"$OUT/.lock"
flock 7

"$ROOT/scripts/toolchains" all

PY=(plugins/examples/binpack-py plugins/examples/priority-preempt-py plugins/examples/gpu-fgd-py plugins/test-guests/hostile-py)
JS=(plugins/examples/binpack-ts plugins/examples/priority-preempt-ts plugins/test-guests/hostile-ts)

stamp_of() {
    # Sources of the project and of its SDK, the WIT and the toolchain pins.
    local project="$1" sdk="$2"
    (
        cd "$ROOT"
        find "$project" "$sdk" wit -type f \
            \( -name '*.py' -o -name '*.ts' -o -name '*.mjs' -o -name '*.toml' -o -name '*.wit' -o -name '*.json' -o -name '*.txt' \) \
            -not -path '*/node_modules/*' -not -path '*/generated/*' -not -path '*/__pycache__/*' -not -path '*/target/*' -print0 \
            | sort -z | xargs -0 sha256sum
    ) | sha256sum | cut -d' ' -f1
}

build_all() {
    local sdk="$1"
    shift
    for project in "$@"; do
        local name stamp
        name="$(basename "$project")"
        stamp="$(stamp_of "$project" "$sdk")"
        if [[ -f "$OUT/$name.wasm" && "$(cat "$OUT/$name.stamp" 2>/dev/null)" == "$stamp" ]]; then
            continue
        fi
        local started=$SECONDS
        "$ROOT/scripts/plugin-build" "$ROOT/$project" "$OUT/$name.wasm.tmp" >/dev/null
        mv "$OUT/$name.wasm.tmp" "$OUT/$name.wasm"
        echo "$stamp" >"$OUT/$name.stamp"
        echo "plugins/examples/build.sh: built $name.wasm ($(stat -c %s "$OUT/$name.wasm") bytes) in $((SECONDS - started)) s" >&2
    done
}

build_all sdk/python "${PY[@]}" &
py=$!
build_all sdk/js "${JS[@]}" &
js=$!
status=0
wait "$py" || status=1
wait "$js" || status=1
[[ $status == 0 ]] || { echo "plugins/examples/build.sh: a build failed" >&2; exit 1; }
echo "$OUT"
