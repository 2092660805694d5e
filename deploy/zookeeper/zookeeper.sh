#!/usr/bin/env bash
# Apache ZooKeeper for Paceline membership: Debian's package, one standalone
# server on loopback, readiness by `ruok`, stop by pid.
#
#   deploy/zookeeper/zookeeper.sh start  [DIR] [PORT]  install if needed, start a server in DIR, wait for `imok`
#   deploy/zookeeper/zookeeper.sh stop   [DIR]         stop the server started in DIR (by its pid file)
#   deploy/zookeeper/zookeeper.sh status [DIR]         exit 0 and print the address if the server answers
#   deploy/zookeeper/zookeeper.sh env    [DIR] [PORT]  print `export PACELINE_ZOOKEEPER=127.0.0.1:PORT` and the
#                                                      identity's PACELINE_ZOOKEEPER_USER / _PASSWORD_FILE
#
# Every command is idempotent: `start` on a running server only checks it,
# `stop` on a stopped one does nothing. `stop`, `status` and `env` use the
# port that `start` recorded in DIR when PORT is not given.
#
# Identity (decision 0028): `start` also makes, once, a digest identity for
# Paceline's members: user `paceline` and a random password in
# DIR/auth/paceline-password (mode 600). Digest authentication needs nothing
# from the server; the members authenticate with it and create every node for
# it alone (membership.auth in the server's config). The tests read it through
# `env`.
#
# Environment (all optional):
#   ZOOKEEPER_DIR            server directory when DIR is not given (default /tmp/paceline-zookeeper)
#   ZOOKEEPER_PORT           client port when PORT is not given (default 2181)
#   ZOOKEEPER_HEAP           max heap (default 256M)
#   ZOOKEEPER_START_TIMEOUT  seconds to wait for `imok` (default 60)
#   ZOOKEEPER_JAR            server jar (default /usr/share/java/zookeeper.jar, from Debian's `zookeeper`)
#
# The server is tuned for tests and a single-machine deployment: loopback
# only, no admin HTTP server, tickTime 500 ms so sessions as short as 1 s are
# allowed (minSessionTimeout=1000, maxSessionTimeout=60000). A production
# ensemble should be three or five servers run by ZooKeeper's own packaging.
set -euo pipefail

HEAP="${ZOOKEEPER_HEAP:-256M}"
START_TIMEOUT="${ZOOKEEPER_START_TIMEOUT:-60}"
JAR="${ZOOKEEPER_JAR:-/usr/share/java/zookeeper.jar}"

cmd="${1:-}"
DIR="${2:-${ZOOKEEPER_DIR:-/tmp/paceline-zookeeper}}"
PORT_ARG="${3:-}"

