//! `paceline.v1.AuditService`: reads of the audit log.
//!
//! Who may read what: operators and admins every record; a `user` only
//! their own (an empty principal filter becomes theirs; naming another
//! principal is PERMISSION_DENIED). The layer lets any principal call it.

use std::sync::Arc;

use paceline_proto::v1 as pb;
use paceline_storage::{AuditQuery, Store};
use tonic::{Request, Response, Status};

use crate::auth::{self, Role};

/// The service.
#[derive(Clone, Debug)]
pub struct AuditApi {
    store: Arc<dyn Store>,
}

impl AuditApi {
    /// Reads from `store`.
    pub fn new(store: Arc<dyn Store>) -> AuditApi {
        AuditApi { store }
    }
}

fn some(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

#[tonic::async_trait]
impl pb::audit_service_server::AuditService for AuditApi {
    async fn list_audit_records(
        &self,
        request: Request<pb::ListAuditRecordsRequest>,
    ) -> Result<Response<pb::ListAuditRecordsResponse>, Status> {
        let who = auth::principal(&request)?;
        let r = request.into_inner();
        let mut principal = some(&r.principal);
        if who.role < Role::Operator {
            match &principal {
                None => principal = Some(who.name.clone()),
                Some(p) if *p == who.name => {}
                Some(p) => {
                    return Err(Status::permission_denied(format!(
                        "{} (role {}) may read only their own audit records, not {p}'s; operators and admins read all",
                        who.name, who.role
                    )));
                }
            }
        }
        if r.limit > paceline_storage::audit::MAX_AUDIT_QUERY {
            return Err(Status::invalid_argument(format!(
                "limit: {} is over the most, {}",
                r.limit,
                paceline_storage::audit::MAX_AUDIT_QUERY
            )));
        }
        if r.since_ms != 0 && r.until_ms != 0 && r.until_ms <= r.since_ms {
            return Err(Status::invalid_argument("until_ms: must be after since_ms"));
        }
        let query = AuditQuery {
            principal,
            job_id: some(&r.job_id),
            method: some(&r.method),
            since_ms: (r.since_ms != 0).then_some(r.since_ms),
            until_ms: (r.until_ms != 0).then_some(r.until_ms),
            limit: r.limit,
        };
        let records = self.store.query_audit(&query).await.map_err(crate::status::store)?;
        Ok(Response::new(pb::ListAuditRecordsResponse {
            records: records
                .into_iter()
                .map(|r| pb::AuditRecord {
                    at_ms: r.at_ms,
                    id: r.id,
                    principal: r.principal,
                    role: r.role,
                    method: r.method,
                    target: r.target,
                    job_id: r.job_id,
                    summary: r.summary,
                    code: r.code,
                    message: r.message,
                })
                .collect(),
        }))
    }
}
