"""The scenarios of scripts/spark-e2e, one function each (its docstring
lists them and what each checks), with the helpers only they use; and
`leftover_executors`, the run's last check."""

import json
import os
import signal
import subprocess
import time

from spark_cluster import APP, ROOT, App, TlsCluster, Watcher, base_conf, log, slow_env


def scenario_wordcount_pi(cluster, env, work, jar, checks, short):
    name = "e2e-wordcount-pi"
    conf = base_conf(cluster, jar, name, short)
    conf["spark.executor.instances"] = "2"
    watcher = Watcher(cluster, f"spark-{name}")
    watcher.start()
    app = App(env, work, cluster, "wordcount-pi", conf)
    rc, result = app.finish(240)
    watcher.stop()
    checks.check(rc == 0 and result and result["ok"], f"word count with a shuffle and SparkPi are right: {result}")
    checks.check(watcher.max_of("RUNNING") == 2, f"the executor job ran 2 instances (max RUNNING seen {watcher.max_of('RUNNING')})")
    job = watcher.job_id and wait_job_state(cluster, watcher.job_id, "KILLED", 30)
    checks.check(job == "KILLED", f"the executor job {watcher.job_id} is KILLED once the application ended (is {job})")
    if watcher.job_id:
        logs = subprocess.run([cluster.binary, "task", "logs", watcher.job_id, "0", "--stderr",
                               "--server", cluster.server, "--token-file", str(cluster.token_file)],
                              capture_output=True, text=True, timeout=60)
        checks.check("CoarseGrainedExecutorBackend" in logs.stdout or "Executor" in logs.stdout,
                     "the executor's log is readable with `paceline task logs JOB 0 --stderr`")


def wait_job_state(cluster, job_id, state, timeout):
    deadline = time.time() + timeout
    seen = None
    while time.time() < deadline:
        try:
            seen = (cluster.cli("job", "get", job_id).get("status") or {}).get("state")
        except RuntimeError:
            pass
        if seen == state:
            return seen
        time.sleep(0.5)
    return seen


def scenario_no_token(cluster, env, work, jar, checks, short):
    name = "e2e-no-token"
    conf = base_conf(cluster, jar, name, short)
    del conf["spark.paceline.tokenFile"]
    env = {k: v for k, v in env.items() if k != "PACELINE_TOKEN"}
    app = App(env, work, cluster, "wordcount-pi", conf)
    rc, _ = app.finish(120)
    text = app.driver_log()
    checks.check(rc != 0 and "UNAUTHENTICATED" in text,
                 "without a token the SparkContext fails at start with the server's UNAUTHENTICATED")
    checks.check(cluster.job_named(f"spark-{name}") is None, "and no executor job was created")


def scenario_dynamic(cluster, env, work, jar, checks, short):
    name = "e2e-dynamic"
    conf = base_conf(cluster, jar, name, short)
    conf.update({
        "spark.dynamicAllocation.enabled": "true",
        "spark.dynamicAllocation.shuffleTracking.enabled": "true",
        "spark.dynamicAllocation.minExecutors": "1",
        "spark.dynamicAllocation.initialExecutors": "1",
        "spark.dynamicAllocation.maxExecutors": "4",
        "spark.dynamicAllocation.schedulerBacklogTimeout": "1s",
        "spark.dynamicAllocation.sustainedSchedulerBacklogTimeout": "1s",
        "spark.dynamicAllocation.executorIdleTimeout": "5s",
        # Executors holding shuffle data would otherwise be kept for ever.
        "spark.dynamicAllocation.shuffleTracking.timeout": "5s",
    })
    watcher = Watcher(cluster, f"spark-{name}")
    watcher.start()
    app = App(env, work, cluster, "dynamic", conf)
    app.wait_marker("BUSY-DONE", 240)
    busy_done = app.markers.get("BUSY-DONE", time.time())
    app.wait_marker("SHRUNK", 120)
    shrunk = app.markers.get("SHRUNK")
    time.sleep(2)
    rc, result = app.finish(120)
    watcher.stop()
    checks.check(rc == 0 and result and result["ok"], f"the dynamic application's results are right: {result}")
    grown = watcher.max_of("RUNNING", until=busy_done)
    checks.check(grown >= 2, f"the executor job grew while work was queued (max RUNNING {grown}, from 1)")
    # The app waits 4 s after it saw the minimum, then stops (and the job is killed).
    after = [c["RUNNING"] for t, c in watcher.samples if shrunk and shrunk <= t <= shrunk + 3]
    checks.check(bool(after) and set(after) == {1},
                 f"it shrank to the minimum (1) after executorIdleTimeout, seen through the API (RUNNING after: {after[:6]})")
    killed = max((c["KILLED"] for _, c in watcher.samples), default=0)
    checks.check(killed >= 1, f"idle executors were removed as instances (KILLED seen: {killed})")


