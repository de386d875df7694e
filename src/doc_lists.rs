//! Lists in the docs that mirror the code, checked against the code, so that
//! a change which forgets a doc fails here (issue 26 §8, "Docs that cannot
//! drift"): the metrics and their label values, the operator's flags, the
//! plugin's commands, flags and exit codes, the Event and condition reasons,
//! the printer columns, the chart's RBAC table, and a few claims that depend
//! on the code (the CRD's size, the revision hash alphabet, kube's default
//! timeouts). Each failure names the document and the entries that differ.

use crate::api::{Outcome, Phase};
use crate::cli::wait::{EXIT_ERROR, EXIT_ROLLED_BACK, EXIT_STABLE, EXIT_STALLED, EXIT_TIMEOUT};
use crate::plan::reasons::{ConditionReason, EventReason, FailureReason};
use clap::CommandFactory;
use std::collections::{BTreeMap, BTreeSet};

/// A file of the repository.
fn read(path: &str) -> String {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("cannot read {full}: {e}"))
}

/// The part of a markdown document under `heading` (a whole line, such as
/// `## Events`), up to the next heading of the same or a higher level.
/// Lines in code blocks are never headings.
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let mut start = None;
    let mut fenced = false;
    let mut offset = 0;
    for line in doc.split_inclusive('\n') {
        let here = offset;
        offset += line.len();
        let text = line.trim_end();
        if text.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let hashes = text.chars().take_while(|c| *c == '#').count();
        let is_heading = hashes > 0 && text[hashes..].starts_with(' ');
        match start {
            None if text == heading => start = Some(offset),
            Some(s) if is_heading && hashes <= level => return &doc[s..here],
            _ => {}
        }
    }
    let s = start.unwrap_or_else(|| panic!("no heading {heading:?}"));
    &doc[s..]
}

/// The cells of a markdown table row, trimmed; `\|` is a `|` inside a cell.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim();
    let inner = inner.strip_prefix('|').unwrap_or(inner);
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut out = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            _ => out.last_mut().unwrap().push(c),
        }
    }
    out.iter().map(|c| c.trim().to_string()).collect()
}

/// The body rows of the markdown tables in `text` (header rows left out).
fn rows(text: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let is_row = |l: &str| l.starts_with('|');
    let is_separator = |l: &str| is_row(l) && l.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '));
    lines
        .iter()
        .enumerate()
        .filter(|(i, l)| {
            is_row(l)
                && !is_separator(l)
                && !lines.get(i + 1).is_some_and(|next| is_separator(next))
        })
        .map(|(_, l)| cells(l))
        .collect()
}

/// The texts between backticks.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// A reason-like name: `RolloutStarted`, `Stable`.
fn is_camel(token: &str) -> bool {
    token.starts_with(|c: char| c.is_ascii_uppercase())
        && token.chars().all(|c| c.is_ascii_alphanumeric())
}

/// What is in `want` but not in `got`, and what is in `got` but not in `want`.
fn differences<'a, T: Ord + Clone + 'a>(
    want: impl IntoIterator<Item = &'a T>,
    got: impl IntoIterator<Item = &'a T>,
) -> (Vec<T>, Vec<T>) {
    let want: BTreeSet<T> = want.into_iter().cloned().collect();
    let got: BTreeSet<T> = got.into_iter().cloned().collect();
    (
        want.difference(&got).cloned().collect(),
        got.difference(&want).cloned().collect(),
    )
}

// ---------------------------------------------------------------- metrics

/// The metric families the operator registers, by the name queries use (a
/// counter's samples carry `_total`), with their type, from the `# TYPE`
/// lines of `/metrics`. A family with labels renders nothing before its first
/// series, so each gets one here; the count of `register` calls in
/// src/ops/metrics.rs makes sure that none was left out.
/// The rendered metrics with a series in every family that has labels.
fn sample_metrics() -> String {
    use crate::ops::metrics::{
        ErrorLabel, FailedGateLabel, GateKindLabel, GateLabel, Metrics, RequestLabel,
        ResourceLabel, VerbLabel, WriteLabel,
    };
    let m = Metrics::new();
    crate::controller::queue::prime(&m);
    let gate = GateLabel {
        namespace: "ns".into(),
        plan: "p".into(),
        gate: "g".into(),
    };
    let kind = GateKindLabel {
        kind: "webhook".into(),
    };
    let _ = m.failures.get_or_create(&ErrorLabel {
        error: "api".into(),
    });
    let _ = m
        .rollbacks
        .get_or_create(&FailedGateLabel { gate: "g".into() });
    let _ = m.api_writes.get_or_create(&WriteLabel {
        operation: "apply".into(),
    });
    let _ = m.gate_value.get_or_create(&gate);
    let _ = m.gate_failures.get_or_create(&gate);
    let _ = m.gate_dry_run.get_or_create(&gate);
    let _ = m.gate_duration.get_or_create(&kind);
    let _ = m.gate_errors.get_or_create(&kind);
    let _ = m
        .gate_calls_held
        .get_or_create(&crate::ops::metrics::NamespaceLabel {
            namespace: "ns".into(),
        });
    let _ = m.kube_requests.get_or_create(&RequestLabel {
        verb: "get".into(),
        resource: "pods".into(),
        code: "200".into(),
    });
    let _ = m
        .kube_request_duration
        .get_or_create(&VerbLabel { verb: "get".into() });
    let _ = m.cached_objects.get_or_create(&ResourceLabel {
        resource: "pods".into(),
    });
    let _ = m.cached_bytes.get_or_create(&ResourceLabel {
        resource: "pods".into(),
    });
    let _ = m
        .notifications
        .get_or_create(&crate::ops::metrics::NotificationLabel {
            namespace: "ns".into(),
            receiver: "r".into(),
            result: "sent".into(),
        });
    m.set_phase("ns/p", Some(Phase::Stable));
    m.render()
}

/// Every registered metric family, by name (counters with `_total`) -> type.
fn metric_families() -> BTreeMap<String, String> {
    let text = sample_metrics();
    let families: BTreeMap<String, String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            let name = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            (name, kind.to_string())
        })
        .collect();
    let source = read("src/ops/metrics.rs");
    let registered = source.matches(".register(").count()
        + source.matches(".register_with_unit(").count()
        + crate::ops::process::FAMILIES.len();
    assert_eq!(
        families.len(),
        registered,
        "src/ops/metrics.rs registers {registered} families but {} render: give each family \
         with labels a series in doc_lists::metric_families, so that the docs check sees it:\n{text}",
        families.len()
    );
    families
}

/// The rows of docs/operations.md's metrics table: name -> cells.
fn metrics_table(doc: &str) -> BTreeMap<String, Vec<String>> {
    rows(section(doc, "## Metrics"))
        .into_iter()
        .filter(|r| r[0].starts_with("`releaseplan_") || r[0].starts_with("`process_"))
        .map(|r| (r[0].trim_matches('`').to_string(), r))
        .collect()
}

#[test]
fn operations_metrics_table_lists_every_registered_metric_and_no_other() {
    let doc = read("docs/operations.md");
    let table = metrics_table(&doc);
    let code = metric_families();
    let (undocumented, unknown) = differences(code.keys(), table.keys());
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/operations.md's metrics table differs from Metrics::new(): \
         registered but not in the table: {undocumented:?}; in the table but not registered: {unknown:?}"
    );
    for (name, kind) in &code {
        assert_eq!(
            &table[name][1], kind,
            "docs/operations.md: the type of {name}"
        );
    }
}

