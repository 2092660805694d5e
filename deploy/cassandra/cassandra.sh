#!/usr/bin/env bash
# Apache Cassandra for Paceline: fetch the jars from Maven Central, run one
# node, or a cluster of N nodes, on loopback, wait for CQL, stop by pid.
#
#   deploy/cassandra/cassandra.sh fetch            download jars into the cache (once)
#   deploy/cassandra/cassandra.sh start  [DIR]     fetch if needed, start a node in DIR, wait for CQL
#   deploy/cassandra/cassandra.sh start-cluster [DIR] [N]
#                                                  start N nodes (default 3) on 127.0.0.1 … 127.0.0.N,
#                                                  one after the other, each in DIR/nodeI
#   deploy/cassandra/cassandra.sh stop   [DIR]     stop the node, or every node of the cluster, in DIR
#   deploy/cassandra/cassandra.sh status [DIR]     exit 0 and print the address(es) if every node answers
#   deploy/cassandra/cassandra.sh env    [DIR]     print the `export PACELINE_CASSANDRA…=` lines below
#   deploy/cassandra/cassandra.sh stop-node  DIR I [kill]   stop node I of a cluster (SIGTERM; `kill`: SIGKILL)
#   deploy/cassandra/cassandra.sh start-node DIR I          start node I of a cluster again, wait for CQL
#
# Every command is idempotent: `start` on a running node only checks it,
# `stop` on a stopped one does nothing.
#
# A cluster (decision 0049): node I listens on 127.0.0.I (Linux routes all
# of 127.0.0.0/8 to the loopback device, no setup needed), every node on the
# same ports (CQL default 19042, storage 17000, so a single node on 9042 can
# run beside it), its own data in DIR/nodeI, a heap of CASSANDRA_HEAP
# (default 640M for a cluster) and one token each, evenly spaced. The login
# and TLS files are shared (DIR/auth, DIR/tls; the certificate names every
# node's address) and system_auth is replicated to every node, so a login
# works with one node down. `env` then prints every node as a contact point
# and PACELINE_CASSANDRA_REPLICATION_FACTOR=N and
# PACELINE_CASSANDRA_CONSISTENCY=quorum, which the tests and benchmarks use
# to create their keyspaces with N replicas and read and write at QUORUM.
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
#   CASSANDRA_PORT      CQL port (default: the one `start` recorded in DIR, else 9042,
#                       19042 for a cluster); storage port is CQL port - 2042 (7000)
#   CASSANDRA_UNSAFE_SYSTEM  1: the node does not flush its system tables on
#                       schema changes (-Dcassandra.unsafesystem=true): keyspaces
#                       are created several times faster, and a crash can lose
#                       recent schema. scripts/test sets it for its test node.
#   CASSANDRA_HEAP      max heap (default 1G: a test node on a 2-core, 24 GiB machine;
#                       benchmarks of 100,000 jobs want 2G; 640M per node of a cluster)
#   CASSANDRA_START_TIMEOUT  seconds to wait for CQL (default 180)
#   CASSANDRA_JIT       full (default): the JVM's whole JIT, C1 then C2, what a
#                       node serving Paceline should run; quick: C1 only
#                       (-XX:TieredStopAtLevel=1), which starts a node and runs
#                       short tests on less CPU but writes slower once warm.
#                       scripts/test sets quick for its test nodes. Read when a
#                       node starts: a running node keeps its own (stop it first).
#
# The node is tuned for tests and small single-node deployments: one token,
# no JMX, no auto snapshots, short gossip waits. A production cluster should
# use Cassandra's own packaging; this script is the quick start.
set -euo pipefail