def scenario_pool_limit(cluster, env, work, jar, checks, short):
    name = "e2e-pool-limit"
    # Room for two executors of 250 millicores.
    pools = work / "pools.yaml"
    pools.write_text("pools:\n  - path: /spark-small\n    limit: {cpu_millis: 500}\n")
    cluster.cli("pool", "create", "/spark-small", str(pools))
    conf = base_conf(cluster, jar, name, short)
    conf.update({
        "spark.paceline.pool": "/spark-small",
        # Above its reservation (none) a pool admits preemptible work only.
        "spark.paceline.executor.preemptible": "true",
        "spark.executor.instances": "4",
    })
    watcher = Watcher(cluster, f"spark-{name}")
    watcher.start()
    app = App(slow_env(env, work, name, short), work, cluster, "slow-count", conf)
    # Two running and the rest pending, then a few more samples at the cap.
    deadline = time.time() + 240
    while time.time() < deadline and app.proc.poll() is None and not (
            watcher.max_of("RUNNING") >= 2 and watcher.max_of("PENDING") >= 1):
        time.sleep(0.5)
    time.sleep(3)
    app.release()
    rc, result = app.finish(300)
    watcher.stop()
    checks.check(rc == 0 and result and result["ok"], f"the application finished right under the pool's limit: {result}")
    running = watcher.max_of("RUNNING")
    checks.check(running == 2, f"the pool's limit capped the executors at 2 (max RUNNING {running})")
    pending = watcher.max_of("PENDING")
    checks.check(pending >= 1, f"the executors beyond the limit waited PENDING (max PENDING {pending})")


def scenario_kill(cluster, env, work, jar, checks, short):
    name = "e2e-kill"
    conf = base_conf(cluster, jar, name, short)
    conf["spark.executor.instances"] = "2"
    watcher = Watcher(cluster, f"spark-{name}")
    watcher.start()
    app = App(slow_env(env, work, name, short), work, cluster, "slow-count", conf)
    started = app.wait_marker("STAGE-RUNNING", 240)
    killed = crashed = None
    running = []
    if started and watcher.job_id is None:
        watcher.job_id = cluster.job_named(f"spark-{name}")
    if started and watcher.job_id:
        time.sleep(1.5)
        running = [t for t in cluster.tasks(watcher.job_id) if t["state"] == "RUNNING"]
        if running:
            killed = running[0]["instance"]
            cluster.cli("task", "kill", watcher.job_id, str(killed))
            log(f"killed instance {killed} of {watcher.job_id} mid-stage through the API")
        # The other executor's JVM dies outright (SIGKILL): its connection
        # drops before Paceline sees the process end, so the driver waits
        # for Paceline's reason (FAILED) before telling Spark.
        others = [t["instance"] for t in running[1:]]
        if others:
            crashed = others[0]
            pid = executor_pid(watcher.job_id, crashed)
            if pid:
                os.kill(pid, signal.SIGKILL)
                log(f"SIGKILLed executor {crashed} (pid {pid})")
            else:
                crashed = None
    # The driver told of both (or a minute gone), the stage may end.
    app.wait_log(lambda text: f"Paceline task {watcher.job_id}/{killed} KILL" in text
                 and f"Paceline task {watcher.job_id}/{crashed} FAILED" in text, 60)
    app.release()
    rc, result = app.finish(300)
    watcher.stop()
    checks.check(killed is not None, "an executor was running mid-stage and was killed through the API")
    checks.check(crashed is not None, "a second executor's JVM was SIGKILLed mid-stage")
    checks.check(rc == 0 and result and result["ok"], f"Spark recovered and the result is right: {result}")
    text = app.driver_log()
    checks.check(f"Paceline task {watcher.job_id}/{killed} KILL" in text,
                 "the driver was told why: its log names the killed Paceline task")
    checks.check(f"Paceline task {watcher.job_id}/{crashed} FAILED" in text,
                 "and names the crashed one as FAILED, with Paceline's reason")
    instances = {t["instance"] for t in cluster.tasks(watcher.job_id)} if watcher.job_id else set()
    checks.check(len(instances) >= 4, f"new instances replaced both executors (instances {sorted(instances)})")


