//! The tower layer every request passes: browser checks, authentication and authorization
//! by the method table, the call observer and the audit record, refusals answered and logged.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::Status;

use super::tokens::Auth;

/// Tower layer that admits each request ([`Auth::admit`]) before the
/// services see it and attaches its principal; tells the observer, if any,
/// of every call and its answer (refusals included); and hands the auditor,
/// if any, a record of every mutating call and every refused one
/// ([`crate::audit`]).
///
/// Before any of that, [`crate::browser::BrowserPolicy::check`] refuses what
/// a page of another site could have sent, and every `/ui` answer gets
/// [`crate::browser::harden`]'s headers.
#[derive(Clone, Debug)]
pub struct AuthLayer(
    pub Arc<Auth>,
    pub Option<Arc<dyn crate::CallObserver>>,
    pub Option<crate::audit::Auditor>,
    pub Arc<crate::browser::BrowserPolicy>,
);

impl<S> tower::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> AuthService<S> {
        AuthService {
            auth: self.0.clone(),
            observer: self.1.clone(),
            auditor: self.2.clone(),
            browser: self.3.clone(),
            inner,
        }
    }
}

/// The service [`AuthLayer`] makes.
#[derive(Clone, Debug)]
pub struct AuthService<S> {
    auth: Arc<Auth>,
    observer: Option<Arc<dyn crate::CallObserver>>,
    auditor: Option<crate::audit::Auditor>,
    browser: Arc<crate::browser::BrowserPolicy>,
    inner: S,
}

/// The method label of a request path, from a bounded set: a gRPC method
/// (`/package.Service/Method`) of this API, a web UI route without its ids,
/// `/metrics`, or `other` (anything else a client may send, so unknown
/// paths cannot grow the label set).
pub fn method_label(path: &str) -> String {
    if let Some(route) = path.strip_prefix("/ui/api/") {
        let first = route.split('/').next().unwrap_or_default();
        return match first {
            "jobs" | "tasks" | "pools" | "hosts" | "plugins" | "audit" | "events" | "whoami" | "sim-reports" => {
                let rest = if route.len() > first.len() { "/…" } else { "" };
                format!("/ui/api/{first}{rest}")
            }
            _ => "other".into(),
        };
    }
    if path == "/metrics" {
        return path.into();
    }
    if (path.starts_with("/paceline.") || path.starts_with("/grpc."))
        && path.len() <= 96
        && path.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '_'))
    {
        return path.into();
    }
    if path == "/ui" || path.starts_with("/ui/") || path == "/" || path == "/favicon.ico" {
        return "/ui".into();
    }
    "other".into()
}

