"""The crash torture's cluster (scripts/torture): the `paceline` server(s)
and agents it starts, SIGKILLs and starts again, the ports they listen on,
and the flag that stops the client and the kills when a server exits by
itself. The workload, the chaos and the checks stay in scripts/torture."""

import json
import os
import random
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
# Set when a server exits by itself: the client and the kills stop.
ABORT = threading.Event()
ABORT_WHY = []


def watchdog(procs):
    while not ABORT.is_set():
        for p in procs:
            why = p.died()
            if why:
                ABORT_WHY.append(why)
                ABORT.set()
                return
        time.sleep(0.5)


def log(msg):
    print(f"[torture {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port():
    """A free port below the kernel's ephemeral range. A port the kernel
    hands out (bind to 0) can be given again as the source port of any
    outgoing connection while its server is down or standing by (a standby
    does not listen on the agent port), and the server's later bind then
    fails; a production port (7400, 7401) is never in that range either."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randint(min(10000, low - 1000), low - 1)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


class Proc:
    """A server or agent process we start, kill and start again."""

    def __init__(self, name, argv, logfile, env=None):
        self.name, self.argv, self.logfile, self.env = name, argv, logfile, env
        self.p = None
        self.log_offset = 0
        self.starts = 0
        # Set while we have killed it on purpose and not started it again.
        self.expected_down = False

    def start(self):
        out = open(self.logfile, "ab")
        # Where this run's lines begin in the log (it is appended to).
        self.log_offset = out.tell()
        self.p = subprocess.Popen(self.argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=self.env)
        out.close()
        self.starts += 1
        self.expected_down = False

    def died(self):
        """The last lines of its log if it exited without being told to."""
        if self.p is None or self.expected_down or self.p.poll() is None:
            return None
        lines = Path(self.logfile).read_text(errors="replace").splitlines()
        return f"{self.name} exited by itself ({self.p.returncode}): " + " | ".join(l[:300] for l in lines[-2:])

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def kill9(self):
        self.expected_down = True
        if self.alive():
            self.p.send_signal(signal.SIGKILL)
            self.p.wait()

    def stop(self, timeout=30):
        self.expected_down = True
        if self.alive():
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()


class Cluster:
    def __init__(self, args, binary, work):
        self.args, self.binary, self.work = args, binary, work
        self.servers = []
        self.agents = []
        self.api = []
        agent_ports = []
        n_servers = 2 if args.zookeeper else 1
        for i in range(n_servers):
            api, agent_port = free_port(), free_port()
            self.api.append(f"127.0.0.1:{api}")
            agent_ports.append(agent_port)
            data = work / f"server-{i}"
            data.mkdir(parents=True)
            cfg = [
                f"data_dir: {data}",
                f"api_listen: 127.0.0.1:{api}",
                f"agent_listen: 127.0.0.1:{agent_port}",
                "hosts: {provider: agent}",
                # One agent CA for every server, so agents fail over between them.
                f"agent_pki_dir: {work / 'pki'}",
                "heartbeat_timeout_ms: 5000",
                "agent_heartbeat_ms: 1000",
            ]
            if args.backend == "cassandra":
                points = ", ".join(f'"{a}"' for a in args.cassandra.split(","))
                cfg += [
                    "storage:",
                    "  cassandra:",
                    f"    contact_points: [{points}]",
                    f"    keyspace: {args.keyspace}",
                ]
                # A cluster: its replication factor and QUORUM (cassandra.sh env).
                if args.cassandra_env.get("PACELINE_CASSANDRA_REPLICATION_FACTOR"):
                    rf = args.cassandra_env["PACELINE_CASSANDRA_REPLICATION_FACTOR"]
                    cfg += [f"    replication: {{class: SimpleStrategy, replication_factor: {rf}}}"]
                if args.cassandra_env.get("PACELINE_CASSANDRA_CONSISTENCY"):
                    cfg += [f"    consistency: {args.cassandra_env['PACELINE_CASSANDRA_CONSISTENCY']}"]
                # The node of deploy/cassandra requires a login and offers TLS.
                env = args.cassandra_env
                if env.get("PACELINE_CASSANDRA_USER"):
                    cfg += [
                        f"    username: {env['PACELINE_CASSANDRA_USER']}",
                        f"    password_file: {env['PACELINE_CASSANDRA_PASSWORD_FILE']}",
                    ]
                if env.get("PACELINE_CASSANDRA_CA_FILE"):
                    cfg += ["    tls:", f"      ca_file: {env['PACELINE_CASSANDRA_CA_FILE']}"]
                    if env.get("PACELINE_CASSANDRA_CERT_FILE"):
                        cfg += [
                            f"      cert_file: {env['PACELINE_CASSANDRA_CERT_FILE']}",
                            f"      key_file: {env['PACELINE_CASSANDRA_KEY_FILE']}",
                        ]
            if args.zookeeper:
                cfg += [
                    f"member_id: torture-{i}",
                    "membership:",
                    "  kind: zookeeper",
                    f"  connect: \"{args.zookeeper_addr}\"",
                    f"  cluster: {args.keyspace}",
                    "  session_timeout_ms: 3000",
                ]
                zenv = args.zookeeper_env
                if zenv.get("PACELINE_ZOOKEEPER_USER"):
                    cfg += [
                        "  auth:",
                        f"    user: {zenv['PACELINE_ZOOKEEPER_USER']}",
                        f"    password_file: {zenv['PACELINE_ZOOKEEPER_PASSWORD_FILE']}",
                    ]
            (data / "server.yaml").write_text("\n".join(cfg) + "\n")
            argv = [str(binary), "server", "--config", str(data / "server.yaml")]
            self.servers.append(Proc(f"server-{i}", argv, work / f"server-{i}.log"))
        managers = ",".join(f"http://127.0.0.1:{p}" for p in agent_ports)
        # A join token for the agents (each joins once, then keeps its certificate).
        made = subprocess.run(
            [str(binary), "agent-token", "create", "--ttl", "7d", "--pki-dir", str(work / "pki")],
            capture_output=True, text=True, check=True,
        ).stdout
        field = {k: v for k, _, v in (l.partition(": ") for l in made.splitlines()) if v}
        join = ["--join", field["token"], "--ca-hash", field["ca-hash"]]
        for i in range(args.agents):
            data = work / "agents" / f"t-{i}"
            data.mkdir(parents=True)
            (data / "agent.yaml").write_text(
                "heartbeat_interval_ms: 500\nreconnect_initial_ms: 50\nreconnect_max_ms: 500\n"
            )
            first = 40000 + i * 200
            argv = [
                str(binary), "agent", "--config", str(data / "agent.yaml"),
                "--manager", managers, "--data-dir", str(data / "data"), "--hostname", f"t-{i}",
                "--cpu-millis", "8000", "--memory-mib", "8192", "--disk-mib", "100000",
                "--port-range", f"{first}-{first + 199}",
            ] + join
            self.agents.append(Proc(f"agent-{i}", argv, data / "agent.log"))
        self.client_env = dict(os.environ, PACELINE_SERVER=",".join(f"http://{a}" for a in self.api))
        self.client_env.pop("PACELINE_TOKEN", None)

    def start(self):
        for s in self.servers:
            s.start()
        for a in self.api:
            if not wait_port(int(a.rsplit(":", 1)[1]), 120) and not self.args.zookeeper:
                raise SystemExit(f"the server did not listen on {a}; see {self.work}/server-0.log")
        for a in self.agents:
            a.start()

    def leader(self):
        """The server that leads (the only one without ZooKeeper). A standby
        forwards every call to the leader, so an answer does not tell them
        apart: each server's log does, by what its running process has said
        last ("leading every role" or "standing by")."""
        if len(self.servers) == 1:
            return self.servers[0]
        for s in self.servers:
            if not s.alive():
                continue
            with open(s.logfile, "rb") as f:
                f.seek(s.log_offset)
                text = f.read().decode(errors="replace")
            led = text.rfind("leading every role of this process")
            stood = max(text.rfind("standing by: campaigning"), text.rfind("shutting down as a standby"))
            if led > stood:
                return s
        return None

    def cli(self, argv, server=None, timeout=60):
        env = self.client_env if server is None else dict(self.client_env, PACELINE_SERVER=server)
        try:
            return subprocess.run([str(self.binary)] + argv, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 124, "", "timeout")

    def cli_json(self, argv, attempts=60):
        for _ in range(attempts):
            r = self.cli(argv + ["-o", "json"])
            if r.returncode == 0:
                return json.loads(r.stdout)
            time.sleep(1)
        raise RuntimeError(f"`paceline {' '.join(argv)}` kept failing: {r.stderr.strip()[-300:]}")

    def stop(self):
        for a in self.agents:
            a.stop()
        for s in self.servers:
            s.stop()
