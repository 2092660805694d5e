//! Examples shown under every command's `--help`, in one table so that a
//! command added without one fails the test below rather than shipping
//! without it.

/// `(command path, example lines)`; the path is the words after `paceline`.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "",
        "paceline dev                                  # a local cluster\npaceline example hello > hello.yaml && paceline job create hello.yaml\npaceline completion bash > ~/.local/share/bash-completion/completions/paceline",
    ),
    (
        "server",
        "paceline server --config /etc/paceline/server.yaml\npaceline server --data-dir /var/lib/paceline --tokens-file /etc/paceline/tokens.yaml\npaceline server --roles placement --core core1:7400,core2:7400",
    ),
    (
        "dev",
        "paceline dev                                  # two local agents, data in ./.paceline-dev\npaceline dev --agents 3 --tokens-file tokens.yaml\npaceline dev --sim-hosts 1000 --data-dir /tmp/big",
    ),
    ("demo", "paceline demo"),
    (
        "example",
        "paceline example                              # list the built-in examples\npaceline example hello > hello.yaml && paceline job create hello.yaml",
    ),
    (
        "agent",
        "PACELINE_JOIN_TOKEN=… paceline agent --manager hostmgr.example:7401 --ca-hash sha256:… --data-dir /var/lib/paceline/agent   # first start\npaceline agent --manager hostmgr.example:7401 --data-dir /var/lib/paceline/agent --attribute zone=a\npaceline agent --detect                       # print what would be reported",
    ),
    (
        "agent-token",
        "paceline agent-token create --data-dir /var/lib/paceline --ttl 1h --uses 1\npaceline agent-token list --data-dir .paceline-dev",
    ),
    (
        "agent-token create",
        "paceline agent-token create --data-dir /var/lib/paceline --ttl 24h --uses 10 --description rack-7",
    ),
    ("agent-token list", "paceline agent-token list --config /etc/paceline/server.yaml"),
    ("agent-token revoke", "paceline agent-token revoke --data-dir /var/lib/paceline 3f9c1a2b4d5e"),
    ("agent-token hosts", "paceline agent-token hosts --data-dir /var/lib/paceline"),
    ("agent-token revoke-host", "paceline agent-token revoke-host --data-dir /var/lib/paceline node-17"),
    ("plugin", "paceline plugin validate target/my-policy.wasm\npaceline plugin list"),
    ("plugin validate", "paceline plugin validate my_policy.wasm --slot placement/batch"),
    ("plugin run", "paceline plugin run my_policy.wasm --scenario plugins/binpack/scenarios/01-best-fit.yaml"),
    (
        "plugin deploy",
        "paceline plugin deploy placement/batch my-policy 1.0 target/my-policy.wasm\npaceline plugin deploy placement/batch --builtin spread   # a built-in policy (plugin list names them)",
    ),
    (
        "plugin new",
        "paceline plugin new my-policy --lang python --kind placement\npaceline plugin new my-preempt --lang js --kind preemption",
    ),
    ("plugin build", "paceline plugin build my-policy                # writes my-policy/target/my-policy.wasm"),
    ("plugin list", "paceline plugin list -o yaml"),
    ("plugin activate", "paceline plugin activate placement/batch my-policy@1.0"),
    ("plugin rollback", "paceline plugin rollback placement/batch"),
    (
        "plugin shadow",
        "paceline plugin shadow placement/batch my-policy@1.1\npaceline plugin shadow placement/batch spread@builtin-0.1.0   # a built-in, deployed first if needed\npaceline plugin shadow placement/batch my-policy@1.1 --stop   # print the report",
    ),
    ("operator", "paceline operator snapshot save backup.snap"),
    (
        "operator snapshot",
        "paceline operator snapshot save backup.snap\npaceline operator snapshot restore backup.snap --store sqlite:/var/lib/paceline/paceline.db",
    ),
    (
        "operator snapshot save",
        "PACELINE_TOKEN_FILE=admin.token paceline operator snapshot save /backups/paceline-$(date +%F).snap",
    ),
    (
        "operator snapshot restore",
        "paceline operator snapshot restore backup.snap --store sqlite:/var/lib/paceline/paceline.db\npaceline operator snapshot restore backup.snap --store cassandra:10.0.0.1:9042/paceline\npaceline operator snapshot restore backup.snap --config /etc/paceline/server.yaml",
    ),
    ("operator snapshot inspect", "paceline operator snapshot inspect backup.snap"),
    (
        "storage",
        "paceline storage migrate --from sqlite:/var/lib/paceline/paceline.db --to cassandra:10.0.0.1:9042/paceline",
    ),
    (
        "storage migrate",
        "paceline storage migrate --from sqlite:/var/lib/paceline/paceline.db --to cassandra:10.0.0.1:9042/paceline\npaceline storage migrate --from cassandra:10.0.0.1:9042/paceline --to sqlite:/var/lib/paceline/paceline.db",
    ),
    ("bench", "cargo run --release -p paceline -- bench plugin"),
    (
        "bench plugin",
        "paceline bench plugin --tasks 1000 --hosts 10000\npaceline bench plugin --languages                  # candidates narrowed (auto)\npaceline bench plugin --languages --candidates all # every host offered",
    ),
    ("bench resmgr", "paceline bench resmgr"),
    ("bench storage", "paceline bench storage --instances 10000 --cassandra 127.0.0.1:9042"),
    ("bench hosts", "paceline bench hosts"),
    ("bench jobmgr", "paceline bench jobmgr"),
    (
        "bench pipeline",
        "paceline bench pipeline\npaceline bench pipeline --jobs 10000             # a million tasks (hosts sized for them)\npaceline bench pipeline --metrics-compare 3      # metrics off and on, in turn",
    ),
    (
        "bench peers",
        "paceline bench peers                          # every shape, 5 timed runs each\npaceline bench peers --shape nomad-service    # one shape",
    ),
    (
        "bench server",
        "paceline bench server                         # 100,000 tasks through a real server's API\npaceline bench server --jobs 10000 --hosts 10000\npaceline bench server --jobs 10000 --duration 600 --zookeeper 127.0.0.1:2181   # leadership under 10 min of load",
    ),
    (
        "bench kubernetes",
        "paceline bench kubernetes                     # 10,000 pods on 500 kwok nodes: the API server's limits, Paceline, kube-scheduler\npaceline bench kubernetes --nodes 5000 --runs limit-create,paceline-jobs",
    ),
    ("bench metrics", "paceline bench metrics --hosts 10000 --pools 11000"),
    ("bench pending", "paceline bench pending --hosts 10000 --instances 10000"),
    (
        "bench job-queries",
        "paceline bench job-queries --jobs 100000                             # SQLite\npaceline bench job-queries --jobs 100000 --cassandra 127.0.0.1:9042  # and Cassandra",
    ),
    ("job", "paceline job create examples/hello.yaml\npaceline job list --state running"),
    (
        "job create",
        "paceline job create examples/hello.yaml        # prints the job id\npaceline job create web.yaml -o json           # {\"id\": …, \"owner\": …}",
    ),
    (
        "job get",
        "paceline job get hello-3f9c1a2b\npaceline job get hello-3f9c1a2b -o yaml        # the spec as a job file\npaceline job get web-0a1b2c3d --config-version 1 -o yaml > v1.yaml && paceline job update web-0a1b2c3d v1.yaml   # roll back",
    ),
    ("job list", "paceline job list --state running --owner alice --pool /team-a"),
    ("job kill", "paceline job kill hello-3f9c1a2b\npaceline job kill web-0a1b2c3d --instances 0,2"),
    (
        "job run",
        "paceline job run hello.yaml --wait                # exit 0 when it SUCCEEDED\npaceline job run web.yaml --wait --timeout 120     # a service: until every instance is up",
    ),
    ("job scale", "paceline job scale web-0a1b2c3d 6"),
    ("job restart", "paceline job restart web-0a1b2c3d --batch-size 2"),
    ("job grow", "paceline job grow web-0a1b2c3d 3            # three more instances, numbered after the highest"),
    ("job remove", "paceline job remove web-0a1b2c3d --instances 4,7   # stopped for good, the rest keep running"),
    ("job renew-lease", "paceline job renew-lease web-0a1b2c3d    # keeps a job with owner_lease_secs alive"),
    (
        "job update",
        "paceline job update web-0a1b2c3d web-v2.yaml --dry-run\npaceline job update web-0a1b2c3d web-v2.yaml --batch-size 2",
    ),
    ("job delete", "paceline job delete hello-3f9c1a2b"),
    ("job pause", "paceline job pause web-0a1b2c3d"),
    ("job resume", "paceline job resume web-0a1b2c3d"),
    ("job abort", "paceline job abort web-0a1b2c3d"),
    (
        "job events",
        "paceline job events hello-3f9c1a2b              # why it waits, where it ran\npaceline job events web-0a1b2c3d --task 2 --json",
    ),
    ("task", "paceline task list hello-3f9c1a2b\npaceline task logs hello-3f9c1a2b 0"),
    ("task list", "paceline task list web-0a1b2c3d --state running"),
    ("task get", "paceline task get hello-3f9c1a2b 0             # pending_reason says why it waits"),
    ("task kill", "paceline task kill web-0a1b2c3d 1"),
    ("task restart", "paceline task restart web-0a1b2c3d 1"),
    ("task logs", "paceline task logs hello-3f9c1a2b 0\npaceline task logs web-0a1b2c3d 1 --stderr --follow"),
    ("task events", "paceline task events hello-3f9c1a2b 0"),
    ("pool", "paceline pool list\npaceline pool create /team-a examples/pools.yaml"),
    (
        "pool create",
        "paceline pool create /team-a examples/pools.yaml\necho 'reservation: {cpu_millis: 2000, memory_mib: 4096}' > p.yaml && paceline pool create /team-b p.yaml",
    ),
    (
        "pool get",
        "paceline pool get /default\npaceline pool get /team-a -o yaml > team-a.yaml   # a pool file to edit and apply",
    ),
    ("pool update", "paceline pool update /team-a team-a.yaml"),
    ("pool delete", "paceline pool delete /team-b"),
    ("pool list", "paceline pool list\npaceline pool list -o json"),
    ("pool apply", "paceline pool apply examples/pools.yaml --dry-run\npaceline pool apply examples/pools.yaml"),
    ("host", "paceline host list\npaceline host drain dev-1 --then-down"),
    ("host list", "paceline host list"),
    ("host get", "paceline host get dev-1"),
    ("host drain", "paceline host drain dev-1 --then-down"),
    ("host down", "paceline host down dev-1"),
    ("host up", "paceline host up dev-1"),
    (
        "secret",
        "paceline secret put --pool /team-a db-password --from-file db.txt\npaceline secret list --pool /team-a",
    ),
    (
        "secret put",
        "paceline secret put --pool /team-a db-password --from-file db.txt\nDB_PW=... paceline secret put --pool /team-a db-password --from-env DB_PW",
    ),
    ("secret list", "paceline secret list --pool /team-a"),
    ("secret delete", "paceline secret delete --pool /team-a db-password"),
    (
        "audit",
        "paceline audit --since 1h\npaceline audit --user alice --job hello-3f9c1a2b --json\npaceline audit --method DeployPlugin --since 2026-03-01T00:00:00Z",
    ),
    ("watch", "paceline watch --job hello-3f9c1a2b\npaceline watch --kind job,pool -o json"),
    ("auth", "paceline auth token --name alice --role user --pool /team-a"),
    (
        "auth token",
        "paceline auth token --name alice --role user --pool /team-a\npaceline auth token --name ops --role operator",
    ),
    (
        "sim",
        "paceline sim generate --hosts 200 --tasks 5000 --seed 7 -o day.jsonl\npaceline sim compare day.jsonl --a placement=binpack --b placement=spread",
    ),
    (
        "sim run",
        "paceline sim run day.jsonl --policy placement=my_policy.wasm --html report.html\npaceline sim run day.jsonl --reproducible -o json",
    ),
    (
        "sim compare",
        "paceline sim compare day.jsonl --a placement=binpack --b placement=spread --html ab.html\npaceline sim compare openb.jsonl --arrive-until-full --a placement=binpack --b placement=spread   # how much fits\npaceline sim compare day.jsonl --a placement=spread --b placement=spread --a-candidates all --b-candidates auto   # narrowing's cost",
    ),
    ("sim generate", "paceline sim generate --hosts 200 --tasks 5000 --hours 6 --seed 7 -o synthetic.jsonl"),
    ("sim import", "paceline sim import openb --nodes nodes.csv --pods pods.csv -o openb.jsonl"),
    (
        "sim import openb",
        "paceline sim import openb --nodes openb_node_list_all_node.csv --pods openb_pod_list_default.csv -o openb.jsonl",
    ),
    (
        "sim import alibaba-2018",
        "paceline sim import alibaba-2018 --machines machine_meta.csv --tasks batch_task.csv --max-tasks 100000 -o ali.jsonl",
    ),
    ("trace", "paceline trace record --server http://127.0.0.1:7400 --out cluster.jsonl"),
    ("trace record", "paceline trace record --server http://127.0.0.1:7400 --out cluster.jsonl"),
    (
        "completion",
        "paceline completion bash > ~/.local/share/bash-completion/completions/paceline\npaceline completion zsh > \"${fpath[1]}/_paceline\"\npaceline completion fish > ~/.config/fish/completions/paceline.fish",
    ),
];