VERSION="${CASSANDRA_VERSION:-5.0.9}"
CACHE="${CASSANDRA_CACHE:-${HOME:-/root}/.cache/paceline/cassandra-$VERSION}"
START_TIMEOUT="${CASSANDRA_START_TIMEOUT:-180}"
JIT="${CASSANDRA_JIT:-full}"
case "$JIT" in quick | full) ;; *) echo "cassandra.sh: CASSANDRA_JIT must be quick or full, not $JIT" >&2; exit 2 ;; esac
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The login the script creates for Paceline.
ROLE=paceline
# Bumped when the node's configuration changes in a way a running node must
# be restarted for; `start` compares it with the running node's.
CONFIG_GENERATION=4

cmd="${1:-}"
DEFAULT_DIR=/tmp/paceline-cassandra
[[ "$cmd" == start-cluster ]] && DEFAULT_DIR=/tmp/paceline-cassandra-cluster
DIR="${2:-${CASSANDRA_DIR:-$DEFAULT_DIR}}"

log() { echo "cassandra.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# DIR holds one node, or a cluster (a file DIR/cluster with the node count,
# a directory DIR/nodeI per node). NODE_DIR, ADDR: the node acted on.
NODES=0
if [[ "$cmd" == start-cluster ]]; then
    NODES="${3:-3}"
    [[ "$NODES" =~ ^[0-9]+$ ]] && ((NODES >= 1 && NODES <= 9)) || die "bad node count '$NODES' (1-9)"
elif [[ -f "$DIR/cluster" ]]; then
    NODES="$(cat "$DIR/cluster")"
fi
NODE_DIR="$DIR"
ADDR=127.0.0.1
TLS_DIR="$DIR/tls"
AUTH_DIR="$DIR/auth"
HEAP="${CASSANDRA_HEAP:-1G}"
((NODES > 0)) && HEAP="${CASSANDRA_HEAP:-640M}"

# The port: CASSANDRA_PORT, else what `start` recorded in DIR, else 9042
# (19042 for a cluster).
if [[ -n "${CASSANDRA_PORT:-}" ]]; then
    PORT="$CASSANDRA_PORT"
elif [[ -f "$DIR/port" ]]; then
    PORT="$(cat "$DIR/port")"
elif ((NODES > 0)); then
    PORT=19042
else
    PORT=9042
fi
[[ "$PORT" =~ ^[0-9]+$ ]] && ((PORT > 2042 && PORT < 65536)) || die "bad port '$PORT' (must be above 2042)"
STORAGE_PORT="$((PORT - 2042))"

# Points NODE_DIR and ADDR at node I of the cluster in DIR.
select_node() {
    local i="$1"
    [[ "$i" =~ ^[0-9]+$ ]] && ((i >= 1 && i <= NODES)) || die "no node '$i' in the cluster in $DIR (1-$NODES)"
    NODE_DIR="$DIR/node$i"
    ADDR="127.0.0.$i"
    NODE_INDEX="$i"
}
NODE_INDEX=1

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

# The names the node certificate carries: every node's address.
tls_names() {
    local names="ip:127.0.0.1" i
    for ((i = 2; i <= NODES; i++)); do names+=",ip:127.0.0.$i"; done
    echo "$names,dns:localhost"
}

# Node I's token: one per node, evenly spaced over Murmur3's range.
node_token() {
    if ((NODES <= 1)); then echo 0; return; fi
    local step=$((9223372036854775807 / NODES * 2))
    echo $((-9223372036854775807 - 1 + (NODE_INDEX - 1) * step))
}

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
    local tls="$TLS_DIR" f missing=0
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
        -dname "CN=paceline-test-cassandra" -ext "SAN=$(tls_names)" \
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
    local auth="$AUTH_DIR"
    (umask 077 && mkdir -p "$auth" && chmod 700 "$auth")
    local f
    for f in superuser-password "$ROLE-password"; do
        [[ -s "$auth/$f" ]] || (umask 077 && random_password >"$auth/$f")
    done
}

