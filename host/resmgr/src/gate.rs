//! The availability gate: the port through which a preemption round asks
//! whoever keeps a job's count of unavailable instances (the job manager,
//! decision 0046) which running instances of a stateless job it may take
//! down. This crate does not know jobs' health or their SLA; the job
//! manager depends on this crate, so the port is declared here and the job
//! manager implements it (installed where the roles are assembled).

/// One job's candidates in a preemption round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateAsk {
    /// The job (the resource manager's key).
    pub job: u64,
    /// Its running instances the round could choose, in the order the round
    /// would rather take them.
    pub instances: Vec<u32>,
}

/// What a round does with the gate's answer: given, per ask, the instances
/// granted, it returns the victims it commits among them as (job, instance).
pub type Choose<'a> = dyn FnMut(&[Vec<u32>]) -> Vec<(u64, u32)> + 'a;

/// The permission a preemption round asks before it commits a victim of a
/// stateless job.
pub trait AvailabilityGate: Send + Sync {
    /// One preemption round, one call for every job in `asks`. The gate
    /// answers, per ask and in the same order, the instances that may be
    /// taken down together now, and calls `choose` with that answer once;
    /// `choose` returns the victims the round commits among them, as (job,
    /// instance). The gate counts those as unavailable before it returns,
    /// so that no other path (a drain, an update) takes another instance of
    /// the job down in between. An instance not granted is not a victim of
    /// this round; the round picks from others.
    fn round(&self, asks: &[GateAsk], choose: &mut Choose<'_>);
}
