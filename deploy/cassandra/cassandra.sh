#!/usr/bin/env bash
# Apache Cassandra for Paceline: fetch the jars from Maven Central, run one
# node on loopback, wait for CQL, stop it by pid.
#
#   deploy/cassandra/cassandra.sh fetch            download jars into the cache (once)
#   deploy/cassandra/cassandra.sh start  [DIR]     fetch if needed, start a node in DIR, wait for CQL
#   deploy/cassandra/cassandra.sh stop   [DIR]     stop the node started in DIR (by its pid file)
#   deploy/cassandra/cassandra.sh status [DIR]     exit 0 and print the address if the node answers
#   deploy/cassandra/cassandra.sh env    [DIR]     print the `export PACELINE_CASSANDRA…=` lines below
#
# Every command is idempotent: `start` on a running node only checks it,
# `stop` on a stopped one does nothing.
#
# Security (decision 0028). The node requires a login (PasswordAuthenticator,
# CassandraAuthorizer) and offers TLS on its CQL port. On its first start the
# script makes, in DIR/auth (mode 700, files 600):
#   paceline-password   the password of role `paceline`, which may create and
#                       use every keyspace (a test and development grant)
#   superuser-password  the new password of the default superuser `cassandra`
#                       (cassandra/cassandra no longer works)
# and in DIR/tls a self-signed certificate for 127.0.0.1 and localhost:
#   ca.pem              what clients trust (PACELINE_CASSANDRA_CA_FILE)
#   node.p12            the node's key and certificate (password in keystore-password)
#   client.pem, client-key.pem   the client certificate a TLS client must show
#                       (PACELINE_CASSANDRA_CERT_FILE, _KEY_FILE; truststore.p12)
# TLS is optional on the port (clients may still connect in plain TCP), so
# tools that know no TLS keep working; production sets `optional: false`.
# `env` prints PACELINE_CASSANDRA, PACELINE_CASSANDRA_USER,
# PACELINE_CASSANDRA_PASSWORD_FILE, PACELINE_CASSANDRA_CA_FILE,
# PACELINE_CASSANDRA_CERT_FILE and PACELINE_CASSANDRA_KEY_FILE, which the
# tests and `paceline bench storage` read.
#
# A node in DIR started by an older version of this script (no login) is
# restarted with the new configuration by `start`; its data is kept.
#
# Environment (all optional):
#   CASSANDRA_VERSION   cassandra-all version (default 5.0.9)
#   CASSANDRA_CACHE     where the jars go (default ~/.cache/paceline/cassandra-$VERSION)
#   CASSANDRA_DIR       node directory when DIR is not given (default /tmp/paceline-cassandra)
#   CASSANDRA_PORT      CQL port (default: the one `start` recorded in DIR, else 9042);
#                       storage port is CQL port - 2042 (7000)
#   CASSANDRA_HEAP      max heap (default 1G: a test node on a 2-core, 24 GiB machine;
#                       benchmarks of 100,000 jobs want 2G)
#   CASSANDRA_START_TIMEOUT  seconds to wait for CQL (default 180)
#
# The node is tuned for tests and small single-node deployments: one token,
# no JMX, no auto snapshots, short gossip waits. A production cluster should
# use Cassandra's own packaging; this script is the quick start.
set -euo pipefail

VERSION="${CASSANDRA_VERSION:-5.0.9}"
CACHE="${CASSANDRA_CACHE:-${HOME:-/root}/.cache/paceline/cassandra-$VERSION}"
HEAP="${CASSANDRA_HEAP:-1G}"
START_TIMEOUT="${CASSANDRA_START_TIMEOUT:-180}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The login the script creates for Paceline.
ROLE=paceline
# Bumped when the node's configuration changes in a way a running node must
# be restarted for; `start` compares it with the running node's.
CONFIG_GENERATION=4

cmd="${1:-}"
DIR="${2:-${CASSANDRA_DIR:-/tmp/paceline-cassandra}}"

