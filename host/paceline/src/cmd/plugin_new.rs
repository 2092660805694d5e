//! `paceline plugin new NAME --lang rust|python|js --kind placement|preemption|lifecycle`
//! creates a plugin project that builds to a component with one command,
//! with a scenario and a test; `paceline plugin build [DIR]` builds any
//! project (its `plugin.toml` names the language and the world) with the
//! pinned toolchain, through `scripts/plugin-build` of the Paceline checkout.
//!
//! Projects refer to the SDKs and to `wit/` in the checkout this binary was
//! built from (`PACELINE_ROOT` overrides it), as the Rust guide's path
//! dependency does.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};

/// A plugin's language.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// Rust, with `paceline-plugin-sdk`.
    Rust,
    /// Python, with `paceline-plugin` (componentize-py).
    Python,
    /// TypeScript, with `@paceline/plugin-sdk` (componentize-js).
    Js,
}

/// A plugin's world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// Decides where tasks run.
    Placement,
    /// Chooses which running tasks to stop.
    Preemption,
    /// How one kind of job reacts to events.
    Lifecycle,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Placement => "placement",
            Kind::Preemption => "preemption",
            Kind::Lifecycle => "lifecycle",
        }
    }
}

/// Arguments of `plugin new`.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The plugin's name, also its directory: letters, digits and '-' (1 to 64).
    name: String,
    /// The language to write it in.
    #[arg(long, value_enum)]
    lang: Lang,
    /// The world it implements.
    #[arg(long, value_enum)]
    kind: Kind,
    /// Create the project in this directory instead of `./NAME`.
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Arguments of `plugin build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The project directory (with a plugin.toml).
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Where to write the component (default: DIR/target/NAME.wasm).
    #[arg(short, long)]
    out: Option<PathBuf>,
}

/// The Paceline checkout whose SDKs, `wit/` and scripts plugins build with.
pub fn paceline_root() -> PathBuf {
    match std::env::var_os("PACELINE_ROOT") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && name.starts_with(|c: char| c.is_ascii_lowercase())
}

/// `plugin new`.
pub fn new(a: NewArgs) -> anyhow::Result<ExitCode> {
    if !valid_name(&a.name) {
        bail!(
            "invalid plugin name `{}`: use lower-case letters, digits and '-', starting with a letter (1 to 64)",
            a.name
        );
    }
    let dir = a.dir.clone().unwrap_or_else(|| PathBuf::from(&a.name));
    if dir.exists() {
        bail!("{} already exists; choose another name or --dir (nothing was written)", dir.display());
    }
    let root = paceline_root();
    let root = root
        .canonicalize()
        .with_context(|| format!("the Paceline checkout {} is not there (set PACELINE_ROOT)", root.display()))?;
    let files = project(&a.name, a.lang, a.kind, &root);
    for (path, text) in &files {
        let p = dir.join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))?;
    }
    let test = match a.lang {
        Lang::Rust => "cargo test".to_string(),
        Lang::Python => format!("{}/target/toolchains/python/bin/python -m pytest", root.display()),
        Lang::Js => format!("node {}/sdk/js/tools/test.mjs test", root.display()),
    };
    let language = match a.lang {
        Lang::Rust => "Rust",
        Lang::Python => "Python",
        Lang::Js => "TypeScript",
    };
    println!("created {} ({language} {} plugin, {} files)", dir.display(), a.kind.as_str(), files.len());
    println!("  test natively:   cd {} && {test}", dir.display());
    println!("  build:           paceline plugin build {}", dir.display());
    println!(
        "  try it:          paceline plugin run {}/target/{}.wasm --scenario {}/scenarios/01-example.yaml",
        dir.display(),
        a.name,
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `plugin build`.
pub fn build(a: BuildArgs) -> anyhow::Result<ExitCode> {
    let script = paceline_root().join("scripts/plugin-build");
    if !script.exists() {
        bail!("{} is not there: set PACELINE_ROOT to a Paceline checkout", script.display());
    }
    let mut cmd = Command::new(&script);
    cmd.arg(&a.dir);
    if let Some(out) = &a.out {
        cmd.arg(out);
    }
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !out.status.success() {
        bail!("building {} failed (see above)", a.dir.display());
    }
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!("built {path} ({size} bytes)");
    Ok(ExitCode::SUCCESS)
}

/// The project's files: (relative path, contents).
pub fn project(name: &str, lang: Lang, kind: Kind, root: &Path) -> Vec<(String, String)> {
    let root = root.display().to_string();
    let manifest = |entry: &str| {
        let lang = match lang {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
        };
        format!(
            "# A Paceline plugin project: `paceline plugin build` reads this file.\nname = \"{name}\"\nlang = \"{lang}\"\nworld = \"{}\"\n{entry}",
            kind.as_str()
        )
    };
    let mut files = vec![("scenarios/01-example.yaml".to_string(), scenario(kind).to_string())];
    match lang {
        Lang::Rust => {
            files.push(("plugin.toml".into(), manifest("")));
            files.push((
                "Cargo.toml".into(),
                format!(
                    "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[lib]\n# cdylib: the component; rlib: the same code natively, for tests.\ncrate-type = [\"cdylib\", \"rlib\"]\n\n[dependencies]\npaceline-plugin-sdk = {{ path = \"{root}/sdk/plugin\" }}\n\n# Its own workspace, wherever it lives.\n[workspace]\n\n[profile.release]\nlto = true\ncodegen-units = 1\nstrip = true\npanic = \"abort\"\n"
                ),
            ));
            files.push(("src/lib.rs".into(), rust_source(kind).to_string()));
            files.push(("README.md".into(), readme(name, "cargo test", &root)));
        }
        Lang::Python => {
            files.push(("plugin.toml".into(), manifest("# The module that binds WitWorld.\nentry = \"app\"\n")));
            files.push((
                "pyproject.toml".into(),
                format!(
                    "[project]\nname = \"{name}\"\nversion = \"0.1.0\"\nrequires-python = \">=3.11\"\ndependencies = [\"paceline-plugin\"]\n\n[tool.pytest.ini_options]\npythonpath = [\".\"]\ntestpaths = [\"tests\"]\n"
                ),
            ));
            let (export, class) = match kind {
                Kind::Placement => ("export_placement", "Policy"),
                Kind::Preemption => ("export_preemption", "Policy"),
                Kind::Lifecycle => ("export_lifecycle", "Policy"),
            };
            files.push((
                "app.py".into(),
                format!(
                    "\"\"\"The component's entry module: componentize-py looks for `WitWorld` here.\"\"\"\n\nfrom paceline_plugin import {export}\nfrom policy import {class}\n\nWitWorld = {export}({class})\n"
                ),
            ));
            files.push(("policy.py".into(), python_source(kind).to_string()));
            let runner = match kind {
                Kind::Placement => "run_placement",
                Kind::Preemption => "run_preemption",
                Kind::Lifecycle => "run_lifecycle",
            };
            files.push((
                "tests/test_policy.py".into(),
                format!(
                    "\"\"\"Every scenario of scenarios/, run natively on the policy.\"\"\"\n\nfrom pathlib import Path\n\nimport pytest\nfrom paceline_plugin.harness import load_dir, {runner}\nfrom policy import Policy\n\nSCENARIOS = Path(__file__).resolve().parents[1] / \"scenarios\"\n\n\n@pytest.mark.parametrize(\"scenario\", load_dir(SCENARIOS), ids=lambda s: s.name)\ndef test_scenario(scenario):\n    {runner}(Policy, scenario)\n"
                ),
            ));
            files.push((
                "README.md".into(),
                readme(name, &format!("{root}/target/toolchains/python/bin/python -m pytest"), &root),
            ));
        }
        Lang::Js => {
            files.push((
                "plugin.toml".into(),
                manifest("# The module whose exports are the world's functions.\nentry = \"src/app.ts\"\n"),
            ));
            let app = match kind {
                Kind::Placement => {
                    "import { exportPlacement } from '@paceline/plugin-sdk';\nimport { policy } from './policy.ts';\n\nexport const place = exportPlacement(policy);\n"
                }
                Kind::Preemption => {
                    "import { exportPreemption } from '@paceline/plugin-sdk';\nimport { policy } from './policy.ts';\n\nexport const selectVictims = exportPreemption(policy);\n"
                }
                Kind::Lifecycle => {
                    "import { exportLifecycle } from '@paceline/plugin-sdk';\nimport { policy } from './policy.ts';\n\nconst exported = exportLifecycle(policy);\nexport const onEvent = exported.onEvent;\nexport const onEvents = exported.onEvents;\n"
                }
            };
            files.push((
                "src/app.ts".into(),
                format!("// The component's entry module: its exports are the world's functions.\n{app}"),
            ));
            files.push(("src/policy.ts".into(), js_source(kind).to_string()));
            let runner = match kind {
                Kind::Placement => "runPlacement",
                Kind::Preemption => "runPreemption",
                Kind::Lifecycle => "runLifecycle",
            };
            files.push((
                "test/policy.test.ts".into(),
                format!(
                    "// Every scenario of scenarios/, run natively on the policy.\nimport {{ test }} from 'node:test';\nimport {{ loadDir, {runner} }} from '@paceline/plugin-sdk/harness';\nimport {{ policy }} from '../src/policy.ts';\n\nfor (const s of loadDir('scenarios')) {{\n  test(s.name, () => {{\n    {runner}(policy, s);\n  }});\n}}\n"
                ),
            ));
            files.push((
                "tsconfig.json".into(),
                format!(
                    "{{\n  \"compilerOptions\": {{\n    \"target\": \"ES2022\",\n    \"module\": \"ES2022\",\n    \"moduleResolution\": \"bundler\",\n    \"strict\": true,\n    \"noEmit\": true,\n    \"allowImportingTsExtensions\": true,\n    \"skipLibCheck\": true,\n    \"types\": [\"node\"],\n    \"typeRoots\": [\"{root}/sdk/js/node_modules/@types\"],\n    \"baseUrl\": \".\",\n    \"paths\": {{\n      \"@paceline/plugin-sdk\": [\"{root}/sdk/js/src/index.ts\"],\n      \"@paceline/plugin-sdk/harness\": [\"{root}/sdk/js/src/harness.ts\"],\n      \"yaml\": [\"{root}/sdk/js/node_modules/yaml\"]\n    }}\n  }},\n  \"include\": [\"src/**/*.ts\", \"test/**/*.ts\", \"{root}/sdk/js/generated/**/*.d.ts\"]\n}}\n"
                ),
            ));
            files.push(("README.md".into(), readme(name, &format!("node {root}/sdk/js/tools/test.mjs test"), &root)));
        }
    }
    files
}

fn readme(name: &str, test: &str, root: &str) -> String {
    format!(
        "# {name}\n\nA Paceline plugin (see {root}/docs/plugin-guide.md).\n\n```sh\n{test}                                   # the scenarios, natively\npaceline plugin build .                             # the component: target/{name}.wasm\npaceline plugin run target/{name}.wasm --scenario scenarios/01-example.yaml\n```\n"
    )
}

