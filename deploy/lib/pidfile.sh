# Sourced by the deploy scripts that run a server in the background and keep
# its pid in a file (deploy/zookeeper/zookeeper.sh,
# deploy/prometheus/prometheus.sh).
#
#   pidfile_alive <pid file>   true when the file names a live process
#   pidfile_stop <pid file>    SIGTERM, up to 10 s, then SIGKILL; removes the file
#
# The caller defines `log`.

pidfile_alive() {
    [[ -f "$1" ]] || return 1
    local pid
    pid="$(cat "$1")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null
}

pidfile_stop() {
    local file="$1" pid
    if ! pidfile_alive "$file"; then
        log "not running (no live process in $file)"
        rm -f "$file"
        return 0
    fi
    pid="$(cat "$file")"
    log "stopping pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$file"; return 0; }
        sleep 0.1
    done
    log "pid $pid ignored SIGTERM for 10 s; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    rm -f "$file"
}
