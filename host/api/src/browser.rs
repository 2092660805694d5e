//! What a web browser may do on the API port (security issue 44).
//!
//! The port serves the web UI and its JSON routes over plain HTTP beside
//! gRPC, and in the open mode (no tokens file: `paceline dev`, a loopback
//! server) every caller is an admin. Any page a developer opens could then
//! reach it from their browser: a cross-origin `fetch(..., {mode:
//! "no-cors"})` or a form posts a job with `Content-Type: text/plain`, and a
//! page on a name that resolves to 127.0.0.1 (DNS rebinding) is even
//! same-origin with it. Tokens do not help there, so these checks hold in
//! both modes, before any token is looked at ([`BrowserPolicy::check`]):
//!
//! 1. **Host.** A request's `Host` (or HTTP/2 `:authority`) must be one of
//!    the server's own names: an IP literal (any port), `localhost` or a
//!    name under `.localhost`, the machine's hostname, or a name the
//!    operator lists in `api_allowed_hosts`. A rebinding page's requests
//!    carry its own name and are refused.
//! 2. **Cross-site writes.** A request that is not `GET` or `HEAD` is
//!    refused when the browser says it comes from another site
//!    (`Sec-Fetch-Site` other than `same-origin` or `none`) or from another
//!    origin (`Origin` whose host and port are not the request's `Host`).
//! 3. **A header no simple request carries.** A change on `/ui/api/` needs
//!    [`UI_REQUEST_HEADER`]. A page of another origin can send it only after
//!    a CORS preflight, which this server never answers with a grant, so
//!    even a browser that sends neither `Origin` nor `Sec-Fetch-*` cannot
//!    post a job from another page. The UI's `api.js` sends it on every call.
//!
//! gRPC calls are exempt: their clients set `:authority` to whatever name
//! they dialled, and they are HTTP/2 with `content-type: application/grpc`,
//! which no browser page can send cross-origin without a preflight, nor
//! over plain HTTP at all (browsers speak HTTP/2 only over TLS, where a
//! rebinding name fails the certificate check). A gRPC path reached over
//! HTTP/1.1 or with another content type is treated like any other request.
//!
//! [`harden`] adds the framing and sniffing headers to every `/ui` answer.

use http::{HeaderMap, HeaderValue, Method, Version, header};
use tonic::Status;

/// The header the web UI sends on every call (value `ui`); changes on
/// `/ui/api/` are refused without it.
pub const UI_REQUEST_HEADER: &str = "x-paceline-request";

/// The config key (and `--api-allowed-host` flag) that lists more names.
pub const ALLOWED_HOSTS_KEY: &str = "api_allowed_hosts";

/// Which `Host` names the server answers to, besides IP literals and
/// `localhost`. Cheap to share (`Arc` it).
#[derive(Clone, Debug, Default)]
pub struct BrowserPolicy {
    /// Lowercase names without a port or trailing dot; `*.example.com`
    /// matches every name under `example.com` (not `example.com` itself).
    names: Vec<String>,
}

impl BrowserPolicy {
    /// The machine's hostname and `allowed`, the operator's names
    /// ([`normalize_allowed_host`] forms; entries it refuses are skipped, the
    /// server checks them at start).
    pub fn new(allowed: &[String]) -> BrowserPolicy {
        let mut names: Vec<String> = allowed.iter().filter_map(|n| normalize_allowed_host(n).ok()).collect();
        if let Some(host) = machine_hostname() {
            names.push(host);
        }
        BrowserPolicy { names }
    }

    /// Only `names` (tests; no hostname is read).
    pub fn with_names(names: &[&str]) -> BrowserPolicy {
        BrowserPolicy { names: names.iter().filter_map(|n| normalize_allowed_host(n).ok()).collect() }
    }

    /// Whether a `Host` value (`name[:port]`, `[v6]:port`) is one of the server's own names.
    pub fn allows_host(&self, host: &str) -> bool {
        let Some(name) = host_name(host) else { return false };
        if name.parse::<std::net::IpAddr>().is_ok() {
            return true;
        }
        if name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        self.names.iter().any(|allowed| match allowed.strip_prefix("*.") {
            Some(suffix) => name.strip_suffix(suffix).is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
            None => *allowed == name,
        })
    }