# Once the node answers CQL: the superuser gets its own password and the
# role is created (deploy/cassandra/AuthSetup.java, with the node's jars).
# In a cluster, system_auth is first given a replica on every node.
setup_auth() {
    [[ -f "$AUTH_DIR/ready" ]] && return 0
    log "setting up the login: role $ROLE, a new superuser password (in $AUTH_DIR)"
    local -a rf=()
    ((NODES > 1)) && rf=("$NODES")
    if ! java -cp "$CACHE/lib/*" -Dlogback.configurationFile="file://$NODE_DIR/conf/logback-tools.xml" \
        "$HERE/AuthSetup.java" "$ADDR" "$PORT" "$AUTH_DIR/superuser-password" "$ROLE" "$AUTH_DIR/$ROLE-password" \
        "${rf[@]}" >"$NODE_DIR/logs/auth-setup.log" 2>&1; then
        tail -n 20 "$NODE_DIR/logs/auth-setup.log" >&2 || true
        die "could not set up the login on the node in $NODE_DIR (log: $NODE_DIR/logs/auth-setup.log)"
    fi
    touch "$AUTH_DIR/ready"
}

write_config() {
    local D="$NODE_DIR" cluster_name=paceline
    ((NODES > 0)) && cluster_name=paceline-cluster
    mkdir -p "$D/conf" "$D/data" "$D/commitlog" "$D/saved_caches" "$D/hints" "$D/cdc" "$D/logs"
    make_tls
    make_passwords
    echo "$PORT" >"$DIR/port"
    # The file holds the keystore password: readable by its owner only.
    (umask 077 && cat >"$D/conf/cassandra.yaml") <<EOF
# Written by deploy/cassandra/cassandra.sh: a node on loopback ($ADDR).
# paceline-config-generation: $CONFIG_GENERATION
cluster_name: $cluster_name
num_tokens: 1
initial_token: $(node_token)
allocate_tokens_for_local_replication_factor: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:$STORAGE_PORT"
listen_address: $ADDR
rpc_address: $ADDR
storage_port: $STORAGE_PORT
native_transport_port: $PORT
start_native_transport: true
endpoint_snitch: SimpleSnitch
data_file_directories:
  - $D/data
commitlog_directory: $D/commitlog
saved_caches_directory: $D/saved_caches
hints_directory: $D/hints
cdc_raw_directory: $D/cdc
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
  keystore: $TLS_DIR/node.p12
  keystore_password: $(cat "$TLS_DIR/keystore-password")
  store_type: PKCS12
  require_client_auth: true
  truststore: $TLS_DIR/truststore.p12
  truststore_password: $(cat "$TLS_DIR/keystore-password")
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
    chmod 600 "$D/conf/cassandra.yaml"
    cat >"$D/conf/logback.xml" <<EOF
<configuration scan="false">
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>$D/logs/system.log</file>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE" /></root>
</configuration>
EOF
    cat >"$D/conf/logback-tools.xml" <<EOF
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
    grep -q "^# paceline-config-generation: $CONFIG_GENERATION\$" "$NODE_DIR/conf/cassandra.yaml" 2>/dev/null
}

# --- process control ---------------------------------------------------------

pid_alive() {
    [[ -f "$NODE_DIR/cassandra.pid" ]] || return 1
    local pid
    pid="$(cat "$NODE_DIR/cassandra.pid")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null
}

cql_answers() {
    # Bash's /dev/tcp: the image has no nc. A CQL OPTIONS frame (v4) must get
    # a SUPPORTED frame (opcode 0x06) back; a bare open port is not enough.
    local reply
    reply="$(
        timeout 3 bash -c "exec 3<>/dev/tcp/$ADDR/$PORT && printf '\x04\x00\x00\x01\x05\x00\x00\x00\x00' >&3 && head -c 5 <&3 | od -An -tx1" 2>/dev/null
    )" || return 1
    [[ "$(echo "$reply" | awk '{print $5}')" == "06" ]]
}