/// The label names of each rendered family (histograms' `le` left out).
fn metric_labels(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let name = name
            .trim_end_matches("_bucket")
            .trim_end_matches("_count")
            .trim_end_matches("_sum")
            .to_string();
        let labels = rest.split('}').next().unwrap_or_default();
        let names = out.entry(name).or_default();
        for pair in labels.split("\",").filter(|p| !p.is_empty()) {
            let label = pair.split('=').next().unwrap().trim_start_matches(',');
            if label != "le" {
                names.insert(label.to_string());
            }
        }
    }
    out
}

#[test]
fn operations_metrics_table_names_every_label() {
    let doc = read("docs/operations.md");
    let table = metrics_table(&doc);
    for (name, labels) in metric_labels(&sample_metrics()) {
        let Some(row) = table.get(&name) else {
            continue;
        };
        let named = backticked(&row[2]);
        for label in &labels {
            assert!(
                named.contains(&label.as_str()),
                "docs/operations.md: the labels of {name} do not name `{label}`: {}",
                row[2]
            );
        }
    }
}

#[test]
fn docs_name_only_metrics_that_exist() {
    let code = metric_families();
    // A family's own sample names: `_total` of counters is in the key;
    // histograms add `_bucket`, `_sum` and `_count`.
    let exists = |name: &str| {
        code.contains_key(name)
            || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
                name.strip_suffix(suffix)
                    .is_some_and(|base| code.get(base).is_some_and(|k| k == "histogram"))
            })
    };
    for path in [
        "docs/operations.md",
        "README.md",
        "charts/releaseplan/README.md",
        "integrations/prometheus/alerts.yaml",
        "integrations/grafana/releaseplan-dashboard.json",
    ] {
        let text = read(path);
        let mut unknown = BTreeSet::new();
        for (i, _) in text.match_indices("releaseplan_") {
            if text[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            // `releaseplan_io_revision` is a label name (releaseplan.io/revision);
            // `releaseplan_0.2.0_linux_amd64.tar.gz` a release file (a metric's
            // name goes on with a letter).
            if name.ends_with('_')
                || name.starts_with("releaseplan_io_")
                || name["releaseplan_".len()..].starts_with(|c: char| c.is_ascii_digit())
            {
                continue;
            }
            if !exists(&name) {
                unknown.insert(name);
            }
        }
        assert!(
            unknown.is_empty(),
            "{path} names metrics the operator does not export: {unknown:?}"
        );
    }
}

/// The values listed for `label` in a cell such as "`error`: `api`, `client`".
fn label_values<'a>(
    table: &'a BTreeMap<String, Vec<String>>,
    metric: &str,
    label: &str,
) -> Vec<&'a str> {
    let row = table
        .get(metric)
        .unwrap_or_else(|| panic!("docs/operations.md has no row for {metric}"));
    let ticks = backticked(&row[2]);
    assert_eq!(
        ticks.first().copied(),
        Some(label),
        "docs/operations.md: the labels of {metric} start with `{label}`"
    );
    ticks[1..].to_vec()
}

#[test]
fn operations_metric_label_values_are_the_codes() {
    let doc = read("docs/operations.md");
    let table = metrics_table(&doc);
    assert_eq!(
        label_values(&table, "releaseplan_reconcile_failures_total", "error"),
        crate::controller::Error::KINDS,
        "docs/operations.md: the `error` values of releaseplan_reconcile_failures_total \
         must be controller::Error::KINDS, in its order"
    );
    let phases: Vec<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
    assert_eq!(
        label_values(&table, "releaseplan_plans", "phase"),
        phases,
        "docs/operations.md: the `phase` values of releaseplan_plans"
    );
    let outcomes: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
    assert_eq!(
        label_values(&table, "releaseplan_rollouts_total", "outcome"),
        outcomes,
        "docs/operations.md: the `outcome` values of releaseplan_rollouts_total"
    );
    for metric in [
        "releaseplan_gate_evaluation_duration_seconds",
        "releaseplan_gate_errors_total",
    ] {
        assert_eq!(
            label_values(&table, metric, "kind"),
            crate::gates::GateSpec::KINDS,
            "docs/operations.md: the `kind` values of {metric}"
        );
    }
}

// ---------------------------------------------------------------- reasons

fn names<T: Copy>(all: &[T], name: impl Fn(T) -> &'static str) -> BTreeSet<&'static str> {
    all.iter().map(|r| name(*r)).collect()
}

#[test]
fn api_events_paragraph_names_exactly_the_event_reasons() {
    let doc = read("docs/api.md");
    let named: BTreeSet<&str> = backticked(section(&doc, "## Events"))
        .into_iter()
        .filter(|t| is_camel(t))
        .collect();
    let code = names(EventReason::ALL, EventReason::as_str);
    let (missing, unknown) = differences(&code, &named);
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/api.md's Events section differs from EventReason::ALL: \
         not named: {missing:?}; named but not a reason the operator records: {unknown:?}"
    );
}

#[test]
fn api_conditions_table_names_every_condition_reason_and_no_other() {
    use crate::plan::adopt::ADOPTED;
    use crate::plan::conditions::{
        PAUSED, PROGRESSING, READY, RECONCILING, ROLLBACK_IN_PROGRESS, STALLED,
    };
    let doc = read("docs/api.md");
    let table: Vec<Vec<String>> = rows(section(&doc, "## Conditions"));
    let named: BTreeSet<&str> = table
        .iter()
        .flat_map(|r| r.iter().flat_map(|c| backticked(c)))
        .filter(|t| is_camel(t))
        .collect();
    let reasons = names(ConditionReason::ALL, ConditionReason::as_str);
    let missing: Vec<&&str> = reasons.difference(&named).collect();
    assert!(
        missing.is_empty(),
        "docs/api.md's conditions table does not name these ConditionReasons: {missing:?}"
    );
    let types = [
        READY,
        RECONCILING,
        STALLED,
        PROGRESSING,
        ROLLBACK_IN_PROGRESS,
        PAUSED,
        ADOPTED,
        crate::plan::config::CONFIG_VERSIONED,
    ];
    let known: BTreeSet<&str> = reasons
        .iter()
        .copied()
        .chain(types)
        .chain(Phase::ALL.iter().map(|p| p.as_str()))
        .collect();
    let unknown: Vec<&&str> = named.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "docs/api.md's conditions table names reasons the operator never sets: {unknown:?}"
    );
    let rows_types: Vec<&str> = table.iter().map(|r| r[0].trim_matches('`')).collect();
    assert_eq!(
        rows_types, types,
        "docs/api.md: one row per condition type, in this order"
    );
}

#[test]
fn api_failure_reasons_are_listed() {
    let doc = read("docs/api.md");
    let row = rows(section(&doc, "## Status"))
        .into_iter()
        .find(|r| r[0] == "`failure`")
        .expect("docs/api.md: the `failure` row of the status table");
    let named: BTreeSet<&str> = backticked(&row[1]).into_iter().collect();
    let missing: Vec<&str> = FailureReason::ALL
        .iter()
        .map(|r| r.as_str())
        .filter(|r| !named.contains(r))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/api.md's `failure` row does not list {missing:?}"
    );
}

// ---------------------------------------------------------------- phases