    /// Refuses a request a browser page of another site could have made
    /// (see the module's text); `Ok` for gRPC calls and for anything else.
    pub fn check(
        &self,
        method: &Method,
        path: &str,
        version: Version,
        authority: Option<&str>,
        headers: &HeaderMap,
    ) -> Result<(), Status> {
        if is_grpc(version, headers) {
            return Ok(());
        }
        // HTTP/1.1 names the host in `Host`, HTTP/2 in `:authority` (the
        // URI's authority here); a request may carry both, and each must pass.
        let host_header = match headers.get(header::HOST).map(HeaderValue::to_str) {
            Some(Ok(h)) => Some(h),
            Some(Err(_)) => return Err(Status::permission_denied("the Host header is not text")),
            None => None,
        };
        for host in [host_header, authority].into_iter().flatten() {
            if !self.allows_host(host) {
                return Err(Status::permission_denied(format!(
                    "Host `{host}` is not a name of this server: requests must name it by an IP address, \
                     localhost or its hostname (this refuses pages of other sites that resolve to it, DNS \
                     rebinding); to reach it by another name, list that name in `{ALLOWED_HOSTS_KEY}` in the \
                     server config (or pass --api-allowed-host NAME)"
                )));
            }
        }
        if method == Method::GET || method == Method::HEAD {
            return Ok(());
        }
        if let Some(site) = headers.get("sec-fetch-site") {
            let site = site.to_str().unwrap_or_default();
            if site != "same-origin" && site != "none" {
                return Err(Status::permission_denied(format!(
                    "{method} {path}: refused, the browser says it comes from another site (Sec-Fetch-Site: {site})"
                )));
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default();
            let host = host_header.or(authority).unwrap_or_default();
            if !same_origin(origin, host) {
                return Err(Status::permission_denied(format!(
                    "{method} {path}: refused, it comes from another origin (Origin: {origin}; this server is {host})"
                )));
            }
        }
        if path.starts_with("/ui/api/") && headers.get(UI_REQUEST_HEADER).is_none_or(|v| v.as_bytes().is_empty()) {
            return Err(Status::permission_denied(format!(
                "{method} {path} needs the header `X-Paceline-Request: ui` (the web UI sends it; a page of \
                 another site cannot): add it to scripted calls, e.g. curl -H 'X-Paceline-Request: ui'"
            )));
        }
        Ok(())
    }
}

/// A name for `api_allowed_hosts` as it is matched: lowercase, without a
/// trailing dot; `*.example.com` for every name under `example.com`. A
/// value with a scheme, port, path or space is refused, naming what to write.
pub fn normalize_allowed_host(name: &str) -> Result<String, String> {
    let trimmed = name.trim().trim_end_matches('.').to_ascii_lowercase();
    let bare = trimmed.strip_prefix("*.").unwrap_or(&trimmed);
    let ok = !bare.is_empty()
        && bare.split('.').all(|label| {
            !label.is_empty() && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if ok {
        Ok(trimmed)
    } else {
        Err(format!(
            "{ALLOWED_HOSTS_KEY}: `{name}` is not a host name (write the name alone, e.g. `paceline.example.com` \
             or `*.example.com`: no scheme, port or path; IP addresses are always allowed)"
        ))
    }
}

/// Whether the request is gRPC: HTTP/2 with a gRPC content type.
fn is_grpc(version: Version, headers: &HeaderMap) -> bool {
    version == Version::HTTP_2
        && headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().starts_with("application/grpc"))
}

/// The name of a `Host` value, lowercase, without its port, brackets or
/// trailing dot; none for a value that is not a host.
fn host_name(host: &str) -> Option<String> {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))) {
            return None;
        }
        inside.parse::<std::net::Ipv6Addr>().ok()?;
        inside
    } else if host.parse::<std::net::Ipv6Addr>().is_ok() {
        // Not a valid Host, but unambiguous.
        host
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            Some(_) => return None,
            None => host,
        }
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    (!name.is_empty()).then_some(name)
}

/// Whether `origin` (`scheme://host[:port]`) is the origin of a request to
/// `host` (a `Host` value): the same name and port, a missing port being
/// the scheme's default. (The request's own scheme is not known here; one
/// port serves one scheme, so the name and port say which server it is.)
fn same_origin(origin: &str, host: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else { return false };
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => "80",
        "https" => "443",
        _ => return false,
    };
    let with_port = |h: &str| -> Option<(String, String)> {
        let name = host_name(h)?;
        // The port after the host part (after `]` for a v6 literal).
        let tail = h.rsplit_once(']').map_or(h, |(_, t)| t);
        let port = tail.rsplit_once(':').map_or(default_port, |(_, p)| p);
        Some((name, port.to_string()))
    };
    match (with_port(rest.trim_end_matches('/')), with_port(host)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// The machine's hostname, lowercase (Linux; none elsewhere).
fn machine_hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .and_then(|h| normalize_allowed_host(&h).ok())
        .filter(|h| !h.starts_with("*."))
}