def scenario_driver_crash(cluster, env, work, jar, checks, short):
    name = "e2e-driver-crash"
    lease = 6
    conf = base_conf(cluster, jar, name, short)
    conf["spark.executor.instances"] = "2"
    conf["spark.paceline.ownerLeaseSeconds"] = str(lease)
    app = App(dict(env, E2E_SLOW_SECS="6"), work, cluster, "slow-count", conf)
    started = app.wait_marker("STAGE-RUNNING", 240)
    job = cluster.job_named(f"spark-{name}") if started else None
    checks.check(job is not None, "a driver with its executors running mid-stage")
    if job is None:
        app.finish(5)
        return
    # The driver dies as with its machine: no shutdown hook, no KillJob.
    os.killpg(app.proc.pid, signal.SIGKILL)
    app.proc.wait()
    killed_at = time.time()
    log(f"SIGKILLed the driver (pid {app.proc.pid} and its JVM); its executor job {job} has a {lease} s owner lease")
    state = wait_job_state(cluster, job, "KILLED", lease + 30)
    took = time.time() - killed_at
    message = (cluster.cli("job", "get", job).get("status") or {}).get("message", "")
    checks.check(state == "KILLED" and "owner lease expired" in message,
                 f"the executor job was KILLED {took:.0f} s after the driver died (lease {lease} s): {message!r}")
    time.sleep(2)
    live = [t["instance"] for t in cluster.tasks(job) if t["state"] not in ("KILLED", "FAILED", "SUCCEEDED", "LOST")]
    checks.check(not live, f"and none of its executors is left running or restarting ({live})")


