//! `paceline server` with `hosts: {provider: kubernetes}` as a real process
//! against the real control plane (`deploy/kubernetes/kubernetes.sh`; see
//! host/server/tests/all/kubernetes.rs for how the plane is found or
//! started), issue 45's evidence:
//! - SIGKILLed while a batch job's pods are being created and started again
//!   on the same data directory, it launches nothing twice and loses nothing:
//!   the runs whose pods exist are adopted, those whose pods were not made
//!   yet come back missing (`RUN_MISSING`, before they ever started: a launch
//!   that did not happen, placed again with no failure counted, so the job
//!   needs no restart policy) and run again, and every task ends SUCCEEDED
//!   with one pod;
//! - with the API server stopped for a while (a plane of the test's own, in
//!   `KUBERNETES_OUTAGE_DIR`, default /tmp/paceline-kubernetes-outage, so
//!   that tests on the shared plane do not see it go; `kubernetes.sh
//!   stop-apiserver`): it keeps running, says what is wrong, and resumes.
//!   8 s by default; `PACELINE_KUBERNETES_OUTAGE_SECS=30` for the 30 s.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, cli, eventually, free_port, json, ok};

struct Plane {
    dir: PathBuf,
    kubeconfig: PathBuf,
    admin: PathBuf,
    kubectl: PathBuf,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes/kubernetes.sh")
}

/// The plane from `PACELINE_KUBECONFIG*` (as `kubernetes.sh env` prints
/// them), else started by `kubernetes.sh start` in `KUBERNETES_DIR`
/// (default /tmp/paceline-kubernetes).
fn plane() -> Plane {
    let dir = PathBuf::from(std::env::var("KUBERNETES_DIR").unwrap_or_else(|_| "/tmp/paceline-kubernetes".into()));
    if let (Some(k), Some(a)) = (std::env::var_os("PACELINE_KUBECONFIG"), std::env::var_os("PACELINE_KUBECONFIG_ADMIN"))
    {
        let admin = PathBuf::from(a);
        let dir = if std::env::var_os("KUBERNETES_DIR").is_some() {
            dir
        } else {
            admin.parent().map_or(dir, Path::to_path_buf)
        };
        let kubectl = PathBuf::from(std::env::var_os("PACELINE_KUBECTL").unwrap_or_else(|| "kubectl".into()));
        return Plane { dir, kubeconfig: PathBuf::from(k), admin, kubectl };
    }
    plane_in(dir)
}

/// The plane in `dir`, started (or checked) by `kubernetes.sh start`.
fn plane_in(dir: PathBuf) -> Plane {
    let sh = |cmd: &str| {
        // The port of the plane in `dir`, not one the environment names for another.
        let mut c = Command::new("bash");
        c.arg(script()).arg(cmd).arg(&dir).env_remove("KUBERNETES_API_PORT");
        c
    };
    let status = sh("start").status().expect("kubernetes.sh");
    assert!(status.success(), "deploy/kubernetes/kubernetes.sh start {} failed", dir.display());
    let out = sh("env").output().expect("kubernetes.sh env");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let var = |name: &str| -> PathBuf {
        paceline_kubernetes::plane::env_value(&text, name)
            .map(PathBuf::from)
            .unwrap_or_else(|| panic!("kubernetes.sh env printed no {name}: {text}"))
    };
    Plane {
        kubeconfig: var("PACELINE_KUBECONFIG"),
        admin: var("PACELINE_KUBECONFIG_ADMIN"),
        kubectl: var("PACELINE_KUBECTL"),
        dir,
    }
}

impl Plane {
    fn script(&self, cmd: &str) {
        let status = Command::new("bash")
            .arg(script())
            .arg(cmd)
            .arg(&self.dir)
            .env_remove("KUBERNETES_API_PORT")
            .status()
            .expect("kubernetes.sh");
        assert!(status.success(), "kubernetes.sh {cmd} {} failed", self.dir.display());
    }

