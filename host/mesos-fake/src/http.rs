//! HTTP: the one route (`POST /api/v1/scheduler`), which checks method,
//! media types, leadership and availability as a real master does, decodes
//! the call, hands it to [`crate::calls`], and records it.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use paceline_proto::mesos::v1::scheduler::{Call, call};
use prost::Message;

use crate::calls::{other_call, subscribe};
use crate::state::Shared;
use crate::{API_PATH, CallRecord};

pub(crate) const JSON: &str = "application/json";
pub(crate) const PROTOBUF: &str = "application/x-protobuf";

pub(crate) fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (status, body.into()).into_response()
}

fn media(h: Option<&header::HeaderValue>) -> Option<&str> {
    h.and_then(|v| v.to_str().ok()).map(|s| s.split(';').next().unwrap_or("").trim())
}

pub(crate) async fn scheduler(
    State(shared): State<Arc<Shared>>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if method != Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "Expecting 'POST'");
    }
    {
        let mut m = shared.lock();
        if m.unavailable {
            return text(StatusCode::SERVICE_UNAVAILABLE, "Master is not available");
        }
        if m.leader.is_some() {
            m.redirects += 1;
        }
        if let Some(leader) = &m.leader {
            let host = leader.trim_start_matches("http://").trim_start_matches("https://").trim_end_matches('/');
            return Response::builder()
                .status(StatusCode::TEMPORARY_REDIRECT)
                .header(header::LOCATION, format!("//{host}{API_PATH}"))
                .body(Body::empty())
                .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "redirect"));
        }
    }
    let json = match media(headers.get(header::CONTENT_TYPE)) {
        Some(JSON) => true,
        Some(PROTOBUF) => false,
        other => {
            return text(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Expecting 'Content-Type' of {JSON} or {PROTOBUF}, got {other:?}"),
            );
        }
    };
    let decoded: Result<Call, String> = if json {
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    } else {
        Call::decode(&body[..]).map_err(|e| e.to_string())
    };
    let c = match decoded {
        Ok(c) => c,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("Failed to parse body into Call protobuf: {e}")),
    };
    let kind = c.r#type.and_then(|t| call::Type::try_from(t).ok()).unwrap_or(call::Type::Unknown);
    let stream_header = headers.get("Mesos-Stream-Id").and_then(|v| v.to_str().ok()).map(str::to_string);
    let resp = if kind == call::Type::Subscribe {
        let accept_json = match media(headers.get(header::ACCEPT)) {
            None | Some("*/*") => json,
            Some(JSON) => true,
            Some(PROTOBUF) => false,
            Some(other) => return text(StatusCode::NOT_ACCEPTABLE, format!("Unsupported 'Accept' {other}")),
        };
        if stream_header.is_some() {
            text(StatusCode::BAD_REQUEST, "Subscribe calls should not include the 'Mesos-Stream-Id' header")
        } else {
            subscribe(&shared, &c, accept_json)
        }
    } else {
        other_call(&shared, &c, kind, stream_header.as_deref())
    };
    shared.lock().calls.push(CallRecord {
        kind: kind.as_str_name().to_string(),
        status: resp.status().as_u16(),
        call: c,
        body,
        content_type: if json { JSON } else { PROTOBUF }.to_string(),
    });
    resp
}
