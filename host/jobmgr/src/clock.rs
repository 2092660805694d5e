//! Injected time: nothing in the job manager reads the wall clock directly,
//! so tests drive deadlines with a [`ManualClock`]. The clock is the joints'
//! (one definition for every role).

pub use paceline_joints::clock::{Clock, ManualClock, SystemClock};
