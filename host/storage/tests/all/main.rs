//! One integration-test binary: the conformance suite instantiated for
//! each backend, plus backend-specific tests (crash safety, schema).

mod bench_snapshot;
mod cassandra;
mod cassandra_upgrade;
mod cassandra_warnings;
mod conformance;
mod crash;
mod job_events;
mod memory;
mod snapshot;
mod sqlite;
mod task_writes;

/// Instantiates every conformance test for a backend. `$make` is an async
/// fn returning `Arc<dyn Store>`.
#[macro_export]
macro_rules! conformance_suite {
    ($make:path) => {
        $crate::conformance_suite!(@tests $make;
            jobs_config_versions_and_cas,
            job_queries_paginate_and_filter,
            job_create_with_tasks_is_all_or_nothing,
            job_queries_follow_changes,
            tasks_batch_create_query_and_cas,
            task_events_are_bounded_newest_first,
            task_events_of_many_runs_come_newest_first_and_go_with_the_job,
            updates_and_progress,
            pools_are_opaque_blobs,
            plugins_versions_bytes_and_active_slot,
            hosts_and_provider_ids,
            bad_input_is_refused_whole,
            cas_race_two_writers_exactly_one_wins,
            job_cas_and_create_races_have_one_winner,
            audit_log_filters_newest_first_and_prunes,
            secrets_are_sealed_records_per_pool,
        );
        $crate::conformance_suite!(@task_writes $make;
            task_writes_carry_their_events_and_a_lost_write_stores_none,
        );
        $crate::conformance_suite!(@job_events $make;
            job_events_fold_repeats_and_filter_by_task,
            job_events_are_bounded_per_job,
            job_events_refuse_bad_input_whole,
        );
    };
    (@job_events $make:path; $($name:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let store = $make().await;
                $crate::job_events::$name(store).await;
            }
        )*
    };
    (@task_writes $make:path; $($name:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let store = $make().await;
                $crate::task_writes::$name(store).await;
            }
        )*
    };
    (@tests $make:path; $($name:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let store = $make().await;
                $crate::conformance::$name(store).await;
            }
        )*
    };
}
