//! Admission: gangs whole or not at all, priority-then-FIFO, the head-of-line
//! rules, revocable work on slack, and "why pending".

use paceline_model::Resources;
use paceline_model::job::JobKind;
use paceline_resmgr::{GangSpec, PendingReason, PoolSpec, ResourceKind};
use proptest::prelude::*;

use crate::common::{cpu, gang, manager};

#[test]
fn gang_of_8_is_admitted_whole_or_not_at_all() {
    let mut rm = manager(7_500);
    rm.create_pool("/a", PoolSpec::default()).expect("a");
    let g = rm.submit("/a", gang(1, 8, 1_000), 0).expect("submit");
    let report = rm.tick(1);
    assert_eq!(report.admitted_gangs, 0);
    let a = rm.pool_status("/a").expect("a");
    assert_eq!(a.allocation.cpu_millis, 0, "no part of the gang is allocated");
    assert_eq!(rm.ready_len(JobKind::Batch), 0);
    let why = rm.why_pending(g).expect("queued");
    assert_eq!(why.reason, PendingReason::OverEntitlement { kind: ResourceKind::Cpu, by: 500 });
    assert_eq!(why.to_string(), "over entitlement by 500 millicores of cpu in pool /a");

    rm.set_capacity(Resources::new(8_000, 1 << 40, 1 << 40, 1 << 20));
    assert_eq!(rm.tick(2).admitted_gangs, 1);
    assert_eq!(rm.pool_status("/a").expect("a").allocation.cpu_millis, 8_000);
    assert!(rm.why_pending(g).is_none());
    let mut out = Vec::new();
    assert_eq!(rm.take_ready(JobKind::Batch, 3, 3, &mut out), 8, "a gang is never split across batches");
    assert!(out.iter().all(|t| t.gang == out[0].gang));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever the capacity and the gangs, allocation is always a sum of whole gangs.
    #[test]
    fn allocation_is_whole_gangs(capacity in 0u64..40_000, sizes in prop::collection::vec((1u32..9, 100u64..2_000), 1..12)) {
        let mut rm = manager(capacity);
        rm.create_pool("/a", PoolSpec::default()).expect("a");
        for (i, (n, c)) in sizes.iter().enumerate() {
            rm.submit("/a", gang(i as u64, *n, *c), 0).expect("submit");
        }
        rm.tick(1);
        let alloc = rm.pool_status("/a").expect("a").allocation.cpu_millis;
        // Admission is FIFO within a priority: exactly a prefix of the gangs is admitted.
        let mut prefix = 0;
        let mut found = alloc == 0;
        for (n, c) in &sizes {
            prefix += u64::from(*n) * c;
            found |= prefix == alloc;
        }
        prop_assert!(found, "allocation {} is not a prefix of whole gangs", alloc);
        prop_assert!(alloc <= capacity);
    }
}

#[test]
fn priority_then_fifo() {
    let mut rm = manager(3_000);
    rm.create_pool("/a", PoolSpec::default()).expect("a");
    let low = GangSpec { priority: 1, ..gang(1, 1, 1_000) };
    let high = GangSpec { priority: 9, ..gang(2, 1, 1_000) };
    let l1 = rm.submit("/a", low, 0).expect("l1");
    rm.submit("/a", high, 0).expect("h1");
    rm.submit("/a", GangSpec { job: 3, ..high }, 0).expect("h2");
    rm.tick(1);
    let mut out = Vec::new();
    rm.take_ready(JobKind::Batch, 10, 1, &mut out);
    let order: Vec<u64> = out.iter().map(|t| t.job).collect();
    assert_eq!(order, vec![2, 3, 1], "high priority first, FIFO within it");
    assert!(rm.why_pending(l1).is_none());
}

