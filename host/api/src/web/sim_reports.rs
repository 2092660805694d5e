//! `paceline sim` reports in a directory (`sim_reports_dir`), listed and
//! served to the web UI's Simulations page: the self-contained HTML and the
//! JSON that `paceline sim run|compare --report-dir` write.
//!
//! Only plain files directly in the directory whose names pass
//! [`check_name`] are listed or served (no path, no `..`, no hidden file,
//! no symbolic link), so a request cannot reach anything else on the
//! server's disk. HTML is served with a Content-Security-Policy that allows
//! its inline style and `data:` images and nothing else: no script, no
//! request to any server while it is read, no form, and a sandbox.

use std::path::{Path, PathBuf};

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The policy every served report carries: the report is one file with
/// its style inline and its charts as inline SVG.
pub const REPORT_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; \
                              form-action 'none'; frame-ancestors 'self'; sandbox";
/// Largest report served (a JSON report with `--tasks` of a large trace
/// can be big; larger ones are listed but refused).
pub const MAX_REPORT_BYTES: u64 = 64 << 20;
/// Most reports listed, newest first.
const MAX_LISTED: usize = 1_000;
/// Longest file name accepted.
const MAX_NAME: usize = 128;

/// Whether `name` may be a report's file name: ASCII letters, digits, `.`,
/// `_` and `-`, at most 128 of them, not starting with `.`, ending in
/// `.html` or `.json`. The reason when not.
pub fn check_name(name: &str) -> Result<(), String> {
    let stem = name.strip_suffix(".html").or_else(|| name.strip_suffix(".json"));
    match stem {
        None => Err(format!("`{}`: a report's name ends in .html or .json", shown(name))),
        Some(stem) => check_stem(stem).map_err(|e| format!("`{}`: {e}", shown(name))),
    }
}

/// The part of a report's name before `.html`/`.json`, as
/// `paceline sim --report-name` takes it.
pub fn check_stem(stem: &str) -> Result<(), String> {
    if stem.is_empty() || stem.len() > MAX_NAME - 5 {
        return Err(format!("a report's name has 1 to {} characters before its extension", MAX_NAME - 5));
    }
    if stem.starts_with('.') {
        return Err("a report's name does not start with `.`".into());
    }
    if !stem.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
        return Err("a report's name has only letters, digits, `.`, `_` and `-`".into());
    }
    Ok(())
}

/// A name as it may be shown in an error: cut, control characters replaced.
fn shown(name: &str) -> String {
    name.chars().take(MAX_NAME).map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// One listed report.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Listed {
    /// Its file name.
    pub name: String,
    /// `html` or `json`.
    pub format: &'static str,
    /// Its size.
    pub bytes: u64,
    /// When it was last written, ms since the Unix epoch (0 if unknown).
    pub modified_ms: u64,
}

/// The reports in `dir`, newest first (at most 1,000); none when the
/// directory does not exist yet.
pub fn list(dir: &Path) -> std::io::Result<Vec<Listed>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
        if check_name(&name).is_err() {
            continue;
        }
        // `DirEntry::metadata` does not follow a symbolic link: a link is not a report.
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let modified_ms = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as u64);
        let format = if name.ends_with(".html") { "html" } else { "json" };
        out.push(Listed { name, format, bytes: meta.len(), modified_ms });
    }
    out.sort_by(|a, b| b.modified_ms.cmp(&a.modified_ms).then_with(|| a.name.cmp(&b.name)));
    out.truncate(MAX_LISTED);
    Ok(out)
}

/// Why a report cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The name is not a report's.
    #[error("{0}")]
    BadName(String),
    /// No such report.
    #[error("no report `{0}`")]
    NotFound(String),
    /// Too large to serve.
    #[error("report `{name}` is {bytes} bytes, over the {MAX_REPORT_BYTES}-byte limit")]
    TooLarge {
        /// Its name.
        name: String,
        /// Its size.
        bytes: u64,
    },
    /// Reading failed.
    #[error("reading report `{name}`: {error}")]
    Io {
        /// Its name.
        name: String,
        /// What failed.
        error: std::io::Error,
    },
}

/// The report `name` of `dir`: its path, once the name and the file are
/// checked (a plain file, not a link, within the size limit).
pub fn path_of(dir: &Path, name: &str) -> Result<PathBuf, ServeError> {
    check_name(name).map_err(ServeError::BadName)?;
    let path = dir.join(name);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ServeError::NotFound(name.into())),
        Err(error) => return Err(ServeError::Io { name: name.into(), error }),
    };
    if !meta.is_file() {
        return Err(ServeError::NotFound(name.into()));
    }
    if meta.len() > MAX_REPORT_BYTES {
        return Err(ServeError::TooLarge { name: name.into(), bytes: meta.len() });
    }
    Ok(path)
}

/// The HTTP answer for a report's bytes: its type, the strict policy, no sniffing.
pub fn response(name: &str, bytes: Vec<u8>) -> Response {
    let content_type =
        if name.ends_with(".html") { "text/html; charset=utf-8" } else { "application/json; charset=utf-8" };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, REPORT_CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        bytes,
    )
        .into_response()
}

impl ServeError {
    /// The status the route answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            ServeError::BadName(_) => StatusCode::BAD_REQUEST,
            ServeError::NotFound(_) => StatusCode::NOT_FOUND,
            ServeError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ServeError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_leave_the_directory() {
        for good in ["run-1.html", "compare_a.b.json", "X9.json"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "../secrets.key.html",
            "..%2Fx.html",
            "a/b.html",
            "a\\b.html",
            ".hidden.html",
            "..html",
            "report.txt",
            "report",
            ".html",
            "/etc/passwd",
            "a b.html",
            "é.html",
            "x\0.html",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(check_name(&format!("{}.html", "a".repeat(200))).is_err());
        assert!(check_stem("run-1").is_ok() && check_stem("../x").is_err() && check_stem("").is_err());
    }

    #[test]
    fn only_plain_report_files_are_listed_and_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::write(d.join("a.html"), "<p>a").expect("write");
        std::fs::write(d.join("b.json"), "{}").expect("write");
        std::fs::write(d.join("notes.txt"), "x").expect("write");
        std::fs::write(d.join(".c.html"), "x").expect("write");
        std::fs::create_dir(d.join("dir.html")).expect("mkdir");
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("secret.html"), "secret").expect("write");
        std::os::unix::fs::symlink(outside.path().join("secret.html"), d.join("link.html")).expect("symlink");
        let mut names: Vec<String> = list(d).expect("lists").into_iter().map(|l| l.name).collect();
        names.sort();
        assert_eq!(names, ["a.html", "b.json"]);
        assert!(path_of(d, "a.html").is_ok());
        assert!(matches!(path_of(d, "link.html"), Err(ServeError::NotFound(_))), "a link is not served");
        assert!(matches!(path_of(d, "dir.html"), Err(ServeError::NotFound(_))));
        assert!(matches!(path_of(d, "gone.html"), Err(ServeError::NotFound(_))));
        assert!(matches!(path_of(d, "../a.html"), Err(ServeError::BadName(_))));
        assert!(list(&d.join("missing")).expect("a missing directory lists nothing").is_empty());
    }
}
