//! What a node says back to a connecting store: no warnings. Cassandra 5
//! warns, once per connection, about every statement prepared with an
//! unqualified table under `USE <keyspace>`; the driver logs each at WARN,
//! so a server would print three at every start on a one-node store and
//! more on a cluster. The store names its keyspace in every prepared
//! statement instead (`cassandra/stmts.rs`).

use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

/// The WARN events the driver logs, with their fields.
#[derive(Clone, Default)]
struct DriverWarnings(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push_str(&format!(" {}={value}", field.name()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl<S: tracing::Subscriber> Layer<S> for DriverWarnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        if *meta.level() != tracing::Level::WARN || !meta.target().starts_with("scylla") {
            return;
        }
        let mut fields = Fields(meta.target().to_string());
        event.record(&mut fields);
        if let Ok(mut seen) = self.0.lock() {
            seen.push(fields.0);
        }
    }
}

// One thread: the driver's connection tasks run where the test's
// subscriber is in force.
#[tokio::test(flavor = "current_thread")]
async fn a_store_connects_and_migrates_without_a_warning_from_the_database() {
    let warnings = DriverWarnings::default();
    let ks = {
        let _in_force = tracing::subscriber::set_default(tracing_subscriber::registry().with(warnings.clone()));
        // A keyspace of its own: created, migrated (the index backfill
        // prepares its own statement) and every statement prepared.
        let (store, ks) = super::cassandra::fresh("warnings").await;
        // And a second connect to the migrated keyspace, as a restart makes.
        let again = paceline_storage::cassandra::CassandraStore::connect(&super::cassandra::config(&ks))
            .await
            .unwrap_or_else(|e| panic!("second connect to {ks}: {e}"));
        drop((store, again));
        ks
    };
    super::cassandra::drop_keyspace(&ks).await;
    let seen = warnings.0.lock().map(|w| w.clone()).unwrap_or_default();
    let from_the_database: Vec<&String> = seen.iter().filter(|w| w.contains("database")).collect();
    assert!(from_the_database.is_empty(), "the node warned the store:\n{from_the_database:#?}");
}
