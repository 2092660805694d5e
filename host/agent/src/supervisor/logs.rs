//! Serving a run's `stdout` and `stderr` from its sandbox.

use std::io::{Read, Seek, SeekFrom};

use paceline_proto::agent::v1 as pb;

use super::{MAX_LOG_CHUNK, Supervisor};
use crate::error::{AgentError, io_ctx};

impl Supervisor {
    /// Reads part of a run's `stdout` or `stderr` (at most [`MAX_LOG_CHUNK`]).
    pub fn read_log(&self, run_id: &str, stream: &str, offset: u64, max_bytes: u64) -> Result<LogData, AgentError> {
        let Some(rec) = self.record(run_id) else {
            return Err(AgentError::UnknownRun(run_id.to_owned()));
        };
        if stream != "stdout" && stream != "stderr" {
            return Err(AgentError::Config(format!("stream must be \"stdout\" or \"stderr\", not {stream:?}")));
        }
        let path = rec.sandbox.join(stream);
        let max = if max_bytes == 0 { MAX_LOG_CHUNK } else { max_bytes.min(MAX_LOG_CHUNK) };
        // The task owns its sandbox: a link it put there is not followed.
        let mut file = match super::run::open_task_file(&path) {
            Ok(f) => f,
            // Not started yet: an empty log, not an error.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(LogData { data: Vec::new(), offset, file_size: 0 });
            }
            Err(e) => return Err(io_ctx(format!("opening {}", path.display()))(e)),
        };
        let file_size = file.metadata().map_err(io_ctx(format!("reading {}", path.display())))?.len();
        let mut data = Vec::new();
        if offset < file_size {
            file.seek(SeekFrom::Start(offset)).map_err(io_ctx(format!("reading {}", path.display())))?;
            file.take(max).read_to_end(&mut data).map_err(io_ctx(format!("reading {}", path.display())))?;
        }
        Ok(LogData { data, offset, file_size })
    }

    /// Answers a `ReadLog` (errors go into the chunk).
    pub fn handle_read_log(&self, req: &pb::ReadLog) -> pb::LogChunk {
        match self.read_log(&req.run_id, &req.stream, req.offset, req.max_bytes) {
            Ok(d) => pb::LogChunk {
                request_id: req.request_id,
                data: d.data,
                offset: d.offset,
                file_size: d.file_size,
                error: String::new(),
            },
            Err(e) => pb::LogChunk {
                request_id: req.request_id,
                offset: req.offset,
                error: e.to_string(),
                ..Default::default()
            },
        }
    }
}

/// Part of a log file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogData {
    /// The bytes read.
    pub data: Vec<u8>,
    /// Where they start.
    pub offset: u64,
    /// The file's size when read.
    pub file_size: u64,
}
