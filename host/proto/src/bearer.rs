//! `authorization: Bearer <token>` on every call of a client: what each
//! internal peer (a placement engine, a job manager reaching a host manager)
//! and the CLI present to a server with a tokens file.

use tonic::metadata::{Ascii, MetadataValue};
use tonic::{Request, Status};

/// A tonic interceptor adding the bearer token, if any. Its `Debug` never
/// shows the token.
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Bearer").field(&self.0.as_ref().map(|_| "<redacted>")).finish()
    }
}

/// The token is not a valid header value.
#[derive(Debug, thiserror::Error)]
#[error("the token is not a valid header value")]
pub struct InvalidToken;

impl Bearer {
    /// `authorization: Bearer <token>` on every call; nothing without a token
    /// (or with an empty one).
    pub fn new(token: Option<&str>) -> Result<Bearer, InvalidToken> {
        Ok(match token.map(str::trim).filter(|t| !t.is_empty()) {
            Some(t) => Bearer(Some(format!("Bearer {t}").parse().map_err(|_| InvalidToken)?)),
            None => Bearer(None),
        })
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use tonic::service::Interceptor;

    use super::*;

    #[test]
    fn the_token_goes_on_every_call_and_never_into_debug_output() {
        let mut b = Bearer::new(Some(" s3cret ")).expect("valid");
        let r = b.call(Request::new(())).expect("passes");
        assert_eq!(r.metadata().get("authorization").and_then(|v| v.to_str().ok()), Some("Bearer s3cret"));
        assert!(!format!("{b:?}").contains("s3cret"));
        let mut none = Bearer::new(Some("  ")).expect("empty is none");
        assert!(none.call(Request::new(())).expect("passes").metadata().get("authorization").is_none());
        assert!(Bearer::new(Some("bad\ntoken")).is_err());
    }
}
