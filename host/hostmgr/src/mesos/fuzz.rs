//! The Mesos event stream as fuzz targets see it: bytes as they come off a
//! SUBSCRIBE response, through the RecordIO decoder, the event decoder and
//! the provider's event handling, on a fresh provider with no master.
//! Reached through [`crate::fuzz_entry::mesos_stream`].

use std::time::Duration;

use tokio::sync::mpsc;

use super::{Encoding, MesosConfig, MesosProvider, decode_event, lock, recordio};

/// Feeds `data` as one subscription's body. Returns how many events were
/// handled without error (seed tests use it to see that seeds get deep).
pub(crate) fn stream(data: &[u8], encoding: Encoding) -> usize {
    let config = MesosConfig {
        encoding,
        // Hosts register on their first offer, so offers reach the inventory path.
        registration_delay: Duration::ZERO,
        ..MesosConfig::default()
    };
    let provider = MesosProvider::new(config, None);
    let (tx, mut rx) = mpsc::channel(64);
    *lock(&provider.inner.events) = Some(tx);
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_time().build() else {
        return 0;
    };
    // What the provider emits is drained as it comes (it runs whenever an
    // event handler awaits), so a large OFFERS event cannot block on a full channel.
    rt.spawn(async move { while rx.recv().await.is_some() {} });
    let mut handled = 0;
    let mut decoder = recordio::Decoder::new();
    // Fed in two parts so a record cut across reads is exercised too.
    let half = data.len() / 2;
    for part in [&data[..half], &data[half..]] {
        decoder.push(part);
        loop {
            let record = match decoder.next_record() {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(_) => return handled,
            };
            let Ok(event) = decode_event(&record, encoding) else {
                return handled;
            };
            let inner = provider.inner.clone();
            if rt.block_on(async move { inner.on_event(event).await }).is_ok() {
                handled += 1;
            }
        }
    }
    let _ = decoder.finish();
    provider.shutdown();
    handled
}