#[test]
fn reservation_wait_does_not_block_preemptible_work() {
    let mut rm = manager(10_000);
    rm.create_pool("/a", cpu(2_000, None, 1)).expect("a");
    let big_np = rm.submit("/a", GangSpec { preemptible: false, ..gang(1, 3, 1_000) }, 0).expect("np");
    let pre = rm.submit("/a", gang(2, 2, 1_000), 0).expect("preemptible");
    let small_np = rm.submit("/a", GangSpec { preemptible: false, ..gang(3, 1, 1_000) }, 0).expect("np2");
    rm.tick(1);
    assert!(rm.why_pending(pre).is_none(), "preemptible gang went ahead");
    let why = rm.why_pending(big_np).expect("waits");
    assert_eq!(
        why.reason,
        PendingReason::WaitingOnReservation { kind: ResourceKind::Cpu, by: 1_000, reservation: 2_000, need: 3_000 }
    );
    assert_eq!(
        rm.why_pending(small_np).expect("waits").reason,
        PendingReason::BehindHead { head: big_np },
        "non-preemptible order kept"
    );
    let a = rm.pool_status("/a").expect("a");
    assert_eq!((a.allocation.cpu_millis, a.non_preemptible_allocation.cpu_millis), (2_000, 0));
}

/// `examples/pools.yaml`: a leaf with no reservation under a parent that
/// has one. A non-preemptible job there can never be admitted, and each of
/// its gangs says so, not only the head: the one behind waits for the pool
/// to change, not for the gang before it (an earlier task of its own job).
#[test]
fn non_preemptible_gangs_a_reservation_can_never_hold_say_so_even_behind_the_head() {
    let mut rm = manager(8_000);
    rm.create_pool("/team-a", cpu(4_000, Some(8_000), 2)).expect("team-a");
    rm.create_pool("/team-a/batch", PoolSpec::default()).expect("batch");
    let np = |instance| GangSpec { preemptible: false, first_instance: instance, ..gang(1, 1, 1_000) };
    let first = rm.submit("/team-a/batch", np(0), 0).expect("0");
    let second = rm.submit("/team-a/batch", np(1), 0).expect("1");
    rm.tick(1);
    let never = PendingReason::WaitingOnReservation { kind: ResourceKind::Cpu, by: 1_000, reservation: 0, need: 1_000 };
    assert!(never.never());
    for g in [first, second] {
        assert_eq!(rm.why_pending(g).expect("waits").reason, never, "not behind_head: no head matters");
    }
    let counts: Vec<_> = rm.pending_counts().into_iter().map(|c| (c.pool, c.reason, c.gangs)).collect();
    assert_eq!(counts, vec![("/team-a/batch".to_string(), "waiting_on_reservation", 2)], "the metric agrees");

    // The first fix the text names: a reservation for both.
    rm.update_pool("/team-a/batch", cpu(2_000, None, 1)).expect("reserve");
    rm.tick(2);
    assert!(rm.why_pending(first).is_none() && rm.why_pending(second).is_none(), "both admitted");
}

/// A gang the reservation could hold at the head still waits its turn
/// behind one it never could (non-preemptible order is kept).
#[test]
fn a_gang_the_reservation_could_hold_still_waits_behind_the_head() {
    let mut rm = manager(10_000);
    rm.create_pool("/a", cpu(1_500, None, 1)).expect("a");
    let big = rm.submit("/a", GangSpec { preemptible: false, ..gang(1, 2, 1_000) }, 0).expect("big");
    let small = rm.submit("/a", GangSpec { preemptible: false, ..gang(2, 1, 1_000) }, 0).expect("small");
    rm.tick(1);
    assert!(rm.why_pending(big).expect("waits").reason.never());
    assert_eq!(rm.why_pending(small).expect("waits").reason, PendingReason::BehindHead { head: big });
}