log() { echo "zookeeper.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# The port: the argument, else what `start` recorded in DIR, else the default.
if [[ -n "$PORT_ARG" ]]; then
    PORT="$PORT_ARG"
elif [[ -f "$DIR/port" ]]; then
    PORT="$(cat "$DIR/port")"
else
    PORT="${ZOOKEEPER_PORT:-2181}"
fi
[[ "$PORT" =~ ^[0-9]+$ ]] && ((PORT > 0 && PORT < 65536)) || die "bad port '$PORT'"

# --- install -----------------------------------------------------------------

# shellcheck source=../lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/apt.sh"
# shellcheck source=../lib/pidfile.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/pidfile.sh"

installed() {
    [[ -f "$JAR" ]] && command -v java >/dev/null
}

install() {
    apt_install zookeeper installed
    [[ -f "$JAR" ]] || die "$JAR still missing after installing zookeeper"
    command -v java >/dev/null || die "java not found after installing zookeeper"
}

# --- configuration -----------------------------------------------------------

write_config() {
    mkdir -p "$DIR/conf" "$DIR/data"
    cat >"$DIR/conf/zoo.cfg" <<CFG
# Written by deploy/zookeeper/zookeeper.sh: one standalone server on loopback.
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
initLimit=10
syncLimit=5
dataDir=$DIR/data
clientPort=$PORT
clientPortAddress=127.0.0.1
maxClientCnxns=200
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
CFG
    cat >"$DIR/conf/log4j.properties" <<CFG
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File=$DIR/zookeeper.log
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n
CFG
    echo "$PORT" >"$DIR/port"
}

# The members' digest identity: a random password, made once.
make_identity() {
    local auth="$DIR/auth"
    (umask 077 && mkdir -p "$auth" && chmod 700 "$auth")
    if [[ ! -s "$auth/paceline-password" ]]; then
        local pw=""
        while ((${#pw} < 32)); do
            pw+="$(head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')"
        done
        (umask 077 && echo "${pw:0:32}" >"$auth/paceline-password")
    fi
}

# --- process control ---------------------------------------------------------

pid_alive() {
    pidfile_alive "$DIR/zookeeper.pid"
}

# Bash's /dev/tcp (the image has no nc): `ruok` must get `imok` back.
answers() {
    local reply
    reply="$(timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT && printf ruok >&3 && head -c 4 <&3" 2>/dev/null)" \
        || return 1
    [[ "$reply" == "imok" ]]
}

start() {
    make_identity
    if pid_alive && answers; then
        log "already running (pid $(cat "$DIR/zookeeper.pid")) on 127.0.0.1:$PORT"
        echo "127.0.0.1:$PORT"
        return 0
    fi
    if pid_alive; then
        log "pid $(cat "$DIR/zookeeper.pid") alive but not answering yet; waiting"
    else
        if answers; then
            die "port $PORT already answers ruok but not from a server started in $DIR"
        fi
        install
        write_config
        local cp="$DIR/conf:$JAR"
        local jar
        for jar in slf4j-log4j12.jar log4j-1.2.jar; do
            [[ -f "/usr/share/java/$jar" ]] && cp="$cp:/usr/share/java/$jar"
        done
        log "starting ZooKeeper in $DIR (127.0.0.1:$PORT, log $DIR/zookeeper.log)"
        # setsid: the server outlives the shell that started it (CI runs start,
        # then cargo test, then stop as separate steps).
        setsid java -Xms32M -Xmx"$HEAP" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
            -Djava.net.preferIPv4Stack=true \
            -Dlog4j.configuration="file:$DIR/conf/log4j.properties" \
            -Dzookeeper.log.dir="$DIR" \
            -cp "$cp" org.apache.zookeeper.server.ZooKeeperServerMain "$DIR/conf/zoo.cfg" \
            >"$DIR/stdout.log" 2>&1 </dev/null &
        echo $! >"$DIR/zookeeper.pid"
    fi
    local deadline=$((SECONDS + START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if answers; then
            log "ready on 127.0.0.1:$PORT (pid $(cat "$DIR/zookeeper.pid"))"
            echo "127.0.0.1:$PORT"
            return 0
        fi
        if ! pid_alive; then
            log "the server exited during startup; last lines of its logs:"
            tail -n 20 "$DIR/stdout.log" >&2 || true
            tail -n 30 "$DIR/zookeeper.log" >&2 || true
            rm -f "$DIR/zookeeper.pid"
            exit 1
        fi
        sleep 0.2
    done
    log "no 'imok' on 127.0.0.1:$PORT within ${START_TIMEOUT}s; last lines of $DIR/zookeeper.log:"
    tail -n 30 "$DIR/zookeeper.log" >&2 || true
    exit 1
}

stop() {
    pidfile_stop "$DIR/zookeeper.pid"
}

status() {
    if pid_alive && answers; then
        echo "127.0.0.1:$PORT"
        return 0
    fi
    if pid_alive; then
        log "pid $(cat "$DIR/zookeeper.pid") alive, not answering ruok on 127.0.0.1:$PORT"
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
        echo "export PACELINE_ZOOKEEPER=127.0.0.1:$PORT"
        if [[ -s "$DIR/auth/paceline-password" ]]; then
            echo "export PACELINE_ZOOKEEPER_USER=paceline"
            echo "export PACELINE_ZOOKEEPER_PASSWORD_FILE=$DIR/auth/paceline-password"
        fi
        ;;
    *) sed -n '2,32p' "$0" >&2; exit 64 ;;
esac
