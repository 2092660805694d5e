//! Entry points for the fuzz targets (`scripts/fuzz`, `fuzz/afl`): each
//! takes arbitrary bytes and runs them through the real parsing and
//! handling code of one outside input. Not an API; the only promise is the
//! fuzzed property: whatever the bytes, no panic.

use crate::mesos::Encoding;

/// Bytes of a Mesos SUBSCRIBE response body: RecordIO framing, events in
/// `encoding`, handled by a fresh [`crate::MesosProvider`] (no master).
/// Returns how many events were handled without error.
pub fn mesos_stream(data: &[u8], encoding: Encoding) -> usize {
    crate::mesos::fuzz::stream(data, encoding)
}

/// Bytes of an agent's session stream: length-delimited `AgentMessage`s run
/// through the agent provider's session code. Returns how many provider
/// events the session handed on.
pub fn agent_stream(data: &[u8]) -> usize {
    crate::agent::fuzz::stream(data)
}