#[test]
fn phase_lists_are_the_phases() {
    let phases: Vec<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
    let mut sorted = phases.clone();
    sorted.sort_unstable();
    for (path, heading, field) in [
        (
            "docs/plugin.md",
            "## Output for scripts: -o json|yaml",
            "`phase`",
        ),
        ("docs/api.md", "## Status", "`phase`"),
    ] {
        let doc = read(path);
        let row = rows(section(&doc, heading))
            .into_iter()
            .find(|r| r[0] == field)
            .unwrap_or_else(|| panic!("{path}: no {field} row under {heading}"));
        let mut listed: Vec<&str> = row
            .iter()
            .skip(1)
            .flat_map(|c| backticked(c))
            .filter(|t| is_camel(t))
            .collect();
        listed.sort_unstable();
        listed.dedup();
        assert_eq!(
            listed, sorted,
            "{path}: the phases of the {field} row must be exactly Phase::ALL"
        );
    }
    let doc = read("docs/api.md");
    let table: Vec<String> = rows(section(&doc, "## Phases"))
        .into_iter()
        .map(|r| r[0].trim_matches('`').to_string())
        .collect();
    assert_eq!(
        table, phases,
        "docs/api.md: one row per phase, in Phase::ALL's order"
    );
}

// ---------------------------------------------------------------- operator flags

/// A flag of the operator (`Args` in src/main.rs).
#[derive(Debug)]
struct OperatorFlag {
    long: String,
    env: Option<String>,
    default: Option<String>,
}

/// Splits `text` at the commas outside parentheses, brackets and quotes.
fn split_top_level(text: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let (mut depth, mut quoted, mut char_quoted) = (0i32, false, false);
    for c in text.chars() {
        match c {
            '"' if !char_quoted => quoted = !quoted,
            '\'' if !quoted => char_quoted = !char_quoted,
            _ if quoted || char_quoted => {}
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(String::new());
                continue;
            }
            _ => {}
        }
        out.last_mut().unwrap().push(c);
    }
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The flags of the operator, read from the `#[arg(...)]` attributes of
/// `struct Args` in src/main.rs. The binary's `Args` is not part of the
/// library, so its `CommandFactory` cannot be called from here, and checking
/// `--help` of the built binary would take an integration test (a link of
/// the whole crate): the attributes are regular enough to read as text, and
/// the test fails loudly when they are not.
fn operator_flags() -> Vec<OperatorFlag> {
    let main = read("src/main.rs");
    let start = main
        .find("struct Args {")
        .expect("src/main.rs defines struct Args");
    let body = &main[start..];
    let body = &body[..body.find("\n}\n").expect("the end of struct Args")];
    let mut flags = Vec::new();
    let mut rest = body;
    while let Some(i) = rest.find("#[arg(") {
        let after = &rest[i + "#[arg(".len()..];
        let mut depth = 1;
        let mut end = None;
        for (j, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(j);
                        break;
                    }
                }
                _ => {}
            }
        }
        let end = end.expect("a closed #[arg(...)]");
        let attr = &after[..end];
        rest = &after[end..];
        let field = rest
            .lines()
            .skip(1)
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with("//") && !l.starts_with("#["))
            .and_then(|l| l.split_once(':'))
            .map(|(name, _)| name.trim().to_string())
            .expect("a field after #[arg(...)]");
        let unquote = |v: &str| v.trim().trim_matches('"').to_string();
        let mut flag = OperatorFlag {
            long: String::new(),
            env: None,
            default: None,
        };
        for item in split_top_level(attr) {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim().to_string(), Some(v.trim().to_string())),
                None => (item.clone(), None),
            };
            match (key.as_str(), value) {
                ("long", None) => flag.long = field.replace('_', "-"),
                ("long", Some(v)) => flag.long = unquote(&v),
                ("env", Some(v)) => flag.env = Some(unquote(&v)),
                ("default_value" | "default_value_t", Some(v)) => {
                    flag.default = Some(unquote(&v));
                }
                _ => {}
            }
        }
        assert!(
            !flag.long.is_empty(),
            "src/main.rs: the operator flag of field {field} has no `long`: \
             update this reader (src/doc_lists.rs) if the attribute changed shape"
        );
        flags.push(flag);
    }
    assert_eq!(
        flags.len(),
        body.matches("#[arg(").count(),
        "every #[arg(...)] of Args read"
    );
    assert!(
        flags.len() >= 10,
        "src/main.rs: only {} flags read",
        flags.len()
    );
    flags
}

#[test]
fn operations_flags_table_lists_every_operator_flag_with_its_env_and_default() {
    let doc = read("docs/operations.md");
    let table: BTreeMap<String, Vec<String>> = rows(section(&doc, "## Operator flags"))
        .into_iter()
        .map(|r| (r[0].trim_matches('`').to_string(), r))
        .collect();
    let flags = operator_flags();
    let code: BTreeSet<String> = flags.iter().map(|f| format!("--{}", f.long)).collect();
    let documented: BTreeSet<String> = table.keys().cloned().collect();
    let (missing, unknown) = differences(&code, &documented);
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/operations.md's flags table differs from Args in src/main.rs: \
         not in the table: {missing:?}; in the table but not a flag: {unknown:?}"
    );
    for f in &flags {
        let row = &table[&format!("--{}", f.long)];
        if let Some(env) = &f.env {
            assert_eq!(
                row[1],
                format!("`{env}`"),
                "docs/operations.md: env of --{}",
                f.long
            );
        }
        if let Some(default) = &f.default {
            assert_eq!(
                row[2],
                format!("`{default}`"),
                "docs/operations.md: default of --{}",
                f.long
            );
        }
    }
}

#[test]
fn defaults_named_beside_operator_flags_are_the_code_defaults() {
    // "`--lease-seconds`, default 15 s", "`RELEASEPLAN_QPS`, default 200",
    // "`--stuck-after-seconds` (default 120": wherever prose gives a default
    // right after a flag or its variable, it must be the code's.
    let flags = operator_flags();
    for path in [
        "docs/operations.md",
        "docs/gates.md",
        "docs/api.md",
        "docs/decisions.md",
        "docs/troubleshooting.md",
        "README.md",
        "charts/releaseplan/README.md",
    ] {
        let text = read(path);
        for f in &flags {
            let Some(default) = &f.default else { continue };
            let names = [
                Some(format!("`--{}`", f.long)),
                f.env.as_ref().map(|e| format!("`{e}`")),
            ];
            for name in names.iter().flatten() {
                for (i, _) in text.match_indices(name.as_str()) {
                    let after = &text[i + name.len()..];
                    let Some(value) = after
                        .strip_prefix(", default ")
                        .or_else(|| after.strip_prefix(" (default "))
                    else {
                        continue;
                    };
                    let value: String = value
                        .trim_start_matches('`')
                        .chars()
                        .take_while(|c| !matches!(c, ' ' | ';' | ')' | ',' | '`' | '\n'))
                        .collect();
                    assert_eq!(
                        &value, default,
                        "{path}: {name} is said to default to {value}, the code says {default}"
                    );
                }
            }
        }
    }
}