def scenario_preempted(cluster, env, work, jar, checks, short):
    name = "e2e-preempted"
    hosts = [h for h in cluster.cli("host", "list") or [] if h.get("reachable")]
    cpu = sum(h["total"]["cpu_millis"] for h in hosts)
    # A pool that reserves the whole cluster's CPU, and one that reserves none.
    pools = work / "preempt-pools.yaml"
    # (Non-preemptible work is admitted within the reservation in every kind,
    # so the hog's memory and disk are reserved too.)
    pools.write_text(f"pools:\n  - path: /hog\n    reservation: {{cpu_millis: {cpu}, memory_mib: 1024, disk_mib: 1024}}\n")
    cluster.cli("pool", "create", "/hog", str(pools))
    pools.write_text("pools:\n  - path: /spark-spare\n")
    cluster.cli("pool", "create", "/spark-spare", str(pools))
    conf = base_conf(cluster, jar, name, short)
    conf.update({
        "spark.paceline.pool": "/spark-spare",
        "spark.paceline.executor.preemptible": "true",
        "spark.executor.instances": "2",
    })
    app = App(slow_env(env, work, name, short, 5), work, cluster, "slow-count", conf)
    started = app.wait_marker("STAGE-RUNNING", 240)
    job = cluster.job_named(f"spark-{name}") if started else None
    hog = None
    preempted = []
    if job:
        # The hog's pool is owed the whole cluster: the executors, above their
        # pool's reservation (none), are preempted to make room.
        spec = work / "hog.yaml"
        spec.write_text("\n".join([
            "name: hog", "pool: /hog", "kind: batch", f"instance_count: {cpu // 500}",
            "default_task:", "  command: sleep", "  args: ['600']",
            "  resources: {cpu_millis: 500, memory_mib: 64, disk_mib: 10}",
        ]) + "\n")
        hog = cluster.cli("job", "create", str(spec))["id"]
        log(f"hog job {hog} in /hog ({cpu // 500} x 500 millicores) while {job} runs")
        deadline = time.time() + 90
        while time.time() < deadline and not preempted:
            preempted = [l for l in app.driver_log().splitlines()
                         if f"Paceline task {job}/" in l and "PREEMPTED" in l and " lost: " in l]
            time.sleep(0.5)
        # Room again: the replacements Spark asked for can run.
        cluster.cli("job", "kill", hog)
        log(f"killed {hog}")
    app.release()
    rc, result = app.finish(300)
    checks.check(bool(preempted), f"executors were preempted and the driver was told why: {preempted[:1]}")
    checks.check(rc == 0 and result and result["ok"], f"Spark recovered from the preemption and the result is right: {result}")
    victims = {int(l.split(f"Paceline task {job}/", 1)[1].split(" ", 1)[0]) for l in preempted}
    tasks = {t["instance"]: t for t in cluster.tasks(job)} if job else {}
    # Removed for good: KILLED with the goal KILL, and never on a host again
    # (a kill confirmed before the driver's removal arrives may requeue a
    # second run, which the removal then ends before it is placed).
    def removed(t):
        return t["state"] == "KILLED" and t["goal"] == "KILL" and (t["run"] == 1 or not t["host"])
    requeued = [i for i in victims if i in tasks and not removed(tasks[i])]
    checks.check(bool(victims) and not requeued,
                 f"a preempted executor's instance was removed, never run again under the same id (victims {sorted(victims)}, "
                 f"not removed {[(i, tasks[i]['state'], tasks[i]['run'], tasks[i]['host']) for i in requeued]})")
    checks.check(len(tasks) >= 4, f"new instances replaced the preempted ones (instances {sorted(tasks)})")


def scenario_tls(cluster, env, work, jar, checks, short):
    tls = TlsCluster(cluster.binary, work)
    try:
        tls.start()
        log(f"paceline server with TLS on {tls.server}")
        name = "e2e-tls"
        conf = base_conf(tls, jar, name, short)
        conf["spark.paceline.tls.caCertFile"] = str(tls.ca)
        conf["spark.executor.instances"] = "2"
        app = App(env, work, tls, "wordcount-pi", conf)
        rc, result = app.finish(240)
        checks.check(rc == 0 and result and result["ok"],
                     f"over TLS (spark.paceline.tls.caCertFile) the word count and SparkPi are right: {result}")
        job = tls.job_named(f"spark-{name}")
        state = job and wait_job_state(tls, job, "KILLED", 30)
        checks.check(state == "KILLED", f"its executor job {job} ran on the TLS cluster and is KILLED at the end (is {state})")
        # TLS with the JVM's own trust store, which does not know this authority.
        name = "e2e-tls-untrusted"
        conf = base_conf(tls, jar, name, short)
        conf["spark.paceline.tls.enabled"] = "true"
        app = App(env, work, tls, "wordcount-pi", conf)
        rc, _ = app.finish(120)
        text = app.driver_log()
        checks.check(rc != 0 and "TLS handshake with" in text and "set spark.paceline.tls.caCertFile" in text,
                     "a driver that does not trust the server's certificate fails at start, saying so and what to set")
        checks.check(tls.job_named(f"spark-{name}") is None, "and creates nothing")
    finally:
        tls.stop()


