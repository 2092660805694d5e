#!/usr/bin/env bash
# Prometheus for Paceline's metrics: Debian's package, one server on loopback
# scraping Paceline every second, readiness by /-/ready, stop by pid.
#
#   deploy/prometheus/prometheus.sh start  [DIR] [PORT] [TARGET]  install if needed, start a server in DIR, wait for /-/ready
#   deploy/prometheus/prometheus.sh stop   [DIR]                  stop the server started in DIR (by its pid file)
#   deploy/prometheus/prometheus.sh status [DIR]                  exit 0 and print the URL if the server is ready
#   deploy/prometheus/prometheus.sh env    [DIR] [PORT]           print the exports the tests read (below)
#
# What it scrapes: TARGET (`host:port` of a paceline server's API or scrape
# listener, or of an agent's), if given, and every target listed in the
# JSON files of DIR/targets/ (Prometheus's file discovery, re-read every
# second): a test that starts its own cluster writes one file there and
# removes it after. Each target is scraped at /metrics every second.
# The alert rules beside this script (rules.yml) are loaded.
#
# `env` prints:
#   export PACELINE_PROMETHEUS=http://127.0.0.1:PORT        the HTTP API (query: /api/v1/query)
#   export PACELINE_PROMETHEUS_TARGETS=DIR/targets          where to drop target files
#
# Every command is idempotent: `start` on a running server only checks it,
# `stop` on a stopped one does nothing. `stop`, `status` and `env` use the
# port that `start` recorded in DIR when PORT is not given.
#
# Environment (all optional):
#   PROMETHEUS_DIR            server directory when DIR is not given (default /tmp/paceline-prometheus)
#   PROMETHEUS_PORT           HTTP port when PORT is not given (default 9090)
#   PROMETHEUS_START_TIMEOUT  seconds to wait for /-/ready (default 60)
#   PROMETHEUS_BIN            the server (default /usr/bin/prometheus, from Debian's `prometheus`)
#   PROMETHEUS_TOKEN          bearer token sent with each scrape (for a server with a tokens file)
#
# Tuned for tests and one machine: loopback only, 1 s scrape and rule
# evaluation, two hours of retention. A production Prometheus is run by its
# own packaging; docs/operations.md ("Metrics") shows the scrape job to add.
set -euo pipefail

START_TIMEOUT="${PROMETHEUS_START_TIMEOUT:-60}"
BIN="${PROMETHEUS_BIN:-/usr/bin/prometheus}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

cmd="${1:-}"
DIR="${2:-${PROMETHEUS_DIR:-/tmp/paceline-prometheus}}"
PORT_ARG="${3:-}"
TARGET="${4:-}"