start() {
    if pid_alive && ! config_current; then
        log "the node in $NODE_DIR was started by an older cassandra.sh (an older login or TLS setup); restarting it with the current configuration (data kept)"
        stop
    fi
    if pid_alive && cql_answers; then
        ((NODES > 0)) || setup_auth
        log "already running (pid $(cat "$NODE_DIR/cassandra.pid")) on $ADDR:$PORT"
        echo "$ADDR:$PORT"
        return 0
    fi
    if pid_alive; then
        log "pid $(cat "$NODE_DIR/cassandra.pid") alive but CQL not answering yet; waiting"
    else
        if cql_answers; then
            die "port $PORT already answers CQL but not from a node started in $NODE_DIR"
        fi
        fetch
        write_config
        local lib="$CACHE/lib"
        local jamm
        jamm="$(ls "$lib"/jamm-*.jar 2>/dev/null | head -1 || true)"
        local -a jvm=(
            -Xms"$HEAP" -Xmx"$HEAP" -Xss512k
            -XX:+UseG1GC -XX:MaxGCPauseMillis=200 -XX:+UseStringDeduplication
            -XX:+ExitOnOutOfMemoryError
            -XX:CICompilerCount=2 -XX:ParallelGCThreads=2 -XX:ConcGCThreads=1
            -Djava.net.preferIPv4Stack=true
            -Dcassandra.config="file://$NODE_DIR/conf/cassandra.yaml"
            -Dlogback.configurationFile="file://$NODE_DIR/conf/logback.xml"
            -Dcassandra.logdir="$NODE_DIR/logs"
            -Dcassandra.storagedir="$NODE_DIR"
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
        if [[ "${CASSANDRA_UNSAFE_SYSTEM:-0}" == 1 ]]; then
            # Schema changes without flushing the system tables to disk:
            # a keyspace of twenty tables is made several times faster, and
            # a crash of the node can lose its recent schema. For test nodes
            # only (scripts/test sets it); never for data you keep.
            jvm+=(-Dcassandra.unsafesystem=true)
        fi
        if [[ "$JIT" == quick ]]; then
            jvm+=(-XX:TieredStopAtLevel=1)
        fi
        log "starting Cassandra $VERSION in $NODE_DIR (heap $HEAP, JIT $JIT, CQL $ADDR:$PORT)"
        # setsid: the node outlives the shell that started it (CI runs start,
        # then cargo test, then stop as separate steps).
        setsid java "${jvm[@]}" -cp "$NODE_DIR/conf:$lib/*" org.apache.cassandra.service.CassandraDaemon \
            >"$NODE_DIR/logs/stdout.log" 2>&1 </dev/null &
        echo $! >"$NODE_DIR/cassandra.pid"
    fi
    local deadline=$((SECONDS + START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if cql_answers; then
            log "CQL answers on $ADDR:$PORT after ${SECONDS}s (pid $(cat "$NODE_DIR/cassandra.pid"))"
            ((NODES > 0)) || setup_auth
            echo "$ADDR:$PORT"
            return 0
        fi
        if ! pid_alive; then
            log "the node exited during startup; last lines of its logs:"
            tail -n 30 "$NODE_DIR/logs/stdout.log" >&2 || true
            tail -n 30 "$NODE_DIR/logs/system.log" >&2 || true
            exit 1
        fi
        sleep 1
    done
    log "CQL did not answer within ${START_TIMEOUT}s; last lines of system.log:"
    tail -n 30 "$NODE_DIR/logs/system.log" >&2 || true
    exit 1
}

stop() {
    if ! pid_alive; then
        log "not running in $NODE_DIR"
        rm -f "$NODE_DIR/cassandra.pid"
        return 0
    fi
    local pid
    pid="$(cat "$NODE_DIR/cassandra.pid")"
    local sig="${1:-TERM}"
    log "stopping pid $pid ($ADDR, SIG$sig)"
    kill "-$sig" "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$NODE_DIR/cassandra.pid"; return 0; }
        sleep 1
    done
    log "pid $pid ignored SIGTERM for 30 s; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$NODE_DIR/cassandra.pid"
}

status() {
    if pid_alive && cql_answers; then
        echo "$ADDR:$PORT"
        return 0
    fi
    if pid_alive; then
        log "pid $(cat "$NODE_DIR/cassandra.pid") alive, CQL not answering"
        return 2
    fi
    log "not running in $NODE_DIR"
    return 3
}

# --- a cluster ---------------------------------------------------------------

contact_points() {
    local i out=""
    for ((i = 1; i <= NODES; i++)); do out+="${out:+,}127.0.0.$i:$PORT"; done
    echo "$out"
}

# Nodes join one after the other: two nodes bootstrapping at once would
# race for the ring (and this 2-core machine starts one JVM at a time
# faster than three together).
start_cluster() {
    if [[ -f "$DIR/cluster" && "$(cat "$DIR/cluster")" != "$NODES" ]]; then
        die "$DIR holds a cluster of $(cat "$DIR/cluster") nodes; stop it and remove the directory to change the count"
    fi
    if [[ -e "$DIR/conf/cassandra.yaml" ]]; then
        die "$DIR holds a single node; use another directory for a cluster"
    fi
    mkdir -p "$DIR"
    echo "$NODES" >"$DIR/cluster"
    echo "$PORT" >"$DIR/port"
    local i
    for ((i = 1; i <= NODES; i++)); do
        select_node "$i"
        start >/dev/null
    done
    select_node 1
    setup_auth
    contact_points
}

# Every node answering, else the first one that does not (exit 2 or 3).
cluster_status() {
    local i rc=0
    for ((i = 1; i <= NODES; i++)); do
        select_node "$i"
        if ! pid_alive; then
            log "node $i ($ADDR) not running"
            rc=3
        elif ! cql_answers; then
            log "node $i ($ADDR) pid $(cat "$NODE_DIR/cassandra.pid") alive, CQL not answering"
            ((rc)) || rc=2
        fi
    done
    ((rc)) && return "$rc"
    contact_points
}

case "$cmd" in
    fetch) fetch ;;
    start)
        ((NODES == 0)) || die "$DIR holds a cluster: use start-cluster, or start-node DIR I"
        start
        ;;
    start-cluster) start_cluster ;;
    start-node | stop-node)
        ((NODES > 0)) || die "no cluster in $DIR (start-cluster makes one)"
        select_node "${3:-}"
        if [[ "$cmd" == start-node ]]; then
            start
        else
            case "${4:-}" in
                "") stop ;;
                kill) stop KILL ;;
                *) die "stop-node DIR I [kill]" ;;
            esac
        fi
        ;;
    stop)
        if ((NODES > 0)); then
            for ((n = NODES; n >= 1; n--)); do select_node "$n"; stop; done
        else
            stop
        fi
        ;;
    status)
        if ((NODES > 0)); then cluster_status; else status; fi
        ;;
    env)
        if ((NODES > 0)); then
            echo "export PACELINE_CASSANDRA=$(contact_points)"
        else
            echo "export PACELINE_CASSANDRA=127.0.0.1:$PORT"
        fi
        echo "export PACELINE_CASSANDRA_USER=$ROLE"
        echo "export PACELINE_CASSANDRA_PASSWORD_FILE=$AUTH_DIR/$ROLE-password"
        echo "export PACELINE_CASSANDRA_CA_FILE=$TLS_DIR/ca.pem"
        echo "export PACELINE_CASSANDRA_CERT_FILE=$TLS_DIR/client.pem"
        echo "export PACELINE_CASSANDRA_KEY_FILE=$TLS_DIR/client-key.pem"
        if ((NODES > 1)); then
            echo "export PACELINE_CASSANDRA_REPLICATION_FACTOR=$((NODES < 3 ? NODES : 3))"
            echo "export PACELINE_CASSANDRA_CONSISTENCY=quorum"
        fi
        ;;
    *) sed -n '2,71p' "$0" >&2; exit 64 ;;
esac