def scenario_host_lost(cluster, env, work, jar, checks, short):
    name = "e2e-host-lost"
    conf = base_conf(cluster, jar, name, short)
    conf["spark.executor.instances"] = "2"
    # Longer than the host manager takes to call a silent host lost (5 s in
    # `paceline dev`), so Spark hears Paceline's LOST rather than a timeout.
    conf["spark.paceline.executor.lossReasonTimeoutMs"] = "30000"
    app = App(slow_env(env, work, name, short, 5), work, cluster, "slow-count", conf)
    started = app.wait_marker("STAGE-RUNNING", 240)
    job = cluster.job_named(f"spark-{name}") if started else None
    host, gone = None, []
    if job:
        time.sleep(1)
        running = [t for t in cluster.tasks(job) if t["state"] == "RUNNING"]
        if running:
            host = running[0]["host"]
            gone = [t["instance"] for t in running if t["host"] == host]
            # The machine dies: its agent and the executors on it, at once.
            agent = agent_pid(cluster, host)
            if agent:
                os.kill(agent, signal.SIGKILL)
            for i in gone:
                pid = executor_pid(job, i)
                if pid:
                    os.kill(pid, signal.SIGKILL)
            log(f"host {host} lost: SIGKILLed its agent (pid {agent}) and executors {gone}")
    if gone:
        app.wait_log(lambda text: all(f"Paceline task {job}/{i} LOST" in text for i in gone), 60)
    app.release()
    rc, result = app.finish(300)
    text = app.driver_log()
    checks.check(bool(gone), f"executors were running on {host} when it was lost")
    checks.check(rc == 0 and result and result["ok"], f"Spark recovered from the lost host and the result is right: {result}")
    told = [i for i in gone if f"Paceline task {job}/{i} LOST" in text and f"on {host}" in text]
    checks.check(bool(gone) and told == gone,
                 f"the driver was told each executor was LOST with its host (told for {told} of {gone})")


def scenario_decommission(cluster, env, work, jar, checks, short):
    """One executor preempted with decommissioning on: it gets SIGPWR, moves
    its blocks to the other executor and leaves by itself."""
    name = "e2e-decommission"
    hosts = [h for h in cluster.cli("host", "list") or [] if h.get("reachable")]
    cpu = sum(h["total"]["cpu_millis"] for h in hosts)
    # Room for all but one of the two executors (250 millicores each).
    claim = cpu - 250
    pools = work / "decom-pools.yaml"
    pools.write_text(f"pools:\n  - path: /hog-most\n    reservation: {{cpu_millis: {claim}, memory_mib: 1024, disk_mib: 1024}}\n")
    cluster.cli("pool", "create", "/hog-most", str(pools))
    pools.write_text("pools:\n  - path: /spark-decom\n")
    cluster.cli("pool", "create", "/spark-decom", str(pools))
    conf = base_conf(cluster, jar, name, short)
    conf.update({
        "spark.paceline.pool": "/spark-decom",
        "spark.paceline.executor.preemptible": "true",
        "spark.executor.instances": "2",
        "spark.decommission.enabled": "true",
        "spark.storage.decommission.enabled": "true",
        "spark.storage.decommission.shuffleBlocks.enabled": "true",
        "spark.storage.decommission.rddBlocks.enabled": "true",
        # Migration rounds every 2 s instead of 30, so it finishes well within the grace.
        "spark.storage.decommission.replicationReattemptInterval": "2s",
        "spark.paceline.executor.killGracePeriodSeconds": "60",
    })
    app = App(slow_env(env, work, name, short, 5), work, cluster, "slow-count", conf)
    started = app.wait_marker("STAGE-RUNNING", 240)
    job = cluster.job_named(f"spark-{name}") if started else None
    hog, victim, preempted = None, None, []
    if job:
        time.sleep(12)  # some map tasks done on each executor: shuffle blocks to move
        spec = work / "hog-most.yaml"
        spec.write_text("\n".join([
            "name: hog-most", "pool: /hog-most", "kind: batch", f"instance_count: {claim // 250}",
            "default_task:", "  command: sleep", "  args: ['600']",
            "  resources: {cpu_millis: 250, memory_mib: 64, disk_mib: 10}",
        ]) + "\n")
        hog = cluster.cli("job", "create", str(spec))["id"]
        log(f"hog job {hog} claims {claim} of {cpu} millicores while {job} runs")
        # The first executor seen stopping is the one preempted for the hog;
        # it is followed until its run ends, then a few seconds more to see
        # that no second one is preempted (the hog left room for one).
        first, settle = None, None
        deadline = time.time() + 120
        while time.time() < deadline and (settle is None or time.time() < settle):
            tasks = cluster.tasks(job)
            for t in tasks:
                if t["state"] in ("KILLING", "KILLED") and t["run"] == 1 and t["instance"] not in preempted:
                    preempted.append(t["instance"])
            first = preempted[0] if preempted else None
            mine = [t for t in tasks if t["instance"] == first and t["run"] == 1]
            if victim is None and mine and mine[0]["state"] == "KILLED":
                victim, settle = mine[0], time.time() + 4
            time.sleep(0.5)
        cluster.cli("job", "kill", hog)
    app.release()
    rc, result = app.finish(300)
    checks.check(victim is not None, f"one executor was preempted and its run ended ({victim and victim['instance']})")
    checks.check(len(preempted) == 1,
                 f"and only that one: the hog's pool left room for the other (instances stopped: {preempted})")
    if victim:
        logs = subprocess.run([cluster.binary, "task", "logs", job, str(victim["instance"]), "--stderr", "--server",
                               cluster.server, "--token-file", str(cluster.token_file)],
                              capture_output=True, text=True, timeout=60).stdout
        decom = [l for l in logs.splitlines() if "Decommission executor" in l or "finished decommissioning" in l]
        checks.check(bool(decom), f"the preempted executor decommissioned on its stop signal: {decom[:1]}")
        moved = [l for l in logs.splitlines() if "Migrated migrate_shuffle" in l]
        checks.check(bool(moved), f"and moved its shuffle blocks to the other executor ({len(moved)} blocks: {moved[:1]})")
        checks.check("ended by signal" not in victim.get("message", ""),
                     f"and left by itself within the grace period, not by SIGKILL ({victim.get('reason')}: {victim.get('message')!r})")
    checks.check(rc == 0 and result and result["ok"], f"the result is right: {result}")