#[test]
fn operations_values_table_defaults_are_the_charts() {
    let doc = read("docs/operations.md");
    let values: yaml_serde::Value =
        yaml_serde::from_str(&read("charts/releaseplan/values.yaml")).unwrap();
    let lookup = |path: &str| {
        path.split('.')
            .try_fold(&values, |v, key| v.get(key))
            .unwrap_or_else(|| panic!("docs/operations.md names value {path}, not in values.yaml"))
    };
    let render = |v: &yaml_serde::Value| match v {
        yaml_serde::Value::String(s) if s.is_empty() => "\"\"".to_string(),
        yaml_serde::Value::String(s) => s.clone(),
        yaml_serde::Value::Sequence(s) if s.is_empty() => "[]".to_string(),
        yaml_serde::Value::Mapping(m) if m.is_empty() => "{}".to_string(),
        other => yaml_serde::to_string(other).unwrap().trim().to_string(),
    };
    let mut checked = 0;
    for row in rows(section(&doc, "## Values")) {
        let keys: Vec<&str> = row[0].split(" / ").map(|k| k.trim_matches('`')).collect();
        let defaults: Vec<&str> = row[1].split(" / ").collect();
        if keys.len() != defaults.len() {
            continue;
        }
        // `leaderElection.enabled` / `leaseName`: the later keys share the first's parent.
        let parent = keys[0].rsplit_once('.').map(|(p, _)| p);
        for (key, default) in keys.iter().zip(&defaults) {
            let Some(default) = default.strip_prefix('`').and_then(|d| d.strip_suffix('`')) else {
                continue; // prose: "required", "appVersion"
            };
            let path = match parent {
                Some(p) if !key.contains('.') => format!("{p}.{key}"),
                _ => (*key).to_string(),
            };
            assert_eq!(
                default,
                render(lookup(&path)),
                "docs/operations.md's Values table: the default of {path}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} values checked");
}

/// How the chart passes each operator flag, against the binary's default
/// (issue 50 §5: a binary run by hand is no more open than a default
/// install). Every flag is in one list, so a new flag is compared too.
#[test]
fn operator_defaults_are_the_charts() {
    let values: yaml_serde::Value =
        yaml_serde::from_str(&read("charts/releaseplan/values.yaml")).unwrap();
    let value = |path: &str| -> String {
        let v = path
            .split('.')
            .try_fold(&values, |v, key| v.get(key))
            .unwrap_or_else(|| panic!("charts/releaseplan/values.yaml has no {path}"));
        match v {
            yaml_serde::Value::String(s) => s.clone(),
            yaml_serde::Value::Sequence(s) if s.is_empty() => String::new(),
            other => yaml_serde::to_string(other).unwrap().trim().to_string(),
        }
    };
    let single_tenant = value("gatePolicy.singleTenant") == "true";
    // Flags the chart sets from a value: the default it passes.
    let passed: BTreeMap<&str, String> = BTreeMap::from([
        ("concurrency", value("concurrency")),
        ("worker-threads", value("workerThreads")),
        ("qps", value("qps")),
        ("burst", value("burst")),
        ("metrics-addr", format!("[::]:{}", value("metricsPort"))),
        ("lease-name", value("leaderElection.leaseName")),
        ("lease-seconds", value("leaderElection.leaseSeconds")),
        ("shards", value("leaderElection.shards")),
        ("config-versioning", value("config.versioning")),
        ("gate-error-body-chars", value("gates.errorBodyChars")),
        ("gate-job-pod-security", value("gates.jobPodSecurity")),
        ("gate-max-answer-bytes", value("gates.maxAnswerBytes")),
        ("gate-calls-in-flight", value("gates.budget.callsInFlight")),
        (
            "gate-calls-in-flight-per-namespace",
            value("gates.budget.callsInFlightPerNamespace"),
        ),
        (
            "gate-calls-per-second",
            value("gates.budget.callsPerSecond"),
        ),
        (
            "gate-calls-per-second-per-namespace",
            value("gates.budget.callsPerSecondPerNamespace"),
        ),
        (
            "gate-policy",
            if single_tenant {
                "optional"
            } else {
                "required"
            }
            .to_string(),
        ),
    ]);
    // Flags without a default value, set by the chart only from a value
    // that is empty by default.
    let unset: BTreeMap<&str, String> = BTreeMap::from([
        ("namespace", value("watchNamespace")),
        ("gate-deny-cidrs", value("gates.denyCidrs")),
        ("gate-allow-hosts", value("gates.allowHosts")),
        ("dashboard-url", value("notifications.dashboardUrl")),
        ("config-namespaces", value("config.namespaces")),
    ]);
    // Flags the chart leaves to the binary's default: POD_NAME and
    // POD_NAMESPACE are what the defaults read (`--lease-namespace` is
    // passed as `$(POD_NAMESPACE)`, the same).
    let left = [
        "operator-namespace",
        "lease-namespace",
        "gate-credentials-namespace",
        "identity",
        "api-http2",
        "stuck-after-seconds",
        "api-request-timeout-seconds",
        "reconcile-timeout-seconds",
    ];
    // Deliberately not the chart's, neither a matter of what tenants can
    // reach: the log format (text for a person at a terminal, JSON for the
    // chart's log collector) and leader election (the chart runs two
    // replicas; one process run by hand needs no Lease, nor RBAC on one).
    let different = BTreeMap::from([
        ("log-json", value("logging.json")),
        ("leader-election", value("leaderElection.enabled")),
    ]);
    for (flag, chart) in &different {
        assert_eq!(chart, "true", "values.yaml: the default behind --{flag}");
    }
    for f in operator_flags() {
        let long = f.long.as_str();
        if let Some(chart) = passed.get(long) {
            assert_eq!(
                f.default.as_deref(),
                Some(chart.as_str()),
                "the default of --{long} (src/main.rs) is not the chart's (charts/releaseplan/values.yaml)"
            );
        } else if let Some(chart) = unset.get(long) {
            assert!(
                f.default.is_none() && chart.is_empty(),
                "--{long}: no default in src/main.rs, and none in values.yaml ({chart:?})"
            );
        } else {
            assert!(
                left.contains(&long) || different.contains_key(long),
                "--{long}: compare its default with the chart's in doc_lists::operator_defaults_are_the_charts"
            );
        }
    }
}

// ---------------------------------------------------------------- plugin

/// The plugin's commands (`set image` as one), with their arguments.
fn plugin_commands() -> Vec<(String, Vec<clap::Arg>)> {
    fn walk(cmd: &clap::Command, prefix: &str, out: &mut Vec<(String, Vec<clap::Arg>)>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let path = format!("{prefix}{}", sub.get_name());
            if sub.has_subcommands() {
                walk(sub, &format!("{path} "), out);
            } else {
                out.push((path, sub.get_arguments().cloned().collect()));
            }
        }
    }
    let mut out = Vec::new();
    walk(&crate::cli::Cli::command(), "", &mut out);
    assert!(out.len() >= 10, "{} plugin commands", out.len());
    out
}

/// The usage lines of docs/plugin.md (`kubectl releaseplan CMD ...` in
/// ```text blocks, with their indented continuation lines), by command.
fn plugin_usages(doc: &str, commands: &[String]) -> BTreeMap<String, String> {
    let mut usages: BTreeMap<String, String> = BTreeMap::new();
    let mut fence: Option<&str> = None;
    let mut current: Option<String> = None;
    for line in doc.lines() {
        if let Some(rest) = line.trim_start().strip_prefix("```") {
            fence = if fence.is_some() { None } else { Some(rest) };
            current = None;
            continue;
        }
        if fence != Some("text") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("kubectl releaseplan ") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let command = commands
                .iter()
                .filter(|c| {
                    let parts: Vec<&str> = c.split(' ').collect();
                    words.starts_with(&parts)
                })
                .max_by_key(|c| c.len())
                .unwrap_or_else(|| {
                    panic!("docs/plugin.md shows usage of a command the plugin lacks: {line:?}")
                })
                .clone();
            usages.entry(command.clone()).or_default().push_str(rest);
            current = Some(command);
        } else if line.starts_with(' ')
            && let Some(c) = &current
        {
            usages.get_mut(c).unwrap().push_str(line);
        } else {
            current = None;
        }
    }
    usages
}

