//! A request body that hands every frame on unchanged and keeps a copy of
//! the first bytes (enough for the first gRPC message, bounded), so the
//! audit can name what a call was about without the layer buffering or
//! re-creating the request. A client-streaming upload (a plugin deploy)
//! is copied only as far as its first message.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// Most bytes copied from one request: a first message larger than this
/// (a huge job spec) is recorded without a target.
pub const PEEK_LIMIT: usize = 64 * 1024;

/// The copied bytes, shared between the body and the layer.
pub type Peeked = Arc<Mutex<Vec<u8>>>;

/// The wrapping body.
pub struct PeekBody {
    inner: tonic::body::Body,
    copy: Peeked,
    /// Bytes still wanted; 0 once the first message is complete or the limit hit.
    wanted: usize,
    grpc: bool,
}

impl std::fmt::Debug for PeekBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeekBody").field("wanted", &self.wanted).field("grpc", &self.grpc).finish_non_exhaustive()
    }
}

impl PeekBody {
    /// Wraps `inner`; `grpc` bodies are copied up to the end of their first
    /// message, others (the web UI's JSON) up to [`PEEK_LIMIT`].
    pub fn new(inner: tonic::body::Body, grpc: bool) -> (PeekBody, Peeked) {
        let copy = Peeked::default();
        (PeekBody { inner, copy: copy.clone(), wanted: PEEK_LIMIT, grpc }, copy)
    }

    fn keep(&mut self, data: &Bytes) {
        if self.wanted == 0 {
            return;
        }
        let Ok(mut copy) = self.copy.lock() else {
            self.wanted = 0;
            return;
        };
        let take = data.len().min(self.wanted);
        copy.extend_from_slice(&data[..take]);
        self.wanted -= take;
        // A gRPC frame: flag byte, 4-byte length, message. Stop at its end.
        if self.grpc && copy.len() >= 5 {
            let len = u32::from_be_bytes([copy[1], copy[2], copy[3], copy[4]]) as usize;
            let end = 5usize.saturating_add(len);
            if end > PEEK_LIMIT {
                self.wanted = 0;
            } else if copy.len() >= end {
                copy.truncate(end);
                self.wanted = 0;
            } else {
                self.wanted = self.wanted.min(end - copy.len());
            }
        }
    }
}

impl Body for PeekBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            let data = data.clone();
            self.keep(&data);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