fn scenario(kind: Kind) -> &'static str {
    match kind {
        Kind::Placement => {
            "name: the first host that fits wins; a task too big for every host stays unplaced\ninput:\n  placement:\n    hosts:\n      - { free: { cpu_millis: 500, memory_mib: 512 }, total: { cpu_millis: 4000, memory_mib: 8192 } }\n      - { free: { cpu_millis: 4000, memory_mib: 8192 }, total: { cpu_millis: 4000, memory_mib: 8192 } }\n    jobs: [ {} ]\n    constraints: [ {} ]\n    tasks:\n      - { gang: 0, demand: { cpu_millis: 1000, memory_mib: 1024 } }\n      - { gang: 1, demand: { cpu_millis: 9000 } }\nexpect:\n  placement:\n    assignments: [ { task: 0, host: 1 } ]\n    unplaced: [ { task: 1, reason: insufficient_resources } ]\n"
        }
        Kind::Preemption => {
            "name: the lowest-priority preemptible tasks go first, no more than needed\ninput:\n  preemption:\n    pools:\n      - { path: /a, allocation: { cpu_millis: 3000 } }\n      - { path: /b }\n    running:\n      - { pool: 0, priority: 5, preemptible: true, resources: { cpu_millis: 1000 } }\n      - { pool: 0, priority: 1, preemptible: true, resources: { cpu_millis: 1000 } }\n      - { pool: 0, priority: 0, preemptible: false, resources: { cpu_millis: 1000 } }\n    needs:\n      - { pool: 1, priority: 9, resources: { cpu_millis: 1000 }, from_pools: [0] }\nexpect:\n  preemption:\n    - { task: 1, need: 0, reason: over_entitlement }\n"
        }
        Kind::Lifecycle => {
            "name: a new job launches every instance\ninput:\n  lifecycle:\n    job: { kind: batch, state: pending, instance_count: 3 }\n    tasks: []\n    event: job_created\nexpect:\n  lifecycle: [ { launch: 0 }, { launch: 1 }, { launch: 2 } ]\n"
        }
    }
}