/// Whether `text` has `flag` (`--watch`, `-w`) as a whole word.
fn mentions(text: &str, flag: &str) -> Option<usize> {
    text.match_indices(flag).map(|(i, _)| i).find(|&i| {
        let before = text[..i].chars().next_back();
        let after = text[i + flag.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
            && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

#[test]
fn plugin_doc_shows_the_usage_of_every_command_with_its_flags() {
    let doc = read("docs/plugin.md");
    let commands = plugin_commands();
    let paths: Vec<String> = commands.iter().map(|(p, _)| p.clone()).collect();
    let usages = plugin_usages(&doc, &paths);
    let missing: Vec<&String> = paths.iter().filter(|p| !usages.contains_key(*p)).collect();
    assert!(
        missing.is_empty(),
        "docs/plugin.md has no usage line (`kubectl releaseplan CMD ...` in a ```text block) for {missing:?}"
    );
    for (path, args) in &commands {
        let usage = &usages[path];
        for arg in args.iter().filter(|a| !a.is_hide_set()) {
            let long = arg.get_long().map(|l| format!("--{l}"));
            let short = arg.get_short().map(|s| format!("-{s}"));
            let at = long
                .iter()
                .chain(short.iter())
                .find_map(|f| mentions(usage, f).map(|i| i + f.len()));
            if long.is_none() && short.is_none() {
                // A positional: its value names, when it has a fixed set.
                let values: Vec<String> = arg
                    .get_possible_values()
                    .iter()
                    .map(|v| v.get_name().to_string())
                    .collect();
                if !values.is_empty() {
                    assert!(
                        usage.contains(&values.join("|")),
                        "docs/plugin.md: `{path}` takes {}",
                        values.join("|")
                    );
                }
                continue;
            }
            let Some(at) = at else {
                panic!(
                    "docs/plugin.md: the usage of `{path}` ({usage:?}) does not show {}",
                    long.or(short).unwrap()
                );
            };
            // `--timeout 10m`, `-o json|yaml`: the value shown is the default
            // or the value set.
            let shown: String = usage[at..]
                .trim_start()
                .chars()
                .take_while(|c| !matches!(c, ' ' | ']'))
                .collect();
            let takes_values = arg.get_action().takes_values();
            if let Some(default) = arg.get_default_values().first().filter(|_| takes_values) {
                assert_eq!(
                    shown,
                    default.to_string_lossy(),
                    "docs/plugin.md: the usage of `{path}` shows {} with another default",
                    long.as_ref().or(short.as_ref()).unwrap()
                );
            }
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .map(|v| v.get_name().to_string())
                .collect();
            if !values.is_empty() && takes_values {
                assert_eq!(
                    shown,
                    values.join("|"),
                    "docs/plugin.md: the values of {} in `{path}`",
                    long.as_ref().or(short.as_ref()).unwrap()
                );
            }
        }
    }
}

#[test]
fn plugin_connecting_table_lists_exactly_the_global_flags() {
    let doc = read("docs/plugin.md");
    let documented: BTreeSet<String> = rows(section(&doc, "## Connecting"))
        .iter()
        .flat_map(|r| {
            backticked(&r[0])
                .into_iter()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter_map(|t| {
            t.split(' ')
                .next()
                .filter(|f| f.starts_with("--"))
                .map(str::to_string)
        })
        .collect();
    let code: BTreeSet<String> = crate::cli::Cli::command()
        .get_arguments()
        .filter(|a| a.is_global_set())
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    let (missing, unknown) = differences(&code, &documented);
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/plugin.md's Connecting table differs from the global flags: \
         not in the table: {missing:?}; in the table but not a flag: {unknown:?}"
    );
}

/// The `| exit | meaning |` table under `heading`: code -> meaning.
fn exit_table(doc: &str, heading: &str) -> BTreeMap<i32, String> {
    rows(section(doc, heading))
        .into_iter()
        .filter_map(|r| Some((r[0].parse::<i32>().ok()?, r[1].clone())))
        .collect()
}

#[test]
fn plugin_exit_code_tables_are_the_codes() {
    let doc = read("docs/plugin.md");
    let wait = exit_table(&doc, "## wait and its exit codes");
    let want = [
        (EXIT_STABLE, "`Stable`"),
        (EXIT_ERROR, "Error"),
        (EXIT_ROLLED_BACK, "`RolledBack`"),
        (EXIT_STALLED, "`Stalled=True`"),
        (EXIT_TIMEOUT, "timeout"),
    ];
    let codes: BTreeSet<i32> = want.iter().map(|(c, _)| *c).collect();
    assert_eq!(
        wait.keys().copied().collect::<BTreeSet<_>>(),
        codes,
        "docs/plugin.md: the exit codes of `wait` are src/cli/wait.rs's EXIT_* constants"
    );
    for (code, word) in want {
        assert!(
            wait[&code].contains(word),
            "docs/plugin.md: exit {code} of `wait` should mention {word}: {:?}",
            wait[&code]
        );
    }
    // The short form of `set image --wait`, and the plugin's own --help.
    let short = format!(
        "({EXIT_STABLE} Stable, {EXIT_ERROR} error, {EXIT_ROLLED_BACK} rolled back, \
         {EXIT_STALLED} stalled, {EXIT_TIMEOUT} timed out)"
    );
    assert!(
        doc.replace('\n', " ").contains(&short),
        "docs/plugin.md should say {short}"
    );
    let help = crate::cli::Cli::command()
        .find_subcommand_mut("wait")
        .unwrap()
        .render_long_help()
        .to_string();
    for (code, words) in [
        (EXIT_STABLE, "the current generation is Stable"),
        (EXIT_ERROR, "error"),
        (EXIT_ROLLED_BACK, "the current generation was rolled back"),
        (EXIT_STALLED, "Stalled=True"),
        (EXIT_TIMEOUT, "timed out"),
    ] {
        assert!(
            help.contains(&format!("{code}  {words}")),
            "`wait --help` should say `{code}  {words}`:\n{help}"
        );
    }

    let lint = exit_table(&doc, "## lint");
    assert_eq!(
        lint.keys().copied().collect::<Vec<_>>(),
        vec![0, EXIT_ERROR, crate::cli::LINT_INVALID],
        "docs/plugin.md: the exit codes of `lint`"
    );
    assert!(
        lint[&EXIT_ERROR].starts_with("error"),
        "{:?}",
        lint[&EXIT_ERROR]
    );
    assert!(
        lint[&crate::cli::LINT_INVALID].contains("invalid"),
        "{:?}",
        lint[&crate::cli::LINT_INVALID]
    );
}

#[test]
fn request_timeout_default_is_kubes_as_documented() {
    // Without --request-timeout the plugin keeps kube's Config defaults.
    let mut config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    crate::cli::apply_flags(&mut config, &crate::cli::Global::default()).unwrap();
    let secs = |d: Option<std::time::Duration>| d.map(|d| d.as_secs());
    assert_eq!(secs(config.read_timeout), None, "no limit on the answer");
    let (connect, write) = (
        secs(config.connect_timeout).expect("kube's connect timeout"),
        secs(config.write_timeout).expect("kube's write timeout"),
    );
    let doc = read("docs/plugin.md").replace('\n', " ");
    let claim = format!(
        "{connect} s to connect, {write} s for a send that stalls, no limit on waiting for an answer"
    );
    assert!(doc.contains(&claim), "docs/plugin.md should say: {claim}");
    let help = crate::cli::Cli::command().render_long_help().to_string();
    let claim = format!("{connect}s to connect, {write}s for a stalled send, no limit on");
    assert!(
        help.replace('\n', " ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .contains(&claim),
        "--request-timeout's help should say: {claim}\n{help}"
    );
}

// ---------------------------------------------------------------- the CRD

/// The printer columns of the checked-in CRD: (name, JSON path without the dot).
fn printer_columns() -> Vec<(String, String)> {
    let crd: yaml_serde::Value = yaml_serde::from_str(&read("crds/releaseplan.yaml")).unwrap();
    crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_sequence()
        .expect("crds/releaseplan.yaml has additionalPrinterColumns")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["jsonPath"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches('.')
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn api_printer_columns_are_the_crds() {
    let columns = printer_columns();
    let doc = read("docs/api.md");
    let start = doc
        .find("The printer columns are ")
        .expect("docs/api.md: \"The printer columns are ...\"");
    let sentence = &doc[start..];
    let sentence = &sentence[..sentence.find(".\n").expect("the end of the sentence")];
    let ticks = backticked(sentence);
    let documented: Vec<(String, String)> = ticks
        .chunks(2)
        .map(|pair| (pair[0].to_string(), pair.get(1).unwrap_or(&"").to_string()))
        .collect();
    assert_eq!(
        documented, columns,
        "docs/api.md: the printer columns (`Name` (`json.path`), in order) must be \
         crds/releaseplan.yaml's additionalPrinterColumns"
    );
    // The `kubectl get rp` examples show the same header.
    let header: Vec<String> = std::iter::once("NAME".to_string())
        .chain(columns.iter().map(|(name, _)| name.to_uppercase()))
        .collect();
    for path in ["docs/api.md", "README.md"] {
        let text = read(path);
        let lines: Vec<&str> = text.lines().collect();
        let mut seen = 0;
        for (i, line) in lines.iter().enumerate() {
            if line.starts_with("$ kubectl get rp") {
                let shown: Vec<&str> = lines[i + 1].split_whitespace().collect();
                assert_eq!(shown, header, "{path}: the columns of `kubectl get rp`");
                seen += 1;
            }
        }
        assert!(seen > 0, "{path} shows no `kubectl get rp` output");
    }
}

#[test]
fn crd_is_still_too_large_for_client_side_apply() {
    // docs/operations.md, docs/api.md and the chart README tell users to
    // apply it server-side because client-side apply would store it, as
    // compact JSON, in an annotation limited to 256 KiB.
    let crd: serde_json::Value = yaml_serde::from_str(&read("crds/releaseplan.yaml")).unwrap();
    let json = serde_json::to_string(&crd).unwrap();
    assert!(
        json.len() > 256 * 1024,
        "the CRD's JSON is {} bytes, no longer above the 256 KiB annotation limit: \
         revise the server-side-apply advice in docs/operations.md, docs/api.md and \
         charts/releaseplan/README.md",
        json.len()
    );
}

#[test]
fn gates_doc_gives_the_revision_hash_alphabet() {
    use crate::api::revision::{ALPHABET, HASH_LEN};
    let alphabet = std::str::from_utf8(ALPHABET).unwrap();
    let doc = read("docs/gates.md").replace('\n', " ");
    let claim = format!("{HASH_LEN}-character hashes over the alphabet `{alphabet}`");
    assert!(doc.contains(&claim), "docs/gates.md should say: {claim}");
    assert!(
        !doc.contains("hex hashes"),
        "docs/gates.md: revisions are not hex"
    );
}

// ---------------------------------------------------------------- spec fields

/// Fields of the spec that docs/api.md documents as one row, without rows
/// for what is inside: the PodTemplateSpec of a component, and a Job gate's
/// Job template (in `gates` and in the deprecated `jobs`).
const OPAQUE_SPEC_FIELDS: [&str; 6] = [
    "spec.components[].template",
    "spec.components[].statefulSet.volumeClaimTemplates",
    "spec.components[].autoscaling.metrics",
    "spec.components[].autoscaling.behavior",
    "spec.health.gates[].job.template",
    "spec.health.jobs[].template",
];

/// The gates that have `auth`, `headers` and `tls`: what is inside those
/// three is documented once, in the "Gate access" table, by its path below
/// the gate (`auth.bearer.secretKeyRef`).
const ACCESS_GATES: [&str; 3] = [
    "spec.health.gates[]",
    "spec.health.prometheus[]",
    "spec.health.webhooks[]",
];

/// The deprecated gate lists, documented by the migration table of their
/// section ("deprecated field -> where it goes in `gates`").
const DEPRECATED_GATE_LISTS: [&str; 4] = [
    "spec.health.prometheus",
    "spec.health.webhooks",
    "spec.health.jobs",
    "spec.health.templates",
];

const API_GATE_ACCESS: &str = "#### Gate access: `auth`, `headers[]`, `tls`";
const API_DEPRECATED_LISTS: &str = "#### Deprecated lists";

/// `steps[]` -> `steps`: a list is named without `[]`, its items' fields
/// through it (`steps[].setWeight`).
fn list_path(path: &str) -> String {
    path.strip_suffix("[]").unwrap_or(path).to_string()
}

/// The field paths of the ReleasePlan spec in the notation of docs/api.md
/// (`spec.health.gates[].prometheus.threshold`), from the openAPI schema of
/// the checked-in CRD (which `make crds-check` keeps equal to the code's),
/// not descending into [`OPAQUE_SPEC_FIELDS`].
fn spec_field_paths() -> BTreeSet<String> {
    fn walk(path: &str, schema: &serde_json::Value, out: &mut BTreeSet<String>) {
        let (path, schema) = match schema.get("items") {
            Some(items) if schema["type"] == "array" => (format!("{path}[]"), items),
            _ => (path.to_string(), schema),
        };
        for (name, field) in schema["properties"].as_object().into_iter().flatten() {
            let field_path = format!("{path}.{name}");
            out.insert(field_path.clone());
            if !OPAQUE_SPEC_FIELDS.contains(&field_path.as_str()) {
                walk(&field_path, field, out);
            }
        }
    }
    let crd: serde_json::Value = yaml_serde::from_str(&read("crds/releaseplan.yaml")).unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let mut out = BTreeSet::new();
    walk("spec", spec, &mut out);
    assert!(out.len() > 100, "only {} spec fields read", out.len());
    for path in OPAQUE_SPEC_FIELDS
        .iter()
        .chain(&DEPRECATED_GATE_LISTS)
        .map(|p| (*p).to_string())
        .chain(ACCESS_GATES.iter().map(|g| list_path(g)))
    {
        assert!(
            out.contains(&path),
            "crds/releaseplan.yaml has no field {path}: update src/doc_lists.rs"
        );
    }
    out
}

/// Every heading of a markdown document (`## Events`) with the text under
/// it, up to the next heading of any level. Lines in code blocks are never
/// headings.
fn headings(doc: &str) -> Vec<(&str, &str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    let mut current: Option<(&str, usize)> = None;
    let mut fenced = false;
    let mut offset = 0;
    for line in doc.split_inclusive('\n') {
        let here = offset;
        offset += line.len();
        let text = line.trim_end();
        if text.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = text.chars().take_while(|c| *c == '#').count();
        if fenced || hashes == 0 || !text[hashes..].starts_with(' ') {
            continue;
        }
        if let Some((heading, start)) = current {
            out.push((heading, &doc[start..here]));
        }
        current = Some((text, offset));
    }
    if let Some((heading, start)) = current {
        out.push((heading, &doc[start..]));
    }
    out
}

/// The cells of a migration table row, each a path and its siblings
/// (`health.jobs[i].template`, `.timeoutSeconds`), as full paths in the
/// notation of the spec tables: `spec.health.jobs[].timeoutSeconds`.
fn moved_paths(cell: &str) -> Vec<String> {
    let ticks = backticked(cell);
    let first = ticks.first().copied().unwrap_or_default();
    let parent = first.rsplit_once('.').map_or("", |(p, _)| p);
    ticks
        .iter()
        .map(|t| match t.strip_prefix('.') {
            Some(sibling) => format!("{parent}.{sibling}"),
            None => (*t).to_string(),
        })
        .map(|p| format!("spec.{}", p.replace("[i]", "[]").replace("[j]", "[]")))
        .collect()
}

/// A field of the spec has a row in docs/api.md: in the table of a section
/// headed by a spec path (`### `spec.strategy``, `#### `spec.health.gates[]``),
/// whose first cell names the field relative to that path
/// (`steps[].pause.duration`; several names per cell allowed). Below
/// [`OPAQUE_SPEC_FIELDS`] nothing is checked. The fields inside `auth`,
/// `headers` and `tls` of a gate ([`ACCESS_GATES`]) need a row of the
/// "Gate access" table instead, by their path below the gate
/// (`auth.basic.username`), where `...secretKeyRef.name` stands for every
/// path ending so. The fields of the deprecated gate lists need a row of
/// the migration table of "Deprecated lists", each mapped to an existing,
/// documented field of `gates`. And no row names a field the spec lacks.
#[test]
fn api_spec_tables_have_a_row_for_every_field_of_the_spec() {
    let doc = read("docs/api.md");
    let fields = spec_field_paths();

    let mut rows_named: BTreeSet<String> = BTreeSet::new();
    for (heading, text) in headings(&doc) {
        let title = heading.trim_start_matches('#').trim();
        let Some(base) = title
            .strip_prefix('`')
            .and_then(|t| t.strip_suffix('`'))
            .filter(|t| *t == "spec" || t.starts_with("spec."))
        else {
            continue;
        };
        for row in rows(text) {
            for name in backticked(&row[0]) {
                rows_named.insert(list_path(&format!("{base}.{name}")));
            }
        }
    }
    let access: Vec<String> = rows(section(&doc, API_GATE_ACCESS))
        .iter()
        .flat_map(|r| backticked(&r[0]).into_iter().map(list_path))
        .collect();
    let mut moves: Vec<(String, String)> = Vec::new();
    for row in rows(section(&doc, API_DEPRECATED_LISTS)) {
        let (old, new) = (moved_paths(&row[0]), moved_paths(&row[1]));
        assert_eq!(
            old.len(),
            new.len(),
            "docs/api.md, {API_DEPRECATED_LISTS}: a row maps {old:?} to {new:?}"
        );
        moves.extend(old.into_iter().zip(new));
    }
    let moved: BTreeSet<&str> = moves.iter().map(|(old, _)| old.as_str()).collect();

    // `auth.bearer.secretKeyRef.name` of a gate, if `path` is inside its
    // `auth`, `headers` or `tls`.
    let inside_access = |path: &str| -> Option<String> {
        ACCESS_GATES.iter().find_map(|gate| {
            let below = path.strip_prefix(gate)?.strip_prefix('.')?;
            let (field, rest) = below.split_once('.')?;
            ["auth", "headers[]", "tls"]
                .contains(&field)
                .then(|| format!("{field}.{rest}"))
        })
    };
    let in_access_table = |below: &str| {
        access.iter().any(|row| match row.strip_prefix("...") {
            Some(suffix) => below.ends_with(&format!(".{suffix}")),
            None => row == below,
        })
    };
    let deprecated = |path: &str| {
        DEPRECATED_GATE_LISTS
            .iter()
            .any(|list| path.starts_with(&format!("{list}[].")))
    };

    let missing: Vec<&String> = fields
        .iter()
        .filter(|path| match inside_access(path) {
            Some(below) => !in_access_table(&below),
            None if deprecated(path) => !moved.contains(path.as_str()),
            None => !rows_named.contains(*path),
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/api.md has no row for these fields of the ReleasePlan spec (a row of the \
         table under the `spec...` heading of their parent; inside auth, headers and tls \
         of a gate: a row of {API_GATE_ACCESS:?}; in a deprecated gate list: a row of the \
         migration table under {API_DEPRECATED_LISTS:?}): {missing:#?}"
    );

    let unknown: Vec<&String> = rows_named.difference(&fields).collect();
    assert!(
        unknown.is_empty(),
        "docs/api.md has rows for fields the ReleasePlan spec does not have: {unknown:?}"
    );
    let below_gates: Vec<String> = fields.iter().filter_map(|p| inside_access(p)).collect();
    for row in &access {
        assert!(
            below_gates.iter().any(|b| match row.strip_prefix("...") {
                Some(suffix) => b.ends_with(&format!(".{suffix}")),
                None => b == row,
            }),
            "docs/api.md, {API_GATE_ACCESS}: `{row}` is no field of a gate's auth, headers or tls"
        );
    }
    for (old, new) in &moves {
        assert!(
            deprecated(old) && fields.contains(old),
            "docs/api.md, {API_DEPRECATED_LISTS}: {old} is no field of a deprecated gate list"
        );
        assert!(
            new.starts_with("spec.health.gates[].") && rows_named.contains(new),
            "docs/api.md, {API_DEPRECATED_LISTS}: {old} moves to {new}, which is not a \
             field of spec.health.gates[] with a row of its own"
        );
    }
}

// ---------------------------------------------------------------- RBAC

/// (API group, resource) -> verbs.
type Rules = BTreeMap<(String, String), BTreeSet<String>>;

/// The operator's rules in the chart's templates: every
/// `- apiGroups: [...]` / `resources: [...]` / `verbs: [...]` entry of
/// templates/*.yaml and _helpers.tpl, but for aggregate-roles.yaml, whose
/// rules are users' (and have a table of their own).
fn chart_rules() -> Rules {
    let dir = format!(
        "{}/charts/releaseplan/templates",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut rules = Rules::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            (name.ends_with(".yaml") || name.ends_with(".tpl")) && name != "aggregate-roles.yaml"
        })
        .collect();
    files.sort();
    let list = |line: &str, key: &str| -> Option<Vec<String>> {
        let value = line.trim().trim_start_matches("- ").strip_prefix(key)?;
        Some(
            serde_json::from_str(value.trim())
                .unwrap_or_else(|e| panic!("{dir}: {key} {value:?} is not a one-line list: {e}")),
        )
    };
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(groups) = list(line, "apiGroups:") else {
                continue;
            };
            let mut resources = None;
            let mut verbs = None;
            for next in lines[i + 1..]
                .iter()
                .take_while(|l| !l.trim_start().starts_with("- "))
            {
                resources = resources.or_else(|| list(next, "resources:"));
                verbs = verbs.or_else(|| list(next, "verbs:"));
            }
            let (resources, verbs) = (
                resources.unwrap_or_else(|| panic!("{}: a rule without resources", path.display())),
                verbs.unwrap_or_else(|| panic!("{}: a rule without verbs", path.display())),
            );
            for group in &groups {
                for resource in &resources {
                    rules
                        .entry((group.clone(), resource.clone()))
                        .or_default()
                        .extend(verbs.iter().cloned());
                }
            }
        }
    }
    assert!(rules.len() >= 10, "{} rules read from {dir}", rules.len());
    rules
}

/// Every router's rule (its API group and resource, with
/// `controller::router::VERBS`) is in the chart: adding a router fails here
/// until the chart grants it.
#[test]
fn chart_grants_every_router() {
    use crate::controller::router::Dispatch as _;
    let code = chart_rules();
    for kind in crate::api::RouterKind::ALL {
        let key = kind.rbac();
        let want: BTreeSet<String> = crate::controller::router::VERBS
            .iter()
            .map(|v| (*v).to_string())
            .collect();
        assert_eq!(
            code.get(&key),
            Some(&want),
            "charts/releaseplan/templates/_helpers.tpl: the rule for the {} router ({key:?})",
            kind.kind()
        );
    }
}

#[test]
fn chart_readme_rbac_table_is_the_templates_rules() {
    let readme = read("charts/releaseplan/README.md");
    let split = |cell: &str| -> Vec<String> {
        cell.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let mut documented = Rules::new();
    for row in rows(section(&readme, "### RBAC")) {
        if row.len() < 3 {
            continue;
        }
        // `"" (core)` is the core group.
        let group = if row[0].starts_with("\"\"") {
            String::new()
        } else {
            row[0].clone()
        };
        for resource in split(&row[1]) {
            documented
                .entry((group.clone(), resource))
                .or_default()
                .extend(split(&row[2]));
        }
    }
    let code = chart_rules();
    let (missing, unknown) = differences(code.keys(), documented.keys());
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "charts/releaseplan/README.md's RBAC table differs from the templates' rules: \
         granted but not in the table: {missing:?}; in the table but not granted: {unknown:?}"
    );
    for (key, verbs) in &code {
        assert_eq!(
            &documented[key], verbs,
            "charts/releaseplan/README.md: the verbs on {key:?}"
        );
    }
}

/// Every `.rs` file's text under `dir` (relative to the repository).
fn sources(dir: &str) -> String {
    fn walk(path: &std::path::Path, out: &mut String) {
        for entry in std::fs::read_dir(path).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut out = String::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir),
        &mut out,
    );
    out
}

#[test]
fn security_table_names_real_flags_values_and_tests() {
    // docs/security.md's table of what a tenant gains and what limits it:
    // each flag it names is the operator's, with the default it gives; each
    // chart value exists; each test it cites as proof exists.
    let doc = read("docs/security.md");
    let table = rows(section(
        &doc,
        "## What a plan author gains through the operator, and what limits it",
    ));
    assert!(table.len() >= 10, "the table: {table:?}");
    let flags = operator_flags();
    let values: yaml_serde::Value =
        yaml_serde::from_str(&read("charts/releaseplan/values.yaml")).unwrap();
    let code = [sources("src"), sources("crates"), sources("tests")].concat();
    let (mut flags_seen, mut values_seen, mut tests_seen) = (0, 0, 0);
    for row in &table {
        let text = row.join(" | ");
        for token in backticked(&text) {
            if let Some(flag) = token.strip_prefix("--") {
                let name = flag.split('=').next().unwrap_or_default();
                let f = flags
                    .iter()
                    .find(|f| f.long == name)
                    .unwrap_or_else(|| panic!("docs/security.md names --{name}, no operator flag"));
                flags_seen += 1;
                // "`--flag` (8)": the default it gives is the code's.
                let after = &text[text.find(&format!("`{token}`")).unwrap() + token.len() + 2..];
                if let Some(given) = after.strip_prefix(" (")
                    && let Some(default) = &f.default
                {
                    let given: String = given.chars().take_while(char::is_ascii_digit).collect();
                    if !given.is_empty() && given.len() == default.len() {
                        assert_eq!(&given, default, "docs/security.md: default of --{name}");
                    }
                }
            } else if token.contains('.')
                && !token.contains(['/', ' ', '('])
                && let Some(top) = token.split('.').next()
                && values.get(top).is_some()
            {
                // A chart value (`gates.budget.*`: its parent).
                let path = token.trim_end_matches(".*");
                let found = path.split('.').try_fold(&values, |v, key| v.get(key));
                assert!(
                    found.is_some(),
                    "docs/security.md names chart value {token}, not in values.yaml"
                );
                values_seen += 1;
            } else if token.matches('_').count() >= 3
                && token
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                assert!(
                    code.contains(&format!("fn {token}(")),
                    "docs/security.md cites test {token}, which does not exist"
                );
                tests_seen += 1;
            }
        }
    }
    assert!(
        flags_seen >= 5 && values_seen >= 3 && tests_seen >= 5,
        "flags {flags_seen}, values {values_seen}, tests {tests_seen}"
    );
}

/// Each kind the controller caches for plans
/// ([`crate::controller::kinds::OWNED_KINDS`]) is watched in `run.rs`,
/// wakes its plan, is waited for by `caches_synced`, counted by the size
/// gauges, granted list and watch by the chart, and named in the docs'
/// lists of caches; and `run.rs` watches no plan-labelled kind the table
/// lacks.
#[test]
fn every_owned_kind_is_watched_cached_granted_and_documented() {
    use crate::controller::kinds::OWNED_KINDS;
    let run = read("src/controller/run.rs");
    let context = read("src/controller/context.rs");
    let sweep = read("src/controller/sweep.rs");
    let ops = read("docs/operations.md");
    let rules = chart_rules();
    let cached_row = ops
        .lines()
        .find(|l| l.starts_with("| `releaseplan_cached_objects`"))
        .expect("the releaseplan_cached_objects row of docs/operations.md");
    let mut problems = Vec::new();
    for k in OWNED_KINDS {
        let watch = format!("let ({}, ", k.cache);
        if !run
            .lines()
            .any(|l| l.contains(&watch) && l.contains("owned.watch("))
        {
            problems.push(format!(
                "{}: no `{watch}… = owned.watch(…)` in run.rs",
                k.plural
            ));
        }
        if !run.contains(&format!("WakeSource::{:?}", k.wakes)) {
            problems.push(format!(
                "{}: run.rs never wakes a plan as {:?}",
                k.plural, k.wakes
            ));
        }
        if !context.contains(&format!("self.{}.synced()", k.cache)) {
            problems.push(format!("{}: caches_synced does not wait for it", k.plural));
        }
        if !sweep.contains(&format!("ctx.{}.len()", k.cache)) {
            problems.push(format!("{}: sweep.rs has no size gauge for it", k.plural));
        }
        let verbs = rules.get(&(k.group.to_string(), k.plural.to_string()));
        if !verbs.is_some_and(|v| v.contains("list") && v.contains("watch")) {
            problems.push(format!(
                "{}: the chart does not grant list and watch",
                k.plural
            ));
        }
        if !cached_row.contains(&format!("`{}`", k.plural)) {
            problems.push(format!(
                "{}: docs/operations.md's releaseplan_cached_objects row does not name it",
                k.plural
            ));
        }
    }
    for line in run.lines().filter(|l| l.contains("owned.watch(")) {
        let Some(var) = line
            .trim()
            .strip_prefix("let (")
            .and_then(|l| l.split(',').next())
        else {
            continue;
        };
        if !OWNED_KINDS.iter().any(|k| k.cache == var) {
            problems.push(format!(
                "run.rs watches `{var}`, which src/controller/kinds.rs does not list"
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn api_event_actions_table_is_the_code() {
    let doc = read("docs/api.md");
    let table: Vec<(String, String)> = rows(section(&doc, "## Event actions"))
        .into_iter()
        .map(|r| {
            (
                r[0].trim_matches('`').to_string(),
                r[1].trim_matches('`').to_string(),
            )
        })
        .collect();
    let code: Vec<(String, String)> = EventReason::ALL
        .iter()
        .map(|r| (r.as_str().to_string(), r.action().to_string()))
        .collect();
    assert_eq!(
        table, code,
        "docs/api.md's Event actions table differs from EventReason::action"
    );
}