def cluster_submit(cluster, env, work, conf, app_args, timeout=300):
    """`paceline-spark-submit --deploy-mode cluster`: the driver runs as a Paceline job."""
    argv = [str(ROOT / "integrations/spark/bin/paceline-spark-submit"), "--master", f"paceline://127.0.0.1:{cluster.port}",
            "--deploy-mode", "cluster"]
    for k, v in conf.items():
        argv += ["--conf", f"{k}={v}"]
    argv += [str(APP), *app_args]
    return subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True, timeout=timeout)


def cluster_conf(cluster, env, jar, name, short, secret):
    conf = base_conf(cluster, jar, name, short)
    del conf["spark.jars"]  # the wrapper adds the jar for the driver
    opts = conf["spark.executor.extraJavaOptions"]
    conf.update({
        "spark.paceline.driver.tokenSecret": secret,
        "spark.paceline.job.name": f"spark-{name}",
        "spark.paceline.driver.request.cores": "0.25",
        # The driver's JVM and Python under the same address-space rlimit as the executors.
        "spark.driver.memoryOverhead": "2048m",
        "spark.driver.extraJavaOptions": opts,
        "spark.paceline.driverEnv.PYSPARK_PYTHON": env["PYSPARK_PYTHON"],
        "spark.paceline.driverEnv.MALLOC_ARENA_MAX": "2",
        "spark.paceline.driverEnv.E2E_LINES": env["E2E_LINES"],
        "spark.executor.instances": "2",
    })
    return conf