/// Short in a kind only because other work holds the reservation, and in
/// another kind the reservation never covers: the second is named.
#[test]
fn a_reservation_wait_names_the_kind_the_reservation_can_never_hold() {
    let mut rm = manager(10_000);
    rm.create_pool("/a", cpu(2_000, None, 1)).expect("a");
    let np = |job, cpu, memory| GangSpec {
        preemptible: false,
        per_task: Resources::new(cpu, memory, 0, 0),
        ..gang(job, 1, cpu)
    };
    rm.submit("/a", np(1, 2_000, 0), 0).expect("holds the cpu reservation");
    let g = rm.submit("/a", np(2, 1_000, 256), 0).expect("needs memory too");
    rm.tick(1);
    assert_eq!(
        rm.why_pending(g).expect("waits").reason,
        PendingReason::WaitingOnReservation { kind: ResourceKind::Memory, by: 256, reservation: 0, need: 256 }
    );
}

#[test]
fn over_entitlement_blocks_the_lane_behind_it() {
    let mut rm = manager(10_000);
    rm.create_pool("/a", cpu(0, Some(3_000), 1)).expect("a");
    let big = rm.submit("/a", gang(1, 4, 1_000), 0).expect("big");
    let small = rm.submit("/a", gang(2, 1, 1_000), 0).expect("small");
    rm.tick(1);
    assert_eq!(
        rm.why_pending(big).expect("waits").reason,
        PendingReason::OverEntitlement { kind: ResourceKind::Cpu, by: 1_000 }
    );
    assert_eq!(
        rm.why_pending(small).expect("waits").reason,
        PendingReason::BehindHead { head: big },
        "no starving the big gang"
    );
}

#[test]
fn revocable_work_runs_on_slack_within_slack_limit() {
    let mut rm = manager(10_000);
    let mut spec = cpu(0, None, 1);
    spec.slack_limit.cpu = 3_000;
    rm.create_pool("/a", spec).expect("a");
    rm.create_pool("/b", cpu(0, None, 1)).expect("b");
    let rev = GangSpec { revocable: true, ..gang(1, 1, 1_000) };
    for i in 0..5 {
        rm.submit("/a", GangSpec { job: i, ..rev }, 0).expect("rev");
    }
    let blocked = rm.submit("/b", GangSpec { job: 9, ..rev }, 0).expect("b has no slack limit");
    rm.tick(1);
    let a = rm.pool_status("/a").expect("a");
    assert_eq!(a.revocable_allocation.cpu_millis, 3_000, "capped by the slack limit");
    assert_eq!(a.allocation.cpu_millis, 0, "revocable work is accounted apart");
    assert!(matches!(rm.why_pending(blocked).expect("waits").reason, PendingReason::OverSlackEntitlement { .. }));
}

#[test]
fn fifo_queue_policy_ignores_priority_for_order() {
    let mut rm = manager(1_000);
    let spec = PoolSpec { queue_policy: paceline_resmgr::QueuePolicy::Fifo, ..PoolSpec::default() };
    rm.create_pool("/a", spec).expect("a");
    let first = rm.submit("/a", GangSpec { priority: 1, ..gang(1, 1, 1_000) }, 0).expect("first");
    let later = rm.submit("/a", GangSpec { priority: 9, ..gang(2, 1, 1_000) }, 0).expect("later");
    rm.tick(1);
    assert!(rm.why_pending(first).is_none(), "first in, first admitted");
    // The pool may use the whole cluster and its own work holds it: what is
    // short is the cluster (admission still records it over entitlement).
    let why = rm.why_pending(later).expect("waits");
    assert_eq!(why.reason, PendingReason::ClusterUsedUp { kind: ResourceKind::Cpu, by: 1_000 });
    assert!(why.to_string().starts_with("the cluster's cpu is all in use (1000 millicores short)"), "{why}");
}

