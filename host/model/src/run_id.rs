//! The id of one run of a task: `<job>-<instance>-<run>`, the one place it
//! is built and the one place it is split.
//!
//! Job ids may themselves contain `-`, so an id is split from the right: the
//! last two fields are the instance and the run number, the rest is the job.
//! Run ids come back from outside (agents, Mesos labels, Kubernetes pod
//! annotations, the simulator), so splitting one never panics: a malformed
//! id is a [`RunIdError`] that says what is wrong with it.

use std::fmt;
use std::str::FromStr;

use crate::task::TaskId;

/// One run of one task: run `run` of instance `instance` of job `job_id`.
/// Formats (and parses) as `<job>-<instance>-<run>`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunId {
    job_id: String,
    instance: u32,
    run: u64,
}

/// Why a string is not a run id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed run id {id:?}: {problem} (a run id is <job>-<instance>-<run>)")]
pub struct RunIdError {
    /// The string as given.
    pub id: String,
    /// What is wrong with it.
    pub problem: RunIdProblem,
}

/// What is wrong with a malformed run id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunIdProblem {
    /// Fewer than three `-`-separated fields.
    #[error("it has fewer than three '-'-separated fields")]
    TooFewFields,
    /// The job field is empty.
    #[error("the job id is empty")]
    EmptyJob,
    /// The instance field is not a number (decimal digits, no sign, no
    /// leading zero) that fits in 32 bits.
    #[error("the instance is not a 32-bit decimal number")]
    BadInstance,
    /// The run field is not a number (decimal digits, no sign, no leading
    /// zero) that fits in 64 bits.
    #[error("the run number is not a 64-bit decimal number")]
    BadRun,
}

impl RunId {
    /// Run `run` of instance `instance` of job `job_id`.
    pub fn new(job_id: impl Into<String>, instance: u32, run: u64) -> Self {
        RunId { job_id: job_id.into(), instance, run }
    }

    /// Run `run` of `task`.
    pub fn of_task(task: &TaskId, run: u64) -> Self {
        RunId::new(task.job_id.clone(), task.instance, run)
    }

    /// The job.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// The instance number.
    pub fn instance(&self) -> u32 {
        self.instance
    }

    /// The run number (1 for a task's first run).
    pub fn run(&self) -> u64 {
        self.run
    }

    /// The task this run is of.
    pub fn task_id(&self) -> TaskId {
        TaskId::new(self.job_id.clone(), self.instance)
    }

    /// Splits `id` into its job, instance and run without allocating: what
    /// [`RunId::from_str`] does, for the paths that read many ids and keep
    /// only a part.
    pub fn split(id: &str) -> Result<(&str, u32, u64), RunIdError> {
        let err = |problem| RunIdError { id: id.to_string(), problem };
        let mut parts = id.rsplitn(3, '-');
        let (Some(run), Some(instance), Some(job)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(err(RunIdProblem::TooFewFields));
        };
        let run = number(run).ok_or_else(|| err(RunIdProblem::BadRun))?;
        let instance =
            number(instance).and_then(|i| u32::try_from(i).ok()).ok_or_else(|| err(RunIdProblem::BadInstance))?;
        if job.is_empty() {
            return Err(err(RunIdProblem::EmptyJob));
        }
        Ok((job, instance, run))
    }

    /// The task id part of a run id (`<job>-<instance>-<run>` →
    /// `<job>-<instance>`), as a slice of `id`, once `id` is checked to be
    /// a run id.
    pub fn task_part(id: &str) -> Result<&str, RunIdError> {
        RunId::split(id)?;
        // A valid id has at least two '-'.
        Ok(id.rsplit_once('-').map_or(id, |(task, _)| task))
    }
}

/// A canonical decimal number: ASCII digits only, no sign, no leading zero
/// (so that what parses formats back to the same text).
fn number(s: &str) -> Option<u64> {
    let canonical = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    if canonical { s.parse().ok() } else { None }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.job_id, self.instance, self.run)
    }
}

impl FromStr for RunId {
    type Err = RunIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (job, instance, run) = RunId::split(s)?;
        Ok(RunId::new(job, instance, run))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_job_instance_run_and_parses_back() {
        let id = RunId::new("my-job", 3, 7);
        assert_eq!(id.to_string(), "my-job-3-7");
        assert_eq!("my-job-3-7".parse::<RunId>(), Ok(id.clone()));
        assert_eq!((id.job_id(), id.instance(), id.run()), ("my-job", 3, 7));
        assert_eq!(id.task_id(), TaskId::new("my-job", 3));
        assert_eq!(RunId::of_task(&TaskId::new("my-job", 3), 7), id);
        assert_eq!(TaskId::new("j", 0).run_id(1), "j-0-1");
        let big = RunId::new("j", u32::MAX, u64::MAX);
        assert_eq!(big.to_string().parse::<RunId>(), Ok(big));
    }

    #[test]
    fn job_ids_with_dashes_split_from_the_right() {
        assert_eq!(RunId::split("a-b-c-0-12"), Ok(("a-b-c", 0, 12)));
        assert_eq!(RunId::task_part("a-b-c-0-12"), Ok("a-b-c-0"));
        assert_eq!(RunId::split("-x--1-2"), Ok(("-x-", 1, 2)));
    }

    #[test]
    fn malformed_ids_from_outside_are_clear_errors() {
        let cases: &[(&str, RunIdProblem)] = &[
            ("", RunIdProblem::TooFewFields),
            ("x", RunIdProblem::TooFewFields),
            ("x-1", RunIdProblem::TooFewFields),
            ("-", RunIdProblem::TooFewFields),
            ("--", RunIdProblem::BadRun),
            ("job-1-", RunIdProblem::BadRun),
            ("job-1-x", RunIdProblem::BadRun),
            ("job-1-+7", RunIdProblem::BadRun),
            ("job-1--7", RunIdProblem::BadInstance),
            ("job-1-07", RunIdProblem::BadRun),
            ("job-1- 7", RunIdProblem::BadRun),
            ("job-1-99999999999999999999", RunIdProblem::BadRun),
            ("job-1-٣", RunIdProblem::BadRun),
            ("job--7", RunIdProblem::BadInstance),
            ("job-x-7", RunIdProblem::BadInstance),
            ("job-4294967296-7", RunIdProblem::BadInstance),
            ("job-01-7", RunIdProblem::BadInstance),
            ("-1-7", RunIdProblem::EmptyJob),
            ("pod/name-1-7\u{0}", RunIdProblem::BadRun),
        ];
        for (id, problem) in cases {
            let e = id.parse::<RunId>().expect_err(id);
            assert_eq!(e, RunIdError { id: id.to_string(), problem: *problem }, "{id:?}");
            assert_eq!(RunId::task_part(id), Err(e.clone()), "{id:?}");
            let text = e.to_string();
            assert!(text.starts_with("malformed run id ") && text.contains("<job>-<instance>-<run>"), "{text}");
        }
        assert_eq!(
            "job-x-7".parse::<RunId>().expect_err("bad").to_string(),
            "malformed run id \"job-x-7\": the instance is not a 32-bit decimal number (a run id is \
             <job>-<instance>-<run>)"
        );
    }

    #[test]
    fn zero_is_a_number() {
        assert_eq!(RunId::split("j-0-0"), Ok(("j", 0, 0)));
    }
}