    fn kubectl(&self, args: &[&str]) -> String {
        let out =
            Command::new(&self.kubectl).arg("--kubeconfig").arg(&self.admin).args(args).output().expect("kubectl");
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `n` kwok nodes `kt-<test>-…` labelled `paceline-test=<test>`, with no pods left on them.
    fn nodes(&self, test: &str, n: usize, cpu: u32) {
        let status = Command::new("bash")
            .arg(script())
            .args(["nodes", &n.to_string()])
            .arg(&self.dir)
            .args(["--prefix", &format!("kt-{test}-"), "--cpu", &cpu.to_string(), "--memory", "64Gi", "--labels"])
            .arg(format!("paceline-test={test}"))
            .status()
            .expect("kubernetes.sh nodes");
        assert!(status.success(), "kubernetes.sh nodes failed");
        for i in 0..n {
            let sel = format!("spec.nodeName=kt-{test}-{i}");
            self.kubectl(&["delete", "pods", "-n", "paceline-tasks", "--field-selector", &sel, "--wait=false"]);
        }
    }

    /// The job's pods: (task id, run id) from their labels, one per pod.
    fn pods(&self, job: &str) -> Vec<(String, String)> {
        let out = self.kubectl(&[
            "get",
            "pods",
            "-n",
            "paceline-tasks",
            "-l",
            &format!("paceline.io/job-id={job}"),
            "-o",
            "jsonpath={range .items[*]}{.metadata.annotations.paceline\\.io/task-id} \
             {.metadata.annotations.paceline\\.io/run-id}{\"\\n\"}{end}",
        ]);
        out.lines().filter_map(|l| l.split_once(' ')).map(|(t, r)| (t.to_string(), r.to_string())).collect()
    }
}

/// `paceline server` in its own process, stdout and stderr to `dir/server-N.log`.
struct Server {
    child: Child,
    log: PathBuf,
}

impl Server {
    fn start(dir: &Path, config: &Path, n: u32) -> Server {
        let log = dir.join(format!("server-{n}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(BIN)
            .args(["server", "--config"])
            .arg(config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::from(file.try_clone().expect("log file")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("paceline server starts");
        let server = Server { child, log };
        eventually(60, "the server says API on", || server.log().contains("API on"));
        server
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn sigkill(&mut self) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-KILL", &pid]).status().expect("kill").success());
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Already gone when SIGKILLed: nothing to say.
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).stderr(Stdio::null()).status();
        let _ = self.child.wait();
    }
}

fn server_config(dir: &Path, plane: &Plane, api: u16, test: &str) -> PathBuf {
    let path = dir.join("server.yaml");
    // No cluster_id: the server makes one at the first start and must find
    // it in its store at the second (or it would not know its own pods).
    let yaml = format!(
        "data_dir: {}\napi_listen: 127.0.0.1:{api}\nagent_listen: 127.0.0.1:0\nhosts:\n  provider: kubernetes\n  \
         kubeconfig: {}\n  node_selector: paceline-test={test}\n  keep_finished_pods_secs: 600\n  \
         max_concurrent_calls: 2\n",
        dir.join("data").display(),
        plane.kubeconfig.display()
    );
    std::fs::write(&path, yaml).expect("config");
    path
}

fn batch_job(dir: &Path, name: &str, n: u32, run_for: &str) -> String {
    let path = dir.join(format!("{name}.yaml"));
    let yaml = format!(
        "name: {name}\npool: /default\nkind: batch\ninstance_count: {n}\ndefault_task:\n  command: sh\n  \
         args: [\"-c\", \"true\"]\n  resources: {{cpu_millis: 100, memory_mib: 32, disk_mib: 10}}\n  \
         kill_grace_period_secs: 0\n  labels: {{paceline.io/kwok-exit-code: \"0\", paceline.io/kwok-run-for: \"{run_for}\"}}\n"
    );
    std::fs::write(&path, yaml).expect("job file");
    path.to_str().expect("utf-8").to_string()
}

/// The job's tasks from `task list -o json`, as (instance, state, run, run id).
fn tasks(api: u16, job: &str) -> Vec<(u64, String, u64, String)> {
    let v = json(api, &["task", "list", job]);
    let list = v.as_array().cloned().or_else(|| v["tasks"].as_array().cloned()).expect("a task list");
    list.iter()
        .map(|t| {
            (
                t["instance"].as_u64().unwrap_or(u64::MAX),
                t["state"].as_str().unwrap_or("").to_string(),
                t["run"].as_u64().unwrap_or(0),
                t["run_id"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn kubernetes_a_sigkilled_server_restarted_launches_nothing_twice_and_loses_nothing() {
    let plane = plane();
    let test = "sigkill";
    plane.nodes(test, 2, 32);
    let dir = tempfile::tempdir().expect("dir");
    let api = free_port();
    let config = server_config(dir.path(), &plane, api, test);
    let mut server = Server::start(dir.path(), &config, 1);
    eventually(60, "both nodes are hosts", || {
        let hosts = ok(cli(api, &["host", "list"]));
        hosts.contains(&format!("kt-{test}-0")) && hosts.contains(&format!("kt-{test}-1"))
    });
    let n = 120;
    let job = ok(cli(api, &["job", "create", &batch_job(dir.path(), "ksigkill", n, "5s")]));
    let job = job.lines().last().unwrap_or("").trim().to_string();
    assert!(!job.is_empty(), "a job id");

    // SIGKILL once some of its pods exist, before all of them do.
    let deadline = Instant::now() + Duration::from_secs(120);
    let at_kill = loop {
        let made = plane.pods(&job).len();
        if made > 0 {
            server.sigkill();
            break made;
        }
        assert!(Instant::now() < deadline, "no pod of {job} was created: {}", server.log());
        std::thread::sleep(Duration::from_millis(50));
    };
    let after_kill = plane.pods(&job).len();
    assert!(after_kill < n as usize, "killed mid-way: {at_kill} pods seen, {after_kill} after the kill");

    let server = Server::start(dir.path(), &config, 2);
    eventually(240, "the job succeeded after the restart", || {
        json(api, &["job", "get", &job])["status"]["state"].as_str() == Some("SUCCEEDED")
    });
    let log = server.log();
    assert!(log.contains("kubernetes: nodes and pods listed"), "{log}");
    // One pod per task, the one of its last run: no run was created twice,
    // none was lost and made again beside a pod that was still there.
    let tasks = one_pod_per_task(&plane, api, &job);
    assert_eq!(tasks.len(), n as usize);
    let rerun = tasks.iter().filter(|(_, _, run, _)| *run > 1).count();
    println!(
        "killed with {after_kill} of {n} pods made; after the restart every task succeeded, {rerun} of them in a \
         second run (their first had no pod yet), one pod each"
    );
}

/// Every task of `job` SUCCEEDED with exactly one pod, its last run's.
fn one_pod_per_task(plane: &Plane, api: u16, job: &str) -> Vec<(u64, String, u64, String)> {
    let tasks = tasks(api, job);
    assert!(tasks.iter().all(|(_, state, _, _)| state == "SUCCEEDED"), "{tasks:?}");
    let mut by_task: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (task, run) in plane.pods(job) {
        by_task.entry(task).or_default().push(run);
    }
    for (i, _, run, run_id) in &tasks {
        let task = format!("{job}-{i}");
        assert_eq!(by_task.get(&task), Some(&vec![run_id.clone()]), "task {task} (run {run}): its one pod");
    }
    tasks
}

/// Stops the test's own plane, whatever happens.
struct StopPlane(PathBuf);

impl Drop for StopPlane {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(script()).arg("stop").arg(&self.0).status();
    }
}

#[test]
fn kubernetes_the_api_server_gone_for_a_while_loses_nothing_and_launches_nothing_twice() {
    let secs: u64 = std::env::var("PACELINE_KUBERNETES_OUTAGE_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    let dir = PathBuf::from(
        std::env::var("KUBERNETES_OUTAGE_DIR").unwrap_or_else(|_| "/tmp/paceline-kubernetes-outage".into()),
    );
    let plane = plane_in(dir.clone());
    let _stop = StopPlane(dir);
    let test = "outage";
    plane.nodes(test, 1, 32);
    let data = tempfile::tempdir().expect("dir");
    let api = free_port();
    let config = server_config(data.path(), &plane, api, test);
    let mut server = Server::start(data.path(), &config, 1);
    let node = format!("kt-{test}-0");
    eventually(60, "the node is a host", || ok(cli(api, &["host", "list"])).contains(&node));
    // Runs across the outage.
    let long = ok(cli(api, &["job", "create", &batch_job(data.path(), "klong", 4, &format!("{}s", secs + 10))]));
    eventually(60, "4 running", || tasks(api, &long).iter().filter(|t| t.1 == "RUNNING").count() == 4);

    plane.script("stop-apiserver");
    let t0 = Instant::now();
    eventually(30, "the log says the API is unreachable", || server.log().contains("kubernetes API unreachable"));
    // The hosts are registered offering nothing at the provider's next tick (250 ms).
    std::thread::sleep(Duration::from_secs(1));
    // Paceline still answers and takes a job (placed once the API is back),
    // and keeps the host up (within api_outage_grace), offering nothing.
    let during = ok(cli(api, &["job", "create", &batch_job(data.path(), "kduring", 3, "1s")]));
    let hosts = json(api, &["host", "list"]);
    let host = hosts
        .as_array()
        .or_else(|| hosts["hosts"].as_array())
        .and_then(|a| a.iter().find(|h| h["hostname"].as_str() == Some(node.as_str())).cloned());
    let host = host.unwrap_or_else(|| panic!("{node} listed: {hosts}"));
    assert_eq!((host["state"].as_str(), host["reachable"].as_bool()), (Some("UP"), Some(true)), "{host}");
    assert_eq!(host["total"]["cpu_millis"].as_u64(), Some(0), "it offers nothing meanwhile: {host}");
    std::thread::sleep(Duration::from_secs(secs).saturating_sub(t0.elapsed()));
    assert!(server.child.try_wait().expect("wait").is_none(), "the server runs: {}", server.log());

    plane.script("start-apiserver");
    eventually(60, "the log says the API is back", || server.log().contains("kubernetes API reachable again"));
    for job in [&long, &during] {
        eventually(120, "the jobs succeeded", || {
            json(api, &["job", "get", job])["status"]["state"].as_str() == Some("SUCCEEDED")
        });
    }
    let long_tasks = one_pod_per_task(&plane, api, &long);
    assert!(long_tasks.iter().all(|t| t.2 == 1), "the runs lived through the outage: {long_tasks:?}");
    one_pod_per_task(&plane, api, &during);
    let log = server.log();
    let unreachable = log.lines().filter(|l| l.contains("kubernetes API unreachable")).count();
    println!(
        "API server stopped {secs} s: {unreachable} log lines say it was unreachable; both jobs succeeded, one pod per task"
    );
}
