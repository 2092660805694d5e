//! Calls to the master other than SUBSCRIBE: built into an HTTP request
//! with the stream id, sent in order by one task (`Inner::run_calls`);
//! a `307` or `403` makes the subscription start again, and a failed
//! launch rejects its runs.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::{Call, call};
use tokio::sync::mpsc;
use tracing::warn;

use super::{API_PATH, Inner, MesosError, Outgoing, encode_call};
use crate::provider::ProviderEvent;

/// Base URL (`http://host:port`) of a `Location` header (Mesos sends `//host:port/path`).
pub(super) fn base_of_location(location: &str) -> String {
    let abs =
        if let Some(rest) = location.strip_prefix("//") { format!("http://{rest}") } else { location.to_string() };
    match abs.find("://").map(|i| i + 3) {
        Some(start) => {
            let end = abs[start..].find('/').map_or(abs.len(), |i| start + i);
            abs[..end].to_string()
        }
        None => format!("http://{}", abs.split('/').next().unwrap_or_default()),
    }
}

impl Inner {
    pub(super) fn request(
        &self,
        base: &str,
        body: Vec<u8>,
        stream_id: Option<&str>,
    ) -> Result<hyper::Request<Full<Bytes>>, MesosError> {
        let url = format!("{base}{API_PATH}");
        let mut b = hyper::Request::post(&url)
            .header(hyper::header::CONTENT_TYPE, self.config.encoding.media_type())
            .header(hyper::header::ACCEPT, self.config.encoding.media_type());
        if let Some(id) = stream_id {
            b = b.header("Mesos-Stream-Id", id);
        }
        b.body(Full::new(Bytes::from(body))).map_err(|e| MesosError::BadUrl(url, e.to_string()))
    }

    /// Sends one call (not SUBSCRIBE) to the leader with the stream id.
    /// Returns the stream id the call was sent with, and its outcome.
    pub(super) async fn send_call(&self, c: Call) -> (Option<String>, Result<(), MesosError>) {
        let stream = self.st().stream_id.clone();
        (stream, self.send_call_inner(c).await)
    }

    pub(super) async fn send_call_inner(&self, mut c: Call) -> Result<(), MesosError> {
        let (base, stream_id, framework_id) = {
            let st = self.st();
            if !st.subscribed {
                return Err(MesosError::Closed);
            }
            (st.leader.clone().ok_or(MesosError::NoMaster)?, st.stream_id.clone(), st.framework_id.clone())
        };
        c.framework_id = framework_id.map(|value| mesos::FrameworkId { value });
        let body = encode_call(&c, self.config.encoding)?;
        let req = self.request(&base, body, stream_id.as_deref())?;
        let resp = tokio::time::timeout(self.config.call_timeout, self.client.request(req))
            .await
            .map_err(|_| MesosError::Http(format!("no answer within {:?}", self.config.call_timeout)))?
            .map_err(|e| MesosError::Http(e.to_string()))?;
        let status = resp.status().as_u16();
        if status == 202 || status == 200 {
            return Ok(());
        }
        let location = resp.headers().get(hyper::header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_string);
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let body = String::from_utf8_lossy(&body).into_owned();
        match (status, location) {
            (307, Some(loc)) => Err(MesosError::Redirect(base_of_location(&loc))),
            _ => Err(MesosError::Status { status, body }),
        }
    }

    /// The call sender: one call at a time, in order.
    pub(super) async fn run_calls(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<Outgoing>) {
        while let Some(out) = rx.recv().await {
            let kind = out.call.r#type.and_then(|t| call::Type::try_from(t).ok()).unwrap_or(call::Type::Unknown);
            match self.send_call(out.call).await {
                (_, Ok(())) => {}
                (stream, Err(e)) => {
                    warn!(call = kind.as_str_name(), error = %e, "call to the master failed");
                    if matches!(e, MesosError::Redirect(_) | MesosError::Status { status: 403, .. }) && stream.is_some()
                    {
                        let mut st = self.st();
                        if st.stream_id == stream {
                            if let MesosError::Redirect(leader) = &e {
                                st.leader = Some(leader.clone());
                            }
                            st.restart_stream = stream;
                            drop(st);
                            self.restart.notify_one();
                        }
                    }
                    if !out.reject_on_failure.is_empty() {
                        let evs = self.reject(out.reject_on_failure, &format!("{} failed: {e}", kind.as_str_name()));
                        self.emit(evs).await;
                    }
                }
            }
        }
    }

    /// Forgets runs that never started and says so.
    pub(super) fn reject(&self, runs: Vec<(String, String)>, why: &str) -> Vec<ProviderEvent> {
        let mut st = self.st();
        let mut out = Vec::new();
        for (host, run_id) in runs {
            if st.runs.get(&run_id).is_some_and(|r| r.seq == 0) {
                st.runs.remove(&run_id);
                out.push(ProviderEvent::LaunchRejected { host, run_id, error: why.to_string() });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_become_base_urls() {
        assert_eq!(base_of_location("//10.0.0.2:5050/api/v1/scheduler"), "http://10.0.0.2:5050");
        assert_eq!(base_of_location("http://m2:5050/api/v1/scheduler"), "http://m2:5050");
        assert_eq!(base_of_location("m3:5050"), "http://m3:5050");
    }
}
