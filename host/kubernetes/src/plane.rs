//! What `deploy/kubernetes/kubernetes.sh env DIR` prints, read by the
//! tests and benchmarks that start the control plane: `export NAME=VALUE`
//! lines (the kubeconfigs, the API server's address, the kubectl to use).
//! Public for them; the provider itself never runs the script.

/// The value of variable `name` among `kubernetes.sh env`'s lines (quotes
/// around it removed); `None` when no line sets it.
pub fn env_value(text: &str, name: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('\'').trim_matches('"').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_exported_values_quoted_or_not() {
        let text = "export PACELINE_KUBECONFIG=/tmp/p/paceline.kubeconfig\n\
                    export PACELINE_KUBECONFIG_ADMIN='/tmp/p/admin.kubeconfig'\n\
                    kubernetes.sh: a log line\n\
                    export PACELINE_KUBECTL=\"/usr/bin/kubectl\"\n";
        assert_eq!(env_value(text, "PACELINE_KUBECONFIG").as_deref(), Some("/tmp/p/paceline.kubeconfig"));
        assert_eq!(env_value(text, "PACELINE_KUBECONFIG_ADMIN").as_deref(), Some("/tmp/p/admin.kubeconfig"));
        assert_eq!(env_value(text, "PACELINE_KUBECTL").as_deref(), Some("/usr/bin/kubectl"));
        assert_eq!(env_value(text, "PACELINE_KUBECONF"), None, "a prefix is not the name");
        assert_eq!(env_value(text, "KUBERNETES_API"), None);
    }
}
