//! Prints the resource manager's benchmark report.
//!
//! `cargo run --release -p paceline-resmgr --example resmgr_bench`
//!
//! Besides the crate's own byte count of its structures, this example counts
//! what the allocator actually holds while 100,000 gangs are queued.
#![allow(unsafe_code)] // The counting allocator below; the library itself forbids unsafe.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn main() {
    print!("{}", paceline_resmgr::bench::report());
    let before = LIVE.load(Ordering::Relaxed);
    let rm = paceline_resmgr::bench::queued(100_000);
    let held = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    println!(
        "memory (allocator count): 100000 queued gangs, whole manager: {:.1} MB ({} bytes/gang)",
        held as f64 / 1e6,
        held / 100_000
    );
    drop(rm);
}