#[test]
fn a_pool_that_held_the_cluster_and_is_now_owed_half_is_over_entitlement_not_waiting_for_the_cluster() {
    let mut rm = manager(2_000);
    rm.create_pool("/a", PoolSpec::default()).expect("a");
    rm.create_pool("/b", PoolSpec::default()).expect("b");
    for job in 0..2 {
        rm.submit("/a", gang(job, 1, 1_000), 0).expect("a");
    }
    rm.tick(1);
    // /a holds the cluster; /b's demand now halves /a's share.
    let b = rm.submit("/b", gang(10, 1, 1_000), 0).expect("b");
    let a = rm.submit("/a", gang(11, 1, 1_000), 0).expect("a again");
    rm.tick(2);
    let why_a = rm.why_pending(a).expect("waits");
    assert!(matches!(why_a.reason, PendingReason::OverEntitlement { .. }), "{why_a}: /a is entitled to half");
    let why_b = rm.why_pending(b).expect("waits");
    assert!(matches!(why_b.reason, PendingReason::ClusterFull { .. }), "{why_b}: /b is owed its half");
}

#[test]
fn pool_changes_take_effect_at_the_next_pass() {
    let mut rm = manager(10_000);
    rm.create_pool("/a", cpu(0, Some(2_000), 1)).expect("a");
    rm.create_pool("/b", cpu(0, None, 1)).expect("b");
    rm.submit("/a", gang(1, 1, 8_000), 0).expect("a");
    rm.submit("/b", gang(2, 1, 8_000), 0).expect("b");
    rm.tick(1);
    assert_eq!(crate::common::ent(&rm, "/a"), 2_000);
    rm.update_pool("/a", cpu(5_000, None, 1)).expect("raise");
    rm.recompute_entitlement();
    // /a: reservation 5000 first, then the other 5000 split 1:1 → 7500; /b 2500.
    assert_eq!(crate::common::ent(&rm, "/a"), 7_500, "reservation now guaranteed, limit gone");
    assert_eq!(crate::common::ent(&rm, "/b"), 2_500);
}

#[test]
fn bench_workloads_run_at_small_size() {
    let (n, _, _) = paceline_resmgr::bench::admission_figures(5_000);
    assert_eq!(n, 5_000);
    let rm = paceline_resmgr::bench::queued(1_000);
    assert_eq!(rm.pool_status("/").expect("root").queued_gangs, 1_000);
    assert!(rm.queue_bytes() > 1_000 * 100, "the byte count sees the gang records");
}

#[test]
fn a_pool_static_at_zero_memory_says_so_in_why_pending() {
    let mut rm = manager(10_000);
    // What `type: static` with a reservation naming only cpu declares.
    let mut spec = crate::common::static_cpu(2_000);
    spec.pool_type = paceline_resmgr::PerKind::splat(paceline_resmgr::PoolType::Static);
    rm.create_pool("/a", spec).expect("the resource manager itself takes it (stored pools must load)");
    let g =
        rm.submit("/a", GangSpec { per_task: Resources::new(500, 64, 0, 0), ..gang(1, 1, 500) }, 0).expect("submit");
    rm.tick(1);
    let why = rm.why_pending(g).expect("waits");
    assert_eq!(why.reason, PendingReason::PoolCannotHold { kind: ResourceKind::Memory, is_static: true });
    let text = why.to_string();
    assert!(
        text.contains("static in memory with no memory reservation") && text.contains("reservation.memory_mib"),
        "{text}"
    );
    let mut limited = PoolSpec::default();
    limited.limit.gpu = 0;
    rm.create_pool("/b", limited).expect("b");
    let gpu = rm.submit("/b", GangSpec { per_task: Resources::new(100, 0, 0, 1), ..gang(2, 1, 100) }, 0).expect("gpu");
    rm.tick(2);
    assert_eq!(
        rm.why_pending(gpu).expect("waits").reason,
        PendingReason::PoolCannotHold { kind: ResourceKind::Gpu, is_static: false }
    );
    assert!(rm.why_pending(gpu).expect("waits").to_string().contains("limit.gpus 0"));
}