fn rust_source(kind: Kind) -> &'static str {
    match kind {
        Kind::Placement => {
            r#"//! A placement policy: first fit, in host index order.

use paceline_plugin_sdk::prelude::*;

/// First fit: the first eligible host where the task fits.
pub struct Policy;

impl PlacementPolicy for Policy {
    fn place(request: &PlacementRequest) -> PlacementResult {
        // Whole gangs or nothing; the lowest host index wins ties.
        place_gangs(Round::new(request), |round, t| round.pick_min_by_key(t, |h| h))
    }
}

export_placement!(Policy);

#[cfg(test)]
mod tests {
    #[test]
    fn scenarios() {
        for s in paceline_plugin_sdk::harness::load_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios")).expect("scenarios") {
            paceline_plugin_sdk::harness::run_placement::<super::Policy>(&s).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        }
    }
}
"#
        }
        Kind::Preemption => {
            r#"//! A preemption policy: the lowest-priority preemptible tasks of the
//! allowed pools, until each need is covered.

use paceline_plugin_sdk::prelude::*;

/// Lowest priority first.
pub struct Policy;

impl PreemptionPolicy for Policy {
    fn select_victims(request: &PreemptionRequest) -> Vec<Victim> {
        // GPU in milli-GPUs where the request carries them (WIT 0.1.3): the
        // unit the runtime judges the answer in.
        let request = &*request.in_milli_gpus();
        let mut taken = vec![false; request.running.len()];
        let mut victims = Vec::new();
        for (n, need) in request.needs.iter().enumerate() {
            let mut candidates: Vec<usize> = (0..request.running.len())
                .filter(|&i| {
                    let t = &request.running[i];
                    !taken[i] && t.preemptible && (need.from_pools.is_empty() || need.from_pools.contains(&t.pool))
                })
                .collect();
            candidates.sort_by_key(|&i| (request.running[i].priority, i));
            let mut freed = Resources::ZERO;
            for i in candidates {
                if need.resources.fits_in(&freed) {
                    break;
                }
                taken[i] = true;
                freed = freed.saturating_add(&request.running[i].resources);
                victims.push(Victim { task: i as u32, need: n as u32, reason: VictimReason::OverEntitlement });
            }
        }
        victims
    }
}

export_preemption!(Policy);

#[cfg(test)]
mod tests {
    #[test]
    fn scenarios() {
        for s in paceline_plugin_sdk::harness::load_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios")).expect("scenarios") {
            paceline_plugin_sdk::harness::run_preemption::<super::Policy>(&s).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        }
    }
}
"#
        }
        Kind::Lifecycle => {
            r#"//! A lifecycle: launch every instance when the job is created, restart
//! failed ones after a second, and mark the job succeeded when all are.

use paceline_plugin_sdk::prelude::*;

/// Run to completion, restarting failures.
pub struct Policy;

impl LifecyclePolicy for Policy {
    fn on_event(job: &JobView, tasks: &[TaskView], event: &Event) -> Vec<Action> {
        match event {
            Event::JobCreated => (0..job.instance_count).map(Action::Launch).collect(),
            Event::TaskChanged(c) if c.state == TaskState::Failed => {
                vec![Action::RestartAfter(Restart { instance: c.instance, delay_ms: 1_000 })]
            }
            Event::TaskChanged(c) if c.state == TaskState::Succeeded => {
                let done = tasks.iter().filter(|t| t.state == TaskState::Succeeded).count();
                if done as u32 >= job.instance_count { vec![Action::MarkJob(JobState::Succeeded)] } else { Vec::new() }
            }
            _ => Vec::new(),
        }
    }
}

export_lifecycle!(Policy);

#[cfg(test)]
mod tests {
    #[test]
    fn scenarios() {
        for s in paceline_plugin_sdk::harness::load_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios")).expect("scenarios") {
            paceline_plugin_sdk::harness::run_lifecycle::<super::Policy>(&s).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        }
    }
}
"#
        }
    }
}

