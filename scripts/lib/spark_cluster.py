"""The clusters, lanes' shared checks and applications of scripts/spark-e2e
(its docstring says what the run does): `paceline dev` (Cluster) and a TLS
`paceline server` with one agent (TlsCluster) driven through the CLI, a
watcher sampling an executor job's task states, one PySpark application run
(App), and the configuration every application starts from."""

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

# scripts/lib/ → the repository.
ROOT = Path(__file__).resolve().parent.parent.parent
APP = ROOT / "integrations/spark/e2e/app.py"


def log(msg):
    lane = threading.current_thread().name
    lane = f" {lane}" if lane.startswith("lane") else ""
    print(f"[spark-e2e {time.strftime('%H:%M:%S')}{lane}] {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """`paceline dev` in its own process group, and the CLI against it."""

    started = []  # every cluster started, so an interrupted run can stop them

    def __init__(self, binary, work):
        self.binary = binary
        self.work = work
        self.port = free_port()
        self.server = f"http://127.0.0.1:{self.port}"
        self.master = f"local-paceline://127.0.0.1:{self.port}"
        self.cli_flags = []
        self.proc = None

    def make_token(self):
        # Tokens required, so every call (the CLI's and the driver's) carries one.
        made = subprocess.run([self.binary, "auth", "token", "--name", "spark-e2e", "--role", "admin"],
                              capture_output=True, text=True, check=True).stdout
        token = next(l.split(":", 1)[1].strip() for l in made.splitlines() if l.startswith("token:"))
        entry = "\n".join(l for l in made.splitlines() if l.startswith("  "))
        (self.work / "tokens.yaml").write_text(f"version: 1\nprincipals:\n{entry}\n")
        self.token_file = self.work / "token"
        self.token_file.write_text(token + "\n")
        self.token_file.chmod(0o600)

    def start(self):
        self.make_token()
        out = open(self.work / "dev.log", "wb")
        self.proc = subprocess.Popen(
            [self.binary, "dev", "--data-dir", str(self.work / "dev"), "--api-listen", f"127.0.0.1:{self.port}",
             "--tokens-file", str(self.work / "tokens.yaml")],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.work)
        Cluster.started.append(self)
        self.wait_ready("paceline dev", self.work / "dev.log")

    def wait_ready(self, what, log_path):
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"{what} exited ({self.proc.returncode}); see {log_path}")
            try:
                self.cli("pool", "list")
                return
            except RuntimeError:
                time.sleep(0.5)
        raise SystemExit(f"{what} did not answer within 120 s")

    def cli(self, *args):
        r = subprocess.run([self.binary, *args, "--server", self.server, "-o", "json",
                            "--token-file", str(self.token_file), *self.cli_flags],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"paceline {' '.join(args)}: {r.stderr.strip()}")
        return json.loads(r.stdout) if r.stdout.strip() else None

    def job_named(self, name):
        jobs = self.cli("job", "list", "--name", name) or []
        jobs = [j for j in jobs if (j.get("spec") or {}).get("name") == name] or jobs
        return jobs[0]["id"] if jobs else None

    def tasks(self, job_id):
        return self.cli("task", "list", job_id) or []

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class TlsCluster(Cluster):
    """`paceline server` with TLS on its API and tokens, and one real agent:
    what a driver dials with `spark.paceline.tls.caCertFile`."""

    def __init__(self, binary, work):
        super().__init__(binary, work / "tls")
        self.work.mkdir(parents=True, exist_ok=True)
        # The certificate names localhost and 127.0.0.1; the driver dials the name.
        self.server = f"https://localhost:{self.port}"
        self.master = f"local-paceline://localhost:{self.port}"
        self.agent = None

    def certificates(self):
        d = self.work / "certs"
        d.mkdir()

        def openssl(*args):
            subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

        openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key")
        openssl("req", "-x509", "-new", "-key", "ca.key", "-days", "2", "-subj", "/CN=spark-e2e CA", "-out", "ca.pem")
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "server.ec")
        openssl("pkcs8", "-topk8", "-nocrypt", "-in", "server.ec", "-out", "key.pem")
        openssl("req", "-new", "-key", "key.pem", "-subj", "/CN=localhost", "-out", "server.csr")
        (d / "ext.cnf").write_text(
            "basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "2", "-extfile", "ext.cnf", "-out", "cert.pem")
        return d

    def start(self):
        self.make_token()
        certs = self.certificates()
        self.ca = certs / "ca.pem"
        self.cli_flags = ["--ca-cert", str(self.ca)]
        agent_port = free_port()
        (self.work / "server.yaml").write_text("\n".join([
            f"data_dir: {self.work / 'data'}",
            f"api_listen: 127.0.0.1:{self.port}",
            f"agent_listen: 127.0.0.1:{agent_port}",
            "hosts: {provider: agent}",
            f"agent_pki_dir: {self.work / 'pki'}",
            f"tokens_file: {self.work / 'tokens.yaml'}",
            f"tls: {{cert_file: {certs / 'cert.pem'}, key_file: {certs / 'key.pem'}}}",
            "heartbeat_timeout_ms: 5000",
            "agent_heartbeat_ms: 1000",
        ]) + "\n")
        made = subprocess.run([self.binary, "agent-token", "create", "--ttl", "1h", "--pki-dir", str(self.work / "pki")],
                              capture_output=True, text=True, check=True).stdout
        field = {k: v for k, _, v in (l.partition(": ") for l in made.splitlines()) if v}
        self.proc = subprocess.Popen([self.binary, "server", "--config", str(self.work / "server.yaml")],
                                     stdout=open(self.work / "server.log", "wb"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.work)
        self.agent = subprocess.Popen(
            [self.binary, "agent", "--manager", f"https://127.0.0.1:{agent_port}", "--data-dir", str(self.work / "agent"),
             "--hostname", "tls-1", "--cpu-millis", "1000", "--memory-mib", "8192", "--disk-mib", "20000",
             "--port-range", "33000-33199", "--join", field["token"], "--ca-hash", field["ca-hash"]],
            stdout=open(self.work / "agent.log", "wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=self.work)
        self.wait_ready("paceline server (TLS)", self.work / "server.log")
        deadline = time.time() + 60
        while time.time() < deadline and not any(h.get("reachable") for h in self.cli("host", "list") or []):
            time.sleep(0.5)

    def stop(self):
        for proc in (self.agent, self.proc):
            if proc and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


class Watcher(threading.Thread):
    """Samples the executor job's task states every half second while an app runs."""

    def __init__(self, cluster, job_name):
        super().__init__(daemon=True)
        self.cluster, self.job_name = cluster, job_name
        self.job_id = None
        self.samples = []  # (time, Counter of states)
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                if self.job_id is None:
                    self.job_id = self.cluster.job_named(self.job_name)
                if self.job_id:
                    states = Counter(t["state"] for t in self.cluster.tasks(self.job_id))
                    self.samples.append((time.time(), states))
            except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError):
                pass
            self.done.wait(0.5)

    def max_of(self, state, since=0.0, until=float("inf")):
        return max((c[state] for t, c in self.samples if since <= t <= until), default=0)

    def stop(self):
        self.done.set()
        self.join(10)


