//! The suggested alerts (integrations/prometheus/alerts.yaml) load into the
//! real Prometheus rule engine and fire when they should: `promtool check
//! rules` and `promtool test rules` (alerts-test.yaml: the first rollback
//! after a start alerts, a stuck rollback pages after 15 minutes).
//! promtool comes with the Debian prometheus package that
//! `e2e/ensure-deps.sh test` installs.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(repo().join("integrations/prometheus"))
        .output()
        .expect("promtool not found: run e2e/ensure-deps.sh test (the Debian prometheus package)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_alerts_load_and_fire_as_tested() {
    let checked = promtool(&["check", "rules", "alerts.yaml"]);
    assert!(checked.contains("SUCCESS: 9 rules found"), "{checked}");
    let tested = promtool(&["test", "rules", "alerts-test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// docs/operations.md shows the rule file as it is.
#[test]
fn docs_show_the_alerts_file() {
    let rules =
        std::fs::read_to_string(repo().join("integrations/prometheus/alerts.yaml")).unwrap();
    let body = &rules[rules.find("groups:").unwrap()..];
    let docs = std::fs::read_to_string(repo().join("docs/operations.md")).unwrap();
    assert!(
        docs.contains(&format!("```yaml\n{body}```")),
        "docs/operations.md's alerts differ from integrations/prometheus/alerts.yaml"
    );
}
