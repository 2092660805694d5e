use paceline_jobmgr::JobError;
use paceline_model::job::{JobConfig, JobKind};
use paceline_storage::JobQuery;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_invalid_spec_is_rejected_naming_the_field_and_nothing_is_persisted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    {
        let mut rm = h.resmgr.lock().expect("rm");
        rm.create_pool("/parent", Default::default()).expect("pool");
        rm.create_pool("/parent/child", Default::default()).expect("pool");
    }
    type Case = (&'static str, &'static str, fn(&mut JobConfig));
    let cases: Vec<Case> = vec![
        ("empty name", "name", |c| c.name.clear()),
        ("empty owner", "owner", |c| c.owner.clear()),
        ("relative pool", "pool", |c| c.pool = "test".into()),
        ("unknown pool", "pool", |c| c.pool = "/nope".into()),
        ("interior pool", "pool", |c| c.pool = "/parent".into()),
        ("root pool", "pool", |c| c.pool = "/".into()),
        ("no instances", "instance_count", |c| c.instance_count = 0),
        ("too many instances", "instance_count", |c| c.instance_count = 200_000),
        ("gang larger than job", "sla.min_running_instances", |c| c.sla.min_running_instances = Some(9)),
        ("zero gang", "sla.min_running_instances", |c| c.sla.min_running_instances = Some(0)),
        ("zero max run time", "sla.max_run_time_secs", |c| c.sla.max_run_time_secs = Some(0)),
        ("no command", "command", |c| c.default_task.command.clear()),
        ("port count mismatch", "resources.ports", |c| c.default_task.ports = vec!["http".into()]),
        ("duplicate ports", "default_task.ports", |c| {
            c.default_task.ports = vec!["http".into(), "http".into()];
            c.default_task.resources.ports = 2;
        }),
        ("bad port name", "default_task.ports", |c| {
            c.default_task.ports = vec!["h ttp".into()];
            c.default_task.resources.ports = 1;
        }),
        ("override out of range", "instance_overrides", |c| {
            c.instance_overrides.insert(5, c.default_task.clone());
        }),
        ("batch larger than job", "update.batch_size", |c| c.update.batch_size = 5),
        ("bad plugin slot", "plugin_overrides", |c| {
            c.plugin_overrides.insert("nope".into(), "x".into());
        }),
        ("preemptible stateful", "sla.preemptible", |c| {
            c.kind = JobKind::Stateful;
            c.sla.preemptible = true;
        }),
    ];
    for (name, field, mutate) in cases {
        let mut c = config(JobKind::Batch, 2);
        mutate(&mut c);
        match h.jm.create("bad", c).await {
            Err(JobError::Invalid { field: f, reason }) => assert_eq!(f, field, "{name}: {reason}"),
            other => panic!("{name}: expected an invalid-spec error on {field}, got {other:?}"),
        }
    }
    match h.jm.create("bad id", config(JobKind::Batch, 1)).await {
        Err(JobError::Invalid { field, .. }) => assert_eq!(field, "id"),
        other => panic!("bad id accepted: {other:?}"),
    }
    let page = h.jm.query(&JobQuery { limit: 100, ..JobQuery::default() }).await.expect("query");
    assert!(page.items.is_empty(), "nothing persisted: {:?}", page.items);
    assert!(h.jm.get("bad").await.is_err());
    h.jm.create("good", config(JobKind::Batch, 2)).await.expect("a valid job is accepted");
    assert_eq!(h.jm.query(&JobQuery { limit: 100, ..JobQuery::default() }).await.expect("query").items.len(), 1);
}