class App:
    """One run of app.py; its stdout is read line by line for markers."""

    running = []  # every app started, so an interrupted run can stop them

    def __init__(self, env, work, cluster, mode, conf):
        self.env = env
        self.lines = []
        self.markers = {}
        args = [env["PACELINE_SPARK_PYTHON"], str(APP), mode, "--master", cluster.master]
        for k, v in conf.items():
            args += ["--conf", f"{k}={v}"]
        self.err_path = work / f"{conf['spark.app.name']}.driver.log"
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=open(self.err_path, "wb"), text=True,
                                     env=env, cwd=work, start_new_session=True)
        App.running.append(self.proc)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            word = line.split(" ", 1)[0]
            self.markers.setdefault(word, time.time())

    def wait_marker(self, word, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline and word not in self.markers and self.proc.poll() is None:
            time.sleep(0.1)
        return word in self.markers

    def finish(self, timeout):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.reader.join(5)
        for line in self.lines:
            if line.startswith("RESULT "):
                return self.proc.returncode, json.loads(line[len("RESULT "):])
        return self.proc.returncode, None

    def driver_log(self):
        return self.err_path.read_text(errors="replace")

    def wait_log(self, ok, timeout):
        """Until `ok(driver log)` holds, the driver exits or `timeout` passes."""
        deadline = time.time() + timeout
        while time.time() < deadline and not ok(self.driver_log()) and self.proc.poll() is None:
            time.sleep(0.5)
        return ok(self.driver_log())

    def release(self):
        """The slow stage runs at full speed from now on (E2E_RELEASE_FILE,
        set in --short only): what the scenario waited for has happened."""
        if self.env.get("E2E_RELEASE_FILE"):
            Path(self.env["E2E_RELEASE_FILE"]).touch()


def slow_env(env, work, name, short, secs=None):
    """The environment of a slow-count application: E2E_SLOW_SECS per
    partition, and in --short a release file (App.release) so that the stage
    is slow only until the scenario has seen its event."""
    env = dict(env)
    if secs is not None:
        env["E2E_SLOW_SECS"] = str(secs)
    if short:
        env["E2E_RELEASE_FILE"] = str(work / f"{name}.release")
    return env


class Checks:
    """Counts of checks passed and failed, shared by the lanes."""

    def __init__(self):
        self.passed, self.failed = 0, 0
        self.lock = threading.Lock()

    def check(self, ok, what):
        with self.lock:
            if ok:
                self.passed += 1
            else:
                self.failed += 1
        log(f"{'ok  ' if ok else 'FAIL'} {what}")
        return ok


def base_conf(cluster, jar, app_name, short):
    return {
        "spark.jars": jar,
        "spark.paceline.tokenFile": str(cluster.token_file),
        "spark.app.name": app_name,
        # Small asks so several executors fit two agents on a 2-core machine.
        "spark.paceline.executor.request.cores": "0.25",
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.driver.memory": "512m",
        "spark.paceline.executor.disk": "256m",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.paceline.executor.hostname": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.paceline.pollIntervalMs": "500",
        "spark.executorEnv.PYSPARK_PYTHON": os.environ["PYSPARK_PYTHON"],
        # `paceline dev` here enforces memory as an address-space rlimit
        # (no delegated cgroup v2), and a JVM reserves far more address space
        # than its heap: a generous overhead in the ask, fewer reservations
        # (code cache, class space, malloc arenas, GC threads). docs/spark.md.
        "spark.executor.memoryOverhead": "1536m",
        "spark.executor.extraJavaOptions": "-XX:ReservedCodeCacheSize=64m -XX:CompressedClassSpaceSize=128m "
                                           "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss512k",
        "spark.executorEnv.MALLOC_ARENA_MAX": "2",
    }