/// Whether a path is the web UI's (the page, its assets, its JSON routes).
pub fn is_ui_path(path: &str) -> bool {
    path == "/" || path == "/ui" || path.starts_with("/ui/")
}

/// The headers every `/ui` answer carries: it may not be framed by another
/// page (clickjacking) nor read as another type than it says. An existing
/// Content-Security-Policy (a sim report's) keeps its directives, with
/// `frame-ancestors` set to `'none'`.
pub fn harden(headers: &mut HeaderMap) {
    let merged: Vec<HeaderValue> = headers
        .get_all(header::CONTENT_SECURITY_POLICY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(|policy| {
            let mut directives: Vec<&str> = policy
                .split(';')
                .map(str::trim)
                .filter(|d| !d.is_empty() && !d.to_ascii_lowercase().starts_with("frame-ancestors"))
                .collect();
            directives.push("frame-ancestors 'none'");
            directives.join("; ")
        })
        .filter_map(|p| HeaderValue::from_str(&p).ok())
        .collect();
    headers.remove(header::CONTENT_SECURITY_POLICY);
    if merged.is_empty() {
        headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("frame-ancestors 'none'"));
    }
    for policy in merged {
        headers.append(header::CONTENT_SECURITY_POLICY, policy);
    }
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(http::HeaderName::from_bytes(k.as_bytes()).expect("name"), v.parse().expect("value"));
        }
        h
    }

    fn check(policy: &BrowserPolicy, method: Method, path: &str, pairs: &[(&str, &str)]) -> Result<(), String> {
        policy.check(&method, path, Version::HTTP_11, None, &request(pairs)).map_err(|s| s.message().to_string())
    }

    #[test]
    fn the_servers_own_names_pass_and_other_hosts_are_refused_naming_the_key() {
        let p = BrowserPolicy::with_names(&["paceline.example.com", "*.apps.example"]);
        for host in [
            "127.0.0.1",
            "127.0.0.1:7400",
            "10.1.2.3:80",
            "[::1]:7400",
            "[::1]",
            "localhost",
            "LOCALHOST:7400",
            "localhost.",
            "dev.localhost:7400",
            "paceline.example.com",
            "Paceline.Example.Com:443",
            "a.apps.example",
            "b.c.apps.example:7400",
        ] {
            assert!(p.allows_host(host), "{host} should pass");
            check(&p, Method::GET, "/ui/", &[("host", host)]).expect(host);
        }
        for host in [
            "attacker.example",
            "attacker.example:7400",
            "127.0.0.1.attacker.example",
            "localhost.attacker.example",
            "apps.example",
            "xapps.example",
            "paceline.example.com.evil",
            "[::1",
            "localhost:port",
            "",
        ] {
            assert!(!p.allows_host(host), "{host} should be refused");
        }
        for path in ["/", "/ui/", "/ui/api/jobs", "/metrics", "/favicon.ico"] {
            let e = check(&p, Method::GET, path, &[("host", "attacker.example")]).expect_err(path);
            assert!(e.contains("attacker.example") && e.contains("api_allowed_hosts"), "{e}");
        }
        // A write with a foreign Host is refused for the Host.
        let e = check(&p, Method::POST, "/ui/api/jobs", &[("host", "attacker.example"), ("x-paceline-request", "ui")])
            .expect_err("rebinding");
        assert!(e.contains("api_allowed_hosts"), "{e}");
        // HTTP/2 names the host in :authority.
        let e = p
            .check(&Method::GET, "/ui/", Version::HTTP_2, Some("attacker.example:7400"), &HeaderMap::new())
            .expect_err("authority");
        assert!(e.message().contains("attacker.example"), "{e}");
    }

    #[test]
    fn grpc_calls_are_exempt_only_over_http2_with_a_grpc_content_type() {
        let p = BrowserPolicy::with_names(&[]);
        let grpc = request(&[("host", "api.cluster.internal"), ("content-type", "application/grpc+proto")]);
        let path = "/paceline.v1.JobService/CreateJob";
        p.check(&Method::POST, path, Version::HTTP_2, Some("api.cluster.internal:7400"), &grpc).expect("gRPC");
        // The same over HTTP/1.1 (which only a browser or a script would use) is checked.
        assert!(p.check(&Method::POST, path, Version::HTTP_11, None, &grpc).is_err());
        // A text/plain post to a gRPC path from another origin, as a no-cors fetch sends it.
        let e = check(
            &p,
            Method::POST,
            path,
            &[("host", "127.0.0.1:7400"), ("content-type", "text/plain"), ("origin", "http://127.0.0.1:8000")],
        )
        .expect_err("cross-origin");
        assert!(e.contains("another origin"), "{e}");
    }

    #[test]
    fn cross_site_writes_are_refused() {
        let p = BrowserPolicy::with_names(&[]);
        let host = ("host", "127.0.0.1:7400");
        let ui = ("x-paceline-request", "ui");
        // The page's own call.
        check(
            &p,
            Method::POST,
            "/ui/api/jobs",
            &[host, ui, ("origin", "http://127.0.0.1:7400"), ("sec-fetch-site", "same-origin")],
        )
        .expect("same origin");
        check(&p, Method::POST, "/ui/api/jobs", &[host, ui, ("sec-fetch-site", "none")]).expect("typed by the user");
        for (name, value) in [
            ("origin", "http://evil.example"),
            ("origin", "http://127.0.0.1:8000"),
            ("origin", "null"),
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-site", "same-site"),
        ] {
            let e = check(&p, Method::POST, "/ui/api/jobs", &[host, ui, (name, value)]).expect_err(value);
            assert!(e.contains(value), "{e}");
        }
        // Default ports: an origin without one names the scheme's.
        check(&p, Method::POST, "/ui/api/jobs", &[("host", "localhost"), ui, ("origin", "http://localhost")])
            .expect("port 80");
        check(&p, Method::POST, "/ui/api/jobs", &[("host", "localhost:80"), ui, ("origin", "http://localhost")])
            .expect("port 80 named");
        // Reads are not refused for their origin (a page cannot read the answer).
        check(&p, Method::GET, "/ui/api/jobs", &[host, ("sec-fetch-site", "cross-site")]).expect("read");
    }

    #[test]
    fn ui_changes_need_the_custom_header_and_the_message_names_it() {
        let p = BrowserPolicy::with_names(&[]);
        let host = ("host", "127.0.0.1:7400");
        let e =
            check(&p, Method::POST, "/ui/api/jobs", &[host, ("content-type", "text/plain")]).expect_err("no header");
        assert!(e.contains("X-Paceline-Request: ui") && e.contains("curl"), "{e}");
        assert!(check(&p, Method::POST, "/ui/api/jobs", &[host, ("x-paceline-request", "")]).is_err());
        check(&p, Method::POST, "/ui/api/jobs", &[host, ("x-paceline-request", "ui")]).expect("with it");
        check(&p, Method::GET, "/ui/api/jobs", &[host]).expect("reads need none");
        check(&p, Method::DELETE, "/ui/api/jobs/j1", &[host, ("x-paceline-request", "ui")]).expect("any method");
        assert!(check(&p, Method::DELETE, "/ui/api/jobs/j1", &[host]).is_err());
    }

    #[test]
    fn allowed_host_entries_are_names_and_bad_ones_say_what_to_write() {
        assert_eq!(normalize_allowed_host(" Paceline.Example.COM. ").as_deref(), Ok("paceline.example.com"));
        assert_eq!(normalize_allowed_host("*.example.com").as_deref(), Ok("*.example.com"));
        for bad in ["http://paceline.example.com", "paceline.example.com:7400", "a/b", "a b", "", "*.", "a..b"] {
            let e = normalize_allowed_host(bad).expect_err(bad);
            assert!(e.contains("api_allowed_hosts"), "{e}");
        }
    }

    #[test]
    fn ui_answers_refuse_framing_and_keep_an_existing_policy() {
        let mut h = HeaderMap::new();
        harden(&mut h);
        assert_eq!(h[header::CONTENT_SECURITY_POLICY], "frame-ancestors 'none'");
        assert_eq!(h[header::X_FRAME_OPTIONS], "DENY");
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'none'; frame-ancestors 'self'; sandbox"),
        );
        harden(&mut h);
        assert_eq!(h[header::CONTENT_SECURITY_POLICY], "default-src 'none'; sandbox; frame-ancestors 'none'");
        assert_eq!(h.get_all(header::CONTENT_SECURITY_POLICY).iter().count(), 1);
    }
}