def scenario_cluster_mode(cluster, env, work, jar, checks, short):
    secret = "spark-driver-token"
    cluster.cli("secret", "put", "--pool", "/default", secret, "--from-file", str(cluster.token_file))
    token = cluster.token_file.read_text().strip()
    name = "e2e-cluster"
    r = cluster_submit(cluster, env, work, cluster_conf(cluster, env, jar, name, short, secret), ["wordcount-pi"])
    (work / f"{name}.submit.log").write_text(r.stdout + r.stderr)
    driver = cluster.job_named(f"spark-driver-{name}")
    checks.check(r.returncode == 0 and f"driver job {driver} SUCCEEDED" in r.stdout,
                 f"--deploy-mode cluster: the submitter waited for the driver job {driver} to succeed (exit {r.returncode})")
    job = cluster.cli("job", "get", driver) if driver else {}
    spec = job.get("spec") or {}
    checks.check(spec.get("controller") is True and spec.get("kind") in ("BATCH", "batch"),
                 f"the driver job is a controller batch job (controller {spec.get('controller')}, kind {spec.get('kind')})")
    checks.check(token not in json.dumps(job), "the driver job's spec does not hold the token (it gets it as a secret file)")
    logs = subprocess.run([cluster.binary, "task", "logs", driver or "-", "0", "--server", cluster.server,
                           "--token-file", str(cluster.token_file)], capture_output=True, text=True, timeout=60).stdout
    result = next((json.loads(l[len("RESULT "):]) for l in logs.splitlines() if l.startswith("RESULT ")), None)
    checks.check(bool(result and result["ok"]), f"the driver, run by Paceline, got the word count and SparkPi right: {result}")
    executors = cluster.job_named(f"spark-{name}")
    state = executors and wait_job_state(cluster, executors, "KILLED", 30)
    ran = len(cluster.tasks(executors)) if executors else 0
    checks.check(state == "KILLED" and ran >= 2, f"the driver ran its executor job {executors} ({ran} instances), KILLED at its end")
    st = subprocess.run([str(ROOT / "integrations/spark/bin/paceline-spark-submit"), "--master",
                         f"paceline://127.0.0.1:{cluster.port}", "--conf", f"spark.paceline.tokenFile={cluster.token_file}",
                         "--status", driver or "-"], env=env, capture_output=True, text=True, timeout=120)
    checks.check(st.returncode == 0 and f"{driver}: SUCCEEDED" in st.stdout, f"--status names its end: {st.stdout.strip()}")

    # --kill: the driver stops on SIGTERM and takes its executors with it.
    name = "e2e-cluster-kill"
    conf = cluster_conf(cluster, env, jar, name, short, secret)
    conf["spark.paceline.submit.waitAppCompletion"] = "false"
    conf["spark.paceline.driverEnv.E2E_SLOW_SECS"] = "8"
    r = cluster_submit(cluster, env, work, conf, ["slow-count"], timeout=120)
    driver = cluster.job_named(f"spark-driver-{name}")
    checks.check(r.returncode == 0 and driver is not None, f"with waitAppCompletion=false the submitter returns at once ({driver})")
    executors, running = None, []
    deadline = time.time() + 180
    while driver and time.time() < deadline and not running:
        executors = executors or cluster.job_named(f"spark-{name}")
        running = [t for t in cluster.tasks(executors) if t["state"] == "RUNNING"] if executors else []
        time.sleep(1)
    killed = False
    if running:
        k = subprocess.run([str(ROOT / "integrations/spark/bin/paceline-spark-submit"), "--master",
                            f"paceline://127.0.0.1:{cluster.port}", "--conf", f"spark.paceline.tokenFile={cluster.token_file}",
                            "--kill", driver], env=env, capture_output=True, text=True, timeout=120)
        killed = k.returncode == 0
        log(f"--kill {driver}: {k.stdout.strip()} {k.stderr.strip()[-300:]}")
    d_state = driver and wait_job_state(cluster, driver, "KILLED", 60)
    e_state = executors and wait_job_state(cluster, executors, "KILLED", 40)
    message = (cluster.cli("job", "get", executors).get("status") or {}).get("message", "") if executors else ""
    checks.check(killed and d_state == "KILLED", f"--kill stopped the running driver job (is {d_state})")
    checks.check(e_state == "KILLED" and "owner lease" not in message,
                 f"and the driver killed its executor job as it stopped, not its lease (is {e_state}: {message!r})")
    # A token but no secret for the driver: refused before anything is created.
    name = "e2e-cluster-no-secret"
    conf = cluster_conf(cluster, env, jar, name, short, secret)
    del conf["spark.paceline.driver.tokenSecret"]
    r = cluster_submit(cluster, env, work, conf, ["wordcount-pi"], timeout=120)
    checks.check(r.returncode == 2 and "spark.paceline.driver.tokenSecret" in r.stderr
                 and cluster.job_named(f"spark-driver-{name}") is None,
                 "cluster mode without a token secret for the driver is refused, naming the setting, and creates nothing")


