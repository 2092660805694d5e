//! How a simulated run behaves, read from its environment (see the crate
//! docs for the variables) or, when it has none, from the simulator's
//! random distributions.

use std::collections::BTreeMap;

/// The environment variables a task spec can set to script a simulated run.
pub mod vars {
    /// Milliseconds of virtual time from RUNNING to exit (default: forever).
    pub const DURATION_MS: &str = "SIM_DURATION_MS";
    /// Exit status when the run exits (default 0).
    pub const EXIT_CODE: &str = "SIM_EXIT_CODE";
    /// Runs whose run number (the last `-<n>` of the run id) is at most this fail with exit 1.
    pub const FAIL_RUNS: &str = "SIM_FAIL_RUNS";
    /// `1`: report healthy=false after RUNNING (runs with a health check only).
    pub const UNHEALTHY: &str = "SIM_UNHEALTHY";
}

/// A run's script.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Script {
    /// Virtual ms from RUNNING to exit; `None` runs until killed.
    pub duration_ms: Option<u64>,
    /// Exit status at the end.
    pub exit_code: i32,
    /// Health reported after RUNNING when the run has a health check.
    pub unhealthy: bool,
}

/// Random behaviour for runs whose environment scripts nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RandomRuns {
    /// Inclusive range of run durations in virtual ms; `None`: unscripted runs run forever.
    pub duration_ms: Option<(u64, u64)>,
    /// Chance, in 1/1000, that an unscripted run that ends exits 1.
    pub failure_per_mille: u32,
}

/// Reads the script from `spec_env` (then `extra_env`). An unparsable value
/// is an error naming the variable.
pub(crate) fn parse(
    run_id: &str,
    spec_env: &BTreeMap<String, String>,
    extra_env: &BTreeMap<String, String>,
    random: &RandomRuns,
    rng: &mut fastrand::Rng,
) -> Result<Script, String> {
    let get = |k: &str| spec_env.get(k).or_else(|| extra_env.get(k)).map(String::as_str);
    let num = |k: &'static str| -> Result<Option<u64>, String> {
        get(k).map(|v| v.trim().parse::<u64>().map_err(|e| format!("{k}: {v:?}: {e}"))).transpose()
    };
    let duration = num(vars::DURATION_MS)?;
    let exit = get(vars::EXIT_CODE)
        .map(|v| v.trim().parse::<i32>().map_err(|e| format!("{}: {v:?}: {e}", vars::EXIT_CODE)))
        .transpose()?;
    let fail_runs = num(vars::FAIL_RUNS)?;
    let unhealthy = get(vars::UNHEALTHY).is_some_and(|v| v.trim() == "1");
    let run_number = paceline_model::RunId::split(run_id).map_or(0, |(_, _, run)| run);
    let forced_fail = fail_runs.is_some_and(|k| run_number <= k);

    let scripted = duration.is_some() || exit.is_some() || fail_runs.is_some() || unhealthy;
    if !scripted {
        // Unscripted: the bench's distributions.
        let Some((lo, hi)) = random.duration_ms else {
            return Ok(Script::default());
        };
        let fails = random.failure_per_mille > 0 && rng.u32(0..1000) < random.failure_per_mille;
        return Ok(Script {
            duration_ms: Some(rng.u64(lo..=hi.max(lo))),
            exit_code: i32::from(fails),
            unhealthy: false,
        });
    }
    let exit_code = if forced_fail { 1 } else { exit.unwrap_or(0) };
    // A run scripted to fail but given no duration fails at once rather than never.
    let duration_ms = duration.or(if exit.is_some() || forced_fail { Some(0) } else { None });
    Ok(Script { duration_ms, exit_code, unhealthy })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
    }

    #[test]
    fn table() {
        let none = RandomRuns::default();
        type Env<'a> = &'a [(&'a str, &'a str)];
        let cases: &[(&str, &str, Env<'_>, Result<Script, ()>)] = &[
            ("empty runs forever", "j-0-1", &[], Ok(Script::default())),
            (
                "duration",
                "j-0-1",
                &[("SIM_DURATION_MS", "50")],
                Ok(Script { duration_ms: Some(50), ..Script::default() }),
            ),
            (
                "exit code alone exits at once",
                "j-0-1",
                &[("SIM_EXIT_CODE", "3")],
                Ok(Script { duration_ms: Some(0), exit_code: 3, unhealthy: false }),
            ),
            (
                "fail runs hits run 2",
                "j-0-2",
                &[("SIM_FAIL_RUNS", "2"), ("SIM_DURATION_MS", "10")],
                Ok(Script { duration_ms: Some(10), exit_code: 1, unhealthy: false }),
            ),
            (
                "fail runs spares run 3",
                "j-0-3",
                &[("SIM_FAIL_RUNS", "2"), ("SIM_DURATION_MS", "10")],
                Ok(Script { duration_ms: Some(10), exit_code: 0, unhealthy: false }),
            ),
            ("fail runs spares forever run", "j-0-3", &[("SIM_FAIL_RUNS", "2")], Ok(Script::default())),
            ("unhealthy", "j-0-1", &[("SIM_UNHEALTHY", "1")], Ok(Script { unhealthy: true, ..Script::default() })),
            ("bad duration", "j-0-1", &[("SIM_DURATION_MS", "soon")], Err(())),
        ];
        let mut rng = fastrand::Rng::with_seed(1);
        for (name, run, vars, want) in cases {
            let got = parse(run, &env(vars), &BTreeMap::new(), &none, &mut rng).map_err(|_| ());
            assert_eq!(&got, want, "{name}");
        }
    }
}
