//! `Debug` for the messages that carry a secret's value (decision 0032):
//! `build.rs` tells prost not to derive it, and these print the value's
//! length only, so a `?request` in a log line or a test failure cannot leak it.

use std::fmt;

impl fmt::Debug for crate::agent::v1::LaunchSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaunchSecret")
            .field("name", &self.name)
            .field("env", &self.env)
            .field("file", &self.file)
            .field("value", &format_args!("<redacted {} bytes>", self.value.len()))
            .finish()
    }
}

impl fmt::Debug for crate::v1::PutSecretRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PutSecretRequest")
            .field("pool", &self.pool)
            .field("name", &self.name)
            .field("value", &format_args!("<redacted {} bytes>", self.value.len()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn values_never_format() {
        let a = crate::agent::v1::LaunchSecret {
            name: "db".into(),
            env: "DB".into(),
            file: String::new(),
            value: b"hunter2-value".to_vec(),
        };
        let p = crate::v1::PutSecretRequest { pool: "/a".into(), name: "db".into(), value: b"hunter2-value".to_vec() };
        for text in [
            format!("{a:?}"),
            format!("{p:?}"),
            format!("{:?}", crate::agent::v1::Launch { secrets: vec![a.clone()], ..Default::default() }),
        ] {
            assert!(!text.contains("hunter2") && !text.contains("104, 117"), "{text}");
            assert!(text.contains("<redacted 13 bytes>"), "{text}");
        }
    }
}
