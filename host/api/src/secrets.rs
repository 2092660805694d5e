//! `SecretService`: task secrets of a pool (decision 0032). Values are
//! sealed with the job manager's key before they reach the store, and no
//! answer carries one. Who may: writing needs the right to change jobs in
//! the pool, listing the right to read its details (both checked here on
//! the pool the request names; the auth layer has admitted the caller).

use std::sync::{Arc, Mutex};

use paceline_model::task_secret::{MAX_VALUE, check_name};
use paceline_proto::v1 as pb;
use paceline_proto::v1::secret_service_server::SecretService;
use paceline_resmgr::ResourceManager;
use paceline_storage::Store;
use paceline_storage::secrets::SealedSecret;
use tonic::{Request, Response, Status};

use crate::auth::principal;
use crate::status;

/// The service.
#[derive(Clone)]
pub struct SecretApi {
    jobs: Arc<paceline_jobmgr::JobManager>,
    store: Arc<dyn Store>,
    resmgr: Arc<Mutex<ResourceManager>>,
}

impl std::fmt::Debug for SecretApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretApi").finish_non_exhaustive()
    }
}

impl SecretApi {
    /// Over the job manager (its key, and the jobs that use a secret), the
    /// store and the pool tree.
    pub fn new(
        jobs: Arc<paceline_jobmgr::JobManager>,
        store: Arc<dyn Store>,
        resmgr: Arc<Mutex<ResourceManager>>,
    ) -> SecretApi {
        SecretApi { jobs, store, resmgr }
    }

    fn check_pool_exists(&self, pool: &str) -> Result<(), Status> {
        let rm = self.resmgr.lock().unwrap_or_else(|e| e.into_inner());
        if rm.tree().id(pool).is_none() {
            return Err(Status::invalid_argument(format!("pool: pool `{pool}` does not exist")));
        }
        Ok(())
    }
}

fn info(s: &SealedSecret) -> pb::SecretInfo {
    pb::SecretInfo {
        pool: s.pool.clone(),
        name: s.name.clone(),
        version: s.version,
        updated_at_ms: s.updated_at_ms,
        updated_by: s.updated_by.clone(),
        size_bytes: s.size_bytes,
    }
}

#[tonic::async_trait]
impl SecretService for SecretApi {
    async fn put_secret(
        &self,
        request: Request<pb::PutSecretRequest>,
    ) -> Result<Response<pb::PutSecretResponse>, Status> {
        let who = principal(&request)?;
        let r = request.get_ref();
        status::required("pool", &r.pool)?;
        who.check_pool(&r.pool)?;
        check_name(&r.name).map_err(|why| Status::invalid_argument(format!("name: {why}")))?;
        if r.value.is_empty() || r.value.len() > MAX_VALUE {
            return Err(Status::invalid_argument(format!(
                "value: must be 1 to {MAX_VALUE} bytes, is {}",
                r.value.len()
            )));
        }
        if std::str::from_utf8(&r.value).is_err() {
            return Err(Status::invalid_argument("value: must be UTF-8 text (encode binary values, e.g. base64)"));
        }
        self.check_pool_exists(&r.pool)?;
        let key = self.jobs.secret_key().ok_or_else(|| {
            Status::failed_precondition("this server has no secrets key (secrets_key_file, decision 0032)")
        })?;
        let previous = match self.store.get_secret(&r.pool, &r.name).await {
            Ok(p) => p.version,
            Err(e) if e.is_not_found() => 0,
            Err(e) => return Err(status::store(e)),
        };
        let mut sealed = key.seal(&r.pool, &r.name, &r.value).map_err(|e| Status::internal(e.to_string()))?;
        sealed.version = previous + 1;
        sealed.updated_at_ms = crate::audit::now_ms();
        sealed.updated_by = who.name.clone();
        self.store.put_secret(&sealed).await.map_err(status::store)?;
        tracing::info!(pool = %sealed.pool, name = %sealed.name, version = sealed.version, by = %who.name, "secret set");
        Ok(Response::new(pb::PutSecretResponse { secret: Some(info(&sealed)) }))
    }

    async fn list_secrets(
        &self,
        request: Request<pb::ListSecretsRequest>,
    ) -> Result<Response<pb::ListSecretsResponse>, Status> {
        let who = principal(&request)?;
        let pool = &request.get_ref().pool;
        status::required("pool", pool)?;
        who.check_read_pool(pool)?;
        let secrets = self.store.list_secrets(pool).await.map_err(status::store)?;
        Ok(Response::new(pb::ListSecretsResponse { secrets: secrets.iter().map(info).collect() }))
    }

    async fn delete_secret(
        &self,
        request: Request<pb::DeleteSecretRequest>,
    ) -> Result<Response<pb::DeleteSecretResponse>, Status> {
        let who = principal(&request)?;
        let r = request.get_ref();
        status::required("pool", &r.pool)?;
        who.check_pool(&r.pool)?;
        self.store.get_secret(&r.pool, &r.name).await.map_err(status::store)?;
        let users = self.jobs.jobs_using_secret(&r.pool, &r.name);
        if !users.is_empty() {
            return Err(Status::failed_precondition(format!(
                "secret {} is used by jobs that have not finished: {}",
                r.name,
                users.join(", ")
            )));
        }
        self.store.delete_secret(&r.pool, &r.name).await.map_err(status::store)?;
        tracing::info!(pool = %r.pool, name = %r.name, by = %who.name, "secret deleted");
        Ok(Response::new(pb::DeleteSecretResponse {}))
    }
}
