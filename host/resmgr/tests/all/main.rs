//! One integration-test binary for the resource manager (links once).
//! Each module is one area; `common` holds the small builders they share.

mod admission;
mod common;
mod controller;
mod entitlement_props;
mod entitlement_table;
mod pool_changes;
mod preemption;
mod tasks;
mod timers;
