//! Injected time: the manager's heartbeat deadlines and lease TTLs run on a
//! [`Clock`], so a simulated cluster can drive them from its virtual clock
//! and tests never sleep. The clock is the joints' (one definition for every
//! role).

pub use paceline_joints::clock::{Clock, ManualClock, SystemClock};
