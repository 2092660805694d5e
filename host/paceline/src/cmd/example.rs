//! `paceline example [NAME]`: the job files of `examples/`, embedded in the
//! binary so that the first job works wherever `paceline` is installed, not
//! only in a checkout (`dev` prints `paceline example hello > hello.yaml`
//! as its first step when there is no `examples/` beside it).

use std::process::ExitCode;

use clap::Args;

/// The examples: (name, what it shows, the file).
pub const EXAMPLES: [(&str, &str, &str); 6] = [
    ("hello", "a batch job of 3 instances that print a line", include_str!("../../../../examples/hello.yaml")),
    ("web", "a service of 4 web servers, updated in batches of 2", include_str!("../../../../examples/web.yaml")),
    ("gang", "a gang: instances placed all together or not at all", include_str!("../../../../examples/gang.yaml")),
    (
        "gang-jax",
        "a gang of 4 JAX processes that find each other and all-reduce (needs jax)",
        include_str!("../../../../examples/gang-jax.yaml"),
    ),
    ("stateful", "a stateful job with a volume", include_str!("../../../../examples/stateful.yaml")),
    ("pools", "a pool tree for `paceline pool apply`", include_str!("../../../../examples/pools.yaml")),
];

/// Arguments of `paceline example`.
#[derive(Debug, Args)]
pub struct ExampleArgs {
    /// The example to print (without one: list them).
    name: Option<String>,
}

/// Prints one example's file, or the list.
pub fn run(a: ExampleArgs) -> anyhow::Result<ExitCode> {
    let Some(name) = a.name else {
        for (name, what, _) in EXAMPLES {
            println!("{name:<9} {what}");
        }
        println!("\npaceline example NAME > NAME.yaml   # then: paceline job create NAME.yaml");
        return Ok(ExitCode::SUCCESS);
    };
    let name = name.strip_suffix(".yaml").unwrap_or(&name);
    match EXAMPLES.iter().find(|(n, _, _)| *n == name) {
        Some((_, _, text)) => {
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        None => {
            let names: Vec<&str> = EXAMPLES.iter().map(|(n, _, _)| *n).collect();
            anyhow::bail!("no example named `{name}` (there are: {})", names.join(", "))
        }
    }
}

/// The `try:` line `dev` prints: the checkout's `examples/hello.yaml` by its
/// absolute path when `dev` runs where that file is (so the line works from
/// any directory), else the embedded copy through `paceline example`.
pub fn dev_hint(cwd: Option<&std::path::Path>) -> String {
    match cwd.map(|d| d.join("examples").join("hello.yaml")).filter(|p| p.is_file()) {
        Some(path) => format!("paceline job create {}", path.display()),
        None => "paceline example hello > hello.yaml && paceline job create hello.yaml".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_example_file_is_embedded_and_parses() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .expect("examples/")
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".yaml").map(str::to_string))
            .collect();
        files.sort();
        let mut embedded: Vec<String> = EXAMPLES.iter().map(|(n, _, _)| n.to_string()).collect();
        embedded.sort();
        assert_eq!(files, embedded, "examples/ and the embedded list differ");
        for (name, _, text) in EXAMPLES {
            assert!(serde_yaml::from_str::<serde_yaml::Value>(text).is_ok(), "{name}");
        }
    }

    /// Issue 43: `dev` said `paceline job create examples/hello.yaml`, which
    /// fails outside the checkout.
    #[test]
    fn the_dev_hint_works_from_any_directory() {
        let checkout = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let hint = dev_hint(Some(&checkout));
        let path = hint.strip_prefix("paceline job create ").expect("a job create");
        assert!(std::path::Path::new(path).is_absolute() && std::path::Path::new(path).is_file(), "{hint}");
        let elsewhere = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            dev_hint(Some(elsewhere.path())),
            "paceline example hello > hello.yaml && paceline job create hello.yaml"
        );
    }
}
