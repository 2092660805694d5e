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

# shellcheck source=../lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/apt.sh"

case "${1:-}" in
    path)
        if ! find_chromium; then
            apt_install chromium find_chromium >/dev/null
            find_chromium || die "chromium still missing after installing it"
        fi
        ;;
    *)
        echo "usage: $0 path" >&2
        exit 2
        ;;
esac