fn python_source(kind: Kind) -> &'static str {
    match kind {
        Kind::Placement => {
            r#""""A placement policy: first fit, in host index order."""

from paceline_plugin import PlacementPolicy, Round, place_gangs


class Policy(PlacementPolicy):
    """First fit: the first eligible host where the task fits."""

    def place(self, request):
        # Whole gangs or nothing; the lowest host index wins ties.
        return place_gangs(Round(request), lambda round, t: round.pick_min_by_key(t, lambda h: h))
"#
        }
        Kind::Preemption => {
            r#""""A preemption policy: the lowest-priority preemptible tasks of the
allowed pools, until each need is covered."""

from paceline_plugin import PreemptionPolicy, Resources, Victim, VictimReason
from paceline_plugin.resources import fits_in, saturating_add


class Policy(PreemptionPolicy):
    """Lowest priority first."""

    def select_victims(self, request):
        taken = [False] * len(request.running)
        victims = []
        for n, need in enumerate(request.needs):
            candidates = [
                i
                for i, t in enumerate(request.running)
                if not taken[i] and t.preemptible and (not need.from_pools or t.pool in need.from_pools)
            ]
            candidates.sort(key=lambda i: (request.running[i].priority, i))
            freed = Resources()
            for i in candidates:
                if fits_in(need.resources, freed):
                    break
                taken[i] = True
                freed = saturating_add(freed, request.running[i].resources)
                victims.append(Victim(i, n, VictimReason.OVER_ENTITLEMENT))
        return victims
"#
        }
        Kind::Lifecycle => {
            r#""""A lifecycle: launch every instance when the job is created, restart
failed ones after a second, and mark the job succeeded when all are."""

from paceline_plugin import (
    JobCreated,
    JobState,
    Launch,
    LifecyclePolicy,
    MarkJob,
    RestartAfter,
    TaskChanged,
    TaskState,
)


class Policy(LifecyclePolicy):
    """Run to completion, restarting failures."""

    def on_event(self, job, tasks, event):
        if isinstance(event, JobCreated):
            return [Launch(i) for i in range(job.instance_count)]
        if isinstance(event, TaskChanged) and event.state == TaskState.FAILED:
            return [RestartAfter(event.instance, 1000)]
        if isinstance(event, TaskChanged) and event.state == TaskState.SUCCEEDED:
            done = sum(1 for t in tasks if t.state == TaskState.SUCCEEDED)
            return [MarkJob(JobState.SUCCEEDED)] if done >= job.instance_count else []
        return []
"#
        }
    }
}

fn js_source(kind: Kind) -> &'static str {
    match kind {
        Kind::Placement => {
            r#"// A placement policy: first fit, in host index order.
import { placeGangs, Round } from '@paceline/plugin-sdk';
import type { PlacementPolicy, PlacementRequest, PlacementResult } from '@paceline/plugin-sdk';

/** First fit: the first eligible host where the task fits. */
export const policy: PlacementPolicy = {
  place(request: PlacementRequest): PlacementResult {
    // Whole gangs or nothing; the lowest host index wins ties.
    return placeGangs(new Round(request), (round, t) => round.pickMinByKey(t, (h) => h));
  },
};
"#
        }
        Kind::Preemption => {
            r#"// A preemption policy: the lowest-priority preemptible tasks of the
// allowed pools, until each need is covered.
import { fitsIn, saturatingAdd, ZERO } from '@paceline/plugin-sdk';
import type { PreemptionPolicy, PreemptionRequest, Victim } from '@paceline/plugin-sdk';

/** Lowest priority first. */
export const policy: PreemptionPolicy = {
  selectVictims(request: PreemptionRequest): Victim[] {
    const taken = new Uint8Array(request.running.length);
    const victims: Victim[] = [];
    request.needs.forEach((need, n) => {
      const candidates = request.running
        .map((t, i) => ({ t, i }))
        .filter(({ t, i }) => !taken[i] && t.preemptible && (need.fromPools.length === 0 || need.fromPools.includes(t.pool)))
        .sort((a, b) => a.t.priority - b.t.priority || a.i - b.i);
      let freed = ZERO;
      for (const { t, i } of candidates) {
        if (fitsIn(need.resources, freed)) break;
        taken[i] = 1;
        freed = saturatingAdd(freed, t.resources);
        victims.push({ task: i, need: n, reason: 'over-entitlement' });
      }
    });
    return victims;
  },
};
"#
        }
        Kind::Lifecycle => {
            r#"// A lifecycle: launch every instance when the job is created, restart
// failed ones after a second, and mark the job succeeded when all are.
import type { Action, Event, JobView, LifecyclePolicy, TaskView } from '@paceline/plugin-sdk';

/** Run to completion, restarting failures. */
export const policy: LifecyclePolicy = {
  onEvent(job: JobView, tasks: TaskView[], event: Event): Action[] {
    if (event.tag === 'job-created') {
      return Array.from({ length: job.instanceCount }, (_, i): Action => ({ tag: 'launch', val: i }));
    }
    if (event.tag === 'task-changed' && event.val.state === 'failed') {
      return [{ tag: 'restart-after', val: { instance: event.val.instance, delayMs: 1000 } }];
    }
    if (event.tag === 'task-changed' && event.val.state === 'succeeded') {
      const done = tasks.filter((t) => t.state === 'succeeded').length;
      return done >= job.instanceCount ? [{ tag: 'mark-job', val: 'succeeded' }] : [];
    }
    return [];
  },
};
"#
        }
    }
}
