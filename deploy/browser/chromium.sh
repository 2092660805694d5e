#!/usr/bin/env bash
# A real browser for the web UI's tests: Debian's chromium, headless.
#
#   deploy/browser/chromium.sh path     print the chromium binary, installing
#                                       Debian's `chromium` package if missing
#
# Installing needs apt-get and root (or passwordless sudo), as for ZooKeeper.
set -euo pipefail

log() { echo "chromium.sh: $*" >&2; }
die() { log "$*"; exit 1; }

find_chromium() {
    local c
    for c in chromium chromium-browser google-chrome; do
        if command -v "$c" >/dev/null 2>&1; then
            command -v "$c"
            return 0
        fi
    done
    return 1
}

install() {
    command -v apt-get >/dev/null || die "no chromium and no apt-get: install Debian's chromium package"
    local -a sudo=()
    if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null || die "no chromium; run as root or install sudo (apt-get install -y chromium)"
        sudo=(sudo -n)
    fi
    log "installing Debian's chromium package with apt-get (once; about a minute)"
    if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >&2; then
        "${sudo[@]}" apt-get update -qq >&2 || true
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >&2 \
            || die "apt-get could not install chromium"
    fi
}

case "${1:-}" in
    path)
        if ! find_chromium; then
            install
            find_chromium || die "chromium still missing after installing it"
        fi
        ;;
    *)
        echo "usage: $0 path" >&2
        exit 2
        ;;
esac