def scenario_controller_limit(cluster, env, work, jar, checks, short):
    """Two drivers in cluster mode in a pool whose controller limit holds one."""
    secret = "spark-driver-token"
    pools = work / "ctl-pool.yaml"
    # Drivers are not preemptible, so the pool reserves what they need; its
    # controllers may take 30% of that: one driver of 250 millicores, not two.
    pools.write_text("pools:\n  - path: /spark-ctl\n"
                     "    reservation: {cpu_millis: 1000, memory_mib: 12000, disk_mib: 10000}\n"
                     "    limit: {cpu_millis: 1000, memory_mib: 12000, disk_mib: 10000}\n"
                     "    controller_limit_percent: 30\n")
    cluster.cli("pool", "create", "/spark-ctl", str(pools))
    cluster.cli("secret", "put", "--pool", "/spark-ctl", secret, "--from-file", str(cluster.token_file))
    procs = {}
    for name in ("e2e-ctl-a", "e2e-ctl-b"):
        conf = cluster_conf(cluster, env, jar, name, short, secret)
        conf["spark.paceline.pool"] = "/spark-ctl"
        argv = [str(ROOT / "integrations/spark/bin/paceline-spark-submit"), "--master",
                f"paceline://127.0.0.1:{cluster.port}", "--deploy-mode", "cluster"]
        for k, v in conf.items():
            argv += ["--conf", f"{k}={v}"]
        argv += [str(APP), "wordcount-pi"]
        out = open(work / f"{name}.submit.log", "w")
        procs[name] = subprocess.Popen(argv, env=env, cwd=work, stdout=out, stderr=subprocess.STDOUT)
        App.running.append(procs[name])
        # The first driver is admitted before the second asks.
        deadline = time.time() + 30
        while name == "e2e-ctl-a" and time.time() < deadline and not cluster.job_named(f"spark-driver-{name}"):
            time.sleep(0.5)
        time.sleep(2)
    codes = {}
    for name, p in procs.items():
        try:
            codes[name] = p.wait(300)
        except subprocess.TimeoutExpired:
            p.kill()
            codes[name] = None
    b_log = (work / "e2e-ctl-b.submit.log").read_text()
    waited = [l for l in b_log.splitlines() if "waits:" in l]
    checks.check(any("controller limit of /spark-ctl" in l for l in waited),
                 f"the second driver waited on the pool's controller limit, and its submitter said so: {waited[:1]}")
    checks.check(codes == {"e2e-ctl-a": 0, "e2e-ctl-b": 0},
                 f"both applications finished right, one driver after the other (exit codes {codes})")


def agent_pid(cluster, host):
    """The pid of `paceline dev`'s agent for `host`."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if " agent " in line and f"--hostname {host} " in line and str(cluster.work) in line:
            return int(line.split()[0])
    return None


def executor_pid(job_id, instance):
    """The pid of the executor JVM of instance `instance` of Paceline job
    `job_id`, told by the environment the task gave it: with two lanes, two
    applications run at once, and each has an executor 1 (matching Spark's
    --executor-id alone once SIGKILLed the other lane's executor)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    want = {f"PACELINE_JOB_ID={job_id}".encode(), f"PACELINE_INSTANCE={instance}".encode()}
    for line in out.splitlines():
        if "CoarseGrainedExecutorBackend" not in line:
            continue
        pid = int(line.split()[0])
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = set(f.read().split(b"\0"))
        except OSError:
            continue
        if want <= env:
            return pid
    return None


def leftover_executors(work):
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if "CoarseGrainedExecutorBackend" in l and str(work) not in l
            and "local-paceline" not in l and "ps -eo" not in l and "127.0.0.1" in l]