log() { echo "prometheus.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# The port: the argument, else what `start` recorded in DIR, else the default.
if [[ -n "$PORT_ARG" ]]; then
    PORT="$PORT_ARG"
elif [[ -f "$DIR/port" ]]; then
    PORT="$(cat "$DIR/port")"
else
    PORT="${PROMETHEUS_PORT:-9090}"
fi
[[ "$PORT" =~ ^[0-9]+$ ]] && ((PORT > 0 && PORT < 65536)) || die "bad port '$PORT'"
[[ -z "$TARGET" || "$TARGET" =~ ^[A-Za-z0-9.:_-]+$ ]] || die "bad target '$TARGET' (host:port)"

# --- install -----------------------------------------------------------------

# shellcheck source=../lib/apt.sh
source "$HERE/../lib/apt.sh"
# shellcheck source=../lib/pidfile.sh
source "$HERE/../lib/pidfile.sh"

installed() {
    [[ -x "$BIN" ]] && command -v promtool >/dev/null
}

install() {
    apt_install prometheus installed
    [[ -x "$BIN" ]] || die "$BIN still missing after installing prometheus"
    command -v promtool >/dev/null || die "promtool not found after installing prometheus"
}

# --- configuration -----------------------------------------------------------

write_config() {
    mkdir -p "$DIR/data" "$DIR/targets"
    cp "$HERE/rules.yml" "$DIR/rules.yml"
    {
        echo "# Written by deploy/prometheus/prometheus.sh: Paceline scraped every second."
        echo "global:"
        echo "  scrape_interval: 1s"
        echo "  scrape_timeout: 1s"
        echo "  evaluation_interval: 1s"
        echo "rule_files:"
        echo "  - $DIR/rules.yml"
        echo "scrape_configs:"
        echo "  - job_name: paceline"
        echo "    metrics_path: /metrics"
        if [[ -n "${PROMETHEUS_TOKEN:-}" ]]; then
            printf '%s' "$PROMETHEUS_TOKEN" >"$DIR/token"
            chmod 600 "$DIR/token"
            echo "    authorization:"
            echo "      credentials_file: $DIR/token"
        fi
        if [[ -n "$TARGET" ]]; then
            echo "    static_configs:"
            echo "      - targets: ['$TARGET']"
        fi
        echo "    file_sd_configs:"
        echo "      - files: ['$DIR/targets/*.json']"
        echo "        refresh_interval: 1s"
    } >"$DIR/prometheus.yml"
    echo "$PORT" >"$DIR/port"
}

# --- process control ---------------------------------------------------------

pid_alive() {
    pidfile_alive "$DIR/prometheus.pid"
}

ready() {
    curl -fsS --max-time 3 "http://127.0.0.1:$PORT/-/ready" >/dev/null 2>&1
}

start() {
    if pid_alive && ready; then
        log "already running (pid $(cat "$DIR/prometheus.pid")) on 127.0.0.1:$PORT"
        echo "http://127.0.0.1:$PORT"
        return 0
    fi
    if pid_alive; then
        log "pid $(cat "$DIR/prometheus.pid") alive but not ready yet; waiting"
    else
        if ready; then
            die "port $PORT already answers /-/ready but not from a server started in $DIR"
        fi
        install
        write_config
        promtool check config "$DIR/prometheus.yml" >"$DIR/check.log" 2>&1 \
            || { cat "$DIR/check.log" >&2; die "promtool rejected $DIR/prometheus.yml"; }
        log "starting Prometheus in $DIR (127.0.0.1:$PORT, log $DIR/prometheus.log)"
        # setsid: the server outlives the shell that started it (CI runs start,
        # then cargo test, then stop as separate steps).
        setsid "$BIN" --config.file="$DIR/prometheus.yml" \
            --storage.tsdb.path="$DIR/data" \
            --storage.tsdb.retention.time=2h \
            --web.listen-address="127.0.0.1:$PORT" \
            --web.enable-lifecycle \
            >"$DIR/prometheus.log" 2>&1 </dev/null &
        echo $! >"$DIR/prometheus.pid"
    fi
    local deadline=$((SECONDS + START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ready; then
            log "ready on 127.0.0.1:$PORT (pid $(cat "$DIR/prometheus.pid"))"
            echo "http://127.0.0.1:$PORT"
            return 0
        fi
        if ! pid_alive; then
            log "the server exited during startup; last lines of its log:"
            tail -n 30 "$DIR/prometheus.log" >&2 || true
            rm -f "$DIR/prometheus.pid"
            exit 1
        fi
        sleep 0.2
    done
    log "not ready on 127.0.0.1:$PORT within ${START_TIMEOUT}s; last lines of $DIR/prometheus.log:"
    tail -n 30 "$DIR/prometheus.log" >&2 || true
    exit 1
}

stop() {
    pidfile_stop "$DIR/prometheus.pid"
}

status() {
    if pid_alive && ready; then
        echo "http://127.0.0.1:$PORT"
        return 0
    fi
    if pid_alive; then
        log "pid $(cat "$DIR/prometheus.pid") alive, not ready on 127.0.0.1:$PORT"
        return 2
    fi
    log "not running in $DIR"
    return 3
}

case "$cmd" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    env)
        echo "export PACELINE_PROMETHEUS=http://127.0.0.1:$PORT"
        echo "export PACELINE_PROMETHEUS_TARGETS=$DIR/targets"
        ;;
    *) sed -n '2,34p' "$0" >&2; exit 64 ;;
esac