/// The answer's code for [`crate::CallObserver`]: the gRPC status when the
/// answer's head carries one (a refusal or an immediate error), else the
/// HTTP status (`200` for a gRPC call whose status comes in the trailers).
fn answer_code(response: &http::Response<tonic::body::Body>) -> String {
    match Status::from_header_map(response.headers()) {
        Some(status) => format!("{:?}", status.code()),
        None => response.status().as_u16().to_string(),
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> tower::Service<http::Request<tonic::body::Body>> for AuthService<S>
where
    S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<tonic::body::Body>) -> Self::Future {
        let path = request.uri().path().to_owned();
        let started = std::time::Instant::now();
        let observer = self.observer.clone();
        let observe = move |path: &str, response: &http::Response<tonic::body::Body>| {
            if let Some(o) = &observer {
                o.observe(&method_label(path), &answer_code(response), started.elapsed());
            }
        };
        // What a page of another site could have sent is refused before
        // any token is looked at: tokens do not stop a browser that holds none.
        let admitted = self
            .browser
            .check(
                request.method(),
                &path,
                request.version(),
                request.uri().authority().map(|a| a.as_str()),
                request.headers(),
            )
            .and_then(|()| self.auth.admit(request.method(), &path, request.headers()));
        let ui = crate::browser::is_ui_path(&path);
        match admitted {
            Ok(who) => {
                let caller = who.as_ref().map(|w| w.name.clone()).unwrap_or_default();
                let audit = match &self.auditor {
                    Some(auditor) if crate::audit::is_audited(request.method(), &path) => {
                        Some(crate::audit::layer::Pending::start(auditor.clone(), &mut request, who.clone()))
                    }
                    _ => None,
                };
                if let Some(who) = who {
                    request.extensions_mut().insert(who);
                }
                // The clone took `poll_ready`'s place; swap so the ready one serves.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                Box::pin(async move {
                    let mut response = inner.call(request).await?;
                    if ui {
                        crate::browser::harden(response.headers_mut());
                    }
                    // A call answered with an error status at once (every refusal:
                    // a bad field, an unknown job, a pool the caller may not use).
                    if let Some(status) = Status::from_header_map(response.headers())
                        && status.code() != tonic::Code::Ok
                    {
                        log_refusal(&path, &caller, &status);
                    }
                    observe(&path, &response);
                    if let Some(audit) = audit {
                        audit.finish(&response);
                    }
                    Ok(response)
                })
            }
            Err(status) => {
                log_refusal(&path, "", &status);
                if let Some(auditor) = &self.auditor
                    && crate::audit::is_public(&path)
                {
                    // Permission denied: the caller is known, only not allowed.
                    let who = self.auth.authenticate(request.headers()).ok();
                    crate::audit::layer::refused(auditor, &request, who.as_deref(), &status);
                }
                // Plain HTTP clients (the page, a Prometheus scraping
                // /metrics) read the HTTP status; gRPC clients the grpc-status.
                let plain_http = ui || path == "/metrics" || path == "/favicon.ico";
                let mut response = if plain_http { json_refusal(&status) } else { status.into_http() };
                if ui {
                    crate::browser::harden(response.headers_mut());
                }
                observe(&path, &response);
                if !plain_http {
                    return Box::pin(async move { Ok(response) });
                }
                // Answered before the body was read, an HTTP/2 request still
                // uploading ends in a stream reset the client reports instead
                // of this 401/403 (curl: "stream was not closed cleanly").
                // So the body is read first, within a bound; past it the
                // answer goes out all the same.
                let body = request.into_body();
                Box::pin(async move {
                    drain_refused(body).await;
                    Ok(response)
                })
            }
        }
    }
}

/// How much of a refused plain-HTTP request's body is read before the
/// answer (a job file or a component upload fits), and for how long.
const REFUSED_BODY_DRAIN_BYTES: usize = 64 << 20;
const REFUSED_BODY_DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads and drops a refused request's body, up to the bounds above.
async fn drain_refused(mut body: tonic::body::Body) {
    use http_body_util::BodyExt;
    let read = async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            seen += frame.data_ref().map_or(0, |d| d.len());
            if seen > REFUSED_BODY_DRAIN_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(REFUSED_BODY_DRAIN_TIME, read).await;
}

/// One line per refused call at the default level: what was called, by
/// whom, and the answer. A failure of the server's own (internal, unknown,
/// data loss) is a warning.
fn log_refusal(path: &str, caller: &str, status: &Status) {
    let code = status.code();
    // Not `message`: that name is the event's own text in tracing.
    let answer = status.message();
    match code {
        tonic::Code::Internal | tonic::Code::Unknown | tonic::Code::DataLoss => {
            tracing::warn!(call = %path, caller = %caller, ?code, %answer, "request failed")
        }
        _ => tracing::info!(call = %path, caller = %caller, ?code, %answer, "request refused"),
    }
}

/// A refusal on the web UI's JSON routes: HTTP 401/403 with `{"error": ...}`.
fn json_refusal(status: &Status) -> http::Response<tonic::body::Body> {
    let code = if status.code() == tonic::Code::Unauthenticated {
        http::StatusCode::UNAUTHORIZED
    } else {
        http::StatusCode::FORBIDDEN
    };
    let body = serde_json::json!({ "error": status.message() }).to_string();
    let mut response = http::Response::new(tonic::body::Body::new(http_body_util::Full::new(bytes::Bytes::from(body))));
    *response.status_mut() = code;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}