log() { echo "cassandra.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# The port: CASSANDRA_PORT, else what `start` recorded in DIR, else 9042.
if [[ -n "${CASSANDRA_PORT:-}" ]]; then
    PORT="$CASSANDRA_PORT"
elif [[ -f "$DIR/port" ]]; then
    PORT="$(cat "$DIR/port")"
else
    PORT=9042
fi
[[ "$PORT" =~ ^[0-9]+$ ]] && ((PORT > 2042 && PORT < 65536)) || die "bad port '$PORT' (must be above 2042)"
STORAGE_PORT="$((PORT - 2042))"

# --- fetch -------------------------------------------------------------------

fetch() {
    if [[ -f "$CACHE/lib/.complete" ]]; then
        return 0
    fi
    if ! command -v mvn >/dev/null || ! command -v java >/dev/null; then
        # A fresh CI machine may lack them; install from Debian when we can.
        if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
            log "installing maven and a JDK with apt-get"
            apt-get update -qq >&2 && apt-get install -y -qq maven openjdk-17-jdk-headless >&2 \
                || die "apt-get could not install maven/openjdk-17"
        fi
    fi
    command -v mvn >/dev/null || die "mvn not found (apt-get install -y maven)"
    command -v java >/dev/null || die "java not found (Java 11 or 17 is needed)"
    mkdir -p "$CACHE"
    # A throwaway pom whose only dependency is cassandra-all; copy-dependencies
    # then brings the server jar and its whole runtime classpath.
    cat >"$CACHE/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.paceline</groupId>
  <artifactId>cassandra-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.cassandra</groupId>
      <artifactId>cassandra-all</artifactId>
      <version>$VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
    log "fetching cassandra-all $VERSION and its dependencies into $CACHE/lib"
    rm -rf "$CACHE/lib.partial"
    mvn -B -q -f "$CACHE/pom.xml" dependency:copy-dependencies \
        -DoutputDirectory="$CACHE/lib.partial" -DincludeScope=runtime >&2 \
        || die "mvn could not fetch cassandra-all $VERSION"
    ls "$CACHE/lib.partial"/cassandra-all-*.jar >/dev/null 2>&1 || die "cassandra-all jar missing after fetch"
    rm -rf "$CACHE/lib"
    mv "$CACHE/lib.partial" "$CACHE/lib"
    touch "$CACHE/lib/.complete"
}

# --- configuration -----------------------------------------------------------

# A password: 32 letters and digits from the kernel's random source.
random_password() {
    local pw=""
    while ((${#pw} < 32)); do
        pw+="$(head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')"
    done
    echo "${pw:0:32}"
}

# The node's TLS key and self-signed certificate (for 127.0.0.1 and
# localhost), made once with Java's keytool; and a client key and
# self-signed certificate (openssl), the only one the node's truststore holds.
make_tls() {
    local tls="$DIR/tls" f missing=0
    for f in node.p12 ca.pem keystore-password truststore.p12 client.pem client-key.pem; do
        [[ -f "$tls/$f" ]] || missing=1
    done
    ((missing)) || return 0
    command -v keytool >/dev/null || die "keytool not found (it comes with the JDK: apt-get install -y openjdk-17-jdk-headless)"
    command -v openssl >/dev/null || die "openssl not found (apt-get install -y openssl)"
    rm -rf "$tls"
    (umask 077 && mkdir -p "$tls" && random_password >"$tls/keystore-password")
    local pw
    pw="$(cat "$tls/keystore-password")"
    keytool -genkeypair -alias node -keyalg RSA -keysize 2048 -validity 3650 \
        -dname "CN=paceline-test-cassandra" -ext "SAN=ip:127.0.0.1,dns:localhost" \
        -keystore "$tls/node.p12" -storetype PKCS12 -storepass "$pw" -keypass "$pw" >/dev/null 2>&1 \
        || die "keytool could not make the node's key"
    keytool -exportcert -rfc -alias node -keystore "$tls/node.p12" -storetype PKCS12 -storepass "$pw" \
        -file "$tls/ca.pem" >/dev/null 2>&1 || die "keytool could not export the node's certificate"
    (umask 077 && openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=paceline" \
        -keyout "$tls/client-key.pem" -out "$tls/client.pem" >/dev/null 2>&1) \
        || die "openssl could not make the client's key"
    keytool -importcert -noprompt -alias paceline-client -file "$tls/client.pem" \
        -keystore "$tls/truststore.p12" -storetype PKCS12 -storepass "$pw" >/dev/null 2>&1 \
        || die "keytool could not make the node's truststore"
    chmod 600 "$tls/node.p12" "$tls/truststore.p12" "$tls/client-key.pem"
    chmod 644 "$tls/client.pem"
    chmod 644 "$tls/ca.pem"
    chmod 755 "$tls"
}

# The passwords of the superuser and of Paceline's role, made once.
make_passwords() {
    local auth="$DIR/auth"
    (umask 077 && mkdir -p "$auth" && chmod 700 "$auth")
    local f
    for f in superuser-password "$ROLE-password"; do
        [[ -s "$auth/$f" ]] || (umask 077 && random_password >"$auth/$f")
    done
}

# Once the node answers CQL: the superuser gets its own password and the
# role is created (deploy/cassandra/AuthSetup.java, with the node's jars).
setup_auth() {
    [[ -f "$DIR/auth/ready" ]] && return 0
    log "setting up the login: role $ROLE, a new superuser password (in $DIR/auth)"
    if ! java -cp "$CACHE/lib/*" -Dlogback.configurationFile="file://$DIR/conf/logback-tools.xml" \
        "$HERE/AuthSetup.java" 127.0.0.1 "$PORT" "$DIR/auth/superuser-password" "$ROLE" "$DIR/auth/$ROLE-password" \
        >"$DIR/logs/auth-setup.log" 2>&1; then
        tail -n 20 "$DIR/logs/auth-setup.log" >&2 || true
        die "could not set up the login on the node in $DIR (log: $DIR/logs/auth-setup.log)"
    fi
    touch "$DIR/auth/ready"
}

write_config() {
    mkdir -p "$DIR/conf" "$DIR/data" "$DIR/commitlog" "$DIR/saved_caches" "$DIR/hints" "$DIR/cdc" "$DIR/logs"
    make_tls
    make_passwords
    echo "$PORT" >"$DIR/port"
    # The file holds the keystore password: readable by its owner only.
    (umask 077 && cat >"$DIR/conf/cassandra.yaml") <<EOF
# Written by deploy/cassandra/cassandra.sh: one node on loopback.
# paceline-config-generation: $CONFIG_GENERATION
cluster_name: paceline
num_tokens: 1
initial_token: 0
allocate_tokens_for_local_replication_factor: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:$STORAGE_PORT"
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: $STORAGE_PORT
native_transport_port: $PORT
start_native_transport: true
endpoint_snitch: SimpleSnitch
data_file_directories:
  - $DIR/data
commitlog_directory: $DIR/commitlog
saved_caches_directory: $DIR/saved_caches
hints_directory: $DIR/hints
cdc_raw_directory: $DIR/cdc
# Durability: periodic sync, as Cassandra ships; acknowledged writes are in
# the commit log of a quorum of replicas. A one-node dev cluster is only as
# durable as that 10 s window; production uses three or more replicas.
commitlog_sync: periodic
commitlog_sync_period: 10000ms
commitlog_segment_size: 32MiB
# Small and quiet for tests.
auto_snapshot: false
snapshot_on_duplicate_row_detection: false
concurrent_reads: 8
concurrent_writes: 8
concurrent_counter_writes: 4
concurrent_compactors: 1
compaction_throughput: 0MiB/s
# Unslabbed: a slabbed memtable takes 1 MiB regions per table written to,
# and a test run writes to a few hundred small tables (one keyspace per test).
memtable_allocation_type: unslabbed_heap_buffers
key_cache_size: 16MiB
# A login is required (role $ROLE, made by the script) and permissions are
# checked; see DIR/auth.
authenticator: PasswordAuthenticator
authorizer: CassandraAuthorizer
role_manager: CassandraRoleManager
# TLS on the CQL port with the script's self-signed certificate. Optional:
# plain TCP is still accepted on the same port (production: optional: false).
# A TLS client must show the script's client certificate (DIR/tls/client.pem).
client_encryption_options:
  enabled: true
  optional: true
  keystore: $DIR/tls/node.p12
  keystore_password: $(cat "$DIR/tls/keystore-password")
  store_type: PKCS12
  require_client_auth: true
  truststore: $DIR/tls/truststore.p12
  truststore_password: $(cat "$DIR/tls/keystore-password")
user_defined_functions_enabled: false
materialized_views_enabled: false
sasi_indexes_enabled: false
# Lightweight transactions: Paxos v2 needs one fewer round trip.
paxos_variant: v2
read_request_timeout: 10000ms
write_request_timeout: 10000ms
cas_contention_timeout: 5000ms
request_timeout: 20000ms
disk_failure_policy: stop
commit_failure_policy: stop
EOF
    chmod 600 "$DIR/conf/cassandra.yaml"
    cat >"$DIR/conf/logback.xml" <<EOF
<configuration scan="false">
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>$DIR/logs/system.log</file>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE" /></root>
</configuration>
EOF
    cat >"$DIR/conf/logback-tools.xml" <<EOF
<configuration scan="false">
  <appender name="ERR" class="ch.qos.logback.core.ConsoleAppender">
    <target>System.err</target>
    <encoder><pattern>%-5level %logger{20} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="ERR" /></root>
</configuration>
EOF
}

# Whether the node in DIR runs this script's current configuration.
config_current() {
    grep -q "^# paceline-config-generation: $CONFIG_GENERATION\$" "$DIR/conf/cassandra.yaml" 2>/dev/null
}

# --- process control ---------------------------------------------------------

pid_alive() {
    [[ -f "$DIR/cassandra.pid" ]] || return 1
    local pid
    pid="$(cat "$DIR/cassandra.pid")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null
}

cql_answers() {
    # Bash's /dev/tcp: the image has no nc. A CQL OPTIONS frame (v4) must get
    # a SUPPORTED frame (opcode 0x06) back; a bare open port is not enough.
    local reply
    reply="$(
        timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT && printf '\x04\x00\x00\x01\x05\x00\x00\x00\x00' >&3 && head -c 5 <&3 | od -An -tx1" 2>/dev/null
    )" || return 1
    [[ "$(echo "$reply" | awk '{print $5}')" == "06" ]]
}

start() {
    if pid_alive && ! config_current; then
        log "the node in $DIR was started by an older cassandra.sh (an older login or TLS setup); restarting it with the current configuration (data kept)"
        stop
    fi
    if pid_alive && cql_answers; then
        setup_auth
        log "already running (pid $(cat "$DIR/cassandra.pid")) on 127.0.0.1:$PORT"
        echo "127.0.0.1:$PORT"
        return 0
    fi
    if pid_alive; then
        log "pid $(cat "$DIR/cassandra.pid") alive but CQL not answering yet; waiting"
    else
        if cql_answers; then
            die "port $PORT already answers CQL but not from a node started in $DIR"
        fi
        fetch
        write_config
        local lib="$CACHE/lib"
        local jamm
        jamm="$(ls "$lib"/jamm-*.jar 2>/dev/null | head -1 || true)"
        local -a jvm=(
            -Xms"$HEAP" -Xmx"$HEAP" -Xss512k
            -XX:+UseG1GC -XX:MaxGCPauseMillis=200 -XX:+UseStringDeduplication
            -XX:+ExitOnOutOfMemoryError -XX:TieredStopAtLevel=1
            -XX:CICompilerCount=2 -XX:ParallelGCThreads=2 -XX:ConcGCThreads=1
            -Djava.net.preferIPv4Stack=true
            -Dcassandra.config="file://$DIR/conf/cassandra.yaml"
            -Dlogback.configurationFile="file://$DIR/conf/logback.xml"
            -Dcassandra.logdir="$DIR/logs"
            -Dcassandra.storagedir="$DIR"
            -Dcassandra-foreground=yes
            -Dcassandra.skip_wait_for_gossip_to_settle=0
            -Dcassandra.ring_delay_ms=100
            -Dcassandra.superuser_setup_delay_ms=0
            -Dcassandra.auto_bootstrap=false
            -Dcassandra.disable_auth_caches_remote_configuration=true
            -Dcassandra.migration_task_wait_in_seconds=0
            -Dcassandra.gossip_settle_min_wait_ms=0
            -Dcassandra.gossip_settle_interval_ms=100
            -Djdk.attach.allowAttachSelf=true
            -Dio.netty.tryReflectionSetAccessible=true
            --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
            --add-exports java.base/jdk.internal.ref=ALL-UNNAMED
            --add-exports java.base/sun.nio.ch=ALL-UNNAMED
            --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED
            --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED
            --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED
            --add-exports java.sql/java.sql=ALL-UNNAMED
            --add-exports java.base/java.lang.ref=ALL-UNNAMED
            --add-exports jdk.unsupported/sun.misc=ALL-UNNAMED
            --add-opens java.base/java.lang.module=ALL-UNNAMED
            --add-opens java.base/jdk.internal.loader=ALL-UNNAMED
            --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
            --add-opens java.base/jdk.internal.reflect=ALL-UNNAMED
            --add-opens java.base/jdk.internal.math=ALL-UNNAMED
            --add-opens java.base/jdk.internal.module=ALL-UNNAMED
            --add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED
            --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
            --add-opens java.base/sun.nio.ch=ALL-UNNAMED
            --add-opens java.base/java.io=ALL-UNNAMED
            --add-opens java.base/java.nio=ALL-UNNAMED
            --add-opens java.base/java.util.concurrent=ALL-UNNAMED
            --add-opens java.base/java.util=ALL-UNNAMED
            --add-opens java.base/java.util.concurrent.atomic=ALL-UNNAMED
            --add-opens java.base/java.lang=ALL-UNNAMED
            --add-opens java.base/java.math=ALL-UNNAMED
            --add-opens java.base/java.lang.reflect=ALL-UNNAMED
            --add-opens java.base/java.net=ALL-UNNAMED
        )
        if [[ -n "$jamm" ]]; then
            jvm+=("-javaagent:$jamm")
        fi
        log "starting Cassandra $VERSION in $DIR (heap $HEAP, CQL 127.0.0.1:$PORT)"
        # setsid: the node outlives the shell that started it (CI runs start,
        # then cargo test, then stop as separate steps).
        setsid java "${jvm[@]}" -cp "$DIR/conf:$lib/*" org.apache.cassandra.service.CassandraDaemon \
            >"$DIR/logs/stdout.log" 2>&1 </dev/null &
        echo $! >"$DIR/cassandra.pid"
    fi
    local deadline=$((SECONDS + START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if cql_answers; then
            log "CQL answers on 127.0.0.1:$PORT after ${SECONDS}s (pid $(cat "$DIR/cassandra.pid"))"
            setup_auth
            echo "127.0.0.1:$PORT"
            return 0
        fi
        if ! pid_alive; then
            log "the node exited during startup; last lines of its logs:"
            tail -n 30 "$DIR/logs/stdout.log" >&2 || true
            tail -n 30 "$DIR/logs/system.log" >&2 || true
            exit 1
        fi
        sleep 1
    done
    log "CQL did not answer within ${START_TIMEOUT}s; last lines of system.log:"
    tail -n 30 "$DIR/logs/system.log" >&2 || true
    exit 1
}

stop() {
    if ! pid_alive; then
        log "not running in $DIR"
        rm -f "$DIR/cassandra.pid"
        return 0
    fi
    local pid
    pid="$(cat "$DIR/cassandra.pid")"
    log "stopping pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$DIR/cassandra.pid"; return 0; }
        sleep 1
    done
    log "pid $pid ignored SIGTERM for 30 s; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$DIR/cassandra.pid"
}

status() {
    if pid_alive && cql_answers; then
        echo "127.0.0.1:$PORT"
        return 0
    fi
    if pid_alive; then
        log "pid $(cat "$DIR/cassandra.pid") alive, CQL not answering"
        return 2
    fi
    log "not running in $DIR"
    return 3
}

case "$cmd" in
    fetch) fetch ;;
    start) start ;;
    stop) stop ;;
    status) status ;;
    env)
        echo "export PACELINE_CASSANDRA=127.0.0.1:$PORT"
        echo "export PACELINE_CASSANDRA_USER=$ROLE"
        echo "export PACELINE_CASSANDRA_PASSWORD_FILE=$DIR/auth/$ROLE-password"
        echo "export PACELINE_CASSANDRA_CA_FILE=$DIR/tls/ca.pem"
        echo "export PACELINE_CASSANDRA_CERT_FILE=$DIR/tls/client.pem"
        echo "export PACELINE_CASSANDRA_KEY_FILE=$DIR/tls/client-key.pem"
        ;;
    *) sed -n '2,47p' "$0" >&2; exit 64 ;;
esac
