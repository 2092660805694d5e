//! The default plugins and the adversarial test guests, compiled for
//! `wasm32-wasip2` by this crate's build script.
//!
//! Every host test names its guest through a constant here, and the
//! `paceline` binary embeds the default plugins from here, so no test or
//! command builds Wasm by hand. Owns nothing else.
//!
//! Defaults: `BINPACK`, `SPREAD`, `GANG_GPU` (placement), `PRIORITY_PREEMPT`
//! (preemption), `BATCH`, `STATELESS`, `STATEFUL`, `DAEMON` (lifecycle);
//! `GPU_FGD` and the GPU-sharing baselines `GPU_RANDOM`, `GPU_BESTFIT`,
//! `GPU_DOTPROD`, `GPU_PACKING` (placement, decision 0035). Test guests: `GUEST_LOOP` (never returns), `GUEST_OOM`
//! (allocates without bound), `GUEST_PANIC` (panics), `GUEST_GARBAGE`
//! (answers with invalid indices), `GUEST_STACK` (recurses without bound),
//! `GUEST_ENTROPY` (reports the clocks, randomness and environment it sees),
//! `GUEST_GREEDY` (preemption: victims not preemptible, or more or fewer than
//! needed), `GUEST_PREMATURE` (lifecycle: marks the job succeeded before it
//! ran, launches past the count, moves the job backwards), `GUEST_GPU_GREEDY`
//! (placement: grants device 0 to every GPU task, overcommitting it).

include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));