/// The example lines for a command path, if the table has them.
fn example(path: &str) -> Option<&'static str> {
    EXAMPLES.iter().find(|(p, _)| *p == path).map(|(_, e)| *e)
}

/// `command` with an `Examples:` section after every (sub)command's help.
pub fn with_examples(command: clap::Command) -> clap::Command {
    attach(command, "")
}

fn attach(mut command: clap::Command, path: &str) -> clap::Command {
    if let Some(e) = example(path) {
        let indented: String = e.lines().map(|l| format!("  {l}\n")).collect();
        command = command.after_help(format!("Examples:\n{}", indented.trim_end()));
    }
    let names: Vec<String> = command.get_subcommands().map(|s| s.get_name().to_owned()).collect();
    for name in names {
        let sub_path = if path.is_empty() { name.clone() } else { format!("{path} {name}") };
        command = command.mut_subcommand(&name, |s| attach(s, &sub_path));
    }
    command
}

/// Every command path (words after `paceline`), the root as "".
#[cfg(test)]
pub fn paths(command: &clap::Command) -> Vec<String> {
    fn walk(c: &clap::Command, path: &str, out: &mut Vec<String>) {
        out.push(path.to_owned());
        for s in c.get_subcommands().filter(|s| s.get_name() != "help") {
            let p = if path.is_empty() { s.get_name().to_owned() } else { format!("{path} {}", s.get_name()) };
            walk(s, &p, out);
        }
    }
    let mut out = Vec::new();
    walk(command, "", &mut out);
    out
}

/// Paths in the table that name no command (a renamed or removed one).
#[cfg(test)]
pub fn stale(command: &clap::Command) -> Vec<&'static str> {
    let all = paths(command);
    EXAMPLES.iter().map(|(p, _)| *p).filter(|p| !all.iter().any(|a| a == p)).collect()
}

/// Paths of commands without an example.
#[cfg(test)]
pub fn missing(command: &clap::Command) -> Vec<String> {
    paths(command).into_iter().filter(|p| example(p).is_none()).collect()
}
